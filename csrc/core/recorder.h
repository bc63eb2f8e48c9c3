// Per-thread, pre-allocated, lock-free append-only recorder of fixed-size records.
// The owning thread is the only writer of its buffer; drain() runs after stop().
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/causes.h"
#include "core/clock.h"

namespace warmprof::recorder {

struct Record {
  uint64_t ticks;
  int64_t value;
  uint32_t name;
  uint8_t kind;
  uint8_t cause;
  uint16_t thread;  // small index of the recording thread (registration order)
};
static_assert(sizeof(Record) == 24, "records are 24 bytes");

struct ThreadBuffer {
  Record* records = nullptr;
  size_t capacity = 0;
  std::atomic<size_t> count{0};
  std::atomic<uint64_t> dropped{0};
  std::atomic<uint64_t> generation{0};
  std::atomic<bool> owner_alive{true};
  uint16_t index = 0;
  uint64_t os_tid = 0;
};

extern std::atomic<bool> g_enabled;
extern std::atomic<uint64_t> g_generation;
extern std::atomic<uint32_t> g_name_count;  // interned names so far; ids below it are valid

ThreadBuffer* register_thread();  // slow path: first record of a thread in a generation

inline ThreadBuffer* this_thread_buffer() {
  static thread_local ThreadBuffer* tb = nullptr;
  if (__builtin_expect(tb == nullptr ||
                       tb->generation.load(std::memory_order_relaxed) !=
                           g_generation.load(std::memory_order_relaxed), 0)) {
    tb = register_thread();
  }
  return tb;
}

// Hot path: no locks, no syscalls, no allocation after the thread's first record.
inline bool append(uint8_t kind, uint8_t cause, uint32_t name, int64_t value, uint64_t ticks) {
  if (!g_enabled.load(std::memory_order_relaxed)) return false;
  ThreadBuffer* tb = this_thread_buffer();
  size_t n = tb->count.load(std::memory_order_relaxed);
  if (__builtin_expect(n >= tb->capacity, 0)) {
    tb->dropped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  Record& r = tb->records[n];
  r.ticks = ticks;
  r.value = value;
  r.name = name;
  r.kind = kind;
  r.cause = cause;
  r.thread = tb->index;
  tb->count.store(n + 1, std::memory_order_release);
  return true;
}

inline bool record(uint8_t kind, uint8_t cause, uint32_t name, int64_t value) {
  return append(kind, cause, name, value, clock::ticks());
}

// Cold API.
void set_capacity(size_t records_per_thread);  // applies to buffers created after the call
size_t capacity();
void start();  // new generation: every thread starts from an empty buffer
void stop();
bool enabled();
uint32_t intern(const std::string& name);  // thread-safe; ids are stable for the process
std::vector<std::string> names();

struct Drained {
  std::vector<Record> records;  // sorted by ticks (stable: per-thread order kept)
  uint64_t dropped = 0;
  size_t threads = 0;
  std::vector<uint64_t> os_tids;  // by thread index
};
Drained drain();  // records of the current generation; call after stop()

// Native span loop, for the benchmark of the C++-side cost per span.
double cpp_span_cost_ns(uint32_t name, int iterations);

}  // namespace warmprof::recorder

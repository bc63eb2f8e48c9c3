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

// One open module call on a thread, and whether its records were taken (a thinned call's exit
// must not be recorded either).
struct ModuleFrame {
  uint32_t name;
  uint32_t recorded;
};
constexpr uint32_t kMaxModuleDepth = 256;

struct ThreadBuffer {
  Record* records = nullptr;  // an anonymous mapping of `capacity` records
  size_t capacity = 0;
  std::atomic<size_t> count{0};
  std::atomic<uint64_t> dropped{0};   // records lost because the buffer was full
  std::atomic<uint64_t> thinned{0};   // module calls not recorded (module budget spent)
  std::atomic<uint64_t> generation{0};
  std::atomic<bool> owner_alive{true};
  // Module records (thinnable) are taken while count stays below these: all modules below
  // `limit_fine`, coarse modules below `limit_coarse`. Everything above is the reserve, kept for
  // pass boundaries, cause spans, counters and the exits of module calls already recorded.
  std::atomic<size_t> limit_fine{0};    // written by begin_section (any thread), read by the owner
  std::atomic<size_t> limit_coarse{0};
  size_t touched = 0;  // records whose pages were faulted in before the recording (pre-faulted)
  uint16_t index = 0;
  uint64_t os_tid = 0;
  // Open module calls of the owning thread (only it reads or writes them).
  ModuleFrame frames[kMaxModuleDepth];
  uint32_t depth = 0;
  uint32_t lost_depth = 0;  // calls deeper than kMaxModuleDepth: never recorded
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

// The calling thread's buffer, registered now if it has none in this generation (the slow path
// of its first record: a lock, and a pre-faulted spare buffer when one is free), and the slots of
// its next `records` records written once, so that a page not faulted in yet (a buffer made for a
// thread that found no spare) faults now. A callback that times a call (CUPTI) calls it before
// reading the clock: neither registration nor a first touch lands inside the span it records.
// The slots are past `count`, so nothing reads them until append() fills them.
inline void prepare_thread(size_t records = 2) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  ThreadBuffer* tb = this_thread_buffer();
  const size_t n = tb->count.load(std::memory_order_relaxed);
  for (size_t i = n; i < n + records && i < tb->capacity; ++i)
    *reinterpret_cast<volatile uint64_t*>(&tb->records[i].ticks) = 0;
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

// Module calls: the one thinnable kind of record. Each module call records a begin and an end,
// each with the host counters (4 records apiece). When a thread's module budget is spent, every
// thread steps down: from all modules (level 2) to coarse ones only (level 1), then none (0); an
// instant "warmprof:thinned" (value: the new level) marks the moment on the timeline.
extern std::atomic<int> g_module_level;
constexpr size_t kModuleRecords = 4;
bool module_admit(bool coarse);                   // may this module call be recorded?
void module_push(uint32_t name, bool recorded);   // the call opened (recorded or not)
bool module_pop(uint32_t name);                   // the call closed: was it recorded?

// Cold API.
// The most records a thread's buffer may hold (64 Mi records, 1.5 GiB of address space): a larger
// count's byte size wrapped (2**60 records mapped a few bytes, then the first write crashed).
constexpr size_t kMaxCapacity = size_t(1) << 26;
void set_capacity(size_t records_per_thread);  // applies to buffers created after the call; at most kMaxCapacity
size_t capacity();
size_t reserve_of(size_t capacity);  // records of each buffer kept back from module records
// New generation: every thread starts from an empty buffer. The calling thread's buffer and
// `spare_buffers` more are pre-faulted now, so threads that start recording inside a pass take
// pages that were touched before it (their first-touch faults are not charged to the model).
void start(size_t spare_buffers = 0);
void stop();
bool enabled();
// A section (one pass): module budgets are reset to an equal share of each buffer's room left
// for this and the `sections_left - 1` sections after it, and the module level back to 2.
void begin_section(size_t sections_left);
// Returns every buffer's pages to the system: a live thread's mapping stays (a late writer is harmless),
// an exited thread's mapping goes back whole. Call after stop() and drain(); the records are gone afterwards.
void release();
uint32_t intern(const std::string& name);  // thread-safe; ids are stable for the process
std::vector<std::string> names();

struct Drained {
  std::vector<Record> records;  // sorted by ticks (stable: per-thread order kept)
  uint64_t dropped = 0;
  uint64_t thinned = 0;
  // Pages of warmprof's buffers first touched while recording (one fault each), at the time of the
  // first record written to each page, so each pass can take out its own.
  std::vector<uint64_t> own_fault_ticks;
  size_t threads = 0;
  std::vector<uint64_t> os_tids;  // by thread index
};
Drained drain();  // records of the current generation; call after stop()

// Native span loop, for the benchmark of the C++-side cost per span.
double cpp_span_cost_ns(uint32_t name, int iterations);

}  // namespace warmprof::recorder

#include "core/recorder.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace warmprof::recorder {

std::atomic<bool> g_enabled{false};
std::atomic<uint64_t> g_generation{1};
std::atomic<uint32_t> g_name_count{0};

namespace {
std::mutex g_mu;                                   // registration, interning, drain: cold paths
std::vector<std::unique_ptr<ThreadBuffer>> g_buffers;
size_t g_capacity = size_t(1) << 18;               // 262144 records, 6 MiB per recording thread
std::vector<std::string> g_names;
std::unordered_map<std::string, uint32_t> g_name_ids;

// Marks the buffer free for reuse when its thread exits.
struct OwnerGuard {
  ThreadBuffer* tb = nullptr;
  ~OwnerGuard() {
    if (tb) tb->owner_alive.store(false, std::memory_order_release);
  }
};
thread_local OwnerGuard t_guard;

Record* alloc_prefaulted(size_t n) {
  auto* p = static_cast<Record*>(std::calloc(n, sizeof(Record)));
  if (!p) return nullptr;
  // Touch every page now so the hot path never takes a first-touch fault.
  volatile char* bytes = reinterpret_cast<volatile char*>(p);
  for (size_t off = 0; off < n * sizeof(Record); off += 4096) bytes[off] = 0;
  return p;
}
}  // namespace

ThreadBuffer* register_thread() {
  std::lock_guard<std::mutex> lock(g_mu);
  const uint64_t gen = g_generation.load(std::memory_order_relaxed);
  ThreadBuffer* tb = t_guard.tb;
  if (tb == nullptr) {
    // Reuse the buffer of a thread that has exited, else make a new one.
    for (auto& b : g_buffers) {
      if (!b->owner_alive.load(std::memory_order_acquire) &&
          b->generation.load(std::memory_order_relaxed) != gen) {
        tb = b.get();
        break;
      }
    }
    if (tb == nullptr) {
      auto b = std::make_unique<ThreadBuffer>();
      b->index = uint16_t(g_buffers.size());
      b->records = alloc_prefaulted(g_capacity);
      b->capacity = b->records ? g_capacity : 0;
      tb = b.get();
      g_buffers.push_back(std::move(b));
    }
    tb->owner_alive.store(true, std::memory_order_release);
    t_guard.tb = tb;
  }
  if (tb->generation.load(std::memory_order_relaxed) != gen) {
    tb->count.store(0, std::memory_order_relaxed);
    tb->dropped.store(0, std::memory_order_relaxed);
    tb->os_tid = uint64_t(syscall(SYS_gettid));
    tb->generation.store(gen, std::memory_order_release);
  }
  return tb;
}

void set_capacity(size_t n) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_capacity = n;
  // Buffers already made keep their size until their thread exits; new and reused
  // buffers of a different size are re-made here so the setting takes effect.
  // Called only between recordings (the binding refuses otherwise): records of the last
  // recording that were not drained are discarded with their buffer.
  for (auto& b : g_buffers) {
    if (b->capacity != n && !g_enabled.load()) {
      std::free(b->records);
      b->records = alloc_prefaulted(n);
      b->capacity = b->records ? n : 0;
      b->count.store(0);
    }
  }
}

size_t capacity() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_capacity;
}

void start() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_generation.fetch_add(1, std::memory_order_acq_rel);
  }
  clock::refine();
  register_thread();  // the starting thread's buffer is ready before the first record
  g_enabled.store(true, std::memory_order_release);
}

void stop() { g_enabled.store(false, std::memory_order_release); }
bool enabled() { return g_enabled.load(std::memory_order_acquire); }

uint32_t intern(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_name_ids.find(name);
  if (it != g_name_ids.end()) return it->second;
  uint32_t id = uint32_t(g_names.size());
  g_names.push_back(name);
  g_name_ids.emplace(name, id);
  g_name_count.store(id + 1, std::memory_order_release);
  return id;
}

std::vector<std::string> names() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_names;
}

Drained drain() {
  std::lock_guard<std::mutex> lock(g_mu);
  Drained out;
  const uint64_t gen = g_generation.load(std::memory_order_acquire);
  out.os_tids.assign(g_buffers.size(), 0);
  for (auto& b : g_buffers) {
    if (b->generation.load(std::memory_order_acquire) != gen) continue;
    size_t n = b->count.load(std::memory_order_acquire);
    out.records.insert(out.records.end(), b->records, b->records + n);
    out.dropped += b->dropped.load(std::memory_order_relaxed);
    out.os_tids[b->index] = b->os_tid;
    ++out.threads;
  }
  std::stable_sort(out.records.begin(), out.records.end(),
                   [](const Record& a, const Record& b) { return a.ticks < b.ticks; });
  return out;
}

double cpp_span_cost_ns(uint32_t name, int iterations) {
  // Runs in a recording of its own (it reuses this thread's buffer); the binding refuses to run
  // it while a recording is active, and a buffer under 2 records cannot hold a span.
  if (iterations <= 0 || enabled()) return 0.0;
  start();
  ThreadBuffer* tb = this_thread_buffer();
  if (tb->capacity < 2) {
    stop();
    return 0.0;
  }
  int done = 0;
  uint64_t t0 = clock::monotonic_ns();
  while (done < iterations) {
    // Stay inside the buffer: reset between chunks (outside the timed region's hot loop body).
    size_t room = (tb->capacity - tb->count.load()) / 2;
    if (room == 0) {
      tb->count.store(0);
      room = tb->capacity / 2;
    }
    int chunk = int(std::min<size_t>(room, size_t(iterations - done)));
    for (int i = 0; i < chunk; ++i) {
      record(kBegin, kStructure, name, 0);
      record(kEnd, kStructure, name, 0);
    }
    done += chunk;
  }
  uint64_t t1 = clock::monotonic_ns();
  tb->count.store(0);
  stop();
  return double(t1 - t0) / double(iterations);
}

}  // namespace warmprof::recorder

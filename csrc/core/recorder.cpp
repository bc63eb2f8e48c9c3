#include "core/recorder.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/os.h"

namespace warmprof::recorder {

std::atomic<bool> g_enabled{false};
std::atomic<uint64_t> g_generation{1};
std::atomic<uint32_t> g_name_count{0};
std::atomic<int> g_module_level{2};

namespace {
std::mutex g_mu;                                   // registration, interning, drain: cold paths
std::vector<std::unique_ptr<ThreadBuffer>> g_buffers;
size_t g_capacity = size_t(1) << 18;               // 262144 records, 6 MiB per recording thread
size_t g_sections_left = 1;
std::vector<std::string> g_names;
std::unordered_map<std::string, uint32_t> g_name_ids;
std::atomic<uint32_t> g_thinned_name{UINT32_MAX};

void owner_exited(ThreadBuffer* tb);

// Marks the buffer free for reuse when its thread exits, and gives back what of it nobody will read.
struct OwnerGuard {
  ThreadBuffer* tb = nullptr;
  ~OwnerGuard() {
    if (tb) owner_exited(tb);
  }
};
thread_local OwnerGuard t_guard;

size_t page_bytes() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096);
  return p;
}

size_t pages_of(size_t records) { return (records * sizeof(Record) + page_bytes() - 1) / page_bytes(); }

// An anonymous mapping, not touched: pages are faulted in by prefault() before a recording, or
// by the hot path (counted as warmprof's own faults at drain).
// Not inherited by a fork: a child never writes into (or copies on write) the parent's buffers;
// the atfork handler below turns recording off in the child.
Record* map_records(size_t n) {
  if (n == 0 || n > kMaxCapacity) return nullptr;  // never a byte count that wraps
  void* p = mmap(nullptr, n * sizeof(Record), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
#ifdef MADV_DONTFORK  // Linux; elsewhere a fork while recording is what the atfork handler guards
  madvise(p, n * sizeof(Record), MADV_DONTFORK);
#endif
  return static_cast<Record*>(p);
}

// A buffer of another size: the old mapping's pages are given back but the mapping itself is
// never unmapped, so a thread that read g_enabled just before stop() and writes late cannot
// crash (set_capacity is a between-recordings, test-time setting: the address space is cheap).
// A buffer whose thread exited (unmap_old) has no late writer: its old mapping goes back whole (it may
// be the few pages owner_exited kept).
void remap(ThreadBuffer* b, size_t n, bool unmap_old = false) {
  if (b->records && unmap_old) munmap(b->records, b->capacity * sizeof(Record));
  else if (b->records) madvise(b->records, b->capacity * sizeof(Record), MADV_DONTNEED);
  b->records = map_records(n);
  b->capacity = b->records ? n : 0;
  b->touched = 0;
}

void prefault(ThreadBuffer* b) {
  if (b->touched >= b->capacity) return;
  volatile char* bytes = reinterpret_cast<volatile char*>(b->records);
  for (size_t off = 0; off < b->capacity * sizeof(Record); off += page_bytes()) bytes[off] = 0;
  b->touched = b->capacity;
}

ThreadBuffer* new_buffer() {  // under g_mu
  auto b = std::make_unique<ThreadBuffer>();
  b->index = uint16_t(g_buffers.size());
  b->owner_alive.store(false, std::memory_order_relaxed);
  remap(b.get(), g_capacity);
  g_buffers.push_back(std::move(b));
  return g_buffers.back().get();
}

// The buffer's thread is exiting: nothing writes into it again (its owner is its only writer). Its
// records of this generation are still to be drained, so the pages that hold them stay; the rest of
// the mapping goes back now, not at the recording's end (release): a model that starts 100 fresh
// threads on every call would otherwise reserve 6 MiB of address space per thread per pass within one
// recording, and under an address-space limit (ulimit -v) its next thread could not get a stack.
// Records of an older generation were drained already: the whole mapping goes.
void owner_exited(ThreadBuffer* tb) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (tb->records != nullptr) {
    const bool current = tb->generation.load(std::memory_order_relaxed) == g_generation.load(std::memory_order_relaxed);
    const size_t keep_pages = current ? pages_of(tb->count.load(std::memory_order_relaxed)) : 0;
    const size_t mapped_pages = pages_of(tb->capacity);
    if (keep_pages < mapped_pages) {
      char* base = reinterpret_cast<char*>(tb->records);
      munmap(base + keep_pages * page_bytes(), (mapped_pages - keep_pages) * page_bytes());
      // Whole records inside the pages kept (a late record is then dropped, never written outside).
      tb->capacity = keep_pages * page_bytes() / sizeof(Record);
      if (keep_pages == 0) tb->records = nullptr;
      tb->touched = std::min(tb->touched, tb->capacity);
    }
  }
  tb->owner_alive.store(false, std::memory_order_release);
}

bool is_free(const ThreadBuffer& b, uint64_t gen) {
  return !b.owner_alive.load(std::memory_order_acquire) && b.generation.load(std::memory_order_relaxed) != gen;
}

void set_limits(ThreadBuffer* b, size_t base) {  // under g_mu
  const size_t reserve = reserve_of(b->capacity);
  const size_t usable = b->capacity > reserve ? b->capacity - reserve : 0;
  const size_t share = (usable > base ? usable - base : 0) / (g_sections_left ? g_sections_left : 1);
  b->limit_coarse.store(base + share, std::memory_order_relaxed);
  b->limit_fine.store(base + share - share / 4, std::memory_order_relaxed);
}

// A buffer for a thread starting to record in this generation: a pre-faulted free one before its
// own un-faulted one, so a thread that starts inside a pass takes no fault on warmprof's account.
ThreadBuffer* pick_buffer(ThreadBuffer* own, uint64_t gen) {  // under g_mu
  if (own && own->touched >= own->capacity) return own;
  for (auto& b : g_buffers) {
    if (b.get() != own && is_free(*b, gen) && b->capacity == g_capacity && b->touched >= b->capacity) {
      if (own) own->owner_alive.store(false, std::memory_order_release);
      return b.get();
    }
  }
  if (own) return own;
  for (auto& b : g_buffers)
    if (is_free(*b, gen)) return b.get();
  return new_buffer();
}

// fork while recording: the child has no buffers (MADV_DONTFORK) and must not record; the lock
// is taken across the fork so the child never inherits it held by a thread it does not have.
void atfork_prepare() { g_mu.lock(); }
void atfork_parent() { g_mu.unlock(); }
void atfork_child() {
  g_enabled.store(false, std::memory_order_relaxed);
  for (auto& b : g_buffers) {
    b->records = nullptr;
    b->capacity = 0;
    b->touched = 0;
    b->count.store(0, std::memory_order_relaxed);
    b->generation.store(0, std::memory_order_relaxed);
    b->owner_alive.store(false, std::memory_order_relaxed);
  }
  g_mu.unlock();
}
const bool g_atfork = [] { return pthread_atfork(atfork_prepare, atfork_parent, atfork_child) == 0; }();

uint32_t thinned_name() {
  uint32_t id = g_thinned_name.load(std::memory_order_acquire);
  if (id == UINT32_MAX) {
    id = intern("warmprof:thinned");
    g_thinned_name.store(id, std::memory_order_release);
  }
  return id;
}
}  // namespace

size_t reserve_of(size_t capacity) { return std::max(capacity / 8, std::min<size_t>(capacity / 2, 64)); }

ThreadBuffer* register_thread() {
  std::lock_guard<std::mutex> lock(g_mu);
  const uint64_t gen = g_generation.load(std::memory_order_relaxed);
  ThreadBuffer* tb = t_guard.tb;
  bool taken_over = false;  // a free buffer of a thread that exited: nobody writes into its old mapping
  if (tb == nullptr || tb->generation.load(std::memory_order_relaxed) != gen) {
    ThreadBuffer* picked = pick_buffer(tb, gen);
    taken_over = picked != tb;
    tb = picked;
    tb->owner_alive.store(true, std::memory_order_release);
    t_guard.tb = tb;
  }
  if (tb->records == nullptr || tb->capacity != g_capacity) remap(tb, g_capacity, taken_over);  // e.g. after a fork
  if (tb->generation.load(std::memory_order_relaxed) != gen) {
    tb->count.store(0, std::memory_order_relaxed);
    tb->dropped.store(0, std::memory_order_relaxed);
    tb->thinned.store(0, std::memory_order_relaxed);
    tb->depth = 0;
    tb->lost_depth = 0;
    set_limits(tb, 0);
    tb->os_tid = os::thread_id();
    tb->generation.store(gen, std::memory_order_release);
  }
  return tb;
}

bool module_admit(bool coarse) {
  if (!g_enabled.load(std::memory_order_relaxed)) return false;
  ThreadBuffer* tb = this_thread_buffer();
  if (tb->depth >= kMaxModuleDepth) {  // deeper than any frame can be kept: counted as thinned
    tb->thinned.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  for (;;) {
    int level = g_module_level.load(std::memory_order_relaxed);
    if (level < (coarse ? 1 : 2)) break;
    const size_t limit = (level == 2 ? tb->limit_fine : tb->limit_coarse).load(std::memory_order_relaxed);
    if (tb->count.load(std::memory_order_relaxed) + kModuleRecords <= limit) return true;
    // This thread's budget for the level is spent: every thread steps down, once.
    if (g_module_level.compare_exchange_strong(level, level - 1, std::memory_order_acq_rel))
      append(kInstant, kStructure, thinned_name(), level - 1, clock::ticks());
  }
  tb->thinned.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void module_push(uint32_t name, bool recorded) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  ThreadBuffer* tb = this_thread_buffer();
  if (tb->depth >= kMaxModuleDepth) {
    ++tb->lost_depth;
    return;
  }
  tb->frames[tb->depth++] = ModuleFrame{name, recorded ? 1u : 0u};
}

bool module_pop(uint32_t name) {
  if (!g_enabled.load(std::memory_order_relaxed)) return false;
  ThreadBuffer* tb = this_thread_buffer();
  if (tb->lost_depth > 0) {
    --tb->lost_depth;
    return false;
  }
  // The innermost open call of this module; frames above it never closed (their module raised
  // and an outer one caught it): they are dropped with it.
  for (uint32_t j = tb->depth; j-- > 0;) {
    if (tb->frames[j].name == name) {
      tb->depth = j;
      return tb->frames[j].recorded != 0;
    }
  }
  return false;
}

void set_capacity(size_t n) {
  if (n == 0 || n > kMaxCapacity) return;  // the binding refuses these with a message
  std::lock_guard<std::mutex> lock(g_mu);
  g_capacity = n;
  // Buffers of a different size are re-made here so the setting takes effect. Called only
  // between recordings (the binding refuses otherwise): undrained records are discarded.
  for (auto& b : g_buffers) {
    if (b->capacity != n && !g_enabled.load()) {
      remap(b.get(), n);
      b->count.store(0);
    }
  }
}

size_t capacity() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_capacity;
}

void start(size_t spare_buffers) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_generation.fetch_add(1, std::memory_order_acq_rel);
    g_sections_left = 1;
    g_module_level.store(2, std::memory_order_relaxed);
  }
  clock::refine();
  ThreadBuffer* mine = register_thread();  // the starting thread's buffer is ready before the first record
  {
    std::lock_guard<std::mutex> lock(g_mu);
    prefault(mine);
    const uint64_t gen = g_generation.load(std::memory_order_relaxed);
    size_t ready = 0;
    for (auto& b : g_buffers)
      if (b.get() != mine && is_free(*b, gen) && b->capacity == g_capacity && b->touched >= b->capacity) ++ready;
    // Only free buffers are spares: a live thread that recorded before and records again swaps
    // its own un-faulted buffer for one of these (pick_buffer).
    for (auto& b : g_buffers) {
      if (ready >= spare_buffers) break;
      if (is_free(*b, gen) && (b->records == nullptr || b->touched < b->capacity)) {
        if (b->records == nullptr || b->capacity != g_capacity) remap(b.get(), g_capacity, true);  // given back
        if (b->records == nullptr) continue;
        prefault(b.get());
        ++ready;
      }
    }
    while (ready < spare_buffers) {
      ThreadBuffer* b = new_buffer();
      if (!b->records) break;
      prefault(b);
      ++ready;
    }
  }
  g_enabled.store(true, std::memory_order_release);
}

void stop() { g_enabled.store(false, std::memory_order_release); }
bool enabled() { return g_enabled.load(std::memory_order_acquire); }

void begin_section(size_t sections_left) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_sections_left = sections_left ? sections_left : 1;
  const uint64_t gen = g_generation.load(std::memory_order_relaxed);
  for (auto& b : g_buffers)
    if (b->generation.load(std::memory_order_acquire) == gen) set_limits(b.get(), b->count.load());
  g_module_level.store(2, std::memory_order_release);
}

void release() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto& b : g_buffers) {
    if (b->records && !b->owner_alive.load(std::memory_order_acquire)) {
      // Its thread has exited (or never recorded since a fork): nobody can write into it, so the mapping
      // itself goes back, not only its pages: a model that starts fresh threads on each call would
      // otherwise keep 6 MiB of address space per thread it ever started. A thread that records later
      // maps a buffer again (register_thread, or start() for a spare).
      munmap(b->records, b->capacity * sizeof(Record));
      b->records = nullptr;
      b->capacity = 0;
    } else if (b->records) {
      // A live thread's: pages go back to the system; the mapping stays, so a thread that read g_enabled
      // just before stop() and writes late only faults in a zero page of a generation nobody reads.
      madvise(b->records, b->capacity * sizeof(Record), MADV_DONTNEED);
    }
    b->touched = 0;
    b->count.store(0, std::memory_order_relaxed);
  }
}

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
    out.thinned += b->thinned.load(std::memory_order_relaxed);
    // Pages past the pre-faulted part were first touched by the hot path: one fault each, at
    // the time of the first record on the page.
    for (size_t page = pages_of(std::min(b->touched, n)); page < pages_of(n); ++page) {
      const size_t first = (page * page_bytes() + sizeof(Record) - 1) / sizeof(Record);
      if (first >= n) break;
      out.own_fault_ticks.push_back(b->records[first].ticks);
    }
    out.os_tids[b->index] = b->os_tid;
    ++out.threads;
  }
  std::sort(out.own_fault_ticks.begin(), out.own_fault_ticks.end());
#ifndef WARMPROF_PLANT_BUG_RECORDER  // planted bug, defined only by tests/cross/run_aarch64.sh: no sort
  std::stable_sort(out.records.begin(), out.records.end(),
                   [](const Record& a, const Record& b) { return a.ticks < b.ticks; });
#endif
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

#include "backends/cupti_handler.h"

#include <cupti.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "backends/cuda_image.h"
#include "backends/cupti.h"
#include "core/causes.h"
#include "core/clock.h"
#include "core/recorder.h"

namespace warmprof::backends::cupti::handler {

namespace {

using table::Entry;
using table::Family;

constexpr int kMaxDepth = 16;  // calls nest only through callbacks-inside-calls; 16 is ample

struct Frame {
  uint32_t domain;
  uint32_t cbid;
  uint64_t ticks;
  int64_t value;
  table::Op op;
  uint8_t cause;       // the cause its records carry (a load's follows its image)
  uint8_t load_cause;  // a module was loaded inside: its cause (jit_compile wins); 0 = none
  bool muted;          // a driver call inside a runtime call of the same operation: not counted again
  bool first;          // launches: the kernel's first launch
  bool inner_alloc;    // async allocations: an allocation that counts bytes happened inside
  bool orphan_end;     // EndCapture with no capture opened on this thread: timed as its own span
};

struct ThreadState {
  uint64_t generation = 0;
  uint64_t epoch = 0;  // the subscription it belongs to (new_epoch())
  Frame frames[kMaxDepth];
  int depth = 0;
  int overflow = 0;  // calls past kMaxDepth: counted, not recorded
  int captures_open = 0;
};

std::atomic<int64_t> g_callbacks{0};
std::atomic<int64_t> g_launches{0};
std::atomic<int64_t> g_pool_hits{0};
std::atomic<int64_t> g_untracked{0};
std::atomic<uint64_t> g_epoch{0};  // bumped when a subscription starts or ends

// --- first-seen kernels: a fixed open-addressing set (process lifetime, so "first seen" survives
// stop/start), lock-free; inserts stop at half full, after which launches are not flagged. ------
constexpr uint32_t kSeenSlots = 1u << 16;
constexpr uint32_t kSeenMax = kSeenSlots / 2;
std::atomic<uintptr_t> g_seen[kSeenSlots];
std::atomic<uint32_t> g_seen_count{0};

enum class Seen { kNew, kKnown, kFull };

Seen see(uintptr_t kernel) {
  uint64_t h = uint64_t(kernel) * 0x9E3779B97F4A7C15ull;  // Fibonacci hashing: pointers differ in low bits
  uint32_t i = uint32_t(h >> 48) & (kSeenSlots - 1);
  for (uint32_t probe = 0; probe < kSeenSlots; ++probe, i = (i + 1) & (kSeenSlots - 1)) {
    uintptr_t cur = g_seen[i].load(std::memory_order_acquire);
    if (cur == kernel) return Seen::kKnown;
    if (cur != 0) continue;
    if (g_seen_count.load(std::memory_order_relaxed) >= kSeenMax) return Seen::kFull;
    if (g_seen[i].compare_exchange_strong(cur, kernel, std::memory_order_acq_rel)) {
      g_seen_count.fetch_add(1, std::memory_order_relaxed);
      return Seen::kNew;
    }
    if (cur == kernel) return Seen::kKnown;  // another thread inserted it first
  }
  return Seen::kFull;
}

// --- names of kernels first seen since reset: fixed slots and a fixed byte arena. --------------
constexpr uint32_t kMaxNames = 1u << 14;
constexpr uint32_t kNameBytes = 1u << 20;
constexpr size_t kMaxNameLen = 1024;  // longer (templated) names are cut
struct NameSlot {
  std::atomic<uint32_t> ready;
  uint32_t offset;
  uint32_t len;
  uintptr_t kernel;
};
NameSlot g_names[kMaxNames];
char g_name_bytes[kNameBytes];
std::atomic<uint32_t> g_new{0};        // kernels first seen since reset (may exceed kMaxNames)
std::atomic<uint32_t> g_name_used{0};  // arena bytes taken

void remember(uintptr_t kernel, const char* name) {
  const uint32_t i = g_new.fetch_add(1, std::memory_order_relaxed);
  if (i >= kMaxNames) return;
  uint32_t len = name ? uint32_t(strnlen(name, kMaxNameLen)) : 0;
  uint32_t off = len ? g_name_used.fetch_add(len, std::memory_order_relaxed) : 0;
  if (len && (off > kNameBytes || len > kNameBytes - off)) len = 0;  // arena spent: named by id
  if (len) std::memcpy(g_name_bytes + off, name, len);
  NameSlot& s = g_names[i];
  s.offset = off;
  s.len = len;
  s.kernel = kernel;
  s.ready.store(1, std::memory_order_release);
}

// A kernel unknown to the decoder (0) is never flagged: it cannot be told apart from another.
bool first_seen(uintptr_t kernel, const char* name) {
  if (kernel == 0) return false;
  switch (see(kernel)) {
    case Seen::kNew:
      remember(kernel, name);
      return true;
    case Seen::kFull:
      g_untracked.fetch_add(1, std::memory_order_relaxed);
      return false;
    default: return false;
  }
}

template <typename T, size_t N>
void fault_in(T (&array)[N], void (*touch)(T&)) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096);
  const size_t per_page = page / sizeof(T) ? page / sizeof(T) : 1;
  for (size_t i = 0; i < N; i += per_page) touch(array[i]);
}

// --- per-thread state --------------------------------------------------------------------------

// A thread's open calls belong to one recording generation and one subscription: a subscription
// that ended mid-call (a watcher closed while a launch was open) never delivers that call's exit,
// and a frame left open would absorb every later call of its operation on the thread.
ThreadState& state() {
  static thread_local ThreadState s;
  const uint64_t gen = recorder::g_generation.load(std::memory_order_relaxed);
  const uint64_t epoch = g_epoch.load(std::memory_order_relaxed);
  if (s.generation != gen || s.epoch != epoch) {
    s.generation = gen;
    s.epoch = epoch;
    s.depth = 0;
    s.overflow = 0;
    s.captures_open = 0;
  }
  return s;
}

// --- the per-thread tally watch reads (cupti.h CallTally) ---------------------------------------
// Every cause span is booked when it closes; a span that closes around spans already booked (a
// stream capture around allocations, a launch written at its exit around the module load it
// triggered) takes them back, so each outermost call counts once. The last kRing booked spans are
// kept, with their times, for that. A span whose end never comes (a capture ended on another
// thread) holds nothing back: it only ages out of the small table of open spans.
struct TallyState {
  struct Open {
    uint8_t cause;
    uint32_t name;
    uint64_t ticks;
  };
  struct Booked {
    uint64_t begin, end;
    int64_t ns, bytes;
    uint8_t cause;
    bool live;
  };
  static constexpr int kRing = 32;
  CallTally tally;
  Open open[kMaxDepth];
  int depth = 0;
  Booked ring[kRing] = {};
  int next = 0;
};

TallyState& tally_state() {
  static thread_local TallyState t;
  return t;
}

void book(TallyState& t, uint8_t cause, uint64_t begin, uint64_t end, int64_t bytes) {
  CallTally& c = t.tally;
  for (TallyState::Booked& b : t.ring) {
    if (!b.live || b.begin < begin || b.end > end) continue;
    b.live = false;  // inside this one: this one's time holds it
    c.spans[b.cause] -= 1;
    c.ns[b.cause] -= b.ns;
    c.bytes[b.cause] -= b.bytes;
  }
  const int64_t ns = end > begin ? clock::to_ns(end) - clock::to_ns(begin) : 0;
  c.spans[cause] += 1;
  c.ns[cause] += ns;
  c.bytes[cause] += bytes;
  t.ring[t.next] = TallyState::Booked{begin, end, ns, bytes, cause, true};
  t.next = (t.next + 1) % TallyState::kRing;
  c.seq += 1;
}

void tally(uint8_t kind, uint8_t cause, uint32_t name, int64_t value, uint64_t ticks) {
  if (cause == kStructure || cause >= CallTally::kCauses) return;
  TallyState& t = tally_state();
  if (kind == kBegin) {
    if (t.depth == kMaxDepth) {  // full of spans whose end never came: the oldest goes
      std::copy(t.open + 1, t.open + kMaxDepth, t.open);
      --t.depth;
    }
    t.open[t.depth++] = TallyState::Open{cause, name, ticks};
    return;
  }
  if (kind != kEnd) return;
  for (int i = t.depth - 1; i >= 0; --i) {
    if (t.open[i].name != name || t.open[i].cause != cause) continue;
    const uint64_t begin = t.open[i].ticks;
    std::copy(t.open + i + 1, t.open + t.depth, t.open + i);
    --t.depth;
    // bytes: an allocation's or a copy's; a launch's value marks its first launch, a load's is none
    const bool counts_bytes = cause == kAllocatorGrowth || cause == kDataTransfer;
    book(t, cause, begin, ticks, counts_bytes && value > 0 ? value : 0);
    return;
  }
}

std::atomic<bool> g_to_recorder{true};

void emit(uint8_t kind, uint8_t cause, uint32_t name, int64_t value, uint64_t ticks) {
  tally(kind, cause, name, value, ticks);
  if (g_to_recorder.load(std::memory_order_relaxed)) recorder::append(kind, cause, name, value, ticks);
}

Frame* push(ThreadState& s, const Entry& en, const Event& e, uint8_t cause) {
  if (s.depth == kMaxDepth) {
    ++s.overflow;
    return nullptr;
  }
  Frame& f = s.frames[s.depth++];
  f = Frame{en.domain, en.cbid, e.ticks, e.value, en.op, cause, 0, false, false, false, false};
  return &f;
}

// The frame this exit closes, popped (frames above it never closed: dropped with it); nullptr for
// an exit whose enter was not seen (subscribed mid-call). Overflowed calls are settled in absorb().
const Frame* pop(ThreadState& s, const Entry& en) {
  for (int i = s.depth - 1; i >= 0; --i) {
    if (s.frames[i].cbid == en.cbid && s.frames[i].domain == en.domain) {
      s.depth = i;
      return &s.frames[i];
    }
  }
  return nullptr;
}

// Whether a call of `op` is open on the thread, in either domain: a call of the same operation
// inside it is its implementation (the driver's inside the runtime's, cudaLaunchKernel inside
// nvcc 13's __cudaLaunchKernel, one driver entry inside another).
bool same_op_open(const ThreadState& s, table::Op op) {
  for (int i = 0; i < s.depth; ++i)
    if (s.frames[i].op == op && !s.frames[i].muted) return true;
  return false;
}

uint8_t load_cause(uint8_t image) {
  return cuda_image::jit(cuda_image::Kind(image)) ? kJitCompile : kRuntimeInit;
}

// A module was loaded: every open call learns it (launches read it: a lazy load).
void mark_loaded(ThreadState& s, uint8_t cause) {
  for (int i = 0; i < s.depth; ++i)
    if (s.frames[i].load_cause == 0 || cause == kJitCompile) s.frames[i].load_cause = cause;
}

void mark_inner_alloc(ThreadState& s) {
  for (int i = 0; i < s.depth; ++i) s.frames[i].inner_alloc = true;
}

void on_span(ThreadState& s, const Entry& en, const Event& e, uint8_t cause) {
  const int64_t value = en.bytes ? e.value : 0;
  if (e.enter) {
    if (en.family == Family::kAlloc && en.bytes) mark_inner_alloc(s);
    if (Frame* f = push(s, en, e, cause)) {
      f->value = value;
      emit(kBegin, cause, en.name_id, value, e.ticks);
    }
  } else if (const Frame* f = pop(s, en)) {
    emit(kEnd, f->cause, en.name_id, f->value, e.ticks);
  }
}

void on_load(ThreadState& s, const Entry& en, const Event& e) {
  const uint8_t cause = load_cause(e.image);
  if (e.enter) mark_loaded(s, cause);
  on_span(s, en, e, cause);
}

void on_launch(ThreadState& s, const Entry& en, const Event& e) {
  if (e.enter) {
    g_launches.fetch_add(1, std::memory_order_relaxed);
    const bool first = first_seen(e.kernel, e.kernel_name);
    if (Frame* f = push(s, en, e, kStructure)) f->first = first;
    return;
  }
  const Frame* f = pop(s, en);
  if (f == nullptr || (!f->first && f->load_cause == 0)) return;  // a repeat launch: counted only
  const uint8_t cause = f->load_cause ? f->load_cause : uint8_t(kStructure);
  const uint32_t name = f->load_cause ? table::extra_names().lazy_load : en.name_id;
  const int64_t value = f->first ? 1 : 0;
  emit(kBegin, cause, name, value, f->ticks);
  emit(kEnd, cause, name, value, e.ticks);
}

// A query on one kernel (cudaFuncGetAttributes, an occupancy query, cudaGetKernel): with lazy
// loading the first one loads the kernel, outside any launch. Counted like a launch: a span
// (runtime_init, the call's name) for the first query of a kernel, a lazy load when a module was
// loaded inside, nothing for a repeat. A query whose kernel is unknown (0) is timed every time.
// Its first-seen key is apart from the launches' (salted), so a query does not hide a first launch.
constexpr uintptr_t kQuerySalt = uintptr_t(0x51E7C0DEB4D5A17Full);

void on_query(ThreadState& s, const Entry& en, const Event& e) {
  if (e.enter) {
    const bool first = e.kernel == 0 || see(e.kernel ^ kQuerySalt) == Seen::kNew;
    if (Frame* f = push(s, en, e, en.cause)) f->first = first;
    return;
  }
  const Frame* f = pop(s, en);
  if (f == nullptr || (!f->first && f->load_cause == 0)) return;
  const uint8_t cause = f->load_cause ? f->load_cause : en.cause;
  const uint32_t name = f->load_cause ? table::extra_names().lazy_load : en.name_id;
  emit(kBegin, cause, name, 0, f->ticks);
  emit(kEnd, cause, name, 0, e.ticks);
}

// A stream-ordered allocation served by its pool costs what a steady pass pays too: only a call
// in which the pool's reservation grew is growth. When an allocation that counts bytes happened
// inside (CUPTI reporting the pool's own cuMemCreate), that one holds the bytes and the time.
void on_alloc_async(ThreadState& s, const Entry& en, const Event& e) {
  if (e.enter) {
    push(s, en, e, en.cause);
    return;
  }
  const Frame* f = pop(s, en);
  if (f == nullptr) return;
  const int64_t growth = (f->value >= 0 && e.value >= 0) ? e.value - f->value : 0;
  if (growth <= 0) {
    g_pool_hits.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const int64_t value = f->inner_alloc ? 0 : growth;
  emit(kBegin, en.cause, en.name_id, value, f->ticks);
  emit(kEnd, en.cause, en.name_id, value, e.ticks);
}

void on_capture_begin(ThreadState& s, const Entry& en, const Event& e) {
  const uint32_t capture = table::extra_names().stream_capture;
  if (e.enter) {
    if (push(s, en, e, en.cause)) emit(kBegin, en.cause, capture, 0, e.ticks);
  } else if (pop(s, en)) {
    if (e.failed) {
      emit(kEnd, en.cause, capture, 0, e.ticks);
    } else {
      ++s.captures_open;
    }
  }
}

void on_capture_end(ThreadState& s, const Entry& en, const Event& e) {
  if (e.enter) {
    Frame* f = push(s, en, e, en.cause);
    if (f && s.captures_open == 0) {
      f->orphan_end = true;
      emit(kBegin, en.cause, en.name_id, 0, e.ticks);
    }
    return;
  }
  const Frame* f = pop(s, en);
  if (f == nullptr) return;
  if (f->orphan_end) {
    emit(kEnd, en.cause, en.name_id, 0, e.ticks);
  } else {
    --s.captures_open;
    emit(kEnd, en.cause, table::extra_names().stream_capture, 0, e.ticks);
  }
}

}  // namespace

void prepare_thread() {
  recorder::prepare_thread();
  (void)state();
}

bool absorb(const Entry& en, bool enter) {
  g_callbacks.fetch_add(1, std::memory_order_relaxed);
  ThreadState& s = state();
  if (enter) {
    if (en.op == table::Op::kResource || !same_op_open(s, en.op)) return false;
    if (Frame* f = push(s, en, Event{}, en.cause)) f->muted = true;
    return true;
  }
  if (s.overflow > 0) {  // the exit of a call past the depth limit
    --s.overflow;
    return true;
  }
  for (int i = s.depth - 1; i >= 0; --i) {
    const Frame& f = s.frames[i];
    if (f.cbid == en.cbid && f.domain == en.domain) {
      if (!f.muted) return false;
      s.depth = i;
      return true;
    }
  }
  return false;
}

void record(const Entry& en, const Event& e) {
  ThreadState& s = state();
  switch (en.family) {
    case Family::kResourceModule: {
      const uint8_t cause = load_cause(e.image);
      mark_loaded(s, cause);
      emit(kInstant, cause, en.name_id, e.value, e.ticks);
      return;
    }
    case Family::kResourceInit: emit(kInstant, en.cause, en.name_id, e.value, e.ticks); return;
    case Family::kLaunch: return on_launch(s, en, e);
    case Family::kKernelQuery: return on_query(s, en, e);
    case Family::kModuleLoad: return on_load(s, en, e);
    case Family::kAllocAsync: return on_alloc_async(s, en, e);
    case Family::kCaptureBegin: return on_capture_begin(s, en, e);
    case Family::kCaptureEnd: return on_capture_end(s, en, e);
    default: return on_span(s, en, e, en.cause);
  }
}

void handle(const Event& e) {
  const Entry* en = table::lookup(e.domain, e.cbid);
  if (en == nullptr) {
    g_callbacks.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!absorb(*en, e.enter)) record(*en, e);
}

Counts counts() {
  Counts c;
  c.callbacks = g_callbacks.load();
  c.kernel_launches = g_launches.load();
  c.new_kernels = g_new.load();
  c.pool_hits = g_pool_hits.load();
  c.untracked_kernels = g_untracked.load();
  return c;
}

void new_epoch() { g_epoch.fetch_add(1, std::memory_order_relaxed); }

void reset_counts() {
  restore_counts(Counts{});
  g_name_used.store(0);
  for (NameSlot& s : g_names) s.ready.store(0, std::memory_order_relaxed);
  fault_in(g_seen, +[](std::atomic<uintptr_t>& a) { a.fetch_or(0, std::memory_order_relaxed); });
  fault_in(g_name_bytes, +[](char& c) { c = 0; });
}

void restore_counts(const Counts& c) {
  g_callbacks.store(c.callbacks);
  g_launches.store(c.kernel_launches);
  // Slots past the restored count are free again: a later first launch rewrites them.
  for (uint32_t i = uint32_t(c.new_kernels); i < std::min(g_new.load(), kMaxNames); ++i)
    g_names[i].ready.store(0, std::memory_order_relaxed);
  g_new.store(uint32_t(c.new_kernels));
  g_pool_hits.store(c.pool_hits);
  g_untracked.store(c.untracked_kernels);
}

std::vector<std::string> new_kernels() {
  std::vector<std::string> out;
  const uint32_t n = std::min(g_new.load(std::memory_order_acquire), kMaxNames);
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    const NameSlot& s = g_names[i];
    if (s.ready.load(std::memory_order_acquire) == 0) continue;
    // Bounded by the arena whatever a concurrent rewrite of the slot left in it.
    const uint32_t off = std::min(s.offset, kNameBytes);
    const uint32_t len = std::min(s.len, kNameBytes - off);
    out.push_back(len ? std::string(g_name_bytes + off, len) : "kernel#" + std::to_string(s.kernel));
  }
  return out;
}

}  // namespace warmprof::backends::cupti::handler

namespace warmprof::backends::cupti {
const CallTally& thread_tally() { return handler::tally_state().tally; }
void set_recording(bool on) { handler::g_to_recorder.store(on); }
}  // namespace warmprof::backends::cupti

#include "backends/cupti_handler.h"

#include <atomic>
#include <mutex>
#include <unordered_set>

#include "backends/cupti_table.h"
#include "core/causes.h"
#include "core/recorder.h"

namespace warmprof::backends::cupti::handler {

namespace {

using table::Entry;
using table::Family;

constexpr int kMaxDepth = 16;  // driver calls nest only through callbacks-inside-calls; 16 is ample

struct Frame {
  uint32_t cbid;
  uint64_t ticks;
  int64_t value;
  bool loaded;      // launches: a module load happened inside
  bool orphan_end;  // EndCapture with no capture opened on this thread: timed as its own span
};

struct ThreadState {
  uint64_t generation = 0;
  Frame frames[kMaxDepth];
  int depth = 0;
  int overflow = 0;  // calls past kMaxDepth: counted, not recorded
  int captures_open = 0;
};

std::atomic<int64_t> g_launches{0};
std::atomic<int64_t> g_callbacks{0};
std::mutex g_kernels_mu;
std::unordered_set<uintptr_t> g_seen_kernels;  // process lifetime: "first seen" survives stop/start
std::vector<std::string> g_new_kernels;         // since reset_counts()

ThreadState& state() {
  static thread_local ThreadState s;
  const uint64_t gen = recorder::g_generation.load(std::memory_order_relaxed);
  if (s.generation != gen) s = ThreadState{gen, {}, 0, 0, 0};
  return s;
}

void emit(uint8_t kind, uint8_t cause, uint32_t name, int64_t value, uint64_t ticks) {
  recorder::append(kind, cause, name, value, ticks);
}

Frame* push(ThreadState& s, uint32_t cbid, const Event& e) {
  if (s.depth == kMaxDepth) {
    ++s.overflow;
    return nullptr;
  }
  Frame& f = s.frames[s.depth++];
  f = Frame{cbid, e.ticks, e.value, false, false};
  return &f;
}

// The frame this exit closes, popped; nullptr for an exit whose enter was not seen (subscribed
// mid-call) or past the depth limit.
const Frame* pop(ThreadState& s, uint32_t cbid) {
  if (s.overflow > 0) {
    --s.overflow;
    return nullptr;
  }
  for (int i = s.depth - 1; i >= 0; --i) {
    if (s.frames[i].cbid == cbid) {
      s.depth = i;
      return &s.frames[i];
    }
  }
  return nullptr;
}

void mark_launches_loaded(ThreadState& s) {
  for (int i = 0; i < s.depth; ++i) s.frames[i].loaded = true;  // only launch frames read it
}

bool first_seen(uintptr_t kernel, const char* name) {
  std::lock_guard<std::mutex> lock(g_kernels_mu);
  if (!g_seen_kernels.insert(kernel).second) return false;
  g_new_kernels.push_back(name && *name ? std::string(name) : "kernel#" + std::to_string(kernel));
  return true;
}

void on_span(ThreadState& s, const Entry& en, const Event& e) {
  if (e.enter) {
    if (en.family == Family::kModuleLoad) mark_launches_loaded(s);
    if (push(s, e.cbid, e)) emit(kBegin, en.cause, en.name_id, e.value, e.ticks);
  } else if (const Frame* f = pop(s, e.cbid)) {
    emit(kEnd, en.cause, en.name_id, f->value, e.ticks);
  }
}

void on_launch(ThreadState& s, const Entry& en, const Event& e) {
  if (e.enter) {
    g_launches.fetch_add(1, std::memory_order_relaxed);
    Event marked = e;
    marked.value = first_seen(e.kernel, e.kernel_name) ? 1 : 0;
    push(s, e.cbid, marked);
    return;
  }
  const Frame* f = pop(s, e.cbid);
  if (f == nullptr) return;
  const bool lazy = f->loaded;
  const uint8_t cause = lazy ? kRuntimeInit : kStructure;
  const uint32_t name = lazy ? table::extra_names().lazy_load : en.name_id;
  emit(kBegin, cause, name, f->value, f->ticks);
  emit(kEnd, cause, name, f->value, e.ticks);
}

void on_capture_begin(ThreadState& s, const Entry& en, const Event& e) {
  const uint32_t capture = table::extra_names().stream_capture;
  if (e.enter) {
    if (push(s, e.cbid, e)) emit(kBegin, en.cause, capture, 0, e.ticks);
  } else if (pop(s, e.cbid)) {
    if (e.failed) {
      emit(kEnd, en.cause, capture, 0, e.ticks);
    } else {
      ++s.captures_open;
    }
  }
}

void on_capture_end(ThreadState& s, const Entry& en, const Event& e) {
  if (e.enter) {
    Frame* f = push(s, e.cbid, e);
    if (f && s.captures_open == 0) {
      f->orphan_end = true;
      emit(kBegin, en.cause, en.name_id, 0, e.ticks);
    }
    return;
  }
  const Frame* f = pop(s, e.cbid);
  if (f == nullptr) return;
  if (f->orphan_end) {
    emit(kEnd, en.cause, en.name_id, 0, e.ticks);
  } else {
    --s.captures_open;
    emit(kEnd, en.cause, table::extra_names().stream_capture, 0, e.ticks);
  }
}

}  // namespace

void handle(const Event& e) {
  g_callbacks.fetch_add(1, std::memory_order_relaxed);
  const Entry* en = table::lookup(e.domain, e.cbid);
  if (en == nullptr) return;
  ThreadState& s = state();
  switch (en->family) {
    case Family::kResourceModule:
      mark_launches_loaded(s);
      [[fallthrough]];
    case Family::kResourceInit:
      emit(kInstant, en->cause, en->name_id, e.value, e.ticks);
      return;
    case Family::kLaunch: return on_launch(s, *en, e);
    case Family::kCaptureBegin: return on_capture_begin(s, *en, e);
    case Family::kCaptureEnd: return on_capture_end(s, *en, e);
    default: return on_span(s, *en, e);
  }
}

void reset_counts() {
  g_launches.store(0);
  g_callbacks.store(0);
  std::lock_guard<std::mutex> lock(g_kernels_mu);
  g_new_kernels.clear();
}

int64_t kernel_launches() { return g_launches.load(); }
int64_t callbacks() { return g_callbacks.load(); }

std::vector<std::string> new_kernels() {
  std::lock_guard<std::mutex> lock(g_kernels_mu);
  return g_new_kernels;
}

}  // namespace warmprof::backends::cupti::handler

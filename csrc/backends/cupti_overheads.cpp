#include "backends/cupti_overheads.h"

#include <cupti.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "core/causes.h"
#include "core/clock.h"

namespace warmprof::backends::cupti::overheads {

namespace {

// CUDA 12.0's headers lack the two lazy-loading kinds (added with CUDA 12.x's lazy loading); their
// values are CUPTI's ABI and checked against the headers that declare them.
constexpr uint32_t kDriverCompiler = 1;
constexpr uint32_t kModuleLoading = 4u << 16;        // CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING
constexpr uint32_t kLazyFunctionLoading = 5u << 16;  // CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING
static_assert(kDriverCompiler == CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER, "CUPTI changed the kind's value");
#if WARMPROF_CUPTI_SINCE(12, 3)
static_assert(kModuleLoading == CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING, "CUPTI changed the kind's value");
static_assert(kLazyFunctionLoading == CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING, "CUPTI changed the kind's value");
#endif

constexpr size_t kBufferBytes = 1u << 20;  // CUPTI recommends 1-10 MB; overhead records are few
constexpr size_t kMaxKept = 1u << 16;      // records kept between takes; past it, counted as dropped

// Every version of the OVERHEAD record (CUpti_ActivityOverhead, 2 and 3) begins with these fields,
// in this order: kind, overheadKind, objectKind, objectId, start, end. The first version is in
// every CUDA release's headers (cupti_activity_deprecated.h from 12.2 on).
using Record = CUpti_ActivityOverhead;

std::mutex g_mu;  // the store and the state below
std::vector<Overhead> g_kept;
int64_t g_dropped = 0;
bool g_enabled = false;
std::string g_reason = "not enabled (CUPTI has not subscribed in this process)";
// Read by the completion callback, which CUPTI calls on its own thread.
std::atomic<CUptiResult (*)(uint8_t*, size_t, CUpti_Activity**)> g_next_record{nullptr};

const char* name_of(uint32_t kind) {
  switch (kind) {
    case kModuleLoading: return "module_loading";
    case kLazyFunctionLoading: return "lazy_function_loading";
    case kDriverCompiler: return "driver_compiler";
    default: return nullptr;
  }
}

void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

// Times are converted at take(), where the offset between CUPTI's clock and warmprof's is read;
// until then start_ns/end_ns hold CUPTI's own timestamps.
void CUPTIAPI on_buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  auto next = g_next_record.load(std::memory_order_acquire);
  std::vector<Overhead> got;
  CUpti_Activity* rec = nullptr;
  while (next != nullptr && buffer != nullptr && valid > 0 && next(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_OVERHEAD) continue;
    const Record* r = reinterpret_cast<const Record*>(rec);
    const char* name = name_of(uint32_t(r->overheadKind));
    if (name == nullptr) continue;  // CUPTI's own overheads (buffer flush, instrumentation): not the model's
    Overhead o;
    o.kind = uint32_t(r->overheadKind);
    o.cause = o.kind == kDriverCompiler ? kJitCompile : kRuntimeInit;
    o.name = name;
    o.start_ns = int64_t(r->start);
    o.end_ns = int64_t(r->end);
    if (r->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD) o.thread = r->objectId.pt.threadId;
    got.push_back(o);
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  for (const Overhead& o : got) {
    if (g_kept.size() < kMaxKept) {
      g_kept.push_back(o);
    } else {
      ++g_dropped;
    }
  }
}

// CUPTI's clock minus warmprof's (monotonic) ns, from the narrowest of a few brackets.
// CUPTI's timestamps are CLOCK_REALTIME on Linux unless a tool registered its own.
int64_t clock_offset(const Lib& l) {
  int64_t best_width = INT64_MAX, offset = 0;
  for (int i = 0; i < 5; ++i) {
    const int64_t a = int64_t(clock::monotonic_ns());
    uint64_t c = 0;
    if (l.get_timestamp == nullptr || l.get_timestamp(&c) != CUPTI_SUCCESS) {
      timespec ts{};
      clock_gettime(CLOCK_REALTIME, &ts);
      c = uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
    }
    const int64_t b = int64_t(clock::monotonic_ns());
    if (b - a < best_width) {
      best_width = b - a;
      offset = int64_t(c) - (a + (b - a) / 2);
    }
  }
  return offset;
}

bool on_this_thread(uint64_t thread) {
  if (thread == 0) return false;
  const uint32_t t = uint32_t(thread);
  return t == uint32_t(uintptr_t(pthread_self())) || t == uint32_t(syscall(SYS_gettid));
}

}  // namespace

std::string enable(const Lib& l) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (l.activity_register_callbacks == nullptr || l.activity_enable == nullptr || l.activity_flush_all == nullptr ||
      l.activity_get_next_record == nullptr) {
    g_enabled = false;
    g_reason = "libcupti " + l.path + " lacks the activity API (cuptiActivityRegisterCallbacks, cuptiActivityEnable, "
               "cuptiActivityFlushAll, cuptiActivityGetNextRecord)";
    return g_reason;
  }
  g_next_record.store(l.activity_get_next_record, std::memory_order_release);
  CUptiResult r = l.activity_register_callbacks(on_buffer_requested, on_buffer_completed);
  if (r == CUPTI_SUCCESS) r = l.activity_enable(CUPTI_ACTIVITY_KIND_OVERHEAD);
  g_enabled = r == CUPTI_SUCCESS;
  g_reason = g_enabled ? "" : "cuptiActivityEnable(CUPTI_ACTIVITY_KIND_OVERHEAD) failed: CUPTI error " + std::to_string(int(r));
  return g_reason;
}

void disable(const Lib& l) {
  bool was;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    was = g_enabled;
    g_enabled = false;
    if (was) g_reason = "not enabled (the subscription ended)";
  }
  if (!was) return;
  // Outside g_mu: the flush hands buffers to on_buffer_completed, which takes it.
  l.activity_flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (l.activity_disable != nullptr) l.activity_disable(CUPTI_ACTIVITY_KIND_OVERHEAD);
}

std::vector<Overhead> take(const Lib& l, int64_t* dropped) {
  if (enabled() && l.activity_flush_all != nullptr) l.activity_flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const int64_t offset = clock_offset(l);
  std::vector<Overhead> out;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    out.swap(g_kept);
    *dropped = g_dropped;
    g_dropped = 0;
  }
  for (Overhead& o : out) {
    // 0 for both: CUPTI could not time it (kept, with no time).
    if (o.start_ns != 0 || o.end_ns != 0) {
      o.start_ns -= offset;
      o.end_ns -= offset;
    }
    o.this_thread = on_this_thread(o.thread);
  }
  return out;
}

void forget() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_enabled) g_reason = "off: the subscription was torn down";
  g_enabled = false;
}

bool enabled() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_enabled;
}

std::string reason() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_reason;
}

}  // namespace warmprof::backends::cupti::overheads

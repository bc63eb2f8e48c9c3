// CUPTI backend, compiled against the toolkit's headers; libcupti is opened at run time.
// This file holds the subscriber (subscribe, enable the table's callbacks, check, unsubscribe), the
// callback entry, and the test-only and calibration entries that go through it; the loader, the
// decoding of CUPTI's callback data, the table and the handler live in cupti_loader, cupti_decode,
// cupti_table and cupti_handler.
#include "backends/cupti.h"

#include <cupti.h>
#include <malloc.h>

#include <atomic>
#include <cstring>
#include <initializer_list>
#include <mutex>

#include "backends/cuda_driver.h"
#include "backends/cupti_compat.h"
#include "backends/cupti_decode.h"
#include "backends/cupti_handler.h"
#include "backends/cupti_loader.h"
#include "backends/cupti_overheads.h"
#include "backends/cupti_table.h"
#include "core/clock.h"
#include "core/recorder.h"

namespace warmprof::backends::cupti {

namespace {

std::mutex g_mu;  // start/stop/check and the state below
CUpti_SubscriberHandle g_subscriber = nullptr;
double g_subscribe_ns = 0;
int64_t g_refused = 0;  // mapped callbacks the installed libcupti refused to enable

// What the last subscribe attempt said: available() is true only after one succeeded.
enum class Subscribed { kNever, kYes, kNo };
Subscribed g_subscribed = Subscribed::kNever;
std::string g_subscribe_failure;  // why the last attempt failed
std::string g_torn_down;          // why the subscription ended without warmprof's unsubscribe

// CUPTI's own fatal-error notice (it finalizes itself after sending it), written once from the
// callback thread and read under g_mu.
std::atomic<bool> g_fatal{false};
std::atomic_flag g_fatal_claimed = ATOMIC_FLAG_INIT;
char g_fatal_message[256] = {0};

const char* const kTornDown =
    "the CUPTI subscription was torn down by another tool calling cuptiFinalize (or by CUPTI itself)";

#if WARMPROF_CUPTI_SINCE(12, 2)
// CUPTI_CB_DOMAIN_STATE: CUPTI says it hit a fatal error and finalizes itself right after.
void on_state(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_STATE || cbid != CUPTI_CBID_STATE_FATAL_ERROR) return;
  if (g_fatal_claimed.test_and_set()) return;
  auto* sd = static_cast<const CUpti_StateData*>(data);
  const char* m = sd && sd->notification.message ? sd->notification.message : "no message";
  std::strncpy(g_fatal_message, m, sizeof(g_fatal_message) - 1);
  g_fatal.store(true, std::memory_order_release);
}
void enable_state_domain(const Lib& l, CUpti_SubscriberHandle s) {
  (void)l.enable_domain(1, s, CUPTI_CB_DOMAIN_STATE);  // optional: an older libcupti lacks it
}
#else
void enable_state_domain(const Lib&, CUpti_SubscriberHandle) {}  // headers before 12.2 lack it
#endif

// One callback at `ticks`, through the handler. The thread must be prepared (prepare_thread).
void deliver(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data, uint64_t ticks) {
  const table::Entry* en = table::lookup(domain, cbid);
  if (en == nullptr || data == nullptr) return;  // not enabled by warmprof: nothing to do
  const bool enter = domain == CUPTI_CB_DOMAIN_RESOURCE ||
                     static_cast<const CUpti_CallbackData*>(data)->callbackSite == CUPTI_API_ENTER;
  if (handler::absorb(*en, enter)) return;  // the runtime call around it is counted instead
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    handler::record(*en, decode::resource(*en, static_cast<const CUpti_ResourceData*>(data), ticks));
    return;
  }
  bool skip = false;
  const handler::Event e = decode::api(*en, static_cast<const CUpti_CallbackData*>(data), ticks, &skip);
  if (!skip) handler::record(*en, e);
}

// The thread's buffer and state are set up before the clock is read: a thread's first callback
// must not time its own registration as part of the call it records.
void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
#if WARMPROF_CUPTI_SINCE(12, 2)
  if (domain == CUPTI_CB_DOMAIN_STATE) {  // enabled by subscribe(), apart from the table's ids
    on_state(domain, cbid, data);
    return;
  }
#endif
  handler::prepare_thread();
  deliver(domain, cbid, data, clock::ticks());
}

#if WARMPROF_CUPTI_SINCE(13, 0)
// cuptiSubscribe_v2 names warmprof to CUPTI and, when another subscriber holds it, names that one.
CUptiResult subscribe_named(const Lib& l, CUpti_SubscriberHandle* out, std::string* holder) {
  if (l.subscribe_v2 == nullptr) return l.subscribe(out, on_callback, nullptr);
  char name[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 64] = {0};
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "warmprof";
  params.oldSubscriberName = name;
  params.oldSubscriberSize = sizeof(name);
  CUptiResult r = l.subscribe_v2(out, on_callback, nullptr, &params);
  *holder = name;
  return r;
}
#else
CUptiResult subscribe_named(const Lib& l, CUpti_SubscriberHandle* out, std::string*) {
  return l.subscribe(out, on_callback, nullptr);  // headers before CUDA 13 cannot name the holder
}
#endif

// A libcupti newer than the driver loads, then refuses to subscribe: say so when the versions
// show it ("" when they do not, or cannot be read).
std::string newer_than_driver(const Lib& l) {
  uint32_t v = 0;
  if (l.get_version == nullptr || l.get_version(&v) != CUPTI_SUCCESS) return "";
  const int cupti_major = cuda_major_of(v);
  const int driver = cuda_driver::driver_version();
  if (cupti_major == 0 || driver == 0 || cupti_major <= driver / 1000) return "";
  return "; libcupti is from CUDA " + std::to_string(cupti_major) + " (CUPTI API " + std::to_string(v) +
         "), newer than the driver, which supports CUDA " + std::to_string(driver / 1000) + "." +
         std::to_string(driver % 1000 / 10) + ": a libcupti of the driver's CUDA release or older is needed";
}

std::string subscribe_failure(const Lib& l, CUptiResult r, const std::string& holder) {
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    return std::string("another CUPTI subscriber holds the process (torch.profiler or Nsight)") +
           (holder.empty() ? "" : ": " + holder);
  }
  return "cuptiSubscribe failed: " + result_text(r) + " (libcupti " + l.path + newer_than_driver(l) + ")";
}

// Called with g_mu held. Records the outcome for available().
std::string subscribe(const Lib& l, CUpti_SubscriberHandle* out) {
  std::string holder;
  CUptiResult r = subscribe_named(l, out, &holder);
  g_torn_down.clear();
  if (r == CUPTI_SUCCESS) {
    g_fatal.store(false, std::memory_order_relaxed);  // a fatal error of an earlier subscription
    g_fatal_claimed.clear();
    g_subscribed = Subscribed::kYes;
    enable_state_domain(l, *out);
    return "";
  }
  *out = nullptr;
  g_subscribed = Subscribed::kNo;
  g_subscribe_failure = subscribe_failure(l, r, holder);
  return g_subscribe_failure;
}

// Whether the subscription `s` still stands, asked of CUPTI: "" when it does. A handle CUPTI no
// longer knows fails the query; one reused for another tool's subscription shows the launch
// callback warmprof enabled as off (start() enables cuLaunchKernel, a decoded callback, whether
// by domain or one by one). Called with g_mu held (CUPTI wants these calls serialized).
std::string probe(const Lib& l, CUpti_SubscriberHandle s) {
  if (g_fatal.load(std::memory_order_acquire))
    return std::string("CUPTI hit a fatal error and finalized itself: ") + g_fatal_message;
  if (l.get_callback_state == nullptr) return "";  // this libcupti cannot tell: assume it stands
  uint32_t enabled = 0;
  CUptiResult r = l.get_callback_state(&enabled, s, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
  if (r != CUPTI_SUCCESS) return std::string(kTornDown) + " (cuptiGetCallbackState: " + result_text(r) + ")";
  if (enabled == 0) return std::string(kTornDown) + " (its launch callback is no longer enabled)";
  return "";
}

// Enables each callback the table maps, one id at a time (cuptiEnableCallback), never a whole
// domain: the ~800 driver and ~500 runtime functions warmprof ignores then cost the instrumented
// passes no dispatch. An id the installed libcupti refuses (older than the headers warmprof was
// built with) is skipped and counted. Returns the number enabled; `last` keeps the last refusal.
template <typename Enable>
size_t enable_mapped(Enable&& enable, int64_t* refused, CUptiResult* last) {
  size_t n = 0, enabled = 0;
  const table::Key* keys = table::mapped(&n);
  for (size_t i = 0; i < n; ++i) {
    const CUptiResult r = enable(keys[i].domain, keys[i].cbid);
    if (r == CUPTI_SUCCESS) {
      ++enabled;
    } else {
      ++*refused;
      *last = r;
    }
  }
  return enabled;
}

}  // namespace

bool compiled() { return true; }

bool available() {
  if (!lib().ok) return false;
  std::lock_guard<std::mutex> lock(g_mu);
  return g_subscribed == Subscribed::kYes;
}

std::string unavailable_reason() {
  const Lib l = lib();
  if (!l.ok) return l.reason;
  std::lock_guard<std::mutex> lock(g_mu);
  switch (g_subscribed) {
    case Subscribed::kYes: return "";
    case Subscribed::kNo: return g_subscribe_failure;
    case Subscribed::kNever: break;
  }
  return "loaded, not yet subscribed (libcupti " + l.path +
         "): CUPTI is known to work with this driver only once a trace has subscribed";
}

std::string library_path() { return lib().path; }

std::string start() {
  std::lock_guard<std::mutex> lock(g_mu);
  const Lib l = lib();
  if (!l.ok) return l.reason;
  if (g_subscriber != nullptr) return "warmprof's CUPTI subscriber is already active (a trace in progress, or an open "
           "warmprof.watch(cupti=True) in this process)";
  if (l.enable_callback == nullptr)  // optional for the loader; warmprof enables nothing without it
    return "libcupti " + l.path + " has no cuptiEnableCallback: warmprof enables callbacks one by one";
  (void)table::lookup(0, 0);  // build the table (interning names) outside the timed region
  handler::reset_counts();    // and fault in the first-seen table and the name arena
  decode::cache_arch();       // the device architecture, so that no callback asks the driver
  const uint64_t t0 = clock::ticks();
  std::string why = subscribe(l, &g_subscriber);
  if (!why.empty()) return why;
  handler::new_epoch();  // calls left open by an earlier subscription are dropped
  g_refused = 0;
  CUptiResult last = CUPTI_SUCCESS;
  const CUpti_SubscriberHandle sub = g_subscriber;
  const size_t enabled = enable_mapped(
      [&](uint32_t domain, uint32_t cbid) {
        return l.enable_callback(1, sub, CUpti_CallbackDomain(domain), CUpti_CallbackId(cbid));
      },
      &g_refused, &last);
  if (enabled == 0) {
    l.unsubscribe(g_subscriber);
    g_subscriber = nullptr;
    g_subscribed = Subscribed::kNo;  // subscribed, but nothing to see: not available
    g_subscribe_failure = "cuptiEnableCallback failed for every callback warmprof maps: " + result_text(last);
    return g_subscribe_failure;
  }
  (void)overheads::enable(l);  // optional: its reason is reported by take_overheads()
  g_subscribe_ns = double(clock::to_ns(clock::ticks()) - clock::to_ns(t0));
  return "";
}

// The one activity kind warmprof enables, OVERHEAD (kernel names come from the launch callback's
// symbolName), is flushed and disabled first; what it holds stays for take_overheads().
// Unsubscribing stops every callback. A subscription found torn down is not unsubscribed (its
// handle may name another tool's by now). Every thread's open calls are dropped (a new epoch): a
// call open when the subscription ended never gets its exit.
std::string stop() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string why;
  std::swap(why, g_torn_down);
  if (g_subscriber == nullptr) return why;
  const Lib l = lib();
  why = probe(l, g_subscriber);
  if (why.empty()) {
    overheads::disable(l);
    CUptiResult r = l.unsubscribe(g_subscriber);
    if (r != CUPTI_SUCCESS) why = std::string(kTornDown) + " (cuptiUnsubscribe: " + result_text(r) + ")";
  } else {
    overheads::forget();
  }
  g_subscriber = nullptr;
  handler::new_epoch();
  return why;
}

bool active() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_subscriber != nullptr;
}

std::string check() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_torn_down.empty() || g_subscriber == nullptr) return g_torn_down;
  g_torn_down = probe(lib(), g_subscriber);
  if (!g_torn_down.empty()) {
    g_subscriber = nullptr;
    overheads::forget();
    handler::new_epoch();
  }
  return g_torn_down;
}

PassStats stats() {
  PassStats s;
  const handler::Counts c = handler::counts();
  s.kernel_launches = c.kernel_launches;
  s.new_kernel_count = c.new_kernels;
  s.new_kernels = handler::new_kernels();
  s.callbacks = c.callbacks;
  s.pool_hits = c.pool_hits;
  s.untracked_kernels = c.untracked_kernels;
  std::lock_guard<std::mutex> lock(g_mu);
  s.subscribe_ns = g_subscribe_ns;
  s.refused_callbacks = g_refused;
  return s;
}

Overheads take_overheads() {
  Overheads out;
  const Lib l = lib();
  if (!l.ok) {
    out.reason = l.reason;
    return out;
  }
  std::vector<overheads::Overhead> got;
  {
    // Not under g_mu (the flush hands buffers back on this thread), but never beside a stop().
    got = overheads::take(l, &out.dropped);
  }
  out.enabled = overheads::enabled();
  out.reason = overheads::reason();
  out.records.reserve(got.size());
  for (const overheads::Overhead& o : got)
    out.records.push_back(Overhead{o.name, int(o.cause), o.start_ns, o.end_ns, o.thread, o.this_thread});
  return out;
}

int classify(uint32_t domain, uint32_t cbid) {
  const table::Entry* en = table::lookup(domain, cbid);
  return en ? int(en->cause) : -1;
}

std::string callback_name(uint32_t domain, uint32_t cbid) {
  const table::Entry* en = table::lookup(domain, cbid);
  return en ? en->name : "";
}

std::vector<std::pair<uint32_t, uint32_t>> enabled_callbacks() {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  int64_t refused = 0;
  CUptiResult last = CUPTI_SUCCESS;
  enable_mapped(
      [&](uint32_t domain, uint32_t cbid) {
        out.emplace_back(domain, cbid);
        return CUPTI_SUCCESS;
      },
      &refused, &last);
  return out;
}

namespace {

// `pairs` enter/exit pairs of one driver call through the real callback entry (prepare, clock
// read, lookup, decode, handler), with its own parameter struct: cuLaunchKernel of the function
// `value`, or cuMemAlloc_v2 of `value` bytes.
bool call_through_callback(uint32_t cbid, int64_t value, int pairs) {
  cuLaunchKernel_params launch{};
  cuMemAlloc_v2_params alloc{};
  CUdeviceptr dptr = 0;
  CUpti_CallbackData cb{};
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) {
    launch.f = reinterpret_cast<CUfunction>(uintptr_t(value));
    cb.functionParams = &launch;
    cb.symbolName = nullptr;
  } else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2) {
    alloc.dptr = &dptr;
    alloc.bytesize = size_t(value);
    cb.functionParams = &alloc;
  } else {
    return false;
  }
  CUresult ok = CUDA_SUCCESS;
  uint64_t correlation = 0;
  cb.functionReturnValue = &ok;
  cb.correlationData = &correlation;
  for (int i = 0; i < pairs; ++i) {
    cb.callbackSite = CUPTI_API_ENTER;
    on_callback(nullptr, CUPTI_CB_DOMAIN_DRIVER_API, cbid, &cb);
    cb.callbackSite = CUPTI_API_EXIT;
    on_callback(nullptr, CUPTI_CB_DOMAIN_DRIVER_API, cbid, &cb);
  }
  return true;
}

}  // namespace

double handler_cost_ns(int iterations) {
  if (iterations <= 0 || recorder::enabled() || active()) return 0.0;
  // The common callback of a pass: a repeat launch (counted, no record), with the recorder on as
  // in a pass. Its first launch (a span) is taken before the clock. The calibration kernel is an
  // address no CUfunction has; its launches are taken out of the counts afterwards.
  static const char kCalibrationKernel = 0;
  const int64_t kernel = int64_t(reinterpret_cast<uintptr_t>(&kCalibrationKernel));
  const handler::Counts saved = handler::counts();
  recorder::start();
  call_through_callback(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, kernel, 1);
  const uint64_t t0 = clock::monotonic_ns();
  call_through_callback(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, kernel, iterations);
  const uint64_t t1 = clock::monotonic_ns();
  recorder::stop();
  recorder::release();
  handler::restore_counts(saved);
  return double(t1 - t0) / (2.0 * iterations);
}

bool call_now(uint32_t cbid, int64_t value, int pairs) { return call_through_callback(cbid, value, pairs); }

int64_t launch_heap_bytes(int64_t first_kernel, int kernels, const std::string& name) {
  // Heap in use on this thread's arena before and after `kernels` first launches through the
  // handler (names kept): the hot path must take nothing from it.
  const std::string full = name + std::string(64, 'x');  // past any small-string buffer
  const size_t before = mallinfo2().uordblks;
  for (int i = 0; i < kernels; ++i) {
    handler::Event e;
    e.domain = CUPTI_CB_DOMAIN_DRIVER_API;
    e.cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
    e.kernel = uintptr_t(first_kernel + i);
    e.kernel_name = full.c_str();
    e.enter = true;
    handler::handle(e);
    e.enter = false;
    handler::handle(e);
  }
  return int64_t(mallinfo2().uordblks) - int64_t(before);
}

void inject(uint32_t domain, uint32_t cbid, bool enter, uint64_t ticks, int64_t value, bool failed) {
  handler::Event e;
  e.domain = domain;
  e.cbid = cbid;
  e.enter = enter;
  e.ticks = ticks;
  e.value = value;
  e.failed = failed && !enter;
  e.kernel = uintptr_t(value);  // launches: the injected value stands for the CUfunction
  handler::handle(e);
}

namespace {
// A test injector's API callback through deliver(): the record CUPTI passes at the call's entry or
// exit, with these parameters (null: none, as nvcc 13's __cudaLaunchKernel) and symbol name.
void deliver_api(uint32_t domain, uint32_t cbid, bool enter, uint64_t ticks, const void* params,
                 const char* symbol = nullptr) {
  CUresult ok = CUDA_SUCCESS;
  uint64_t correlation = 0;
  CUpti_CallbackData cb{};
  cb.callbackSite = enter ? CUPTI_API_ENTER : CUPTI_API_EXIT;
  cb.functionParams = params;
  cb.symbolName = symbol;
  cb.functionReturnValue = &ok;
  cb.correlationData = &correlation;
  deliver(CUpti_CallbackDomain(domain), cbid, &cb, ticks);
}
}  // namespace

bool inject_unparamed(uint32_t domain, uint32_t cbid, bool enter, uint64_t ticks, const std::string& symbol) {
  if (table::lookup(domain, cbid) == nullptr || domain == CUPTI_CB_DOMAIN_RESOURCE) return false;
  handler::prepare_thread();
  deliver_api(domain, cbid, enter, ticks, nullptr, symbol.empty() ? nullptr : symbol.c_str());
  return true;
}

bool inject_query(uint32_t domain, uint32_t cbid, bool enter, uint64_t ticks, int64_t kernel) {
  const table::Entry* en = table::lookup(domain, cbid);
  if (en == nullptr || en->family != table::Family::kKernelQuery) return false;
  union {
    cuFuncGetAttribute_params func_attribute;
    cuOccupancyMaxPotentialBlockSize_params block_size;
    cuOccupancyMaxPotentialBlockSizeWithFlags_params block_size_flags;
    cuOccupancyMaxActiveBlocksPerMultiprocessor_params active_blocks;
    cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_params active_blocks_flags;
    cuOccupancyAvailableDynamicSMemPerBlock_params dynamic_smem;
    cuOccupancyMaxPotentialClusterSize_params cluster_size;
    cuOccupancyMaxActiveClusters_params active_clusters;
    cudaFuncGetAttributes_v3020_params rt_func_attributes;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor_v6050_params rt_active_blocks;
    cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000_params rt_active_blocks_flags;
    cudaOccupancyAvailableDynamicSMemPerBlock_v10200_params rt_dynamic_smem;
    cudaOccupancyMaxPotentialClusterSize_v11070_params rt_cluster_size;
    cudaOccupancyMaxActiveClusters_v11070_params rt_active_clusters;
#if WARMPROF_CUPTI_SINCE(12, 3)
    cudaGetKernel_v12000_params rt_get_kernel;
#endif
  } params{};
  void* fn = reinterpret_cast<void*>(uintptr_t(kernel));
  const CUfunction f = static_cast<CUfunction>(fn);
#define WP_Q(cbid_name, member, field, value) \
  case cbid_name: params.member.field = value; break
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    switch (cbid) {
      WP_Q(CUPTI_DRIVER_TRACE_CBID_cuFuncGetAttribute, func_attribute, hfunc, f);
      WP_Q(CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxPotentialBlockSize, block_size, func, f);
      WP_Q(CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxPotentialBlockSizeWithFlags, block_size_flags, func, f);
      WP_Q(CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxActiveBlocksPerMultiprocessor, active_blocks, func, f);
      WP_Q(CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, active_blocks_flags, func, f);
      WP_Q(CUPTI_DRIVER_TRACE_CBID_cuOccupancyAvailableDynamicSMemPerBlock, dynamic_smem, func, f);
      WP_Q(CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxPotentialClusterSize, cluster_size, func, f);
      WP_Q(CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxActiveClusters, active_clusters, func, f);
      default: return false;
    }
  } else {
    switch (cbid) {
      WP_Q(CUPTI_RUNTIME_TRACE_CBID_cudaFuncGetAttributes_v3020, rt_func_attributes, func, fn);
      WP_Q(CUPTI_RUNTIME_TRACE_CBID_cudaOccupancyMaxActiveBlocksPerMultiprocessor_v6050, rt_active_blocks, func, fn);
      WP_Q(CUPTI_RUNTIME_TRACE_CBID_cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000, rt_active_blocks_flags,
           func, fn);
      WP_Q(CUPTI_RUNTIME_TRACE_CBID_cudaOccupancyAvailableDynamicSMemPerBlock_v10200, rt_dynamic_smem, func, fn);
      WP_Q(CUPTI_RUNTIME_TRACE_CBID_cudaOccupancyMaxPotentialClusterSize_v11070, rt_cluster_size, func, fn);
      WP_Q(CUPTI_RUNTIME_TRACE_CBID_cudaOccupancyMaxActiveClusters_v11070, rt_active_clusters, func, fn);
#if WARMPROF_CUPTI_SINCE(12, 3)
      WP_Q(CUPTI_RUNTIME_TRACE_CBID_cudaGetKernel_v12000, rt_get_kernel, entryFuncAddr, fn);
#endif
      default: return false;  // __cudaGetKernel: no parameter struct (inject_unparamed)
    }
  }
#undef WP_Q
  handler::prepare_thread();
  deliver_api(domain, cbid, enter, ticks, &params);
  return true;
}

bool inject_load(uint32_t domain, uint32_t cbid, bool enter, uint64_t ticks, const std::string& image, int arch) {
  // The call's own parameter struct, pointing at `image` (a path for the file loads), delivered
  // as CUPTI would, so the decoding of the parameters and of the image is the real one.
  union {
    cuModuleLoad_params module_file;
    cuModuleLoadData_params module_data;
    cuModuleLoadDataEx_params module_data_ex;
    cuModuleLoadFatBinary_params module_fatbin;
    cuLibraryLoadData_params library_data;
    cuLibraryLoadFromFile_params library_file;
#if WARMPROF_CUPTI_SINCE(12, 6)
    cudaLibraryLoadData_v12060_params rt_library_data;
    cudaLibraryLoadFromFile_v12060_params rt_library_file;
#endif
  } params{};
  const void* bytes = image.data();
  const char* path = image.c_str();
  bool known = true;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    switch (cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuModuleLoad: params.module_file.fname = path; break;
      case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData: params.module_data.image = bytes; break;
      case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx: params.module_data_ex.image = bytes; break;
      case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary: params.module_fatbin.fatCubin = bytes; break;
      case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData: params.library_data.code = bytes; break;
      case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile: params.library_file.fileName = path; break;
      default: known = false;
    }
#if WARMPROF_CUPTI_SINCE(12, 6)
  } else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLibraryLoadData_v12060) {
    params.rt_library_data.code = bytes;
  } else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLibraryLoadFromFile_v12060) {
    params.rt_library_file.fileName = path;
#endif
  } else if (!(domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_MODULE_LOADED)) {
    known = false;
  }
  if (!known) return false;
  decode::set_arch_override(arch);  // -1: the architecture start() cached
  handler::prepare_thread();
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    CUpti_ModuleResourceData module{};
    module.cubinSize = image.size();
    module.pCubin = image.data();
    CUpti_ResourceData rd{};
    rd.resourceDescriptor = &module;
    deliver(CUPTI_CB_DOMAIN_RESOURCE, cbid, &rd, ticks);
  } else {
    deliver_api(domain, cbid, enter, ticks, &params);
  }
  decode::set_arch_override(-1);
  return true;
}

}  // namespace warmprof::backends::cupti

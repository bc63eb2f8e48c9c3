// CUPTI backend, compiled against the toolkit's headers; libcupti is opened at run time.
// This file holds the subscriber (subscribe, unsubscribe) and the decoding of CUPTI's callback data
// into handler events; the loader, the table and the handler live in cupti_loader/cupti_table/
// cupti_handler.
#include "backends/cupti.h"

#include <cupti.h>

#include <atomic>
#include <cstring>
#include <initializer_list>
#include <mutex>

#include "backends/cuda_driver.h"
#include "backends/cupti_compat.h"
#include "backends/cupti_handler.h"
#include "backends/cupti_loader.h"
#include "backends/cupti_table.h"
#include "core/clock.h"

namespace warmprof::backends::cupti {

namespace {

std::mutex g_mu;  // start/stop/check and the state below
CUpti_SubscriberHandle g_subscriber = nullptr;
double g_subscribe_ns = 0;

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
    "the CUPTI subscription was torn down by another tool calling cuptiFinalize (torch.profiler's "
    "Kineto does at exit with TEARDOWN_CUPTI=1)";

// --- decoding CUPTI's callback data (real path only) ---------------------------------------------

#define WP_BYTES(cbid_name, field) \
  case CUPTI_DRIVER_TRACE_CBID_##cbid_name: \
    return int64_t(static_cast<const cbid_name##_params*>(p)->field)

// Bytes a call allocates or copies, read from its parameter struct; 0 when it carries none.
int64_t bytes_of(uint32_t cbid, const void* p) {
  if (p == nullptr) return 0;
  switch (cbid) {
    WP_BYTES(cuMemAlloc, bytesize);
    WP_BYTES(cuMemAlloc_v2, bytesize);
    WP_BYTES(cuMemAllocManaged, bytesize);
    WP_BYTES(cuMemAllocHost, bytesize);
    WP_BYTES(cuMemAllocHost_v2, bytesize);
    WP_BYTES(cuMemHostAlloc, bytesize);
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc_v2:  // no _v2 params struct: the same layout
      return int64_t(static_cast<const cuMemHostAlloc_params*>(p)->bytesize);
    WP_BYTES(cuMemCreate, size);
    WP_BYTES(cuMemMap, size);
    WP_BYTES(cuMemAddressReserve, size);
    WP_BYTES(cuMemAllocAsync, bytesize);
    WP_BYTES(cuMemAllocAsync_ptsz, bytesize);
    WP_BYTES(cuMemAllocFromPoolAsync, bytesize);
    WP_BYTES(cuMemAllocFromPoolAsync_ptsz, bytesize);
    WP_BYTES(cuMemcpyHtoD, ByteCount);
    WP_BYTES(cuMemcpyHtoD_v2, ByteCount);
    WP_BYTES(cuMemcpyHtoD_v2_ptds, ByteCount);
    WP_BYTES(cuMemcpyHtoDAsync, ByteCount);
    WP_BYTES(cuMemcpyHtoDAsync_v2, ByteCount);
    WP_BYTES(cuMemcpyHtoDAsync_v2_ptsz, ByteCount);
    WP_BYTES(cuMemPrefetchAsync, count);
    WP_BYTES(cuMemPrefetchAsync_ptsz, count);
#if WARMPROF_CUPTI_SINCE(12, 2)
    WP_BYTES(cuMemPrefetchAsync_v2, count);
    WP_BYTES(cuMemPrefetchAsync_v2_ptsz, count);
#endif
    WP_BYTES(cuMemcpy, ByteCount);
    WP_BYTES(cuMemcpy_ptds, ByteCount);
    WP_BYTES(cuMemcpyAsync, ByteCount);
    WP_BYTES(cuMemcpyAsync_ptsz, ByteCount);
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch: {
      auto* a = static_cast<const cuMemAllocPitch_params*>(p);
      return int64_t(a->WidthInBytes) * int64_t(a->Height);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
      auto* a = static_cast<const cuMemAllocPitch_v2_params*>(p);
      return int64_t(a->WidthInBytes) * int64_t(a->Height);
    }
    default: return 0;
  }
}
#undef WP_BYTES

// The launched function: every launch parameter struct warmprof decodes carries it as `f`.
uintptr_t kernel_of(uint32_t cbid, const void* p) {
  if (p == nullptr) return 0;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
      return reinterpret_cast<uintptr_t>(static_cast<const cuLaunchKernelEx_params*>(p)->f);
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
      return reinterpret_cast<uintptr_t>(static_cast<const cuLaunchKernelEx_ptsz_params*>(p)->f);
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync:
      // `CUfunction f` is the first member of each of these structs.
      return reinterpret_cast<uintptr_t>(*static_cast<const CUfunction*>(p));
    default: return 0;
  }
}

// cuMemcpy/cuMemcpyAsync take unified addresses: host-to-device when the destination is device
// memory and the source is not (unregistered host memory makes the query fail, which means host).
bool host_to_device(uint32_t cbid, const void* p) {
  const cuda_driver::Api* api = cuda_driver::api(nullptr);
  if (api == nullptr || p == nullptr) return false;
  CUdeviceptr dst = 0, src = 0;
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpy || cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds) {
    auto* a = static_cast<const cuMemcpy_params*>(p);  // same layout as the _ptds struct
    dst = a->dst, src = a->src;
  } else {
    auto* a = static_cast<const cuMemcpyAsync_params*>(p);  // same layout as the _ptsz struct
    dst = a->dst, src = a->src;
  }
  unsigned int dst_type = 0, src_type = 0;
  if (api->cuPointerGetAttribute(&dst_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dst) != CUDA_SUCCESS ||
      dst_type != CU_MEMORYTYPE_DEVICE)
    return false;
  if (api->cuPointerGetAttribute(&src_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, src) != CUDA_SUCCESS)
    return true;
  return src_type == CU_MEMORYTYPE_HOST;
}

handler::Event decode_driver(const table::Entry& en, uint32_t cbid, const CUpti_CallbackData* cb,
                             uint64_t ticks, bool* skip) {
  handler::Event e;
  e.domain = CUPTI_CB_DOMAIN_DRIVER_API;
  e.cbid = cbid;
  e.ticks = ticks;
  e.enter = cb->callbackSite == CUPTI_API_ENTER;
  if (!e.enter && cb->functionReturnValue != nullptr)
    e.failed = *static_cast<const CUresult*>(cb->functionReturnValue) != CUDA_SUCCESS;
  e.value = bytes_of(cbid, cb->functionParams);
  if (en.family == table::Family::kLaunch) {
    e.kernel = kernel_of(cbid, cb->functionParams);
    e.kernel_name = cb->symbolName;
  } else if (en.family == table::Family::kCopyGeneric) {
    // Decide the direction once, at enter; CUPTI keeps correlationData for the matching exit.
    if (cb->correlationData == nullptr) {
      *skip = !host_to_device(cbid, cb->functionParams);
    } else {
      if (e.enter) *cb->correlationData = host_to_device(cbid, cb->functionParams) ? 1 : 0;
      *skip = *cb->correlationData == 0;
    }
  }
  return e;
}

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
void on_state(CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}
void enable_state_domain(const Lib&, CUpti_SubscriberHandle) {}  // headers before 12.2 lack it
#endif

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  const uint64_t ticks = clock::ticks();
  const table::Entry* en = table::lookup(domain, cbid);
  if (en == nullptr || data == nullptr) {  // the common case: a call warmprof ignores
    on_state(domain, cbid, data);
    return;
  }
  handler::Event e;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    bool skip = false;
    e = decode_driver(*en, cbid, static_cast<const CUpti_CallbackData*>(data), ticks, &skip);
    if (skip) return;
  } else {
    e.domain = domain;
    e.cbid = cbid;
    e.ticks = ticks;
    auto* rd = static_cast<const CUpti_ResourceData*>(data);
    if (cbid == CUPTI_CBID_RESOURCE_MODULE_LOADED && rd->resourceDescriptor != nullptr)
      e.value = int64_t(static_cast<const CUpti_ModuleResourceData*>(rd->resourceDescriptor)->cubinSize);
  }
  handler::handle(e);
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
  if (g_subscriber != nullptr) return "warmprof's CUPTI subscriber is already active";
  (void)table::lookup(0, 0);  // build the table (interning names) outside the timed region
  handler::reset_counts();
  const uint64_t t0 = clock::ticks();
  std::string why = subscribe(l, &g_subscriber);
  if (!why.empty()) return why;
  for (CUpti_CallbackDomain d : {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_CB_DOMAIN_RESOURCE}) {
    CUptiResult r = l.enable_domain(1, g_subscriber, d);
    if (r != CUPTI_SUCCESS) {
      l.unsubscribe(g_subscriber);
      g_subscriber = nullptr;
      return "cuptiEnableDomain(" + std::to_string(int(d)) + ") failed: " + result_text(r);
    }
  }
  g_subscribe_ns = double(clock::to_ns(clock::ticks()) - clock::to_ns(t0));
  return "";
}

// No activity kinds are enabled (kernel names come from the launch callback's symbolName), so
// there is no activity buffer of warmprof's to flush; unsubscribing stops every callback. A
// subscription found torn down is not unsubscribed (its handle may name another tool's by now).
std::string stop() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string why;
  std::swap(why, g_torn_down);
  if (g_subscriber == nullptr) return why;
  const Lib l = lib();
  why = probe(l, g_subscriber);
  if (why.empty()) {
    CUptiResult r = l.unsubscribe(g_subscriber);
    if (r != CUPTI_SUCCESS) why = std::string(kTornDown) + " (cuptiUnsubscribe: " + result_text(r) + ")";
  }
  g_subscriber = nullptr;
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
  if (!g_torn_down.empty()) g_subscriber = nullptr;
  return g_torn_down;
}

PassStats stats() {
  PassStats s;
  s.kernel_launches = handler::kernel_launches();
  s.new_kernels = handler::new_kernels();
  s.callbacks = handler::callbacks();
  std::lock_guard<std::mutex> lock(g_mu);
  s.subscribe_ns = g_subscribe_ns;
  return s;
}

int classify(uint32_t domain, uint32_t cbid) {
  const table::Entry* en = table::lookup(domain, cbid);
  return en ? int(en->cause) : -1;
}

std::string callback_name(uint32_t domain, uint32_t cbid) {
  const table::Entry* en = table::lookup(domain, cbid);
  return en ? en->name : "";
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

}  // namespace warmprof::backends::cupti

#include "backends/cupti_table.h"

#include <cupti.h>

#include <array>
#include <string>

#include "core/causes.h"
#include "core/recorder.h"

namespace warmprof::backends::cupti::table {

namespace {

using F = Family;

// Driver-API callbacks warmprof decodes. The ids come from the toolkit's cupti_driver_cbid.h,
// so a renamed or removed callback fails the build instead of silently decoding wrongly.
#define WP_DRIVER(name, family) {CUPTI_DRIVER_TRACE_CBID_##name, #name, family}
struct Row {
  uint32_t cbid;
  const char* name;
  Family family;
};
constexpr Row kDriverRows[] = {
    // runtime_init: driver and context set-up.
    WP_DRIVER(cuInit, F::kRuntimeInit),
    WP_DRIVER(cuCtxCreate, F::kRuntimeInit),
    WP_DRIVER(cuCtxCreate_v2, F::kRuntimeInit),
    WP_DRIVER(cuCtxCreate_v3, F::kRuntimeInit),
    WP_DRIVER(cuCtxCreate_v4, F::kRuntimeInit),
    WP_DRIVER(cuDevicePrimaryCtxRetain, F::kRuntimeInit),
    // runtime_init: module and library loads, and the lookups that lazy loading defers work to.
    WP_DRIVER(cuModuleLoad, F::kModuleLoad),
    WP_DRIVER(cuModuleLoadData, F::kModuleLoad),
    WP_DRIVER(cuModuleLoadDataEx, F::kModuleLoad),
    WP_DRIVER(cuModuleLoadFatBinary, F::kModuleLoad),
    WP_DRIVER(cuModuleGetFunction, F::kModuleLoad),
    WP_DRIVER(cuLibraryLoadData, F::kModuleLoad),
    WP_DRIVER(cuLibraryLoadFromFile, F::kModuleLoad),
    WP_DRIVER(cuLibraryGetModule, F::kModuleLoad),
    WP_DRIVER(cuLibraryGetKernel, F::kModuleLoad),
    WP_DRIVER(cuKernelGetFunction, F::kModuleLoad),
    // Kernel launches: structure spans (counted; first-seen kernels named).
    WP_DRIVER(cuLaunch, F::kLaunch),
    WP_DRIVER(cuLaunchGrid, F::kLaunch),
    WP_DRIVER(cuLaunchGridAsync, F::kLaunch),
    WP_DRIVER(cuLaunchKernel, F::kLaunch),
    WP_DRIVER(cuLaunchKernel_ptsz, F::kLaunch),
    WP_DRIVER(cuLaunchCooperativeKernel, F::kLaunch),
    WP_DRIVER(cuLaunchCooperativeKernel_ptsz, F::kLaunch),
    WP_DRIVER(cuLaunchKernelEx, F::kLaunch),
    WP_DRIVER(cuLaunchKernelEx_ptsz, F::kLaunch),
    // allocator_growth: device, pitched, managed, pinned host, virtual-memory and pool allocations.
    WP_DRIVER(cuMemAlloc, F::kAlloc),
    WP_DRIVER(cuMemAlloc_v2, F::kAlloc),
    WP_DRIVER(cuMemAllocPitch, F::kAlloc),
    WP_DRIVER(cuMemAllocPitch_v2, F::kAlloc),
    WP_DRIVER(cuMemAllocManaged, F::kAlloc),
    WP_DRIVER(cuMemAllocHost, F::kAlloc),
    WP_DRIVER(cuMemAllocHost_v2, F::kAlloc),
    WP_DRIVER(cuMemHostAlloc, F::kAlloc),
    WP_DRIVER(cuMemHostAlloc_v2, F::kAlloc),
    WP_DRIVER(cuMemCreate, F::kAlloc),
    WP_DRIVER(cuMemMap, F::kAlloc),
    WP_DRIVER(cuMemAddressReserve, F::kAlloc),
    WP_DRIVER(cuMemAllocAsync, F::kAlloc),
    WP_DRIVER(cuMemAllocAsync_ptsz, F::kAlloc),
    WP_DRIVER(cuMemAllocFromPoolAsync, F::kAlloc),
    WP_DRIVER(cuMemAllocFromPoolAsync_ptsz, F::kAlloc),
    WP_DRIVER(cuMemPoolCreate, F::kAlloc),
    // graph_capture: stream capture (a span from begin to end), instantiation and upload.
    WP_DRIVER(cuStreamBeginCapture, F::kCaptureBegin),
    WP_DRIVER(cuStreamBeginCapture_ptsz, F::kCaptureBegin),
    WP_DRIVER(cuStreamBeginCapture_v2, F::kCaptureBegin),
    WP_DRIVER(cuStreamBeginCapture_v2_ptsz, F::kCaptureBegin),
    WP_DRIVER(cuStreamBeginCaptureToGraph, F::kCaptureBegin),
    WP_DRIVER(cuStreamBeginCaptureToGraph_ptsz, F::kCaptureBegin),
    WP_DRIVER(cuStreamEndCapture, F::kCaptureEnd),
    WP_DRIVER(cuStreamEndCapture_ptsz, F::kCaptureEnd),
    WP_DRIVER(cuGraphInstantiate, F::kGraph),
    WP_DRIVER(cuGraphInstantiate_v2, F::kGraph),
    WP_DRIVER(cuGraphInstantiateWithFlags, F::kGraph),
    WP_DRIVER(cuGraphInstantiateWithParams, F::kGraph),
    WP_DRIVER(cuGraphInstantiateWithParams_ptsz, F::kGraph),
    WP_DRIVER(cuGraphUpload, F::kGraph),
    WP_DRIVER(cuGraphUpload_ptsz, F::kGraph),
    // data_transfer: host-to-device copies (bytes) and unified-memory prefetch (Jetson).
    WP_DRIVER(cuMemcpyHtoD, F::kCopyToDevice),
    WP_DRIVER(cuMemcpyHtoD_v2, F::kCopyToDevice),
    WP_DRIVER(cuMemcpyHtoD_v2_ptds, F::kCopyToDevice),
    WP_DRIVER(cuMemcpyHtoDAsync, F::kCopyToDevice),
    WP_DRIVER(cuMemcpyHtoDAsync_v2, F::kCopyToDevice),
    WP_DRIVER(cuMemcpyHtoDAsync_v2_ptsz, F::kCopyToDevice),
    WP_DRIVER(cuMemPrefetchAsync, F::kCopyToDevice),
    WP_DRIVER(cuMemPrefetchAsync_ptsz, F::kCopyToDevice),
    WP_DRIVER(cuMemPrefetchAsync_v2, F::kCopyToDevice),
    WP_DRIVER(cuMemPrefetchAsync_v2_ptsz, F::kCopyToDevice),
    WP_DRIVER(cuMemcpy, F::kCopyGeneric),
    WP_DRIVER(cuMemcpy_ptds, F::kCopyGeneric),
    WP_DRIVER(cuMemcpyAsync, F::kCopyGeneric),
    WP_DRIVER(cuMemcpyAsync_ptsz, F::kCopyGeneric),
};
#undef WP_DRIVER

#define WP_RESOURCE(name, family) {CUPTI_CBID_RESOURCE_##name, #name, family}
constexpr Row kResourceRows[] = {
    WP_RESOURCE(CU_INIT_FINISHED, F::kResourceInit),
    WP_RESOURCE(CONTEXT_CREATED, F::kResourceInit),
    WP_RESOURCE(MODULE_LOADED, F::kResourceModule),
};
#undef WP_RESOURCE

uint8_t cause_of(Family f) {
  switch (f) {
    case F::kLaunch: return kStructure;
    case F::kAlloc: return kAllocatorGrowth;
    case F::kCaptureBegin:
    case F::kCaptureEnd:
    case F::kGraph: return kGraphCapture;
    case F::kCopyToDevice:
    case F::kCopyGeneric: return kDataTransfer;
    default: return kRuntimeInit;
  }
}

struct Tables {
  std::array<const Entry*, CUPTI_DRIVER_TRACE_CBID_SIZE> driver{};
  std::array<const Entry*, CUPTI_CBID_RESOURCE_SIZE> resource{};
  std::array<Entry, std::size(kDriverRows) + std::size(kResourceRows)> entries{};
  ExtraNames extra{};
};

template <size_t N, size_t M>
void fill(const Row (&rows)[N], std::array<const Entry*, M>& index, Entry* out) {
  for (size_t i = 0; i < N; ++i) {
    const Row& r = rows[i];
    out[i] = Entry{r.family, cause_of(r.family), recorder::intern(std::string("cupti:") + r.name), r.name};
    if (r.cbid < M) index[r.cbid] = &out[i];
  }
}

const Tables& tables() {
  // Built in place once: the index arrays point into `entries`, so the table never moves.
  static Tables t;
  static const bool built = [] {
    fill(kDriverRows, t.driver, t.entries.data());
    fill(kResourceRows, t.resource, t.entries.data() + std::size(kDriverRows));
    t.extra.stream_capture = recorder::intern("cupti:stream_capture");
    t.extra.lazy_load = recorder::intern("cupti:lazy_load");
    return true;
  }();
  (void)built;
  return t;
}

}  // namespace

const Entry* lookup(uint32_t domain, uint32_t cbid) {
  const Tables& t = tables();
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) return cbid < t.driver.size() ? t.driver[cbid] : nullptr;
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) return cbid < t.resource.size() ? t.resource[cbid] : nullptr;
  return nullptr;
}

const ExtraNames& extra_names() { return tables().extra; }

}  // namespace warmprof::backends::cupti::table

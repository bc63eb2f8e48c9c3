#include "backends/cupti_table.h"

#include <cupti.h>

#include <array>
#include <string>

#include "backends/cupti_compat.h"
#include "core/causes.h"
#include "core/recorder.h"

namespace warmprof::backends::cupti::table {

namespace {

using F = Family;

struct Row {
  uint32_t domain;
  uint32_t cbid;
  const char* name;
  Family family;
  bool bytes;
};

// Whether a family's decoded value is bytes of its own (allocated, copied). Async allocations
// carry the pool's reserved bytes instead (the handler reads growth from them).
constexpr bool counts_bytes(Family f) {
  return f == F::kAlloc || f == F::kCopyToDevice || f == F::kCopyGeneric;
}

// The ids come from the toolkit's headers, so a renamed or removed callback fails the build
// instead of silently decoding wrongly. Ids newer than CUDA 12.0 sit under a
// WARMPROF_CUPTI_SINCE(major, minor) guard (backends/cupti_compat.h), so the table also builds
// against 12.x headers (tests/native/test_builds_against_cuda12_headers.py checks 12.0).
#define WP_DRIVER(name, family) \
  {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_##name, #name, family, counts_bytes(family)}
// A step of a virtual-memory allocation that maps or reserves what cuMemCreate already counted:
// allocator_growth time, no bytes of its own.
#define WP_DRIVER_VMM_STEP(name) {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_##name, #name, F::kAlloc, false}
// Runtime ids carry the version that introduced them (cudaMalloc_v3020); records drop it.
#define WP_RUNTIME(name, version, family) \
  {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_##name##_##version, #name, family, counts_bytes(family)}
#define WP_RESOURCE(name, family) {CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_##name, #name, family, false}

constexpr Row kRows[] = {
    // --- driver API ---------------------------------------------------------------------------
    // runtime_init: driver and context set-up.
    WP_DRIVER(cuInit, F::kRuntimeInit),
    WP_DRIVER(cuCtxCreate, F::kRuntimeInit),
    WP_DRIVER(cuCtxCreate_v2, F::kRuntimeInit),
    WP_DRIVER(cuCtxCreate_v3, F::kRuntimeInit),
#if WARMPROF_CUPTI_SINCE(12, 5)
    WP_DRIVER(cuCtxCreate_v4, F::kRuntimeInit),
#endif
    WP_DRIVER(cuDevicePrimaryCtxRetain, F::kRuntimeInit),
    // Module and library loads: the image decides runtime_init (cubin) or jit_compile (PTX).
    WP_DRIVER(cuModuleLoad, F::kModuleLoad),
    WP_DRIVER(cuModuleLoadData, F::kModuleLoad),
    WP_DRIVER(cuModuleLoadDataEx, F::kModuleLoad),
    WP_DRIVER(cuModuleLoadFatBinary, F::kModuleLoad),
    WP_DRIVER(cuLibraryLoadData, F::kModuleLoad),
    WP_DRIVER(cuLibraryLoadFromFile, F::kModuleLoad),
    // Lookups: timed (lazy loading may defer work into them) but never a load of their own.
    WP_DRIVER(cuModuleGetFunction, F::kModuleLookup),
    WP_DRIVER(cuLibraryGetModule, F::kModuleLookup),
    WP_DRIVER(cuLibraryGetKernel, F::kModuleLookup),
    WP_DRIVER(cuKernelGetFunction, F::kModuleLookup),
    // Queries on one kernel: with lazy loading (CUDA 12.2+ default) the first one loads it.
    WP_DRIVER(cuFuncGetAttribute, F::kKernelQuery),
    WP_DRIVER(cuOccupancyMaxActiveBlocksPerMultiprocessor, F::kKernelQuery),
    WP_DRIVER(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, F::kKernelQuery),
    WP_DRIVER(cuOccupancyMaxPotentialBlockSize, F::kKernelQuery),
    WP_DRIVER(cuOccupancyMaxPotentialBlockSizeWithFlags, F::kKernelQuery),
    WP_DRIVER(cuOccupancyAvailableDynamicSMemPerBlock, F::kKernelQuery),
    WP_DRIVER(cuOccupancyMaxPotentialClusterSize, F::kKernelQuery),
    WP_DRIVER(cuOccupancyMaxActiveClusters, F::kKernelQuery),
    // Kernel launches: counted; a span for a kernel's first launch and for a lazy load.
    WP_DRIVER(cuLaunch, F::kLaunch),
    WP_DRIVER(cuLaunchGrid, F::kLaunch),
    WP_DRIVER(cuLaunchGridAsync, F::kLaunch),
    WP_DRIVER(cuLaunchKernel, F::kLaunch),
    WP_DRIVER(cuLaunchKernel_ptsz, F::kLaunch),
    WP_DRIVER(cuLaunchCooperativeKernel, F::kLaunch),
    WP_DRIVER(cuLaunchCooperativeKernel_ptsz, F::kLaunch),
    WP_DRIVER(cuLaunchKernelEx, F::kLaunch),
    WP_DRIVER(cuLaunchKernelEx_ptsz, F::kLaunch),
    // allocator_growth: device, pitched, managed, pinned host and virtual-memory allocations.
    WP_DRIVER(cuMemAlloc, F::kAlloc),
    WP_DRIVER(cuMemAlloc_v2, F::kAlloc),
    WP_DRIVER(cuMemAllocPitch, F::kAlloc),
    WP_DRIVER(cuMemAllocPitch_v2, F::kAlloc),
    WP_DRIVER(cuMemAllocManaged, F::kAlloc),
    WP_DRIVER(cuMemAllocHost, F::kAlloc),
    WP_DRIVER(cuMemAllocHost_v2, F::kAlloc),
    WP_DRIVER(cuMemHostAlloc, F::kAlloc),
    WP_DRIVER(cuMemHostAlloc_v2, F::kAlloc),
    // Expandable segments: cuMemCreate makes the physical memory (its bytes count once);
    // reserving, mapping and granting access to it are steps of the same growth.
    WP_DRIVER(cuMemCreate, F::kAlloc),
    WP_DRIVER_VMM_STEP(cuMemAddressReserve),
    WP_DRIVER_VMM_STEP(cuMemMap),
    WP_DRIVER_VMM_STEP(cuMemSetAccess),
    WP_DRIVER_VMM_STEP(cuMemPoolCreate),
    // Stream-ordered allocations: a pool hit is not growth (cupti_handler.h).
    WP_DRIVER(cuMemAllocAsync, F::kAllocAsync),
    WP_DRIVER(cuMemAllocAsync_ptsz, F::kAllocAsync),
    WP_DRIVER(cuMemAllocFromPoolAsync, F::kAllocAsync),
    WP_DRIVER(cuMemAllocFromPoolAsync_ptsz, F::kAllocAsync),
    // graph_capture: stream capture (a span from begin to end), instantiation and upload.
    WP_DRIVER(cuStreamBeginCapture, F::kCaptureBegin),
    WP_DRIVER(cuStreamBeginCapture_ptsz, F::kCaptureBegin),
    WP_DRIVER(cuStreamBeginCapture_v2, F::kCaptureBegin),
    WP_DRIVER(cuStreamBeginCapture_v2_ptsz, F::kCaptureBegin),
#if WARMPROF_CUPTI_SINCE(12, 3)
    WP_DRIVER(cuStreamBeginCaptureToGraph, F::kCaptureBegin),
    WP_DRIVER(cuStreamBeginCaptureToGraph_ptsz, F::kCaptureBegin),
#endif
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
#if WARMPROF_CUPTI_SINCE(12, 2)
    WP_DRIVER(cuMemPrefetchAsync_v2, F::kCopyToDevice),
    WP_DRIVER(cuMemPrefetchAsync_v2_ptsz, F::kCopyToDevice),
#endif
    WP_DRIVER(cuMemcpy, F::kCopyGeneric),
    WP_DRIVER(cuMemcpy_ptds, F::kCopyGeneric),
    WP_DRIVER(cuMemcpyAsync, F::kCopyGeneric),
    WP_DRIVER(cuMemcpyAsync_ptsz, F::kCopyGeneric),

    // --- runtime API: what eager PyTorch calls; the driver calls it makes inside are not counted again.
#if WARMPROF_CUPTI_SINCE(12, 2)  // added in 12.1, which kept 12.0's CUPTI_API_VERSION
    WP_RUNTIME(cudaInitDevice, v12000, F::kRuntimeInit),
#endif
#if WARMPROF_CUPTI_SINCE(12, 6)
    WP_RUNTIME(cudaLibraryLoadData, v12060, F::kModuleLoad),
    WP_RUNTIME(cudaLibraryLoadFromFile, v12060, F::kModuleLoad),
#endif
    // Queries on one kernel (the first one may load it lazily).
    WP_RUNTIME(cudaFuncGetAttributes, v3020, F::kKernelQuery),
    WP_RUNTIME(cudaOccupancyMaxActiveBlocksPerMultiprocessor, v6050, F::kKernelQuery),
    WP_RUNTIME(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, v7000, F::kKernelQuery),
    WP_RUNTIME(cudaOccupancyAvailableDynamicSMemPerBlock, v10200, F::kKernelQuery),
    WP_RUNTIME(cudaOccupancyMaxPotentialClusterSize, v11070, F::kKernelQuery),
    WP_RUNTIME(cudaOccupancyMaxActiveClusters, v11070, F::kKernelQuery),
#if WARMPROF_CUPTI_SINCE(12, 3)  // not in 12.0's headers; 12.3's have it
    WP_RUNTIME(cudaGetKernel, v12000, F::kKernelQuery),
#endif
#if WARMPROF_CUPTI_SINCE(13, 0)
    // nvcc 13's <<<...>>> takes the kernel's handle once per call site (crt/host_runtime.h).
    WP_RUNTIME(__cudaGetKernel, v13000, F::kKernelQuery),
#endif
    WP_RUNTIME(cudaLaunchKernel, v7000, F::kLaunch),
    WP_RUNTIME(cudaLaunchKernel_ptsz, v7000, F::kLaunch),
    WP_RUNTIME(cudaLaunchCooperativeKernel, v9000, F::kLaunch),
    WP_RUNTIME(cudaLaunchCooperativeKernel_ptsz, v9000, F::kLaunch),
    WP_RUNTIME(cudaLaunchKernelExC, v11060, F::kLaunch),
    WP_RUNTIME(cudaLaunchKernelExC_ptsz, v11060, F::kLaunch),
#if WARMPROF_CUPTI_SINCE(13, 0)
    // nvcc 13 compiles <<<...>>> to __cudaLaunchKernel(_ptsz) on a cudaKernel_t (crt/host_runtime.h,
    // unless __NV_LEGACY_LAUNCH): a cu13 torch launches its own kernels through these.
    WP_RUNTIME(__cudaLaunchKernel, v13000, F::kLaunch),
    WP_RUNTIME(__cudaLaunchKernel_ptsz, v13000, F::kLaunch),
#endif
    WP_RUNTIME(cudaMalloc, v3020, F::kAlloc),
    WP_RUNTIME(cudaMallocPitch, v3020, F::kAlloc),
    WP_RUNTIME(cudaMallocHost, v3020, F::kAlloc),
    WP_RUNTIME(cudaHostAlloc, v3020, F::kAlloc),
    WP_RUNTIME(cudaMallocManaged, v6000, F::kAlloc),
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemPoolCreate_v11020, "cudaMemPoolCreate", F::kAlloc, false},
    WP_RUNTIME(cudaMallocAsync, v11020, F::kAllocAsync),
    WP_RUNTIME(cudaMallocAsync_ptsz, v11020, F::kAllocAsync),
    WP_RUNTIME(cudaMallocFromPoolAsync, v11020, F::kAllocAsync),
    WP_RUNTIME(cudaMallocFromPoolAsync_ptsz, v11020, F::kAllocAsync),
    WP_RUNTIME(cudaStreamBeginCapture, v10000, F::kCaptureBegin),
    WP_RUNTIME(cudaStreamBeginCapture_ptsz, v10000, F::kCaptureBegin),
#if WARMPROF_CUPTI_SINCE(12, 3)
    WP_RUNTIME(cudaStreamBeginCaptureToGraph, v12030, F::kCaptureBegin),
    WP_RUNTIME(cudaStreamBeginCaptureToGraph_ptsz, v12030, F::kCaptureBegin),
#endif
    WP_RUNTIME(cudaStreamEndCapture, v10000, F::kCaptureEnd),
    WP_RUNTIME(cudaStreamEndCapture_ptsz, v10000, F::kCaptureEnd),
    WP_RUNTIME(cudaGraphInstantiate, v10000, F::kGraph),
    WP_RUNTIME(cudaGraphInstantiate, v12000, F::kGraph),
    WP_RUNTIME(cudaGraphInstantiateWithFlags, v11040, F::kGraph),
    WP_RUNTIME(cudaGraphInstantiateWithParams, v12000, F::kGraph),
    WP_RUNTIME(cudaGraphInstantiateWithParams_ptsz, v12000, F::kGraph),
    WP_RUNTIME(cudaGraphUpload, v10000, F::kGraph),
    WP_RUNTIME(cudaGraphUpload_ptsz, v10000, F::kGraph),
    WP_RUNTIME(cudaMemPrefetchAsync, v8000, F::kCopyToDevice),
    WP_RUNTIME(cudaMemPrefetchAsync_ptsz, v8000, F::kCopyToDevice),
#if WARMPROF_CUPTI_SINCE(13, 0)
    WP_RUNTIME(cudaMemPrefetchAsync, v12020, F::kCopyToDevice),
    WP_RUNTIME(cudaMemPrefetchAsync_ptsz, v12020, F::kCopyToDevice),
#elif WARMPROF_CUPTI_SINCE(12, 2)  // the same ids (449, 450): CUDA 12.x names them _v2, 13 dropped it
    WP_RUNTIME(cudaMemPrefetchAsync_v2, v12020, F::kCopyToDevice),
    WP_RUNTIME(cudaMemPrefetchAsync_v2_ptsz, v12020, F::kCopyToDevice),
#endif
    WP_RUNTIME(cudaMemcpy, v3020, F::kCopyGeneric),
    WP_RUNTIME(cudaMemcpy_ptds, v7000, F::kCopyGeneric),
    WP_RUNTIME(cudaMemcpyAsync, v3020, F::kCopyGeneric),
    WP_RUNTIME(cudaMemcpyAsync_ptsz, v7000, F::kCopyGeneric),
    WP_RUNTIME(cudaMemcpyToSymbol, v3020, F::kCopyGeneric),
    WP_RUNTIME(cudaMemcpyToSymbol_ptds, v7000, F::kCopyGeneric),
    WP_RUNTIME(cudaMemcpyToSymbolAsync, v3020, F::kCopyGeneric),
    WP_RUNTIME(cudaMemcpyToSymbolAsync_ptsz, v7000, F::kCopyGeneric),

    // --- resource events ------------------------------------------------------------------------
    WP_RESOURCE(CU_INIT_FINISHED, F::kResourceInit),
    WP_RESOURCE(CONTEXT_CREATED, F::kResourceInit),
    WP_RESOURCE(MODULE_LOADED, F::kResourceModule),
};
#undef WP_DRIVER
#undef WP_DRIVER_VMM_STEP
#undef WP_RUNTIME
#undef WP_RESOURCE

constexpr size_t kNumRows = std::size(kRows);

uint8_t cause_of(Family f) {
  switch (f) {
    case F::kLaunch: return kStructure;
    case F::kAlloc:
    case F::kAllocAsync: return kAllocatorGrowth;
    case F::kCaptureBegin:
    case F::kCaptureEnd:
    case F::kGraph: return kGraphCapture;
    case F::kCopyToDevice:
    case F::kCopyGeneric: return kDataTransfer;
    default: return kRuntimeInit;
  }
}

Op op_of(Family f) {
  switch (f) {
    case F::kRuntimeInit: return Op::kInit;
    case F::kModuleLoad: return Op::kLoad;
    case F::kModuleLookup:
    case F::kKernelQuery: return Op::kLookup;
    case F::kLaunch: return Op::kLaunch;
    case F::kAlloc: return Op::kAlloc;
    case F::kAllocAsync: return Op::kAllocAsync;
    case F::kCaptureBegin:
    case F::kCaptureEnd: return Op::kCapture;
    case F::kGraph: return Op::kGraph;
    case F::kCopyToDevice:
    case F::kCopyGeneric: return Op::kCopy;
    default: return Op::kResource;
  }
}

struct Tables {
  std::array<const Entry*, CUPTI_DRIVER_TRACE_CBID_SIZE> driver{};
  std::array<const Entry*, CUPTI_RUNTIME_TRACE_CBID_SIZE> runtime{};
  std::array<const Entry*, CUPTI_CBID_RESOURCE_SIZE> resource{};
  std::array<Entry, kNumRows> entries{};
  std::array<Key, kNumRows> keys{};
  size_t num_keys = 0;
  ExtraNames extra{};
};

template <size_t M>
void index(std::array<const Entry*, M>& index, const Entry* e) {
  if (e->cbid < M) index[e->cbid] = e;
}

const Tables& tables() {
  // Built in place once: the index arrays point into `entries`, so the table never moves.
  static Tables t;
  static const bool built = [] {
    for (size_t i = 0; i < kNumRows; ++i) {
      const Row& r = kRows[i];
      Entry& e = t.entries[i];
      e = Entry{r.family, op_of(r.family), cause_of(r.family), r.bytes, r.domain, r.cbid,
                recorder::intern(std::string("cupti:") + r.name), r.name};
      if (r.domain == CUPTI_CB_DOMAIN_DRIVER_API) index(t.driver, &e);
      if (r.domain == CUPTI_CB_DOMAIN_RUNTIME_API) index(t.runtime, &e);
      if (r.domain == CUPTI_CB_DOMAIN_RESOURCE) index(t.resource, &e);
      t.keys[t.num_keys++] = Key{r.domain, r.cbid};
    }
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
  switch (domain) {
    case CUPTI_CB_DOMAIN_DRIVER_API: return cbid < t.driver.size() ? t.driver[cbid] : nullptr;
    case CUPTI_CB_DOMAIN_RUNTIME_API: return cbid < t.runtime.size() ? t.runtime[cbid] : nullptr;
    case CUPTI_CB_DOMAIN_RESOURCE: return cbid < t.resource.size() ? t.resource[cbid] : nullptr;
    default: return nullptr;
  }
}

const Key* mapped(size_t* count) {
  const Tables& t = tables();
  *count = t.num_keys;
  return t.keys.data();
}

const ExtraNames& extra_names() { return tables().extra; }

}  // namespace warmprof::backends::cupti::table

#include "backends/cupti_decode.h"

#include <atomic>

#include "backends/cuda_driver.h"
#include "backends/cuda_image.h"
#include "backends/cupti_compat.h"

namespace warmprof::backends::cupti::decode {

namespace {

#define WP_BYTES(cbid_name, field) \
  case CUPTI_DRIVER_TRACE_CBID_##cbid_name: \
    return int64_t(static_cast<const cbid_name##_params*>(p)->field)

// Bytes a driver call allocates or copies, read from its parameter struct; 0 when it carries none.
// (The table says which calls count them: a cuMemMap maps bytes cuMemCreate already counted.)
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

// The runtime's parameter structs share their leading members across a call's variants
// (_ptds/_ptsz, and the v8000 and v12020 cudaMemPrefetchAsync): read through these prefixes.
struct SizeSecond {  // cudaMalloc, cudaMallocHost, cudaHostAlloc, cudaMallocManaged, cudaMemPrefetchAsync
  const void* first;
  size_t size;
};
struct CopyPrefix {  // cudaMemcpy(_ptds), cudaMemcpyAsync(_ptsz)
  void* dst;
  const void* src;
  size_t count;
  enum cudaMemcpyKind kind;
};
struct SymbolCopyPrefix {  // cudaMemcpyToSymbol(_ptds), cudaMemcpyToSymbolAsync(_ptsz)
  const void* symbol;
  const void* src;
  size_t count;
  size_t offset;
  enum cudaMemcpyKind kind;
};

#define WP_RT(name) CUPTI_RUNTIME_TRACE_CBID_##name

bool is_symbol_copy(uint32_t cbid) {
  return cbid == WP_RT(cudaMemcpyToSymbol_v3020) || cbid == WP_RT(cudaMemcpyToSymbol_ptds_v7000) ||
         cbid == WP_RT(cudaMemcpyToSymbolAsync_v3020) || cbid == WP_RT(cudaMemcpyToSymbolAsync_ptsz_v7000);
}

int64_t runtime_bytes_of(uint32_t cbid, const void* p) {
  if (p == nullptr) return 0;
  switch (cbid) {
    case WP_RT(cudaMalloc_v3020):
    case WP_RT(cudaMallocHost_v3020):
    case WP_RT(cudaHostAlloc_v3020):
    case WP_RT(cudaMallocManaged_v6000):
    case WP_RT(cudaMemPrefetchAsync_v8000):
    case WP_RT(cudaMemPrefetchAsync_ptsz_v8000):
#if WARMPROF_CUPTI_SINCE(13, 0)
    case WP_RT(cudaMemPrefetchAsync_v12020):
    case WP_RT(cudaMemPrefetchAsync_ptsz_v12020):
#elif WARMPROF_CUPTI_SINCE(12, 2)  // the same ids, named _v2 before CUDA 13
    case WP_RT(cudaMemPrefetchAsync_v2_v12020):
    case WP_RT(cudaMemPrefetchAsync_v2_ptsz_v12020):
#endif
      return int64_t(static_cast<const SizeSecond*>(p)->size);
    case WP_RT(cudaMallocPitch_v3020): {
      auto* a = static_cast<const cudaMallocPitch_v3020_params*>(p);
      return int64_t(a->width) * int64_t(a->height);
    }
    case WP_RT(cudaMemcpy_v3020):
    case WP_RT(cudaMemcpy_ptds_v7000):
    case WP_RT(cudaMemcpyAsync_v3020):
    case WP_RT(cudaMemcpyAsync_ptsz_v7000):
      return int64_t(static_cast<const CopyPrefix*>(p)->count);
    default:
      return is_symbol_copy(cbid) ? int64_t(static_cast<const SymbolCopyPrefix*>(p)->count) : 0;
  }
}

// The launched function: the CUfunction for driver launches, the runtime's host-side entry for
// runtime launches (equal values are the same kernel either way).
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

uintptr_t runtime_kernel_of(uint32_t cbid, const void* p) {
  if (p == nullptr) return 0;
  switch (cbid) {
    case WP_RT(cudaLaunchKernelExC_v11060):
    case WP_RT(cudaLaunchKernelExC_ptsz_v11060):
      return reinterpret_cast<uintptr_t>(static_cast<const cudaLaunchKernelExC_v11060_params*>(p)->func);
    case WP_RT(cudaLaunchKernel_v7000):
    case WP_RT(cudaLaunchKernel_ptsz_v7000):
    case WP_RT(cudaLaunchCooperativeKernel_v9000):
    case WP_RT(cudaLaunchCooperativeKernel_ptsz_v9000):
      // `const void* func` is the first member of each of these structs.
      return reinterpret_cast<uintptr_t>(*static_cast<const void* const*>(p));
#if WARMPROF_CUPTI_SINCE(13, 0)
    case WP_RT(__cudaLaunchKernel_v13000):
    case WP_RT(__cudaLaunchKernel_ptsz_v13000):
      // No params struct in the CUDA 13.0 meta header: where CUPTI passes any, the call's first
      // argument is the kernel's cudaKernel_t handle (crt/host_runtime.h), read as the first
      // pointer; where it passes none, api() falls back to the symbol name. Unproven on a GPU.
      return reinterpret_cast<uintptr_t>(*static_cast<const void* const*>(p));
#endif
    default: return 0;
  }
}

// The kernel a query is about (kKernelQuery): the CUfunction or the runtime's host-side entry.
uintptr_t queried_kernel_of(uint32_t domain, uint32_t cbid, const void* p) {
  if (p == nullptr) return 0;
  const auto ptr = [](const void* v) { return reinterpret_cast<uintptr_t>(v); };
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    switch (cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuFuncGetAttribute: return ptr(static_cast<const cuFuncGetAttribute_params*>(p)->hfunc);
      case CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxPotentialBlockSize:
        return ptr(static_cast<const cuOccupancyMaxPotentialBlockSize_params*>(p)->func);
      case CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxPotentialBlockSizeWithFlags:
        return ptr(static_cast<const cuOccupancyMaxPotentialBlockSizeWithFlags_params*>(p)->func);
      case CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxActiveBlocksPerMultiprocessor:
      case CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags:
      case CUPTI_DRIVER_TRACE_CBID_cuOccupancyAvailableDynamicSMemPerBlock:
      case CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxPotentialClusterSize:
      case CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxActiveClusters:
        // {an out pointer, CUfunction func, ...}: the function is the second member of each.
        return ptr(static_cast<const cuOccupancyMaxActiveClusters_params*>(p)->func);
      default: return 0;
    }
  }
  switch (cbid) {
    case WP_RT(cudaFuncGetAttributes_v3020): return ptr(static_cast<const cudaFuncGetAttributes_v3020_params*>(p)->func);
#if WARMPROF_CUPTI_SINCE(12, 3)
    case WP_RT(cudaGetKernel_v12000): return ptr(static_cast<const cudaGetKernel_v12000_params*>(p)->entryFuncAddr);
#endif
    case WP_RT(cudaOccupancyMaxActiveBlocksPerMultiprocessor_v6050):
    case WP_RT(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000):
    case WP_RT(cudaOccupancyAvailableDynamicSMemPerBlock_v10200):
    case WP_RT(cudaOccupancyMaxPotentialClusterSize_v11070):
    case WP_RT(cudaOccupancyMaxActiveClusters_v11070):
      // {an out pointer, const void* func, ...}: the function is the second member of each.
      return ptr(static_cast<const cudaOccupancyMaxActiveClusters_v11070_params*>(p)->func);
    default: return 0;
  }
}

// A kernel known only by its symbol name (a call CUPTI passes no parameters for, such as nvcc 13's
// __cudaLaunchKernel): FNV-1a of the name, top bit set, so that it cannot equal a small injected
// value, and never 0 (unknown). Bounded like the names the handler keeps.
uintptr_t symbol_key(const char* name) {
  if (name == nullptr || name[0] == '\0') return 0;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; name[i] != '\0' && i < 4096; ++i) h = (h ^ uint8_t(name[i])) * 1099511628211ull;
  return uintptr_t(h | (uint64_t(1) << 63));
}

// Unified addresses: the memory type of an address, 0 when the driver does not know it
// (unregistered host memory).
unsigned int memory_type(const cuda_driver::Api* api, const void* ptr) {
  unsigned int type = 0;
  if (api->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CUdeviceptr(ptr)) != CUDA_SUCCESS) return 0;
  return type;
}

// Host-to-device: the destination is device memory, the source host memory (registered or not).
bool device_from_host(const cuda_driver::Api* api, const void* dst, const void* src) {
  if (memory_type(api, dst) != CU_MEMORYTYPE_DEVICE) return false;
  const unsigned int from = memory_type(api, src);
  return from == 0 || from == CU_MEMORYTYPE_HOST;
}

// cuMemcpy/cuMemcpyAsync take unified addresses.
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
  return device_from_host(api, reinterpret_cast<const void*>(dst), reinterpret_cast<const void*>(src));
}

// The runtime's copies name their direction; cudaMemcpyDefault leaves it to the addresses (a
// symbol is device memory).
bool runtime_host_to_device(uint32_t cbid, const void* p) {
  if (p == nullptr) return false;
  const bool symbol = is_symbol_copy(cbid);
  const cudaMemcpyKind kind = symbol ? static_cast<const SymbolCopyPrefix*>(p)->kind : static_cast<const CopyPrefix*>(p)->kind;
  if (kind == cudaMemcpyHostToDevice) return true;
  if (kind != cudaMemcpyDefault) return false;
  const cuda_driver::Api* api = cuda_driver::api(nullptr);
  if (api == nullptr) return false;
  if (symbol) {
    const unsigned int from = memory_type(api, static_cast<const SymbolCopyPrefix*>(p)->src);
    return from == 0 || from == CU_MEMORYTYPE_HOST;
  }
  auto* a = static_cast<const CopyPrefix*>(p);
  return device_from_host(api, a->dst, a->src);
}

// The device's compute capability (major*10+minor) for fatbin decoding; 0 when unknown. Read from
// the driver at start() (cache_arch), never inside a callback: a callback that calls the driver can
// take a lock the calling thread already holds inside its own driver call. The callback does not
// know which device loads (that too would need the driver), so the architecture is the devices' one
// when they all share it, else unknown (0: a fatbin holding any cubin reads as a cubin load).
std::atomic<int> g_arch{0};
std::atomic<int> g_arch_override{-1};  // test-only (set_arch_override)

int device_arch() {
  const int forced = g_arch_override.load(std::memory_order_relaxed);
  return forced >= 0 ? forced : g_arch.load(std::memory_order_relaxed);
}

// What a load call loads: its image in memory, or its file.
cuda_image::Kind image_of(const table::Entry& en, const void* p) {
  if (p == nullptr) return cuda_image::Kind::kUnknown;
  const int arch = device_arch();
  using cuda_image::of_file;
  using cuda_image::of_memory;
  if (en.domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    switch (en.cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuModuleLoad: return of_file(static_cast<const cuModuleLoad_params*>(p)->fname, arch);
      case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData:
        return of_memory(static_cast<const cuModuleLoadData_params*>(p)->image, 0, arch);
      case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx:
        return of_memory(static_cast<const cuModuleLoadDataEx_params*>(p)->image, 0, arch);
      case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary:
        return of_memory(static_cast<const cuModuleLoadFatBinary_params*>(p)->fatCubin, 0, arch);
      case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData:
        return of_memory(static_cast<const cuLibraryLoadData_params*>(p)->code, 0, arch);
      case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile:
        return of_file(static_cast<const cuLibraryLoadFromFile_params*>(p)->fileName, arch);
      default: return cuda_image::Kind::kUnknown;
    }
  }
#if WARMPROF_CUPTI_SINCE(12, 6)
  if (en.cbid == WP_RT(cudaLibraryLoadData_v12060))
    return of_memory(static_cast<const cudaLibraryLoadData_v12060_params*>(p)->code, 0, arch);
  if (en.cbid == WP_RT(cudaLibraryLoadFromFile_v12060))
    return of_file(static_cast<const cudaLibraryLoadFromFile_v12060_params*>(p)->fileName, arch);
#endif
  return cuda_image::Kind::kUnknown;
}

// The pool a stream-ordered allocation draws from: the one it names, else the current device's
// current pool (what cuMemAllocAsync/cudaMallocAsync use).
CUmemoryPool pool_of(const cuda_driver::Api* api, const table::Entry& en, const void* p) {
  if (p == nullptr) return nullptr;
  if (en.domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    if (en.cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync)
      return static_cast<const cuMemAllocFromPoolAsync_params*>(p)->pool;
    if (en.cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz)
      return static_cast<const cuMemAllocFromPoolAsync_ptsz_params*>(p)->pool;
  } else if (en.cbid == WP_RT(cudaMallocFromPoolAsync_v11020) || en.cbid == WP_RT(cudaMallocFromPoolAsync_ptsz_v11020)) {
    return reinterpret_cast<CUmemoryPool>(static_cast<const cudaMallocFromPoolAsync_v11020_params*>(p)->memPool);
  }
  CUdevice dev = 0;
  CUmemoryPool pool = nullptr;
  if (api->cuCtxGetDevice == nullptr || api->cuDeviceGetMemPool == nullptr ||
      api->cuCtxGetDevice(&dev) != CUDA_SUCCESS || api->cuDeviceGetMemPool(&pool, dev) != CUDA_SUCCESS)
    return nullptr;
  return pool;
}

// The pool's reserved bytes now (-1 unknown). Enter and exit each read it: the handler takes a
// rise as growth; the pool is found once, at enter, and kept in CUPTI's per-call correlationData.
int64_t pool_reserved(const table::Entry& en, const CUpti_CallbackData* cb) {
  const cuda_driver::Api* api = cuda_driver::api(nullptr);
  if (api == nullptr || api->cuMemPoolGetAttribute == nullptr) return -1;
  CUmemoryPool pool = nullptr;
  if (cb->callbackSite == CUPTI_API_ENTER || cb->correlationData == nullptr) {
    pool = pool_of(api, en, cb->functionParams);
    if (cb->correlationData != nullptr) *cb->correlationData = reinterpret_cast<uint64_t>(pool);
  } else {
    pool = reinterpret_cast<CUmemoryPool>(*cb->correlationData);
  }
  cuuint64_t reserved = 0;
  if (pool == nullptr || api->cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS)
    return -1;
  return int64_t(reserved);
}
#undef WP_RT

}  // namespace

handler::Event api(const table::Entry& en, const CUpti_CallbackData* cb, uint64_t ticks, bool* skip) {
  handler::Event e;
  e.domain = en.domain;
  e.cbid = en.cbid;
  e.ticks = ticks;
  e.enter = cb->callbackSite == CUPTI_API_ENTER;
  // CUresult and cudaError_t alike: 0 is success.
  if (!e.enter && cb->functionReturnValue != nullptr) e.failed = *static_cast<const int*>(cb->functionReturnValue) != 0;
  const bool driver = en.domain == CUPTI_CB_DOMAIN_DRIVER_API;
  const void* p = cb->functionParams;
  switch (en.family) {
    case table::Family::kLaunch:
      e.kernel = driver ? kernel_of(en.cbid, p) : runtime_kernel_of(en.cbid, p);
      e.kernel_name = cb->symbolName;
      if (e.kernel == 0) e.kernel = symbol_key(cb->symbolName);  // no parameters: the name says which
      break;
    case table::Family::kKernelQuery:
      e.kernel = queried_kernel_of(en.domain, en.cbid, p);
      if (e.kernel == 0) e.kernel = symbol_key(cb->symbolName);
      break;
    case table::Family::kModuleLoad:
      if (e.enter) e.image = uint8_t(image_of(en, p));  // the exit closes the span the enter opened
      break;
    case table::Family::kAllocAsync:
      e.value = pool_reserved(en, cb);
      break;
    case table::Family::kCopyGeneric:
      e.value = driver ? bytes_of(en.cbid, p) : runtime_bytes_of(en.cbid, p);
      // Decide the direction once, at enter; CUPTI keeps correlationData for the matching exit.
      if (cb->correlationData == nullptr) {
        *skip = !(driver ? host_to_device(en.cbid, p) : runtime_host_to_device(en.cbid, p));
      } else {
        if (e.enter) *cb->correlationData = (driver ? host_to_device(en.cbid, p) : runtime_host_to_device(en.cbid, p)) ? 1 : 0;
        *skip = *cb->correlationData == 0;
      }
      break;
    default:
      e.value = driver ? bytes_of(en.cbid, p) : runtime_bytes_of(en.cbid, p);
  }
  return e;
}

handler::Event resource(const table::Entry& en, const CUpti_ResourceData* rd, uint64_t ticks) {
  handler::Event e;
  e.domain = en.domain;
  e.cbid = en.cbid;
  e.ticks = ticks;
  if (en.cbid == CUPTI_CBID_RESOURCE_MODULE_LOADED && rd->resourceDescriptor != nullptr) {
    auto* m = static_cast<const CUpti_ModuleResourceData*>(rd->resourceDescriptor);
    e.value = int64_t(m->cubinSize);
    e.image = uint8_t(cuda_image::of_memory(m->pCubin, m->cubinSize, device_arch()));
  }
  return e;
}

void set_arch_override(int arch) { g_arch_override.store(arch, std::memory_order_relaxed); }

void cache_arch() {
  const cuda_driver::Api* api = cuda_driver::api(nullptr);
  int arch = 0, count = 0;
  if (api != nullptr && api->cuDeviceGetAttribute != nullptr && api->cuDeviceGetCount != nullptr &&
      api->cuDeviceGetCount(&count) == CUDA_SUCCESS) {
    for (CUdevice dev = 0; dev < count; ++dev) {
      int major = 0, minor = 0;
      if (api->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
          api->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS) {
        arch = 0;
        break;
      }
      const int a = major * 10 + minor;
      if (dev > 0 && a != arch) {  // devices of different architectures: which one loads is not known
        arch = 0;
        break;
      }
      arch = a;
    }
  }
  g_arch.store(arch, std::memory_order_relaxed);
}

}  // namespace warmprof::backends::cupti::decode

// The CUDA driver, opened at run time (XLA cupti_stub habit): a function-local static handle,
// every entry point resolved with dlsym, every failure kept as a reason string.
#pragma once
#include <cuda.h>

#include <string>

namespace warmprof::backends::cuda_driver {

struct Api {
  CUresult (*cuInit)(unsigned int) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuPointerGetAttribute)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned int) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  // The context a stream belongs to, made current around event calls (events are per context).
  CUresult (*cuStreamGetCtx)(CUstream, CUcontext*) = nullptr;
  CUresult (*cuCtxPushCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxPopCurrent)(CUcontext*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDevicePrimaryCtxGetState)(CUdevice, unsigned int*, int*) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;  // optional: nullptr when absent
  // Optional (nullptr when the driver lacks them; their users then say "unknown"): the device's
  // architecture for fatbin decoding and its memory pool's reservation for stream-ordered allocations.
  CUresult (*cuCtxGetDevice)(CUdevice*) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*cuDeviceGetMemPool)(CUmemoryPool*, CUdevice) = nullptr;
  CUresult (*cuMemPoolGetAttribute)(CUmemoryPool, CUmemPool_attribute, void*) = nullptr;
};

// Loads libcuda once, calls cuInit(0) and counts devices. nullptr with `reason` set on failure.
const Api* api(std::string* reason);

// "CUDA_ERROR_...: text" for a driver result (the code alone when the driver is absent).
std::string error_text(CUresult r);

// The CUDA version the driver supports (12040 for 12.4), 0 when unknown or no driver.
int driver_version();

}  // namespace warmprof::backends::cuda_driver

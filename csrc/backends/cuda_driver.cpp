#include "backends/cuda_driver.h"

#include <dlfcn.h>

#include <initializer_list>

namespace warmprof::backends::cuda_driver {

namespace {
struct Loaded {
  Api api;
  bool ok = false;
  std::string reason;
};

// The first of `names` that libcuda exports (newer drivers add _v2 entry points).
template <typename F>
bool resolve(void* lib, std::initializer_list<const char*> names, F* out, std::string* reason) {
  for (const char* name : names) {
    *out = reinterpret_cast<F>(dlsym(lib, name));
    if (*out != nullptr) return true;
  }
  const char* e = dlerror();
  *reason = std::string("libcuda has no ") + *names.begin() + (e ? std::string(": ") + e : "");
  return false;
}

template <typename F>
void resolve_optional(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
}

Loaded load() {
  Loaded l;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    l.reason = std::string("no NVIDIA driver: ") + (e ? e : "dlopen(libcuda.so.1) failed");
    return l;
  }
  Api& a = l.api;
  if (!resolve(lib, {"cuInit"}, &a.cuInit, &l.reason) ||
      !resolve(lib, {"cuDeviceGetCount"}, &a.cuDeviceGetCount, &l.reason) ||
      !resolve(lib, {"cuGetErrorString"}, &a.cuGetErrorString, &l.reason) ||
      !resolve(lib, {"cuCtxGetCurrent"}, &a.cuCtxGetCurrent, &l.reason) ||
      !resolve(lib, {"cuPointerGetAttribute"}, &a.cuPointerGetAttribute, &l.reason) ||
      !resolve(lib, {"cuEventCreate"}, &a.cuEventCreate, &l.reason) ||
      !resolve(lib, {"cuEventDestroy_v2", "cuEventDestroy"}, &a.cuEventDestroy, &l.reason) ||
      !resolve(lib, {"cuEventRecord"}, &a.cuEventRecord, &l.reason) ||
      !resolve(lib, {"cuEventSynchronize"}, &a.cuEventSynchronize, &l.reason) ||
      !resolve(lib, {"cuEventElapsedTime_v2", "cuEventElapsedTime"}, &a.cuEventElapsedTime,
               &l.reason) ||
      !resolve(lib, {"cuStreamGetCtx"}, &a.cuStreamGetCtx, &l.reason) ||
      !resolve(lib, {"cuCtxPushCurrent_v2"}, &a.cuCtxPushCurrent, &l.reason) ||
      !resolve(lib, {"cuCtxPopCurrent_v2"}, &a.cuCtxPopCurrent, &l.reason) ||
      !resolve(lib, {"cuDeviceGet"}, &a.cuDeviceGet, &l.reason) ||
      !resolve(lib, {"cuDevicePrimaryCtxGetState"}, &a.cuDevicePrimaryCtxGetState, &l.reason) ||
      !resolve(lib, {"cuDevicePrimaryCtxRetain"}, &a.cuDevicePrimaryCtxRetain, &l.reason) ||
      !resolve(lib, {"cuDevicePrimaryCtxRelease_v2"}, &a.cuDevicePrimaryCtxRelease, &l.reason)) {
    return l;
  }
  resolve_optional(lib, "cuDriverGetVersion", &a.cuDriverGetVersion);
  resolve_optional(lib, "cuCtxGetDevice", &a.cuCtxGetDevice);
  resolve_optional(lib, "cuDeviceGetAttribute", &a.cuDeviceGetAttribute);
  resolve_optional(lib, "cuDeviceGetMemPool", &a.cuDeviceGetMemPool);
  resolve_optional(lib, "cuMemPoolGetAttribute", &a.cuMemPoolGetAttribute);
  CUresult r = a.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* s = nullptr;
    a.cuGetErrorString(r, &s);
    l.reason = std::string("cuInit failed: ") + (s ? s : "unknown error");
    return l;
  }
  int n = 0;
  r = a.cuDeviceGetCount(&n);
  if (r != CUDA_SUCCESS || n == 0) {
    l.reason = "the CUDA driver loaded but reports no device";
    return l;
  }
  l.ok = true;
  return l;
}
}  // namespace

const Api* api(std::string* reason) {
  static Loaded loaded = load();
  if (!loaded.ok) {
    if (reason) *reason = loaded.reason;
    return nullptr;
  }
  if (reason) reason->clear();
  return &loaded.api;
}

std::string error_text(CUresult r) {
  const Api* a = api(nullptr);
  const char* s = nullptr;
  if (a != nullptr) a->cuGetErrorString(r, &s);
  return "CUresult " + std::to_string(int(r)) + (s ? std::string(": ") + s : "");
}

int driver_version() {
  const Api* a = api(nullptr);
  int v = 0;
  if (a == nullptr || a->cuDriverGetVersion == nullptr || a->cuDriverGetVersion(&v) != CUDA_SUCCESS) return 0;
  return v;
}

}  // namespace warmprof::backends::cuda_driver

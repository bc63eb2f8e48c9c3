#include "backends/cuda_driver.h"

#include <dlfcn.h>

namespace warmprof::backends::cuda_driver {

namespace {
struct Loaded {
  Api api;
  bool ok = false;
  std::string reason;
};

template <typename F>
bool resolve(void* lib, const char* name, F* out, std::string* reason) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (*out == nullptr) {
    const char* e = dlerror();
    *reason = std::string("libcuda has no ") + name + (e ? std::string(": ") + e : "");
    return false;
  }
  return true;
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
  if (!resolve(lib, "cuInit", &a.cuInit, &l.reason) ||
      !resolve(lib, "cuDeviceGetCount", &a.cuDeviceGetCount, &l.reason) ||
      !resolve(lib, "cuGetErrorString", &a.cuGetErrorString, &l.reason) ||
      !resolve(lib, "cuEventCreate", &a.cuEventCreate, &l.reason) ||
      !resolve(lib, "cuEventDestroy_v2", &a.cuEventDestroy, &l.reason) ||
      !resolve(lib, "cuEventRecord", &a.cuEventRecord, &l.reason) ||
      !resolve(lib, "cuEventSynchronize", &a.cuEventSynchronize, &l.reason) ||
      !resolve(lib, "cuEventElapsedTime", &a.cuEventElapsedTime, &l.reason)) {
    return l;
  }
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

}  // namespace warmprof::backends::cuda_driver

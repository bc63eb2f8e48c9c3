#include "backends/cupti_loader.h"

#include <dlfcn.h>

#include <initializer_list>
#include <mutex>

#include "backends/cuda_driver.h"

namespace warmprof::backends::cupti {

namespace {

template <typename F>
bool resolve(void* h, const char* name, F* out, std::string* reason) {
  *out = reinterpret_cast<F>(dlsym(h, name));
  if (*out != nullptr) return true;
  const char* e = dlerror();
  *reason = std::string("libcupti has no ") + name + (e ? std::string(": ") + e : "");
  return false;
}

// An entry point warmprof can do without: nullptr when absent, and no reason kept.
template <typename F>
void resolve_optional(void* h, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(h, name));
  if (*out == nullptr) dlerror();  // clear it, so a later failure reports its own text
}

}  // namespace

Lib load() {
  Lib l;
  std::string why;
  if (cuda_driver::api(&why) == nullptr) {
    l.reason = why;
    return l;
  }
  void* h = nullptr;
  for (const char* name : {"libcupti.so", "libcupti.so.13", "libcupti.so.12"}) {
    h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (h) break;
  }
  if (h == nullptr) {
    const char* e = dlerror();
    l.reason = std::string("libcupti not found (add the CUDA toolkit's lib64 or extras/CUPTI/lib64 to "
                           "LD_LIBRARY_PATH): ") + (e ? e : "dlopen failed");
    return l;
  }
#if WARMPROF_CUPTI_SINCE(13, 0)
  resolve_optional(h, "cuptiSubscribe_v2", &l.subscribe_v2);
#endif
  resolve_optional(h, "cuptiEnableCallback", &l.enable_callback);
  resolve_optional(h, "cuptiGetVersion", &l.get_version);
  l.ok = resolve(h, "cuptiSubscribe", &l.subscribe, &l.reason) &&
         resolve(h, "cuptiUnsubscribe", &l.unsubscribe, &l.reason) &&
         resolve(h, "cuptiEnableDomain", &l.enable_domain, &l.reason) &&
         resolve(h, "cuptiGetResultString", &l.result_string, &l.reason);
  return l;
}

// A missing libcupti is retried on later calls: torch's CUDA wheels load their own
// libcupti.so.12/.13 when torch is imported, after which dlopen by soname finds it. A missing
// driver or symbol is final.
bool retryable(const Lib& l) { return !l.ok && l.reason.rfind("libcupti not found", 0) == 0; }

Lib lib() {
  static std::mutex mu;
  static Lib l;
  static bool loaded = false;
  std::lock_guard<std::mutex> lock(mu);
  if (!loaded || retryable(l)) {
    l = load();
    loaded = true;
  }
  return l;
}

std::string result_text(CUptiResult r) {
  const char* s = nullptr;
  const Lib l = lib();
  if (l.result_string) l.result_string(r, &s);
  return s ? s : "CUPTI error " + std::to_string(int(r));
}

}  // namespace warmprof::backends::cupti

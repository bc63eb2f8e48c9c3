// CUPTI backend, compiled against the toolkit's headers; libcupti is opened at run time.
#include "backends/cupti.h"

#include <cupti.h>
#include <dlfcn.h>

#include "backends/cuda_driver.h"

namespace warmprof::backends::cupti {

namespace {
struct Lib {
  void* handle = nullptr;
  std::string reason;
};

const Lib& lib() {
  static Lib l = [] {
    Lib out;
    std::string why;
    if (cuda_driver::api(&why) == nullptr) {
      out.reason = why;
      return out;
    }
    for (const char* name : {"libcupti.so", "libcupti.so.13", "libcupti.so.12"}) {
      out.handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (out.handle) break;
    }
    if (!out.handle) {
      const char* e = dlerror();
      out.reason = std::string("libcupti not found: ") + (e ? e : "dlopen failed");
    }
    return out;
  }();
  return l;
}
}  // namespace

bool compiled() { return true; }
bool available() { return lib().handle != nullptr; }
std::string unavailable_reason() { return lib().reason; }
std::string start() { return available() ? "CUPTI callbacks are not implemented yet" : unavailable_reason(); }
void stop() {}
bool active() { return false; }
PassStats stats() { return {}; }
int classify(uint32_t, uint32_t) { return -1; }
std::string callback_name(uint32_t, uint32_t) { return ""; }
void inject(uint32_t, uint32_t, bool, uint64_t, int64_t) {}

}  // namespace warmprof::backends::cupti

#include "backends/cupti_loader.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>
#include <mutex>

#include "backends/cuda_driver.h"

namespace warmprof::backends::cupti {

namespace {

// The file names tried in each search folder and then by soname, newest first, the unversioned
// development link last.
constexpr const char* kNames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};

std::mutex g_search_mu;
std::vector<std::string> g_search_dirs;

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

bool is_libcupti(const char* path) {
  const char* slash = std::strrchr(path, '/');
  const char* base = slash ? slash + 1 : path;
  return std::strncmp(base, "libcupti.so", std::strlen("libcupti.so")) == 0;
}

int first_mapped(dl_phdr_info* info, size_t, void* out) {
  if (info->dlpi_name == nullptr || !is_libcupti(info->dlpi_name)) return 0;
  *static_cast<std::string*>(out) = info->dlpi_name;
  return 1;  // stops the walk
}

// The file a handle stands for, as the dynamic loader found it.
std::string path_of(void* h) {
  link_map* map = nullptr;
  if (dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr) return map->l_name;
  return "";
}

// Step 1: a libcupti the process already has (its path in *mapped), reopened without loading
// anything. *mapped stays empty when the process has none.
void* open_mapped(std::string* mapped) {
  dl_iterate_phdr(first_mapped, mapped);
  if (mapped->empty()) return nullptr;
  return dlopen(mapped->c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
}

// Steps 2-4. `tried` collects what failed, for the reason.
void* open_new(std::string* tried) {
  std::vector<std::string> dirs;
  {
    std::lock_guard<std::mutex> lock(g_search_mu);
    dirs = g_search_dirs;
  }
  for (const std::string& dir : dirs) {
    for (const char* name : kNames) {
      const std::string path = dir + "/" + name;
      if (access(path.c_str(), F_OK) != 0) continue;
      if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
      const char* e = dlerror();
      *tried += "; " + path + ": " + (e ? e : "dlopen failed");
    }
  }
  for (const char* name : kNames) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    *tried += std::string("; ") + (e ? e : name);
  }
  if (!dirs.empty()) {
    std::string folders;
    for (const std::string& dir : dirs) folders += (folders.empty() ? "" : ", ") + dir;
    *tried += "; searched the CUDA wheels' folders " + folders;
  }
  return nullptr;
}

}  // namespace

void set_search_path(std::vector<std::string> dirs) {
  std::lock_guard<std::mutex> lock(g_search_mu);
  g_search_dirs = std::move(dirs);
}

Lib load() {
  Lib l;
  std::string why;
  if (cuda_driver::api(&why) == nullptr) {
    l.reason = why;
    return l;
  }
  std::string mapped, tried;
  void* h = open_mapped(&mapped);
  if (h == nullptr && !mapped.empty()) {
    const char* e = dlerror();
    l.reason = "libcupti " + mapped + " is in the process but could not be reopened (" +
               (e ? e : "dlopen failed") + "); warmprof loads no second libcupti beside it";
    return l;
  }
  if (h == nullptr) h = open_new(&tried);
  if (h == nullptr) {
    l.reason = "libcupti not found (none in the process; pip install nvidia-cuda-cupti-cu12, or add the "
               "CUDA toolkit's lib64 or extras/CUPTI/lib64 to LD_LIBRARY_PATH)" + tried;
    return l;
  }
  l.path = path_of(h);
#if WARMPROF_CUPTI_SINCE(13, 0)
  resolve_optional(h, "cuptiSubscribe_v2", &l.subscribe_v2);
#endif
  resolve_optional(h, "cuptiEnableCallback", &l.enable_callback);
  resolve_optional(h, "cuptiGetCallbackState", &l.get_callback_state);
  resolve_optional(h, "cuptiGetVersion", &l.get_version);
  resolve_optional(h, "cuptiActivityRegisterCallbacks", &l.activity_register_callbacks);
  resolve_optional(h, "cuptiActivityEnable", &l.activity_enable);
  resolve_optional(h, "cuptiActivityDisable", &l.activity_disable);
  resolve_optional(h, "cuptiActivityFlushAll", &l.activity_flush_all);
  resolve_optional(h, "cuptiActivityGetNextRecord", &l.activity_get_next_record);
  resolve_optional(h, "cuptiGetTimestamp", &l.get_timestamp);
  l.ok = resolve(h, "cuptiSubscribe", &l.subscribe, &l.reason) &&
         resolve(h, "cuptiUnsubscribe", &l.unsubscribe, &l.reason) &&
         resolve(h, "cuptiEnableDomain", &l.enable_domain, &l.reason) &&
         resolve(h, "cuptiGetResultString", &l.result_string, &l.reason);
  if (!l.ok) l.reason += " (" + l.path + ")";
  return l;
}

// A missing libcupti is retried on later calls: torch's CUDA wheels load their own
// libcupti.so.12/.13 when torch is imported, and Python may pass the wheels' folders later. A
// missing driver or symbol is final.
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

int cuda_major_of(uint32_t v) {
  if (v >= 130000) return int(v / 10000);  // CUDA 13 numbers its CUPTI API as MMmmpp
  if (v >= 18) return 12;                  // 12.0 (18) .. 12.9 (28)
  if (v >= 13) return 11;                  // 11.0 (13) .. 11.8 (17)
  return 0;
}

}  // namespace warmprof::backends::cupti

#include "backends/cupti.h"

namespace warmprof::backends::cupti {

bool compiled() { return false; }
bool available() { return false; }
std::string unavailable_reason() {
  return "built without CUDA/CUPTI headers (set CUDA_HOME to a toolkit, or pip install the CUDA wheels' "
         "headers: nvidia-cuda-cupti-cu12, nvidia-cuda-runtime-cu12, nvidia-cuda-nvcc-cu12; then rebuild)";
}
std::string library_path() { return ""; }
void set_search_path(std::vector<std::string>) {}
std::string start() { return unavailable_reason(); }
std::string stop() { return ""; }
bool active() { return false; }
std::string check() { return ""; }
PassStats stats() { return {}; }
int classify(uint32_t, uint32_t) { return -1; }
std::string callback_name(uint32_t, uint32_t) { return ""; }
std::vector<std::pair<uint32_t, uint32_t>> enabled_callbacks() { return {}; }
double handler_cost_ns(int) { return 0.0; }
void inject(uint32_t, uint32_t, bool, uint64_t, int64_t, bool) {}
bool call_now(uint32_t, int64_t, int) { return false; }
int64_t launch_heap_bytes(int64_t, int, const std::string&) { return 0; }
bool inject_load(uint32_t, uint32_t, bool, uint64_t, const std::string&, int) { return false; }
bool inject_unparamed(uint32_t, uint32_t, bool, uint64_t, const std::string&) { return false; }
bool inject_query(uint32_t, uint32_t, bool, uint64_t, int64_t) { return false; }
Overheads take_overheads() {
  Overheads o;
  o.reason = unavailable_reason();
  return o;
}
void set_recording(bool) {}
const CallTally& thread_tally() {
  static const CallTally zero;
  return zero;
}

}  // namespace warmprof::backends::cupti

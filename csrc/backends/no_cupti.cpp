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
void inject(uint32_t, uint32_t, bool, uint64_t, int64_t, bool) {}

}  // namespace warmprof::backends::cupti

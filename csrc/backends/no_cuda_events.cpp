#include "backends/cuda_events.h"

namespace warmprof::backends::cuda_events {

bool compiled() { return false; }
bool available() { return false; }
std::string unavailable_reason() { return "built without CUDA headers (set CUDA_HOME and rebuild)"; }
int64_t record(uintptr_t, int, std::string* error) {
  *error = unavailable_reason();
  return -1;
}
double elapsed_ms(int64_t, int64_t, std::string* error) {
  *error = unavailable_reason();
  return -1;
}
void release_all() {}
int64_t pool_size() { return 0; }

}  // namespace warmprof::backends::cuda_events

#include "backends/cuda_events.h"

namespace warmprof::backends::cuda_events {

bool compiled() { return false; }
bool available() { return false; }
std::string unavailable_reason() { return "built without CUDA headers (set CUDA_HOME and rebuild)"; }

}  // namespace warmprof::backends::cuda_events

// CUDA events through the driver API (libcuda opened at run time), for GPU-side pass times.
#pragma once
#include <cstdint>
#include <string>

namespace warmprof::backends::cuda_events {

bool compiled();
bool available();
std::string unavailable_reason();  // empty when available

}  // namespace warmprof::backends::cuda_events

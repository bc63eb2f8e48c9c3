#include "backends/cuda_events.h"

#include "backends/cuda_driver.h"

namespace warmprof::backends::cuda_events {

bool compiled() { return true; }
bool available() { return cuda_driver::api(nullptr) != nullptr; }
std::string unavailable_reason() {
  std::string reason;
  cuda_driver::api(&reason);
  return reason;
}

}  // namespace warmprof::backends::cuda_events

// The Metal stub: every platform but Apple, and an Apple build with WARMPROF_WITH_METAL=OFF.
#include "backends/metal.h"

namespace warmprof::backends::metal {

bool compiled() { return false; }
bool available() { return false; }
std::string unavailable_reason() {
#if defined(__APPLE__)
  return "Metal: built without the Metal backend (WARMPROF_WITH_METAL=OFF)";
#else
  return "Metal: not on this platform";
#endif
}

ProbeResult probe(const std::vector<int>&, int) {
  ProbeResult r;
  r.error = unavailable_reason();
  return r;
}

}  // namespace warmprof::backends::metal

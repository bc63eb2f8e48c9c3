#include "backends/metal.h"

namespace warmprof::backends::metal {

bool compiled() { return false; }
bool available() { return false; }
std::string unavailable_reason() {
#if defined(__APPLE__)
  return "Metal timestamps are not implemented yet in this build";
#else
  return "Metal is only available on Apple platforms";
#endif
}

}  // namespace warmprof::backends::metal

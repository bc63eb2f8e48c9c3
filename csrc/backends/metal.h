// Metal command-buffer timestamps (Apple). Only the stub exists so far.
#pragma once
#include <string>

namespace warmprof::backends::metal {

bool compiled();
bool available();
std::string unavailable_reason();

}  // namespace warmprof::backends::metal

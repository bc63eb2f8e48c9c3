// CUPTI's callback data -> the handler's events: bytes from each call's parameter struct, the
// launched function, a copy's direction, a module image's kind (cuda_image), a memory pool's
// reservation. Driver and runtime domains (the generated_cuda*_meta.h parameter structs) and
// resource events. Runs inside the callback: no allocation; the driver is asked only where the
// parameters cannot say (cuMemcpy's direction, a stream-ordered allocation's pool). The device's
// architecture is read at start (cache_arch), not in a callback. A launch or kernel query CUPTI
// passes no parameters for (nvcc 13's __cudaLaunchKernel) is known by a hash of its symbol name.
#pragma once
#include <cupti.h>

#include <cstdint>

#include "backends/cupti_handler.h"
#include "backends/cupti_table.h"

namespace warmprof::backends::cupti::decode {

// A driver or runtime API callback. *skip: the call is not one warmprof records (a copy that is
// not host-to-device).
handler::Event api(const table::Entry& en, const CUpti_CallbackData* cb, uint64_t ticks, bool* skip);
// A resource event (MODULE_LOADED: the cubin's bytes and the kind of its image).
handler::Event resource(const table::Entry& en, const CUpti_ResourceData* rd, uint64_t ticks);

// Test-only: the device architecture to decode fatbins against (-1: the one cache_arch() read).
void set_arch_override(int arch);
// Reads the devices' architecture from the driver (cold: start() calls it before subscribing):
// their compute capability when they all share one, else 0 (unknown).
void cache_arch();

}  // namespace warmprof::backends::cupti::decode

// CUPTI's callback data -> the handler's events: bytes from each call's parameter struct, the
// launched function, a copy's direction, a module image's kind (cuda_image), a memory pool's
// reservation. Driver and runtime domains (the generated_cuda*_meta.h parameter structs) and
// resource events. Runs inside the callback: no allocation; the driver is asked only where the
// parameters cannot say (cuMemcpy's direction, the device's architecture once per device, a
// stream-ordered allocation's pool).
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

// Test-only: the device architecture to decode fatbins against (-1: ask the driver).
void set_arch_override(int arch);

}  // namespace warmprof::backends::cupti::decode

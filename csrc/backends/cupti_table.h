// The decoding table: CUPTI (domain, callback id) -> family, cause and interned record name.
// Pure data built from the toolkit's headers (cupti_driver_cbid.h, cupti_callbacks.h); needs no
// driver and no libcupti, so it is tested on machines without a GPU.
#pragma once
#include <cstdint>

namespace warmprof::backends::cupti::table {

// How the handler treats a callback; the cause follows from the family.
enum class Family : uint8_t {
  kRuntimeInit,    // cuInit, context creation, primary-context retain: a runtime_init span
  kModuleLoad,     // module/library loads and function lookups: runtime_init, marks the open launch
  kLaunch,         // kernel launch: a structure span, or runtime_init "lazy_load" if a load nests in it
  kAlloc,          // device/pinned/managed/VMM allocations and pools: allocator_growth, bytes
  kCaptureBegin,   // cuStreamBeginCapture*: opens the graph_capture "stream_capture" span
  kCaptureEnd,     // cuStreamEndCapture*: closes it
  kGraph,          // cuGraphInstantiate*, cuGraphUpload*: graph_capture span
  kCopyToDevice,   // host-to-device copies and unified-memory prefetch: data_transfer, bytes
  kCopyGeneric,    // cuMemcpy/cuMemcpyAsync: data_transfer only when the direction is host-to-device
  kResourceInit,   // resource CONTEXT_CREATED, CU_INIT_FINISHED: runtime_init instant
  kResourceModule, // resource MODULE_LOADED: runtime_init instant (cubin bytes), marks the open launch
};

struct Entry {
  Family family;
  uint8_t cause;     // warmprof::Cause
  uint32_t name_id;  // interned "cupti:<callback name>"
  const char* name;  // callback name without the prefix ("cuMemAlloc_v2", "MODULE_LOADED")
};

// nullptr when warmprof ignores the callback. Thread-safe; the table is built on first use.
const Entry* lookup(uint32_t domain, uint32_t cbid);

// Interned names of the records the handler makes besides the per-callback ones.
struct ExtraNames {
  uint32_t stream_capture;  // "cupti:stream_capture" (BeginCapture .. EndCapture)
  uint32_t lazy_load;       // "cupti:lazy_load" (a launch that loaded a module)
};
const ExtraNames& extra_names();

}  // namespace warmprof::backends::cupti::table

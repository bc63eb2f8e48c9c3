// The decoding table: CUPTI (domain, callback id) -> family, operation, cause and interned record
// name. Pure data built from the toolkit's headers (cupti_driver_cbid.h, cupti_runtime_cbid.h,
// cupti_callbacks.h); needs no driver and no libcupti, so it is tested on machines without a GPU.
// The subscriber enables exactly the callbacks listed here (mapped()), nothing else.
#pragma once
#include <cstddef>
#include <cstdint>

namespace warmprof::backends::cupti::table {

// How the handler treats a callback; the cause follows from the family.
enum class Family : uint8_t {
  kRuntimeInit,    // cuInit, context creation, primary-context retain: a runtime_init span
  kModuleLoad,     // an actual module/library load: runtime_init (cubin) or jit_compile (PTX), marks the open launch
  kModuleLookup,   // function/kernel/module lookups: a runtime_init span that never marks a lazy load
  kKernelQuery,    // a query on one kernel that may load it lazily (cudaGetKernel, cudaFuncGetAttributes,
                   // occupancy, cuFuncGetAttribute): counted; a runtime_init span for the first query of
                   // a kernel, and a lazy load when a module was loaded inside
  kLaunch,         // kernel launch: counted; a span only for a kernel's first launch or a lazy load
  kAlloc,          // device/pinned/managed/VMM allocations: allocator_growth
  kAllocAsync,     // stream-ordered allocations: allocator_growth only when the pool grew
  kCaptureBegin,   // cuStreamBeginCapture*: opens the graph_capture "stream_capture" span
  kCaptureEnd,     // cuStreamEndCapture*: closes it
  kGraph,          // cuGraphInstantiate*, cuGraphUpload*: graph_capture span
  kCopyToDevice,   // host-to-device copies and unified-memory prefetch: data_transfer, bytes
  kCopyGeneric,    // cuMemcpy/cudaMemcpy...: data_transfer only when the direction is host-to-device
  kResourceInit,   // resource CONTEXT_CREATED, CU_INIT_FINISHED: runtime_init instant
  kResourceModule, // resource MODULE_LOADED: instant (cubin bytes), marks the open launch
};

// The operation a call performs, whichever API it comes through: a call made while a call of the
// same operation is open on the thread (a driver call inside the runtime's, __cudaLaunchKernel's
// cudaLaunchKernel, one driver entry calling another) is that outer call's own implementation, and
// is not counted again. A stream-ordered allocation is its own operation: the pool's own cuMemCreate
// reported inside one is the growth, and holds its bytes.
enum class Op : uint8_t { kInit, kLoad, kLookup, kLaunch, kAlloc, kAllocAsync, kCapture, kGraph, kCopy, kResource };

struct Entry {
  Family family;
  Op op;
  uint8_t cause;     // warmprof::Cause (loads: the cause of a cubin load; a PTX load is jit_compile)
  bool bytes;        // the decoded value counts bytes (cuMemMap/cuMemSetAccess/... map bytes cuMemCreate counted)
  uint32_t domain;   // CUpti_CallbackDomain
  uint32_t cbid;
  uint32_t name_id;  // interned "cupti:<name>"
  const char* name;  // the call's name without the prefix ("cuMemAlloc_v2", "cudaMalloc", "MODULE_LOADED")
};

// nullptr when warmprof ignores the callback. Thread-safe; the table is built on first use.
const Entry* lookup(uint32_t domain, uint32_t cbid);

// Every mapped (domain, cbid): the callbacks the subscriber enables, in table order.
struct Key {
  uint32_t domain;
  uint32_t cbid;
};
const Key* mapped(size_t* count);

// Interned names of the records the handler makes besides the per-callback ones.
struct ExtraNames {
  uint32_t stream_capture;  // "cupti:stream_capture" (BeginCapture .. EndCapture)
  uint32_t lazy_load;       // "cupti:lazy_load" (a launch that loaded a module)
};
const ExtraNames& extra_names();

}  // namespace warmprof::backends::cupti::table

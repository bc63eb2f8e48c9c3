// The one handler every CUPTI callback goes through, real or injected: decoded callback in,
// recorder records out. No libcupti or driver calls here, so it runs on machines without a GPU.
//
// Records (names interned as "cupti:<callback>"):
// - API enter/exit -> begin/end of a span with the table's cause (bytes as the value where the
//   table says the call counts bytes: cuMemCreate counts an expandable segment's bytes once, the
//   cuMemAddressReserve/cuMemMap/cuMemSetAccess steps are allocator_growth time with value 0);
// - module/library loads -> runtime_init spans for a cubin, jit_compile for PTX (the driver
//   compiles it); lookups (cuModuleGetFunction, cuLibraryGetKernel, ...) are runtime_init spans
//   that never mark a lazy load;
// - resource CONTEXT_CREATED / CU_INIT_FINISHED / MODULE_LOADED -> instants (MODULE_LOADED:
//   cubin bytes, cause by its image like a load);
// - cuStreamBeginCapture* enter .. cuStreamEndCapture* exit -> one graph_capture span
//   "cupti:stream_capture" (closed at once when BeginCapture fails);
// - kernel launches are counted, not recorded: only a kernel's first launch (a structure span,
//   value 1) and a launch inside which a module was loaded (lazy loading: the span
//   "cupti:lazy_load", the load's cause, so the whole launch counts as one-time set-up) are spans,
//   so a pass of 100k launches cannot fill the recorder and crowd out cause spans. A launch is
//   written at its exit, with its enter timestamp, because only then is a load inside it known;
//   the recorder's drain sorts by timestamp, so the late-written begin lands before its children.
// - stream-ordered allocations (cuMemAllocAsync, cudaMallocAsync, ...) carry the pool's reserved
//   bytes at enter and at exit: a pool hit (no growth) records nothing and is counted; a call in
//   which the pool's reservation grew is an allocator_growth span valued at the growth.
//
// Runtime and driver: eager PyTorch calls the runtime (cudaLaunchKernel, cudaMalloc, ...), which
// calls the driver inside; CUPTI may or may not report those inner driver calls, and nvcc 13's
// __cudaLaunchKernel may report the cudaLaunchKernel it makes. A call made while a call of the
// same operation (table::Op) is open on the thread, in either domain, is that call's
// implementation: it is absorbed (kept as a muted frame, never recorded or counted as a launch),
// so each operation counts once whichever way CUPTI behaves. Calls of another operation inside
// (a module load inside cudaLaunchKernel) are recorded.
// - kernel queries (cudaFuncGetAttributes, occupancy, cudaGetKernel, cuFuncGetAttribute), which
//   load a kernel lazily outside a launch: counted; a runtime_init span for a kernel's first
//   query, "cupti:lazy_load" when a module was loaded inside.
//
// The hot path allocates nothing, takes no lock and touches only pre-faulted memory: first-seen
// kernels live in a fixed open-addressing table and their names in a fixed arena, both faulted in
// by reset_counts() (at subscribe time); a thread's recorder buffer and handler state are set up by
// prepare_thread() before the callback reads the clock, so that set-up is outside every span.
// Per-thread state (open calls, open captures) is dropped when a new recording generation starts
// and when a subscription starts or ends (new_epoch()).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cupti_table.h"

namespace warmprof::backends::cupti::handler {

struct Event {
  uint32_t domain = 0;
  uint32_t cbid = 0;
  bool enter = true;         // API enter, or a resource event
  bool failed = false;       // API exit whose result was not success
  uint64_t ticks = 0;        // clock::ticks() at the callback
  // Allocations and copies: bytes. MODULE_LOADED: cubin bytes. Stream-ordered allocations: the
  // pool's reserved bytes at this callback (-1 unknown).
  int64_t value = 0;
  // Launches and kernel queries: the CUfunction or runtime entry, else a hash of the symbol name
  // (a call CUPTI passes no parameters for); 0 unknown. Injected calls: the injected value.
  uintptr_t kernel = 0;
  const char* kernel_name = nullptr;  // launches: the symbol name, when CUPTI gives one
  uint8_t image = 0;         // loads and MODULE_LOADED: cuda_image::Kind of the image
};

// The calling thread's recorder buffer and handler state, ready before the clock is read.
void prepare_thread();
// Every callback first: counts it, and absorbs a call made inside a call of the same operation on
// the thread, whatever the domains (true: nothing more to do, do not decode it).
bool absorb(const table::Entry& en, bool enter);
// The decoded callback (not absorbed) -> records.
void record(const table::Entry& en, const Event& e);
// All three, for injected callbacks (the real callback decodes between absorb and record).
void handle(const Event& e);

// Counters since the last reset (cupti::start()).
struct Counts {
  int64_t callbacks = 0;          // callbacks delivered (real or injected), absorbed ones included
  int64_t kernel_launches = 0;    // launches counted once (a runtime launch and its driver launch: one)
  int64_t new_kernels = 0;        // kernels first seen in this process
  int64_t pool_hits = 0;          // stream-ordered allocations the pool served without growing
  int64_t untracked_kernels = 0;  // launches of kernels past the first-seen table's room (not flagged)
};
Counts counts();
// Zeroes the counters and the names since the last reset, and faults in the first-seen table and
// the name arena, so that callbacks touch only mapped pages. Cold: call before subscribing.
void reset_counts();
void restore_counts(const Counts& c);
// A subscription starts or ends: every thread's open calls are dropped at its next callback (a call
// whose exit the ended subscription never delivered must not stay open and absorb later calls).
void new_epoch();  // after a calibration loop: its callbacks are not the model's
// Names of kernels first seen since reset (the first 16384; a kernel without a symbol name, or
// past the arena's room, is "kernel#<id>"). Cold.
std::vector<std::string> new_kernels();

}  // namespace warmprof::backends::cupti::handler

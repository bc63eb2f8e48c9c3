// The one handler every CUPTI callback goes through, real or injected: decoded callback in,
// recorder records out. No libcupti or driver calls here, so it runs on machines without a GPU.
//
// Records (names interned as "cupti:<callback>"):
// - driver API enter/exit -> begin/end of a span with the table's cause (bytes as the value);
// - resource CONTEXT_CREATED / CU_INIT_FINISHED / MODULE_LOADED -> runtime_init instants;
// - cuStreamBeginCapture* enter .. cuStreamEndCapture* exit -> one graph_capture span
//   "cupti:stream_capture" (closed at once when BeginCapture fails);
// - kernel launches -> structure spans "cupti:<launch api>", value 1 for a kernel first seen.
//   A launch is written at its exit, with its enter timestamp, because only then is it known
//   whether a module load happened inside it (lazy loading): such a launch becomes a runtime_init
//   span "cupti:lazy_load", so the whole launch, not just the load, counts as one-time set-up.
//   The recorder's drain sorts by timestamp, so the late-written begin lands before its children.
// Per-thread state (open calls, open captures) is dropped when a new recording generation starts.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace warmprof::backends::cupti::handler {

struct Event {
  uint32_t domain = 0;
  uint32_t cbid = 0;
  bool enter = true;         // API enter, or a resource event
  bool failed = false;       // API exit whose CUresult was not CUDA_SUCCESS
  uint64_t ticks = 0;        // clock::ticks() at the callback
  int64_t value = 0;         // bytes for allocations and copies, cubin bytes for MODULE_LOADED
  uintptr_t kernel = 0;      // launches: the CUfunction (injected launches: the injected value)
  const char* kernel_name = nullptr;  // launches: the symbol name, when CUPTI gives one
};

void handle(const Event& e);

// Counters since the last reset (cupti::start()).
void reset_counts();
int64_t kernel_launches();
int64_t callbacks();
std::vector<std::string> new_kernels();  // names of kernels first seen in this process since reset

}  // namespace warmprof::backends::cupti::handler

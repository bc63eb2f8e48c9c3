// CUDA events through the driver API (libcuda opened at run time), for GPU-side pass times on the
// stream the model runs on. A pool: record() hands out a slot holding a recorded event,
// release_all() returns every slot; the CUevents themselves are kept and reused (per context), so
// a trace creates its events once, before the passes it times.
#pragma once
#include <cstdint>
#include <string>

namespace warmprof::backends::cuda_events {

bool compiled();
bool available();
std::string unavailable_reason();  // empty when available

// Records an event on `stream` (a CUstream / cudaStream_t as an integer; 0 = the legacy default
// stream) in the calling thread's current context. The slot id (>= 0), or -1 with `*error` set
// (no driver, no current context, a driver error).
int64_t record(uintptr_t stream, std::string* error);

// Milliseconds of GPU time between two recorded slots; waits for `end_slot` to complete.
// -1 with `*error` set when a slot is unknown or the driver refuses.
double elapsed_ms(int64_t start_slot, int64_t end_slot, std::string* error);

// Returns every slot to the pool; events are reused by later record() calls.
void release_all();

// Events created so far (the pool never shrinks).
int64_t pool_size();

}  // namespace warmprof::backends::cuda_events

// CUDA events through the driver API (libcuda opened at run time), for GPU-side pass times on the
// stream the model runs on. A pool: record() hands out a slot holding a recorded event,
// release_all() returns every slot; the CUevents themselves are kept and reused (per context), so
// a trace creates its events once, before the passes it times.
//
// Events belong to a context, and an event recorded on a stream of another context is refused
// (CUDA_ERROR_INVALID_HANDLE), so every call runs with the stream's own context pushed current:
// a trace on cuda:1 from a thread whose current context is cuda:0's still times cuda:1.
#pragma once
#include <cstdint>
#include <string>

namespace warmprof::backends::cuda_events {

bool compiled();
bool available();
std::string unavailable_reason();  // empty when available

// Records an event on `stream` (a CUstream / cudaStream_t as an integer) in that stream's
// context. The special handles (0 = the legacy default stream, which is what torch's default
// stream is on every device; CU_STREAM_LEGACY; CU_STREAM_PER_THREAD) name no context of their own:
// for them the context is `device`'s primary context (the one the runtime uses), or, with
// device < 0, the calling thread's current context. The slot id (>= 0), or -1 with `*error` set
// (no driver, no context for the device yet, a driver error).
int64_t record(uintptr_t stream, int device, std::string* error);

// Milliseconds of GPU time between two recorded slots of one context; waits for `end_slot` to
// complete. -1 with `*error` set when a slot is unknown, the two are of different contexts, or the
// driver refuses.
double elapsed_ms(int64_t start_slot, int64_t end_slot, std::string* error);

// Returns every slot to the pool; events are reused by later record() calls.
void release_all();

// Events created so far, over every context (the pool never shrinks).
int64_t pool_size();

}  // namespace warmprof::backends::cuda_events

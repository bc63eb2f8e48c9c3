// CUPTI subscriber: driver-API and resource callbacks mapped to causes, written into the recorder.
// Real implementation in cupti.cpp (compiled when CUDA headers are found), stub in no_cupti.cpp.
// libcuda and libcupti are opened at run time: a missing library becomes a reason, never a crash.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace warmprof::backends::cupti {

bool compiled();
// True only once a subscribe succeeded in this process (the last one tried): a libcupti newer
// than the driver loads but refuses to subscribe, so loading alone proves nothing.
bool available();
std::string unavailable_reason();  // empty when available; "loaded, not yet subscribed ..." before
std::string library_path();        // the libcupti file in use, "" when none is loaded

// Folders to look for libcupti in after a copy already in the process and before the sonames
// (Python passes the CUDA wheels' lib folders). Takes effect while libcupti is not yet loaded.
void set_search_path(std::vector<std::string> dirs);

// Subscribes (driver + resource domains, activity for kernels). Returns "" on success, else why not
// (no driver, another subscriber holds CUPTI, ...). stop() unsubscribes and flushes; safe to repeat.
// stop() returns "" when it unsubscribed cleanly (or nothing was subscribed), else why not: the
// subscription had been torn down (another tool called cuptiFinalize), which is not an error.
std::string start();
std::string stop();
bool active();  // subscribed and not found torn down

// Whether warmprof's subscription still stands: "" when it does (or none is active), else why
// not. Another tool calling cuptiFinalize (torch.profiler's Kineto with TEARDOWN_CUPTI=1, or
// CUPTI itself after a fatal error) tears down every subscription without telling the
// subscribers; warmprof asks CUPTI at pass boundaries. Once torn down, warmprof forgets the
// handle (it may already name someone else's subscription) and active() is false.
std::string check();

struct PassStats {
  int64_t kernel_launches = 0;           // since start()
  std::vector<std::string> new_kernels;  // kernels first seen in this process, since start()
  double subscribe_ns = 0;               // CUPTI's own first-use cost (subscribe + enable)
  int64_t callbacks = 0;                 // callbacks delivered (real or injected) since start()
};
PassStats stats();

// Pure decoding, testable without a GPU: (domain, callback id) -> cause id, or -1 to ignore.
int classify(uint32_t domain, uint32_t cbid);
std::string callback_name(uint32_t domain, uint32_t cbid);

// Test-only: deliver one synthetic callback through the same handler the real subscriber uses.
// `enter` true for API enter / resource event; `value` carries bytes where the callback has them
// (for launches it stands for the CUfunction, so equal values are the same kernel); `failed` marks
// an API exit whose CUresult was an error.
void inject(uint32_t domain, uint32_t cbid, bool enter, uint64_t ticks, int64_t value, bool failed);

}  // namespace warmprof::backends::cupti

// CUPTI subscriber: driver-API, runtime-API and resource callbacks mapped to causes, written into
// the recorder. Real implementation in cupti.cpp (compiled when CUDA headers are found), stub in
// no_cupti.cpp. libcuda and libcupti are opened at run time: a missing library becomes a reason,
// never a crash.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
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

// Subscribes and enables exactly the callbacks the table maps (enabled_callbacks()), in the
// driver, runtime and resource domains, and CUPTI's OVERHEAD activity records where libcupti has
// the activity API (take_overheads()). The device architecture is read from the driver first, so
// that no callback calls the driver. Returns "" on success, else why not (no driver, another
// subscriber holds CUPTI, ...). stop() flushes and disables the OVERHEAD records and
// unsubscribes; safe to repeat. It returns "" when it unsubscribed cleanly (or nothing was
// subscribed), else why not: the subscription had been torn down (another tool called
// cuptiFinalize), which is not an error. Both drop every thread's open calls (an epoch): a call
// open when a subscription ends never gets its exit, and must not absorb later calls.
std::string start();
std::string stop();
bool active();  // subscribed and not found torn down

// Whether warmprof's subscription still stands: "" when it does (or none is active), else why
// not. Another tool calling cuptiFinalize (or CUPTI itself after a fatal error) tears down every
// subscription without telling the subscribers; warmprof asks CUPTI at pass boundaries. (Kineto's
// TEARDOWN_CUPTI=1 finalizes only a subscription of its own: while warmprof holds CUPTI, Kineto
// holds none to tear down.) Once torn down, warmprof forgets the
// handle (it may already name someone else's subscription) and active() is false.
std::string check();

struct PassStats {
  int64_t kernel_launches = 0;           // since start(); a runtime launch and its driver launch count once
  int64_t new_kernel_count = 0;          // kernels first seen in this process, since start()
  std::vector<std::string> new_kernels;  // their names (the first 16384)
  double subscribe_ns = 0;               // CUPTI's own first-use cost (subscribe + enable)
  int64_t callbacks = 0;                 // callbacks delivered (real or injected) since start()
  int64_t pool_hits = 0;                 // stream-ordered allocations served without pool growth
  int64_t untracked_kernels = 0;         // launches past the first-seen table's room
  int64_t refused_callbacks = 0;         // mapped callbacks the installed libcupti would not enable
};
PassStats stats();

// What the handler booked on the calling thread, cumulative over the process (never reset): per
// cause id, the outermost cause spans that closed (a span inside another, or a module load inside a
// launch that loaded it lazily, counts once, in the outer one), their summed ns and bytes.
// warmprof.watch(cupti=True) copies it before a call and compares after: a call during which an
// allocation, a module load or a graph capture closed on its thread is kept, with the measured
// time. Updated whether or not a recording is on. The stub's stays zero.
struct CallTally {
  static constexpr int kCauses = 16;
  uint64_t seq = 0;  // bumped by each span booked (or un-booked when an outer one takes it in)
  int64_t spans[kCauses] = {};
  int64_t ns[kCauses] = {};
  int64_t bytes[kCauses] = {};
};
const CallTally& thread_tally();
// Whether the handler writes into the recorder (true by default). watch(cupti=True) turns it off
// while it holds the subscription: a trace running then has its CUPTI instrument off (the
// subscription is taken) and must not get CUPTI records it does not account for.
void set_recording(bool on);

// CUPTI's OVERHEAD activity records taken since the last call (cupti_overheads.h): a lazy module
// load ("module_loading"), a lazy function load ("lazy_function_loading") or the driver's PTX
// compile ("driver_compiler"), timed by the driver wherever it happened, in warmprof's clock
// (monotonic ns). `this_thread`: the record names the calling thread. Flushes CUPTI's buffers
// (cold: call at pass boundaries). The stub's is empty, with the reason.
struct Overhead {
  std::string kind;
  int cause = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t thread = 0;
  bool this_thread = false;
};
struct Overheads {
  std::vector<Overhead> records;
  int64_t dropped = 0;  // past the store's bound
  bool enabled = false;
  std::string reason;   // why they are off ("" while on)
};
Overheads take_overheads();

// Pure decoding, testable without a GPU: (domain, callback id) -> cause id, or -1 to ignore.
int classify(uint32_t domain, uint32_t cbid);
std::string callback_name(uint32_t domain, uint32_t cbid);

// The (domain, cbid) pairs start() enables, in order, from start()'s own enabling routine run
// against a list instead of libcupti: the table's keys, one cuptiEnableCallback each.
std::vector<std::pair<uint32_t, uint32_t>> enabled_callbacks();

// ns warmprof's callback handler adds to one callback on this machine: a repeat launch, enter and
// exit, through the real callback entry with the recorder on, `iterations` times. CUPTI's own
// dispatch of a callback is not in it (that needs a GPU). 0 while recording or subscribed.
double handler_cost_ns(int iterations);

// Test-only: deliver one synthetic callback through the same handler the real subscriber uses.
// `enter` true for API enter / resource event; `value` carries bytes where the callback has them
// (for launches it stands for the CUfunction, so equal values are the same kernel; for
// stream-ordered allocations it is the pool's reserved bytes at that callback); `failed` marks an
// API exit whose result was an error.
void inject(uint32_t domain, uint32_t cbid, bool enter, uint64_t ticks, int64_t value, bool failed);
// Test-only: `pairs` enter/exit pairs of cuLaunchKernel (of the function `value`) or cuMemAlloc_v2
// (of `value` bytes) through the real callback entry, the clock read inside, as CUPTI delivers
// them. false for another cbid.
bool call_now(uint32_t cbid, int64_t value, int pairs);
// Test-only: heap bytes (this thread's malloc arena) taken by `kernels` first launches, named
// `name`, through the handler: 0 when the hot path allocates nothing.
int64_t launch_heap_bytes(int64_t first_kernel, int kernels, const std::string& name);
// Test-only: a module load (or MODULE_LOADED) with its image (a path for the file loads), built
// as CUPTI's own callback data and decoded by the real path; `arch` is the device's compute
// capability to decode fatbins against (0: unknown; -1: the one start() read from the driver).
// false when (domain, cbid) is not a load.
bool inject_load(uint32_t domain, uint32_t cbid, bool enter, uint64_t ticks, const std::string& image, int arch);
// Test-only: an API callback as CUPTI delivers a call its meta header has no parameter struct for
// (functionParams NULL), with `symbol` as its symbolName ("" for none), through the real entry.
// false when warmprof does not map (domain, cbid).
bool inject_unparamed(uint32_t domain, uint32_t cbid, bool enter, uint64_t ticks, const std::string& symbol);
// Test-only: a kernel query (cudaFuncGetAttributes, an occupancy query, cudaGetKernel,
// cuFuncGetAttribute, ...) with its own parameter struct naming the function `kernel`, through the
// real callback entry. false when (domain, cbid) is not a kernel query with a parameter struct.
bool inject_query(uint32_t domain, uint32_t cbid, bool enter, uint64_t ticks, int64_t kernel);

}  // namespace warmprof::backends::cupti

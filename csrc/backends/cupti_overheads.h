// CUPTI's OVERHEAD activity records: what the driver itself measured of a lazy module load
// (RUNTIME_TRIGGERED_MODULE_LOADING), a lazy function load (LAZY_FUNCTION_LOADING) and its PTX JIT
// (DRIVER_COMPILER), with start and end times. The callbacks see a lazy load only when it happens
// inside a call warmprof times; these records time it wherever it happened. kineto reads the same
// records (CUPTI_ACTIVITY_KIND_OVERHEAD). The activity API is libcupti's, resolved at run time
// (cupti_loader): without it the records are off with a reason and the callbacks work as before.
//
// Records arrive in buffers CUPTI fills and hands back (on its own thread, or inside a flush);
// they are parsed there and kept, bounded, until take(). Cold paths only: nothing here runs in the
// callbacks warmprof times.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cupti_loader.h"

namespace warmprof::backends::cupti::overheads {

struct Overhead {
  uint32_t kind = 0;       // CUpti_ActivityOverheadKind
  uint8_t cause = 0;       // runtime_init (a load) or jit_compile (the driver's compiler)
  const char* name = "";   // "module_loading", "lazy_function_loading", "driver_compiler"
  int64_t start_ns = 0;    // warmprof's clock (monotonic ns), converted from CUPTI's timestamps
  int64_t end_ns = 0;
  uint64_t thread = 0;     // CUPTI's thread id, when the record names a thread (0 otherwise)
  bool this_thread = false;  // the thread that called take() (pthread_self or its kernel tid)
};

// Registers warmprof's buffer callbacks and enables CUPTI_ACTIVITY_KIND_OVERHEAD: "" or why not.
// Called by start() after subscribing.
std::string enable(const Lib& l);
// Flushes what CUPTI holds (forced) and disables the kind; records stay until taken.
void disable(const Lib& l);
// Flushes (while enabled) and returns the records kept since the last take, in arrival order;
// *dropped: those past the store's bound since the last take.
std::vector<Overhead> take(const Lib& l, int64_t* dropped);
// The subscription was found torn down (another tool's cuptiFinalize): off, without calling CUPTI.
void forget();
// Whether the records are on, and if not why ("" while on).
bool enabled();
std::string reason();

}  // namespace warmprof::backends::cupti::overheads

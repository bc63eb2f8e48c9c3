// libcupti, opened at run time (XLA cupti_stub habit): the entry points warmprof calls, resolved
// with dlsym once; a missing library or symbol becomes a reason, never a crash.
// Cold paths only (start, stop, backends()): lib() returns the loaded table by value.
//
// Which libcupti, in order (never a second one beside a libcupti already in the process: two
// CUPTIs in one process see each other's callbacks half-initialized):
//   1. a libcupti*.so* already mapped (torch's CUDA wheels load their own when torch is imported),
//      reopened by its exact path with RTLD_NOLOAD;
//   2. the folders set_search_path() was given (Python passes the CUDA wheels' lib folders,
//      site-packages/nvidia/cu13/lib and nvidia/cuda_cupti/lib, which only it can locate);
//   3. the versioned sonames libcupti.so.13, libcupti.so.12 (LD_LIBRARY_PATH, the ld.so cache);
//   4. the unversioned libcupti.so last (a toolkit's development link, any version).
#pragma once
#include <cupti.h>

#include <string>
#include <vector>

#include "backends/cupti.h"
#include "backends/cupti_compat.h"

namespace warmprof::backends::cupti {

struct Lib {
  CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
#if WARMPROF_CUPTI_SINCE(13, 0)
  CUptiResult (*subscribe_v2)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*,
                              CUpti_SubscriberParams*) = nullptr;  // CUPTI 13+: names the holder
#endif
  CUptiResult (*unsubscribe)(CUpti_SubscriberHandle) = nullptr;
  CUptiResult (*enable_domain)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain) = nullptr;
  CUptiResult (*result_string)(CUptiResult, const char**) = nullptr;
  // Optional (nullptr when libcupti lacks them): per-callback enabling and its state, and the
  // library's API version.
  CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                 CUpti_CallbackId) = nullptr;
  CUptiResult (*get_callback_state)(uint32_t*, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                    CUpti_CallbackId) = nullptr;
  CUptiResult (*get_version)(uint32_t*) = nullptr;
  // Optional: the activity API, for CUPTI's OVERHEAD records (cupti_activity.h); without it those
  // records are off with a reason and the callbacks work as before.
  CUptiResult (*activity_register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*activity_enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*activity_disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*activity_flush_all)(uint32_t) = nullptr;
  CUptiResult (*activity_get_next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*get_timestamp)(uint64_t*) = nullptr;
  bool ok = false;
  std::string reason;
  std::string path;  // the file loaded ("" when none)
};

// set_search_path(dirs) (declared in cupti.h) gives the folders of step 2; it takes effect at the
// next load: before the first one, or while libcupti has not been found.

// Opens libcupti and resolves its entry points (needs the driver first).
Lib load();

// Whether a failed load is worth trying again on a later call.
bool retryable(const Lib& l);

// The process's libcupti, loaded on first use (and again while retryable).
Lib lib();

// CUPTI's text for a result ("CUPTI error N" when libcupti cannot say).
std::string result_text(CUptiResult r);

// The CUDA major release a CUPTI API version belongs to (cuptiGetVersion): 0 when unknown.
int cuda_major_of(uint32_t cupti_api_version);

}  // namespace warmprof::backends::cupti

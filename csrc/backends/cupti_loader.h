// libcupti, opened at run time (XLA cupti_stub habit): the entry points warmprof calls, resolved
// with dlsym once; a missing library or symbol becomes a reason, never a crash.
// Cold paths only (start, stop, backends()): lib() returns the loaded table by value.
#pragma once
#include <cupti.h>

#include <string>

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
  // Optional (nullptr when libcupti lacks them): per-callback enabling and the library's API version.
  CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                 CUpti_CallbackId) = nullptr;
  CUptiResult (*get_version)(uint32_t*) = nullptr;
  bool ok = false;
  std::string reason;
};

// Opens libcupti and resolves its entry points (needs the driver first).
Lib load();

// Whether a failed load is worth trying again on a later call.
bool retryable(const Lib& l);

// The process's libcupti, loaded on first use (and again while retryable).
Lib lib();

// CUPTI's text for a result ("CUPTI error N" when libcupti cannot say).
std::string result_text(CUptiResult r);

}  // namespace warmprof::backends::cupti

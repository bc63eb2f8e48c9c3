// What the CUPTI headers this build compiles against declare. warmprof builds against CUDA 12.0
// and newer (12.x and 13.x headers, from a toolkit or from the CUDA wheels); anything the CUPTI
// headers of CUDA 12.0 lack (a callback id, its params struct, a type, an API) is guarded:
//
//   #if WARMPROF_CUPTI_SINCE(12, 3)   // the first CUDA release whose CUPTI headers declare it
//       WP_DRIVER(cuStreamBeginCaptureToGraph, F::kCaptureBegin),
//   #endif
//
// The release is read from CUPTI_API_VERSION (cupti_version.h), the one number the CUPTI headers
// carry. CUDA 12.1 kept 12.0's number (18) although it added callback ids: guard those as
// (12, 2). A release missing from the list below is not a number but 0 in `#if`, which makes
// the guard always true; the CUDA 12.0 header build test compiles with -Werror=undef to catch it.
// Which release added an id: grep the CUPTI headers of the nvidia-cuda-cupti-cu12 wheels
// (cupti_driver_cbid.h, cupti_runtime_cbid.h, cupti_callbacks.h, generated_cuda_meta.h).
#pragma once
#include <cupti.h>

#define WARMPROF_CUPTI_API_12_0 18  // and 12.1
#define WARMPROF_CUPTI_API_12_2 20
#define WARMPROF_CUPTI_API_12_3 21
#define WARMPROF_CUPTI_API_12_4 22
#define WARMPROF_CUPTI_API_12_5 23
#define WARMPROF_CUPTI_API_12_6 24
#define WARMPROF_CUPTI_API_12_8 26
#define WARMPROF_CUPTI_API_12_9 27
#define WARMPROF_CUPTI_API_13_0 130001

#define WARMPROF_CUPTI_SINCE(major, minor) (CUPTI_API_VERSION >= WARMPROF_CUPTI_API_##major##_##minor)

"""Fake libcuda and libcupti, compiled for a test, and a fresh Python process to load them in.

The loader's choices (which libcupti, available or not, a torn-down subscription) depend on what
the process has mapped and what the dynamic loader finds, so each case runs in its own process
(`run_child`) with LD_LIBRARY_PATH pointing at the fakes; the test process itself loads none.

The fake libcuda reports one device and the CUDA version in FAKE_CUDA_DRIVER_VERSION. The fake
libcupti answers cuptiSubscribe with FAKE_CUPTI_SUBSCRIBE (0 = success, 39 = another subscriber
holds CUPTI) and cuptiGetVersion with FAKE_CUPTI_VERSION; `fake_cupti_finalize()` stands for
another tool calling cuptiFinalize, `fake_cupti_fatal(msg)` for CUPTI's own fatal error notice,
and `fake_cupti_tag()` says which copy was loaded. Its activity API holds OVERHEAD records that
`fake_cupti_overhead(kind, ns, tid)` queues until a flush; FAKE_CUPTI_WAIT=subscribe|unsubscribe
makes that call wait for `fake_cupti_release()` from another thread. The fake libcuda's device is
sm_90 and counts the calls that would tell it (`fake_driver_arch_calls()`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

FAKE_LIBCUDA_C = r"""
#include <stdlib.h>
typedef int CUresult;
static const char* env_or(const char* name, const char* dflt) { const char* v = getenv(name); return v ? v : dflt; }
CUresult cuInit(unsigned int flags) { (void)flags; return 0; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuGetErrorString(CUresult r, const char** s) { (void)r; *s = "fake driver error"; return 0; }
CUresult cuCtxGetCurrent(void** ctx) { *ctx = 0; return 0; }
CUresult cuPointerGetAttribute(void* d, int a, unsigned long long p) { (void)d; (void)a; (void)p; return 1; }
CUresult cuEventCreate(void** e, unsigned int f) { (void)f; *e = 0; return 1; }
CUresult cuEventDestroy_v2(void* e) { (void)e; return 0; }
CUresult cuEventRecord(void* e, void* s) { (void)e; (void)s; return 1; }
CUresult cuEventSynchronize(void* e) { (void)e; return 0; }
CUresult cuEventElapsedTime_v2(float* ms, void* a, void* b) { (void)a; (void)b; *ms = 0; return 1; }
CUresult cuStreamGetCtx(void* s, void** c) { (void)s; *c = 0; return 1; }
CUresult cuCtxPushCurrent_v2(void* c) { (void)c; return 0; }
CUresult cuCtxPopCurrent_v2(void** c) { *c = 0; return 0; }
CUresult cuDeviceGet(int* d, int i) { *d = i; return 0; }
CUresult cuDevicePrimaryCtxGetState(int d, unsigned int* f, int* a) { (void)d; *f = 0; *a = 0; return 0; }
CUresult cuDevicePrimaryCtxRetain(void** c, int d) { (void)d; *c = 0; return 1; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return 0; }
CUresult cuDriverGetVersion(int* v) { *v = atoi(env_or("FAKE_CUDA_DRIVER_VERSION", "13000")); return 0; }
/* One sm_90 device; every call a callback might make to learn it is counted. */
static int arch_calls;
int fake_driver_arch_calls(void) { return arch_calls; }
void fake_driver_reset_calls(void) { arch_calls = 0; }
CUresult cuCtxGetDevice(int* d) { arch_calls++; *d = 0; return 0; }
CUresult cuDeviceGetAttribute(int* v, int attr, int d) {
  (void)d;
  arch_calls++;
  *v = attr == 75 ? 9 : 0; /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76 */
  return 0;
}
"""

FAKE_LIBCUPTI_C = r"""
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
typedef int CUptiResult;
typedef void (*Callback)(void* userdata, int domain, unsigned int cbid, const void* data);
typedef struct { CUptiResult result; const char* message; } StateData;

static int subscribed, torn, driver_enabled, unsubscribe_calls;
static Callback callback;
static void* userdata;
static char handle;  /* the subscriber handle is its address */

static int env_int(const char* name, int dflt) { const char* v = getenv(name); return v ? atoi(v) : dflt; }

const char* fake_cupti_tag(void) { return FAKE_TAG; }
int fake_cupti_unsubscribe_calls(void) { return unsubscribe_calls; }

/* FAKE_CUPTI_WAIT=subscribe|unsubscribe: that call waits (up to 3 s) for fake_cupti_release(), which
   another Python thread can only call if warmprof let go of the GIL. */
static volatile int released, waited_out;
void fake_cupti_release(void) { released = 1; }
int fake_cupti_waited_out(void) { return waited_out; }
static void wait_if(const char* call) {
  const char* w = getenv("FAKE_CUPTI_WAIT");
  if (!w || strcmp(w, call) != 0) return;
  struct timespec ms = {0, 1000000};
  for (int i = 0; i < 3000 && !released; ++i) nanosleep(&ms, 0);
  if (!released) waited_out++;
  released = 0;
}

CUptiResult cuptiSubscribe(void** sub, Callback cb, void* ud) {
  wait_if("subscribe");
  CUptiResult r = env_int("FAKE_CUPTI_SUBSCRIBE", 0);
  if (r != 0) return r;
  if (subscribed && !torn) return 39;
  subscribed = 1; torn = 0; driver_enabled = 0; callback = cb; userdata = ud;
  *sub = &handle;
  return 0;
}
CUptiResult cuptiUnsubscribe(void* sub) {
  wait_if("unsubscribe");
  unsubscribe_calls++;
  if (sub != &handle || !subscribed || torn) return 1;  /* CUPTI_ERROR_INVALID_PARAMETER */
  subscribed = 0;
  return 0;
}
CUptiResult cuptiEnableDomain(unsigned int enable, void* sub, int domain) {
  if (sub != &handle || torn) return 1;
  if (domain == 1) driver_enabled = (int)enable;
  return 0;
}
CUptiResult cuptiEnableCallback(unsigned int enable, void* sub, int domain, unsigned int cbid) {
  (void)cbid;
  CUptiResult refused = env_int("FAKE_CUPTI_ENABLE", 0);  /* nonzero: every id refused with it */
  if (refused) return refused;
  return cuptiEnableDomain(enable, sub, domain);
}
#ifndef NO_CALLBACK_STATE
CUptiResult cuptiGetCallbackState(unsigned int* enable, void* sub, int domain, unsigned int cbid) {
  (void)cbid;
  if (sub != &handle || !subscribed || torn) return 1;
  *enable = domain == 1 ? (unsigned int)driver_enabled : 0u;
  return 0;
}
#endif
CUptiResult cuptiGetVersion(unsigned int* v) { *v = (unsigned int)env_int("FAKE_CUPTI_VERSION", 130001); return 0; }
CUptiResult cuptiGetResultString(CUptiResult r, const char** s) {
  static char text[64];
  switch (r) {
    case 1: *s = "CUPTI_ERROR_INVALID_PARAMETER"; break;
    case 15: *s = "CUPTI_ERROR_NOT_INITIALIZED"; break;
    case 39: *s = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"; break;
    default: snprintf(text, sizeof text, "CUPTI_ERROR_%d", r); *s = text;
  }
  return 0;
}
/* Another tool's cuptiFinalize: every subscription is gone, and nobody is told. */
CUptiResult cuptiFinalize(void) { torn = 1; subscribed = 0; return 0; }
/* The handle reused for another tool's subscription, which did not enable driver callbacks. */
void fake_cupti_reuse_handle(void) { torn = 0; subscribed = 1; driver_enabled = 0; }
/* The activity API, for OVERHEAD records (kind 17). Records share CUPTI's layout up to `end`
   (packed: kind, overheadKind, objectKind, objectId (12 bytes), start, end); the fake's own record is
   that prefix, and cuptiActivityGetNextRecord walks records of its size. Timestamps are
   CLOCK_REALTIME ns, CUPTI's default on Linux. */
#ifndef NO_ACTIVITY
typedef struct __attribute__((packed, aligned(8))) {
  unsigned kind, overhead_kind, object_kind;
  unsigned object_id[3]; /* THREAD: {processId, threadId, -} */
  unsigned long long start, end;
} Overhead;
typedef void (*Requested)(unsigned char**, size_t*, size_t*);
typedef void (*Completed)(void*, unsigned, unsigned char*, size_t, size_t);
static Requested requested;
static Completed completed;
static int overhead_enabled;
static Overhead queued[64];
static int nqueued;
static unsigned long long realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}
int fake_cupti_overhead_enabled(void) { return overhead_enabled; }
/* A record of `kind` that ends now and lasted `ns`, naming thread `tid` (0: no thread). */
void fake_cupti_overhead(unsigned kind, unsigned long long ns, unsigned tid) {
  if (nqueued == 64) return;
  Overhead* o = &queued[nqueued++];
  memset(o, 0, sizeof *o);
  o->kind = 17;
  o->overhead_kind = kind;
  o->object_kind = tid ? 2 : 0; /* CUPTI_ACTIVITY_OBJECT_THREAD */
  o->object_id[1] = tid;
  o->end = realtime_ns();
  o->start = o->end - ns;
}
CUptiResult cuptiActivityRegisterCallbacks(Requested r, Completed c) { requested = r; completed = c; return 0; }
CUptiResult cuptiActivityEnable(int kind) { if (kind == 17) overhead_enabled = 1; return 0; }
CUptiResult cuptiActivityDisable(int kind) { if (kind == 17) overhead_enabled = 0; return 0; }
CUptiResult cuptiGetTimestamp(unsigned long long* t) { *t = realtime_ns(); return 0; }
CUptiResult cuptiActivityFlushAll(unsigned flag) {
  (void)flag;
  if (!nqueued || !requested || !completed) return 0;
  unsigned char* buf = 0;
  size_t size = 0, max_records = 0;
  requested(&buf, &size, &max_records);
  size_t valid = (size_t)nqueued * sizeof(Overhead);
  if (!buf || size < valid) return 1;
  memcpy(buf, queued, valid);
  nqueued = 0;
  completed(0, 0, buf, size, valid);
  return 0;
}
CUptiResult cuptiActivityGetNextRecord(unsigned char* buf, size_t valid, void** record) {
  unsigned char* next = *record ? (unsigned char*)*record + sizeof(Overhead) : buf;
  if (next + sizeof(Overhead) > buf + valid) return 12; /* CUPTI_ERROR_MAX_LIMIT_REACHED */
  *record = next;
  return 0;
}
#endif
/* CUPTI's fatal-error notice on the state domain, after which it finalizes itself. */
void fake_cupti_fatal(const char* message) {
  StateData d = {999, message};
  if (callback) callback(userdata, 6, 1, &d);
  cuptiFinalize();
}
"""


def compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def build(folder: Path, file_name: str, source: str, *, soname: str | None = None, defines: dict[str, str] | None = None) -> Path:
    """Compiles `source` into folder/file_name (a shared library with `soname`, default the file name)."""
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / (file_name.replace(".", "_") + ".c")
    src.write_text(source)
    out = folder / file_name
    flags = [f"-D{k}={v}" for k, v in (defines or {}).items()]
    subprocess.run([compiler(), "-shared", "-fPIC", "-O1", *flags, f"-Wl,-soname,{soname or file_name}", "-o", str(out), str(src)],
                   check=True, capture_output=True, text=True, timeout=120)
    return out


def fake_driver(folder: Path) -> Path:
    return build(folder, "libcuda.so.1", FAKE_LIBCUDA_C)


def fake_cupti(folder: Path, file_name: str, tag: str, *, soname: str | None = None, callback_state: bool = True,
               activity: bool = True) -> Path:
    defines = {"FAKE_TAG": f'"{tag}"'}
    if not callback_state:
        defines["NO_CALLBACK_STATE"] = "1"
    if not activity:  # an older or stripped libcupti without the activity API
        defines["NO_ACTIVITY"] = "1"
    return build(folder, file_name, FAKE_LIBCUPTI_C, soname=soname, defines=defines)


# Prepended to every child: helpers to reach the loaded fake and to list the libcuptis mapped.
# (_native.backends() loads libcupti without warmprof.system.cuda_paths, whose folders would replace
# those a test sets with _native.cupti_set_search_path; warmprof.backends() installs them.)
CHILD_PRELUDE = r"""
import ctypes, json, os
import warmprof
from warmprof import _native
from warmprof.system import cuda_paths as _cuda_paths

# The venv's own CUDA wheels (a CUDA build of torch brings nvidia/cu13/lib/libcupti.so.13): never the
# fakes', and a real libcupti driven by the fake driver crashes. Left out of every search the child makes.
_REAL_WHEEL_DIRS = set(_cuda_paths.cupti_dirs())
_cupti_dirs = _cuda_paths.cupti_dirs
_cuda_paths.cupti_dirs = lambda *a, **k: [d for d in _cupti_dirs(*a, **k) if d not in _REAL_WHEEL_DIRS]

def fake():
    lib = ctypes.CDLL(_native.backends()["cupti"]["path"])  # the same handle: already loaded
    lib.fake_cupti_tag.restype = ctypes.c_char_p
    return lib

def mapped_cuptis():
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "/" in line}
    return sorted(p for p in paths if os.path.basename(p).startswith("libcupti.so"))
"""


def run_child(code: str, *, library_path: list[Path], env: dict[str, str] | None = None) -> dict:
    """Runs `code` (after CHILD_PRELUDE) in a fresh interpreter; it prints one JSON object last."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_", "LD_"))}
    child_env["LD_LIBRARY_PATH"] = os.pathsep.join(str(p) for p in library_path)
    child_env.update(env or {})
    proc = subprocess.run([sys.executable, "-c", CHILD_PRELUDE + code], capture_output=True, text=True,
                          timeout=120, env=child_env)
    if proc.returncode != 0:
        raise AssertionError(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])

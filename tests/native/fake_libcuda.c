/* A stand-in libcuda.so.1 for tests/native/test_cuda_events_context.py (compiled there, never
 * committed as a binary): two devices, one context each, and just enough of the driver's rules to
 * tell right event use from wrong. An event belongs to the context current at cuEventCreate and
 * cuEventRecord refuses a stream of another context (CUDA_ERROR_INVALID_HANDLE), as the real
 * driver documents. Every call appends one line to $FAKE_CUDA_LOG. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct { int device; } Ctx;
typedef struct { int device; } Stream;
typedef struct { int id, device; } Event;
static Ctx ctxs[2] = {{0}, {1}};
static Stream streams[2] = {{0}, {1}};
static __thread Ctx* stack[16] = {&ctxs[0]}; /* the thread starts with cuda:0's context current */
static __thread int depth = 1;
static int events;

static void say(const char* fmt, ...) {
  FILE* f = fopen(getenv("FAKE_CUDA_LOG"), "a");
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}
static int cur(void) { return depth ? stack[depth - 1]->device : -1; }
static int ctx_of(Stream* s) { return (size_t)s <= 2 ? cur() : s->device; } /* NULL, LEGACY, PER_THREAD */

void* fake_stream(int device) { return &streams[device]; }
int fake_launch(Stream* s) { say("launch stream_ctx=%d", ctx_of(s)); return 0; }
int cuInit(unsigned f) { return 0; }
int cuDeviceGetCount(int* n) { *n = 2; return 0; }
int cuDeviceGet(int* d, int ordinal) { *d = ordinal; return ordinal >= 0 && ordinal < 2 ? 0 : 101; }
int cuGetErrorString(int r, const char** s) { *s = r == 400 ? "invalid resource handle" : "fake error"; return 0; }
int cuPointerGetAttribute(void* v, int a, unsigned long long p) { return 1; }
int cuCtxGetCurrent(Ctx** c) { *c = depth ? stack[depth - 1] : NULL; return 0; }
int cuCtxPushCurrent_v2(Ctx* c) { stack[depth++] = c; say("push ctx=%d", c->device); return 0; }
int cuCtxPopCurrent_v2(Ctx** c) { *c = stack[--depth]; say("pop ctx=%d", (*c)->device); return 0; }
int cuCtxSynchronize(void) { say("cuCtxSynchronize current=%d", cur()); return 0; }
int cuDevicePrimaryCtxGetState(int d, unsigned* flags, int* active) { *flags = 0; *active = 1; return 0; }
int cuDevicePrimaryCtxRetain(Ctx** c, int d) { *c = &ctxs[d]; say("cuDevicePrimaryCtxRetain device=%d", d); return 0; }
int cuDevicePrimaryCtxRelease_v2(int d) { return 0; }
int cuStreamGetCtx(Stream* s, Ctx** c) { *c = &ctxs[ctx_of(s)]; return 0; }
int cuEventCreate(Event** e, unsigned flags) {
  if (!depth) return 201; /* CUDA_ERROR_INVALID_CONTEXT */
  *e = malloc(sizeof(Event));
  (*e)->id = events++;
  (*e)->device = cur();
  say("cuEventCreate event=%d ctx=%d", (*e)->id, (*e)->device);
  return 0;
}
int cuEventDestroy_v2(Event* e) { free(e); return 0; }
int cuEventRecord(Event* e, Stream* s) {
  int rc = e->device == ctx_of(s) ? 0 : 400; /* CUDA_ERROR_INVALID_HANDLE */
  say("cuEventRecord event=%d event_ctx=%d stream_ctx=%d current=%d rc=%d", e->id, e->device, ctx_of(s), cur(), rc);
  return rc;
}
int cuEventSynchronize(Event* e) { say("cuEventSynchronize event=%d current=%d", e->id, cur()); return 0; }
int cuEventElapsedTime_v2(float* ms, Event* a, Event* b) { *ms = 1.5f; say("cuEventElapsedTime current=%d", cur()); return 0; }

#include "backends/cuda_events.h"

#include <map>
#include <mutex>
#include <vector>

#include "backends/cuda_driver.h"

namespace warmprof::backends::cuda_events {

namespace {

struct Slot {
  CUevent event = nullptr;
  CUcontext context = nullptr;  // events belong to the context they were created in
  bool in_use = false;
};

std::mutex g_mu;
std::vector<Slot> g_pool;
std::map<int, CUcontext> g_primary;  // device -> its primary context, retained once (under g_mu)

// `ctx` current on this thread for the scope (push/pop: whatever was current before comes back).
class Current {
 public:
  Current(const cuda_driver::Api& api, CUcontext ctx) : api_(api), result_(api.cuCtxPushCurrent(ctx)) {}
  ~Current() {
    CUcontext popped = nullptr;
    if (result_ == CUDA_SUCCESS) api_.cuCtxPopCurrent(&popped);
  }
  CUresult result() const { return result_; }
  Current(const Current&) = delete;
  Current& operator=(const Current&) = delete;

 private:
  const cuda_driver::Api& api_;
  CUresult result_;
};

bool special_stream(uintptr_t stream) {
  return stream == 0 || stream == reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY) ||
         stream == reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD);
}

// The primary context of `device` if the runtime has set it up; nullptr with *error otherwise
// (warmprof never creates a context: that would move runtime_init out of the first pass). The
// handle is retained once per device, when the pool is first filled: CUPTI maps
// cuDevicePrimaryCtxRetain to runtime_init, so a pass's own events must not call it.
CUcontext primary_context(const cuda_driver::Api& api, int device, std::string* error) {
  CUdevice dev = 0;
  unsigned int flags = 0;
  int active = 0;
  CUresult r = api.cuDeviceGet(&dev, device);
  if (r == CUDA_SUCCESS) r = api.cuDevicePrimaryCtxGetState(dev, &flags, &active);
  if (r != CUDA_SUCCESS) {
    *error = "CUDA device " + std::to_string(device) + ": " + cuda_driver::error_text(r);
    return nullptr;
  }
  if (!active) {
    *error = "CUDA device " + std::to_string(device) +
             " has no context yet (the runtime has not set up the device)";
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  auto known = g_primary.find(device);
  if (known != g_primary.end()) return known->second;
  CUcontext ctx = nullptr;
  r = api.cuDevicePrimaryCtxRetain(&ctx, dev);
  if (r != CUDA_SUCCESS) {
    *error = "cuDevicePrimaryCtxRetain failed: " + cuda_driver::error_text(r);
    return nullptr;
  }
  api.cuDevicePrimaryCtxRelease(dev);  // the runtime holds its own reference: the handle stays valid
  g_primary[device] = ctx;
  return ctx;
}

// The context `stream` belongs to (see record() in the header). nullptr with *error on failure.
CUcontext stream_context(const cuda_driver::Api& api, uintptr_t stream, int device, std::string* error) {
  CUcontext ctx = nullptr;
  if (!special_stream(stream)) {
    CUresult r = api.cuStreamGetCtx(reinterpret_cast<CUstream>(stream), &ctx);
    if (r != CUDA_SUCCESS) *error = "cuStreamGetCtx failed: " + cuda_driver::error_text(r);
    return r == CUDA_SUCCESS ? ctx : nullptr;
  }
  if (device >= 0) return primary_context(api, device, error);
  if (api.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) {
    *error = "no current CUDA context on this thread (the runtime has not set up the device yet)";
    return nullptr;
  }
  return ctx;
}

// A free slot of `ctx` (current), creating its event when the pool has none. -1 with *error.
int64_t acquire(const cuda_driver::Api& api, CUcontext ctx, std::string* error) {
  for (size_t i = 0; i < g_pool.size(); ++i) {
    if (!g_pool[i].in_use && g_pool[i].context == ctx) return int64_t(i);
  }
  Slot s;
  s.context = ctx;
  CUresult r = api.cuEventCreate(&s.event, CU_EVENT_DEFAULT);  // timing enabled
  if (r != CUDA_SUCCESS) {
    *error = "cuEventCreate failed: " + cuda_driver::error_text(r);
    return -1;
  }
  g_pool.push_back(s);
  return int64_t(g_pool.size() - 1);
}

}  // namespace

bool compiled() { return true; }
bool available() { return cuda_driver::api(nullptr) != nullptr; }
std::string unavailable_reason() {
  std::string reason;
  cuda_driver::api(&reason);
  return reason;
}

int64_t record(uintptr_t stream, int device, std::string* error) {
  const cuda_driver::Api* api = cuda_driver::api(error);
  if (api == nullptr) return -1;
  CUcontext ctx = stream_context(*api, stream, device, error);
  if (ctx == nullptr) return -1;
  Current current(*api, ctx);
  if (current.result() != CUDA_SUCCESS) {
    *error = "cuCtxPushCurrent failed: " + cuda_driver::error_text(current.result());
    return -1;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  const int64_t slot = acquire(*api, ctx, error);
  if (slot < 0) return -1;
  CUresult r = api->cuEventRecord(g_pool[size_t(slot)].event, reinterpret_cast<CUstream>(stream));
  if (r != CUDA_SUCCESS) {
    *error = "cuEventRecord failed: " + cuda_driver::error_text(r);
    return -1;
  }
  g_pool[size_t(slot)].in_use = true;
  return slot;
}

double elapsed_ms(int64_t start_slot, int64_t end_slot, std::string* error) {
  const cuda_driver::Api* api = cuda_driver::api(error);
  if (api == nullptr) return -1;
  CUevent start = nullptr, end = nullptr;
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    const int64_t n = int64_t(g_pool.size());
    if (start_slot < 0 || end_slot < 0 || start_slot >= n || end_slot >= n ||
        !g_pool[size_t(start_slot)].in_use || !g_pool[size_t(end_slot)].in_use) {
      *error = "unknown or released CUDA event slot";
      return -1;
    }
    if (g_pool[size_t(start_slot)].context != g_pool[size_t(end_slot)].context) {
      *error = "the two CUDA events were recorded in different contexts";
      return -1;
    }
    start = g_pool[size_t(start_slot)].event;
    end = g_pool[size_t(end_slot)].event;
    ctx = g_pool[size_t(end_slot)].context;
  }
  Current current(*api, ctx);
  const char* step = "cuCtxPushCurrent";
  CUresult r = current.result();
  if (r == CUDA_SUCCESS) r = api->cuEventSynchronize(end), step = "cuEventSynchronize";
  float ms = 0;
  if (r == CUDA_SUCCESS) r = api->cuEventElapsedTime(&ms, start, end), step = "cuEventElapsedTime";
  if (r != CUDA_SUCCESS) {
    *error = std::string(step) + " failed: " + cuda_driver::error_text(r);
    return -1;
  }
  return double(ms);
}

void release_all() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (Slot& s : g_pool) s.in_use = false;
}

int64_t pool_size() {
  std::lock_guard<std::mutex> lock(g_mu);
  return int64_t(g_pool.size());
}

}  // namespace warmprof::backends::cuda_events

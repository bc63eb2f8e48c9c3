#include "backends/cuda_events.h"

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

// A free slot of `ctx`, creating its event when the pool has none. -1 with *error on failure.
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

int64_t record(uintptr_t stream, std::string* error) {
  const cuda_driver::Api* api = cuda_driver::api(error);
  if (api == nullptr) return -1;
  CUcontext ctx = nullptr;
  if (api->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) {
    *error = "no current CUDA context on this thread (the runtime has not set up the device yet)";
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
  {
    std::lock_guard<std::mutex> lock(g_mu);
    const int64_t n = int64_t(g_pool.size());
    if (start_slot < 0 || end_slot < 0 || start_slot >= n || end_slot >= n ||
        !g_pool[size_t(start_slot)].in_use || !g_pool[size_t(end_slot)].in_use) {
      *error = "unknown or released CUDA event slot";
      return -1;
    }
    start = g_pool[size_t(start_slot)].event;
    end = g_pool[size_t(end_slot)].event;
  }
  CUresult r = api->cuEventSynchronize(end);
  float ms = 0;
  if (r == CUDA_SUCCESS) r = api->cuEventElapsedTime(&ms, start, end);
  if (r != CUDA_SUCCESS) {
    *error = "cuEventElapsedTime failed: " + cuda_driver::error_text(r);
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

// Metal (Apple): a reference probe that measures, on this machine, what a compute pipeline costs
// the first time a shape is seen. It compiles a small MSL kernel at run time
// (newLibraryWithSource:options:error:, once), specialises it per length with a function constant
// (newFunctionWithName:constantValues:error:) and builds a pipeline from each specialisation
// (newComputePipelineStateWithFunction:error:), each timed with warmprof's clock: a measured compile.
// Every length is then dispatched `repeats` times through its own command buffer, whose
// GPUStartTime/GPUEndTime give the GPU time, and each length is built a second time after all of
// them ran (a seen shape: Metal's pipeline cache, if it has one in the process, answers it).
//
// The kernel's source carries a per-process salt in its name and a constant, so an on-disk shader
// cache filled by an earlier run cannot answer the first builds.
//
// metal.mm (Objective-C++, ARC) is the real backend, compiled only on Apple; no_metal.cpp is the
// stub everywhere else. No Objective-C type appears here: the result is plain data.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace warmprof::backends::metal {

bool compiled();
bool available();                  // a Metal device exists (MTLCreateSystemDefaultDevice is not nil)
std::string unavailable_reason();  // empty when available

// One build of the kernel for one length.
struct Build {
  int length = 0;
  bool seen = false;             // false: the length's first build; true: the re-build of a seen length
  int64_t specialise_ns = 0;     // newFunctionWithName:constantValues:error:
  int64_t pipeline_ns = 0;       // newComputePipelineStateWithFunction:error:
};

// One command buffer: one dispatch of a length's pipeline over kRows rows.
struct Dispatch {
  int length = 0;
  int index = 0;                 // 0: the first dispatch after the pipeline was built
  double gpu_start_s = 0.0;      // MTLCommandBuffer.GPUStartTime (host seconds, mach time base)
  double gpu_end_s = 0.0;        // MTLCommandBuffer.GPUEndTime
  double host_commit_s = 0.0;    // mach time in seconds just before commit (same base as the GPU times)
  double host_done_s = 0.0;      // ... and just after waitUntilCompleted returned
  int64_t host_ns = 0;           // warmprof's clock around commit + waitUntilCompleted
};

struct ProbeResult {
  std::string device;            // MTLDevice.name
  std::string error;             // '' when every stage ran; else the stage and NSError text (the
                                 // fields hold what ran before it)
  int64_t device_ns = 0;         // opening the device (once per process, whichever call opened it)
  int64_t library_ns = 0;        // newLibraryWithSource:options:error:
  std::string kernel;            // the kernel function's name (carries the salt)
  int rows = 0;                  // rows per dispatch (each `length` floats)
  std::vector<Build> builds;
  std::vector<Dispatch> dispatches;
  std::vector<double> row_sums;  // per length, in order: the sum of row 0's output (a softmax: ~1)
};

constexpr int kRows = 1024;
constexpr int kMaxLength = 8192;   // two buffers of kRows x length floats: 32 MiB each at most
constexpr int kMaxRepeats = 1000;

// Runs the probe for `lengths` (distinct, 1..kMaxLength) with `repeats` (1..kMaxRepeats) dispatches
// each. Never throws for a Metal failure: it lands in `error`. The caller checks available() and
// the arguments first. Calls are serialised (one probe at a time in a process).
ProbeResult probe(const std::vector<int>& lengths, int repeats);

}  // namespace warmprof::backends::metal

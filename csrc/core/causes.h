// Cause ids shared by the recorder, the CUPTI decoder and python/warmprof/causes.py (the one table).
// Stable: they appear in drained arrays; the names appear in report JSON.
#pragma once
#include <cstdint>

namespace warmprof {

enum Cause : uint8_t {
  kStructure = 0,           // not a cause: passes, modules, phases (where, not why)
  kJitCompile = 1,
  kAlgorithmSelection = 2,
  kGraphCapture = 3,
  kAllocatorGrowth = 4,
  kRuntimeInit = 5,
  kDataTransfer = 6,
  kClockRamp = 7,
  kProfilerOverhead = 8,    // warmprof's / CUPTI's own first-use cost, never blamed on the model
  kCpuContention = 9,       // the model's threads were runnable with no CPU (schedstat run-queue delay)
  kGarbageCollection = 10,  // Python's cyclic garbage collector ran (gc.callbacks' start and stop)
  kNumCauses = 11,
};

enum RecordKind : uint8_t {
  kBegin = 0,
  kEnd = 1,
  kInstant = 2,
  kCounter = 3,
};

}  // namespace warmprof

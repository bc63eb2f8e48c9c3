// Raw ticks on the hot path, converted to nanoseconds later.
// x86-64 with an invariant TSC: rdtsc. aarch64: the virtual counter. Else CLOCK_MONOTONIC ns.
#pragma once
#include <cstdint>
#include <ctime>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace warmprof::clock {

extern bool g_use_tsc;  // decided once at load; never changes afterwards

inline uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

inline uint64_t ticks() {
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_expect(g_use_tsc, 1)) return __rdtsc();
#elif defined(__aarch64__)
  uint64_t v;
  asm volatile("mrs %0, cntvct_el0" : "=r"(v));
#ifdef WARMPROF_PLANT_BUG_CLOCK  // planted bug, defined only by tests/cross/run_aarch64.sh: a read in 16 steps back
  static thread_local unsigned planted_reads = 0;
  if ((++planted_reads & 15) == 0) v -= 1024;
#endif
  return v;
#endif
  return monotonic_ns();
}

// Conversion ticks -> CLOCK_MONOTONIC ns: ns = ns0 + (t - t0) * ns_per_tick.
struct Calibration {
  double ns_per_tick = 1.0;
  uint64_t tick0 = 0;
  uint64_t ns0 = 0;
  int samples = 0;
  double spread = 0.0;  // (p90 - p10) / median of the per-sample slopes
  const char* source = "clock_gettime";
  bool source_refined = false;  // slope re-taken against the start-up anchor (refine())
};

// Median of values (copied; NaN-free input expected). Uses a strict weak order
// comparator on doubles, not an int-truncating one. Empty input -> 0.
double median(std::vector<double> values);
double percentile(std::vector<double> values, double q);  // q clamped to [0, 1]

// Calibrates once (about `duration_ms` of spinning) and caches the result.
const Calibration& calibration();
void refine();  // re-take the slope over the process lifetime (cold; called at recorder start)
Calibration calibrate(int pairs, double duration_ms);
int64_t to_ns(uint64_t tick);
uint64_t from_ns(int64_t ns);
bool invariant_tsc();
double read_cost_ns(int iterations);  // mean ns of one ticks() read, tight loop

}  // namespace warmprof::clock

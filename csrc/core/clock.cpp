#include "core/clock.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace warmprof::clock {

bool invariant_tsc() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0x80000000u, nullptr) < 0x80000007u) return false;
  __cpuid(0x80000007u, a, b, c, d);
  return (d & (1u << 8)) != 0;  // CPUID.80000007H:EDX[8] invariant TSC
#else
  return false;
#endif
}

bool g_use_tsc = invariant_tsc();

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  if (!(q >= 0.0)) q = 0.0;  // also NaN
  if (q > 1.0) q = 1.0;
  std::sort(values.begin(), values.end(), [](double x, double y) { return x < y; });
  double pos = q * double(values.size() - 1);
  size_t lo = size_t(std::floor(pos));
  size_t hi = std::min(lo + 1, values.size() - 1);
  double frac = pos - double(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

double median(std::vector<double> values) { return percentile(std::move(values), 0.5); }

namespace {
// One (tick, ns) pair with the tick read on both sides of the ns read; keeps the tighter of a few.
struct Pair { double tick; double ns; };
Pair read_pair() {
  Pair best{0, 0};
  uint64_t best_width = ~0ull;
  for (int i = 0; i < 5; ++i) {
    uint64_t a = ticks();
    uint64_t n = monotonic_ns();
    uint64_t b = ticks();
    if (b - a < best_width) {
      best_width = b - a;
      best = {double(a) / 2.0 + double(b) / 2.0, double(n)};
    }
  }
  return best;
}
}  // namespace

Calibration calibrate(int pairs, double duration_ms) {
  Calibration cal;
#if defined(__aarch64__)
  const bool raw_counter = true;
#else
  const bool raw_counter = g_use_tsc;
#endif
  if (!raw_counter) {
    cal.ns_per_tick = 1.0;
    cal.tick0 = 0;
    cal.ns0 = 0;
    cal.samples = 0;
    cal.source = "clock_gettime";
    return cal;
  }
  if (pairs < 3) pairs = 3;
  std::vector<Pair> ps;
  ps.reserve(size_t(pairs));
  const double step_ns = duration_ms * 1e6 / double(pairs - 1);
  Pair first = read_pair();
  ps.push_back(first);
  for (int i = 1; i < pairs; ++i) {
    double target = first.ns + step_ns * i;
    while (double(monotonic_ns()) < target) {
    }
    ps.push_back(read_pair());
  }
  // Slopes between pairs half the run apart: each long enough that read jitter is small.
  std::vector<double> slopes;
  const size_t half = ps.size() / 2;
  for (size_t i = 0; i + half < ps.size(); ++i) {
    double dt = ps[i + half].tick - ps[i].tick;
    if (dt > 0) slopes.push_back((ps[i + half].ns - ps[i].ns) / dt);
  }
  cal.ns_per_tick = median(slopes);
#ifdef WARMPROF_PLANT_BUG_CALIBRATION  // planted bug, defined only by tests/cross/run_aarch64.sh: slope 3x off
  cal.ns_per_tick *= 3.0;
#endif
  double p10 = percentile(slopes, 0.1), p90 = percentile(slopes, 0.9);
  cal.spread = cal.ns_per_tick > 0 ? (p90 - p10) / cal.ns_per_tick : 0.0;
  cal.samples = int(slopes.size());
  const Pair& mid = ps[ps.size() / 2];
  cal.tick0 = uint64_t(mid.tick);
  cal.ns0 = uint64_t(mid.ns);
#if defined(__aarch64__)
  cal.source = "cntvct_el0";
#else
  cal.source = "rdtsc";
#endif
  return cal;
}

namespace {
Calibration& mutable_calibration() {
  static Calibration cal = calibrate(41, 20.0);
  return cal;
}

// The slope used for conversions. refine() may change it while another thread converts, so it
// is read and written atomically (a relaxed load of an aligned double: a plain load on x86-64 and
// aarch64). The Calibration's ns_per_tick field mirrors it for clock_info().
std::atomic<double>& slope() {
  static std::atomic<double> s{mutable_calibration().ns_per_tick};
  return s;
}
std::mutex g_refine_mu;
}  // namespace

const Calibration& calibration() { return mutable_calibration(); }

// The 20 ms start-up slope can be off by ~1e-4 on a loaded machine. Once the process has lived
// longer, one tight (tick, ns) pair against the start-up anchor gives a slope whose error is the
// read jitter divided by the whole lifetime. Called at recorder start(), before recording is
// enabled, so a recording converts with one slope throughout. Concurrent start()s are serialized;
// a conversion on another thread reads either the old or the new slope, never a torn one.
void refine() {
  std::lock_guard<std::mutex> lock(g_refine_mu);
  Calibration& c = mutable_calibration();
  if (c.samples == 0) return;
  Pair p = read_pair();
  const double dns = p.ns - double(c.ns0);
  const double dt = p.tick - double(c.tick0);
  if (dns < 200e6 || dt <= 0) return;  // under 200 ms: the start-up median is better
  const double s = dns / dt;
  slope().store(s, std::memory_order_relaxed);
  c.ns_per_tick = s;  // read only by clock_info(), on the Python thread that holds the GIL
  c.source_refined = true;
}

int64_t to_ns(uint64_t tick) {
  const Calibration& c = calibration();
  if (c.samples == 0) return int64_t(tick);
  double d = (double(int64_t(tick - c.tick0))) * slope().load(std::memory_order_relaxed);
  return int64_t(c.ns0) + int64_t(std::llround(d));
}

uint64_t from_ns(int64_t ns) {
  const Calibration& c = calibration();
  if (c.samples == 0) return uint64_t(ns);
  double d = double(ns - int64_t(c.ns0)) / slope().load(std::memory_order_relaxed);
  return c.tick0 + uint64_t(int64_t(std::llround(d)));
}

// Mean ns of one ticks() read in a tight loop: the clock's share of every span's cost.
double read_cost_ns(int iterations) {
  if (iterations <= 0) return 0.0;
  uint64_t sink = 0;
  const uint64_t t0 = monotonic_ns();
  for (int i = 0; i < iterations; ++i) sink += ticks();
  const uint64_t t1 = monotonic_ns();
  volatile uint64_t keep = sink;  // the reads must not be optimised away
  (void)keep;
  return double(t1 - t0) / double(iterations);
}

}  // namespace warmprof::clock

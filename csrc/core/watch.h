// warmprof.watch's per-key state: a bounded table of keys, each with a fixed-size latency sketch.
// Pure C++ (no Python): the Python type in csrc/watch_type.cpp drives it under its own mutex.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace warmprof::watch {

// Latency sketch: counts in log-spaced buckets, 4 per octave (each about 19% wide), from 64 ns to
// about 275 s; a duration outside lands in the first or last bucket. 512 bytes, O(1) to add, a
// quantile is a walk over 128 counts. Quantiles are a bucket's geometric midpoint: within 12%.
class Sketch {
 public:
  static constexpr int kBuckets = 128;
  static constexpr int kPerOctave = 4;
  static constexpr int kFirstOctave = 6;  // 2^6 = 64 ns

  static int bucket_of(uint64_t ns);
  static double lower_ns(int bucket);  // a bucket's lower edge
  static double mid_ns(int bucket);    // its geometric midpoint

  void add(uint64_t ns);
  uint64_t count() const { return count_; }
  double quantile(double q) const;  // 0 when empty
  // quantile(0.5), kept up to date by add(): O(1) a call where quantile() walks the 128 buckets twice
  // (the outlier rule reads it on every call of a key past min_calls).
  double median() const { return total_ == 0 ? 0.0 : mid_ns(median_bucket_); }
  const std::array<uint32_t, kBuckets>& counts() const { return counts_; }

 private:
  std::array<uint32_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t total_ = 0;         // the counts' sum (a bucket saturates at UINT32_MAX; count_ does not)
  int median_bucket_ = 0;      // the first bucket where the counts so far reach half the total
  uint64_t below_median_ = 0;  // the counts in the buckets below it
};

struct KeyState {
  Sketch sketch;
  uint64_t first_ns = 0;  // the first call's duration
  uint64_t max_ns = 0;
  uint64_t total_ns = 0;
  uint64_t events = 0;  // calls kept as events (first, outlier, or something fired)
  uint64_t order = 0;   // the order keys were first seen in
  // Off-CPU time (wall less the thread's CPU time) summed over the key's usual calls whose counters were
  // read (a sample of them: see csrc/watch_type.cpp), those neither its first nor outliers: what a call at this key waits anyway (a remote call it always makes), which an
  // outlier's wait is counted beyond. Signed: a call's CPU time read through getrusage can be high by a
  // scheduler tick, and those errors cancel in the sum.
  int64_t usual_off_cpu_ns = 0;
  uint64_t usual_calls = 0;
};

// The outlier rule: once a key has `min_calls` calls, a call longer than `factor` x its median and
// longer than the median by at least `floor_ns` is an outlier.
struct Rule {
  uint64_t min_calls = 8;
  double factor = 3.0;
  uint64_t floor_ns = 50000;
};

struct Verdict {
  bool first = false;     // the first call at its key
  bool outlier = false;   // against its key's calls so far
  bool admitted = true;   // false: the table was full, the call counted as overflow only
  uint64_t calls = 0;     // calls at the key before this one
  double median_ns = 0;   // the key's median before this call
  double usual_off_cpu_ns = 0;  // the key's mean off-CPU time over its usual calls before this one (0: none, or below 0)
};

class Table {
 public:
  explicit Table(size_t max_keys) : max_keys_(max_keys) {}
  bool known(uint64_t key) const { return keys_.count(key) != 0; }
  // A call at `key` now would be its first, and admitted (the table has room): kept, whatever it takes.
  bool new_admitted(uint64_t key) const { return keys_.size() < max_keys_ && keys_.count(key) == 0; }
  // Add one call's duration at `key`, and its off-CPU time where it was read (`off_cpu_read`: the hot path
  // reads a thread's counters around a sample of its calls, not each); says whether it is the first there
  // or an outlier, and what the key's usual calls spent off the CPU.
  Verdict add(uint64_t key, uint64_t ns, const Rule& rule, int64_t off_cpu_ns = 0, bool off_cpu_read = true);
  void mark_event(uint64_t key);
  size_t size() const { return keys_.size(); }
  uint64_t overflow_calls() const { return overflow_calls_; }
  const std::unordered_map<uint64_t, KeyState>& keys() const { return keys_; }

 private:
  size_t max_keys_;
  std::unordered_map<uint64_t, KeyState> keys_;
  uint64_t overflow_calls_ = 0;  // calls at keys past max_keys
  uint64_t next_order_ = 0;
};

}  // namespace warmprof::watch

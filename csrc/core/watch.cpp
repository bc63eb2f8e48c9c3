#include "core/watch.h"

#include <cmath>

namespace warmprof::watch {

int Sketch::bucket_of(uint64_t ns) {
  if (ns < (uint64_t(1) << kFirstOctave)) return 0;
  const int octave = 63 - __builtin_clzll(ns);
  // the two bits below the leading one: which quarter of the octave
  const int quarter = octave >= 2 ? int((ns >> (octave - 2)) & 3) : 0;
  const int b = (octave - kFirstOctave) * kPerOctave + quarter;
  return b >= kBuckets ? kBuckets - 1 : b;
}

double Sketch::lower_ns(int bucket) {
  const int octave = bucket / kPerOctave + kFirstOctave;
  const int quarter = bucket % kPerOctave;
  return std::ldexp(1.0 + quarter / 4.0, octave);
}

double Sketch::mid_ns(int bucket) {
  const double lo = lower_ns(bucket);
  const double hi = bucket + 1 < kBuckets ? lower_ns(bucket + 1) : lo * 8.0 / 7.0;
  return std::sqrt(lo * hi);
}

void Sketch::add(uint64_t ns) {
  const int b = bucket_of(ns);
  uint32_t& c = counts_[b];
  ++count_;
  if (c == UINT32_MAX) return;  // saturated: the total (and so the median) no longer moves with it
  ++c;
  ++total_;
  if (b < median_bucket_) ++below_median_;
  // quantile(0.5)'s rule: the first bucket where the running count reaches ceil(total / 2). One add moves
  // the target by at most one count: a step or two over the buckets, not a walk over all of them.
  const uint64_t want = (total_ + 1) / 2;
  while (below_median_ + counts_[median_bucket_] < want && median_bucket_ + 1 < kBuckets)
    below_median_ += counts_[median_bucket_++];
  while (median_bucket_ > 0 && below_median_ >= want) below_median_ -= counts_[--median_bucket_];
}

double Sketch::quantile(double q) const {
  if (count_ == 0) return 0.0;
  uint64_t total = 0;
  for (uint32_t c : counts_) total += c;
  const double want = q <= 0 ? 1.0 : std::ceil(q * double(total));
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += counts_[b];
    if (double(seen) >= want) return mid_ns(b);
  }
  return mid_ns(kBuckets - 1);
}

Verdict Table::add(uint64_t key, uint64_t ns, const Rule& rule, int64_t off_cpu_ns, bool off_cpu_read) {
  Verdict v;
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    if (keys_.size() >= max_keys_) {
      ++overflow_calls_;
      v.admitted = false;
      v.first = true;
      return v;
    }
    it = keys_.emplace(key, KeyState{}).first;
    it->second.first_ns = ns;
    it->second.order = next_order_++;
    v.first = true;
  }
  KeyState& k = it->second;
  v.calls = k.sketch.count();
  if (!v.first && v.calls >= rule.min_calls) {
    v.median_ns = k.sketch.median();
    v.outlier = double(ns) > rule.factor * v.median_ns && double(ns) - v.median_ns >= double(rule.floor_ns);
  }
  if (k.usual_calls > 0 && k.usual_off_cpu_ns > 0) v.usual_off_cpu_ns = double(k.usual_off_cpu_ns) / double(k.usual_calls);
  if (!v.first && !v.outlier && off_cpu_read) {
    k.usual_off_cpu_ns += off_cpu_ns;
    ++k.usual_calls;
  }
  k.sketch.add(ns);
  k.total_ns += ns;
  if (ns > k.max_ns) k.max_ns = ns;
  return v;
}

void Table::mark_event(uint64_t key) {
  auto it = keys_.find(key);
  if (it != keys_.end()) ++it->second.events;
}

}  // namespace warmprof::watch

// The Python-free native core (csrc/core) tested as plain C++, without Python or pybind11, so the
// same program can be cross-compiled for aarch64 and run under qemu-user (tests/cross/run_aarch64.sh).
// On aarch64 it checks the clock really reads cntvct_el0 and that its calibration agrees with the
// architectural counter frequency (cntfrq_el0). Every check prints "ok <name>" or "FAIL <name>: why";
// the exit status is 1 when any check failed. Nothing asserts absolute durations: under emulation
// everything is slow; the checks are on order, structure and ratios.
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/causes.h"
#include "core/clock.h"
#include "core/fd_tap.h"
#include "core/host.h"
#include "core/recorder.h"
#include "core/watch.h"

namespace {

using namespace warmprof;

int g_checks = 0;
int g_failed = 0;

// A named check: passes when `cond`, else prints why (printf-style) and counts the failure.
bool check(bool cond, const char* name, const char* fmt = "", ...) {
  ++g_checks;
  if (cond) {
    std::printf("ok   %s\n", name);
    return true;
  }
  ++g_failed;
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  std::printf("FAIL %s: %s\n", name, why);
  return false;
}

void info(const char* fmt, ...) {
  std::printf("info ");
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::printf("\n");
}

// Run under qemu-user (run_aarch64.sh says so): some /proc files are qemu's emulation or qemu's own.
bool emulated() {
  const char* e = std::getenv("WARMPROF_CORE_TEST_EMULATED");
  return e && *e && std::strcmp(e, "0") != 0;
}

uint64_t gettid_u64() { return uint64_t(syscall(SYS_gettid)); }

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

const char* arch() {
#if defined(__aarch64__)
  return "aarch64";
#elif defined(__x86_64__)
  return "x86_64";
#else
  return "other";
#endif
}

// ---------------------------------------------------------------------------------------------
// clock

// Monotonic ticks on one thread: `n` reads in a row, returns the first step backwards (0: none).
int64_t first_backward_step(int n) {
  uint64_t prev = clock::ticks();
  for (int i = 0; i < n; ++i) {
    const uint64_t t = clock::ticks();
    if (t < prev) return int64_t(prev - t);
    prev = t;
  }
  return 0;
}

void test_clock() {
  const clock::Calibration& cal = clock::calibration();
  info("clock source=%s ns_per_tick=%.6f samples=%d spread=%.5f", cal.source, cal.ns_per_tick, cal.samples,
       cal.spread);

#if defined(__aarch64__)
  // The aarch64 path: the virtual counter, calibrated against CLOCK_MONOTONIC.
  check(std::strcmp(cal.source, "cntvct_el0") == 0, "clock.source_is_cntvct_el0", "source=%s", cal.source);
  check(cal.samples > 0, "clock.calibrated", "samples=%d", cal.samples);
  // ticks() is the counter itself: a read lies between two raw reads of cntvct_el0.
  {
    bool inside = true;
    uint64_t a = 0, t = 0, b = 0;
    for (int i = 0; i < 1000 && inside; ++i) {
      asm volatile("isb; mrs %0, cntvct_el0" : "=r"(a));
      t = clock::ticks();
      asm volatile("isb; mrs %0, cntvct_el0" : "=r"(b));
      inside = a <= t && t <= b;
    }
    check(inside, "clock.ticks_read_cntvct_el0", "raw %" PRIu64 " <= ticks %" PRIu64 " <= raw %" PRIu64 " broken", a,
          t, b);
  }
  // The calibrated slope agrees with the architectural counter frequency.
  {
    uint64_t frq = 0;
    asm volatile("mrs %0, cntfrq_el0" : "=r"(frq));
    const double arch_ns_per_tick = frq ? 1e9 / double(frq) : 0.0;
    info("cntfrq_el0=%" PRIu64 " Hz (%.4f ns/tick)", frq, arch_ns_per_tick);
    if (check(frq > 0, "clock.cntfrq_el0_readable", "cntfrq_el0=0")) {
      const double r = cal.ns_per_tick / arch_ns_per_tick;
      check(r > 0.95 && r < 1.05, "clock.calibration_matches_cntfrq_el0",
            "calibrated %.6f ns/tick vs cntfrq_el0's %.6f (ratio %.4f)", cal.ns_per_tick, arch_ns_per_tick, r);
    }
  }
#elif defined(__x86_64__)
  const bool want_tsc = clock::invariant_tsc();
  check(std::strcmp(cal.source, want_tsc ? "rdtsc" : "clock_gettime") == 0, "clock.source_matches_cpu",
        "source=%s invariant_tsc=%d", cal.source, int(want_tsc));
#endif
  check(cal.ns_per_tick > 0.01 && cal.ns_per_tick < 100.0, "clock.ns_per_tick_plausible",
        "%.6f ns/tick (not a 10 MHz .. 100 GHz counter)", cal.ns_per_tick);
  if (std::strcmp(cal.source, "clock_gettime") != 0)
    // Loose: under emulation a calibration pair can be stretched by the translator.
    check(cal.spread >= 0 && cal.spread < 0.25, "clock.calibration_spread", "spread=%.5f", cal.spread);

  // The counter's resolution, for the record (qemu-user derives cntvct_el0 from gettimeofday).
  {
    uint64_t step = ~0ull, prev = clock::ticks();
    for (int i = 0; i < 100000; ++i) {
      const uint64_t t = clock::ticks();
      if (t > prev && t - prev < step) step = t - prev;
      prev = t;
    }
    info("smallest tick step seen: %" PRIu64 " ticks (%.1f ns)", step, double(step) * cal.ns_per_tick);
  }
  // Monotonic on this thread and on two threads at once.
  const int64_t back = first_backward_step(200000);
  check(back == 0, "clock.ticks_monotonic", "ticks stepped back by %" PRId64, back);
  {
    std::atomic<int64_t> backs[2] = {{0}, {0}};
    std::thread t1([&] { backs[0] = first_backward_step(100000); });
    std::thread t2([&] { backs[1] = first_backward_step(100000); });
    t1.join();
    t2.join();
    check(backs[0] == 0 && backs[1] == 0, "clock.ticks_monotonic_two_threads", "steps back %" PRId64 ", %" PRId64,
          int64_t(backs[0]), int64_t(backs[1]));
  }
  // Conversion: monotonic over real reads and over synthetic steps far from the calibration point.
  {
    std::vector<uint64_t> ts(2000);
    for (auto& t : ts) t = clock::ticks();
    bool mono = true;
    for (size_t i = 1; i < ts.size(); ++i) mono = mono && clock::to_ns(ts[i]) >= clock::to_ns(ts[i - 1]);
    check(mono, "clock.to_ns_monotonic", "to_ns not monotonic over consecutive reads");
    bool steps = true;
    for (int k = 1; k < 200; ++k)
      steps = steps && clock::to_ns(ts.back() + uint64_t(k) * 1000003u) > clock::to_ns(ts.back() + uint64_t(k - 1) * 1000003u);
    check(steps, "clock.to_ns_increasing_far_out", "to_ns not increasing over synthetic steps");
    const int64_t ns = clock::to_ns(ts.back());
    const int64_t back_ns = clock::to_ns(clock::from_ns(ns));
    check(std::llabs(back_ns - ns) <= int64_t(std::ceil(cal.ns_per_tick)) + 1, "clock.from_ns_round_trip",
          "to_ns(from_ns(%" PRId64 ")) = %" PRId64, ns, back_ns);
  }
  // Converted ticks track CLOCK_MONOTONIC over a sleep: agree within a loose band (emulation).
  {
    const uint64_t t0 = clock::ticks(), n0 = clock::monotonic_ns();
    sleep_ms(30);
    const uint64_t t1 = clock::ticks(), n1 = clock::monotonic_ns();
    const double from_ticks = double(clock::to_ns(t1) - clock::to_ns(t0));
    const double r = from_ticks / double(n1 - n0);
    info("30 ms sleep: %.0f ns by ticks, %.0f ns by CLOCK_MONOTONIC (ratio %.4f)", from_ticks, double(n1 - n0), r);
    check(r > 0.5 && r < 2.0, "clock.interval_agrees_with_monotonic", "ratio %.4f outside 0.5..2", r);
    // Now-time: to_ns(ticks()) lands between two CLOCK_MONOTONIC reads give or take the calibration error.
    const uint64_t a = clock::monotonic_ns();
    const int64_t mid = clock::to_ns(clock::ticks());
    const uint64_t b = clock::monotonic_ns();
    const double slack = 2e6 + 0.01 * double(b - cal.ns0);  // 2 ms + 1% of the time since calibration
    check(double(mid) > double(a) - slack && double(mid) < double(b) + slack, "clock.to_ns_is_monotonic_time",
          "to_ns(now)=%" PRId64 " vs CLOCK_MONOTONIC %" PRIu64 "..%" PRIu64, mid, a, b);
  }
  // Statistics helpers the calibration relies on.
  check(clock::median({5.0, 1.0, 3.0}) == 3.0 && clock::median({}) == 0.0 &&
            clock::percentile({1.0, 2.0, 3.0, 4.0, 5.0}, 0.25) == 2.0 && clock::percentile({0.5, 1.5}, 0.5) == 1.0,
        "clock.median_percentile");
  info("ticks() read cost: %.1f ns", clock::read_cost_ns(20000));
}

// ---------------------------------------------------------------------------------------------
// recorder

struct Gate {  // both workers start recording together so their records interleave in time
  std::mutex mu;
  std::condition_variable cv;
  int waiting = 0;
  void arrive(int n) {
    std::unique_lock<std::mutex> lock(mu);
    if (++waiting == n) cv.notify_all();
    cv.wait(lock, [&] { return waiting >= n; });
  }
};

constexpr int kSpans = 3000;
constexpr int kTurns = 100;  // the first spans alternate between the workers: the drained order must interleave
std::atomic<int> g_turn{0};

void worker(int k, uint32_t name, uint8_t cause, Gate* gate, uint64_t* tid) {
  *tid = gettid_u64();
  recorder::prepare_thread();
  gate->arrive(2);
  for (int i = 0; i < kSpans; ++i) {
    if (i < kTurns)
      while (g_turn.load(std::memory_order_acquire) != 2 * i + k) std::this_thread::yield();
    recorder::record(kBegin, cause, name, 0);
    recorder::record(kCounter, kStructure, name, int64_t(i));
    recorder::record(kEnd, cause, name, 0);
    if (i < kTurns) {
      // The other worker's next record must read a later tick, not an equal one (qemu-user's
      // cntvct_el0 moves in 1 us steps): equal ticks keep buffer order, not time order.
      const uint64_t last = clock::ticks();
      while (clock::ticks() == last) {
      }
      g_turn.fetch_add(1, std::memory_order_release);
    }
  }
}

void test_recorder_threads() {
  const uint32_t outer = recorder::intern("test:outer");
  const uint32_t names[2] = {recorder::intern("test:worker0"), recorder::intern("test:worker1")};
  check(recorder::intern("test:worker0") == names[0] && names[0] != names[1] && names[0] != outer,
        "recorder.intern_stable");
  {
    const auto all = recorder::names();
    check(all.size() > names[1] && all[names[1]] == "test:worker1", "recorder.names_lookup");
  }
  recorder::set_capacity(16384);
  recorder::start(2);
  check(recorder::enabled(), "recorder.enabled_after_start");
  const uint64_t main_tid = gettid_u64();
  recorder::record(kBegin, kStructure, outer, 7);
  Gate gate;
  uint64_t tids[2] = {0, 0};
  g_turn.store(0);
  std::thread w0(worker, 0, names[0], uint8_t(kJitCompile), &gate, &tids[0]);
  std::thread w1(worker, 1, names[1], uint8_t(kAllocatorGrowth), &gate, &tids[1]);
  w0.join();
  w1.join();
  recorder::record(kEnd, kStructure, outer, 8);
  recorder::stop();
  check(!recorder::enabled() && !recorder::record(kInstant, kStructure, outer, 0), "recorder.stopped_records_nothing");
  const recorder::Drained d = recorder::drain();
  info("drained %zu records from %zu threads, dropped %" PRIu64, d.records.size(), d.threads, d.dropped);

  check(d.dropped == 0, "recorder.nothing_dropped", "dropped=%" PRIu64, d.dropped);
  check(d.threads == 3, "recorder.three_threads", "threads=%zu", d.threads);
  check(d.records.size() == size_t(2 + 2 * 3 * kSpans), "recorder.record_count", "%zu records", d.records.size());
  // Sorted by ticks across threads; the outer span encloses everything.
  size_t unsorted = 0;
  for (size_t i = 1; i < d.records.size(); ++i) unsorted += d.records[i].ticks < d.records[i - 1].ticks;
  check(unsorted == 0, "recorder.drain_sorted_by_ticks", "%zu records out of tick order", unsorted);
  if (d.records.size() >= 2) {
    const auto& first = d.records.front();
    const auto& last = d.records.back();
    check(first.name == outer && first.kind == kBegin && first.value == 7 && last.name == outer && last.kind == kEnd &&
              last.value == 8,
          "recorder.outer_span_encloses_workers", "first (name %u kind %u) last (name %u kind %u)", first.name,
          unsigned(first.kind), last.name, unsigned(last.kind));
    check(first.thread == last.thread && first.thread < d.os_tids.size() && d.os_tids[first.thread] == main_tid,
          "recorder.main_thread_id", "outer begin on index %u, end on %u -> tid %" PRIu64 ", want %" PRIu64,
          unsigned(first.thread), unsigned(last.thread), first.thread < d.os_tids.size() ? d.os_tids[first.thread] : 0,
          main_tid);
  }
  // Each worker: one thread index of its own, its OS tid, kinds B C E in order, counter values 0..n-1.
  int interleaved = 0;
  uint16_t index[2] = {0xffff, 0xffff};
  for (int k = 0; k < 2; ++k) {
    std::vector<const recorder::Record*> mine;
    for (const auto& r : d.records)
      if (r.name == names[k]) mine.push_back(&r);
    bool one_index = !mine.empty();
    for (const auto* r : mine) one_index = one_index && r->thread == mine.front()->thread;
    char n[64];
    std::snprintf(n, sizeof(n), "recorder.worker%d_one_thread_index", k);
    if (!check(one_index && mine.size() == size_t(3 * kSpans), n, "%zu records, one index: %d", mine.size(),
               int(one_index)))
      continue;
    index[k] = mine.front()->thread;
    std::snprintf(n, sizeof(n), "recorder.worker%d_os_tid", k);
    check(index[k] < d.os_tids.size() && d.os_tids[index[k]] == tids[k], n, "index %u tid %" PRIu64 " want %" PRIu64,
          unsigned(index[k]), index[k] < d.os_tids.size() ? d.os_tids[index[k]] : 0, tids[k]);
    bool kinds = true, values = true, causes = true;
    const uint8_t want_cause = k == 0 ? kJitCompile : kAllocatorGrowth;
    for (size_t i = 0; i < mine.size(); ++i) {
      const uint8_t want = i % 3 == 0 ? kBegin : i % 3 == 1 ? kCounter : kEnd;
      kinds = kinds && mine[i]->kind == want;
      if (i % 3 == 1) values = values && mine[i]->value == int64_t(i / 3);
      else causes = causes && mine[i]->cause == want_cause;
    }
    std::snprintf(n, sizeof(n), "recorder.worker%d_kinds_in_order", k);
    check(kinds, n);
    std::snprintf(n, sizeof(n), "recorder.worker%d_counter_values", k);
    check(values, n);
    std::snprintf(n, sizeof(n), "recorder.worker%d_causes", k);
    check(causes, n);
    // Nothing of another thread under this index.
    bool own = true;
    for (const auto& r : d.records)
      if (r.thread == index[k]) own = own && r.name == names[k];
    std::snprintf(n, sizeof(n), "recorder.worker%d_nothing_mixed_in", k);
    check(own, n);
  }
  check(index[0] != index[1], "recorder.distinct_thread_indices", "%u %u", unsigned(index[0]), unsigned(index[1]));
  for (size_t i = 1; i < d.records.size(); ++i) interleaved += d.records[i].thread != d.records[i - 1].thread;
  // The alternating first spans: at least one switch per turn in tick order.
  check(interleaved >= 2 * kTurns - 1, "recorder.drain_interleaves_threads", "%d thread switches along the drained order",
        interleaved);
  // Converted times follow the drained order.
  bool ns_order = true;
  for (size_t i = 1; i < d.records.size(); ++i)
    ns_order = ns_order && clock::to_ns(d.records[i].ticks) >= clock::to_ns(d.records[i - 1].ticks);
  check(ns_order, "recorder.drained_ns_monotonic");
}

void test_recorder_overflow() {
  const size_t small = 64;
  recorder::set_capacity(small);
  check(recorder::capacity() == small, "recorder.set_capacity");
  const uint32_t nm = recorder::intern("test:overflow");
  const uint32_t other = recorder::intern("test:overflow_thread");
  recorder::start();
  size_t accepted = 0;
  for (int i = 0; i < 1000; ++i) accepted += recorder::record(kInstant, kStructure, nm, i);
  std::thread t([&] {
    for (int i = 0; i < 200; ++i) recorder::record(kInstant, kStructure, other, i);
  });
  t.join();
  recorder::stop();
  const recorder::Drained d = recorder::drain();
  size_t mine = 0, theirs = 0;
  bool values = true;
  int64_t expect = 0;
  for (const auto& r : d.records) {
    if (r.name == nm) {
      ++mine;
      values = values && r.value == expect++;
    } else if (r.name == other) {
      ++theirs;
    }
  }
  info("overflow: %zu + %zu kept, %" PRIu64 " dropped", mine, theirs, d.dropped);
  check(accepted == small, "recorder.append_reports_full", "accepted %zu of 1000", accepted);
  check(mine == small && theirs == small, "recorder.capacity_per_thread", "kept %zu and %zu, capacity %zu", mine,
        theirs, small);
  check(values, "recorder.full_buffer_keeps_first_records");
  check(d.dropped == (1000 - small) + (200 - small), "recorder.overflow_counted_as_dropped", "dropped=%" PRIu64,
        d.dropped);

  // A new recording starts from empty buffers; release() gives the pages back and empties them.
  recorder::start();
  recorder::record(kInstant, kStructure, nm, 42);
  recorder::stop();
  const recorder::Drained again = recorder::drain();
  check(again.records.size() == 1 && again.records[0].value == 42 && again.dropped == 0,
        "recorder.new_generation_starts_empty", "%zu records, dropped %" PRIu64, again.records.size(), again.dropped);
  recorder::release();
  check(recorder::drain().records.empty(), "recorder.release_empties");
  recorder::set_capacity(size_t(1) << 18);
}

// ---------------------------------------------------------------------------------------------
// host counters

// Fresh anonymous memory (never touched), one byte written per page. Left mapped: the caller unmaps.
char* touch_fresh(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  volatile char* v = static_cast<volatile char*>(p);
  const size_t ps = size_t(host::page_size());
  for (size_t i = 0; i < bytes; i += ps) v[i] = 1;
  return static_cast<char*>(p);
}

void test_host() {
  constexpr size_t MiB = size_t(1) << 20;
  const int64_t ps = host::page_size();
  info("page size %" PRId64, ps);
  check(ps >= 4096 && (ps & (ps - 1)) == 0, "host.page_size_power_of_two", "%" PRId64, ps);

  const host::Faults f0 = host::faults();
  char* mem = touch_fresh(16 * MiB);
  const host::Faults f1 = host::faults();
  info("faults: minor %" PRId64 " -> %" PRId64 ", major %" PRId64 " -> %" PRId64, f0.minor, f1.minor, f0.major, f1.major);
  check(mem != nullptr, "host.mmap_fresh");
  check(f0.minor >= 0 && f0.major >= 0 && f1.minor > f0.minor && f1.major >= f0.major,
        "host.first_touch_raises_minor_faults", "minor %" PRId64 " -> %" PRId64, f0.minor, f1.minor);
  if (mem) munmap(mem, 16 * MiB);

  const int64_t rss0 = host::rss_bytes();
  mem = touch_fresh(64 * MiB);
  const int64_t rss1 = host::rss_bytes();
  info("rss %" PRId64 " -> %" PRId64 " bytes after touching 64 MiB", rss0, rss1);
  check(rss0 > 0 && rss0 % ps == 0, "host.rss_readable_page_aligned", "rss=%" PRId64, rss0);
  check(rss1 - rss0 >= int64_t(32 * MiB), "host.rss_grows_with_touched_memory", "grew %" PRId64 " bytes",
        rss1 - rss0);
  const host::Memory m = host::memory();
  check(m.resident > 0 && m.file >= 0 && m.file <= m.resident, "host.memory_file_within_resident",
        "resident %" PRId64 " file %" PRId64, m.resident, m.file);
  if (mem) munmap(mem, 64 * MiB);

  const int64_t threads0 = host::thread_count();
  {
    std::mutex mu;
    std::condition_variable cv;
    bool go = false;
    std::thread t([&] {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return go; });
    });
    const int64_t threads1 = host::thread_count();
    {
      std::lock_guard<std::mutex> lock(mu);
      go = true;
    }
    cv.notify_all();
    t.join();
    info("threads %" PRId64 " -> %" PRId64 " with one more alive", threads0, threads1);
    if (threads0 == 0 && emulated()) {
      // qemu-user emulates /proc/self/stat with num_threads 0 (7.2 does), and /proc/self/task is
      // qemu's own (its helper threads too): host.h's "0 where unavailable", said the same both times.
      info("thread count unavailable under emulation (reported 0)");
      check(threads1 == 0, "host.thread_count_absent_cleanly", "%" PRId64 " -> %" PRId64, threads0, threads1);
    } else {
      check(threads0 >= 1 && threads1 >= threads0 + 1, "host.thread_count_sees_a_new_thread",
            "%" PRId64 " -> %" PRId64, threads0, threads1);
    }
  }

  // schedstat: read, or its absence said cleanly (ok=false and zeros).
  const host::SchedStat s0 = host::thread_schedstat();
  if (s0.ok) {
    const uint64_t end = clock::monotonic_ns() + 20000000;  // 20 ms on a CPU
    volatile uint64_t spin = 0;
    while (clock::monotonic_ns() < end) spin = spin + 1;
    const host::SchedStat s1 = host::thread_schedstat();
    info("schedstat: run %" PRId64 " -> %" PRId64 " ns, delay %" PRId64 " ns, slices %" PRId64, s0.run_ns, s1.run_ns,
         s1.delay_ns, s1.slices);
    check(s0.run_ns > 0 && s0.slices > 0 && s0.delay_ns >= 0, "host.schedstat_plausible");
    check(s1.ok && s1.run_ns > s0.run_ns, "host.schedstat_run_time_grows", "%" PRId64 " -> %" PRId64, s0.run_ns,
          s1.run_ns);
  } else {
    info("schedstat: not available here (reported ok=false)");
    check(s0.run_ns == 0 && s0.delay_ns == 0 && s0.slices == 0, "host.schedstat_absent_cleanly");
  }
  const std::vector<host::TaskSched> tasks = host::task_schedstats();
  bool me = false;
  for (const auto& t : tasks) me = me || uint64_t(t.tid) == gettid_u64();
  info("task_schedstats: %zu threads", tasks.size());
  check(!tasks.empty() && me, "host.task_schedstats_lists_this_thread", "%zu tasks", tasks.size());
  const int64_t inv = host::thread_involuntary_switches();
  check(inv >= -1, "host.involuntary_switches", "%" PRId64, inv);

  const host::FaultCost fc = host::calibrate_fault_cost(4 * MiB, 3);
  info("fault cost: %.0f ns/fault, %.0f ns/page, %" PRId64 " faults of %" PRId64 " pages", fc.ns_per_fault,
       fc.ns_per_page, fc.faults, fc.pages);
  check(fc.trials == 3 && fc.pages == int64_t(4 * MiB) / ps && fc.faults > 0 && fc.ns_per_fault > 0 &&
            fc.ns_per_page > 0,
        "host.fault_cost_calibrates");
  const std::vector<host::TouchTrial> trials = host::first_touch_trials(2 * MiB, 2, false);
  bool faulted = trials.size() == 2;
  for (const auto& t : trials) faulted = faulted && t.faults > 0 && t.cpu_ns > 0;
  check(faulted, "host.first_touch_trials", "%zu trials", trials.size());
  check(host::fresh_allocation_ns(MiB, 3) > 0 && host::thread_start_ns(3) > 0, "host.probes_positive");
}

// ---------------------------------------------------------------------------------------------
// the rest of the core: watch's sketch and key table, the stdout tap's splitter (pure logic)

void test_watch_and_tap() {
  using watch::Sketch;
  bool ordered = true;
  for (uint64_t ns = 64; ns < (uint64_t(1) << 30); ns = ns * 5 / 4 + 1)
    ordered = ordered && Sketch::bucket_of(ns) <= Sketch::bucket_of(ns * 5 / 4 + 1);
  check(ordered && Sketch::bucket_of(1) == 0, "watch.buckets_ordered");
  Sketch s;
  for (int i = 0; i < 100; ++i) s.add(1000);
  const double q = s.quantile(0.5);
  check(s.count() == 100 && q > 880 && q < 1120, "watch.sketch_median_within_12pct", "median %.1f", q);
  // the running median is quantile(0.5) after every add, over spread, bimodal and sparse durations
  {
    Sketch m;
    uint64_t x = 88172645463325252ull;
    bool same = m.median() == 0.0;
    for (int i = 0; i < 20000 && same; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift
      const uint64_t ns = i % 3 == 0 ? 200 + x % 100 : (i % 3 == 1 ? 1000000 + x % 4000000 : uint64_t(1) << (x % 40));
      m.add(ns);
      same = m.median() == m.quantile(0.5);
    }
    check(same, "watch.running_median_is_quantile_half", "median %.1f quantile %.1f", m.median(), m.quantile(0.5));
  }
  watch::Table table(1);
  watch::Rule rule;
  watch::Verdict v = table.add(1, 1000, rule);
  for (int i = 0; i < 9; ++i) v = table.add(1, 1000, rule);
  check(v.first == false && v.outlier == false, "watch.steady_calls_not_outliers");
  v = table.add(1, 1000000, rule, 900000);
  check(v.outlier && v.calls == 10, "watch.slow_call_is_outlier", "outlier %d calls %" PRIu64, int(v.outlier), v.calls);
  watch::Table waits(1);
  waits.add(1, 1000, rule, 500);  // a first call: not a usual one
  for (int i = 0; i < 10; ++i) waits.add(1, 1000, rule, i % 2 ? 300 : 100);
  waits.add(1, 1000000, rule, 900000);  // an outlier: not a usual one either
  waits.add(1, 1000, rule, 5000000, false);  // its counters not read: not in the usual calls' mean
  v = waits.add(1, 1000, rule, 0);
  check(v.usual_off_cpu_ns == 200.0, "watch.usual_off_cpu_is_the_usual_calls_mean", "%.1f", v.usual_off_cpu_ns);
  v = table.add(2, 1000, rule);
  check(!v.admitted && table.overflow_calls() == 1, "watch.table_bounded");

  std::string passthrough;
  std::vector<std::string> lines;
  std::vector<uint64_t> segments;
  // tests/native/test_fd_tap.py's pieces cut anywhere: a prefix and the marker split over reads.
  const std::string marker("\0test-mark\0", 11);
  fd_tap::split({"ab onednn", "_verb", std::string("ose,x\n\0test", 11), std::string("-mark\0c", 7), "dnn", "", "l"},
                {"onednn_verbose,", "dnnl_verbose,"}, marker, &passthrough, &lines, &segments);
  check(passthrough == "ab cdnnl" && lines.size() == 1 && lines[0] == "onednn_verbose,x\n" && segments.size() == 1 &&
            segments[0] == 0,
        "fd_tap.splitter_pieces_cut_anywhere", "passthrough '%s', %zu lines", passthrough.c_str(), lines.size());
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  info("arch %s, built %s", arch(),
#ifdef WARMPROF_PLANT_BUG_CLOCK
       "with planted bug: clock"
#elif defined(WARMPROF_PLANT_BUG_CALIBRATION)
       "with planted bug: calibration"
#elif defined(WARMPROF_PLANT_BUG_RECORDER)
       "with planted bug: recorder"
#else
       "clean"
#endif
  );
  test_clock();
  test_recorder_threads();
  test_recorder_overflow();
  test_host();
  test_watch_and_tap();
  std::printf("core_test %s: %d checks, %d failed\n", arch(), g_checks, g_failed);
  return g_failed ? 1 : 0;
}

// Host counters of this process and the calibration probes that turn them into time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace warmprof::host {

struct Faults {
  int64_t minor = 0;
  int64_t major = 0;
};
Faults faults();            // getrusage(RUSAGE_SELF)
// Both read /proc files kept open (reopened after a fork): cheap enough for every module boundary.
int64_t rss_bytes();        // resident set size, from /proc/self/statm (0 where unavailable)
struct Memory {
  int64_t resident = 0;  // bytes resident (RssAnon + RssFile + RssShmem)
  int64_t file = 0;      // of which file-backed or shared (RssFile + RssShmem): library code and data paged in
};
Memory memory();            // both from one read of /proc/self/statm (about 1.1 us); zeros where unavailable
int64_t thread_count();     // threads of this process: links of /proc/self/task, else /proc/self/stat (0 where unavailable)
int64_t page_size();

// CPU contention. The kernel's scheduler statistics (/proc/<pid>/task/<tid>/schedstat, kernels with
// CONFIG_SCHED_INFO): time a thread ran on a CPU, and time it was runnable but waiting for one (its
// run-queue delay), both cumulative ns since the thread started.
struct SchedStat {
  bool ok = false;       // false: no schedstat here (the kernel lacks it, or /proc is not mounted)
  int64_t run_ns = 0;
  int64_t delay_ns = 0;  // runnable, not running: the wait for a CPU
  int64_t slices = 0;    // times it ran on a CPU
};
// The calling thread's, from /proc/thread-self/schedstat kept open per thread (reopened after a
// fork): one pread, cheap enough for every module boundary.
SchedStat thread_schedstat();
// The calling thread's involuntary context switches (getrusage RUSAGE_THREAD); -1 where unavailable.
int64_t thread_involuntary_switches();

// Off-CPU time. A thread's wall time is its CPU time, plus its run-queue delay (schedstat), plus the
// time it was blocked: a sleep, a lock, a socket, a read from storage. Blocking is a voluntary context
// switch; a read from storage is block input or a major fault of the thread's own.
struct ThreadUsage {
  bool ok = false;           // false: no RUSAGE_THREAD here (macOS)
  int64_t voluntary = 0;     // context switches where the thread blocked
  int64_t involuntary = 0;   // preemptions
  int64_t read_bytes = 0;    // bytes read from storage for it (ru_inblock, which Linux counts in 512-byte units)
  int64_t major_faults = 0;  // its page faults that read from storage
};
ThreadUsage thread_usage();  // one getrusage(RUSAGE_THREAD), about 0.5 us
// The calling thread's CPU time in ns (CLOCK_THREAD_CPUTIME_ID: exact, where schedstat's run time is
// only brought up to date at a tick or a switch); -1 where unavailable. About 1 us (a syscall that
// takes the run queue's lock): module boundaries read it only after the thread left its CPU.
int64_t thread_cpu_ns();
struct TaskSched {
  int64_t tid = 0;
  SchedStat sched;
  int64_t voluntary = -1;    // context switches from /proc/<pid>/task/<tid>/status (-1: not read)
  int64_t involuntary = -1;
};
// Every thread of this process (opens two files per thread: pass boundaries, not module ones).
std::vector<TaskSched> task_schedstats();

struct FaultCost {
  // Touch time is the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), not wall: waits for a core on
  // a busy machine are not a cost of the faults.
  double ns_per_fault = 0;  // median over trials of (touch time / faults taken)
  double ns_per_page = 0;   // median over trials of (touch time / pages touched)
  int64_t faults = 0;       // faults seen in the median trial
  int64_t pages = 0;
  int trials = 0;
};
// Maps `bytes` of fresh anonymous memory `trials` times, touches one byte per page, times it.
FaultCost calibrate_fault_cost(size_t bytes, int trials);

// One first touch of fresh anonymous memory: the thread's CPU time and the faults it took.
struct TouchTrial {
  double cpu_ns = 0;
  int64_t faults = 0;
};
// `trials` fresh mappings of `bytes`, each advised MADV_HUGEPAGE (huge) or MADV_NOHUGEPAGE (not) and
// aligned to 2 MiB, one byte written per page and the touch timed in thread CPU time. A failed map is
// left out of the result.
std::vector<TouchTrial> first_touch_trials(size_t bytes, int trials, bool huge);

// Median ns of malloc(bytes) + first touch of every page + free, over `trials` fresh allocations.
double fresh_allocation_ns(size_t bytes, int trials);

// Median ns of starting and joining one thread.
double thread_start_ns(int trials);
// Each of `trials` thread starts and joins, in ns (wall), in the order taken.
std::vector<double> thread_start_samples(int trials);

}  // namespace warmprof::host

#include "core/host.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/os.h"

#include "core/clock.h"

namespace warmprof::host {

Faults faults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return {int64_t(ru.ru_minflt), int64_t(ru.ru_majflt)};
}

int64_t page_size() {
  static const int64_t ps = int64_t(sysconf(_SC_PAGESIZE));
  return ps;
}

namespace {

// Field 20 (num_threads) of /proc/self/stat, by opening and reading it: the slow, sure way.
int64_t thread_count_from_stat() {
  FILE* f = std::fopen("/proc/self/stat", "r");
  if (!f) return 0;
  char buf[4096];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // The command name (field 2) may hold spaces, so count after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (!p) return 0;
  int field = 2;
  for (++p; *p && field < 20; ++p) {
    if (*p == ' ') ++field;
  }
  return field == 20 ? std::atoll(p) : 0;
}

// /proc files kept open, so a sample at every module boundary is a pread and an fstat (about 1.5 us)
// rather than an open, read and close of two files (about 15 us). /proc/self resolves when a file
// is opened, so after a fork the child's first sample opens them again for its own pid.
struct ProcFiles {
  std::mutex mu;
  std::atomic<int> pid{0};
  int statm = -1;
  int task = -1;
  bool task_links_count_threads = false;  // procfs: nlink of /proc/<pid>/task is 2 + threads

  void ensure() {
    const int me = int(getpid());
    if (pid.load(std::memory_order_acquire) == me) return;
    std::lock_guard<std::mutex> lock(mu);
    if (pid.load(std::memory_order_relaxed) == me) return;
    if (statm >= 0) close(statm);
    if (task >= 0) close(task);
    statm = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    task = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat st {};
    // Checked once against the sure way, so a kernel that counts links otherwise falls back.
    task_links_count_threads = task >= 0 && fstat(task, &st) == 0 && st.st_nlink > 2 &&
                               int64_t(st.st_nlink) - 2 == thread_count_from_stat();
    pid.store(me, std::memory_order_release);
  }
};

ProcFiles& proc() {
  static ProcFiles* files = new ProcFiles();  // never destroyed: samples may run during exit
  files->ensure();
  return *files;
}

}  // namespace

Memory memory() {
  ProcFiles& f = proc();
  if (f.statm < 0) return {};
  char buf[128];
  const ssize_t n = pread(f.statm, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return {};
  buf[n] = 0;
  // statm: size resident shared text lib data dt, in pages; `shared` is RssFile + RssShmem.
  long long size = 0, resident = 0, shared = 0;
  if (std::sscanf(buf, "%lld %lld %lld", &size, &resident, &shared) != 3) return {};
  return {int64_t(resident) * page_size(), int64_t(shared) * page_size()};
}

int64_t rss_bytes() { return memory().resident; }

int64_t thread_count() {
  ProcFiles& f = proc();
  struct stat st {};
  if (f.task_links_count_threads && fstat(f.task, &st) == 0 && st.st_nlink > 2) return int64_t(st.st_nlink) - 2;
  return thread_count_from_stat();
}

namespace {

bool parse_schedstat(const char* buf, SchedStat* out) {
  long long run = 0, delay = 0, slices = 0;
  if (std::sscanf(buf, "%lld %lld %lld", &run, &delay, &slices) != 3) return false;
  // Kernels built without sched_info print the file with zeros: a thread that is reading it has run.
  if (run == 0 && delay == 0 && slices == 0) return false;
  out->ok = true;
  out->run_ns = run;
  out->delay_ns = delay;
  out->slices = slices;
  return true;
}

// The calling thread's schedstat file, opened on its first read and kept; a thread that outlives a
// fork (the child's copy of the forking thread) reopens it for its own pid.
struct ThreadSchedFile {
  int fd = -1;
  int pid = 0;
  ~ThreadSchedFile() {
    if (fd >= 0) close(fd);
  }
  int get() {
    const int me = int(getpid());
    if (pid == me) return fd;
    if (fd >= 0) close(fd);
    fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {  // kernels before 3.17 have no /proc/thread-self
      char path[64];
      std::snprintf(path, sizeof(path), "/proc/self/task/%ld/schedstat", long(os::thread_id()));
      fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    pid = me;
    return fd;
  }
};

thread_local ThreadSchedFile t_sched;

int64_t status_field(const char* buf, const char* key) {
  const char* p = std::strstr(buf, key);
  return p ? std::atoll(p + std::strlen(key)) : -1;
}

}  // namespace

SchedStat thread_schedstat() {
  SchedStat out;
  const int fd = t_sched.get();
  if (fd < 0) return out;
  char buf[96];
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return out;
  buf[n] = 0;
  parse_schedstat(buf, &out);
  return out;
}

ThreadUsage thread_usage() {
  ThreadUsage out;
#ifdef RUSAGE_THREAD
  rusage ru{};
  if (getrusage(RUSAGE_THREAD, &ru) != 0) return out;
  out.ok = true;
  out.voluntary = int64_t(ru.ru_nvcsw);
  out.involuntary = int64_t(ru.ru_nivcsw);
  out.read_bytes = int64_t(ru.ru_inblock) * 512;
  out.major_faults = int64_t(ru.ru_majflt);
#endif
  return out;
}

int64_t thread_involuntary_switches() {
  const ThreadUsage u = thread_usage();
  return u.ok ? u.involuntary : -1;
}

int64_t thread_cpu_ns() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return -1;
  return int64_t(ts.tv_sec) * 1000000000ll + int64_t(ts.tv_nsec);
}

std::vector<TaskSched> task_schedstats() {
  std::vector<TaskSched> out;
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return out;
  char path[96];
  char buf[4096];
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    TaskSched t;
    t.tid = std::atoll(e->d_name);
    std::snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", e->d_name);
    if (FILE* f = std::fopen(path, "r")) {
      const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
      std::fclose(f);
      buf[n] = 0;
      parse_schedstat(buf, &t.sched);
    }
    std::snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
    if (FILE* f = std::fopen(path, "r")) {
      const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
      std::fclose(f);
      buf[n] = 0;
      t.voluntary = status_field(buf, "\nvoluntary_ctxt_switches:");
      t.involuntary = status_field(buf, "\nnonvoluntary_ctxt_switches:");
    }
    out.push_back(t);
  }
  closedir(dir);
  return out;
}

namespace {
// The CPU time of this thread: a fault is kernel work on the faulting thread, and a busy machine's
// wait for a core (which wall time would add to a trial) is not part of its cost.
uint64_t touch_cpu_ns() { return uint64_t(std::max<int64_t>(0, thread_cpu_ns())); }
}  // namespace

FaultCost calibrate_fault_cost(size_t bytes, int trials) {
  FaultCost out;
  if (bytes == 0 || trials <= 0) return out;
  const size_t ps = size_t(page_size());
  const size_t pages = (bytes + ps - 1) / ps;
  std::vector<double> per_fault, per_page;
  std::vector<int64_t> fault_counts;
  for (int t = 0; t < trials; ++t) {
    void* mem = mmap(nullptr, pages * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) continue;
    volatile char* p = static_cast<volatile char*>(mem);
    Faults f0 = faults();
    uint64_t t0 = touch_cpu_ns();
    for (size_t i = 0; i < pages; ++i) p[i * ps] = 1;
    uint64_t t1 = touch_cpu_ns();
    Faults f1 = faults();
    munmap(mem, pages * ps);
    int64_t nf = (f1.minor - f0.minor) + (f1.major - f0.major);
    double dt = double(t1 - t0);
    per_page.push_back(dt / double(pages));
    // Transparent huge pages can serve many pages per fault; fall back to per-page cost.
    per_fault.push_back(nf > 0 ? dt / double(nf) : dt / double(pages));
    fault_counts.push_back(nf);
  }
  if (per_page.empty()) return out;
  out.ns_per_fault = clock::median(per_fault);
  out.ns_per_page = clock::median(per_page);
  out.faults = fault_counts[fault_counts.size() / 2];
  out.pages = int64_t(pages);
  out.trials = int(per_page.size());
  return out;
}

std::vector<TouchTrial> first_touch_trials(size_t bytes, int trials, bool huge) {
  std::vector<TouchTrial> out;
  if (bytes == 0 || trials <= 0) return out;
  const size_t ps = size_t(page_size());
  const size_t len = ((bytes + ps - 1) / ps) * ps;
  const size_t align = size_t(2) << 20;  // where the kernel can place a huge page
  for (int t = 0; t < trials; ++t) {
    void* raw = mmap(nullptr, len + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) continue;
    char* mem = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + align - 1) & ~uintptr_t(align - 1));
    // Said either way: with THP "always" an unadvised mapping may get huge pages too.
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)  // Linux THP; macOS has no such advice
    madvise(mem, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
    volatile char* p = mem;
    Faults f0 = faults();
    uint64_t t0 = touch_cpu_ns();
    for (size_t i = 0; i < len; i += ps) p[i] = 1;
    uint64_t t1 = touch_cpu_ns();
    Faults f1 = faults();
    munmap(raw, len + align);
    out.push_back({double(t1 - t0), (f1.minor - f0.minor) + (f1.major - f0.major)});
  }
  return out;
}

double fresh_allocation_ns(size_t bytes, int trials) {
  // mmap, not malloc: glibc would recycle a freed block after the first trial, and the
  // question is the cost of memory the process has never touched.
  if (bytes == 0 || trials <= 0) return 0.0;
  const size_t ps = size_t(page_size());
  const size_t len = ((bytes + ps - 1) / ps) * ps;
  std::vector<double> times;
  for (int t = 0; t < trials; ++t) {
    uint64_t t0 = clock::monotonic_ns();
    void* mem = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) continue;
    volatile char* v = static_cast<volatile char*>(mem);
    for (size_t i = 0; i < len; i += ps) v[i] = 1;
    munmap(mem, len);
    times.push_back(double(clock::monotonic_ns() - t0));
  }
  return clock::median(times);
}

std::vector<double> thread_start_samples(int trials) {
  std::vector<double> times;
  for (int t = 0; t < trials; ++t) {
    uint64_t t0 = clock::monotonic_ns();
    std::thread th([] {});
    th.join();
    times.push_back(double(clock::monotonic_ns() - t0));
  }
  return times;
}

double thread_start_ns(int trials) { return clock::median(thread_start_samples(trials)); }

}  // namespace warmprof::host

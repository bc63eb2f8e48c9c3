// _native.WatchCore: the per-call hot path of warmprof.watch as a CPython type whose instances are
// called in place of the watched callable (python/warmprof/serving/watch/core.py subclasses it).
//
// One call: the key (a key function's result, or each argument's shape and dtype), the idle gap
// since the last call ended, the compiles counted so far (an atomic the dynamo callbacks bump), two
// clock reads around the call, and the key's sketch under a mutex; getrusage(RUSAGE_THREAD) (the
// thread's CPU time, page faults, blocks read and switches) around a sample of the thread's calls only
// (ThreadCounters, below: a system call costs more than the rest of the call's bookkeeping) and
// around every call known to be kept before it runs. getrusage's CPU time is the scheduler's as of its last update, up to a tick behind, so a call
// whose time off the CPU is booked (a wait) has its CPU time read from the thread's CPU clock: at both
// ends, with the run-queue delay from schedstat, for a call known to be kept before it runs (after an
// idle gap, or at a new key: a mutex-held lookup); at its end only for another kept call (an outlier),
// whose CPU time is then at most a tick high and its time off the CPU at most that low. Only
// a call kept as an event (the first at its key, an outlier, the first after an idle gap with no
// other call running, or one during which dynamo compiled on its thread, or, with CUPTI asked for,
// one during which an allocation, module load or graph capture closed on its thread) goes back to
// Python, through `on_event`. A clock source (a callable returning the device clock) is
// called before a call only after an idle gap.
#include <Python.h>
#include <structmember.h>
#include <pthread.h>
#include <sys/resource.h>
#include <time.h>

#include <atomic>
#include <initializer_list>
#include <cstdint>
#include <algorithm>
#include <mutex>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "backends/cupti.h"
#include "core/clock.h"
#include "core/host.h"
#include "core/watch.h"

namespace {

using warmprof::watch::Rule;
using warmprof::watch::Table;
using warmprof::watch::Verdict;

// Compiles dynamo finished on this thread, and their summed time: dynamo compiles on the thread that
// called the model, so a call counts only its own thread's (another thread's compile, or another
// model's, is never booked to it).
thread_local uint64_t t_compiles = 0;
thread_local uint64_t t_compile_ns = 0;

// A kept call crosses into Python as one WatchCall (a named tuple type): its fields, declared here
// once; python/warmprof/serving/watch/events.py reads them by name.
PyStructSequence_Field kCallFields[] = {
    {"key_hash", "the key's 64-bit hash"},
    {"key", "what the key function returned (None: the default key, from the arguments)"},
    {"args", "the call's positional arguments"},
    {"kwargs", "the call's keyword arguments (None: none)"},
    {"first", "the key's first call"},
    {"outlier", "slower than factor x the key's median and floor_ns over it"},
    {"start_ns", "the call's start, warmprof's clock"},
    {"dur_ns", "the call's wall time"},
    {"gap_ns", "the idle gap before it (0: another call was running)"},
    {"clock", "the clock source's reading at its start (after an idle gap; None: not read)"},
    {"cpu_ns", "the calling thread's CPU time over the call (getrusage RUSAGE_THREAD)"},
    {"minflt", "the thread's minor page faults over the call"},
    {"majflt", "the thread's major page faults over the call"},
    {"nivcsw", "the thread's involuntary context switches over the call"},
    {"compiles", "stretches dynamo's compile callbacks ended on this thread during the call"},
    {"compile_ns", "their summed time, at most the call's"},
    {"calls_before", "the key's calls before this one"},
    {"median_ns", "the key's median before this call (0: none yet)"},
    {"cupti", "CUPTI's rows, (cause id, spans, ns, bytes), that closed on the thread (None: none or off)"},
    {"inblock", "blocks the thread read from storage over the call (getrusage ru_inblock; a page-cache hit reads none)"},
    {"run_delay_ns", "the thread's run-queue delay over the call (schedstat; None: not read, see cpu_exact)"},
    {"cpu_exact", "cpu_ns read from the thread's CPU clock at both ends (a call kept before it ran: after an idle gap "
                  "or at a new key); False: its start is getrusage's, so cpu_ns may be high by up to a scheduler tick"},
    {"usual_off_cpu_ns", "the key's mean time off the CPU over its earlier calls that were neither first nor outliers "
                         "(0: none yet)"},
    {"nvcsw", "the thread's voluntary context switches over the call: the times it blocked (a sleep, a lock, a read "
              "from storage)"},
    {"counters_from_ns", "when the thread's counters (CPU time, faults, switches, blocks read) were read before the call, "
                         "warmprof's clock: start_ns when the call read them itself, else up to 200 us before it (a call "
                         "found to be kept only after it ran, whose thread's last read was then that far back)"},
    {nullptr, nullptr},
};
constexpr int kCallFieldCount = int(sizeof(kCallFields) / sizeof(kCallFields[0])) - 1;
PyStructSequence_Desc kCallDesc = {"warmprof._native.WatchCall", "One kept call, as watch's hot path hands it over.",
                                   kCallFields, kCallFieldCount};
PyTypeObject* WatchCallType = nullptr;

struct State {
  std::mutex mu;
  Table table;
  Rule rule;
  uint64_t idle_ns = 1000000000ull;
  std::atomic<uint64_t> last_end{0};  // clock ns when the last call ended (0: none yet)
  std::atomic<int64_t> in_flight{0};  // calls running now, on any thread: no idle gap while one runs
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<bool> closed{false};
  // Cause ids (bit per id) whose CUPTI spans make a call an event; 0: the tally is not read.
  // Set from Python (live/events.py CUPTI_CAUSES), the one list of what watch books from CUPTI.
  std::atomic<uint32_t> cupti_causes{0};
  explicit State(size_t max_keys) : table(max_keys) {}
};

struct WatchCore {
  PyObject_HEAD
  PyObject* fn;
  PyObject* key_fn;        // nullptr: shapes and dtypes
  PyObject* clock_source;  // nullptr: none
  PyObject* on_event;      // nullptr until set
  State* st;
  PyObject* dict;          // instance attributes of the Python subclass
};

PyObject* s_shape = nullptr;
PyObject* s_dtype = nullptr;

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

// Python < 3.13 spells "getattr, no exception when missing" _PyObject_LookupAttr.
inline int lookup_attr(PyObject* o, PyObject* name, PyObject** out) {
#if PY_VERSION_HEX >= 0x030D0000
  return PyObject_GetOptionalAttr(o, name, out);
#else
  return _PyObject_LookupAttr(o, name, out);
#endif
}

// After a failed call: an Exception is cleared (true: the caller goes on without what it asked for);
// Ctrl-C, SystemExit and the like (BaseException only) are left set (false: the caller gives up).
inline bool cleared_if_exception() {
  if (!PyErr_ExceptionMatches(PyExc_Exception)) return false;
  PyErr_Clear();
  return true;
}

// One argument's part of the default key: a tensor's shape and dtype, a short list's or tuple's
// items, and for anything else its type only (a request id must not make every call a new key).
bool hash_value(PyObject* v, uint64_t* h, int depth) {
  PyTypeObject* t = Py_TYPE(v);
  if (v == Py_None || PyLong_CheckExact(v) || PyFloat_CheckExact(v) || PyUnicode_CheckExact(v) || PyBool_Check(v) ||
      PyBytes_CheckExact(v)) {
    *h = mix(*h, uint64_t(uintptr_t(t)));
    return true;
  }
  if ((PyTuple_Check(v) || PyList_Check(v)) && depth < 2) {
    *h = mix(*h, uint64_t(PySequence_Fast_GET_SIZE(v)) * 31 + uint64_t(uintptr_t(t)));
    // size and item read again each step, the item held: an attribute read may run code that changes a list
    for (Py_ssize_t i = 0; i < 16 && i < PySequence_Fast_GET_SIZE(v); ++i) {
      PyObject* item = PySequence_Fast_GET_ITEM(v, i);
      Py_INCREF(item);
      const bool ok = hash_value(item, h, depth + 1);
      Py_DECREF(item);
      if (!ok) return false;
    }
    return true;
  }
  if (PyDict_Check(v) && depth < 2) {  // a dict of inputs: each value under its key, in any order
    uint64_t sum = 0;
    PyObject *k, *item;
    Py_ssize_t pos = 0;
    PyObject* copy = PyDict_Copy(v);  // iterated safely whatever an attribute read does to the dict
    if (copy == nullptr) return false;
    while (PyDict_Next(copy, &pos, &k, &item)) {
      const Py_hash_t hk = PyObject_Hash(k);
      if (hk == -1) {
        Py_DECREF(copy);
        return false;
      }
      uint64_t one = uint64_t(hk);
      if (!hash_value(item, &one, depth + 1)) {
        Py_DECREF(copy);
        return false;
      }
      sum += one * 0x9e3779b97f4a7c15ull;  // a sum: the same keys in another order are the same key
    }
    Py_DECREF(copy);
    *h = mix(*h, sum ^ uint64_t(uintptr_t(t)));
    return true;
  }
  PyObject* shape = nullptr;
  if (lookup_attr(v, s_shape, &shape) < 0) {
    // a .shape that raises (a lazy proxy, a property with a bug) is no shape: the call goes on, keyed by
    // the argument's type, as the plain call would have gone on; Ctrl-C and the like still go up
    if (!cleared_if_exception()) return false;
    shape = nullptr;
  }
  if (shape == nullptr) {
    *h = mix(*h, uint64_t(uintptr_t(t)));
    return true;
  }
  const Py_hash_t hs = PyObject_Hash(shape);
  Py_DECREF(shape);
  if (hs == -1) {
    PyErr_Clear();
    *h = mix(*h, uint64_t(uintptr_t(t)));
    return true;
  }
  *h = mix(*h, uint64_t(hs));
  PyObject* dtype = nullptr;
  if (lookup_attr(v, s_dtype, &dtype) < 0) {
    if (!cleared_if_exception()) return false;
    dtype = nullptr;
  }
  if (dtype != nullptr) {
    // By value: torch's dtypes are singletons (their hash is their address), but numpy makes a new
    // dtype object for each string or structured array, equal in value ('<U5' == '<U5').
    const Py_hash_t hd = PyObject_Hash(dtype);
    if (hd == -1) {
      if (!cleared_if_exception()) {
        Py_DECREF(dtype);
        return false;
      }
      *h = mix(*h, uint64_t(uintptr_t(Py_TYPE(dtype))));
    } else {
      *h = mix(*h, uint64_t(hd));
    }
    Py_DECREF(dtype);
  }
  return true;
}

bool default_key(PyObject* args, PyObject* kwargs, uint64_t* key) {
  uint64_t h = 0x51ed270b27a1f3c5ull;
  const Py_ssize_t n = PyTuple_GET_SIZE(args);
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!hash_value(PyTuple_GET_ITEM(args, i), &h, 0)) return false;
  if (kwargs != nullptr) {  // keyword arguments in any order are the same key
    uint64_t sum = 0;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs, &pos, &k, &v)) {
      const Py_hash_t hk = PyObject_Hash(k);
      if (hk == -1) return false;
      uint64_t one = uint64_t(hk);
      if (!hash_value(v, &one, 0)) return false;
      sum += one * 0x9e3779b97f4a7c15ull;
    }
    h = mix(h, sum);
  }
  *key = h;
  return true;
}

struct Usage {
  int64_t cpu_ns = 0;
  int64_t minflt = 0;
  int64_t majflt = 0;
  int64_t nivcsw = 0;
  int64_t nvcsw = 0;
  int64_t inblock = 0;
};

// The calling thread's CPU time from its CPU clock, to the ns (the kernel brings the running thread's
// figure up to date first; getrusage does not).
inline int64_t thread_cpu_ns() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return int64_t(ts.tv_sec) * 1000000000ll + int64_t(ts.tv_nsec);
}

// macOS has no per-thread getrusage: there the counts stay 0 and the causes read from them (page
// faults, preemption) are not booked, and the CPU time is the thread's CPU clock's (exact at both ends);
// the compile and CUPTI ones still are.
#ifdef RUSAGE_THREAD
constexpr bool kUsageCpuLags = true;
inline Usage usage() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  Usage u;
  u.cpu_ns = (int64_t(ru.ru_utime.tv_sec) + int64_t(ru.ru_stime.tv_sec)) * 1000000000ll +
             (int64_t(ru.ru_utime.tv_usec) + int64_t(ru.ru_stime.tv_usec)) * 1000ll;
  u.minflt = ru.ru_minflt;
  u.majflt = ru.ru_majflt;
  u.nivcsw = ru.ru_nivcsw;
  u.nvcsw = ru.ru_nvcsw;
  u.inblock = ru.ru_inblock;
  return u;
}
#else
constexpr bool kUsageCpuLags = false;
inline Usage usage() {
  Usage u;
  u.cpu_ns = thread_cpu_ns();
  return u;
}
#endif

// The thread's run-queue delay so far, or -1 where the kernel has no schedstat.
inline int64_t run_delay_ns() {
  const warmprof::host::SchedStat s = warmprof::host::thread_schedstat();
  return s.ok ? s.delay_ns : -1;
}

inline uint64_t now_ns() { return uint64_t(warmprof::clock::to_ns(warmprof::clock::ticks())); }

// The calling thread's counters (getrusage: CPU time, faults, switches, blocks read), read at the start
// of a sample of its calls, not each: a read is a system call, which costs more than all the rest of a
// call's bookkeeping (0.2 us on a plain Linux host, 0.8 us in a gVisor sandbox). A call reads them at
// both ends when it is known to be kept before it runs (a new key, after an idle gap). Otherwise it reads
// them at its start when the thread's last read is older than kCountersMaxAgeNs, or the thread spent
// more than kCountersMaxOutsideNs outside watched calls since, or a watched call since took longer than
// kCountersMaxCallNs; and at its end only one such read in kEndReadEvery (the key's usual time off the
// CPU is a sample's mean) or when it turns out to be kept. So back-to-back short calls make a read per
// 200 us, and calls apart (a server's) or long ones a read each; an outlier found only after it ran has
// counters that start at most 200 us before it, over at most 20 us of the thread's own work and watched
// calls of at most 50 us each (its event says how far before the call they start: counters_from_ns).
struct ThreadCounters {
  bool valid = false;
  uint64_t read_ns = 0;      // when `u` was read (warmprof's clock)
  uint64_t outside_ns = 0;   // the thread's time outside watched calls since then
  uint64_t last_end_ns = 0;  // when its last watched call ended
  Usage u;
};
thread_local ThreadCounters t_counters;
constexpr uint64_t kCountersMaxAgeNs = 200000;
constexpr uint64_t kCountersMaxOutsideNs = 20000;
constexpr uint64_t kCountersMaxCallNs = 50000;
constexpr uint32_t kEndReadEvery = 8;
thread_local uint32_t t_start_reads = 0;
// A fork gives the child new counters (getrusage starts again at 0): a read from before it is not
// comparable with one after. The child's handler below bumps this; a call spanning a fork reads none.
std::atomic<uint64_t> g_forks{0};
void counters_after_fork_in_child() {
  t_counters.valid = false;
  g_forks.fetch_add(1, std::memory_order_relaxed);
}
const bool g_counters_atfork = [] { return pthread_atfork(nullptr, nullptr, counters_after_fork_in_child) == 0; }();

// A call that only made a coroutine, an async generator or a generator: its work runs later, where
// watch does not see it. Said once, as the error of the call (watch() refuses the functions it can
// tell apart beforehand; a partial, a lambda or a __call__ returning one it sees only here).
PyObject* g_input_error = nullptr;  // warmprof.errors.InputError, set by Python (watch_set_input_error)
bool lazy_result(PyObject* result) {
  return PyCoro_CheckExact(result) || PyAsyncGen_CheckExact(result) || PyGen_CheckExact(result);
}

void refuse_lazy(PyObject* result) {
  PyObject* closed = PyObject_CallMethod(result, "close", nullptr);  // no "never awaited" warning later
  if (closed == nullptr) PyErr_Clear();
  Py_XDECREF(closed);
  const char* what = PyCoro_CheckExact(result) ? "a coroutine" : (PyAsyncGen_CheckExact(result) ? "an async generator" : "a generator");
  PyErr_Format(g_input_error ? g_input_error : PyExc_TypeError,
               "watch() times a call while it runs, and this call returned %s (%R): its work runs later, where "
               "watch does not see it, so watch would time only its creation. Watch the synchronous function it "
               "awaits or iterates (the model's forward), or the whole request in a plain function",
               what, result);
}

// A saturating decrement: after a fork the child's count of calls in flight starts again at 0, and a call
// the forking thread was inside when it forked then ends in the child.
inline void leave(State* st) {
  int64_t n = st->in_flight.load(std::memory_order_relaxed);
  while (n > 0 && !st->in_flight.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
  }
}

PyObject* call(PyObject* self_obj, PyObject* args, PyObject* kwargs) {
  WatchCore* self = reinterpret_cast<WatchCore*>(self_obj);
  State* st = self->st;
  if (st == nullptr || self->fn == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "WatchCore was not initialised");
    return nullptr;
  }
  if (st->closed.load(std::memory_order_relaxed)) return PyObject_Call(self->fn, args, kwargs);
  // w(x, **{}) is w(x): executors, thread targets and asyncio.to_thread pass an empty dict
  if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) == 0) kwargs = nullptr;

  uint64_t key = 0;
  PyObject* key_obj = nullptr;
  if (self->key_fn != nullptr) {
    key_obj = PyObject_Call(self->key_fn, args, kwargs);
    if (key_obj == nullptr) return nullptr;  // the user's key function raised: said as it is
    const Py_hash_t h = PyObject_Hash(key_obj);
    if (h == -1) {
      Py_DECREF(key_obj);
      return nullptr;
    }
    key = uint64_t(h);
  } else if (!default_key(args, kwargs, &key)) {
    return nullptr;
  }

  const uint64_t start = now_ns();
  const uint64_t last = st->last_end.load(std::memory_order_relaxed);
  const bool busy = st->in_flight.fetch_add(1, std::memory_order_relaxed) > 0;
  const uint64_t gap = !busy && last != 0 && start > last ? start - last : 0;
  PyObject* clock = nullptr;
  if (self->clock_source != nullptr && gap != 0 && gap >= st->idle_ns) {
    clock = PyObject_CallNoArgs(self->clock_source);
    if (clock == nullptr) {
      // a clock that cannot be read is not the model's error (said, and the call goes on); Ctrl-C,
      // SystemExit and the like are the user's intent: they go up before the call, as from the plain call
      if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        leave(st);
        Py_XDECREF(key_obj);
        return nullptr;
      }
      PyErr_WriteUnraisable(self->clock_source);
    }
  }
  using warmprof::backends::cupti::CallTally;
  const uint32_t cupti = st->cupti_causes.load(std::memory_order_relaxed);
  std::optional<CallTally> tally0;  // copied only with CUPTI asked for: nothing on the plain path
  if (cupti) tally0.emplace(warmprof::backends::cupti::thread_tally());
  const uint64_t compiles0 = t_compiles;
  const uint64_t compile_ns0 = t_compile_ns;
  const bool after_idle = gap != 0 && gap >= st->idle_ns;
  bool new_key = false;
  if (!after_idle) {
    std::lock_guard<std::mutex> lock(st->mu);
    new_key = st->table.new_admitted(key);
  }
  // Kept whatever it takes: its run-queue delay is read, and its CPU time from the CPU clock at both
  // ends (see the top of this file); where getrusage has no thread CPU time, always from the CPU clock.
  const bool kept_before = after_idle || new_key;
  const bool exact = kept_before || !kUsageCpuLags;
  // The thread's counters: read now (a kept call, or the last read is stale), else the last read's
  ThreadCounters& tc = t_counters;
  if (tc.valid && start > tc.last_end_ns && tc.last_end_ns >= tc.read_ns) tc.outside_ns += start - tc.last_end_ns;
  const bool sampled = kept_before || !tc.valid || start - tc.read_ns > kCountersMaxAgeNs ||
                       tc.outside_ns > kCountersMaxOutsideNs;
  const uint64_t forks0 = g_forks.load(std::memory_order_relaxed);
  // The run-queue delay and the CPU clock are read inside the wall-clock window, never outside it: a
  // preemption between a delay read and the wall clock's (getrusage is a natural point for one on a
  // loaded machine) would count a wait for a CPU that is not in the call's time, and take it off the
  // call's wait (seen: a 10 ms sleep read as 6 ms wait + 4 ms contention with a CPU hog per core). So
  // delay within wall, CPU time within delay; the reads' own few microseconds are in the call's time.
  Usage u0 = sampled ? usage() : tc.u;
  const uint64_t t0 = warmprof::clock::ticks();
  const uint64_t began = uint64_t(warmprof::clock::to_ns(t0));
  uint64_t counters_from = sampled ? began : tc.read_ns;
  const int64_t delay0 = kept_before ? run_delay_ns() : -1;
  int64_t cpu0 = kUsageCpuLags && exact ? thread_cpu_ns() : u0.cpu_ns;
  // read at the end too: a call kept before it ran, and one start read in kEndReadEvery (the key's usual
  // time off the CPU is those calls' mean)
  const bool end_read = kept_before || (sampled && ++t_start_reads % kEndReadEvery == 0);
  PyObject* result = PyObject_Call(self->fn, args, kwargs);
  int64_t cpu1 = kUsageCpuLags && exact ? thread_cpu_ns() : 0;
  const int64_t delay1 = kept_before ? run_delay_ns() : -1;
  const uint64_t t1 = warmprof::clock::ticks();
  Usage u1;
  if (end_read) u1 = usage();
  if (!kUsageCpuLags && end_read) cpu1 = u1.cpu_ns;
  const uint64_t compiles = t_compiles - compiles0;
  const uint64_t end = uint64_t(warmprof::clock::to_ns(t1));
  // The call's window is [t0, t1], read around the call itself: `start` (its arrival, for the idle gap) comes
  // before the clock source, the key's admission and getrusage, and a preemption there (a loaded machine)
  // put the window milliseconds early, so a recording that ended inside the call fell past its end.
  const uint64_t dur = end - began;
  const uint64_t compile_ns = std::min<uint64_t>(t_compile_ns - compile_ns0, dur);  // never more than the call
  leave(st);
  st->last_end.store(end, std::memory_order_relaxed);
  st->calls.fetch_add(1, std::memory_order_relaxed);
  const bool forked = g_forks.load(std::memory_order_relaxed) != forks0;  // the counters' two ends are two processes'
  if (end_read && !forked) {  // the next call's counters start at this call's end
    tc.u = u1;
    tc.read_ns = end;
    tc.outside_ns = 0;
    tc.valid = true;
  } else {
    if (sampled && !forked) {  // they start at this call's start
      tc.u = u0;
      tc.read_ns = began;
      tc.outside_ns = 0;
      tc.valid = true;
    }
    // a long call in the stretch: the next call reads its own (an outlier's counters never hold one)
    if (dur > kCountersMaxCallNs) tc.valid = false;
  }
  tc.last_end_ns = end;
  if (result != nullptr && lazy_result(result)) {
    refuse_lazy(result);
    Py_CLEAR(result);
  }
  if (result == nullptr) {
    st->errors.fetch_add(1, std::memory_order_relaxed);
    Py_XDECREF(key_obj);
    Py_XDECREF(clock);
    return nullptr;
  }
  // CUPTI: what closed on this thread during the call, as (cause, spans, ns, bytes) rows
  PyObject* booked = nullptr;
  bool one_time = false;
  if (cupti) {
    const CallTally& tally1 = warmprof::backends::cupti::thread_tally();
    if (tally1.seq != tally0->seq) {
      booked = PyList_New(0);
      for (int c = 1; booked != nullptr && c < CallTally::kCauses; ++c) {
        const int64_t spans = tally1.spans[c] - tally0->spans[c], ns = tally1.ns[c] - tally0->ns[c];
        if (spans == 0 && ns == 0) continue;
        one_time = one_time || (spans > 0 && (cupti >> c & 1u));
        PyObject* row = Py_BuildValue("(iLLL)", c, (long long)spans, (long long)ns,
                                      (long long)(tally1.bytes[c] - tally0->bytes[c]));
        if (row == nullptr || PyList_Append(booked, row) != 0) Py_CLEAR(booked);
        Py_XDECREF(row);
      }
      if (booked == nullptr) PyErr_Clear();  // out of memory: the call's result still goes back
    }
  }
  Verdict v;
  bool keep = false;
  // the key's usual calls' time off the CPU: getrusage's figures for a call not read exactly (each may be
  // a tick out; the key's sum evens them out)
  // (read only around a sampled call: see ThreadCounters)
  const int64_t usage_cpu = exact ? cpu1 - cpu0 : u1.cpu_ns - u0.cpu_ns;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    v = st->table.add(key, dur, st->rule, int64_t(dur) - usage_cpu, end_read && !forked);
    // a compile is kept even at a key past max_keys: a new shape is what watch is for
    keep = compiles > 0 || one_time || (v.admitted && (v.first || v.outlier || after_idle));
    if (keep) st->table.mark_event(key);
  }
  if (keep && self->on_event != nullptr) {
    // an outlier's counters end now, its CPU time on the CPU clock (its start is getrusage's: at most a
    // tick low); a call not sampled has them from the thread's last read, counters_from_ns before it
    if (!end_read) u1 = usage();
    if (!exact) cpu1 = thread_cpu_ns();
    if (forked) {  // read in two processes: no figure (no faults, no time off the CPU)
      u0 = u1;
      cpu0 = cpu1 - int64_t(dur);
      counters_from = began;
    }
    const bool delay_read = delay0 >= 0 && delay1 >= delay0;
    PyObject* delay = delay_read ? PyLong_FromLongLong(delay1 - delay0) : Py_None;
    // one WatchCall, its fields in kCallFields' order (declared there once)
    PyObject* info = PyStructSequence_New(WatchCallType);
    PyObject* values[kCallFieldCount] = {
        PyLong_FromUnsignedLongLong(key), key_obj ? key_obj : Py_None, args, kwargs ? kwargs : Py_None,
        v.first ? Py_True : Py_False, v.outlier ? Py_True : Py_False, PyLong_FromUnsignedLongLong(began),
        PyLong_FromUnsignedLongLong(dur), PyLong_FromUnsignedLongLong(gap), clock ? clock : Py_None,
        PyLong_FromLongLong(cpu1 - cpu0), PyLong_FromLongLong(u1.minflt - u0.minflt),
        PyLong_FromLongLong(u1.majflt - u0.majflt), PyLong_FromLongLong(u1.nivcsw - u0.nivcsw),
        PyLong_FromUnsignedLongLong(compiles), PyLong_FromUnsignedLongLong(compile_ns),
        PyLong_FromUnsignedLongLong(v.calls), PyFloat_FromDouble(v.median_ns), booked ? booked : Py_None,
        PyLong_FromLongLong(u1.inblock - u0.inblock), delay, exact ? Py_True : Py_False,
        PyFloat_FromDouble(v.usual_off_cpu_ns), PyLong_FromLongLong(u1.nvcsw - u0.nvcsw),
        PyLong_FromUnsignedLongLong(counters_from)};
    // borrowed ones (objects the call already holds) get a reference of their own; SetItem steals one
    for (PyObject* borrowed : {key_obj ? key_obj : Py_None, args, kwargs ? kwargs : Py_None, v.first ? Py_True : Py_False,
                               v.outlier ? Py_True : Py_False, clock ? clock : Py_None, booked ? booked : Py_None,
                               delay_read ? nullptr : Py_None, exact ? Py_True : Py_False}) {
      if (borrowed == nullptr) continue;  // the run-queue delay, when read: a new object already
      Py_INCREF(borrowed);
    }
    bool complete = info != nullptr;
    for (int i = 0; i < kCallFieldCount; ++i) {
      if (values[i] == nullptr) complete = false;
      if (info != nullptr && values[i] != nullptr) {
        PyStructSequence_SetItem(info, i, values[i]);
      } else {
        Py_XDECREF(values[i]);
      }
    }
    if (!complete) Py_CLEAR(info);
    if (info != nullptr) {
      PyObject* r = PyObject_CallOneArg(self->on_event, info);
      Py_DECREF(info);
      if (r == nullptr) {
        // An error of the event's handling is never the model's call's error: said, and the call's result
        // returned. Ctrl-C, SystemExit and the like (BaseException but not Exception) are the user's
        // intent, not an error: they go on up, as they would have from the plain call.
        if (!PyErr_ExceptionMatches(PyExc_Exception)) {
          Py_XDECREF(booked);
          Py_XDECREF(key_obj);
          Py_XDECREF(clock);
          Py_DECREF(result);
          return nullptr;
        }
        PyErr_WriteUnraisable(self->on_event);
      }
      Py_XDECREF(r);
    } else {
      PyErr_WriteUnraisable(self_obj);
    }
  }
  Py_XDECREF(booked);
  Py_XDECREF(key_obj);
  Py_XDECREF(clock);
  return result;
}

int init(PyObject* self_obj, PyObject* args, PyObject* kwargs) {
  WatchCore* self = reinterpret_cast<WatchCore*>(self_obj);
  static const char* names[] = {"fn", "key_fn", "clock_source", "max_keys", "min_calls", "factor", "floor_ns",
                                "idle_ns", nullptr};
  PyObject *fn, *key_fn = Py_None, *clock_source = Py_None;
  unsigned long long max_keys = 10000, min_calls = 8, floor_ns = 50000, idle_ns = 1000000000ull;
  double factor = 3.0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OOKKdKK", const_cast<char**>(names), &fn, &key_fn,
                                   &clock_source, &max_keys, &min_calls, &factor, &floor_ns, &idle_ns))
    return -1;
  if (!PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "fn must be callable");
    return -1;
  }
  if (self->st != nullptr) {  // a running call holds the state: it is made once
    PyErr_SetString(PyExc_RuntimeError, "a WatchCore is initialised once");
    return -1;
  }
  if (max_keys == 0 || !(factor > 1.0)) {
    PyErr_SetString(PyExc_ValueError, "max_keys must be at least 1 and factor above 1");
    return -1;
  }
  Py_INCREF(fn);
  Py_XSETREF(self->fn, fn);
  Py_XSETREF(self->key_fn, key_fn == Py_None ? nullptr : (Py_INCREF(key_fn), key_fn));
  Py_XSETREF(self->clock_source, clock_source == Py_None ? nullptr : (Py_INCREF(clock_source), clock_source));
  self->st = new State(size_t(max_keys));
  self->st->rule.min_calls = min_calls;
  self->st->rule.factor = factor;
  self->st->rule.floor_ns = floor_ns;
  self->st->idle_ns = idle_ns;
  return 0;
}

PyObject* new_(PyTypeObject* type, PyObject*, PyObject*) {
  WatchCore* self = reinterpret_cast<WatchCore*>(type->tp_alloc(type, 0));
  return reinterpret_cast<PyObject*>(self);
}

int traverse(PyObject* self_obj, visitproc visit, void* arg) {
  WatchCore* self = reinterpret_cast<WatchCore*>(self_obj);
  Py_VISIT(self->fn);
  Py_VISIT(self->key_fn);
  Py_VISIT(self->clock_source);
  Py_VISIT(self->on_event);
  Py_VISIT(self->dict);
  return 0;  // the type itself: a static type, or a Python subclass whose own traverse visits it
}

int clear(PyObject* self_obj) {
  WatchCore* self = reinterpret_cast<WatchCore*>(self_obj);
  Py_CLEAR(self->fn);
  Py_CLEAR(self->key_fn);
  Py_CLEAR(self->clock_source);
  Py_CLEAR(self->on_event);
  Py_CLEAR(self->dict);
  return 0;
}

// Reached directly for a WatchCore, or from a Python subclass's dealloc, which releases its type
// reference itself afterwards: the static base never touches the type's count.
void dealloc(PyObject* self_obj) {
  WatchCore* self = reinterpret_cast<WatchCore*>(self_obj);
  PyObject_GC_UnTrack(self_obj);
  clear(self_obj);
  delete self->st;
  self->st = nullptr;
  Py_TYPE(self_obj)->tp_free(self_obj);
}

PyObject* set_on_event(PyObject* self_obj, PyObject* cb) {
  WatchCore* self = reinterpret_cast<WatchCore*>(self_obj);
  if (cb != Py_None && !PyCallable_Check(cb)) {
    PyErr_SetString(PyExc_TypeError, "on_event must be callable or None");
    return nullptr;
  }
  Py_XINCREF(cb);
  Py_XSETREF(self->on_event, cb == Py_None ? (Py_DECREF(cb), nullptr) : cb);
  Py_RETURN_NONE;
}

PyObject* set_cupti(PyObject* self_obj, PyObject* mask) {
  WatchCore* self = reinterpret_cast<WatchCore*>(self_obj);
  const unsigned long bits = PyLong_AsUnsignedLong(mask);
  if (bits == (unsigned long)-1 && PyErr_Occurred()) return nullptr;
  if (self->st != nullptr) self->st->cupti_causes.store(uint32_t(bits));
  Py_RETURN_NONE;
}

PyObject* set_closed(PyObject* self_obj, PyObject* flag) {
  WatchCore* self = reinterpret_cast<WatchCore*>(self_obj);
  if (self->st != nullptr) self->st->closed.store(PyObject_IsTrue(flag) == 1);
  Py_RETURN_NONE;
}

// {"calls", "errors", "overflow_calls", "overflow_keys", "keys": [(key, order, calls, first_ns, max_ns,
// total_ns, events, [bucket counts])]}: a copy taken under the mutex.
PyObject* core_stats(PyObject* self_obj, PyObject*) {
  WatchCore* self = reinterpret_cast<WatchCore*>(self_obj);
  State* st = self->st;
  if (st == nullptr) Py_RETURN_NONE;
  // Copied under the mutex, then made into Python objects without it: an allocation may run the
  // garbage collector, a finalizer may let a serving thread take the GIL, and that thread would then
  // wait for the mutex while holding the GIL.
  std::vector<std::pair<uint64_t, warmprof::watch::KeyState>> rows;
  uint64_t overflow_calls;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    overflow_calls = st->table.overflow_calls();
    rows.assign(st->table.keys().begin(), st->table.keys().end());
  }
  PyObject* keys = PyList_New(0);
  if (keys == nullptr) return nullptr;
  for (const auto& [key, k] : rows) {
    PyObject* buckets = PyList_New(warmprof::watch::Sketch::kBuckets);
    if (buckets == nullptr) {
      Py_DECREF(keys);
      return nullptr;
    }
    for (int b = 0; b < warmprof::watch::Sketch::kBuckets; ++b)
      PyList_SET_ITEM(buckets, b, PyLong_FromUnsignedLong(k.sketch.counts()[b]));
    PyObject* row = Py_BuildValue("(KKKKKKKN)", (unsigned long long)key, (unsigned long long)k.order,
                                  (unsigned long long)k.sketch.count(), (unsigned long long)k.first_ns,
                                  (unsigned long long)k.max_ns, (unsigned long long)k.total_ns,
                                  (unsigned long long)k.events, buckets);
    if (row == nullptr || PyList_Append(keys, row) != 0) {
      Py_XDECREF(row);
      Py_DECREF(keys);
      return nullptr;
    }
    Py_DECREF(row);
  }
  return Py_BuildValue("{sKsKsKsN}", "calls", (unsigned long long)st->calls.load(), "errors",
                       (unsigned long long)st->errors.load(), "overflow_calls", (unsigned long long)overflow_calls,
                       "keys", keys);
}

// After a fork, in the child (warmprof.watch's at-fork handler calls it on every open Watcher): the
// only thread left is the forking one, so no call of another thread is in flight, and the mutex is
// made anew (another thread may have held it when the parent forked).
PyObject* after_fork_in_child(PyObject* self_obj, PyObject*) {
  WatchCore* self = reinterpret_cast<WatchCore*>(self_obj);
  if (self->st != nullptr) {
    self->st->in_flight.store(0, std::memory_order_relaxed);
    new (&self->st->mu) std::mutex();
  }
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"_after_fork_in_child", after_fork_in_child, METH_NOARGS,
     "In a forked child: no call of another thread in flight, the table's mutex made anew."},
    {"_set_on_event", set_on_event, METH_O, "Set the callable called with each event's tuple (None: none)."},
    {"_set_closed", set_closed, METH_O, "Closed: calls go straight to the watched callable, unrecorded."},
    {"_set_cupti", set_cupti, METH_O,
     "Read the CUPTI handler's per-thread tally around each call: a call during which a span of a cause whose "
     "bit (1 << cause id) is set closed is an event; 0: off."},
    {"_core_stats", core_stats, METH_NOARGS, "A copy of every key's figures and sketch."},
    {nullptr, nullptr, 0, nullptr},
};

PyTypeObject WatchCoreType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyObject* note_compile(PyObject*, PyObject* arg) {
  const unsigned long long ns = PyLong_AsUnsignedLongLong(arg);
  if (ns == (unsigned long long)-1 && PyErr_Occurred()) return nullptr;
  t_compile_ns += ns;
  t_compiles += 1;
  Py_RETURN_NONE;
}

PyObject* sketch_edges(PyObject*, PyObject*) {
  PyObject* out = PyList_New(warmprof::watch::Sketch::kBuckets);
  if (out == nullptr) return nullptr;
  for (int b = 0; b < warmprof::watch::Sketch::kBuckets; ++b)
    PyList_SET_ITEM(out, b, PyFloat_FromDouble(warmprof::watch::Sketch::mid_ns(b)));
  return out;
}

PyObject* set_input_error(PyObject*, PyObject* cls) {
  if (!PyType_Check(cls) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls),
                                              reinterpret_cast<PyTypeObject*>(PyExc_Exception))) {
    PyErr_SetString(PyExc_TypeError, "an exception class");
    return nullptr;
  }
  Py_INCREF(cls);
  Py_XSETREF(g_input_error, cls);
  Py_RETURN_NONE;
}

PyMethodDef module_methods[] = {
    {"watch_set_input_error", set_input_error, METH_O,
     "watch_set_input_error(cls) -> None\nThe exception a watched call that returned a coroutine or generator raises."},
    {"watch_note_compile", note_compile, METH_O,
     "watch_note_compile(ns) -> None\nCount one finished compile of `ns` on the calling thread (warmprof.watch's "
     "dynamo callback)."},
    {"watch_sketch_midpoints", sketch_edges, METH_NOARGS,
     "watch_sketch_midpoints() -> list[float]\nEach sketch bucket's geometric midpoint, in ns."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

// Called from the module's init (bindings.cpp).
int warmprof_add_watch(PyObject* module) {
  s_shape = PyUnicode_InternFromString("shape");
  s_dtype = PyUnicode_InternFromString("dtype");
  if (s_shape == nullptr || s_dtype == nullptr) return -1;
  WatchCoreType.tp_name = "warmprof._native.WatchCore";
  WatchCoreType.tp_basicsize = sizeof(WatchCore);
  WatchCoreType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC;
  WatchCoreType.tp_doc = "The hot path of warmprof.watch: call it as the watched callable.";
  WatchCoreType.tp_new = new_;
  WatchCoreType.tp_init = init;
  WatchCoreType.tp_call = call;
  WatchCoreType.tp_dealloc = dealloc;
  WatchCoreType.tp_traverse = traverse;
  WatchCoreType.tp_clear = clear;
  WatchCoreType.tp_methods = methods;
  WatchCoreType.tp_dictoffset = offsetof(WatchCore, dict);
  // the hot path keeps the reference NewType gave; the module takes one of its own (AddObjectRef)
  WatchCallType = PyStructSequence_NewType(&kCallDesc);
  if (WatchCallType == nullptr ||
      PyModule_AddObjectRef(module, "WatchCall", reinterpret_cast<PyObject*>(WatchCallType)) < 0) {
    return -1;
  }
  if (PyType_Ready(&WatchCoreType) < 0) return -1;
  Py_INCREF(&WatchCoreType);
  if (PyModule_AddObject(module, "WatchCore", reinterpret_cast<PyObject*>(&WatchCoreType)) < 0) {
    Py_DECREF(&WatchCoreType);
    return -1;
  }
  return PyModule_AddFunctions(module, module_methods);
}

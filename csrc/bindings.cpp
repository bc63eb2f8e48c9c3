// The only pybind11 file: produces warmprof._native.
// Hot entry points (begin, end, instant, counter, sample_host, now_ticks) are raw METH_FASTCALL
// functions registered in the same module: pybind11's dispatch costs more than the clock read.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cmath>

#include "backends/cuda_events.h"
#include "backends/cupti.h"
#include "backends/metal.h"
#include "core/causes.h"
#include "core/clock.h"
#include "core/fd_tap.h"
#include "core/stdio_tap.h"
#include "core/host.h"
#include "core/recorder.h"

namespace py = pybind11;
using namespace warmprof;

namespace {

uint32_t g_minor_faults_name = 0;
uint32_t g_major_faults_name = 0;
uint32_t g_rss_name = 0;
uint32_t g_threads_name = 0;
uint32_t g_file_bytes_name = 0;
uint32_t g_run_delay_name = 0;
uint32_t g_involuntary_name = 0;
uint32_t g_thread_cpu_name = 0;
uint32_t g_voluntary_name = 0;
uint32_t g_read_bytes_name = 0;
uint32_t g_thread_major_name = 0;
// The calling thread's run-queue delay and time slices at its last full sample: the counters that
// only move when the thread leaves its CPU are read again only when one of these moved (each return
// to a CPU, after a preemption or a block, is a new slice and adds to the delay).
thread_local int64_t t_delay_sampled = -1;
thread_local int64_t t_slices_sampled = -1;
// The fault count (minor + major) at the last read of /proc/self/statm: RSS only moves when a fault
// does (or memory is given back), so a module boundary reads it only when faults moved since.
std::atomic<int64_t> g_faults_at_memory{-1};
// This thread's last host sample, at a pass or module boundary (boundary_counters says why).
thread_local uint64_t t_last_sample_ticks = 0;

// Parses a non-negative int argument below `limit`; sets a Python error and returns false otherwise.
inline bool arg_index(PyObject* o, unsigned long limit, const char* what, unsigned long* out) {
  if (!PyLong_Check(o)) {
    PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what, Py_TYPE(o)->tp_name);
    return false;
  }
  unsigned long v = PyLong_AsUnsignedLong(o);
  if (v == (unsigned long)-1 && PyErr_Occurred()) {
    PyErr_Clear();
    if (PyObject_RichCompareBool(o, Py_False, Py_GT) == 1) {  // positive but past unsigned long
      PyErr_Format(PyExc_ValueError, "%s out of range (must be < %lu)", what, limit);
    } else {
      PyErr_Format(PyExc_ValueError, "%s must be a non-negative int", what);
    }
    return false;
  }
  if (v >= limit) {
    PyErr_Format(PyExc_ValueError, "%s %lu out of range (must be < %lu)", what, v, limit);
    return false;
  }
  *out = v;
  return true;
}

inline bool arg_value(PyObject* o, long long* out) {
  if (!PyLong_Check(o)) {
    PyErr_Format(PyExc_TypeError, "value must be an int, not %.100s", Py_TYPE(o)->tp_name);
    return false;
  }
  *out = PyLong_AsLongLong(o);
  return !(*out == -1 && PyErr_Occurred());
}

inline bool cause_and_name(PyObject* const* args, Py_ssize_t nargs, Py_ssize_t want_min,
                           Py_ssize_t want_max, const char* fn, unsigned long* cause,
                           unsigned long* name) {
  if (nargs < want_min || nargs > want_max) {
    if (want_min == want_max) {
      PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments (%zd given)", fn, want_min, nargs);
    } else {
      PyErr_Format(PyExc_TypeError, "%s() takes %zd to %zd arguments (%zd given)", fn, want_min,
                   want_max, nargs);
    }
    return false;
  }
  return arg_index(args[0], kNumCauses, "cause", cause) &&
         arg_index(args[1], recorder::g_name_count.load(std::memory_order_relaxed), "name id", name);
}

PyObject* fast_begin(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  unsigned long cause, name;
  if (!cause_and_name(args, nargs, 2, 2, "begin", &cause, &name)) return nullptr;
  recorder::record(kBegin, uint8_t(cause), uint32_t(name), 0);
  Py_RETURN_NONE;
}

PyObject* fast_end(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  unsigned long cause, name;
  if (!cause_and_name(args, nargs, 2, 2, "end", &cause, &name)) return nullptr;
  recorder::record(kEnd, uint8_t(cause), uint32_t(name), 0);
  Py_RETURN_NONE;
}

PyObject* fast_instant(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  unsigned long cause, name;
  long long value = 0;
  if (!cause_and_name(args, nargs, 2, 3, "instant", &cause, &name)) return nullptr;
  if (nargs == 3 && !arg_value(args[2], &value)) return nullptr;
  recorder::record(kInstant, uint8_t(cause), uint32_t(name), value);
  Py_RETURN_NONE;
}

PyObject* fast_counter(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_Format(PyExc_TypeError, "counter() takes 2 arguments (%zd given)", nargs);
    return nullptr;
  }
  unsigned long name;
  long long value;
  if (!arg_index(args[0], recorder::g_name_count.load(std::memory_order_relaxed), "name id", &name) ||
      !arg_value(args[1], &value))
    return nullptr;
  recorder::record(kCounter, kStructure, uint32_t(name), value);
  Py_RETURN_NONE;
}

// RSS and its file-backed part (one pread of /proc/self/statm, about 1.1 us), as two counters at `t`.
inline void append_memory(int64_t faults_now, uint64_t t) {
  host::Memory m = host::memory();
  g_faults_at_memory.store(faults_now, std::memory_order_relaxed);
  recorder::append(kCounter, kStructure, g_rss_name, m.resident, t);
  recorder::append(kCounter, kStructure, g_file_bytes_name, m.file, t);
}

// The calling thread's run-queue delay (a pread of its kept-open schedstat, about 1 us) and, when the
// thread left its CPU since its last sample (its delay or time slices moved) or `always`, what only
// moves then: its context switches and block input (one getrusage, about 0.5 us) and its CPU time
// (about 1 us), at a clock read just after the CPU time, so that wall less CPU less delay between two
// such samples is the time the thread was blocked. A boundary where the thread kept its CPU reads
// none of these: nothing of theirs but the CPU time moved, and that by the wall time. Counters of the
// calling thread (each record carries its thread): attribution reads the pass thread's.
// A sample taking longer than this was preempted while it read (it takes a few us).
constexpr double kSamplePreemptedNs = 50000;

inline void append_sched(uint64_t t, bool always) {
  host::SchedStat s = host::thread_schedstat();
  if (!s.ok) return;
  if (!always && s.delay_ns == t_delay_sampled && s.slices == t_slices_sampled) {
    recorder::append(kCounter, kStructure, g_run_delay_name, s.delay_ns, t);
    return;
  }
  const host::ThreadUsage u = host::thread_usage();
  const int64_t cpu = host::thread_cpu_ns();
  const uint64_t t_cpu = clock::ticks();
  // Preempted between reading the delay and the CPU clock: the wall time and CPU time read after the
  // wait, the delay before it, so their difference would show the wait as time blocked. Read the
  // delay again (the wait is in it now), so the three agree.
  if (double(t_cpu - t) * clock::calibration().ns_per_tick > kSamplePreemptedNs) {
    const host::SchedStat again = host::thread_schedstat();
    if (again.ok) s = again;
  }
  recorder::append(kCounter, kStructure, g_run_delay_name, s.delay_ns, t);
  t_delay_sampled = s.delay_ns;
  t_slices_sampled = s.slices;
  if (u.ok) recorder::append(kCounter, kStructure, g_involuntary_name, u.involuntary, t);
  if (cpu < 0 || !u.ok) return;
  recorder::append(kCounter, kStructure, g_thread_cpu_name, cpu, t_cpu);
  recorder::append(kCounter, kStructure, g_voluntary_name, u.voluntary, t_cpu);
  recorder::append(kCounter, kStructure, g_read_bytes_name, u.read_bytes, t_cpu);
  recorder::append(kCounter, kStructure, g_thread_major_name, u.major_faults, t_cpu);
}

// Records the process's fault counters and thread count (getrusage, and an fstat of a kept-open
// /proc/self/task: about 1.5 us) and, unless rss is False, RSS and its file-backed bytes (a pread of
// /proc/self/statm, about 1.1 us more). Pass boundaries take them; module boundaries take them only
// when faults moved since the last read (append_host_counters).
PyObject* fast_sample_host(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs > 1) {
    PyErr_Format(PyExc_TypeError, "sample_host() takes at most 1 argument (%zd given)", nargs);
    return nullptr;
  }
  bool with_rss = true;
  if (nargs == 1) {
    if (!PyBool_Check(args[0])) {
      PyErr_Format(PyExc_TypeError, "sample_host(rss): rss must be True or False, not %.100s",
                   Py_TYPE(args[0])->tp_name);
      return nullptr;
    }
    with_rss = args[0] == Py_True;
  }
  if (recorder::enabled()) {
    host::Faults f = host::faults();
    uint64_t t = clock::ticks();
    recorder::append(kCounter, kStructure, g_minor_faults_name, f.minor, t);
    recorder::append(kCounter, kStructure, g_major_faults_name, f.major, t);
    if (with_rss) append_memory(f.minor + f.major, t);
    recorder::append(kCounter, kStructure, g_threads_name, host::thread_count(), t);
    append_sched(t, true);
    t_last_sample_ticks = clock::ticks();
  }
  Py_RETURN_NONE;
}

// The module hooks' two calls: each records the fault and thread counters and a begin (end) of
// the module's span, in one native call, unless the module budget says the call is thinned
// (recorder::module_admit); an exit is recorded exactly when its enter was.
// RSS and file-backed bytes come too when faults moved since the last statm read: then attribution
// can split the faults between anonymous memory (the allocator) and file pages (code and data of
// libraries loaded lazily); a boundary with no new fault costs no read.
inline void append_host_counters() {
  host::Faults f = host::faults();
  uint64_t t = clock::ticks();
  recorder::append(kCounter, kStructure, g_minor_faults_name, f.minor, t);
  recorder::append(kCounter, kStructure, g_major_faults_name, f.major, t);
  const int64_t total = f.minor + f.major;
  if (total != g_faults_at_memory.load(std::memory_order_relaxed)) append_memory(total, t);
  recorder::append(kCounter, kStructure, g_threads_name, host::thread_count(), t);
  append_sched(t, false);
}

// Module boundaries take the host counters at most once every g_boundary_gap ticks per thread (a
// pass boundary always does): each sample is several syscalls (3.5-7 us on a VM), so a boundary
// that comes less than the gap after the last sample records its span and nothing else. A counter
// step then covers a few boundaries and attribution places it where most of its time was
// (attribution/reading.py _cover); totals are unchanged. The gap: kBoundaryBudget times the
// cheapest sample taken so far, so sampling takes at most about 1/kBoundaryBudget of a pass
// (set_boundary_gap_ns overrides: 0 samples every boundary). A pass's own samples lie outside its
// window, so the root module's boundaries (`always`) sample whatever the gap: the first and the last
// counters inside the pass.
constexpr uint64_t kBoundaryBudget = 40;
std::atomic<int64_t> g_boundary_gap_ticks{-1};  // -1: kBoundaryBudget x the cheapest sample
std::atomic<uint64_t> g_cheapest_sample_ticks{UINT64_MAX};

inline uint64_t boundary_gap_ticks() {
  const int64_t set = g_boundary_gap_ticks.load(std::memory_order_relaxed);
  if (set >= 0) return uint64_t(set);
  const uint64_t cheapest = g_cheapest_sample_ticks.load(std::memory_order_relaxed);
  return cheapest == UINT64_MAX ? 0 : cheapest * kBoundaryBudget;
}

inline void boundary_counters(bool always = false) {
  const uint64_t t0 = clock::ticks();
  if (!always && t0 - t_last_sample_ticks < boundary_gap_ticks()) return;
  append_host_counters();
  const uint64_t t1 = clock::ticks();
  t_last_sample_ticks = t1;
  const uint64_t cost = t1 - t0;
  uint64_t cheapest = g_cheapest_sample_ticks.load(std::memory_order_relaxed);
  while (cost < cheapest &&
         !g_cheapest_sample_ticks.compare_exchange_weak(cheapest, cost, std::memory_order_relaxed)) {
  }
}

// A module call opens (closes): the span's begin (end) and, at most once a gap, the host counters.
// Whether the call is recorded (an exit exactly when its enter was).
inline bool module_enter_impl(uint32_t name, bool coarse, bool always = false) {
  if (!recorder::enabled()) return false;
  const bool take = recorder::module_admit(coarse);
  if (take) {
    boundary_counters(always);
    recorder::record(kBegin, kStructure, name, 0);
  }
  recorder::module_push(name, take);
  return take;
}

inline bool module_exit_impl(uint32_t name, bool always = false) {
  if (!recorder::enabled() || !recorder::module_pop(name)) return false;
  recorder::record(kEnd, kStructure, name, 0);
  boundary_counters(always);
  return true;
}

PyObject* fast_module_enter(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_Format(PyExc_TypeError, "module_enter() takes 2 arguments (%zd given)", nargs);
    return nullptr;
  }
  unsigned long name;
  if (!arg_index(args[0], recorder::g_name_count.load(std::memory_order_relaxed), "name id", &name)) return nullptr;
  if (!PyBool_Check(args[1])) {
    PyErr_Format(PyExc_TypeError, "module_enter(coarse): coarse must be True or False, not %.100s",
                 Py_TYPE(args[1])->tp_name);
    return nullptr;
  }
  return PyBool_FromLong(module_enter_impl(uint32_t(name), args[1] == Py_True));
}

PyObject* fast_module_exit(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1) {
    PyErr_Format(PyExc_TypeError, "module_exit() takes 1 argument (%zd given)", nargs);
    return nullptr;
  }
  unsigned long name;
  if (!arg_index(args[0], recorder::g_name_count.load(std::memory_order_relaxed), "name id", &name)) return nullptr;
  return PyBool_FromLong(module_exit_impl(uint32_t(name)));
}

// ModuleHook(name, coarse, on_thin, root): one module's forward pre-hook and forward hook in one native
// object (registered as both: called with 2 arguments it is the pre-hook, with 3 the post-hook), so
// no Python frame runs per module call. A call the recorder does not take (the pass's module budget
// is spent) marks the hook thinned and calls on_thin() (no arguments), which takes the pre-hook off;
// a post-hook call that finds it thinned with no recorded call of it still open calls on_thin()
// again, which takes the post-hook off (a recursive module, or one running on several threads, still
// closes what it opened). reset() clears both for the next pass. A root hook (the traced model's
// own module) samples the host counters at both its boundaries whatever the gap.
struct ModuleHook {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* on_thin;
  uint32_t name;
  bool coarse;
  bool root;
  bool thinned;
  long open;  // recorded calls of this module not yet closed
};

int module_hook_thin(ModuleHook* h) {
  if (h->on_thin == nullptr) return 0;
  PyObject* cb = h->on_thin;
  Py_INCREF(cb);
  PyObject* r = PyObject_CallNoArgs(cb);
  Py_DECREF(cb);
  if (r == nullptr) return -1;
  Py_DECREF(r);
  return 0;
}

PyObject* module_hook_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  ModuleHook* h = reinterpret_cast<ModuleHook*>(self);
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if ((kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0) || (nargs != 2 && nargs != 3)) {
    PyErr_Format(PyExc_TypeError, "ModuleHook takes (module, args) or (module, args, output), got %zd arguments%s",
                 nargs, kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0 ? " and keywords" : "");
    return nullptr;
  }
  (void)args;
  if (nargs == 2) {
    if (module_enter_impl(h->name, h->coarse, h->root)) {
      ++h->open;
    } else if (!h->thinned) {
      h->thinned = true;
      if (module_hook_thin(h) < 0) return nullptr;
    }
  } else {
    if (module_exit_impl(h->name, h->root)) --h->open;
    if (h->thinned && h->open <= 0 && module_hook_thin(h) < 0) return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* module_hook_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
  static const char* kwlist[] = {"name", "coarse", "on_thin", "root", nullptr};
  PyObject* name_obj;
  int coarse;
  PyObject* on_thin = Py_None;
  int root = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "Op|Op:ModuleHook", const_cast<char**>(kwlist), &name_obj, &coarse,
                                   &on_thin, &root))
    return nullptr;
  unsigned long name;
  if (!arg_index(name_obj, recorder::g_name_count.load(std::memory_order_relaxed), "name id", &name)) return nullptr;
  if (on_thin != Py_None && !PyCallable_Check(on_thin)) {
    PyErr_SetString(PyExc_TypeError, "on_thin must be callable or None");
    return nullptr;
  }
  ModuleHook* h = reinterpret_cast<ModuleHook*>(type->tp_alloc(type, 0));
  if (h == nullptr) return nullptr;
  h->vectorcall = module_hook_call;
  h->name = uint32_t(name);
  h->coarse = coarse != 0;
  h->root = root != 0;
  h->thinned = false;
  h->open = 0;
  h->on_thin = on_thin == Py_None ? nullptr : (Py_INCREF(on_thin), on_thin);
  return reinterpret_cast<PyObject*>(h);
}

int module_hook_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(reinterpret_cast<ModuleHook*>(self)->on_thin);
  return 0;
}

int module_hook_clear(PyObject* self) {
  Py_CLEAR(reinterpret_cast<ModuleHook*>(self)->on_thin);
  return 0;
}

void module_hook_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  module_hook_clear(self);
  Py_TYPE(self)->tp_free(self);
}

PyObject* module_hook_reset(PyObject* self, PyObject*) {
  ModuleHook* h = reinterpret_cast<ModuleHook*>(self);
  h->thinned = false;
  h->open = 0;
  Py_RETURN_NONE;
}

PyObject* module_hook_get_open(PyObject* self, void*) { return PyLong_FromLong(reinterpret_cast<ModuleHook*>(self)->open); }
PyObject* module_hook_get_thinned(PyObject* self, void*) {
  return PyBool_FromLong(reinterpret_cast<ModuleHook*>(self)->thinned);
}
PyObject* module_hook_get_name(PyObject* self, void*) {
  return PyLong_FromUnsignedLong(reinterpret_cast<ModuleHook*>(self)->name);
}
PyObject* module_hook_get_coarse(PyObject* self, void*) {
  return PyBool_FromLong(reinterpret_cast<ModuleHook*>(self)->coarse);
}
PyObject* module_hook_get_root(PyObject* self, void*) {
  return PyBool_FromLong(reinterpret_cast<ModuleHook*>(self)->root);
}

PyMethodDef g_module_hook_methods[] = {
    {"reset", module_hook_reset, METH_NOARGS, "reset() -> None\nNot thinned, no call open: for the next pass."},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef g_module_hook_getset[] = {
    {"open", module_hook_get_open, nullptr, "Recorded calls of this module not yet closed.", nullptr},
    {"thinned", module_hook_get_thinned, nullptr, "A call of this pass was not recorded (its budget was spent).", nullptr},
    {"name", module_hook_get_name, nullptr, "The span's interned name id.", nullptr},
    {"coarse", module_hook_get_coarse, nullptr, "Kept when module calls are thinned to coarse ones.", nullptr},
    {"root", module_hook_get_root, nullptr, "Samples the host counters at both boundaries whatever the gap.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

// Readies a static type and adds it to the module under `name` (0, or -1 with a Python error set).
int add_type(PyObject* module, PyTypeObject* type, const char* name) {
  if (PyType_Ready(type) < 0) return -1;
  Py_INCREF(type);
  if (PyModule_AddObject(module, name, reinterpret_cast<PyObject*>(type)) < 0) {
    Py_DECREF(type);
    return -1;
  }
  return 0;
}

PyTypeObject ModuleHookType = {PyVarObject_HEAD_INIT(nullptr, 0)};

int add_module_hook_type(PyObject* module) {
  ModuleHookType.tp_name = "warmprof._native.ModuleHook";
  ModuleHookType.tp_basicsize = sizeof(ModuleHook);
  ModuleHookType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  ModuleHookType.tp_doc =
      "ModuleHook(name, coarse, on_thin=None, root=False)\nOne module's forward pre-hook (called with module, args) and forward "
      "hook (module, args, output), native: the span of each call and, at most once a gap, the host counters.";
  ModuleHookType.tp_new = module_hook_new;
  ModuleHookType.tp_dealloc = module_hook_dealloc;
  ModuleHookType.tp_traverse = module_hook_traverse;
  ModuleHookType.tp_clear = module_hook_clear;
  ModuleHookType.tp_vectorcall_offset = offsetof(ModuleHook, vectorcall);
  ModuleHookType.tp_call = PyVectorcall_Call;
  ModuleHookType.tp_methods = g_module_hook_methods;
  ModuleHookType.tp_getset = g_module_hook_getset;
  return add_type(module, &ModuleHookType, "ModuleHook");
}

// ModuleForward(hook, forward): a module's forward wrapped in one native call, set as the module
// instance's `forward` attribute, so torch's Module.__call__ keeps its fast path (no hook dicts to
// walk: a hooked call takes torch's slow path, about 4 us a call on a VM, more than the recording).
// A call records the module's span begin, calls the wrapped forward with the same arguments, and
// records the end, also when the forward raised (the exception goes on as it was). The span state
// (name, coarse, root, thinned, open) is the ModuleHook's: a call the recorder does not take (the
// pass's module budget is spent) marks it thinned and costs one native call more, nothing else.
// Attributes it does not have itself are the wrapped forward's (__name__, __self__, __func__, ...),
// and __wrapped__ is the forward, so inspect.signature(module.forward) reads the real signature.
struct ModuleForward {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  ModuleHook* hook;
  PyObject* forward;
};

PyObject* module_forward_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  ModuleForward* f = reinterpret_cast<ModuleForward*>(self);
  ModuleHook* h = f->hook;
  const bool on = recorder::enabled();
  if (on) {
    if (module_enter_impl(h->name, h->coarse, h->root)) {
      ++h->open;
    } else {
      h->thinned = true;
    }
  }
  PyObject* forward = f->forward;
  Py_INCREF(forward);  // the module may set its forward anew inside the call
  PyObject* out = PyObject_Vectorcall(forward, args, nargsf, kwnames);
  Py_DECREF(forward);
  if (on && module_exit_impl(h->name, h->root)) --h->open;
  return out;
}

PyTypeObject ModuleForwardType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyObject* module_forward_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
  static const char* kwlist[] = {"hook", "forward", nullptr};
  PyObject* hook;
  PyObject* forward;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O:ModuleForward", const_cast<char**>(kwlist), &ModuleHookType,
                                   &hook, &forward))
    return nullptr;
  if (!PyCallable_Check(forward)) {
    PyErr_SetString(PyExc_TypeError, "ModuleForward(hook, forward): forward must be callable");
    return nullptr;
  }
  ModuleForward* f = reinterpret_cast<ModuleForward*>(type->tp_alloc(type, 0));
  if (f == nullptr) return nullptr;
  f->vectorcall = module_forward_call;
  Py_INCREF(hook);
  f->hook = reinterpret_cast<ModuleHook*>(hook);
  Py_INCREF(forward);
  f->forward = forward;
  return reinterpret_cast<PyObject*>(f);
}

int module_forward_traverse(PyObject* self, visitproc visit, void* arg) {
  ModuleForward* f = reinterpret_cast<ModuleForward*>(self);
  Py_VISIT(reinterpret_cast<PyObject*>(f->hook));
  Py_VISIT(f->forward);
  return 0;
}

int module_forward_clear(PyObject* self) {
  ModuleForward* f = reinterpret_cast<ModuleForward*>(self);
  PyObject* hook = reinterpret_cast<PyObject*>(f->hook);
  f->hook = nullptr;
  Py_XDECREF(hook);
  Py_CLEAR(f->forward);
  return 0;
}

void module_forward_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  module_forward_clear(self);
  Py_TYPE(self)->tp_free(self);
}

PyObject* module_forward_getattro(PyObject* self, PyObject* name) {
  PyObject* got = PyObject_GenericGetAttr(self, name);
  if (got != nullptr || !PyErr_ExceptionMatches(PyExc_AttributeError)) return got;
  ModuleForward* f = reinterpret_cast<ModuleForward*>(self);
  if (f->forward == nullptr) return nullptr;
  PyErr_Clear();
  return PyObject_GetAttr(f->forward, name);
}

PyObject* module_forward_repr(PyObject* self) {
  ModuleForward* f = reinterpret_cast<ModuleForward*>(self);
  if (f->forward == nullptr) return PyUnicode_FromString("<warmprof module span (cleared)>");
  return PyUnicode_FromFormat("<warmprof module span around %R>", f->forward);
}

PyObject* module_forward_get_wrapped(PyObject* self, void*) {
  ModuleForward* f = reinterpret_cast<ModuleForward*>(self);
  if (f->forward == nullptr) Py_RETURN_NONE;
  Py_INCREF(f->forward);
  return f->forward;
}

PyObject* module_forward_get_hook(PyObject* self, void*) {
  ModuleForward* f = reinterpret_cast<ModuleForward*>(self);
  if (f->hook == nullptr) Py_RETURN_NONE;
  Py_INCREF(reinterpret_cast<PyObject*>(f->hook));
  return reinterpret_cast<PyObject*>(f->hook);
}

PyGetSetDef g_module_forward_getset[] = {
    {"__wrapped__", module_forward_get_wrapped, nullptr, "The wrapped forward.", nullptr},
    {"hook", module_forward_get_hook, nullptr, "The ModuleHook whose span state the calls use.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

int add_module_forward_type(PyObject* module) {
  ModuleForwardType.tp_name = "warmprof._native.ModuleForward";
  ModuleForwardType.tp_basicsize = sizeof(ModuleForward);
  ModuleForwardType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  ModuleForwardType.tp_doc =
      "ModuleForward(hook, forward)\nA module's forward wrapped in its span (set as the module's `forward` "
      "attribute: torch's Module.__call__ keeps its fast path). Records the span of `hook` (a ModuleHook) "
      "around each call, also when the forward raises; other attributes are the wrapped forward's.";
  ModuleForwardType.tp_new = module_forward_new;
  ModuleForwardType.tp_dealloc = module_forward_dealloc;
  ModuleForwardType.tp_traverse = module_forward_traverse;
  ModuleForwardType.tp_clear = module_forward_clear;
  ModuleForwardType.tp_vectorcall_offset = offsetof(ModuleForward, vectorcall);
  ModuleForwardType.tp_call = PyVectorcall_Call;
  ModuleForwardType.tp_getattro = module_forward_getattro;
  ModuleForwardType.tp_repr = module_forward_repr;
  ModuleForwardType.tp_getset = g_module_forward_getset;
  return add_type(module, &ModuleForwardType, "ModuleForward");
}

PyObject* fast_now_ticks(PyObject*, PyObject* const*, Py_ssize_t nargs) {
  if (nargs != 0) {
    PyErr_SetString(PyExc_TypeError, "now_ticks() takes no arguments");
    return nullptr;
  }
  return PyLong_FromUnsignedLongLong(clock::ticks());
}

PyMethodDef g_fast_methods[] = {
    {"begin", (PyCFunction)(void (*)(void))fast_begin, METH_FASTCALL,
     "begin(cause: int, name: int) -> None\nOpen a span on this thread."},
    {"end", (PyCFunction)(void (*)(void))fast_end, METH_FASTCALL,
     "end(cause: int, name: int) -> None\nClose the innermost span on this thread."},
    {"instant", (PyCFunction)(void (*)(void))fast_instant, METH_FASTCALL,
     "instant(cause: int, name: int, value: int = 0) -> None\nRecord a point event."},
    {"counter", (PyCFunction)(void (*)(void))fast_counter, METH_FASTCALL,
     "counter(name: int, value: int) -> None\nRecord a counter sample."},
    {"sample_host", (PyCFunction)(void (*)(void))fast_sample_host, METH_FASTCALL,
     "sample_host(rss=True) -> None\nRecord host counters (minor/major faults, threads, the thread's run-queue delay, "
     "switches, CPU time and storage reads, and RSS and file-backed bytes unless rss is False) now."},
    {"module_enter", (PyCFunction)(void (*)(void))fast_module_enter, METH_FASTCALL,
     "module_enter(name: int, coarse: bool) -> bool\nA module call opens: host counters and a begin, unless thinned; whether it was recorded."},
    {"module_exit", (PyCFunction)(void (*)(void))fast_module_exit, METH_FASTCALL,
     "module_exit(name: int) -> bool\nA module call closes: an end and host counters, if its enter was recorded; whether it was."},
    {"now_ticks", (PyCFunction)(void (*)(void))fast_now_ticks, METH_FASTCALL,
     "now_ticks() -> int\nThe raw clock, in ticks."},
    {nullptr, nullptr, 0, nullptr}};

py::dict drain_to_arrays() {
  // The copy and the sort run without the GIL: a checkpoint drains from warmprof's sampler thread while
  // the process runs, and holding the GIL there stalled the process's own threads for the whole copy.
  recorder::Drained d;
  {
    py::gil_scoped_release unlocked;
    d = recorder::drain();
  }
  const size_t n = d.records.size();
  py::array_t<int64_t> ts(n), value(n);
  py::array_t<uint8_t> kind(n), cause(n);
  py::array_t<uint32_t> name(n);
  py::array_t<uint16_t> thread(n);
  auto ts_m = ts.mutable_unchecked<1>();
  auto value_m = value.mutable_unchecked<1>();
  auto kind_m = kind.mutable_unchecked<1>();
  auto cause_m = cause.mutable_unchecked<1>();
  auto name_m = name.mutable_unchecked<1>();
  auto thread_m = thread.mutable_unchecked<1>();
  {
    py::gil_scoped_release unlocked;  // the arrays are held above; their memory is filled without the GIL
    for (size_t i = 0; i < n; ++i) {
      const recorder::Record& r = d.records[i];
      ts_m(i) = clock::to_ns(r.ticks);
      value_m(i) = r.value;
      kind_m(i) = r.kind;
      cause_m(i) = r.cause;
      name_m(i) = r.name;
      thread_m(i) = r.thread;
    }
  }
  py::dict out;
  out["ts_ns"] = ts;
  out["kind"] = kind;
  out["cause"] = cause;
  out["name"] = name;
  out["value"] = value;
  out["thread"] = thread;
  out["names"] = recorder::names();
  out["dropped"] = d.dropped;
  out["thinned"] = d.thinned;
  py::array_t<int64_t> own(d.own_fault_ticks.size());
  auto own_m = own.mutable_unchecked<1>();
  for (size_t i = 0; i < d.own_fault_ticks.size(); ++i) own_m(i) = clock::to_ns(d.own_fault_ticks[i]);
  out["own_fault_ns"] = own;
  out["threads"] = d.threads;
  out["os_tids"] = d.os_tids;
  return out;
}

py::dict backend_entry(bool compiled, bool available, const std::string& reason) {
  py::dict e;
  e["compiled"] = compiled;
  e["available"] = available;
  e["reason"] = available ? std::string() : reason;
  return e;
}

void check_positive(long long v, const char* what) {
  if (v <= 0) throw py::value_error(std::string(what) + " must be positive, got " + std::to_string(v));
}

}  // namespace

int warmprof_add_watch(PyObject* module);  // csrc/watch_type.cpp

PYBIND11_MODULE(_native, m) {
  m.doc() = "warmprof native core: clock, recorder, host counters, CUDA/CUPTI/Metal backends";
  m.attr("__version__") = WARMPROF_VERSION;
  m.attr("NUM_CAUSES") = int(kNumCauses);
  m.attr("RECORD_BYTES") = int(sizeof(recorder::Record));
  if (PyModule_AddFunctions(m.ptr(), g_fast_methods) != 0) throw py::error_already_set();
  if (warmprof_add_watch(m.ptr()) != 0) throw py::error_already_set();
  if (add_module_hook_type(m.ptr()) != 0) throw py::error_already_set();
  if (add_module_forward_type(m.ptr()) != 0) throw py::error_already_set();

  g_minor_faults_name = recorder::intern("host:minor_faults");
  g_major_faults_name = recorder::intern("host:major_faults");
  g_rss_name = recorder::intern("host:rss_bytes");
  g_threads_name = recorder::intern("host:threads");
  g_file_bytes_name = recorder::intern("host:file_bytes");
  g_run_delay_name = recorder::intern("host:run_delay_ns");
  g_involuntary_name = recorder::intern("host:involuntary_switches");
  g_thread_cpu_name = recorder::intern("host:thread_cpu_ns");
  g_voluntary_name = recorder::intern("host:voluntary_switches");
  g_read_bytes_name = recorder::intern("host:storage_read_bytes");
  g_thread_major_name = recorder::intern("host:thread_major_faults");

  // Recorder (cold).
  m.def("start", [](long long spare_buffers) {
    if (spare_buffers < 0) throw py::value_error("spare_buffers must not be negative");
    if (recorder::enabled()) throw py::value_error("a recording is already active");
    recorder::start(size_t(spare_buffers));
  }, py::arg("spare_buffers") = 0,
     "Start a recording generation: every thread's buffer is emptied; this thread's buffer and "
     "spare_buffers more are pre-faulted now.");
  m.def("stop", &recorder::stop, "Stop recording; records stay until drain() and release().");
  m.def("begin_section", [](long long sections_left) {
    check_positive(sections_left, "sections_left");
    recorder::begin_section(size_t(sections_left));
  }, py::arg("sections_left"),
     "A pass begins: module budgets are an equal share of the room left for this and the later passes.");
  m.def("release", [] {
    if (recorder::enabled()) throw py::value_error("cannot release buffers while recording");
    recorder::release();
  }, "Return every recording buffer's pages to the system (after stop() and drain()).");
  m.def("enabled", &recorder::enabled);
  m.def("set_boundary_gap_ns", [](double ns) {
    if (ns < 0) {
      g_boundary_gap_ticks.store(-1);
    } else {
      g_boundary_gap_ticks.store(int64_t(ns / clock::calibration().ns_per_tick));
    }
  }, py::arg("ns"),
     "How far apart module boundaries take the host counters, per thread: at least `ns` after the last sample "
     "(0: every boundary; negative: the default, 40 times the cheapest sample so far). Pass boundaries always do.");
  m.def("boundary_gap_ns", [] { return double(boundary_gap_ticks()) * clock::calibration().ns_per_tick; },
        "The gap in force now (ns): module boundaries closer than this to the last host sample take none.");
  m.def("intern", &recorder::intern, py::arg("name"), "Interned id of a span/counter name.");
  m.def("names", &recorder::names);
  m.def("drain", &drain_to_arrays,
        "Records of the current generation as numpy arrays (ts_ns, kind, cause, name, value, thread).");
  m.def("record_at", [](int kind, int cause, uint32_t name, long long value, uint64_t ticks) {
    if (kind < 0 || kind > kCounter) throw py::value_error("kind must be 0..3");
    if (cause < 0 || cause >= kNumCauses) throw py::value_error("cause out of range");
    if (name >= recorder::g_name_count.load()) throw py::value_error("unknown name id");
    return recorder::append(uint8_t(kind), uint8_t(cause), name, value, ticks);
  }, py::arg("kind"), py::arg("cause"), py::arg("name"), py::arg("value"), py::arg("ticks"),
     "Append a record with an explicit timestamp (instruments that learn times after the fact).");
  m.def("cpp_span_cost_ns", [](uint32_t name, int iterations) {
    check_positive(iterations, "iterations");
    if (recorder::enabled()) throw py::value_error("cpp_span_cost_ns cannot run while a recording is active");
    if (recorder::capacity() < 2) throw py::value_error("cpp_span_cost_ns needs a capacity of at least 2 records");
    if (name >= recorder::g_name_count.load()) throw py::value_error("unknown name id");
    return recorder::cpp_span_cost_ns(name, iterations);
  }, py::arg("name"), py::arg("iterations"), "Mean ns of one begin+end pair recorded from C++.");

  // Clock.
  m.def("clock_info", [] {
    const clock::Calibration& c = clock::calibration();
    py::dict d;
    d["source"] = c.source;
    d["ns_per_tick"] = c.ns_per_tick;
    d["samples"] = c.samples;
    d["spread"] = c.spread;
    d["invariant_tsc"] = clock::invariant_tsc();
    d["refined"] = c.source_refined;
    return d;
  });
  m.def("clock_read_cost_ns", [](int iterations) {
    check_positive(iterations, "iterations");
    return clock::read_cost_ns(iterations);
  }, py::arg("iterations"), "Mean ns of one raw clock read (the hot-path clock) in a C++ loop.");
  m.def("now_ns", [] { return clock::monotonic_ns(); }, "CLOCK_MONOTONIC in ns.");
  m.def("ticks_to_ns", [](uint64_t t) { return clock::to_ns(t); }, py::arg("ticks"));
  m.def("ns_to_ticks", [](int64_t ns) { return clock::from_ns(ns); }, py::arg("ns"));
  m.def("calibrate_clock", [](int pairs, double duration_ms) {
    check_positive(pairs, "pairs");
    if (!(duration_ms > 0)) throw py::value_error("duration_ms must be positive");
    clock::Calibration c = clock::calibrate(pairs, duration_ms);
    py::dict d;
    d["source"] = c.source;
    d["ns_per_tick"] = c.ns_per_tick;
    d["samples"] = c.samples;
    d["spread"] = c.spread;
    return d;
  }, py::arg("pairs"), py::arg("duration_ms"), "A fresh calibration (does not replace the cached one).");

  // Host counters and calibration probes.
  m.def("faults", [] {
    host::Faults f = host::faults();
    return py::make_tuple(f.minor, f.major);
  }, "(minor, major) page faults of this process so far.");
  m.def("rss_bytes", &host::rss_bytes);
  m.def("file_bytes", [] { return host::memory().file; },
        "Resident file-backed or shared bytes (RssFile + RssShmem, /proc/self/statm); 0 where unavailable.");
  m.def("thread_count", &host::thread_count);
  m.def("thread_schedstat", [] {
    host::SchedStat s = host::thread_schedstat();
    if (!s.ok) return py::object(py::none());
    return py::object(py::make_tuple(s.run_ns, s.delay_ns, s.slices));
  }, "(run_ns, delay_ns, timeslices) of the calling thread (/proc/thread-self/schedstat: time on a CPU, "
     "time runnable waiting for one), or None where the kernel has no schedstat.");
  m.def("thread_involuntary_switches", &host::thread_involuntary_switches,
        "Involuntary context switches of the calling thread (getrusage RUSAGE_THREAD); -1 where unavailable.");
  m.def("thread_times", [] {
    const uint64_t start = clock::monotonic_ns();
    host::SchedStat s = host::thread_schedstat();
    const host::ThreadUsage u = host::thread_usage();
    const int64_t cpu = host::thread_cpu_ns();
    const int64_t now = int64_t(clock::monotonic_ns());
    if (double(now) - double(start) > kSamplePreemptedNs) s = host::thread_schedstat();  // as append_sched
    if (!s.ok || !u.ok || cpu < 0) return py::object(py::none());
    py::dict d;
    d["ns"] = now;
    d["cpu_ns"] = cpu;
    d["run_delay_ns"] = s.delay_ns;
    d["voluntary"] = u.voluntary;
    d["storage_read_bytes"] = u.read_bytes;
    d["major_faults"] = u.major_faults;
    return py::object(d);
  }, "The calling thread's clocks, as module boundaries record them: {'ns' (monotonic, read last), 'cpu_ns', "
     "'run_delay_ns', 'voluntary' (switches), 'storage_read_bytes', 'major_faults'}; None where the kernel has no "
     "schedstat or no RUSAGE_THREAD (off-CPU time cannot be told from a wait for a CPU there).");
  m.def("task_schedstats", [] {
    std::vector<host::TaskSched> got;
    {
      py::gil_scoped_release nogil;
      got = host::task_schedstats();
    }
    py::dict d;
    for (const auto& t : got) {
      py::dict e;
      e["run_ns"] = t.sched.ok ? py::object(py::int_(t.sched.run_ns)) : py::object(py::none());
      e["delay_ns"] = t.sched.ok ? py::object(py::int_(t.sched.delay_ns)) : py::object(py::none());
      e["voluntary"] = t.voluntary;
      e["involuntary"] = t.involuntary;
      d[py::int_(t.tid)] = e;
    }
    return d;
  }, "{tid: {'run_ns', 'delay_ns', 'voluntary', 'involuntary'}} for every thread of this process "
     "(/proc/self/task/*/schedstat and status; None / -1 where a file is missing).");
  m.def("page_size", &host::page_size);
  m.def("calibrate_fault_cost", [](long long bytes, int trials) {
    check_positive(bytes, "bytes");
    check_positive(trials, "trials");
    host::FaultCost c;
    {
      py::gil_scoped_release nogil;
      c = host::calibrate_fault_cost(size_t(bytes), trials);
    }
    py::dict d;
    d["ns_per_fault"] = c.ns_per_fault;
    d["ns_per_page"] = c.ns_per_page;
    d["faults"] = c.faults;
    d["pages"] = c.pages;
    d["trials"] = c.trials;
    return d;
  }, py::arg("bytes") = 32ll << 20, py::arg("trials") = 5);
  m.def("fresh_allocation_ns", [](long long bytes, int trials) {
    check_positive(bytes, "bytes");
    check_positive(trials, "trials");
    py::gil_scoped_release nogil;
    return host::fresh_allocation_ns(size_t(bytes), trials);
  }, py::arg("bytes"), py::arg("trials") = 5);
  m.def("first_touch", [](long long bytes, int trials, bool huge) {
    check_positive(bytes, "bytes");
    check_positive(trials, "trials");
    std::vector<host::TouchTrial> got;
    {
      py::gil_scoped_release nogil;
      got = host::first_touch_trials(size_t(bytes), trials, huge);
    }
    py::list cpu_ns, faults;
    for (const auto& g : got) {
      cpu_ns.append(g.cpu_ns);
      faults.append(g.faults);
    }
    py::dict d;
    d["bytes"] = bytes;
    d["cpu_ns"] = cpu_ns;
    d["faults"] = faults;
    return d;
  }, py::arg("bytes"), py::arg("trials") = 5, py::arg("huge") = false,
     "First touch of `bytes` of fresh memory, `trials` times (MADV_HUGEPAGE if huge, else MADV_NOHUGEPAGE): "
     "{'bytes', 'cpu_ns': [...], 'faults': [...]}, one entry per trial, in thread CPU time.");
  m.def("thread_start_samples", [](int trials) {
    check_positive(trials, "trials");
    std::vector<double> got;
    {
      py::gil_scoped_release nogil;
      got = host::thread_start_samples(trials);
    }
    return got;
  }, py::arg("trials") = 31, "ns of each of `trials` thread starts and joins (wall), in the order taken.");
  m.def("thread_start_ns", [](int trials) {
    check_positive(trials, "trials");
    py::gil_scoped_release nogil;
    return host::thread_start_ns(trials);
  }, py::arg("trials") = 9);

  // Backends.
  m.def("backends", [] {
    namespace b = backends;
    py::dict d;
    py::dict cupti = backend_entry(b::cupti::compiled(), b::cupti::available(), b::cupti::unavailable_reason());
    cupti["path"] = b::cupti::library_path();
    d["cupti"] = cupti;
    d["cuda_events"] = backend_entry(b::cuda_events::compiled(), b::cuda_events::available(),
                                     b::cuda_events::unavailable_reason());
    d["metal"] = backend_entry(b::metal::compiled(), b::metal::available(), b::metal::unavailable_reason());
    return d;
  }, "backend name -> {compiled, available, reason}; cupti adds path (the libcupti file in use, '' if none)");
  m.def("metal_probe", [](std::vector<int> lengths, int repeats) {
    namespace mt = backends::metal;
    if (lengths.empty()) throw py::value_error("lengths must not be empty");
    for (size_t i = 0; i < lengths.size(); ++i) {
      if (lengths[i] < 1 || lengths[i] > mt::kMaxLength)
        throw py::value_error("each length must be within 1.." + std::to_string(mt::kMaxLength) + ", got " +
                              std::to_string(lengths[i]));
      for (size_t j = 0; j < i; ++j)
        if (lengths[j] == lengths[i])
          throw py::value_error("lengths must be distinct (" + std::to_string(lengths[i]) + " twice)");
    }
    if (repeats < 1 || repeats > mt::kMaxRepeats)
      throw py::value_error("repeats must be within 1.." + std::to_string(mt::kMaxRepeats) + ", got " +
                            std::to_string(repeats));
    if (!mt::available()) throw std::runtime_error(mt::unavailable_reason());
    mt::ProbeResult r;
    {
      py::gil_scoped_release nogil;
      r = mt::probe(lengths, repeats);
    }
    py::list builds, dispatches;
    for (const mt::Build& b : r.builds) {
      py::dict e;
      e["length"] = b.length;
      e["seen"] = b.seen;
      e["specialise_ns"] = b.specialise_ns;
      e["pipeline_ns"] = b.pipeline_ns;
      builds.append(e);
    }
    for (const mt::Dispatch& x : r.dispatches) {
      py::dict e;
      e["length"] = x.length;
      e["index"] = x.index;
      e["gpu_start_s"] = x.gpu_start_s;
      e["gpu_end_s"] = x.gpu_end_s;
      e["host_commit_s"] = x.host_commit_s;
      e["host_done_s"] = x.host_done_s;
      e["host_ns"] = x.host_ns;
      dispatches.append(e);
    }
    py::dict row_sums;
    for (size_t i = 0; i < r.row_sums.size() && i < lengths.size(); ++i) row_sums[py::int_(lengths[i])] = r.row_sums[i];
    py::dict d;
    d["device"] = r.device;
    d["error"] = r.error;
    d["device_ns"] = r.device_ns;
    d["library_ns"] = r.library_ns;
    d["kernel"] = r.kernel;
    d["rows"] = r.rows;
    d["builds"] = builds;
    d["dispatches"] = dispatches;
    d["row_sums"] = row_sums;
    return d;
  }, py::arg("lengths"), py::arg("repeats"),
     "The Metal reference probe (Apple): the kernel's library compiled once, a pipeline per length "
     "(function constant), `repeats` dispatches each with their GPU times, each length built again; "
     "raw figures, error '' unless a stage failed. ValueError for bad arguments, RuntimeError with the "
     "reason where Metal is unavailable.");
  m.def("cupti_set_search_path", &backends::cupti::set_search_path, py::arg("dirs"),
        "Folders to look for libcupti in, after a copy already in the process and before the sonames.");
  // Without the GIL: cuptiSubscribe/cuptiUnsubscribe take CUPTI's own locks, which a thread inside a
  // CUDA call (a callback, which may need the GIL to finish) can hold.
  m.def("cupti_start", &backends::cupti::start, py::call_guard<py::gil_scoped_release>(),
        "Subscribe to CUPTI; '' on success, else the reason.");
  m.def("cupti_stop", &backends::cupti::stop, py::call_guard<py::gil_scoped_release>(),
        "Unsubscribe; '' when clean (or nothing was subscribed), else why not (the subscription was torn down).");
  m.def("cupti_overheads", [] {
    backends::cupti::Overheads o;
    {
      py::gil_scoped_release nogil;  // flushes CUPTI's activity buffers
      o = backends::cupti::take_overheads();
    }
    py::list records;
    for (const backends::cupti::Overhead& r : o.records) {
      py::dict d;
      d["kind"] = r.kind;
      d["cause"] = r.cause;
      d["start_ns"] = r.start_ns;
      d["end_ns"] = r.end_ns;
      d["thread"] = r.thread;
      d["this_thread"] = r.this_thread;
      records.append(d);
    }
    py::dict d;
    d["records"] = records;
    d["dropped"] = o.dropped;
    d["enabled"] = o.enabled;
    d["reason"] = o.reason;
    return d;
  }, "CUPTI's OVERHEAD records since the last call (lazy module/function loads, the driver's PTX compiles), "
     "timed by the driver, in warmprof's clock; {records, dropped, enabled, reason}.");
  m.def("cupti_check", &backends::cupti::check,
        "'' while warmprof's CUPTI subscription stands (or none is active), else why it no longer does.");
  m.def("cupti_active", &backends::cupti::active);
  m.def("cupti_set_recording", &backends::cupti::set_recording, py::arg("on"),
        "Whether CUPTI's handler writes into the recorder (watch(cupti=True) turns it off while it holds CUPTI).");
  m.def("cupti_thread_tally", [] {
    const backends::cupti::CallTally& t = backends::cupti::thread_tally();
    py::dict out;
    for (int c = 1; c < backends::cupti::CallTally::kCauses; ++c)
      if (t.spans[c] != 0 || t.ns[c] != 0) out[py::int_(c)] = py::make_tuple(t.spans[c], t.ns[c], t.bytes[c]);
    return out;
  }, "cause id -> (spans, ns, bytes) the CUPTI handler booked on this thread (cumulative; what watch reads).");
  m.def("cupti_stats", [] {
    backends::cupti::PassStats s = backends::cupti::stats();
    py::dict d;
    d["kernel_launches"] = s.kernel_launches;
    d["new_kernel_count"] = s.new_kernel_count;
    d["new_kernels"] = s.new_kernels;
    d["subscribe_ns"] = s.subscribe_ns;
    d["callbacks"] = s.callbacks;
    d["pool_hits"] = s.pool_hits;
    d["untracked_kernels"] = s.untracked_kernels;
    d["refused_callbacks"] = s.refused_callbacks;
    return d;
  });
  m.def("cupti_handler_cost_ns", [](int iterations) {
    check_positive(iterations, "iterations");
    if (recorder::enabled()) throw py::value_error("cannot calibrate the CUPTI handler while recording");
    if (backends::cupti::active()) throw py::value_error("cannot calibrate the CUPTI handler while subscribed");
    py::gil_scoped_release nogil;
    return backends::cupti::handler_cost_ns(iterations);
  }, py::arg("iterations"),
     "ns warmprof's handler adds to one CUPTI callback here (a repeat launch through the real callback "
     "entry; CUPTI's own dispatch not included); 0.0 when the backend is not compiled.");
  m.def("cupti_classify", &backends::cupti::classify, py::arg("domain"), py::arg("cbid"),
        "Cause id for a CUPTI (domain, callback id), or -1 when ignored.");
  m.def("cupti_callback_name", &backends::cupti::callback_name, py::arg("domain"), py::arg("cbid"));

  // CUDA events (driver API): GPU-side pass times. Failures raise RuntimeError with the reason.
  m.def("cuda_event_record", [](uintptr_t stream, int device) {
    std::string error;
    int64_t slot = backends::cuda_events::record(stream, device, &error);
    if (slot < 0) throw std::runtime_error(error);
    return slot;
  }, py::arg("stream") = 0, py::arg("device") = -1,
     "Record a pooled CUDA event on `stream` (a CUstream as an int) in that stream's context; its slot "
     "id. The default stream (0) is taken as `device`'s (or, with -1, the current context's).");
  m.def("cuda_event_elapsed_ms", [](int64_t start, int64_t end) {
    std::string error;
    double ms;
    {
      py::gil_scoped_release nogil;  // waits for the end event
      ms = backends::cuda_events::elapsed_ms(start, end, &error);
    }
    if (ms < 0) throw std::runtime_error(error);
    return ms;
  }, py::arg("start"), py::arg("end"), "GPU milliseconds between two recorded slots (waits for `end`).");
  m.def("cuda_events_release", &backends::cuda_events::release_all,
        "Return every CUDA event slot to the pool (the events are kept for reuse).");
  m.def("cuda_events_pool_size", &backends::cuda_events::pool_size, "CUDA events created so far.");

  // fd tap: the reader of the pipe that stands in for fd 1 (instruments/fd_capture.py). Native
  // so that a writer holding the GIL can never block on a full pipe; waits release the GIL.
  m.def("tap_start", [](int read_fd, int out_fd, std::vector<std::string> prefixes, py::bytes marker,
                        py::bytes keep) {
    if (read_fd < 0 || out_fd < 0) throw py::value_error("read_fd and out_fd must be open descriptors");
    std::string mk = marker;
    if (mk.empty()) throw py::value_error("marker must not be empty");
    return fd_tap::start(read_fd, out_fd, prefixes, mk, keep);
  }, py::arg("read_fd"), py::arg("out_fd"), py::arg("prefixes"), py::arg("marker"), py::arg("keep") = py::bytes(),
     "Read the pipe on a native thread (takes both descriptors): lines from a prefix to their newline "
     "that contain `keep` are stored, the rest goes to out_fd; '' on success, else the reason.");
  m.def("tap_wait_mark", [](long long count, double timeout_s) {
    py::gil_scoped_release nogil;
    return fd_tap::wait_mark(uint64_t(std::max(count, 0ll)), timeout_s);
  }, py::arg("count"), py::arg("timeout_s"), "Whether the reader removed `count` markers within the timeout.");
  m.def("tap_take", [] {
    fd_tap::Taken t;
    {
      py::gil_scoped_release nogil;
      t = fd_tap::take();
    }
    py::list lines;
    for (const std::string& l : t.lines) lines.append(py::bytes(l));
    py::dict d;
    d["lines"] = lines;
    d["segments"] = t.segments;
    d["write_error"] = t.write_error;
    d["dropped"] = t.dropped;
    d["failure"] = t.failure;
    return d;
  }, "Stored lines (taken out) with the markers seen before each, and the reader's state.");
  m.def("tap_stop", [](double grace_s, double busy_s) {
    fd_tap::Stopped s;
    {
      py::gil_scoped_release nogil;
      s = fd_tap::stop(grace_s, busy_s);
    }
    return py::make_tuple(s.state, s.fd);
  }, py::arg("grace_s"), py::arg("busy_s"),
     "After fd 1 is restored: ('ended', -1), ('handoff', read end: writers remain), ('busy', -1) or ('none', -1).");
  m.def("tap_forward", [](int read_fd, int out_fd) {
    if (read_fd < 0 || out_fd < 0) throw py::value_error("read_fd and out_fd must be open descriptors");
    return fd_tap::forward(read_fd, out_fd);
  }, py::arg("read_fd"), py::arg("out_fd"), "Forward read_fd to out_fd on a detached thread until it ends (takes both).");

  // C stdout tap (core/stdio_tap.h): `warmprof run`'s agent takes oneDNN's creation lines out of a
  // process's C stdout for its whole life, each a span of `cause` on the printing thread.
  m.def("stdio_tap_start", [](std::vector<std::string> prefixes, int cause) {
    if (cause < 0 || cause >= kNumCauses) throw py::value_error("cause out of range");
    return stdio_tap::start(prefixes, uint8_t(cause));
  }, py::arg("prefixes"), py::arg("cause"),
     "Swap C stdout for a line filter (glibc): lines from a prefix are taken, creation misses recorded; "
     "'' on success, else the reason.");
  m.def("stdio_tap_stop", [] {
    py::gil_scoped_release nogil;  // a thread printing through the tap may wait for the GIL
    stdio_tap::stop();
  }, "C stdout back (flushed); a no-op without a tap.");
  m.def("stdio_tap_stats", [] {
    stdio_tap::Stats s;
    {
      py::gil_scoped_release nogil;
      s = stdio_tap::stats();
    }
    py::dict d;
    d["on"] = s.on;
    d["lines"] = s.lines;
    d["misses"] = s.misses;
    d["hits"] = s.hits;
    d["miss_ms"] = s.miss_ms;
    d["passed"] = s.passed;
    d["write_error"] = s.write_error;
    return d;
  }, "The C stdout tap's counts: taken lines, creation misses (recorded) and hits, bytes let through.");
  m.def("stdio_tap_miss_ns", [] { return stdio_tap::miss_ns(); },
        "The creation misses' times so far in ns on this thread (oneDNN's own figures): a thread-local read, the GIL kept.");

  // Test-only entry points, kept apart so the module's own surface is what the package uses:
  // recorder capacity, the clock's statistics, synthetic CUPTI callbacks, the tap's splitter.
  py::module_ t = m.def_submodule("_testing", "Test-only entry points (tests/, bench/), not the package's API.");
  t.def("set_capacity", [](long long n) {
    check_positive(n, "capacity");
    if (static_cast<unsigned long long>(n) > recorder::kMaxCapacity)
      throw py::value_error("capacity must be at most " + std::to_string(recorder::kMaxCapacity) +
                            " records, got " + std::to_string(n));
    if (recorder::enabled()) throw py::value_error("cannot change the capacity while recording");
    recorder::set_capacity(size_t(n));
  }, py::arg("records_per_thread"));
  t.def("capacity", &recorder::capacity);
  t.def("median", [](std::vector<double> values) {
    for (double v : values)
      if (std::isnan(v)) throw py::value_error("values must not contain NaN");
    return clock::median(std::move(values));
  }, py::arg("values"), "The clock calibration's median.");
  t.def("percentile", [](std::vector<double> values, double q) {
    if (!(q >= 0.0 && q <= 1.0)) throw py::value_error("q must be within [0, 1]");
    for (double v : values)
      if (std::isnan(v)) throw py::value_error("values must not contain NaN");
    return clock::percentile(std::move(values), q);
  }, py::arg("values"), py::arg("q"));
  t.def("cupti_inject", &backends::cupti::inject, py::arg("domain"), py::arg("cbid"),
        py::arg("enter"), py::arg("ticks"), py::arg("value") = 0, py::arg("failed") = false,
        "Deliver a synthetic CUPTI callback through the real handler.");
  t.def("cupti_inject_load", [](uint32_t domain, uint32_t cbid, bool enter, uint64_t ticks, py::bytes image, int arch) {
    if (arch < -1) throw py::value_error("arch must be >= -1 (0: unknown, -1: the one the backend read at start)");
    if (!backends::cupti::compiled()) return;
    if (!backends::cupti::inject_load(domain, cbid, enter, ticks, std::string(image), arch))
      throw py::value_error("(domain, cbid) is not a module load or MODULE_LOADED");
  }, py::arg("domain"), py::arg("cbid"), py::arg("enter"), py::arg("ticks"), py::arg("image"), py::arg("arch") = 0,
     "A module load with its image (a path for file loads) as CUPTI's own callback data, decoded by the real path.");
  t.def("cupti_inject_unparamed", [](uint32_t domain, uint32_t cbid, bool enter, uint64_t ticks, std::string symbol) {
    if (!backends::cupti::compiled()) return;
    if (!backends::cupti::inject_unparamed(domain, cbid, enter, ticks, symbol))
      throw py::value_error("(domain, cbid) is not an API callback warmprof maps");
  }, py::arg("domain"), py::arg("cbid"), py::arg("enter"), py::arg("ticks"), py::arg("symbol") = "",
     "An API callback with no parameter struct (functionParams NULL) and `symbol` as its symbolName, through the "
     "real callback entry.");
  t.def("cupti_inject_query", [](uint32_t domain, uint32_t cbid, bool enter, uint64_t ticks, int64_t kernel) {
    if (!backends::cupti::compiled()) return;
    if (!backends::cupti::inject_query(domain, cbid, enter, ticks, kernel))
      throw py::value_error("(domain, cbid) is not a kernel query with a parameter struct");
  }, py::arg("domain"), py::arg("cbid"), py::arg("enter"), py::arg("ticks"), py::arg("kernel"),
     "A kernel query with its own parameter struct naming the function `kernel`, through the real callback entry.");
  t.def("cupti_call_now", [](uint32_t cbid, int64_t value, int pairs) {
    check_positive(pairs, "pairs");
    if (backends::cupti::compiled() && !backends::cupti::call_now(cbid, value, pairs))
      throw py::value_error("cbid must be cuLaunchKernel's or cuMemAlloc_v2's");
  }, py::arg("cbid"), py::arg("value"), py::arg("pairs") = 1,
     "Enter/exit pairs of cuLaunchKernel (function `value`) or cuMemAlloc_v2 (`value` bytes) through the "
     "real callback entry, the clock read inside.");
  t.def("cupti_launch_heap_bytes", [](int64_t first_kernel, int kernels, std::string name) {
    check_positive(kernels, "kernels");
    return backends::cupti::launch_heap_bytes(first_kernel, kernels, name);
  }, py::arg("first_kernel"), py::arg("kernels"), py::arg("name"),
     "Heap bytes taken by `kernels` first launches through the handler (0: the hot path allocates nothing).");
  t.def("cupti_enabled_callbacks", &backends::cupti::enabled_callbacks,
        "(domain, cbid) pairs the subscriber enables, from start()'s own enabling routine.");
  t.def("stdio_split", [](std::vector<std::string> chunks, std::vector<std::string> prefixes, std::vector<bool> cut) {
    std::string out;
    std::vector<std::string> lines;
    stdio_tap::split(chunks, cut, prefixes, &out, &lines);
    py::list pylines;
    for (const std::string& l : lines) pylines.append(py::bytes(l));
    return py::make_tuple(py::bytes(out), pylines);
  }, py::arg("chunks"), py::arg("prefixes"), py::arg("cut") = std::vector<bool>(),
     "The C stdout tap's filter over chunks (each one write; cut[i]: it may end mid-line): (passthrough, lines).");
  t.def("stdio_parse", [](const std::string& line) {
    stdio_tap::Creation c = stdio_tap::parse(line);
    return py::make_tuple(c.outcome, c.primitive, c.ms);
  }, py::arg("line"), "A oneDNN line as the C stdout tap reads it: (outcome, primitive, ms; -1 if unreadable).");
  t.def("tap_split", [](std::vector<std::string> chunks, std::vector<std::string> prefixes, py::bytes marker) {
    std::string mk = marker;
    if (mk.empty()) throw py::value_error("marker must not be empty");
    std::string out;
    std::vector<std::string> lines;
    std::vector<uint64_t> segments;
    fd_tap::split(chunks, prefixes, mk, &out, &lines, &segments);
    py::list pylines;
    for (const std::string& l : lines) pylines.append(py::bytes(l));
    return py::make_tuple(py::bytes(out), pylines, segments);
  }, py::arg("chunks"), py::arg("prefixes"), py::arg("marker"),
     "The reader's splitter over chunks (b'' = the pipe is empty here): (passthrough, lines, segments).");
}

"""warmprof's agent in each Python process of a `warmprof run` tree: what the process did from its start
to its end, on the one monotonic clock every process shares, written to WARMPROF_RUN_DIR when it ends.

Started by runs/boot/sitecustomize.py before the process's own code. Light on purpose while the process
runs: the standard library and warmprof._native only (the attribution code and the report load in the
`warmprof run` process, never here), so a process that never imports torch is not made to. Writing the
record at the end imports numpy (the recorder's drain gives numpy arrays), after the recorded end. What it records:
- the native recorder on for the process's life: each Python import a span `python_import:<module>`
  (runtime_init, measured: import_spans' finder, the one the trace's python_imports instrument puts on
  for its passes, light to import), each garbage collection a span `gc:gen<N>` (gc_spans), dynamo's
  compiles (jit_compile, measured, from dynamo's own start/end callbacks, once torch._dynamo.callback is in);
- a sampler thread (every WARMPROF_RUN_SAMPLE_MS, 20 ms by default): the process's fault and memory
  counters, and the main thread's CPU time, run-queue delay, voluntary switches, storage reads and major
  faults (its /proc/self/task files), the clocks the attribution engine reads off-CPU time and CPU
  contention from;
- logging records of the engines it knows (the `vllm` logger) and of `--ready-after log:REGEX`, taken by
  a logging handler (the records, never the process's output), once `logging` is imported;
- the watched model calls (WARMPROF_RUN_WATCH: classes whose forward is each a call, their constructor
  the build; an engine adapter adds its own, vLLM's model runner's execute_model): each call's start, end
  and input shapes, with the calling thread's clocks and the host counters at both ends.
warmprof's own start-up here is a span of its own (profiler_overhead), reported as warmprof's cost.
The record is written at exit (atexit, os._exit, SIGTERM while nobody else handles it); a process killed
with SIGKILL leaves none, and the report says so.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable

from .. import _native
from ..gc_spans import GcSpans
from ..import_spans import SOURCE as IMPORT_SOURCE, ImportFinder, time_metadata_scans
from . import cupti, onednn, ops
from .procfs import clk_tck, comm_name, mp_name, process_start_ns, process_title, read_file, shapes_key, thread_clocks

ENV_DIR = "WARMPROF_RUN_DIR"
ENV_WATCH = "WARMPROF_RUN_WATCH"  # comma-separated class names (Name or module:Name)
ENV_CALLS = "WARMPROF_RUN_CALLS"  # the run ends after this many watched calls in one process
ENV_READY = "WARMPROF_RUN_READY"  # "first-call" or "log:REGEX"
ENV_SAMPLE_MS = "WARMPROF_RUN_SAMPLE_MS"
ENV_ENGINES = "WARMPROF_RUN_ENGINES"  # "auto" (default) or "none"
ENV_PHASES = "WARMPROF_RUN_PHASES"  # ";"-separated module:function[=NAME] or module:Class.method[=NAME]
ENV_CUPTI = "WARMPROF_RUN_CUPTI"  # "auto" (default: subscribed at torch.cuda's lazy init) or "off"
CUDA_INIT = "cuda: init (context creation)"  # torch.cuda's lazy init, timed as a phase where torch has CUDA
CUDA_INIT_MIN_NS = 1_000_000  # a failed lazy init shorter than this is no phase
SAMPLE_MS = 20.0
CHECKPOINT_S = 10.0  # how often a running process writes its record so far
CHECKPOINT_SOON_S = 1.0  # and soon after a phase or a first watched call ends, at most this often
CHECKPOINT_LATE_S = 60.0  # a checkpoint put off while calls run is written after this long all the same
CHECKPOINT_END = "still running at its last checkpoint (killed, or never ended)"

# Cause ids (causes.py's table, which is light to import) and the counter names the engine reads.
from ..causes import JIT_COMPILE, PROFILER_OVERHEAD, STRUCTURE  # noqa: E402
from .cupti import CUPTI_CALLBACKS  # noqa: E402,F401  (re-exported: a unit test checks it against timeline.py's)

MAIN_THREAD_COUNTERS = {  # timeline.py's names for the pass thread's clocks (a unit test checks they agree)
    "cpu_ns": "host:thread_cpu_ns",
    "run_delay_ns": "host:run_delay_ns",
    "voluntary": "host:voluntary_switches",
    "storage_read_bytes": "host:storage_read_bytes",
    "major_faults": "host:thread_major_faults",
}
# The sampler's readings of the main thread, under names of their own (sample_host records the calling
# thread's clocks under the engine's names: the sampler's own); assemble.py renames them onto the main track.
SAMPLED_PREFIX = "host:sampled-main:"
ASLEEP_COUNTER = "host:sampled-main:asleep"  # samples that found the main thread asleep, cumulative
# timeline.py's process counters (minor and major faults, RSS, file-backed bytes, threads; a unit test checks)
HOST_COUNTER_NAMES = ("host:minor_faults", "host:major_faults", "host:rss_bytes", "host:file_bytes", "host:threads")
OWN_SPAN = ops.OWN_SPAN  # "warmprof:agent": warmprof's own time (the op watch's bookkeeping too)
TIMED = "_warmprof_run_timed"  # set on the functions the agent wrapped (a decorator's __wrapped__ is no sign)
COMPILE_SPAN = "dynamo"  # the source the trace's TorchCompile names its dynamo compiles by

_agent: "Agent | None" = None


class Agent:
    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.pid = os.getpid()
        self.ppid = os.getppid()  # at start: a process whose parent ended first is reparented later
        self.t_agent = _native.now_ns()
        self.t_start, self.start_resolution_ns = process_start_ns()
        self.forked_from: int | None = None
        self.main_tid = threading.get_native_id()
        self.sample_s = max(0.002, float(os.environ.get(ENV_SAMPLE_MS, SAMPLE_MS) or SAMPLE_MS) / 1000.0)
        self.watch = [w.strip() for w in os.environ.get(ENV_WATCH, "").split(",") if w.strip()]
        self.calls_limit = int(os.environ.get(ENV_CALLS, "0") or 0)
        ready = os.environ.get(ENV_READY, "")
        self.ready_regex = None
        if ready.startswith("log:"):
            import re

            self.ready_regex = re.compile(ready[4:])
        self.engines = os.environ.get(ENV_ENGINES, "auto") != "none"
        self.logs: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []
        self.builds: list[dict[str, Any]] = []
        self.compiles: list[dict[str, Any]] = []
        self.marks: list[dict[str, Any]] = []  # engine-told instants: ready, first request
        self.fn_phases: list[dict[str, Any]] = []  # an engine's functions timed as phases (engines.py)
        self.engine: str = ""
        self.cupti: dict[str, Any] | None = None  # set at torch.cuda's lazy init: {"on", "reason" | "subscribe_ms", ...}
        self.lock = threading.RLock()  # re-entrant: SIGTERM's dump may come while this thread holds it
        self.dumped = False
        self.stop = threading.Event()
        self.checkpoint_soon = threading.Event()  # a phase or a first call ended: the sampler writes the record soon
        self.keys_seen: set[tuple[str, str]] = set()
        self.sampler: threading.Thread | None = None
        self.finder: ImportFinder | None = None
        self.hooks: dict[str, list[Callable[[Any], None]]] = {}
        self.watched: set[int] = set()
        self.calls_done_written = False
        self.active_calls = 0  # watched calls running now (a checkpoint waits for none)
        self.at_start = self.process_counters()
        self.names = {k: _native.intern(SAMPLED_PREFIX + v) for k, v in MAIN_THREAD_COUNTERS.items()}
        self.asleep_id = _native.intern(ASLEEP_COUNTER)
        self.host_ids = [_native.intern(n) for n in HOST_COUNTER_NAMES]
        self.last_sampled: tuple[Any, ...] = ()
        self.last_sample_ns = 0
        self.own_nid = _native.intern(OWN_SPAN)
        self.compile_nid = _native.intern(COMPILE_SPAN)
        self.open_compiles: dict[int, int] = {}
        self.asleep_seen = 0

    # ---- start -----------------------------------------------------------------------------------
    def begin(self) -> None:
        _native.start(2)
        _native.begin(PROFILER_OVERHEAD, self.own_nid)
        try:
            self.onednn = onednn.start()  # before oneDNN reads its settings: its creation lines, each a span
            self.finder = ImportFinder(on_executed=self.imported)
            sys.meta_path.insert(0, self.finder)
            self.gc = GcSpans().install()  # each garbage collection a span, for the process's life
            self.on_import("logging", self._attach_logging)
            self.on_import("importlib.metadata", time_metadata_scans)
            self.on_import("torch._dynamo.callback", self._attach_dynamo)
            self.on_import("torch._dynamo.aot_compile", self._attach_aot_compile)
            if self.watch:
                self.on_import("torch.nn.modules.module", self._attach_module_watch)
            self.on_import("torch.cuda", self._attach_cuda)
            for spec in os.environ.get(ENV_PHASES, "").split(";"):
                got = parse_phase(spec)
                if got is not None:
                    module, cls, attr, name = got
                    self.on_import(module, self._user_phase(cls, attr, name))
            if self.engines:
                from . import engines

                engines.register(self)
            self.sample_main(force=True)  # the first sample: the main thread's clocks from here on
            self._start_sampler()
            self._exit_hooks()
        finally:
            _native.end(PROFILER_OVERHEAD, self.own_nid)
        self.t_ready = _native.now_ns()

    def on_import(self, name: str, hook: Callable[[Any], None]) -> None:
        """hook(module) once `name` has been imported (now, if it already was)."""
        if name in sys.modules:
            hook(sys.modules[name])
        else:
            self.hooks.setdefault(name, []).append(hook)

    def imported(self, fullname: str, module: Any) -> None:
        hooks = self.hooks.pop(fullname, None)
        if hooks:
            for hook in hooks:
                self.own(hook, module)

    def own(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) as warmprof's own time (a profiler_overhead span); never raises into the process."""
        _native.begin(PROFILER_OVERHEAD, self.own_nid)
        try:
            return fn(*args)
        except Exception as e:  # pragma: no cover - said, never raised into the user's code
            self.marks.append({"kind": "agent_error", "t_ns": _native.now_ns(), "text": f"{type(e).__name__}: {e}"})
            return None
        finally:
            _native.end(PROFILER_OVERHEAD, self.own_nid)

    def _start_sampler(self) -> None:
        self.stop.clear()
        t = threading.Thread(target=self._sample_loop, name="warmprof-run-sampler", daemon=True)
        t.start()
        self.sampler = t

    def _sample_loop(self) -> None:
        # Checkpoints (checkpoint_now says when), from this thread: a process its parent kills while it still
        # writes its record at the end (vLLM's EngineCore, on a loaded machine) keeps what it had done. Never
        # while calls run: one inside vLLM's steady requests made each wait (32-37 ms under warmprof, 14-19 bare)
        last = time.monotonic()
        calls_written = 0
        while not self.stop.wait(self.sample_s):
            self.sample_main()
            n = len(self.calls)
            idle_s = (0.0 if self.active_calls > 0 else
                      (_native.now_ns() - self.calls[-1]["end_ns"]) / 1e9 if n else None)
            if checkpoint_now(time.monotonic() - last, self.checkpoint_soon.is_set(), n != calls_written, idle_s):
                self.checkpoint_soon.clear()
                last = time.monotonic()
                calls_written = n
                self.checkpoint()

    def sample_main(self, force: bool = False) -> None:
        """The process's fault and memory counters and the main thread's clocks, read from its task files
        (recorded from this thread: assemble.py moves them onto the main thread's track). A sample where
        nothing moved (the main thread asleep, no fault) is not recorded, unless a second passed since the
        last one: the interval to the next recorded sample holds the whole wait, and an idle server does
        not fill its recorder. The sampler's own clocks are not recorded (sample_host would)."""
        if not _native.enabled():
            return
        clocks = thread_clocks(self.main_tid)
        if clocks is None:
            return
        minor, major = _native.faults()
        # A thread blocked for a long time switches off once, at the start: each sample that finds it
        # asleep is counted (its own series, added to the voluntary switches by assemble.py), so the
        # engine, which books a blocked stretch only where the thread switched off, sees a long wait whole.
        self.asleep_seen += clocks.pop("asleep", 0)
        now = _native.now_ns()
        moved = (clocks.get("cpu_ns"), clocks.get("run_delay_ns"), minor + major) != self.last_sampled
        if not (force or moved or now - self.last_sample_ns > 1_000_000_000):
            return
        self.last_sampled = (clocks.get("cpu_ns"), clocks.get("run_delay_ns"), minor + major)
        self.last_sample_ns = now
        t = _native.now_ticks()
        rec = _native.record_at
        rec(3, STRUCTURE, self.host_ids[0], minor, t)  # 3: a counter record
        rec(3, STRUCTURE, self.host_ids[1], major, t)
        rec(3, STRUCTURE, self.host_ids[2], _native.rss_bytes(), t)
        rec(3, STRUCTURE, self.host_ids[3], _native.file_bytes(), t)
        rec(3, STRUCTURE, self.host_ids[4], _native.thread_count(), t)
        rec(3, STRUCTURE, self.asleep_id, self.asleep_seen, t)
        for key, nid in self.names.items():
            if key in clocks:
                rec(3, STRUCTURE, nid, int(clocks[key]), t)

    def process_counters(self) -> dict[str, int]:
        try:
            stat = read_file("/proc/self/stat").rsplit(b")", 1)[1].split()
            minor, major = _native.faults()
            return {"minor_faults": minor, "major_faults": major, "utime_ticks": int(stat[11]),
                    "stime_ticks": int(stat[12]), "rss_bytes": _native.rss_bytes(), "clk_tck": clk_tck()}
        except (OSError, ValueError, IndexError):
            return {}

    # ---- logging ---------------------------------------------------------------------------------
    def _attach_logging(self, logging: Any) -> None:
        """Every log record, as it is made: a record factory wrapped around the one in place (an engine
        that configures logging later keeps it: vLLM wraps the factory it finds, and its dictConfig
        removes handlers, not factories). Records a logger's level drops are never made, so never seen."""
        agent = self
        made = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> Any:
            record = made(*args, **kwargs)
            try:
                agent.log_record(record)
            except Exception:
                pass
            return record

        factory.__wrapped__ = made  # type: ignore[attr-defined]
        logging.setLogRecordFactory(factory)

    def log_record(self, record: Any) -> None:
        name = getattr(record, "name", "")
        wanted = name.split(".", 1)[0] in ("vllm",) or self.ready_regex is not None
        if not wanted:
            return
        try:
            msg = record.getMessage()
        except Exception:
            return
        if self.ready_regex is not None and self.ready_regex.search(msg):
            self.marks.append({"kind": "ready", "t_ns": _native.now_ns(), "text": msg[:300], "by": "log"})
        if name.split(".", 1)[0] == "vllm":
            self.logs.append({"t_ns": _native.now_ns(), "logger": name, "level": record.levelname,
                              "msg": msg[:500], "tid": threading.get_native_id()})

    # ---- dynamo ----------------------------------------------------------------------------------
    def _attach_dynamo(self, module: Any) -> None:
        handler = getattr(module, "callback_handler", None)
        if handler is None:
            return
        agent = self

        def on_start(*args: Any) -> None:
            _native.begin(JIT_COMPILE, agent.compile_nid)
            agent.open_compiles[threading.get_ident()] = _native.now_ns()

        def on_end(*args: Any) -> None:
            t0 = agent.open_compiles.pop(threading.get_ident(), None)
            if t0 is None:
                return
            _native.end(JIT_COMPILE, agent.compile_nid)
            agent.compiles.append({"start_ns": t0, "end_ns": _native.now_ns(), "tid": threading.get_native_id()})

        handler.register_start_callback(on_start)
        handler.register_end_callback(on_end)

    def _attach_aot_compile(self, module: Any) -> None:
        """dynamo's ahead-of-time compile (torch.compile(...).aot_compile, which vLLM uses) runs without
        dynamo's compile callbacks: its function is bracketed as a compile span itself (the same span
        name, jit_compile, measured). A compile it nests (a callback inside) stays one span: innermost wins."""
        fn = getattr(module, "aot_compile_fullgraph", None)
        if fn is None or getattr(fn, TIMED, False):
            return
        agent = self

        def aot_compile_fullgraph(*args: Any, **kwargs: Any) -> Any:
            t0 = _native.now_ns()
            _native.begin(JIT_COMPILE, agent.compile_nid)
            try:
                return fn(*args, **kwargs)
            finally:
                _native.end(JIT_COMPILE, agent.compile_nid)
                agent.compiles.append({"start_ns": t0, "end_ns": _native.now_ns(), "tid": threading.get_native_id(),
                                       "aot": True})

        aot_compile_fullgraph.__wrapped__ = fn  # type: ignore[attr-defined]
        setattr(aot_compile_fullgraph, TIMED, True)
        module.aot_compile_fullgraph = aot_compile_fullgraph

    # ---- watched model calls ---------------------------------------------------------------------
    def _attach_module_watch(self, module: Any) -> None:
        """Every nn.Module subclass created from now on (in a library or in __main__) is checked against
        WARMPROF_RUN_WATCH as it is created (Module.__init_subclass__), and wrapped when it matches."""
        base = getattr(module, "Module", None)
        if base is None:
            return
        agent = self
        prior = base.__dict__.get("__init_subclass__")

        def __init_subclass__(cls: type, **kwargs: Any) -> None:
            if prior is not None:
                prior.__func__(cls, **kwargs)
            else:
                super(base, cls).__init_subclass__(**kwargs)  # type: ignore[misc]
            if agent.matches(cls):
                agent.own(agent.wrap_class, cls, cls.__name__)

        base.__init_subclass__ = classmethod(__init_subclass__)

    def matches(self, cls: type) -> bool:
        for w in self.watch:
            where, _, name = w.rpartition(":")
            if cls.__name__ == name and (not where or getattr(cls, "__module__", "") == where):
                return True
        return False

    def wrap_class(self, cls: type, label: str) -> None:
        """cls's constructor a build, its forward (or __call__) each a watched call."""
        init = cls.__dict__.get("__init__")
        if init is not None:
            setattr(cls, "__init__", self._timed_build(init, label))
        method = "forward" if "forward" in cls.__dict__ else ("__call__" if "__call__" in cls.__dict__ else None)
        if method is not None:
            setattr(cls, method, self.timed_call(cls.__dict__[method], label))

    def _timed_build(self, init: Callable[..., Any], label: str) -> Callable[..., Any]:
        agent = self
        depth = threading.local()

        def __init__(obj: Any, *args: Any, **kwargs: Any) -> None:
            outer = not getattr(depth, "n", 0)
            depth.n = getattr(depth, "n", 0) + 1
            t0 = _native.now_ns()
            try:
                init(obj, *args, **kwargs)
            finally:
                depth.n -= 1
                if outer:
                    agent.builds.append({"label": label, "start_ns": t0, "end_ns": _native.now_ns(),
                                         "tid": threading.get_native_id()})

        __init__.__wrapped__ = init  # type: ignore[attr-defined]
        __init__.__doc__ = init.__doc__
        return __init__

    def timed_call(self, fn: Callable[..., Any], label: str, key: Callable[..., str] | None = None) -> Callable[..., Any]:
        """fn wrapped: each call's start, end, key (its tensors' shapes, or key(*args)) and the calling
        thread's clocks at both ends; nested calls of a watched function are part of the outer one. Inside
        a torch.compile trace the wrapper is only the call (dynamo traces what a forward does: warmprof's
        clock reads would break its graph, or its fullgraph compile)."""
        agent = self
        depth = threading.local()
        torch = sys.modules.get("torch")
        compiler = getattr(torch, "compiler", None)
        is_compiling: Callable[[], bool] = getattr(compiler, "is_compiling", None) or (lambda: False)

        def watched(*args: Any, **kwargs: Any) -> Any:
            if is_compiling() or getattr(depth, "n", False):
                return fn(*args, **kwargs)
            depth.n = 1
            before = agent.own(agent.call_clocks)  # the clock reads are warmprof's own time, said as such
            t0 = _native.now_ns()
            agent.active_calls += 1  # a checkpoint waits while it is above 0 (never below: a fork resets it)
            try:
                return fn(*args, **kwargs)
            finally:
                after = agent.own(agent.call_clocks)  # inside the call's window: its last counter step is the call's
                t1 = _native.now_ns()
                depth.n = 0
                agent.own(agent.call_done, label, t0, t1, args, kwargs, key, before, after)
                agent.active_calls = max(0, agent.active_calls - 1)  # after its record: its end is seen

        watched.__wrapped__ = fn  # type: ignore[attr-defined]
        setattr(watched, TIMED, True)
        watched.__name__ = getattr(fn, "__name__", "watched")
        watched.__doc__ = getattr(fn, "__doc__", None)
        return watched

    def _user_phase(self, cls: str | None, attr: str, name: str) -> Callable[[Any], None]:
        def hook(module: Any) -> None:
            owner = getattr(module, cls, None) if cls else module
            if owner is not None:
                self.phase_fn(owner, attr, name, source="--phase")
        return hook

    # ---- CUDA: torch.cuda's lazy init as a phase, CUPTI subscribed at its start -------------------------
    def _attach_cuda(self, module: Any) -> None:
        """torch.cuda imported: its lazy init (the process's CUDA context, created on its first CUDA use) is timed
        as a phase, and CUPTI is subscribed at that init's start, before the context exists, so the context's
        creation, lazy module loads (a cubin's runtime_init, a PTX's jit_compile), cuMemAlloc (allocator_growth),
        stream capture and graph instantiation (graph_capture) are spans with causes from then on, written by
        the native handler the trace's CUPTI instrument uses. A process that never initialises CUDA (vLLM's
        main process queries the device without a context) never loads CUPTI."""
        compiled = getattr(module, "_is_compiled", None)
        if callable(compiled) and not compiled():
            # a CPU build: its lazy init only raises, and code that probes CUDA inside a try (vLLM's CPU worker,
            # inside its warm-up) would cut phases in two around a phase of microseconds
            return
        initialized = getattr(module, "is_initialized", None)
        up = (lambda: bool(initialized())) if callable(initialized) else (lambda: False)
        tried = [False]

        def skip() -> bool:  # once CUDA is up, or after a first attempt that failed: a call with nothing to do
            return up() or tried[0]

        def keep(ns: int) -> bool:
            # a phase when it brought CUDA up, or when a first failed attempt took a real time (a CUDA build with
            # no driver: each probe raises within microseconds, and a phase of microseconds would cut the one
            # around it in two)
            tried[0] = True
            return up() or ns >= CUDA_INIT_MIN_NS

        self.phase_fn(module, "_lazy_init", CUDA_INIT, around=self._cuda_starting, skip=skip, keep=keep, source="cuda")

    def _cuda_starting(self) -> Callable[[], str]:
        state = self.cupti = self.cupti if self.cupti is not None else self._subscribe_cupti()
        return lambda: "" if state.get("on") else f"CUPTI off: {state.get('reason', '')}"

    def _subscribe_cupti(self) -> dict[str, Any]:
        return cupti.subscribe(os.environ.get(ENV_CUPTI, "auto") != "off")

    def _cupti_end(self) -> None:
        if self.cupti is not None:
            cupti.end(self.cupti)

    def phase_fn(self, owner: Any, attr: str, name: str, around: Callable[[], Callable[[], str]] | None = None,
                 skip: Callable[[], bool] | None = None, keep: Callable[[int], bool] | None = None,
                 source: str = "vllm") -> None:
        """owner.attr (a class's method, inherited or not, or a module's function) timed as a phase `name`
        each time it runs (calls inside one of its own are part of it). around(): called at its start,
        returns what is called at its end for the phase's detail (a cache outcome). skip(): true when a call
        has nothing to do and is not a phase (torch.cuda's lazy init once CUDA is up); keep(ns): whether a call
        that ran, taking ns, is kept as a phase."""
        fn = getattr(owner, attr, None)
        if fn is None or getattr(fn, TIMED, False):
            return
        agent = self
        depth = threading.local()

        def timed(*args: Any, **kwargs: Any) -> Any:
            if getattr(depth, "n", 0) or (skip is not None and skip()):
                return fn(*args, **kwargs)
            depth.n = 1
            done = agent.own(around) if around is not None else None
            t0 = _native.now_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                t1 = _native.now_ns()
                depth.n = 0
                if keep is None or agent.own(keep, t1 - t0):  # (never a return here: it would swallow the call's own)
                    entry = {"name": name, "start_ns": t0, "end_ns": t1, "tid": threading.get_native_id(),
                             "source": source}
                    if done is not None:
                        detail = agent.own(done)
                        if detail:
                            entry["detail"] = detail
                    agent.fn_phases.append(entry)
                    agent.checkpoint_soon.set()

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        setattr(timed, TIMED, True)
        timed.__name__ = getattr(fn, "__name__", attr)
        timed.__doc__ = getattr(fn, "__doc__", None)
        setattr(owner, attr, timed)

    def call_clocks(self) -> dict[str, int] | None:
        if not _native.enabled():
            return None
        _native.sample_host()  # the process's counters and this thread's clocks, on this thread's track
        return _native.thread_times()

    def call_done(self, label: str, t0: int, t1: int, args: tuple, kwargs: dict, key: Any,
                  before: dict[str, int] | None, after: dict[str, int] | None) -> None:
        k = key(*args, **kwargs) if key is not None else shapes_key(args, kwargs)
        entry: dict[str, Any] = {"label": label, "key": k, "start_ns": t0, "end_ns": t1,
                                 "tid": threading.get_native_id()}
        if before and after:
            entry["cpu_ns"] = after.get("cpu_ns", 0) - before.get("cpu_ns", 0)
            entry["run_delay_ns"] = after.get("run_delay_ns", 0) - before.get("run_delay_ns", 0)
        # no lock: a list's append is atomic, and the lock is held by a checkpoint while it writes (a call must
        # not wait for warmprof's record)
        self.calls.append(entry)
        n = len(self.calls)
        if (label, str(k)) not in self.keys_seen:  # a first call: the record soon (a steady call waits for the 10 s
            self.keys_seen.add((label, str(k)))  # one: a checkpoint takes the GIL while it copies the recording)
            self.checkpoint_soon.set()
        if self.calls_limit and n >= self.calls_limit and not self.calls_done_written:
            self.calls_done_written = True
            try:
                with open(os.path.join(self.out_dir, f"calls-{self.pid}.done"), "w") as f:
                    f.write(str(n))
            except OSError:
                pass

    # ---- the end ---------------------------------------------------------------------------------
    def _exit_hooks(self) -> None:
        import atexit
        import signal

        atexit.register(self.dump, "exit")
        real_exit = os._exit
        agent = self

        def _exit(status: int) -> None:  # multiprocessing's children end with os._exit
            try:
                agent.dump(f"os._exit({status})")
            finally:
                real_exit(status)

        _exit.__wrapped__ = real_exit  # type: ignore[attr-defined]
        os._exit = _exit  # type: ignore[assignment]
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL and threading.current_thread() is threading.main_thread():
                def on_term(signum: int, frame: Any) -> None:
                    agent.dump("SIGTERM")
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    os.kill(os.getpid(), signal.SIGTERM)

                signal.signal(signal.SIGTERM, on_term)
        except (ValueError, OSError):
            pass
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        """A forked child is a process of its own: a fresh recording, from the fork on."""
        parent = self.pid
        try:
            _native.stop()
            _native.release()
        except Exception:
            pass
        self.pid = os.getpid()
        self.ppid = parent
        self.main_tid = threading.get_native_id()
        self.t_agent = self.t_ready = _native.now_ns()
        self.t_start, self.start_resolution_ns = self.t_agent, 0.0
        self.forked_from = parent
        self.logs, self.calls, self.builds, self.compiles, self.marks, self.fn_phases = [], [], [], [], [], []
        if self.cupti is not None and self.cupti.get("on"):  # the parent's subscription is not this process's
            self.cupti = {"on": False, "reason": "a child forked after CUDA started (CUDA does not run in it)"}
        self.lock = threading.RLock()
        self.stop = threading.Event()  # the parent's may have been held by another thread at the fork
        self.checkpoint_soon = threading.Event()
        self.keys_seen = set()
        self.dumped = False
        self.calls_done_written = False
        self.active_calls = 0
        self.open_compiles = {}
        self.at_start = self.process_counters()
        self.last_sampled, self.last_sample_ns, self.asleep_seen = (), 0, 0
        try:
            _native.start(0)  # no buffers pre-faulted: a fork before an exec (subprocess) must stay cheap
            self._start_sampler()
        except Exception:
            pass

    def dump(self, reason: str) -> None:
        """Write this process's record (once, at its end): its timeline (.npz) and what it knows (.json)."""
        with self.lock:
            if self.dumped or os.getpid() != self.pid:
                return
            self.dumped = True
        self.stop.set()
        try:
            self.sample_main(force=True)
            self._cupti_end()
            _native.stop()
            self._write(reason, _native.now_ns())
        except Exception as e:  # the process ends anyway; say why its record is missing
            try:
                sys.stderr.write(f"warmprof run: pid {self.pid}: record not written: {type(e).__name__}: {e}\n")
            except Exception:
                pass
        finally:
            try:
                _native.release()
            except Exception:
                pass

    def checkpoint(self) -> None:
        """The record so far, written while the process runs (a copy of the recorder's buffers), so a
        process killed later (vLLM kills its EngineCore when it is slow to end) still has one; the end's
        record replaces it. Only once numpy is loaded here (never imported for it)."""
        if "numpy" not in sys.modules or not _native.enabled():
            return
        with self.lock:
            if self.dumped or os.getpid() != self.pid:
                return
            try:
                self._write(CHECKPOINT_END, _native.now_ns())
            except Exception:
                pass

    def _write(self, reason: str, t_end: int) -> None:
        d = _native.drain()
        import json

        import numpy as np

        base = os.path.join(self.out_dir, f"proc-{self.pid}")
        np.savez(base + ".tmp.npz", ts_ns=d["ts_ns"], kind=d["kind"], cause=d["cause"], name=d["name"],
                 value=d["value"], thread=d["thread"], own_fault_ns=d["own_fault_ns"])
        meta = {
            "pid": self.pid, "ppid": self.ppid, "forked_from": self.forked_from,
            "argv": list(getattr(sys, "orig_argv", sys.argv)), "title": process_title(), "comm": comm_name(),
            "mp_name": mp_name(), "executable": sys.executable, "main_tid": self.main_tid,
            "t_start_ns": self.t_start, "start_resolution_ns": self.start_resolution_ns,
            "t_agent_ns": self.t_agent, "t_ready_ns": getattr(self, "t_ready", self.t_agent), "t_end_ns": t_end,
            "end": reason, "at_start": self.at_start, "at_end": self.process_counters(),
            "names": list(d["names"]), "os_tids": list(d["os_tids"]), "dropped": int(d["dropped"]),
            "logs": list(self.logs), "calls": list(self.calls), "builds": list(self.builds),
            "compiles": list(self.compiles), "marks": list(self.marks), "fn_phases": list(self.fn_phases),
            "engine": self.engine, "sample_ms": self.sample_s * 1000.0, "cupti": self.cupti,
            "onednn": onednn.stats(getattr(self, "onednn", {})), "ops": ops.records(),
        }
        with open(base + ".json.tmp", "w") as f:
            json.dump(meta, f)
        os.replace(base + ".tmp.npz", base + ".npz")  # the timeline first: a .json always has its .npz
        os.replace(base + ".json.tmp", base + ".json")


def checkpoint_now(since_s: float, flagged: bool, new_calls: bool, idle_s: float | None) -> bool:
    """Whether the sampler writes a checkpoint now: since_s since the last one; flagged: a phase or a
    first call ended since; new_calls: calls recorded since; idle_s: since the last call ended (0 while
    one runs; None: no call yet). Due every CHECKPOINT_S, or after CHECKPOINT_SOON_S when flagged or with new calls;
    put off while calls run (one ended in the last CHECKPOINT_SOON_S) up to CHECKPOINT_LATE_S."""
    due = since_s > CHECKPOINT_S or ((flagged or new_calls) and since_s > CHECKPOINT_SOON_S)
    quiet = idle_s is None or idle_s > CHECKPOINT_SOON_S
    return due and (quiet or since_s > CHECKPOINT_LATE_S)


def parse_phase(text: str) -> tuple[str, str | None, str, str] | None:
    """--phase's value, "module:function" or "module:Class.method", optionally "=NAME": (module, class or
    None, attribute, phase name), or None when it is not one."""
    spec, _, name = text.strip().partition("=")
    module, colon, qual = spec.partition(":")
    parts = qual.split(".")
    ok = all(p.isidentifier() for p in module.split(".")) and colon and 1 <= len(parts) <= 2 and all(
        p.isidentifier() for p in parts)
    if not ok:
        return None
    cls, attr = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
    return module, cls, attr, name.strip() or qual


def start() -> None:
    """Start the agent in this process (once; sitecustomize calls it)."""
    global _agent
    if _agent is not None or _native.enabled():
        return
    out = os.environ.get(ENV_DIR, "")
    if not out or not os.path.isdir(out):
        return
    a = Agent(out)
    a.begin()
    _agent = a


def current() -> "Agent | None":
    return _agent

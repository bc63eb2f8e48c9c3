"""warmprof.watch: which cause made a call slow, while serving.

`watch(model)` returns a Watcher, called in the model's place. Its call is native
(csrc/watch_type.cpp): a key (each argument's shape and dtype, or `key(*args, **kwargs)`), two clock
reads, and the key's latency sketch under a mutex: about 0.3 us a call here made back to back
(bench/watch_overhead.py; perf_counter and a prometheus_client observe cost 0.8 us). The thread's
counters (getrusage, a system call) are read around a sample of its calls: back to back, one read per
200 us; calls made apart or long ones read at their start. A call known before it runs to be kept (after
an idle gap, at a new key) reads them at both ends, with the thread's CPU clock and run-queue delay, so
its time off the CPU (a wait) is exact; an outlier found after it ran has them from the thread's last
read, at most 200 us before it (its event says how far). A call comes back to Python only when it is kept
as an event: the first at its key, an outlier against its key's median (`factor` x and at least
`floor_ms` over, once the key has `min_calls` calls), the first after an idle gap (`idle_s`), or one
during which dynamo compiled. events.py gives each event its causes, with evidence.

CUPTI only when asked (`cupti=True`): warmprof's CUPTI handler then sees every CUDA driver and
runtime call the process makes (its own cost per call, not watch's), and a call on whose thread a
cudaMalloc/cuMemAlloc, a module load, or a stream capture closed is kept, with those calls' own
measured time. Where CUPTI cannot subscribe (no driver, another profiler holds it), watch raises
BackendError with the reason and leaves nothing subscribed. CUPTI has one subscriber per process and
torch.profiler's Kineto (torch 2.11) subscribes on its first use and keeps it: once a profile has run,
watch(cupti=True) cannot subscribe; and a watcher holding CUPTI when torch.profiler is first used leaves
torch.profiler CPU-only for the life of the process.

Memory is bounded: at most `max_keys` keys (each a 512-byte sketch; calls at further keys are
counted, not kept) and the last `max_events` events (older ones counted). Several threads may call
one Watcher: the key table is locked, the counters are per thread.
"""

from __future__ import annotations

import collections
import functools
import inspect
import os
import sys
import threading
import time
import types
import weakref
from typing import Any, Callable

from ... import _native
from ...errors import InputError
from . import events as _events
from . import export, sources

MAX_KEYS = 10000
MAX_EVENTS = 2000
# The most each bound takes (a sketch is 512 bytes: 10 million keys are 5 GB of them at most).
MAX_KEYS_LIMIT = 10_000_000
MAX_EVENTS_LIMIT = 10_000_000
MIN_CALLS_LIMIT = 10**12  # "never an outlier" is a use: any count a process can reach

# A call that returned a coroutine or generator raises this (the hot path sees it only after the call).
_native.watch_set_input_error(InputError)

# Open watchers, for the at-fork handler: a fork copies the locks as they were, and a lock another
# thread held (inside an event's slow path) would be held for ever in the child, whose first new key
# then blocks.
_open: "weakref.WeakSet[Watcher]" = weakref.WeakSet()


def _reinit(lock: Any) -> Any:
    reinit = getattr(lock, "_at_fork_reinit", None)  # CPython's own at-fork reset of a lock (3.9+)
    if reinit is not None:
        reinit()
        return lock
    return type(lock)()


def _after_fork_in_child() -> None:
    """In a forked child: every open watcher's locks free and no other thread's call in flight (only the
    forking thread is left)."""
    for w in list(_open):
        w._lock = _reinit(w._lock)
        w._after_fork_in_child()
    sources._lock = _reinit(sources._lock)
    export._taken_lock = _reinit(export._taken_lock)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Watcher(_native.WatchCore):
    """A watched callable: call it as the model. summary(), events(), report(), close()."""

    def __init__(self, fn: Callable, *, key: Callable | None = None, clock_source: Callable | None = None,
                 max_keys: int = MAX_KEYS, max_events: int = MAX_EVENTS, min_calls: int = 8, factor: float = 3.0,
                 floor_ms: float = 0.05, idle_s: float = 1.0, label: str | None = None,
                 on_event: Callable[[dict], Any] | None = None, otel: bool | None = None,
                 cupti: bool = False) -> None:
        _check(fn, key, clock_source, max_keys, max_events, min_calls, factor, floor_ms, idle_s, on_event)
        if not isinstance(cupti, bool):
            raise InputError(f"cupti must be True or False, not {cupti!r}")
        super().__init__(fn, key, clock_source, int(max_keys), int(min_calls), float(factor), int(floor_ms * 1e6),
                         int(idle_s * 1e9))  # raises on a second __init__, before anything below is touched
        self._cupti = False
        self._tapped = False
        self.closed = True  # until set up: __del__ of a half-made Watcher releases nothing it lacks
        self.fn = fn
        self.label = label or getattr(fn, "__qualname__", None) or type(fn).__name__
        self.idle_s = float(idle_s)
        self.rule = {"min_calls": int(min_calls), "factor": float(factor), "floor_ms": float(floor_ms),
                     "idle_s": float(idle_s), "max_keys": int(max_keys), "max_events": int(max_events),
                     "cupti": bool(cupti)}
        self._lock = threading.RLock()  # re-entrant: a finalizer run inside an event may call the watcher
        self._events: collections.deque[dict] = collections.deque(maxlen=int(max_events))
        self._kept = 0
        self._names: dict[int, str] = {}
        self._taken: set[str] = set()
        self._user_on_event = on_event
        # OpenTelemetry span events: on when the package is there, unless otel=False
        self._otel = export.otel_available() if otel is None else bool(otel) and export.otel_available()
        self._cause_counts: dict[tuple[str, str], tuple[int, float]] = {}  # (key, cause) -> (events, ms), all events
        self._outlier_counts: dict[str, int] = {}
        self._unattributed_ms: dict[str, float] = {}  # key -> the outliers' excess their causes left, summed
        self._started_ns = sources.clock_ns()  # the calls' clock: an event's t_s is its start less this
        self._started_wall = time.time()
        self._costs = _events.CallCosts()
        self._reserved = sources.cuda_reserved()
        if cupti:
            sources.acquire_cupti()  # raises BackendError with the reason; nothing held then
            self._cupti = True
            self._set_cupti(_events.cupti_cause_mask())
        self.closed = False
        self._tapped = sources.acquire_compile_tap()
        self._dynamo = sources.DynamoState() if self._tapped else None
        self._set_on_event(self._on_event)
        _open.add(self)
        functools.update_wrapper(self, fn, updated=())

    # -- the slow path: one kept call -----------------------------------------------------------
    def _on_event(self, call: Any) -> None:
        """The slow path: one kept call (a _native.WatchCall) becomes an event."""
        key_hash, key_obj, args, kwargs = call.key_hash, call.key, call.args, call.kwargs
        with self._lock:
            if not self._tapped and not self.closed and "torch._dynamo" in sys.modules:
                # dynamo came in after watch() began (a model compiled on its first call): tapped from now
                self._tapped = sources.acquire_compile_tap()
                self._dynamo = sources.DynamoState() if self._tapped else None
            name = self._names.get(key_hash)
            if name is None:
                most = _events.KEY_NAME_CHARS
                name = repr(key_obj)[:most] if key_obj is not None else _events.describe(args, kwargs)
                # every exporter can write it: a lone surrogate (a JSON body's "\udcff" key) as \udcff
                # (one made every later Prometheus scrape of the process fail)
                name = name.encode("utf-8", "backslashreplace").decode("utf-8")
                if len(name) > most:
                    name = name[:most - 1] + "…"
                if name in self._taken:  # two keys that read alike (a key function's -1 and -2 hash alike)
                    name = f"{name} #{len(self._taken)}"
                self._taken.add(name)
                if len(self._names) < self.rule["max_keys"] * 2:  # names of unadmitted keys' compiles too
                    self._names[key_hash] = name
            reserved = (self._reserved, sources.cuda_reserved())
            self._reserved = reserved[1] if reserved[1] is not None else self._reserved
            self._kept += 1
            event = _events.build(call, index=self._kept - 1, key=name, start_ns=self._started_ns,
                                  idle_ns=int(self.idle_s * 1e9), dynamo=self._dynamo, costs=self._costs,
                                  reserved=reserved, side=sources.take_side_work() if call.compiles else [])
            self._events.append(event)
            for c in event["causes"]:
                n, ms = self._cause_counts.get((name, c["cause"]), (0, 0.0))
                self._cause_counts[(name, c["cause"])] = (n + 1, ms + c["ms"])
            if event["outlier"]:
                self._outlier_counts[name] = self._outlier_counts.get(name, 0) + 1
            if event["unattributed_ms"] is not None and event["unattributed_ms"] > 0:
                self._unattributed_ms[name] = self._unattributed_ms.get(name, 0.0) + event["unattributed_ms"]
        if self._otel:
            export.otel_event(event)
        if self._user_on_event is not None:
            self._user_on_event(event)

    def prometheus(self, registry: Any = None) -> Any:
        """Register this watcher's metrics with a prometheus_client registry (the default one when
        None): calls, events, outliers and causes by key, and a latency histogram (export.py)."""
        return export.prometheus_metrics(self, registry)

    # -- what it saw ------------------------------------------------------------------------------
    def events(self) -> list[dict[str, Any]]:
        """The kept events, oldest first (the last max_events of them)."""
        with self._lock:
            return [dict(e) for e in self._events]

    def stats(self) -> dict[str, Any]:
        """Calls, errors, and per key: calls, first call, median / p90 / p99 (from the sketch), max."""
        raw = self._core_stats() or {"keys": [], "calls": 0, "errors": 0, "overflow_calls": 0}
        mids = _native.watch_sketch_midpoints()
        keys = []
        for key, order, calls, first_ns, max_ns, total_ns, kept, buckets in sorted(raw["keys"], key=lambda r: r[1]):
            # a sketch bucket's midpoint can lie above the largest call in it: no quantile above the max
            q = {f"p{int(f * 100)}_ms": min(_quantile(buckets, mids, f), max_ns) / 1e6 for f in (0.5, 0.9, 0.99)}
            keys.append({"key": self._names.get(key, f"#{key & 0xffffffff:08x}"), "calls": calls,
                         "first_ms": first_ns / 1e6, **q, "max_ms": max_ns / 1e6, "mean_ms": total_ns / calls / 1e6 if calls else 0.0, "events": kept})
        with self._lock:
            dropped = self._kept - len(self._events)
        return {"calls": raw["calls"], "errors": raw["errors"], "overflow_calls": raw["overflow_calls"],
                "events": self._kept, "events_dropped": dropped, "keys": keys}

    def report(self) -> Any:
        from .report_build import build_report

        return build_report(self)

    def summary(self) -> str:
        return str(self.report())

    # -- life -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Calls go straight to the model from now on, unrecorded; dynamo's callbacks are released
        once no Watcher needs them. What was recorded stays readable."""
        if self.closed:
            return
        self._set_closed(True)
        self.closed = True
        if self._tapped:
            sources.release_compile_tap()
            self._tapped = False
        if self._cupti:
            self._set_cupti(0)
            self._cupti = False
            sources.release_cupti()

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        """`@warmprof.watch` on a method: bound to the instance, as the plain method would be (it lost
        `self`). One Watcher serves every instance; the instance is an argument like any other (the
        default key reads its type, never its identity)."""
        return self if obj is None else types.MethodType(self, obj)

    def __enter__(self) -> "Watcher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<warmprof.Watcher of {self.label} ({state})>"


def _quantile(buckets: list[int], mids: list[float], q: float) -> float:
    total = sum(buckets)
    if not total:
        return 0.0
    want, seen = max(1.0, q * total), 0
    for count, mid in zip(buckets, mids):
        seen += count
        if seen >= want:
            return mid
    return mids[-1]


def _check(fn: Any, key: Any, clock_source: Any, max_keys: Any, max_events: Any, min_calls: Any, factor: Any,
           floor_ms: Any, idle_s: Any, on_event: Any) -> None:
    if not callable(fn):
        raise InputError(f"watch() takes a model or function to call, not {type(fn).__name__}")
    # A call to one of these only makes the coroutine or generator: its work runs later, where watch
    # does not see it, so its timing would be its creation's. Refused with what to do instead.
    try:
        target = getattr(fn, "forward", fn) if not inspect.isfunction(fn) and not inspect.ismethod(fn) else fn
    except Exception:  # an attribute read that raises (a proxy): nothing more to look at
        target = fn
    for test, what in ((inspect.iscoroutinefunction, "an async function"),
                       (inspect.isasyncgenfunction, "an async generator function"),
                       (inspect.isgeneratorfunction, "a generator function")):
        if test(fn) or (target is not fn and test(target)):
            raise InputError(f"watch() times a call while it runs, and {getattr(fn, '__name__', type(fn).__name__)!r} is {what}: a call "
                             "only makes its coroutine or generator, whose work runs later. Watch the synchronous "
                             "function it awaits or iterates (the model's forward), or the whole request in a plain function")
    for name, v in (("key", key), ("clock_source", clock_source), ("on_event", on_event)):
        if v is not None and not callable(v):
            raise InputError(f"{name} must be callable (or None), not {type(v).__name__}")
    # Upper bounds too: the native side holds these in 64-bit fields (2**64 + 3 keys wrapped to 3), and
    # a bound past what memory or a clock can hold is a typo, not a setting.
    low: float  # the two loops below share these names: int bounds, then float ones
    high: float
    for name, v, low, high in (("max_keys", max_keys, 1, MAX_KEYS_LIMIT), ("max_events", max_events, 1, MAX_EVENTS_LIMIT),
                               ("min_calls", min_calls, 1, MIN_CALLS_LIMIT)):
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            raise InputError(f"{name} must be a whole number from {low} to {high:,}, got {v!r}")
    if isinstance(idle_s, (int, float)) and not isinstance(idle_s, bool) and idle_s <= 0:
        raise InputError(f"idle_s must be above 0 (a gap that long before a call makes it an event), got {idle_s!r}")
    for name, v, low, high in (("factor", factor, 1.0, 1e6), ("floor_ms", floor_ms, 0.0, 1e9), ("idle_s", idle_s, 0.0, 1e6)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or not low <= v <= high:
            raise InputError(f"{name} must be a number from {low:g} to {high:g}, got {v!r}")
    if factor <= 1.0:
        raise InputError(f"factor must be above 1 (an outlier is factor x the key's median), got {factor!r}")


def watch(model: Callable | None = None, **options: Any) -> Any:
    """Watch a model or function while it serves: `w = watch(model)`, then call `w(x)` in its place.
    With no model, a decorator: `@watch(key=...)`. Options: see Watcher."""
    if model is None:
        return lambda fn: Watcher(fn, **options)
    return Watcher(model, **options)


__all__ = ["MAX_EVENTS", "MAX_KEYS", "Watcher", "watch"]

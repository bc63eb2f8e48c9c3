"""torch.compile: dynamo's compile start/end callbacks bracket each compile (measured), and
torch's own compile timers split it into phases (dynamo tracing, AOT autograd, inductor lowering,
code generation + C++/Triton compile, autotune).

The phase durations come from torch's timers (`compilation_time_metrics`); their order inside the
compile span is torch's pipeline order, laid end to end from the compile's start (the durations
are measured, the placement is not observed). Runtime triggers are mapped by kind: CUDA-graph
recording -> graph_capture, Triton autotuning -> algorithm_selection.

Per compile it also keeps what was compiled from scratch and what was loaded from inductor's / AOT
autograd's cache (dynamo's counters, cache_outcome) and dynamo's recompile reason (its compilation
metrics, recompile_reasons). CompileEvents is the callback bookkeeping without the recorder, shared
with warmup/assert_warm (serving/warmup.py); compile_counters/counters_since/cache_outcome are what
a caller reads around any stretch of work (watch).
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any, Mapping, cast

from .. import _native
from ..attribution.compiles import cause_of, is_compile, trigger_source
from ..causes import id_of
from ..system.torch_compat import (
    callback_fields,
    compilation_metrics,
    compile_time_metrics,
    dynamo_callbacks,
    recompile_reason,
    remove_callback,
)
from ..system.torch_compat import registered_callbacks as compat_registered_callbacks
from ..timeline import (
    ALGORITHM_SELECTION,
    JIT_COMPILE,
    begin,
    end,
    name_id,
    now_ns,
    record_span_ns,
    sample_host,
)
from .base import Instrument

# Inclusive torch timers, outermost first (key names as in torch 2.9-2.13).
USER_COMPILER = ("OutputGraph.call_user_compiler",)
INDUCTOR = ("compile_fx_inner",)
CODEGEN = ("GraphLowering.compile_to_module", "GraphLowering.compile_to_fn")
WHOLE = ("_compile.compile_inner",)


def compile_timer_marks() -> dict[str, int] | None:
    """Where torch's own whole-compile timers stand now (each WHOLE key's count of calls), for
    compile_timer_ms_since; None where dynamo is not imported (nothing compiled) or has no timers. Reads
    what torch keeps anyway: no callback, no hook, so the clean control can read it at no cost."""
    metrics = compile_time_metrics(import_dynamo=False)
    return None if metrics is None else {k: len(metrics.get(k, [])) for k in WHOLE}


def compile_timer_ms_since(marks: dict[str, int] | None) -> float | None:
    """The ms torch's own whole-compile timers counted since `marks` (compile_timer_marks): the compile
    time torch reports; None where there were no marks and dynamo is still not imported."""
    metrics = compile_time_metrics(import_dynamo=False)
    if metrics is None:
        return None
    marks = marks or {}
    return 1e3 * sum(sum(metrics.get(k, [])[marks.get(k, 0):]) for k in WHOLE)
AUTOTUNE_MARKERS = ("autotune", "benchmark_choice", "select_algorithm")


def _trigger_cause(args: tuple) -> tuple[int, str]:
    """(recorder cause id, source) of what dynamo's callback brackets: attribution's trigger table."""
    source = trigger_source(args)
    return id_of(cause_of(source)), source


def _metric_totals(metrics: dict[str, list[float]], since: dict[str, int]) -> dict[str, float]:
    """Seconds added to each timer since the snapshot `since` (key -> list length)."""
    return {k: float(sum(v[since.get(k, 0):])) for k, v in metrics.items() if len(v) > since.get(k, 0)}


def _pick(totals: dict[str, float], keys: tuple[str, ...]) -> float:
    for k in keys:
        if k in totals:
            return totals[k]
    return 0.0


def phases(totals: dict[str, float], span_s: float) -> list[tuple[int, str, float]]:
    """Disjoint phases (cause, source name, seconds) carved out of torch's nested timers.

    Pure: testable with synthetic metric dicts. Phases never sum past the compile span.
    """
    user = _pick(totals, USER_COMPILER)
    inductor = min(_pick(totals, INDUCTOR), user) if user else _pick(totals, INDUCTOR)
    codegen = min(_pick(totals, CODEGEN), inductor) if inductor else 0.0
    autotune = sum(v for k, v in totals.items() if any(m in k for m in AUTOTUNE_MARKERS))
    autotune = min(autotune, codegen if codegen else inductor)
    out = [
        (JIT_COMPILE, "torch.compile/dynamo", max(0.0, span_s - user)),
        (JIT_COMPILE, "torch.compile/aot_autograd", max(0.0, user - inductor)),
        (JIT_COMPILE, "torch.compile/inductor", max(0.0, inductor - codegen)),
        (JIT_COMPILE, "torch.compile/codegen_and_cxx_compile", max(0.0, codegen - autotune)),
        (ALGORITHM_SELECTION, "torch.compile/autotune", max(0.0, autotune)),
    ]
    total = sum(p[2] for p in out)
    if total > span_s > 0:  # torch's timers overlap the span's edges by a little: never exceed it
        out = [(c, n, s * span_s / total) for c, n, s in out]
    return [p for p in out if p[2] > 0]


# -- What compiled from scratch and what came from a cache: dynamo's own counters ---------------

# Counter groups of torch._dynamo.utils.counters that say what a compile reused (torch 2.9-2.13):
# inductor's FX graph cache (fxgraph_cache_hit/_miss/_bypass), AOT autograd's cache
# (autograd_cache_hit/_miss/_bypass/_guard_miss/_saved) and dynamo's precompile cache
# (dynamo_cache_hit/_miss/_error). Every key with "cache" in it is read, so a renamed or new one still
# shows in the raw delta; cache_outcome() counts only the names it knows.
STATS_GRAPHS = "stats.unique_graphs"


def compile_counters() -> dict[str, int]:
    """dynamo's counters that say what compiled and what was loaded from a cache, now, as
    {"group.key": value} (every key with "cache" in it, and stats.unique_graphs). {} without dynamo.

    Cheap (a few dict reads): watch and warmup read it before and after a call; counters_since()
    gives the delta and cache_outcome() what it means. Before torch._dynamo is imported: {} (its
    counters start at zero when it is, so a delta from {} is still right), and dynamo is not imported."""
    if "torch._dynamo" not in sys.modules:  # nothing compiled yet, and importing dynamo costs most of a second
        return {}
    try:
        from torch._dynamo.utils import counters
    except Exception:
        return {}
    out = {f"{group}.{k}": int(v) for group, c in list(counters.items()) for k, v in list(c.items()) if "cache" in k}
    # the {} typed: mypy takes a bare {} default for dict[Never, Never]
    out[STATS_GRAPHS] = int(counters.get("stats", cast("dict[str, int]", {})).get("unique_graphs", 0))
    return out


def graph_break_counts() -> dict[str, int]:
    """dynamo's graph breaks so far, reason -> how many times (counters["graph_break"]); {} without
    dynamo imported (nothing broke yet)."""
    if "torch._dynamo" not in sys.modules:
        return {}
    try:
        from torch._dynamo.utils import counters
    except Exception:
        return {}
    return {str(k): int(v) for k, v in list(counters.get("graph_break", {}).items())}


def counters_since(before: Mapping[str, int], after: Mapping[str, int] | None = None) -> dict[str, int]:
    """The counters that moved between `before` and `after` (now when None), as deltas."""
    after = compile_counters() if after is None else after
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


@dataclass(frozen=True)
class CacheOutcome:
    """What a stretch of compiling reused, from a delta of compile_counters().

    `compiled` and `loaded` count graphs handed to inductor: compiled from scratch (an FX graph cache
    miss or bypass) or loaded from the cache (a hit, whether inductor's FX graph cache or AOT
    autograd's cache found it). Inductor's counters are read when any moved; else AOT autograd's.
    `graphs` is dynamo's count of graphs it produced (stats.unique_graphs); `frames_loaded` the
    frames dynamo loaded whole from its precompile cache. `counter` names the counters read ("" when
    none moved: a backend without these caches, or nothing compiled)."""

    graphs: int = 0
    compiled: int = 0
    loaded: int = 0
    frames_loaded: int = 0
    counter: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"graphs": self.graphs, "compiled": self.compiled, "loaded": self.loaded,
                "frames_loaded": self.frames_loaded, "counter": self.counter}

    def text(self) -> str:
        """One phrase: "1 graph compiled from scratch, 2 loaded from cache (inductor FX graph cache)"."""
        if not self.counter:
            if not self.graphs:
                return ""
            return f"{_n(self.graphs, 'graph')} compiled (no compile-cache counter moved: a backend without inductor's caches)"
        parts = [f"{_n(self.compiled, 'graph')} compiled from scratch", f"{self.loaded} loaded from cache"]
        if self.frames_loaded:
            parts.append(f"{_n(self.frames_loaded, 'frame')} loaded whole from dynamo's cache")
        return f"{', '.join(parts)} ({self.counter})"

    def __add__(self, other: "CacheOutcome") -> "CacheOutcome":
        counter = " + ".join(dict.fromkeys(c for c in (self.counter, other.counter) if c))
        return CacheOutcome(self.graphs + other.graphs, self.compiled + other.compiled, self.loaded + other.loaded,
                            self.frames_loaded + other.frames_loaded, counter)


def _n(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _count(delta: Mapping[str, int], group: str, ends: tuple[str, ...], contains: str) -> int:
    return sum(v for k, v in delta.items()
               if k.startswith(group + ".") and contains in k and k.endswith(ends) and not k.endswith("guard_miss"))


def cache_outcome(delta: Mapping[str, int]) -> CacheOutcome:
    """What the counter delta says was compiled from scratch and what was loaded (pure: testable with
    made-up dicts). A guard miss of AOT autograd's cache is followed by its plain miss: not counted twice."""
    graphs = max(0, int(delta.get(STATS_GRAPHS, 0)))
    frames = max(0, _count(delta, "dynamo_cache", ("_hit",), "dynamo_cache"))
    for group, contains, name in (("inductor", "fxgraph_cache", "inductor FX graph cache"),
                                  ("aot_autograd", "autograd_cache", "AOT autograd cache")):
        hit = _count(delta, group, ("_hit",), contains)
        compiled = _count(delta, group, ("_miss", "_bypass"), contains)
        if hit or compiled:
            return CacheOutcome(graphs, max(0, compiled), max(0, hit), frames, name)
    return CacheOutcome(graphs, 0, 0, frames, "dynamo cache" if frames else "")


def compilation_metrics_mark() -> list[Any]:
    """dynamo's compilation metrics records so far (held, so recompile_reasons() can tell the new ones)."""
    return compilation_metrics()


def recompile_reasons(mark: list[Any]) -> dict[str, str]:
    """compile id -> dynamo's recompile reason (the guard that failed, e.g. "0/0: tensor 'ids' size
    mismatch at index 1. expected 8, actual 16") for the compiles dynamo recorded since `mark`
    (compilation_metrics_mark()). A first compile of a frame has no reason and is left out.

    Read from torch._dynamo.utils.get_compilation_metrics() (dynamo's CompilationMetrics records,
    kept for the last 64 compiles), which dynamo fills whatever its logging settings: no
    TORCH_LOGS="recompiles" needed. {} where torch has no such records."""
    seen = {id(m) for m in mark}
    out: dict[str, str] = {}
    for m in compilation_metrics_mark():
        if id(m) in seen:
            continue
        reason = recompile_reason(m)
        if reason:
            out[str(getattr(m, "compile_id", ""))] = str(reason)
    return out


@dataclass
class CompileEvent:
    """One stretch dynamo's compile callbacks bracketed: its source (a compile, a lazily compiled
    backward, a CUDA graph recording, Triton autotuning: attribution/compiles.py) and so its cause,
    its span, the process's page faults and resident growth inside it, and, for a compile, what it
    built from scratch or loaded from cache and dynamo's recompile reason."""

    compile_id: str
    source: str
    span_ms: float
    faults: int = 0
    rss_bytes: int = 0
    file_bytes: int = 0  # of rss_bytes, the file-backed part
    cache: dict[str, Any] | None = None  # CacheOutcome.to_dict() across it (compiles only)
    pass_: str | None = None  # the trace's pass it ran in (the trace's instrument only)
    phases_ms: dict[str, float] | None = None  # torch's timers carved into phases (the trace's instrument)
    recompile_reason: str | None = None

    @property
    def cause(self) -> str:
        return cause_of(self.source)

    def to_dict(self) -> dict[str, Any]:
        """As the trace's instrument summary keeps it (the source under its old key, "trigger")."""
        d: dict[str, Any] = {"compile_id": self.compile_id, "trigger": self.source, "span_ms": self.span_ms,
                             "faults": self.faults, "rss_bytes": self.rss_bytes, "file_bytes": self.file_bytes}
        for key, value in (("cache", self.cache), ("pass", self.pass_), ("phases_ms", self.phases_ms),
                           ("recompile_reason", self.recompile_reason)):
            if value is not None:
                d[key] = value
        d["cause"] = self.cause
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CompileEvent":
        return cls(compile_id=str(d.get("compile_id", "")), source=str(d.get("trigger", "")),
                   span_ms=float(d.get("span_ms", 0.0)), faults=int(d.get("faults", 0)),
                   rss_bytes=int(d.get("rss_bytes", 0)), file_bytes=int(d.get("file_bytes", 0)),
                   cache=d.get("cache"), pass_=d.get("pass"), phases_ms=d.get("phases_ms"),
                   recompile_reason=d.get("recompile_reason"))


class CompileEvents:
    """dynamo's compile start/end callbacks, registered between open() and close() (both may be
    called in a `with`): one entry per compile in `compiles`, with its trigger, compile id, span
    (now_ns at start and end), the page faults and resident bytes it took, and what it compiled from
    scratch or loaded from cache (cache_outcome of the counters across it). close() removes the
    callbacks (always, even after an error) and adds dynamo's recompile reason to each compile that
    has one; collect_reasons() does that earlier. Thread-safe: compiles on other threads are kept too.

    Shared by the trace's TorchCompile instrument (which records spans from the hooks), warmup and
    assert_warm. `reason` is set (and nothing is registered) when torch._dynamo is not available."""

    def __init__(self) -> None:
        self.reason = ""
        self.compiles: list[CompileEvent] = []
        self._open: dict[int, tuple[int, str, int, Any, dict[str, int], tuple[int, int, int]]] = {}
        self._lock = threading.Lock()
        self._registered = False
        self._mark: list[Any] = []
        self.counters_at_open: dict[str, int] = {}
        handler = dynamo_callbacks(import_dynamo=True)
        metrics = compile_time_metrics() if handler is not None else None
        if handler is None or metrics is None:
            self.reason = ("torch._dynamo is not available (no compile callback handler)" if handler is None else
                           "torch._dynamo has no compilation_time_metrics")
            return
        self._handler = handler
        self._time_metrics = metrics

    # Hooks for subclasses: called on the compiling thread, around the base's own reads.
    def _compile_starting(self, cause: int, name: str) -> Any:
        """At a compile's start, before its start time is read; what it returns comes back to _compile_ended."""
        return None

    def _compile_ending(self, cause: int, name: str) -> None:
        """At a compile's end, before its end time is read."""

    def _compile_ended(self, entry: CompileEvent, cause: int, t0: int, t1: int, state: Any) -> None:
        """After the end time is read, before `entry` is kept."""

    # Callbacks take a CallbackArgs in recent torch and nothing in older releases: accept both.
    def _on_start(self, *args: Any) -> None:
        cause, name = _trigger_cause(args)
        state = self._compile_starting(cause, name)
        counters = compile_counters()
        host = _host()
        with self._lock:
            self._open[threading.get_ident()] = (cause, name, now_ns(), state, counters, host)

    def _on_end(self, *args: Any) -> None:
        with self._lock:
            opened = self._open.pop(threading.get_ident(), None)
        if opened is None:
            return
        cause, name, t0, state, counters, host = opened
        self._compile_ending(cause, name)
        t1 = now_ns()
        faults, rss, files = _host()
        entry = CompileEvent(callback_fields(args)[1], name, (t1 - t0) / 1e6,
                             faults - host[0], rss - host[1], files - host[2])
        if cause == JIT_COMPILE:
            entry.cache = cache_outcome(counters_since(counters)).to_dict()
        self._compile_ended(entry, cause, t0, t1, state)
        with self._lock:
            self.compiles.append(entry)

    def open(self) -> "CompileEvents":
        if self.reason or self._registered:
            return self
        self.counters_at_open = compile_counters()
        self._mark = compilation_metrics_mark()
        self._handler.register_start_callback(self._on_start)
        self._registered = True
        try:
            self._handler.register_end_callback(self._on_end)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if not self._registered:
            return
        self._registered = False
        remove_callback(self._handler.remove_start_callback, self._on_start)
        remove_callback(self._handler.remove_end_callback, self._on_end)
        self.collect_reasons()

    def __enter__(self) -> "CompileEvents":
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def collect_reasons(self) -> None:
        """Add dynamo's recompile reason to the compiles that have one (recorded when dynamo
        finishes a compile's bookkeeping, after its end callback: read it once the call returned)."""
        if self.reason:
            return
        reasons = recompile_reasons(self._mark)
        if not reasons:
            return
        with self._lock:
            for entry in self.compiles:
                if entry.recompile_reason is None and entry.compile_id in reasons:
                    entry.recompile_reason = reasons[entry.compile_id]

    def outcome(self) -> CacheOutcome:
        """What the compiles since open() compiled from scratch and loaded from cache."""
        return cache_outcome(counters_since(self.counters_at_open))


def _host() -> tuple[int, int, int]:
    """(minor faults, resident bytes, file-backed resident bytes) of the process now."""
    return _native.faults()[0], _native.rss_bytes(), _native.file_bytes()


class TorchCompile(CompileEvents, Instrument):
    name = "torch_compile"

    def __init__(self) -> None:
        Instrument.__init__(self)
        CompileEvents.__init__(self)
        self.cache: dict[str, int] = {}
        self.cache_outcome = CacheOutcome()

    def _snapshot(self) -> dict[str, int]:
        return {k: len(v) for k, v in self._time_metrics.items()}

    def _compile_starting(self, cause: int, name: str) -> Any:
        sample_host()
        nid = name_id(name)
        snap = self._snapshot()
        begin(cause, nid)
        # Phases are laid from the start time read after this: at or after the parent's begin, so they nest inside it.
        return snap

    def _compile_ending(self, cause: int, name: str) -> None:
        end(cause, name_id(name))

    def _compile_ended(self, entry: CompileEvent, cause: int, t0: int, t1: int, snap: Any) -> None:
        sample_host()
        entry.pass_ = self.current_pass
        if cause == JIT_COMPILE:
            totals = _metric_totals(self._time_metrics, snap)
            cursor = t0
            entry.phases_ms = {}
            for pcause, pname, secs in phases(totals, (t1 - t0) / 1e9):
                dur = int(secs * 1e9)
                record_span_ns(pcause, pname, cursor, min(cursor + dur, t1))
                cursor = min(cursor + dur, t1)
                entry.phases_ms[pname] = secs * 1e3

    def __enter__(self) -> "TorchCompile":
        if self.reason:
            return self
        self._whole_before = {k: len(self._time_metrics.get(k, [])) for k in WHOLE}
        self._breaks_before = graph_break_counts()
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.reason:
            return
        self.close()
        self.cache = counters_since(self.counters_at_open)
        self.cache_outcome = cache_outcome(self.cache)
        self.graph_breaks = counters_since(getattr(self, "_breaks_before", {}), graph_break_counts())
        metrics = self._time_metrics
        self.torch_reported_ms = 1e3 * sum(
            sum(metrics.get(k, [])[self._whole_before.get(k, 0):]) for k in WHOLE)

    def outcome_of_pass(self, pass_name: str) -> CacheOutcome:
        """What the compiles of one pass compiled from scratch and loaded from cache."""
        total = CacheOutcome()
        for c in self.compiles:
            if c.pass_ == pass_name and c.cache is not None:
                total = total + CacheOutcome(**c.cache)
        return total

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if self.reason:
            return out
        out["compiles"] = [c.to_dict() for c in self.compiles]
        out["cache"] = self.cache
        out["torch_reported_compile_ms"] = getattr(self, "torch_reported_ms", 0.0)
        inductor = {k: v for k, v in self.cache.items() if k.startswith("inductor.")}
        hits = sum(v for k, v in inductor.items() if k.endswith("_hit"))
        misses = sum(v for k, v in inductor.items() if k.endswith("_miss"))
        out["inductor_cache"] = "hit" if hits and not misses else "miss" if misses else "n/a"
        # graphs compiled from scratch and loaded from cache, over the whole trace (per compile: compiles[i]["cache"])
        out["graphs_compiled"] = self.cache_outcome.compiled
        out["graphs_from_cache"] = self.cache_outcome.loaded
        out["cache_outcome"] = self.cache_outcome.text()
        # per pass, as the trace's jit_compile entry says it (traces/build.py)
        by_pass = {c.pass_ or "" for c in self.compiles if c.cache is not None}
        out["cache_by_pass"] = {name: text for name in sorted(by_pass) if (text := self.outcome_of_pass(name).text())}
        out["frames"] = frame_rows(out["compiles"])  # per frame, when more than one compiled
        # dynamo's graph breaks during the trace: {reason, count}, the most first
        out["graph_breaks"] = [{"reason": k, "count": v}
                               for k, v in sorted(getattr(self, "graph_breaks", {}).items(), key=lambda kv: -kv[1])]
        return out


def frame_rows(compiles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The compiles (of dynamo compile triggers) by frame, the compile id's first part: compiles, span
    ms, graphs compiled from scratch and loaded from cache; [] when one frame or none compiled."""
    frames: dict[str, dict[str, Any]] = {}
    for c in compiles:
        cid = c.get("compile_id")
        if not isinstance(cid, str) or "/" not in cid or not is_compile(c.get("trigger")):
            continue
        f = frames.setdefault(cid.split("/")[0], {"frame": cid.split("/")[0], "compiles": 0, "ms": 0.0,
                                                   "graphs_compiled": 0, "graphs_from_cache": 0})
        f["compiles"] += 1
        f["ms"] += float(c.get("span_ms") or 0.0)
        cache = c.get("cache") or {}
        f["graphs_compiled"] += int(cache.get("compiled", 0) or 0)
        f["graphs_from_cache"] += int(cache.get("loaded", 0) or 0)
    return sorted(frames.values(), key=lambda f: -f["ms"]) if len(frames) > 1 else []


def registered_callbacks() -> int:
    """How many compile callbacks dynamo holds now (tests check none is left behind)."""
    return compat_registered_callbacks()


__all__ = ["CacheOutcome", "CompileEvent", "CompileEvents", "TorchCompile", "cache_outcome", "compilation_metrics_mark",
           "compile_counters", "counters_since", "frame_rows", "graph_break_counts", "phases", "recompile_reasons", "registered_callbacks"]

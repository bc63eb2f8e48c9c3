"""torch.compile: dynamo's compile start/end callbacks bracket each compile (measured), and
torch's own compile timers split it into phases (dynamo tracing, AOT autograd, inductor lowering,
code generation + C++/Triton compile, autotune).

The phase durations come from torch's timers (`compilation_time_metrics`); their order inside the
compile span is torch's pipeline order, laid end to end from the compile's start (the durations
are measured, the placement is not observed). Runtime triggers are mapped by kind: CUDA-graph
recording -> graph_capture, Triton autotuning -> algorithm_selection.
"""

from __future__ import annotations

import threading
from typing import Any


from ..timeline import (
    ALGORITHM_SELECTION,
    GRAPH_CAPTURE,
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
AUTOTUNE_MARKERS = ("autotune", "benchmark_choice", "select_algorithm")


def _trigger_cause(args: tuple) -> tuple[int, str]:
    trig = getattr(args[0], "callback_trigger", None) if args else None
    name = getattr(trig, "name", "DYNAMO")
    if name == "CUDAGRAPH_RECORDING":
        return GRAPH_CAPTURE, "cudagraphs:record"
    if name == "TRITON_AUTOTUNING":
        return ALGORITHM_SELECTION, "triton:autotune"
    if name == "LAZY_BACKWARD":
        return JIT_COMPILE, "torch.compile:lazy_backward"
    return JIT_COMPILE, "torch.compile:compile"


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


class TorchCompile(Instrument):
    name = "torch_compile"

    def __init__(self) -> None:
        super().__init__()
        self.compiles: list[dict[str, Any]] = []
        self._open: dict[int, tuple[int, str, int, dict[str, int]]] = {}
        self._lock = threading.Lock()
        self._counters_before: dict[str, int] = {}
        self.cache: dict[str, int] = {}
        try:
            import torch._dynamo  # noqa: F401
            from torch._dynamo import callback_handler, utils  # noqa: F401
        except Exception as e:  # pragma: no cover - torch without dynamo
            self.reason = f"torch._dynamo is not available ({e})"
            return
        self._handler = callback_handler
        self._utils = utils

    def _snapshot(self) -> dict[str, int]:
        return {k: len(v) for k, v in self._utils.compilation_time_metrics.items()}

    def _inductor_counters(self) -> dict[str, int]:
        c = self._utils.counters
        out = {f"inductor.{k}": int(v) for k, v in c.get("inductor", {}).items() if "cache" in k}
        out["stats.unique_graphs"] = int(c.get("stats", {}).get("unique_graphs", 0))
        return out

    # Callbacks take a CallbackArgs in recent torch and nothing in older releases: accept both.
    def _on_start(self, *args: Any) -> None:
        cause, name = _trigger_cause(args)
        sample_host()
        nid = name_id(name)
        snap = self._snapshot()
        begin(cause, nid)
        # Phases are laid from here: at or after the parent's begin, so they nest inside it.
        with self._lock:
            self._open[threading.get_ident()] = (cause, name, now_ns(), snap)

    def _on_end(self, *args: Any) -> None:
        with self._lock:
            opened = self._open.pop(threading.get_ident(), None)
        if opened is None:
            return
        cause, name, t0, snap = opened
        end(cause, name_id(name))
        t1 = now_ns()
        sample_host()
        compile_id = str(getattr(args[0], "compile_id", "")) if args else ""
        entry: dict[str, Any] = {"pass": self.current_pass, "compile_id": compile_id, "trigger": name,
                                 "span_ms": (t1 - t0) / 1e6}
        if cause == JIT_COMPILE:
            totals = _metric_totals(self._utils.compilation_time_metrics, snap)
            cursor = t0
            entry["phases_ms"] = {}
            for pcause, pname, secs in phases(totals, (t1 - t0) / 1e9):
                dur = int(secs * 1e9)
                record_span_ns(pcause, pname, cursor, min(cursor + dur, t1))
                cursor = min(cursor + dur, t1)
                entry["phases_ms"][pname] = secs * 1e3
        self.compiles.append(entry)

    def __enter__(self) -> "TorchCompile":
        if self.reason:
            return self
        self._counters_before = self._inductor_counters()
        self._whole_before = {k: len(self._utils.compilation_time_metrics.get(k, [])) for k in WHOLE}
        self._handler.register_start_callback(self._on_start)
        self._handler.register_end_callback(self._on_end)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.reason:
            return
        for remove, cb in ((self._handler.remove_start_callback, self._on_start),
                           (self._handler.remove_end_callback, self._on_end)):
            try:
                remove(cb)
            except ValueError:
                pass
        after = self._inductor_counters()
        self.cache = {k: v - self._counters_before.get(k, 0) for k, v in after.items()
                      if v - self._counters_before.get(k, 0)}
        metrics = self._utils.compilation_time_metrics
        self.torch_reported_ms = 1e3 * sum(
            sum(metrics.get(k, [])[self._whole_before.get(k, 0):]) for k in WHOLE)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if self.reason:
            return out
        out["compiles"] = self.compiles
        out["cache"] = self.cache
        out["torch_reported_compile_ms"] = getattr(self, "torch_reported_ms", 0.0)
        hits = sum(v for k, v in self.cache.items() if k.endswith("_hit"))
        misses = sum(v for k, v in self.cache.items() if k.endswith("_miss"))
        out["inductor_cache"] = "hit" if hits and not misses else "miss" if misses else "n/a"
        return out


def registered_callbacks() -> int:
    """How many compile callbacks dynamo holds now (tests check none is left behind)."""
    try:
        from torch._dynamo import callback_handler
    except Exception:
        return 0
    return len(callback_handler.start_callbacks) + len(callback_handler.end_callbacks)


__all__ = ["TorchCompile", "phases", "registered_callbacks"]

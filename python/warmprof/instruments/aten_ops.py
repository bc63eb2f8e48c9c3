"""The op view: a span per aten op (`op:aten.addmm.default`), nested in its module, with its arguments.

torch's own op observer does the watching: its CPU profiler (kineto, CPU activity only, input shapes
recorded) keeps a RecordFunction event of every op the dispatcher runs, at a microsecond or two an
event, where a Python TorchDispatchMode cost 10-15 us an op (the C++ to Python round trip per op; an
empty mode costs as much). After the passes the events are read back (instruments/op_events.py) and
turned into what the mode gave: the ops a dispatch mode would have seen (CompositeImplicit ops such as
aten::linear are looked through to what they decompose into, aten::t and aten::addmm; what an op's
kernel calls inside it is not an op of the model's), each a structure span on warmprof's clock, in
call order, with the call's arguments (shapes, dtypes, strides, scalars: the opspec.raw form), one
list per pass. Attribution places each unexplained nanosecond in a (module, op) site; the report keeps
the first call's arguments of each site, so the probes can replay the op (`warmprof probe --from`).

The profiler's clock is its own (its events are in epoch ns, from the TSC): warmprof maps it onto its
own with anchors, a RecordFunction of its own between two reads of the native clock (the tightest of
several tries), at entry, at each pass's start and end and at exit, linearly between them.

What the profiler does not record: strings (a `str` argument is written down as its schema's default:
gelu's approximate='none'), devices (written down as the call's tensors' device), scalar lists past its length
limit (the call is then not replayable). Its cost on the model is measured like every instrument's (the
instrumented steady passes, booked as profiler_overhead), and it cancels in the (module, op) residuals,
which compare the first pass with the seen re-run under the same instruments. Ops run on other threads
and inside a compiled region are not seen (a compiled model gets no op view). Nothing of the
profiler outlives the instrument: it is stopped on exit, even when the model raised, and refused (with
the reason) when the caller already runs torch's profiler.
"""

from __future__ import annotations

import os
from typing import Any

from ..opspec import call_spec
from ..timeline import STRUCTURE, record_span_ns
from .base import Instrument
from .op_events import Anchors, Session, visible_ops

PREFIX = "op:"
# Cheap unary ops a model rarely runs: the op view's own first-dispatch cost is calibrated on them.
COLD_PROBE_OPS = ("sinh", "cosh", "expm1", "log1p", "erfc", "asinh", "frac", "trunc", "sgn", "rad2deg", "deg2rad",
                  "erfinv", "lgamma", "digamma", "sinc", "logit", "exp2", "i0", "atanh", "acosh")
# kineto prints two lines on stderr at every profiler start and stop unless its log level is past them.
# Set only while the op view runs: the caller's value (or its absence) is put back on exit, also when
# the model raised or the profiler would not start, so a later torch.profiler (or a process started
# after the trace) gets the caller's environment, and the trace's environment check (ProcessState)
# does not blame torch or the model for warmprof's own setting.
_KINETO_QUIET = ("KINETO_LOG_LEVEL", "6")


class AtenOps(Instrument):
    name = "aten_ops"

    def __init__(self, *, compiled: bool = False) -> None:
        super().__init__()
        self._session: Session | None = None
        self._kineto_set = False  # KINETO_LOG_LEVEL is warmprof's, to be taken off on exit
        self._anchors = Anchors()
        self._windows: list[tuple[str, int, int]] = []  # (pass, index of its start anchor, of its end anchor)
        self._open: dict[str, int] = {}
        self.calls: dict[str, list[tuple[str, tuple, dict]]] = {}  # pass -> [(op, raw args, raw kwargs)]
        self.events = 0  # profiler events read back (all threads, all passes)
        if compiled:
            self.reason = "compiled model: a dispatch mode would change what dynamo traces (compile causes are measured)"
            return
        try:
            import torch
        except ImportError as e:
            self.reason = f"torch's profiler is unavailable: {e}"
            return
        if not torch.autograd.kineto_available():
            self.reason = "this torch build has no kineto profiler (the op view reads its op events)"

    def __enter__(self) -> "AtenOps":
        if self.reason:
            return self
        import torch

        if torch.autograd._profiler_enabled():
            self.reason = ("torch's profiler is already on in this process: the op view reads that profiler's op "
                           "events and cannot share it (stop it, or trace without the op view)")
            return self
        self._quiet_kineto()
        try:
            self._session = Session.start()
        except RuntimeError as e:
            self._restore_env()
            self.reason = f"torch's profiler would not start: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
            return self
        except BaseException:
            self._restore_env()
            raise
        self._anchors.take()
        return self

    def _quiet_kineto(self) -> None:
        """KINETO_LOG_LEVEL set for the op view, where the caller set none (kineto reads it when it
        starts: effective only before its first use in the process); _restore_env undoes it."""
        name, value = _KINETO_QUIET
        if name not in os.environ:
            os.environ[name] = value
            self._kineto_set = True

    def _restore_env(self) -> None:
        """The caller's KINETO_LOG_LEVEL back: unset again, unless something else changed it meanwhile."""
        ours, self._kineto_set = self._kineto_set, False
        if not ours:
            return
        name, value = _KINETO_QUIET
        if os.environ.get(name) == value:
            os.environ.pop(name, None)

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        self.calls[name] = []  # a pass run again (the instrumented steady passes) keeps its last run's calls
        if self._session is not None:
            self._open[name] = self._anchors.take()

    def end_pass(self, name: str) -> None:
        if self._session is not None and name in self._open:
            self._windows.append((name, self._open.pop(name), self._anchors.take()))

    def __exit__(self, *exc: Any) -> None:
        session, self._session = self._session, None
        if session is None:
            self._restore_env()
            return
        try:
            self._anchors.take()
            result = session.stop()
        finally:
            self._restore_env()
        if result is None:
            self.notes.append("torch's profiler gave no events back: no op spans")
            return
        self._ingest(result)

    def _ingest(self, result: Any) -> None:
        """Each pass window's visible ops, as spans on warmprof's clock and as calls."""
        to_ns, thread, events = self._anchors.mapping(result)
        self.events = len(events)
        if to_ns is None:
            self.notes.append("the op view's clock anchors were not found among torch's profiler events: no op spans")
            return
        for name, a, b in self._windows:
            lo, hi = self._anchors.kineto_window(a, b)
            calls = []
            for op in visible_ops(events, thread, lo, hi):
                record_span_ns(STRUCTURE, PREFIX + op.name, to_ns(op.start_ns), max(to_ns(op.start_ns), to_ns(op.end_ns)))
                calls.append((op.name, op.args, op.kwargs))
            self.calls[name] = calls

    def call(self, pass_name: str, index: int) -> dict[str, Any] | None:
        """The JSON spec of the pass's index-th recorded op call (None: no such call)."""
        calls = self.calls.get(pass_name, [])
        if not 0 <= index < len(calls):
            return None
        op, args, kwargs = calls[index]
        return call_spec(op, args, kwargs)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out["ops_first_pass"] = len(self.calls.get("first", []))
        out["distinct_ops_first_pass"] = len({c[0] for c in self.calls.get("first", [])})
        out["source"] = "torch profiler (kineto, CPU activity): RecordFunction events"
        return out

    def firsts(self, pass_name: str) -> tuple[dict[str, int], set[int]]:
        """In the pass's calls: each op's first call index, and the indices of the calls that start a
        call signature (op, shapes, dtypes, strides, scalars) not seen earlier in the pass."""
        first_of_op: dict[str, int] = {}
        new_signature: set[int] = set()
        seen: set[Any] = set()
        for k, (op, args, kwargs) in enumerate(self.calls.get(pass_name, [])):
            first_of_op.setdefault(op, k)
            key: Any = (op, args, tuple(sorted(kwargs.items())))
            try:
                hash(key)
            except TypeError:
                key = repr(key)
            if key not in seen:
                seen.add(key)
                new_signature.add(k)
        return first_of_op, new_signature

    def cold_dispatch_cost(self, exclude: set[str], ops: int = 9) -> dict[str, Any]:
        """ns the op view adds to an op's first dispatch under it, beyond a later one: on cheap
        unary ops the model did not run (`exclude`: op names), each warmed outside the profiler first
        (so its kernel is not what is timed), then called twice under it; the median of
        (first - second). Run after the passes, outside any recording."""
        import torch

        from .. import _native

        x = torch.full((4,), 0.5)
        chosen = []
        for name in COLD_PROBE_OPS:
            op = getattr(getattr(torch.ops.aten, name, None), "default", None)
            if op is None or str(op) in exclude:
                continue
            try:
                for _ in range(3):
                    op(x)
            except RuntimeError:
                continue
            chosen.append(op)
            if len(chosen) >= ops:
                break
        if not chosen or torch.autograd._profiler_enabled():
            return {"ns": 0.0, "n": 0}
        samples: list[float] = []
        try:
            session = Session.start()
        except RuntimeError:
            return {"ns": 0.0, "n": 0}
        try:
            for op in chosen:
                t0 = _native.now_ns()
                op(x)
                t1 = _native.now_ns()
                op(x)
                t2 = _native.now_ns()
                samples.append(max(0.0, (t1 - t0) - (t2 - t1)))
        finally:
            session.stop(read=False)
        samples.sort()
        return {"ns": samples[len(samples) // 2], "low": samples[0], "high": samples[-1], "n": len(samples)}


__all__ = ["AtenOps", "PREFIX", "COLD_PROBE_OPS"]

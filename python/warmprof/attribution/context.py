"""The context every estimator reads: one pass, built once from the timeline."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Mapping

import numpy as np

from ..timeline import (
    FAULT_COUNTERS,
    MAJOR_FAULTS_COUNTER,
    STRUCTURE,
    THREAD_COUNTER,
    Timeline,
    cause_name,
    source_of,
)
from .parts import Calibration, Figure, InstrumentCost, SpanRec
from .reading import (
    OP_PREFIX,
    CounterStep,
    Segment,
    _counter_steps,
    _cover,
    _kept_in_compiles,
    _memory_growth,
    _module_of,
    _pass_span,
    _segments,
    _step_growth,
    build_spans,
)


@dataclass(frozen=True, eq=False)  # compared by identity: it holds the whole pass
class PassContext:
    """Everything known about one pass, built once from the timeline; estimators only read it.

    pass_span: the pass (its window and thread). spans: the pass thread's spans inside the window,
    sorted by start (the pass span itself excluded). segments: the window cut at every span
    boundary, each with its innermost cause span and module (contiguous, sorted). fault_steps /
    thread_steps: the changes of the summed fault counters / the thread count, each with the cause
    span covering most of its interval (None: no cause span). own_faults: page faults warmprof's
    own buffers took in the window. timeline: the raw records, for estimators that need more."""

    pass_span: SpanRec
    spans: tuple[SpanRec, ...]
    segments: tuple[Segment, ...]
    fault_steps: tuple[CounterStep, ...] = ()
    # For each fault step, (anonymous, file-backed) bytes grown across it (RSS samples at the same
    # boundaries); empty when the timeline has no memory samples (then faults alone are priced).
    fault_bytes: tuple[tuple[int, int], ...] = ()
    # For each fault step, how many of its faults were major (read a page from storage); empty when
    # the major faults were not sampled apart
    fault_majors: tuple[int, ...] = ()
    thread_steps: tuple[CounterStep, ...] = ()
    own_faults: int = 0
    off_thread_ns: int = 0  # cause spans of other threads, clipped to the window
    calibration: Calibration = field(default_factory=Calibration)
    steady_faults: float = 0.0  # page faults a steady pass takes (median)
    # ns a clean steady pass's thread waited for a CPU (median; run-queue delay from schedstat)
    steady_run_delay_ns: float = 0.0
    # ns a clean steady pass's thread was blocked off the CPU (median; wall less CPU less run-queue delay)
    steady_off_cpu_ns: float = 0.0
    evidence: Mapping[str, str] = field(default_factory=dict)  # source -> evidence of its spans
    inferred: tuple[Figure, ...] = ()  # figures no span brackets
    timeline: Timeline | None = None
    # The instruments' cost per pass measured on this model (instrumented steady passes); when
    # set, it stands in for the per-call and per-callback estimates (module hooks, CUPTI callbacks).
    instrument_cost: InstrumentCost | None = None

    @property
    def window(self) -> tuple[int, int]:
        return self.pass_span.start_ns, self.pass_span.end_ns

    @cached_property
    def segment_starts(self) -> list[int]:
        return [sg[0] for sg in self.segments]

    def cover(self, a: int, b: int) -> tuple[SpanRec | None, SpanRec | None]:
        """The cause span covering most of [a, b] (None: mostly no cause) and the module span there."""
        return _cover(self.segments, self.segment_starts, a, b)

    def spread(self, lo: int, hi: int, amount: float) -> list[tuple[SpanRec | None, str, float]]:
        """`amount` (a wait that happened somewhere in [lo, hi]) spread over the segments there in
        proportion to their time: (innermost cause span or None, module, share). An instant interval
        goes whole to the segment that holds it."""
        starts = self.segment_starts
        first = max(0, bisect.bisect_right(starts, lo) - 1)
        pieces: list[tuple[SpanRec | None, str, int]] = []
        for k in range(first, len(self.segments)):
            s0, s1, cause_span, _, mod, _ = self.segments[k]
            if s0 >= hi:
                break
            ov = min(s1, hi) - max(s0, lo)
            if ov > 0:
                pieces.append((cause_span, mod, ov))
        covered = sum(p[2] for p in pieces)
        if covered <= 0:
            cause_span, mod_span = self.cover(lo, hi)
            return [(cause_span, _module_of(mod_span), amount)]
        return [(c, m, amount * ov / covered) for c, m, ov in pieces]

    @cached_property
    def free_by_module(self) -> dict[str, float]:
        """ns of the pass outside every cause span, by innermost module ("" outside modules)."""
        free: dict[str, float] = {}
        for a, b, cause_span, _, mod, _ in self.segments:
            if cause_span is None:
                free[mod] = free.get(mod, 0.0) + (b - a)
        return free

    @cached_property
    def free_by_site(self) -> dict[tuple[str, str], float]:
        """ns of the pass outside every cause span, by (innermost module, op inside it)."""
        free: dict[tuple[str, str], float] = {}
        for a, b, cause_span, _, mod, op in self.segments:
            if cause_span is None:
                free[(mod, op)] = free.get((mod, op), 0.0) + (b - a)
        return free

    @cached_property
    def op_spans(self) -> list[SpanRec]:
        """The op view's spans on the pass's thread, in call order."""
        return [s for s in self.spans if s.cause == STRUCTURE and s.name.startswith(OP_PREFIX)]

    @cached_property
    def op_sites(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(module, op) -> (index of the site's first op call in the pass, calls there)."""
        sites: dict[tuple[str, str], tuple[int, int]] = {}
        starts = self.segment_starts
        for k, s in enumerate(self.op_spans):
            seg = self.segments[max(0, bisect.bisect_right(starts, s.start_ns) - 1)]
            key = (seg[4], s.name[len(OP_PREFIX):])
            first, calls = sites.get(key, (k, 0))
            sites[key] = (first, calls + 1)
        return sites

    @cached_property
    def span_keys(self) -> frozenset[tuple[str, str]]:
        """(cause, source) of every cause span that is innermost somewhere in the pass: the parts
        cause_spans measures. Any other part is an estimate or a given figure, which sits in time
        no cause span covers."""
        keys = set()
        last = None
        for seg in self.segments:
            span = seg[2]
            if span is not None and span is not last:
                keys.add((span.cause, span.name))
                last = span
        return frozenset((cause_name(c), source_of(n)) for c, n in keys)


def build_context(
    tl: Timeline,
    pass_name: str,
    *,
    calibration: Calibration | None = None,
    steady_faults: float = 0.0,
    steady_run_delay_ns: float = 0.0,
    steady_off_cpu_ns: float = 0.0,
    evidence: Mapping[str, str] | None = None,
    inferred: Iterable[Figure] | None = None,
    window: tuple[int, int] | None = None,
    instrument_cost: InstrumentCost | None = None,
) -> PassContext | None:
    """The context of the pass `pass:<pass_name>` (None: no such pass). Arguments as attribute_pass."""
    all_spans = build_spans(tl)
    ps = _pass_span(all_spans, tl, pass_name, window)
    if ps is None:
        return None
    t0, t1, th = ps.start_ns, ps.end_ns, ps.thread
    in_window = [s for s in all_spans if s.end_ns > t0 and s.start_ns < t1 and s.name != ps.name]
    mine = [s for s in in_window if s.thread == th]
    off_thread_ns = sum(min(s.end_ns, t1) - max(s.start_ns, t0) for s in in_window
                        if s.thread != th and s.cause != STRUCTURE)
    # Python imports the compiler runs and garbage collections inside its own compile span stay the
    # compile's time (torch's compile timers count them too): they are not segmented as causes of their own.
    in_compile = _kept_in_compiles(mine)
    segs = _segments([sp for sp in mine if id(sp) not in in_compile], t0, t1)
    starts = [sg[0] for sg in segs]
    fault_steps = _counter_steps(tl, FAULT_COUNTERS, segs, starts, t0, t1)
    return PassContext(
        pass_span=ps,
        spans=tuple(mine),
        segments=tuple(segs),
        fault_steps=fault_steps,
        fault_bytes=_memory_growth(tl, fault_steps),
        fault_majors=_step_growth(tl, MAJOR_FAULTS_COUNTER, fault_steps),
        thread_steps=_counter_steps(tl, (THREAD_COUNTER,), segs, starts, t0, t1),
        own_faults=int(np.count_nonzero((tl.own_fault_ns >= t0) & (tl.own_fault_ns <= t1))),
        off_thread_ns=off_thread_ns,
        calibration=calibration or Calibration(),
        steady_faults=steady_faults,
        steady_run_delay_ns=steady_run_delay_ns,
        steady_off_cpu_ns=steady_off_cpu_ns,
        evidence=evidence or {},
        inferred=tuple(inferred or ()),
        timeline=tl,
        instrument_cost=instrument_cost,
    )

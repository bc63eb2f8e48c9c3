"""Attribution: a pure function from a recorded timeline (+ steady statistics) to causes.

attribute_pass builds one PassContext for the pass (ARCHITECTURE.md, method step 7) and runs
the estimators in ESTIMATORS over it, each a pure function (context) -> parts:

- cause_spans: time inside nested or overlapping cause spans goes to the innermost one (latest
  start), so nothing is counted twice (measured). Structure spans (passes, modules) say where,
  not why.
- host_faults: page faults outside every cause span, split by what grew between the samples:
  anonymous memory -> allocator_growth (source host_faults), file-backed pages (a library's code
  and data paged in on first use) -> runtime_init (source file_pages); each priced by the bytes
  grown at the first-touch cost calibrated for that size (small or huge pages, by bytes per
  fault). Anonymous faults a steady pass also takes, and warmprof's own, are left out (estimated).
- thread_starts: threads started outside every cause span x the calibrated thread start cost
  -> runtime_init (estimated); a calibration too spread to trust gives the count without time.
- module_hook_cost: module calls x the calibrated cost of warmprof's own hooks per call ->
  profiler_overhead (estimated): the instrumented passes pay it, the steady passes do not.
- cupti_callback_cost: CUPTI callbacks taken in the pass x the calibrated cost of warmprof's
  handler per callback -> profiler_overhead (estimated), the same reasoning.
- inferred_figures: figures no span brackets (a clock ramp), added as the instruments gave them.
- instrument_cost: when the protocol measured every instrument's cost per pass on the model
  (instrumented steady passes less clean ones) -> profiler_overhead (estimated), in place of the
  two calibrated per-call figures above, never below them.

Only the thread that ran the pass is attributed (other threads' spans overlap the pass's wall
time and would double count it); their spans are counted in `off_thread_ms`. Counters are
sampled at span boundaries, and the context places each change between two samples under the
cause span covering most of that interval: that is how the counter estimators see what
cause_spans covers, with no estimator reading another's parts.

excess = first - steady median; unattributed = excess - attributed, judged against the noise
band of the steady passes (summarize).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from .timeline import (
    BEGIN, COUNTER, CUPTI_CALLBACKS, END, JIT_COMPILE, STRUCTURE, Timeline, cause_name, source_of,
)

FAULT_COUNTERS = ("host:minor_faults", "host:major_faults")
THREAD_COUNTER = "host:threads"
RSS_COUNTER = "host:rss_bytes"
FILE_COUNTER = "host:file_bytes"  # resident file-backed (and shared) bytes: RSS less this is anonymous
# The sampling thread's own run-queue delay (ns runnable, waiting for a CPU: schedstat) and its
# involuntary context switches; per-thread counters, read on the pass thread only.
RUN_DELAY_COUNTER = "host:run_delay_ns"
INVOLUNTARY_COUNTER = "host:involuntary_switches"
MODULE_PREFIX = "module:"
OP_PREFIX = "op:"  # the op view's spans (instruments/aten_ops.py): structure, nested in modules


# -- What attribution produces ---------------------------------------------------------------


@dataclass(frozen=True)
class SpanRec:
    name: str
    cause: int
    start_ns: int
    end_ns: int
    thread: int
    depth: int
    value: int = 0
    closed: bool = True  # False: no end record (the pass raised); closed at the window end

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class Calibration:
    """Unit costs measured on this machine (estimates multiply counts by these). A cost of 0 is
    one not measured, or too spread to use (`unusable` says which, and why)."""

    fault_cost_ns: float = 0.0  # one first-touch fault of a small page (where no bytes are known)
    thread_start_ns: float = 0.0
    hook_cost_ns: float = 0.0  # what warmprof's module hooks add to one module call
    cupti_handler_ns: float = 0.0  # what warmprof's CUPTI handler adds to one callback (CUPTI's dispatch not included)
    # First touch of fresh anonymous memory, ns per byte at the sizes calibrated: ((bytes, ns), ...)
    # by size, small pages and huge pages (empty: none, e.g. THP "never").
    touch_ns_per_byte: tuple[tuple[int, float], ...] = ()
    huge_touch_ns_per_byte: tuple[tuple[int, float], ...] = ()
    huge_page_bytes: int = 2 << 20
    page_bytes: int = 4096
    # Mapping file pages already in the page cache: ns per byte, and faults per byte (the kernel
    # maps several pages a fault, "fault-around").
    file_ns_per_byte: float = 0.0
    file_faults_per_byte: float = 0.0
    # The op view's own first dispatch of an op (torch's per-op set-up for a Python dispatch mode),
    # measured on ops the model did not run (instruments/aten_ops.py): paid once per distinct op.
    op_view_cold_ns: float = 0.0
    unusable: Mapping[str, str] = field(default_factory=dict)  # calibration -> why it is not used


@dataclass(frozen=True)
class InstrumentCost:
    """What every instrument together cost one pass of this model, measured on it: a few steady
    passes run with every instrument on (as the first pass and the seen re-run) against the clean
    steady passes (see `compared`: their least disturbed passes, or their medians). `calls` holds
    each module's calls in one instrumented pass (the placement); `noise_ns` is the clean passes'
    noise band."""

    instrumented_ms: tuple[float, ...]
    clean_median_ms: float
    noise_ns: float = 0.0
    calls: Mapping[str, int] = field(default_factory=dict)
    # The clean passes' time at the quantile a low figure of len(instrumented_ms) passes sits at
    # (1 / (n + 1)); None: compare medians. A busy machine slows passes and never speeds them up,
    # so the least disturbed passes of each kind are compared, like for like in how many were run.
    clean_low_ms: float | None = None

    @property
    def instrumented_median_ms(self) -> float:
        return float(np.median(self.instrumented_ms)) if self.instrumented_ms else 0.0

    @property
    def compared(self) -> tuple[str, float, float]:
        """(how, instrumented ms, clean ms): the two figures the difference is taken between."""
        if self.clean_low_ms is None or not self.instrumented_ms:
            return "median", self.instrumented_median_ms, self.clean_median_ms
        return "low", float(min(self.instrumented_ms)), self.clean_low_ms

    @property
    def per_pass_ns(self) -> float:
        """The measured difference per pass, never below 0."""
        _, instrumented, clean = self.compared
        return max(0.0, (instrumented - clean) * 1e6)

    @property
    def within_noise(self) -> bool:
        return self.per_pass_ns <= self.noise_ns


@dataclass
class Part:
    """Attributed time of one (cause, source), with where it happened."""

    cause: str
    source: str
    evidence: str
    ns: float = 0.0
    count: int = 0
    by_module: dict[str, float] = field(default_factory=dict)
    detail: str = ""  # what the figure holds or leaves out, where a reader would otherwise guess
    # True: its time was taken out of cause spans' parts (which its estimator lowered by as much),
    # not out of the pass's free time; _assemble leaves it out of the unexplained time
    carved: bool = False
    # True: an inferred figure that may only take what the pass's other parts left unexplained
    # (an MPS pipeline compile read off host-over-GPU time, which other host-side causes share);
    # attribute_pass caps it there
    fills: bool = False

    @property
    def ms(self) -> float:
        return self.ns / 1e6

    @property
    def top_module(self) -> str:
        return max(self.by_module, key=self.by_module.get) if self.by_module else ""

    def add(self, module: str, ns: float) -> None:
        """Add `ns` of this part's time in `module`."""
        self.ns += ns
        self.by_module[module] = self.by_module.get(module, 0.0) + ns


@dataclass
class PassAttribution:
    pass_ms: float
    parts: list[Part]
    spans: list[SpanRec]
    faults: int = 0  # faults in the pass (minor + major)
    faults_outside_causes: int = 0
    own_faults: int = 0  # faults of warmprof's own buffers in the pass (not the model's)
    new_threads: int = 0
    off_thread_ms: float = 0.0
    unmatched: int = 0  # begins with no end (closed at the window end)
    # ns of the pass outside every cause span and not taken by an estimate, by innermost module
    # ("" outside modules): where this pass's unexplained time sits.
    unexplained_by_module: dict[str, float] = field(default_factory=dict)
    # The same by (module, op) site when the op view ran (op "" is the module's own code outside
    # ops); op_sites: each site's (index of its first op call in the pass, calls); op_calls: the
    # op spans in the pass, in call order (the op view's recorded calls line up with them).
    unexplained_by_site: dict[tuple[str, str], float] = field(default_factory=dict)
    op_sites: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    op_calls: int = 0

    @property
    def attributed_ms(self) -> float:
        return sum(p.ms for p in self.parts)

    def attributed_by_cause(self, cause: str) -> float:
        """ms of the parts of one cause."""
        return sum(p.ms for p in self.parts if p.cause == cause)

    def by_module(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for p in self.parts:
            for mod, ns in p.by_module.items():
                d = out.setdefault(mod, {})
                d[p.cause] = d.get(p.cause, 0.0) + ns / 1e6
        return out


# -- Reading the timeline: spans, segments, counter steps --------------------------------------


def build_spans(tl: Timeline, start_ns: int | None = None, end_ns: int | None = None) -> list[SpanRec]:
    """Match begin/end records per thread (by name and cause) into spans, sorted by start.

    An end with no open begin is ignored; a begin with no end is closed at `end_ns` (or the last
    record) and marked closed=False.
    """
    if len(tl) == 0:
        return []
    last = int(tl.ts_ns[-1]) if end_ns is None else end_ns
    stacks: dict[int, list[tuple[int, int, int, int]]] = {}
    out: list[SpanRec] = []
    # Select the begin/end records in range with numpy, then walk plain Python ints (indexing
    # numpy arrays one element at a time costs more than the matching itself).
    sel = (tl.kind == BEGIN) | (tl.kind == END)
    if start_ns is not None:
        sel &= tl.ts_ns >= start_ns
    if end_ns is not None:
        sel &= tl.ts_ns <= end_ns
    columns = (tl.kind[sel], tl.ts_ns[sel], tl.name[sel], tl.cause[sel], tl.value[sel], tl.thread[sel])
    for k, t, nm_id, cause, v, th in zip(*(c.tolist() for c in columns)):
        key = (nm_id, cause)
        stack = stacks.setdefault(th, [])
        if k == BEGIN:
            stack.append((nm_id, cause, t, v))
            continue
        for j in range(len(stack) - 1, -1, -1):
            if (stack[j][0], stack[j][1]) == key:
                nm, c, t0, v0 = stack.pop(j)
                out.append(SpanRec(tl.names[nm], c, t0, t, th, j, v0))
                break
    for th, stack in stacks.items():
        for j, (nm, c, t0, v) in enumerate(stack):
            out.append(SpanRec(tl.names[nm], c, t0, max(t0, last), th, j, v, closed=False))
    out.sort(key=lambda s: (s.start_ns, -s.end_ns))
    return out


def _innermost(active: list[SpanRec], want_cause: bool) -> SpanRec | None:
    best = None
    for s in active:
        if (s.cause != STRUCTURE) != want_cause:
            continue
        if best is None or s.start_ns > best.start_ns or (s.start_ns == best.start_ns and s.end_ns < best.end_ns):
            best = s
    return best


def _module_of(span: SpanRec | None) -> str:
    if span is None or not span.name.startswith(MODULE_PREFIX):
        return ""
    return span.name[len(MODULE_PREFIX):]


# One piece of the pass between two consecutive span boundaries: (start_ns, end_ns, innermost
# cause span or None, innermost module span or None, module name, op name: the innermost op
# span's inside that module, "" for none). A plain tuple, not a NamedTuple: a pass has one per
# boundary (hundreds of thousands).
Segment = tuple[int, int, SpanRec | None, SpanRec | None, str, str]


def _segments(spans: list[SpanRec], t0: int, t1: int) -> list[Segment]:
    """Split [t0, t1] at every span boundary into contiguous segments, sorted by start."""
    cuts = {t0, t1}
    for s in spans:
        if s.start_ns < t1 and s.end_ns > t0:
            cuts.add(max(s.start_ns, t0))
            cuts.add(min(s.end_ns, t1))
    edges = sorted(cuts)
    ordered = sorted((s for s in spans if s.start_ns < t1 and s.end_ns > t0), key=lambda s: s.start_ns)
    segs = []
    active: list[SpanRec] = []
    nxt = 0
    for a, b in zip(edges, edges[1:]):
        while nxt < len(ordered) and ordered[nxt].start_ns <= a:
            active.append(ordered[nxt])
            nxt += 1
        active = [s for s in active if s.end_ns >= b]
        mods = [s for s in active if s.name.startswith(MODULE_PREFIX)]
        mod_span = _innermost(mods, False)
        op_span = _innermost([s for s in active if s.name.startswith(OP_PREFIX)], False)
        op = ""
        if op_span is not None and (mod_span is None or op_span.start_ns >= mod_span.start_ns):
            op = op_span.name[len(OP_PREFIX):]
        segs.append((a, b, _innermost(active, True), mod_span, _module_of(mod_span), op))
    return segs


def _counter_deltas(tl: Timeline, names: Iterable[str], t0: int, t1: int) -> list[tuple[int, int, int]]:
    """(start_ns, end_ns, delta) between consecutive samples of the summed counters in [t0, t1]."""
    ids = [i for i, n in enumerate(tl.names) if n in set(names)]
    if not ids or len(tl) == 0:
        return []
    mask = (tl.kind == COUNTER) & np.isin(tl.name, ids) & (tl.ts_ns >= t0) & (tl.ts_ns <= t1)
    if not mask.any():
        return []
    ts, nm, val = tl.ts_ns[mask], tl.name[mask], tl.value[mask]
    # Samples of several counters taken together share a timestamp: sum them per timestamp,
    # carrying each counter's last value forward.
    last: dict[int, int] = {}
    series: list[tuple[int, int]] = []
    for t, n, v in zip(ts.tolist(), nm.tolist(), val.tolist()):
        last[n] = v
        total = sum(last.values())
        if series and series[-1][0] == t:
            series[-1] = (t, total)
        else:
            series.append((t, total))
    # Only compare samples where every counter has been seen (the sum is comparable).
    complete_from = 0
    seen: set[int] = set()
    every = len(set(nm.tolist()))
    for t, n in zip(ts.tolist(), nm.tolist()):
        seen.add(n)
        if len(seen) == every:
            complete_from = t
            break
    series = [s for s in series if s[0] >= complete_from]
    return [(a[0], b[0], b[1] - a[1]) for a, b in zip(series, series[1:]) if b[1] != a[1]]


def _cover(segs: Sequence[Segment], starts: Sequence[int], a: int, b: int) -> tuple[SpanRec | None, SpanRec | None]:
    """The cause span covering most of [a, b] (None if mostly no cause), and the module there.

    segs are contiguous and sorted; `starts` holds their start times, so only the segments that
    overlap [a, b] are visited (a binary search finds the first): linear in the samples overall."""
    first = max(0, bisect.bisect_right(starts, a) - 1)
    weight: dict[SpanRec | None, int] = {}
    mod_weight: dict[SpanRec | None, int] = {}
    for k in range(first, len(segs)):
        s0, s1, cause_span, mod_span, _, _ = segs[k]
        if s0 >= b:
            break
        ov = min(s1, b) - max(s0, a)
        if ov <= 0:
            continue
        weight[cause_span] = weight.get(cause_span, 0) + ov
        mod_weight[mod_span] = mod_weight.get(mod_span, 0) + ov
    if not weight:
        # An instant interval: the segment that contains it.
        if first < len(segs) and segs[first][0] <= a <= segs[first][1]:
            return segs[first][2], segs[first][3]
        return None, None
    return max(weight, key=weight.get), max(mod_weight, key=mod_weight.get)


class CounterStep(NamedTuple):
    """A counter's change between two consecutive samples, and what covered that interval."""

    start_ns: int
    end_ns: int
    delta: int
    cause_span: SpanRec | None  # the cause span covering most of the interval; None: outside causes
    module: str  # the innermost module there ("" outside modules)


def _counter_steps(tl: Timeline, names: Iterable[str], segs: Sequence[Segment], starts: Sequence[int],
                   t0: int, t1: int) -> tuple[CounterStep, ...]:
    steps = []
    for a, b, d in _counter_deltas(tl, names, t0, t1):
        cause_span, mod_span = _cover(segs, starts, a, b)
        steps.append(CounterStep(a, b, d, cause_span, _module_of(mod_span)))
    return tuple(steps)


def _counter_series(tl: Timeline, name: str, thread: int | None = None) -> tuple[list[int], list[int]]:
    """(timestamps, values) of one counter, in time order; empty if never sampled. `thread` (a recorder
    thread index): only that thread's samples, for per-thread counters (run-queue delay)."""
    ids = [i for i, n in enumerate(tl.names) if n == name]
    if not ids or len(tl) == 0:
        return [], []
    mask = (tl.kind == COUNTER) & (tl.name == ids[0])
    if thread is not None:
        mask &= tl.thread == thread
    return tl.ts_ns[mask].tolist(), tl.value[mask].tolist()


def _memory_growth(tl: Timeline, steps: Sequence[CounterStep]) -> tuple[tuple[int, int], ...]:
    """(anonymous, file-backed) bytes grown across each fault step: the RSS and file-bytes samples
    at or before its end less those at or before its start. Memory is read wherever faults moved
    since the last read, so the sample at or before a boundary holds at that boundary. Empty when
    the timeline has no file-bytes samples (one recorded before they existed)."""
    rss_t, rss_v = _counter_series(tl, RSS_COUNTER)
    file_t, file_v = _counter_series(tl, FILE_COUNTER)
    if not steps or not file_t or len(rss_t) != len(file_t):
        return ()

    def at(t: int) -> tuple[int, int] | None:
        k = bisect.bisect_right(file_t, t) - 1
        return None if k < 0 else (rss_v[k] - file_v[k], file_v[k])

    out = []
    for st in steps:
        a, b = at(st.start_ns), at(st.end_ns)
        out.append((0, 0) if a is None or b is None else (b[0] - a[0], b[1] - a[1]))
    return tuple(out)


def _pass_span(all_spans: list[SpanRec], tl: Timeline, pass_name: str,
               window: tuple[int, int] | None) -> SpanRec | None:
    """The pass's span. Its times are the pass's own clock reads when given (`window`), so a
    recorder that lost records never shortens a pass; the thread is the span's, or, if the span
    itself was lost, the thread with most records in the window."""
    found = next((s for s in all_spans if s.name == f"pass:{pass_name}"), None)
    if window is None:
        return found
    t0, t1 = window
    if found is not None:
        thread = found.thread
    else:
        inside = tl.thread[(tl.ts_ns >= t0) & (tl.ts_ns <= t1)]
        thread = int(np.bincount(inside).argmax()) if inside.size else 0
    return SpanRec(f"pass:{pass_name}", STRUCTURE, int(t0), int(t1), thread, 0)


# -- The context every estimator reads -------------------------------------------------------


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
    thread_steps: tuple[CounterStep, ...] = ()
    own_faults: int = 0
    off_thread_ns: int = 0  # cause spans of other threads, clipped to the window
    calibration: Calibration = field(default_factory=Calibration)
    steady_faults: float = 0.0  # page faults a steady pass takes (median)
    # ns a clean steady pass's thread waited for a CPU (median; run-queue delay from schedstat)
    steady_run_delay_ns: float = 0.0
    evidence: Mapping[str, str] = field(default_factory=dict)  # source -> evidence of its spans
    inferred: tuple[Mapping, ...] = ()  # figures no span brackets: {"cause", "source", "ms", ...}
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
    evidence: Mapping[str, str] | None = None,
    inferred: Iterable[Mapping] | None = None,
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
    # Python imports the compiler runs inside its own compile span stay the compile's time (torch's
    # compile timers count them too): they are not segmented as causes of their own.
    in_compile = _imports_inside_compiles(mine)
    segs = _segments([sp for sp in mine if id(sp) not in in_compile], t0, t1)
    starts = [sg[0] for sg in segs]
    fault_steps = _counter_steps(tl, FAULT_COUNTERS, segs, starts, t0, t1)
    return PassContext(
        pass_span=ps,
        spans=tuple(mine),
        segments=tuple(segs),
        fault_steps=fault_steps,
        fault_bytes=_memory_growth(tl, fault_steps),
        thread_steps=_counter_steps(tl, (THREAD_COUNTER,), segs, starts, t0, t1),
        own_faults=int(np.count_nonzero((tl.own_fault_ns >= t0) & (tl.own_fault_ns <= t1))),
        off_thread_ns=off_thread_ns,
        calibration=calibration or Calibration(),
        steady_faults=steady_faults,
        steady_run_delay_ns=steady_run_delay_ns,
        evidence=evidence or {},
        inferred=tuple(inferred or ()),
        timeline=tl,
        instrument_cost=instrument_cost,
    )


# -- The estimators: each (context) -> parts, pure, one per rule --------------------------------

Estimator = Callable[[PassContext], list[Part]]


def cause_spans(ctx: PassContext) -> list[Part]:
    """Measured: each segment's time goes to its innermost cause span, per (cause, source); count
    is the number of spans that own some time. Evidence is the source's (ctx.evidence), else measured."""
    parts: dict[tuple[str, str], Part] = {}
    counted: set[int] = set()  # ids of the spans counted (the spans live as long as ctx)
    for a, b, span, _, mod, _ in ctx.segments:
        if span is None:
            continue
        src = source_of(span.name)
        key = (cause_name(span.cause), src)
        p = parts.get(key)
        if p is None:
            p = parts[key] = Part(key[0], src, ctx.evidence.get(src, "measured"))
        p.add(mod, b - a)
        if id(span) not in counted:
            counted.add(id(span))
            p.count += 1
    for key, detail in (*_loads_in_compiles(ctx).items(), *_imports_in_compiles(ctx).items()):
        if key in parts:
            parts[key].detail = detail
    return list(parts.values())


def _nested_in_compiles(spans: Sequence[SpanRec], prefixes: str | tuple[str, ...], *,
                        compiles_from_cupti: bool = True) -> list[SpanRec]:
    """The cause spans named with one of `prefixes` that sit inside a jit_compile span (those
    CUPTI recorded left out when `compiles_from_cupti` is False: a PTX load is itself one)."""
    compiles = [c for c in spans if c.cause == JIT_COMPILE and (compiles_from_cupti or source_of(c.name) != "cupti")]
    if not compiles:
        return []
    return [s for s in spans if s.cause != STRUCTURE and s.name.startswith(prefixes)
            and any(c.start_ns <= s.start_ns and s.end_ns <= c.end_ns for c in compiles)]


_MODULE_LOADS = ("cupti:lazy_load", "cupti:cuModuleLoad", "cupti:cuLibraryLoad", "cupti:cudaLibraryLoad")


def _loads_in_compiles(ctx: PassContext) -> dict[tuple[str, str], str]:
    """Module loads (CUPTI) nested in another source's jit_compile span, e.g. Triton loading the
    cubin it just built inside inductor's compile: the innermost span wins, so the load's time is
    the load's cause (runtime_init for a cubin), not the compile's. Said in the part's detail."""
    nested: dict[tuple[str, str], int] = {}
    for s in _nested_in_compiles(ctx.spans, _MODULE_LOADS, compiles_from_cupti=False):
        key = (cause_name(s.cause), source_of(s.name))
        nested[key] = nested.get(key, 0) + 1
    return {key: (f"{n} module load{'s' if n > 1 else ''} inside a compile span (e.g. Triton loading the "
                  f"kernel it built inside inductor's compile) counted here as {key[0]}, not as the compile's "
                  "jit_compile: the innermost span wins")
            for key, n in nested.items()}


def per_byte_at(points: Sequence[tuple[int, float]], nbytes: float) -> float:
    """ns per byte of a first touch of `nbytes`, from calibrated (bytes, ns per byte) points sorted
    by size: interpolated on log(bytes) between points, the end point's outside them; 0 without points."""
    if not points:
        return 0.0
    if nbytes <= points[0][0]:
        return points[0][1]
    for (b0, c0), (b1, c1) in zip(points, points[1:]):
        if nbytes <= b1:
            w = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
            return c0 + w * (c1 - c0)
    return points[-1][1]


class FaultSplit(NamedTuple):
    """One fault step priced by kind: anonymous (small and huge pages) and file-backed."""

    anon_faults: float
    anon_ns: float
    file_faults: float
    file_ns: float
    huge_faults: float


def split_faults(faults: int, anon_bytes: int, file_bytes: int, cal: Calibration) -> FaultSplit:
    """Prices one fault step from what it grew. File-backed bytes are priced at the page-cache
    mapping cost and take the faults that mapping takes per byte (at most the step's); the other
    faults are anonymous: as many huge-page faults as the anonymous bytes need beyond one small page
    a fault, the rest small pages, each kind at the first-touch cost per byte for the bytes it
    touched. Faults with no growth (memory given back and touched again) are small pages too."""
    file_bytes = max(0, file_bytes)
    anon_bytes = max(0, anon_bytes)
    file_faults = min(float(faults), file_bytes * cal.file_faults_per_byte)
    anon_faults = faults - file_faults
    ps, hs = cal.page_bytes, cal.huge_page_bytes
    huge = 0.0
    if cal.huge_touch_ns_per_byte and anon_bytes > anon_faults * ps and hs > ps:
        huge = min(anon_faults, (anon_bytes - anon_faults * ps) / (hs - ps))
    small_bytes = (anon_faults - huge) * ps
    huge_bytes = huge * hs
    if cal.touch_ns_per_byte:
        anon_ns = small_bytes * per_byte_at(cal.touch_ns_per_byte, small_bytes)
    else:
        anon_ns = (anon_faults - huge) * cal.fault_cost_ns
    anon_ns += huge_bytes * per_byte_at(cal.huge_touch_ns_per_byte, huge_bytes)
    return FaultSplit(anon_faults, anon_ns, file_faults, file_bytes * cal.file_ns_per_byte, huge)


def _imports_inside_compiles(spans: Sequence[SpanRec]) -> set[int]:
    """ids of the python_import spans nested in a jit_compile span (inductor importing its own
    modules as it compiles)."""
    return {id(s) for s in _nested_in_compiles(spans, "python_import:")}


def _imports_in_compiles(ctx: PassContext) -> dict[tuple[str, str], str]:
    """Said in the compile's part: how many Python imports ran inside its span and were counted in
    it (as torch's own compile timers count them), not as runtime_init."""
    n = len(_imports_inside_compiles(ctx.spans))
    if not n:
        return {}
    return {("jit_compile", "torch.compile"): (f"includes {n} Python imports the compiler ran inside its compile "
                                               "span (counted in the compile, as torch's own timers count them)")}


def host_faults(ctx: PassContext) -> list[Part]:
    """Estimated: page faults outside every cause span (faults inside one belong to that cause, via
    ctx.fault_steps' cover), split per step by what grew (split_faults): anonymous memory ->
    allocator_growth (host_faults), file pages -> runtime_init (file_pages, lazy loading of a
    library's code and data). Anonymous faults a steady pass also takes, and warmprof's own, are
    taken off the anonymous time in proportion; each part is placed in the modules its steps were in.
    Without memory samples (ctx.fault_bytes empty) every fault is anonymous at fault_cost_ns."""
    cal = ctx.calibration
    anon = Part("allocator_growth", "host_faults", "estimated")
    files = Part("runtime_init", "file_pages", "estimated")
    anon_faults = huge_faults = 0.0
    file_faults = 0.0
    file_bytes = 0
    anon_by_module: dict[str, float] = {}
    for k, step in enumerate(ctx.fault_steps):
        if step.cause_span is not None or step.delta <= 0:
            continue
        grown = ctx.fault_bytes[k] if ctx.fault_bytes else (0, 0)
        sp = split_faults(step.delta, grown[0], grown[1] if ctx.fault_bytes else 0, cal)
        anon_faults += sp.anon_faults
        huge_faults += sp.huge_faults
        anon_by_module[step.module] = anon_by_module.get(step.module, 0.0) + sp.anon_ns
        if sp.file_faults > 0 or grown[1] > 0:
            file_faults += sp.file_faults
            file_bytes += max(0, grown[1])
            files.add(step.module, sp.file_ns)
    parts = []
    extra = max(0.0, anon_faults - ctx.steady_faults - ctx.own_faults)
    priced = sum(anon_by_module.values()) > 0 or "first_touch" in cal.unusable
    if extra > 0 and priced:
        scale = extra / anon_faults
        for mod, ns in anon_by_module.items():
            anon.add(mod, ns * scale)
        anon.count = int(round(extra))
        anon.detail = _anon_detail(ctx, extra, huge_faults * scale)
        parts.append(anon)
    if file_bytes > 0 and (cal.file_ns_per_byte > 0 or "file_pages" in cal.unusable):
        files.count = int(round(file_faults))
        files.detail = (f"{file_bytes / 2**20:.1f} MiB of file-backed pages (library code and data) paged in "
                        f"outside any cause span, about {files.count} of the faults, at the cost of mapping "
                        "page-cache pages measured here; a read from disk (major fault) costs more")
        if "file_pages" in cal.unusable:
            files.detail += f"; file-page calibration not used ({cal.unusable['file_pages']}): counted without time"
        parts.append(files)
    return parts


def _anon_detail(ctx: PassContext, faults: float, huge: float) -> str:
    cal = ctx.calibration
    if not ctx.fault_bytes:
        how = "each taken as one small page (no memory samples to split faults by kind)"
    elif cal.touch_ns_per_byte or cal.huge_touch_ns_per_byte:
        how = ("split from file-backed faults by the anonymous and file bytes each step grew, and priced by "
               "the bytes touched at the first-touch cost calibrated for that size")
    else:
        how = "split by the bytes each step grew, x the calibrated cost of one small-page fault"
    out = f"{faults:.0f} anonymous first-touch faults{f' ({huge:.0f} of huge pages)' if huge >= 1 else ''} {how}"
    if "first_touch" in cal.unusable:
        out += f"; first-touch calibration not used ({cal.unusable['first_touch']}): counted without time"
    return out


def thread_starts(ctx: PassContext) -> list[Part]:
    """Estimated runtime_init: threads started outside every cause span (the runtime's pools
    starting inside the pass) x the calibrated thread start cost, in the module they started in."""
    cost = ctx.calibration.thread_start_ns
    why = ctx.calibration.unusable.get("thread_start")
    if cost <= 0 and why is None:
        return []
    p = Part("runtime_init", "thread_pool", "estimated")
    for step in ctx.thread_steps:
        if step.delta > 0 and step.cause_span is None:
            p.add(step.module, step.delta * max(cost, 0.0))
            p.count += step.delta
    if why is not None:
        p.detail = f"{p.count} thread starts counted without time: the thread-start calibration was too spread to use ({why})"
    return [p] if p.count else []


def module_hook_cost(ctx: PassContext) -> list[Part]:
    """Estimated profiler_overhead: warmprof's own module hooks, which instrumented passes pay and
    steady passes do not. Each module call (a module span on the pass thread) x the calibrated
    cost per call, in that module. Not when the instruments' cost was measured on the model
    (ctx.instrument_cost: instrument_cost books it, this figure included)."""
    cost = ctx.calibration.hook_cost_ns
    if cost <= 0 or ctx.instrument_cost is not None:
        return []
    calls: dict[str, int] = {}
    for s in ctx.spans:
        if s.name.startswith(MODULE_PREFIX):
            mod = _module_of(s)
            calls[mod] = calls.get(mod, 0) + 1
    if not calls:
        return []
    p = Part("profiler_overhead", "module_hooks", "estimated")
    for mod, n in calls.items():
        p.add(mod, n * cost)
        p.count += n
    return [p]


def op_view_first_dispatch(ctx: PassContext) -> list[Part]:
    """Estimated profiler_overhead: the op view's own first dispatch of each distinct op in the first
    pass (torch sets an op up for a Python dispatch mode on its first call under one: tens of
    microseconds, which the warm instrumented steady passes never see). Distinct ops x the cost
    calibrated on ops the model did not run, in the module of each op's first call."""
    cost = ctx.calibration.op_view_cold_ns
    if cost <= 0 or ctx.pass_span.name != "pass:first" or not ctx.op_spans:
        return []
    p = Part("profiler_overhead", "op_view", "estimated",
             detail="the op view's first dispatch of each distinct op, calibrated on ops the model did not run")
    seen: set[str] = set()
    for (mod, op), _ in sorted(ctx.op_sites.items(), key=lambda kv: kv[1][0]):
        if op not in seen:
            seen.add(op)
            p.add(mod, cost)
            p.count += 1
    return [p]


def _counter_change(tl: Timeline, name: str, t0: int, t1: int, thread: int | None = None) -> int:
    """How much a cumulative counter sampled around a window grew across it: the last sample at or
    before t0 to the first at or after t1 (samples inside the window stand in when there are none
    outside it); 0 without two samples. `thread`: as _counter_series."""
    ts, val = _counter_series(tl, name, thread)
    if len(ts) < 2:
        return 0
    before = bisect.bisect_right(ts, t0) - 1
    if before < 0 and ts[0] <= t1:
        before = 0
    after = bisect.bisect_left(ts, t1)
    if after == len(ts) and ts[-1] >= t0:
        after = len(ts) - 1
    if before < 0 or after >= len(ts) or after <= before:
        return 0
    return max(0, int(val[after]) - int(val[before]))


def cupti_callback_cost(ctx: PassContext) -> list[Part]:
    """Estimated profiler_overhead: the CUPTI callbacks taken during the pass (the counter the CUPTI
    instrument samples at the pass's start and end) x the calibrated cost of warmprof's handler per
    callback. The instrumented passes pay it, the steady passes do not. The cost is the handler's
    alone, measured on this machine; CUPTI's own dispatch per callback comes on top and is not in
    the estimate (it can only be measured with a GPU). Not placed by module (the count is per pass)."""
    cost = ctx.calibration.cupti_handler_ns
    if cost <= 0 or ctx.timeline is None or ctx.instrument_cost is not None:  # measured: instrument_cost
        return []
    n = _counter_change(ctx.timeline, CUPTI_CALLBACKS, *ctx.window)
    if n <= 0:
        return []
    detail = (f"{n} CUPTI callbacks x {cost:.0f} ns, warmprof's handler cost per callback measured here; "
              "CUPTI's own dispatch per callback is not included (measurable only on a GPU)")
    return [Part("profiler_overhead", "cupti_callbacks", "estimated", ns=n * cost, count=n,
                 by_module={"": n * cost}, detail=detail)]


def _spread(ctx: PassContext, lo: int, hi: int, amount: float) -> list[tuple[SpanRec | None, str, float]]:
    """`amount` (a wait that happened somewhere in [lo, hi]) spread over the segments there in
    proportion to their time: (innermost cause span or None, module, share). An instant interval
    goes whole to the segment that holds it."""
    starts = ctx.segment_starts
    first = max(0, bisect.bisect_right(starts, lo) - 1)
    pieces: list[tuple[SpanRec | None, str, int]] = []
    for k in range(first, len(ctx.segments)):
        s0, s1, cause_span, _, mod, _ = ctx.segments[k]
        if s0 >= hi:
            break
        ov = min(s1, hi) - max(s0, lo)
        if ov > 0:
            pieces.append((cause_span, mod, ov))
    covered = sum(p[2] for p in pieces)
    if covered <= 0:
        cause_span, mod_span = ctx.cover(lo, hi)
        return [(cause_span, _module_of(mod_span), amount)]
    return [(c, m, amount * ov / covered) for c, m, ov in pieces]


def cpu_contention(ctx: PassContext) -> list[Part]:
    """Measured cpu_contention: the time the pass's thread was ready to run and had no CPU (its
    run-queue delay, schedstat), read at the pass's boundaries and at every module boundary, so each
    wait is placed in the module it happened in. A steady pass's wait (ctx.steady_run_delay_ns, the
    median) is taken off in proportion: what is booked is what this pass waited beyond a steady one.
    A wait inside a cause span (a compile that was preempted) is taken out of that span's part, which
    measured wall time, and booked here (source run_queue_in:<the span's source>), so nothing counts
    twice.

    Only the pass's thread is booked: its wait adds to the pass's wall time directly. A worker
    thread's wait adds only while the pass's thread waits for that worker, which these counters
    cannot tell from the pass thread's own work (an OpenMP pool spins before it sleeps); workers'
    waits are reported beside this figure (instruments/host.py), never added to it, and never
    summed as if they had happened one after another."""
    tl = ctx.timeline
    if tl is None:
        return []
    t0, t1 = ctx.window
    ts, vals = _counter_series(tl, RUN_DELAY_COUNTER, ctx.pass_span.thread)
    if len(ts) < 2:
        return []
    a = max(0, bisect.bisect_right(ts, t0) - 1)
    b = min(len(ts) - 1, bisect.bisect_left(ts, t1))
    free = Part("cpu_contention", "run_queue", "measured")
    carved: dict[str, Part] = {}  # by the source of the cause spans the waits fell in
    lowered: dict[tuple[str, str, str], float] = {}  # (cause, source, module) -> ns taken out of its span
    total = 0.0
    for k in range(a, b):
        d = vals[k + 1] - vals[k]
        if d <= 0:
            continue
        lo, hi = max(ts[k], t0), min(ts[k + 1], t1)
        # no more than the time between the samples inside the window: a wait before the pass, or
        # one read a moment after its sample's clock, is never pushed into a span shorter than it
        d = min(d, hi - lo)
        if d <= 0:
            continue
        total += d
        for cause_span, mod, ns in _spread(ctx, lo, hi, d):
            if cause_span is None:
                free.add(mod, ns)
            else:
                src = source_of(cause_span.name)
                into = carved.get(src)
                if into is None:
                    into = carved[src] = Part("cpu_contention", f"run_queue_in:{src}", "measured", carved=True)
                into.add(mod, ns)
                key = (cause_name(cause_span.cause), src, mod)
                lowered[key] = lowered.get(key, 0.0) + ns
    if total <= 0:
        return []
    switches = _counter_change(tl, INVOLUNTARY_COUNTER, t0, t1, ctx.pass_span.thread)
    free.count = switches  # the pass thread's involuntary context switches (preemptions) in the pass
    keep = max(0.0, total - ctx.steady_run_delay_ns) / total
    if keep <= 0:
        return []
    parts = []
    steady = (f"; less a steady pass's own wait ({ctx.steady_run_delay_ns / 1e6:.3f} ms, the median)"
              if ctx.steady_run_delay_ns > 0 else "")
    for p, where in ((free, "outside cause spans"),
                     *((c, f"inside {src} spans, taken out of their time") for src, c in carved.items())):
        if p.ns <= 0:
            continue
        p.by_module = {m: ns * keep for m, ns in p.by_module.items()}
        p.ns *= keep
        p.detail = (f"the pass's thread was runnable with no CPU for {p.ns / 1e6:.3f} ms {where} (schedstat "
                    f"run-queue delay, read at module boundaries){steady}; {switches} involuntary context switches in "
                    "the pass; not a first-call cost, and no warm-up removes it")
        parts.append(p)
    for (cause, source, mod), ns in lowered.items():
        parts.append(Part(cause, source, "measured", ns=-ns * keep, by_module={mod: -ns * keep}))
    return parts


def inferred_figures(ctx: PassContext) -> list[Part]:
    """Figures no span brackets (a clock ramp inferred from clock samples), added as given; entries
    of the same (cause, source) add up."""
    parts: dict[tuple[str, str], Part] = {}
    for e in ctx.inferred:
        key = (e["cause"], e["source"])
        p = parts.get(key)
        if p is None:
            p = parts[key] = Part(e["cause"], e["source"], e.get("evidence", "inferred"))
        p.add(e.get("module", ""), e["ms"] * 1e6)
        p.count += int(e.get("count", 1))
        p.fills = p.fills or bool(e.get("fills_unexplained"))
        p.detail = p.detail or str(e.get("detail", ""))
    return list(parts.values())


def instrument_cost(ctx: PassContext) -> list[Part]:
    """Estimated profiler_overhead, measured on the model: what every instrument (module hooks,
    oneDNN's verbose output, samplers, CUPTI callbacks) added to a steady pass run with all of them
    on, over a clean one (ctx.instrument_cost), booked in this instrumented pass. Never below the
    calibrated floor (module calls x hook cost, CUPTI callbacks x handler cost: what the pass is
    known to pay even when the measured difference is lost in the noise). Placed by module in
    proportion to each module's calls in the instrumented steady passes (the hooks cost per call;
    oneDNN's lines come one per primitive run, inside the modules that run them, so this placement
    spreads their part over every module called)."""
    cost = ctx.instrument_cost
    if cost is None:
        return []
    bare = replace(ctx, instrument_cost=None)
    floor = [p for est in (module_hook_cost, cupti_callback_cost) for p in est(bare)]
    floor_ns = sum(p.ns for p in floor)
    measured = cost.per_pass_ns
    n = len(cost.instrumented_ms)
    how, instrumented, clean = cost.compared
    if how == "low":
        head = (f"{n} steady passes with every instrument on (after one uncounted warm-up pass): lowest "
                f"{instrumented:.3f} ms, against the clean steady passes' time at the same quantile "
                f"{clean:.3f} ms (the least disturbed passes of each), so {measured / 1e6:.3f} ms per pass")
    else:
        head = (f"{n} steady passes with every instrument on (after one uncounted warm-up pass): median "
                f"{instrumented:.3f} ms, clean steady median {clean:.3f} ms, so {measured / 1e6:.3f} ms per pass")
    p = Part("profiler_overhead", "instrumented_steady", "estimated", count=n)
    # Never more than this pass took over a clean steady pass: the instruments' cost is part of it (a
    # busy machine can slow the instrumented passes far more than the clean ones).
    over_clean = ctx.pass_span.dur_ns - cost.clean_median_ms * 1e6
    capped = ""
    if measured > max(over_clean, floor_ns):
        capped = (f"; capped at what this pass took over the clean steady median ({max(over_clean, floor_ns) / 1e6:.3f} ms): "
                  f"the difference measured ({measured / 1e6:.3f} ms) is more than the whole pass had to give")
        measured = max(over_clean, floor_ns)
    if measured >= floor_ns and measured > 0:
        calls = {m: c for m, c in cost.calls.items() if c > 0}
        total = sum(calls.values())
        for mod, c in (calls.items() if total else [("", 1)]):
            p.add(mod, measured * c / (total or 1))
        noise = (f"; within the noise band ({cost.noise_ns / 1e6:.3f} ms), so a rough figure"
                 if cost.within_noise else "")
        p.detail = f"{head}{noise}{capped}; placed by module in proportion to module calls"
    elif floor_ns > 0:
        for f in floor:
            for mod, ns in f.by_module.items():
                p.add(mod, ns)
        p.detail = (f"{head}, below the calibrated floor (module calls x hook cost, CUPTI callbacks x handler cost: "
                    f"{floor_ns / 1e6:.3f} ms), which stands; the difference is within the noise "
                    f"({cost.noise_ns / 1e6:.3f} ms band)")
    else:
        return []
    return [p]


# Run in this order; parts of the same (cause, source) from several estimators add up, and the
# first one's evidence stands.
ESTIMATORS: tuple[Estimator, ...] = (cause_spans, host_faults, thread_starts, module_hook_cost, cupti_callback_cost,
                                     inferred_figures, op_view_first_dispatch, cpu_contention, instrument_cost)


# -- The loop ----------------------------------------------------------------------------------


def attribute_pass(tl: Timeline, pass_name: str, *, estimators: Sequence[Estimator] = ESTIMATORS,
                   **context_args: Any) -> PassAttribution:
    """Attribute one recorded pass (the span named `pass:<pass_name>`) to causes: the pass's
    context (build_context, given `context_args`: calibration, steady_faults, evidence, inferred,
    window, instrument_cost) with each of `estimators` run on it in order, their parts merged by (cause, source).

    window: the pass's own clock reads (start_ns, end_ns); they give the pass time even if the
    recorder lost records. Faults warmprof's own buffers took in the pass (Timeline.own_fault_ns)
    are never charged to the model's allocator."""
    ctx = build_context(tl, pass_name, **context_args)
    if ctx is None:
        return PassAttribution(0.0, [], [])
    merged: dict[tuple[str, str], Part] = {}
    for estimate in estimators:
        for p in estimate(ctx):
            _merge_into(merged, p)
    _cap_fills(ctx, merged)
    return _assemble(ctx, merged)


def _cap_fills(ctx: PassContext, parts: dict[tuple[str, str], Part]) -> None:
    """Parts that may only take what the others left unexplained (Part.fills), capped there in
    turn, estimated before inferred; a capped one's detail says so."""
    fills = [p for p in parts.values() if p.fills]
    if not fills:
        return
    left = sum(ctx.free_by_module.values()) - sum(
        p.ns for k, p in parts.items() if not p.fills and k not in ctx.span_keys and not p.carved)
    for p in sorted(fills, key=lambda p: p.evidence != "estimated"):
        keep = min(1.0, max(0.0, left) / p.ns) if p.ns > 0 else 1.0
        if keep < 1.0:
            p.detail += (f"; capped at what the pass's other causes left unexplained ({max(0.0, left) / 1e6:.3f} ms of "
                         f"{p.ns / 1e6:.3f} ms)")
            p.ns *= keep
            p.by_module = {m: ns * keep for m, ns in p.by_module.items()}
        left -= p.ns


def _merge_into(merged: dict[tuple[str, str], Part], p: Part) -> None:
    key = (p.cause, p.source)
    have = merged.get(key)
    if have is None:
        merged[key] = replace(p, by_module=dict(p.by_module))  # never change an estimator's own Part
        return
    have.ns += p.ns
    have.count += p.count
    have.detail = have.detail or p.detail
    for mod, ns in p.by_module.items():
        have.by_module[mod] = have.by_module.get(mod, 0.0) + ns


def _assemble(ctx: PassContext, parts: dict[tuple[str, str], Part]) -> PassAttribution:
    """The pass's attribution: its parts (largest first), counter totals, and the unexplained
    time: free time (no cause span) less every part whose (cause, source) is not a cause span's
    (ctx.span_keys; an estimate merged into a cause span's part stays out of free time)."""
    unexplained = dict(ctx.free_by_module)
    estimated: dict[str, float] = {}
    for key, p in parts.items():
        if key in ctx.span_keys or p.carved:
            continue
        for mod, ns in p.by_module.items():
            unexplained[mod] = unexplained.get(mod, 0.0) - ns
            estimated[mod] = estimated.get(mod, 0.0) + ns
    op_view = bool(ctx.op_spans)
    t0, t1 = ctx.window
    return PassAttribution(
        pass_ms=(t1 - t0) / 1e6,
        parts=sorted(parts.values(), key=lambda p: -p.ns),
        spans=[ctx.pass_span, *ctx.spans],
        faults=sum(s.delta for s in ctx.fault_steps),
        faults_outside_causes=sum(s.delta for s in ctx.fault_steps if s.cause_span is None),
        own_faults=ctx.own_faults,
        new_threads=sum(s.delta for s in ctx.thread_steps if s.delta > 0),
        off_thread_ms=ctx.off_thread_ns / 1e6,
        unmatched=sum(1 for s in ctx.spans if not s.closed),
        unexplained_by_module=unexplained,
        unexplained_by_site=_spread_over_sites(ctx.free_by_site, estimated) if op_view else {},
        op_sites=dict(ctx.op_sites) if op_view else {},
        op_calls=len(ctx.op_spans),
    )


def _spread_over_sites(free: dict[tuple[str, str], float], estimated: dict[str, float]) -> dict[tuple[str, str], float]:
    """Free time by (module, op) less the estimates placed in each module, spread over that module's
    sites in proportion to their free time (estimates are placed by module, not by op)."""
    out = dict(free)
    by_mod: dict[str, float] = {}
    for (mod, _), ns in free.items():
        by_mod[mod] = by_mod.get(mod, 0.0) + max(ns, 0.0)
    for mod, ns in estimated.items():
        total = by_mod.get(mod, 0.0)
        if total <= 0:
            out[(mod, "")] = out.get((mod, ""), 0.0) - ns
            continue
        for site, f in free.items():
            if site[0] == mod and f > 0:
                out[site] -= ns * f / total
    return out


# -- Across passes: where the unexplained time sits, the summary, steady statistics -----------


def unattributed_where(first: PassAttribution, rerun: PassAttribution, top: int = 8,
                       floor_ms: float = 0.01) -> list[tuple[str, float]]:
    """Where the first pass's unattributed time sits: each module's unexplained time in the first
    pass less its unexplained time in the seen-shape re-run (same input, same instruments, so
    instrument overhead and the module's steady work cancel). Largest first, positive only.

    The entries sum to the first pass's unexplained time over the re-run's, not over the steady
    median; the difference is what the re-run itself paid beyond a steady pass, unexplained."""
    mods = set(first.unexplained_by_module) | set(rerun.unexplained_by_module)
    out = []
    for mod in mods:
        ms = (first.unexplained_by_module.get(mod, 0.0) - rerun.unexplained_by_module.get(mod, 0.0)) / 1e6
        if ms >= floor_ms:
            out.append((mod, ms))
    out.sort(key=lambda kv: (-kv[1], kv[0]))
    return out[:top]


def unattributed_sites(first: PassAttribution, rerun: PassAttribution, top: int = 200,
                       floor_ms: float = 0.005) -> list[tuple[str, str, float]]:
    """unattributed_where by (module, op) site, when the op view ran: each site's unexplained time in
    the first pass less the same site's in the seen re-run; op "" is the module's own code outside
    ops. Largest first, positive only."""
    sites = set(first.unexplained_by_site) | set(rerun.unexplained_by_site)
    out = []
    for site in sites:
        ms = (first.unexplained_by_site.get(site, 0.0) - rerun.unexplained_by_site.get(site, 0.0)) / 1e6
        if ms >= floor_ms:
            out.append((site[0], site[1], ms))
    out.sort(key=lambda r: (-r[2], r[0], r[1]))
    return out[:top]


@dataclass
class Summary:
    excess_ms: float
    attributed_ms: float
    unattributed_ms: float
    noise_band_ms: float
    within_noise: bool


def summarize(first_pass_ms: float, steady_median_ms: float, noise_band_ms: float, attributed_ms: float) -> Summary:
    excess = first_pass_ms - steady_median_ms
    unattributed = excess - attributed_ms
    return Summary(excess, attributed_ms, unattributed, noise_band_ms, abs(unattributed) <= noise_band_ms)


@dataclass(frozen=True)
class SteadyStats:
    """The steady passes' times: median, p10, p90, the noise band and how many passes."""

    median: float
    p10: float
    p90: float
    noise_band: float
    n: int


def steady_stats(times_ms: list[float]) -> SteadyStats:
    """Median, p10, p90 and the noise band (p90 - p10, at least the MAD-based spread)."""
    if not times_ms:
        return SteadyStats(0.0, 0.0, 0.0, 0.0, 0)
    a = np.asarray(times_ms, dtype=float)
    med = float(np.median(a))
    p10, p90 = (float(x) for x in np.percentile(a, [10, 90]))
    mad = float(np.median(np.abs(a - med)))
    band = max(p90 - p10, 2.0 * 1.4826 * mad)
    return SteadyStats(med, p10, p90, band, int(a.size))

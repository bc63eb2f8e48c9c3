"""Attribution: a pure function from a recorded timeline (+ steady statistics) to causes.

Rules (ARCHITECTURE.md, method step 6):
- Only the thread that ran the pass is attributed (other threads' spans overlap the pass's wall
  time and would double count it); their spans are counted in `off_thread_ms`.
- Time inside nested or overlapping cause spans goes to the innermost one (latest start), so
  nothing is counted twice. Structure spans (passes, modules) say where, not why.
- Counters (page faults, threads) are sampled at span boundaries; a sample interval's delta goes
  to the cause span covering most of that interval. Deltas outside any cause span, minus what a
  steady pass also takes, become estimates: faults x calibrated fault cost -> allocator_growth,
  new threads x calibrated thread start cost -> runtime_init.
- Module calls x the calibrated cost of warmprof's own hooks per call -> profiler_overhead
  (estimated): the instrumented passes pay it, the steady passes do not.
- excess = first - steady median; unattributed = excess - attributed, judged against the noise
  band of the steady passes.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from .timeline import BEGIN, COUNTER, END, STRUCTURE, Timeline, cause_name, source_of

FAULT_COUNTERS = ("host:minor_faults", "host:major_faults")
THREAD_COUNTER = "host:threads"
MODULE_PREFIX = "module:"


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
    """Unit costs measured on this machine (estimates multiply counts by these)."""

    fault_cost_ns: float = 0.0
    thread_start_ns: float = 0.0
    hook_cost_ns: float = 0.0  # what warmprof's module hooks add to one module call


@dataclass
class Part:
    """Attributed time of one (cause, source), with where it happened."""

    cause: str
    source: str
    evidence: str
    ns: float = 0.0
    count: int = 0
    by_module: dict[str, float] = field(default_factory=dict)

    @property
    def ms(self) -> float:
        return self.ns / 1e6

    @property
    def top_module(self) -> str:
        return max(self.by_module, key=self.by_module.get) if self.by_module else ""


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

    @property
    def attributed_ms(self) -> float:
        return sum(p.ms for p in self.parts)

    def by_module(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for p in self.parts:
            for mod, ns in p.by_module.items():
                d = out.setdefault(mod, {})
                d[p.cause] = d.get(p.cause, 0.0) + ns / 1e6
        return out


def build_spans(tl: Timeline, start_ns: int | None = None, end_ns: int | None = None) -> list[SpanRec]:
    """Match begin/end records per thread (by name and cause) into spans, sorted by start.

    An end with no open begin is ignored; a begin with no end is closed at `end_ns` (or the last
    record) and marked closed=False.
    """
    n = len(tl)
    if n == 0:
        return []
    last = int(tl.ts_ns[-1]) if end_ns is None else end_ns
    stacks: dict[int, list[tuple[int, int, int, int]]] = {}
    out: list[SpanRec] = []
    kinds, causes, names, ts, vals, threads = tl.kind, tl.cause, tl.name, tl.ts_ns, tl.value, tl.thread
    for i in range(n):
        k = kinds[i]
        if k != BEGIN and k != END:
            continue
        t = int(ts[i])
        if start_ns is not None and t < start_ns:
            continue
        if end_ns is not None and t > end_ns:
            continue
        th = int(threads[i])
        key = (int(names[i]), int(causes[i]))
        stack = stacks.setdefault(th, [])
        if k == BEGIN:
            stack.append((key[0], key[1], t, int(vals[i])))
            continue
        for j in range(len(stack) - 1, -1, -1):
            if (stack[j][0], stack[j][1]) == key:
                nm, c, t0, v = stack.pop(j)
                out.append(SpanRec(tl.names[nm], c, t0, t, th, j, v))
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


def _segments(spans: list[SpanRec], t0: int, t1: int) -> list[tuple[int, int, SpanRec | None, SpanRec | None]]:
    """Split [t0, t1] at every span boundary: (start, end, innermost cause span, innermost module span)."""
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
        segs.append((a, b, _innermost(active, True), _innermost(mods, False)))
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


def _cover(segs, starts: list[int], a: int, b: int) -> tuple[SpanRec | None, SpanRec | None]:
    """The cause span covering most of [a, b] (None if mostly no cause), and the module there.

    segs are contiguous and sorted; `starts` holds their start times, so only the segments that
    overlap [a, b] are visited (a binary search finds the first): linear in the samples overall."""
    first = max(0, bisect.bisect_right(starts, a) - 1)
    weight: dict[SpanRec | None, int] = {}
    mod_weight: dict[SpanRec | None, int] = {}
    for k in range(first, len(segs)):
        s0, s1, cause_span, mod_span = segs[k]
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


def attribute_pass(
    tl: Timeline,
    pass_name: str,
    *,
    calibration: Calibration | None = None,
    steady_faults: float = 0.0,
    evidence: dict[str, str] | None = None,
    inferred: list[dict] | None = None,
    window: tuple[int, int] | None = None,
) -> PassAttribution:
    """Attribute one recorded pass (the span named `pass:<pass_name>`) to causes.

    window: the pass's own clock reads (start_ns, end_ns); they give the pass time even if the
    recorder lost records. Faults warmprof's own buffers took in the pass (Timeline.own_fault_ns)
    are never charged to the model's allocator."""
    calibration = calibration or Calibration()
    evidence = evidence or {}
    all_spans = build_spans(tl)
    ps = _pass_span(all_spans, tl, pass_name, window)
    if ps is None:
        return PassAttribution(0.0, [], [])
    t0, t1, th = ps.start_ns, ps.end_ns, ps.thread
    in_window = [s for s in all_spans if s.end_ns > t0 and s.start_ns < t1 and s.name != ps.name]
    mine = [s for s in in_window if s.thread == th]
    off_thread_ns = sum(min(s.end_ns, t1) - max(s.start_ns, t0) for s in in_window if s.thread != th and s.cause != STRUCTURE)
    segs = _segments(mine, t0, t1)
    seg_starts = [sg[0] for sg in segs]

    parts: dict[tuple[str, str], Part] = {}

    def part(cause: str, source: str, ev: str) -> Part:
        key = (cause, source)
        if key not in parts:
            parts[key] = Part(cause, source, ev)
        return parts[key]

    counted: set[SpanRec] = set()
    free_by_module: dict[str, float] = {}  # time outside every cause span, by innermost module
    for a, b, cause_span, mod_span in segs:
        if cause_span is None:
            mod = _module_of(mod_span)
            free_by_module[mod] = free_by_module.get(mod, 0.0) + (b - a)
            continue
        src = source_of(cause_span.name)
        p = part(cause_name(cause_span.cause), src, evidence.get(src, "measured"))
        p.ns += b - a
        mod = _module_of(mod_span)
        p.by_module[mod] = p.by_module.get(mod, 0.0) + (b - a)
        if cause_span not in counted:
            counted.add(cause_span)
            p.count += 1

    result = PassAttribution(pass_ms=(t1 - t0) / 1e6, parts=[], spans=[ps] + mine,
                             off_thread_ms=off_thread_ns / 1e6,
                             unmatched=sum(1 for s in mine if not s.closed))

    # Page faults: inside a cause span they belong to it; outside, minus the steady pass's own,
    # they are an allocator estimate.
    fault_deltas = _counter_deltas(tl, FAULT_COUNTERS, t0, t1)
    outside_by_module: dict[str, int] = {}
    for a, b, d in fault_deltas:
        result.faults += d
        cause_span, mod_span = _cover(segs, seg_starts, a, b)
        if cause_span is None:
            mod = _module_of(mod_span)
            outside_by_module[mod] = outside_by_module.get(mod, 0) + d
    outside = sum(outside_by_module.values())
    result.faults_outside_causes = outside
    result.own_faults = int(np.count_nonzero((tl.own_fault_ns >= t0) & (tl.own_fault_ns <= t1)))
    extra = max(0.0, outside - steady_faults - result.own_faults)
    if extra > 0 and calibration.fault_cost_ns > 0:
        scale = extra / outside
        p = part("allocator_growth", "host_faults", "estimated")
        p.count += int(round(extra))
        for mod, d in outside_by_module.items():
            ns = d * scale * calibration.fault_cost_ns
            p.ns += ns
            p.by_module[mod] = p.by_module.get(mod, 0.0) + ns

    # Threads started outside cause spans: the runtime's pools starting inside the pass.
    thread_deltas = _counter_deltas(tl, (THREAD_COUNTER,), t0, t1)
    for a, b, d in thread_deltas:
        if d <= 0:
            continue
        result.new_threads += d
        cause_span, mod_span = _cover(segs, seg_starts, a, b)
        if cause_span is None and calibration.thread_start_ns > 0:
            p = part("runtime_init", "thread_pool", "estimated")
            ns = d * calibration.thread_start_ns
            p.ns += ns
            p.count += d
            mod = _module_of(mod_span)
            p.by_module[mod] = p.by_module.get(mod, 0.0) + ns

    # warmprof's own module hooks: instrumented passes pay them, steady passes do not. Each module
    # call (a module span on the pass thread) x the calibrated cost per call, where the module is.
    if calibration.hook_cost_ns > 0:
        calls: dict[str, int] = {}
        for s in mine:
            if s.name.startswith(MODULE_PREFIX):
                mod = _module_of(s)
                calls[mod] = calls.get(mod, 0) + 1
        if calls:
            p = part("profiler_overhead", "module_hooks", "estimated")
            for mod, n in calls.items():
                p.ns += n * calibration.hook_cost_ns
                p.count += n
                p.by_module[mod] = p.by_module.get(mod, 0.0) + n * calibration.hook_cost_ns

    # Figures no span brackets (a clock ramp inferred from clock samples), added as given.
    for e in inferred or []:
        p = part(e["cause"], e["source"], e.get("evidence", "inferred"))
        p.ns += e["ms"] * 1e6
        p.count += int(e.get("count", 1))
        mod = e.get("module", "")
        p.by_module[mod] = p.by_module.get(mod, 0.0) + e["ms"] * 1e6

    result.parts = sorted(parts.values(), key=lambda p: -p.ns)
    # Estimates (faults, threads) and inferred figures sit in time no cause span covers: what is
    # left of that time after them is unexplained. Spans' own parts were never in free time.
    span_sources = {(cause_name(s.cause), source_of(s.name)) for s in counted}
    unexplained = dict(free_by_module)
    for key, p in parts.items():
        if key in span_sources:
            continue
        for mod, ns in p.by_module.items():
            unexplained[mod] = unexplained.get(mod, 0.0) - ns
    result.unexplained_by_module = unexplained
    return result


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

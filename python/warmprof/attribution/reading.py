"""Reading a recorded timeline: begin/end records matched into spans, the pass cut into segments at
every span boundary (each with its innermost cause span, module and op), and counters sampled at span
boundaries turned into steps, each placed under the cause span covering most of its interval."""

from __future__ import annotations

import bisect
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from ..gc_spans import PREFIX as GC_PREFIX
from ..timeline import (
    BEGIN,
    COUNTER,
    END,
    FILE_COUNTER,
    JIT_COMPILE,
    RSS_COUNTER,
    STRUCTURE,
    Timeline,
    source_of,
)
from .parts import SpanRec

MODULE_PREFIX = "module:"
OP_PREFIX = "op:"  # the op view's spans (instruments/aten_ops.py): structure, nested in modules


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
    return max(weight, key=weight.__getitem__), max(mod_weight, key=mod_weight.__getitem__)


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


def _step_growth(tl: Timeline, name: str, steps: Sequence[CounterStep]) -> tuple[int, ...]:
    """How much one counter sampled at the same boundaries as `steps` grew across each of them (the
    sample at or before its end less the one at or before its start); empty when it was never sampled."""
    ts, vals = _counter_series(tl, name)
    if not steps or not ts:
        return ()

    def at(t: int) -> int | None:
        k = bisect.bisect_right(ts, t) - 1
        return None if k < 0 else vals[k]

    out = []
    for st in steps:
        a, b = at(st.start_ns), at(st.end_ns)
        out.append(0 if a is None or b is None else max(0, b - a))
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


def _nested_in_compiles(spans: Sequence[SpanRec], prefixes: str | tuple[str, ...], *,
                        compiles_from_cupti: bool = True) -> list[SpanRec]:
    """The cause spans named with one of `prefixes` that sit inside a jit_compile span (those
    CUPTI recorded left out when `compiles_from_cupti` is False: a PTX load is itself one)."""
    compiles = [c for c in spans if c.cause == JIT_COMPILE and (compiles_from_cupti or source_of(c.name) != "cupti")]
    if not compiles:
        return []
    return [s for s in spans if s.cause != STRUCTURE and s.name.startswith(prefixes)
            and any(c.start_ns <= s.start_ns and s.end_ns <= c.end_ns for c in compiles)]


def _imports_inside_compiles(spans: Sequence[SpanRec]) -> set[int]:
    """ids of the python_import spans nested in a jit_compile span (inductor importing its own
    modules as it compiles)."""
    return {id(s) for s in _nested_in_compiles(spans, "python_import:")}


def _kept_in_compiles(spans: Sequence[SpanRec]) -> set[int]:
    """ids of the spans whose time stays the compile's that holds them: Python imports and garbage
    collections nested in a jit_compile span (the compiler's own imports and the collections its
    allocations trigger; torch's compile timers count both)."""
    return {id(s) for s in _nested_in_compiles(spans, ("python_import:", GC_PREFIX))}

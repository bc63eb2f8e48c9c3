"""The `warmprof run` process's side: each process's record (agent.py) read back, cut into phases on the
one clock, each phase attributed by the trace's engine, the first watched calls against steady ones, and
the path from the command's start to ready and to the first response split by process, phase and cause.

Phases. A process's life is covered by contiguous phases, so they add up to it exactly:
- `interpreter start`: from the process's start (/proc/<pid>/stat, 10 ms resolution) to warmprof's hook:
  the interpreter's own start-up, before anything could be recorded (no causes; its time is unattributed);
- `warmprof start-up`: the agent's own start (warmprof's cost, not a cause);
- then, on the main thread, the named intervals, in this order of precedence where they overlap: an
  engine's own phases (its timed functions, engines.py), a watched class's build, the watched calls, dynamo
  compiles, the outermost imports (one phase per top-level package, consecutive imports of a package
  merged); what none of them covers is `(unnamed code)`.
Each phase is a module span of one recorded window, attributed once by attribution.attribute_pass and
split by phase as the trace's set-up steps are (traces/setup_phase.py), so a phase carries its own
causes and they add up to at most its time.

The path. From the command's start, the path is in the root process; wherever the process it is in was
blocked (its main thread neither running nor waiting for a CPU for most of a sample) while a process it
started was running, the path goes down to that process (the youngest running one) until it blocks in
turn or ends; where every process of the tree below it was blocked too, to the youngest of them (the
deepest waiter: a model process waiting for its compiler, which is not Python and not recorded). Each sample of the path is booked to the phase its process was in, so the path's phases
add up to the time to ready and to the first response exactly; each phase's causes are booked in
proportion to the share of the phase on the path.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..attribution import attribute_pass
from ..causes import Name
from ..errors import ReportError
from ..gc_spans import PREFIX as GC_PREFIX
from ..timeline import COUNTER, STRUCTURE, Timeline
from . import agent as A
from . import ops

INTERPRETER = "interpreter start"
OWN = "warmprof start-up"
UNNAMED = "(unnamed code)"
RUN_PASS = "run"
MIN_PIECE_NS = 1_000_000
IMPORT_GAP_NS = 10_000_000  # outermost imports of one package this close together are one phase  # a piece of a phase cut by a higher one, below this, goes to its neighbours
BLOCKED_BELOW = 0.5  # a sample where the main thread ran or waited for a CPU less than this share is blocked


@dataclass
class ProcRecord:
    meta: dict[str, Any]
    timeline: Timeline
    main_index: int | None

    @property
    def pid(self) -> int:
        return int(self.meta["pid"])


@dataclass
class Phase:
    name: str
    start_ns: int
    end_ns: int
    source: str  # "warmprof", "vllm log", "watch", "imports", "dynamo", ""
    detail: str = ""
    logged_s: float | None = None  # the engine's own figure for it, where it logs one

    @property
    def ns(self) -> int:
        return self.end_ns - self.start_ns


def read_records(out_dir: str) -> tuple[list[ProcRecord], list[str]]:
    """Every process record in out_dir; and what could not be read (one line each)."""
    import numpy as np

    records, problems = [], []
    for entry in sorted(os.listdir(out_dir)):
        if not (entry.startswith("proc-") and entry.endswith(".json")):
            continue
        base = os.path.join(out_dir, entry[:-5])
        try:
            with open(base + ".json") as f:
                meta = json.load(f)
            with np.load(base + ".npz") as z:
                arrays = {k: z[k] for k in z.files}
        except (OSError, ValueError, KeyError) as e:
            problems.append(f"{entry}: unreadable ({type(e).__name__}: {e})")
            continue
        tl = Timeline(ts_ns=arrays["ts_ns"], kind=arrays["kind"], cause=arrays["cause"], name=arrays["name"],
                      value=arrays["value"], thread=arrays["thread"], names=list(meta["names"]),
                      dropped=int(meta.get("dropped", 0)), threads=len(meta.get("os_tids", [])),
                      os_tids=list(meta.get("os_tids", [])), own_fault_ns=arrays["own_fault_ns"])
        tids = list(meta.get("os_tids", []))
        main = tids.index(meta["main_tid"]) if meta.get("main_tid") in tids else None
        records.append(ProcRecord(meta, tl, main))
    return records, problems


def with_main_track(rec: ProcRecord) -> Timeline:
    """The record's timeline with the main thread's clocks, as the agent's sampler read them (under
    agent.SAMPLED_PREFIX names, on the sampler's track), renamed to the engine's names and moved onto the
    main thread's track, where the engine reads a pass thread's clocks; a main thread that recorded
    nothing gets a track of its own."""
    import numpy as np

    tl = rec.timeline
    main = rec.main_index
    if main is None:
        main = (int(tl.thread.max()) + 1) if len(tl) else 0
        rec.main_index = main
    names = list(tl.names)
    name = tl.name.copy()
    thread = tl.thread.copy()
    for engine_name in A.MAIN_THREAD_COUNTERS.values():
        sampled = A.SAMPLED_PREFIX + engine_name
        if sampled not in names:
            continue
        if engine_name not in names:
            names.append(engine_name)
        sel = (tl.name == names.index(sampled)) & (tl.kind == COUNTER)
        name[sel] = names.index(engine_name)
        thread[sel] = main
    value = tl.value.copy()
    voluntary = A.MAIN_THREAD_COUNTERS["voluntary"]
    if A.ASLEEP_COUNTER in names and voluntary in names:
        # every main-thread voluntary-switch count (the sampler's and a watched call's own) plus the
        # samples that had found the thread asleep by then, each counted in the interval that ends at it
        # and in the one that starts there (the thread slept on both sides of it): one series, never
        # going back. (The asleep counter is cumulative at each of its samples.)
        asleep = (tl.name == names.index(A.ASLEEP_COUNTER)) & (tl.kind == COUNTER)
        a_ts, a_val = tl.ts_ns[asleep], tl.value[asleep]
        sel = (name == names.index(voluntary)) & (tl.kind == COUNTER) & (thread == main)
        if a_ts.size and sel.any():
            t = tl.ts_ns[sel]
            le = np.searchsorted(a_ts, t, side="right") - 1  # the last asleep sample at or before t
            lt = np.searchsorted(a_ts, t, side="left") - 1  # ... strictly before t
            value[sel] = (tl.value[sel] + np.where(le >= 0, a_val[np.maximum(le, 0)], 0)
                          + np.where(lt >= 0, a_val[np.maximum(lt, 0)], 0))
    return dataclasses.replace(tl, name=name.astype(tl.name.dtype), thread=thread, value=value, names=names,
                               threads=max(tl.threads, main + 1))


def _outermost(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    out: list[tuple[int, int, str]] = []
    for a, b, n in sorted(spans):
        if out and a < out[-1][1]:
            continue
        out.append((a, b, n))
    return out


def thread_spans(tl: Timeline, thread: int, prefix: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of the spans on one thread whose name starts with `prefix`, matched begin to end."""
    out = []
    stack: dict[int, list[int]] = {}
    pre = [n.startswith(prefix) for n in tl.names]
    for i in range(len(tl)):
        if int(tl.thread[i]) != thread:
            continue
        nm = int(tl.name[i])
        if not pre[nm]:
            continue
        k = int(tl.kind[i])
        if k == 0:
            stack.setdefault(nm, []).append(int(tl.ts_ns[i]))
        elif k == 1 and stack.get(nm):
            a = stack[nm].pop()
            out.append((a, int(tl.ts_ns[i]), tl.names[nm]))
    return out


Spans = dict[int, list[tuple[int, int]]]  # per OS thread id: (start_ns, end_ns), by start


def own_spans(rec: ProcRecord) -> Spans:
    """warmprof's own spans (the agent's clock reads and records, the op watch's bookkeeping) per OS thread
    id, outermost only, by start, less the garbage collections inside them: a collection is a span of its own
    (garbage_collection, booked by the engine as the innermost span), so its time is not warmprof's too."""
    tl = rec.timeline
    if A.OWN_SPAN not in tl.names or not len(tl):
        return {}
    tids = list(rec.meta.get("os_tids", []))
    own = _outermost_by_tid(tl, tids, [tl.names.index(A.OWN_SPAN)])
    collections = [k for k, n in enumerate(tl.names) if n.startswith(GC_PREFIX)]
    return _less(own, _outermost_by_tid(tl, tids, collections)) if collections else own


def _outermost_by_tid(tl: Any, tids: list[int], nids: list[int]) -> Spans:
    """The spans of the names `nids` per OS thread id, outermost only, by start: their records are picked
    out first (a recording holds far more of other names)."""
    import numpy as np

    sel = np.flatnonzero(np.isin(tl.name, nids) & (tl.kind <= 1))
    open_at: dict[int, list[int]] = {}
    out: Spans = {}
    for i in sel.tolist():
        th = int(tl.thread[i])
        if int(tl.kind[i]) == 0:
            open_at.setdefault(th, []).append(int(tl.ts_ns[i]))
        elif open_at.get(th):
            a = open_at[th].pop()
            if not open_at[th] and th < len(tids):  # an outermost one ended
                out.setdefault(int(tids[th]), []).append((a, int(tl.ts_ns[i])))
    for v in out.values():
        v.sort()
    return out


def _less(spans: Spans, holes: Spans) -> Spans:
    """Each thread's spans with its holes cut out (both by start)."""
    out: Spans = {}
    for tid, v in spans.items():
        for a, b in v:
            for ha, hb in holes.get(tid, []):
                if hb <= a or ha >= b:
                    continue
                if ha > a:
                    out.setdefault(tid, []).append((a, ha))
                a = max(a, hb)
            if b > a:
                out.setdefault(tid, []).append((a, b))
    return out


def candidate_phases(rec: ProcRecord, engine_phases: list[Phase]) -> list[list[Phase]]:
    """The named intervals of a process, in order of precedence (each list before the next)."""
    m = rec.meta
    main_tid = m.get("main_tid")
    builds = [Phase(f"build {b['label']}", b["start_ns"], b["end_ns"], "watch") for b in m.get("builds", [])
              if b.get("tid") == main_tid]
    seen: set[tuple[str, str]] = set()
    calls = []
    for c in m.get("calls", []):
        if c.get("tid") != main_tid:
            continue
        first = (c["label"], c["key"]) not in seen
        seen.add((c["label"], c["key"]))
        calls.append(Phase(f"{'first call' if first else 'calls'} {c['label']}" + (f" [{c['key']}]" if first else ""),
                           c["start_ns"], c["end_ns"], "watch"))
    imports: list[Phase] = []
    if rec.main_index is not None:
        for a, b, n in _outermost(thread_spans(rec.timeline, rec.main_index, A.IMPORT_SOURCE + ":")):
            name = f"import {n.split(':', 1)[1].split('.', 1)[0]}"
            if imports and imports[-1].name == name and a - imports[-1].end_ns < IMPORT_GAP_NS:
                imports[-1] = dataclasses.replace(imports[-1], end_ns=b)  # the code between them is the package's
            else:
                imports.append(Phase(name, a, b, "imports"))
    compiles = [Phase("compile (dynamo)", c["start_ns"], c["end_ns"], "dynamo") for c in m.get("compiles", [])
                if c.get("tid") == main_tid]
    # a compile imports what it needs lazily: the import is a cause inside the compile's phase, not a phase
    return [engine_phases, builds, calls, _outermost_phases(compiles), imports]


def _outermost_phases(ps: list[Phase]) -> list[Phase]:
    out: list[Phase] = []
    for p in sorted(ps, key=lambda p: p.start_ns):
        if out and p.start_ns < out[-1].end_ns:
            continue
        out.append(p)
    return out


def cover(window: tuple[int, int], ranked: list[list[Phase]]) -> list[Phase]:
    """Contiguous phases over `window`: the candidates by precedence (a later one keeps only the parts
    no earlier one took; pieces under MIN_PIECE_NS dropped), the gaps `(unnamed code)`, neighbours of the
    same name merged."""
    t0, t1 = window
    taken: list[Phase] = []
    for group in ranked:
        for p in group:
            a, b = max(p.start_ns, t0), min(p.end_ns, t1)
            pieces = [(a, b)] if b > a else []
            for q in taken:
                nxt = []
                for x, y in pieces:
                    if y <= q.start_ns or x >= q.end_ns:
                        nxt.append((x, y))
                        continue
                    if x < q.start_ns:
                        nxt.append((x, q.start_ns))
                    if y > q.end_ns:
                        nxt.append((q.end_ns, y))
                pieces = nxt
            for x, y in pieces:
                if y - x >= MIN_PIECE_NS or (x, y) == (a, b):
                    taken.append(dataclasses.replace(p, start_ns=x, end_ns=y))
    taken.sort(key=lambda p: p.start_ns)
    out: list[Phase] = []
    at = t0
    for p in taken:
        if p.start_ns > at:
            out.append(Phase(UNNAMED, at, p.start_ns, ""))
        out.append(p)
        at = p.end_ns
    if at < t1:
        out.append(Phase(UNNAMED, at, t1, ""))
    merged: list[Phase] = []
    for p in out:
        if merged and merged[-1].name == p.name and merged[-1].end_ns == p.start_ns and p.name.startswith(
                ("import ", UNNAMED, "calls ", "compile")):
            merged[-1] = dataclasses.replace(merged[-1], end_ns=p.end_ns)
        else:
            merged.append(p)
    return merged


def phase_timeline(tl: Timeline, main: int, phases: list[Phase], window: tuple[int, int]) -> tuple[Timeline, list[str]]:
    """tl with the pass span `pass:run` over window and each phase a module span (distinct names) on the
    main thread's track; the step names, in order."""
    import numpy as np

    names = list(tl.names)
    recs_ts, recs_kind, recs_name = [], [], []

    def nid(n: str) -> int:
        names.append(n)
        return len(names) - 1

    steps = []
    pid = nid(f"pass:{RUN_PASS}")
    recs_ts += [window[0], window[1]]
    recs_kind += [0, 1]
    recs_name += [pid, pid]
    for i, p in enumerate(phases):
        step = f"{i:03d} {p.name}"
        steps.append(step)
        k = nid(f"module:{step}")
        recs_ts += [p.start_ns, p.end_ns]
        recs_kind += [0, 1]
        recs_name += [k, k]
    n = len(recs_ts)
    ts = np.concatenate([tl.ts_ns, np.asarray(recs_ts, dtype=np.int64)])
    # a phase's end sorts before the next one's begin at the same instant (stable: ends were added first per pair)
    order = np.lexsort((np.concatenate([np.full(len(tl), 1), np.where(np.asarray(recs_kind) == 1, 0, 2)]), ts))
    cat = lambda a, b: np.concatenate([a, b])[order]  # noqa: E731
    out = Timeline(
        ts_ns=ts[order],
        kind=cat(tl.kind, np.asarray(recs_kind, dtype=np.uint8)),
        cause=cat(tl.cause, np.full(n, STRUCTURE, dtype=np.uint8)),
        name=cat(tl.name, np.asarray(recs_name, dtype=np.uint32)),
        value=cat(tl.value, np.zeros(n, dtype=np.int64)),
        thread=cat(tl.thread, np.full(n, main, dtype=np.uint16)),
        names=names, dropped=tl.dropped, threads=max(tl.threads, main + 1), os_tids=tl.os_tids,
        thinned=tl.thinned, own_fault_ns=tl.own_fault_ns)
    return out, steps


def attribute_process(rec: ProcRecord, engine_phases: list[Phase], calibration: Any, origin_ns: int) -> dict[str, Any]:
    """One process of the report: its phases on the run's clock (ms from origin_ns), each with its causes."""
    from ..traces.setup_phase import in_step, step_entry

    m = rec.meta
    t_agent, t_ready, t_end = int(m["t_agent_ns"]), int(m["t_ready_ns"]), int(m["t_end_ns"])
    t_start = m.get("t_start_ns")
    if t_start is None or t_start > t_agent:
        t_start = t_agent
    t_start = max(int(t_start), min(origin_ns, t_agent))  # read at 10 ms resolution: never before the run began
    tl = with_main_track(rec)
    rec.timeline = tl
    main = rec.main_index if rec.main_index is not None else 0
    phases = cover((t_ready, t_end), candidate_phases(rec, engine_phases))
    tl2, steps = phase_timeline(tl, main, phases, (t_ready, t_end))
    att = attribute_pass(tl2, RUN_PASS, calibration=calibration, steady_faults=0, window=(t_ready, t_end))
    own_ms = sum(p.ms for p in att.parts if p.cause == Name.PROFILER_OVERHEAD)
    rows: list[dict[str, Any]] = []

    def rel(t: int) -> float:
        return (t - origin_ns) / 1e6

    res = float(m.get("start_resolution_ns") or 0.0)
    head = [Phase(INTERPRETER, int(t_start), t_agent, "process",
                  detail=(f"from the process's start (read at {res / 1e6:.0f} ms resolution) to warmprof's start-up hook: "
                          "the interpreter's own start, before anything is recorded" if m.get("forked_from") is None
                          else f"forked from pid {m['forked_from']}")),
            Phase(OWN, t_agent, t_ready, "warmprof", detail="warmprof's agent starting in this process (its own cost)")]
    for p in head:
        rows.append({"name": p.name, "start_ms": rel(p.start_ns), "ms": p.ns / 1e6, "causes": [],
                     "unattributed_ms": p.ns / 1e6 if p.name == INTERPRETER else 0.0, "source": p.source,
                     "own": p.name == OWN, "detail": p.detail})
    for p, step in zip(phases, steps):
        ms = p.ns / 1e6
        entry = step_entry(p.name, ms, in_step(att.parts, step, ms))
        for c in entry["causes"]:
            c["module"] = p.name
        entry.update({"start_ms": rel(p.start_ns), "source": p.source, "own": False})
        if p.detail:
            entry["detail"] = p.detail
        if p.logged_s is not None:
            entry["logged_ms"] = p.logged_s * 1000.0
        rows.append(entry)
    return {"phases": rows, "own_ms": own_ms + (t_ready - t_agent) / 1e6, "start_ms": rel(int(t_start)),
            "end_ms": rel(t_end)}


def first_calls(rec: ProcRecord, calibration: Any, origin_ns: int) -> list[dict[str, Any]]:
    """Per (label, key): the first call against the median of the later ones at that key, its excess
    attributed by the engine over the first call's window (steady faults and waits: the later calls' medians),
    with the first-call costs of the watched ops inside it (ops.figures)."""
    import statistics

    m = rec.meta
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for c in m.get("calls", []):
        by.setdefault((c["label"], c["key"]), []).append(c)
    tids = list(m.get("os_tids", []))
    out = []
    for (label, key), calls in by.items():
        first = calls[0]
        ms = (first["end_ns"] - first["start_ns"]) / 1e6
        later = [(c["end_ns"] - c["start_ns"]) / 1e6 for c in calls[1:]]
        entry: dict[str, Any] = {"label": label, "key": key, "calls": len(calls), "start_ms": (first["start_ns"] - origin_ns) / 1e6,
                                 "first_ms": ms, "steady_ms": statistics.median(later) if later else None}
        if later:
            excess = ms - entry["steady_ms"]
            entry["excess_ms"] = excess
            th = tids.index(first["tid"]) if first.get("tid") in tids else None
            if th is not None and excess > 0:
                # a later call's own wait for a CPU and its own blocked time (a request waits for the engine
                # every time): taken off the first call's, as a trace takes a steady pass's off (their medians)
                delays = [c.get("run_delay_ns", 0) for c in calls[1:]]
                blocked = [max(0, (c["end_ns"] - c["start_ns"]) - c.get("cpu_ns", 0) - c.get("run_delay_ns", 0))
                           for c in calls[1:] if "cpu_ns" in c]
                tl, _ = phase_timeline(rec.timeline, th, [], (first["start_ns"], first["end_ns"]))
                att = attribute_pass(tl, RUN_PASS, calibration=calibration, steady_faults=0,
                                     steady_run_delay_ns=statistics.median(delays) if delays else 0.0,
                                     steady_off_cpu_ns=statistics.median(blocked) if blocked else 0.0,
                                     window=(first["start_ns"], first["end_ns"]),
                                     inferred=ops.figures(m.get("ops") or {}, first["tid"], (first["start_ns"], first["end_ns"]),
                                                          fault_ns=getattr(calibration, "fault_cost_ns", 0.0) or 0.0))
                causes: list[dict[str, Any]] = [{"cause": p.cause, "ms": p.ms, "evidence": p.evidence, "source": p.source,
                                                  "count": int(p.count), "detail": p.detail}
                          for p in att.parts if p.cause != Name.PROFILER_OVERHEAD and p.ms > 0]
                causes.sort(key=lambda c: -c["ms"])
                entry["causes"] = causes
                entry["unattributed_ms"] = excess - sum(c["ms"] for c in causes)
        out.append(entry)
    out.sort(key=lambda e: e["start_ms"])
    return out


def busy_series(rec: ProcRecord) -> tuple[list[int], list[float]]:
    """(sample times, share of each interval the main thread ran or waited for a CPU) from its clocks."""
    tl = rec.timeline
    cpu_id = tl.names.index(A.MAIN_THREAD_COUNTERS["cpu_ns"]) if A.MAIN_THREAD_COUNTERS["cpu_ns"] in tl.names else None
    dl_id = tl.names.index(A.MAIN_THREAD_COUNTERS["run_delay_ns"]) if A.MAIN_THREAD_COUNTERS["run_delay_ns"] in tl.names else None
    if cpu_id is None:
        return [], []
    main = tl.thread == (rec.main_index if rec.main_index is not None else -1)
    sel_cpu = (tl.name == cpu_id) & (tl.kind == COUNTER) & main
    ts = tl.ts_ns[sel_cpu].tolist()
    cpu = tl.value[sel_cpu].tolist()
    delay = (tl.value[(tl.name == dl_id) & (tl.kind == COUNTER) & main].tolist() if dl_id is not None
             else [0] * len(ts))
    if len(delay) != len(ts):
        delay = [0] * len(ts)
    shares = []
    for k in range(1, len(ts)):
        dt = ts[k] - ts[k - 1]
        shares.append(((cpu[k] - cpu[k - 1]) + (delay[k] - delay[k - 1])) / dt if dt > 0 else 1.0)
    return ts, shares


@dataclass
class PathStep:
    pid: int
    index: int  # the phase's index in its process's phases (-1: the process had not started)
    phase: str
    ns: int


@dataclass
class Tree:
    procs: dict[int, dict[str, Any]] = field(default_factory=dict)  # pid -> process entry (with "phases")
    busy: dict[int, tuple[list[int], list[float]]] = field(default_factory=dict)
    children: dict[int, list[int]] = field(default_factory=dict)

    def phase_at(self, pid: int, t_ms: float) -> int:
        ps = self.procs[pid]["phases"]
        starts = [p["start_ms"] for p in ps]
        return max(0, bisect.bisect_right(starts, t_ms) - 1)

    def alive(self, pid: int, t_ms: float) -> bool:
        p = self.procs[pid]
        return p["start_ms"] <= t_ms < p["end_ms"]

    def running(self, pid: int, t_ns: int) -> bool:
        ts, shares = self.busy.get(pid, ([], []))
        if not ts:
            return True
        k = bisect.bisect_right(ts, t_ns) - 1
        if k < 0 or k >= len(shares):
            return True  # before its first sample (start-up) or after its last: taken as running
        return shares[k] >= BLOCKED_BELOW

    def descendants(self, pid: int) -> list[int]:
        out = []
        for c in self.children.get(pid, []):
            out += [c, *self.descendants(c)]
        return out


def critical_path(tree: Tree, root: int, origin_ns: int, until_ns: int, step_ns: int) -> list[PathStep]:
    """The path from origin_ns to until_ns in steps of step_ns (the last one shorter): in `root` unless it
    was blocked while one of its descendants ran (then the youngest running one), as the module doc says."""
    out: list[PathStep] = []
    t = origin_ns
    while t < until_ns:
        dt = min(step_ns, until_ns - t)
        mid = t + dt // 2
        t_ms = (mid - origin_ns) / 1e6
        at = root
        if not tree.alive(root, t_ms) or not tree.running(root, mid):
            live = [d for d in tree.descendants(root) if tree.alive(d, t_ms)]
            runners = [d for d in live if tree.running(d, mid)]
            # none running: everyone waits, the youngest the deepest (on something unrecorded: a compiler
            # process, the disk, the network); the path is where that wait is
            pick = runners or live
            if pick:
                at = max(pick, key=lambda d: tree.procs[d]["start_ms"])
        if at in tree.procs and tree.alive(at, t_ms):
            index = tree.phase_at(at, t_ms)
            phase = tree.procs[at]["phases"][index]["name"]
        else:
            index, phase = -1, "(not started)"
        if out and out[-1].pid == at and out[-1].index == index:
            out[-1].ns += dt
        else:
            out.append(PathStep(at, index, phase, dt))
        t += dt
    return out


def path_split(tree: Tree, steps: list[PathStep]) -> dict[str, Any]:
    """The path's time by (process, phase), and by cause: each phase's causes booked in proportion to
    the share of that phase (the one phase, not every phase of its name) on the path; what its causes
    leave is unattributed; warmprof's own start-up its own line."""
    on_path: dict[tuple[int, int], float] = {}
    names: dict[tuple[int, int], str] = {}
    for s in steps:
        on_path[(s.pid, s.index)] = on_path.get((s.pid, s.index), 0.0) + s.ns / 1e6
        names[(s.pid, s.index)] = s.phase
    by_cause: dict[str, float] = {}
    by_name: dict[tuple[int, str], float] = {}
    own = unattributed = 0.0
    for (pid, index), ms in on_path.items():
        by_name[(pid, names[(pid, index)])] = by_name.get((pid, names[(pid, index)]), 0.0) + ms
        phases = tree.procs.get(pid, {}).get("phases", [])
        if index < 0 or index >= len(phases):
            unattributed += ms
            continue
        ph = phases[index]
        if ph.get("own"):
            own += ms
            continue
        frac = ms / ph["ms"] if ph["ms"] > 0 else 0.0
        booked = 0.0
        for c in ph["causes"]:
            by_cause[c["cause"]] = by_cause.get(c["cause"], 0.0) + c["ms"] * frac
            booked += c["ms"] * frac
        unattributed += ms - booked
    rows: list[dict[str, Any]] = [{"pid": pid, "phase": name, "ms": ms} for (pid, name), ms in by_name.items()]
    rows.sort(key=lambda r: -r["ms"])
    return {"by_phase": rows, "by_cause": dict(sorted(by_cause.items(), key=lambda kv: -kv[1])),
            "own_ms": own, "unattributed_ms": unattributed}


def check_records(records: list[ProcRecord]) -> None:
    for r in records:
        for key in ("pid", "t_agent_ns", "t_ready_ns", "t_end_ns"):
            if key not in r.meta:
                raise ReportError(f"process record of pid {r.meta.get('pid')}: no {key}")

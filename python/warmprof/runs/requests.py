"""The first request's excess split across the process tree.

The first request (the call that ends the first response: vLLM's LLM.generate, or the first watched
call) against the later requests of the same key. Its window, and each later one's, is cut into parts
by the deepest recorded call that covers each instant: a call of a process deeper in the tree lies
inside the wait of the one above it (vLLM: the main process waits on EngineCore's steps, which wait on
the Worker's execute_model and sample_tokens), and whatever no call of another process covers is the
request's own part ("between steps": its way in and out, the engine's loop between steps, the sockets).
The parts of a window add up to it; the steady request's parts are those of the later request with the
median length (the mean of the two middle ones for an even count), so they add up to the steady figure,
and each part's excess (first less steady) adds up to the request's excess.

Each part's excess is then booked to causes:
- a part made of a process's calls: the excess causes of the calls in the first window that were the
  first at their key (as `first_calls` attributed them, each against the later calls at its key), up to
  the part's excess (scaled down to it when they add up to more), and where its calls are the deepest
  (none holds another process's calls), the extra wait for a CPU of its other calls there (the part's run
  delay, first window less steady, less its first calls' own beyond their later calls', which first_calls
  booked as contention or left inside a cause span's time); the request's own part, the request's own
  causes. A call books no wait where another process's calls lie inside it (what it waited on is the deeper part's), nor the causes of its own process's first
  calls nested in it (first_calls measured it over its whole window; those are booked in their own part);
- a part whose process did not run first calls there: its extra wait for a CPU (the run delay its calls'
  or the request's clocks measured, first window less steady), up to the part's excess;
- warmprof's own time in the part (its own spans: a watched call's clock reads and record, the op watch's
  timed calls' bookkeeping) at the instants the part owns, of its process and of those under it (a step's
  record in the Worker lies inside the engine's step), first window less steady, where `own_spans` gives
  them: its own line (profiler_overhead, `own_ms`), never a cause of the model's; the share explained is
  the causes' share of the excess less it (warmprof's own cost on neither side);
- what is left is unattributed (negative where a part ran faster the first time). Where a part's calls are
  the deepest and each first call has its own excess, `later_ms` says how much of the part's excess its
  other calls (not the first at their key) made: the part's excess less its first calls' own (vLLM's later
  decode steps in the first request, slower than the steady request's).
"""

from __future__ import annotations

import bisect
import heapq
import statistics
from typing import Any

from ..causes import Name
from .agent import CHECKPOINT_END

OUTSIDE = "between steps"  # the request's own part: what no call of another process covers


def _depths(children: dict[int, list[int]], root: int) -> dict[int, int]:
    out, todo = {root: 0}, [root]
    while todo:
        pid = todo.pop()
        for c in children.get(pid, []):
            if c not in out:
                out[c] = out[pid] + 1
                todo.append(c)
    return out


def _segments(window: tuple[int, int], calls: list[tuple[int, int, int, int, str]],
              root: int) -> list[tuple[int, int, tuple[int, str]]]:
    """The window cut by owner: (lo, hi, (pid, label)) in time order, the owner at each instant the deepest
    call covering it (the one that started last among equals), else (root, OUTSIDE). calls: (depth, start,
    end, pid, label). A sweep over the calls' ends, the covering ones in a heap: O(n log n) in the calls
    inside the window."""
    a, b = window
    inside = sorted((max(s, a), min(e, b), d, pid, lab) for d, s, e, pid, lab in calls if s < b and e > a)
    cuts = sorted({a, b, *(s for s, _, _, _, _ in inside), *(e for _, e, _, _, _ in inside)})
    out: list[tuple[int, int, tuple[int, str]]] = []
    heap: list[tuple[int, int, int, int, str]] = []  # (-depth, -start, end, pid, label): the owner on top
    i = 0
    for lo, hi in zip(cuts, cuts[1:]):
        while i < len(inside) and inside[i][0] <= lo:
            s, e, d, pid, lab = inside[i]
            heapq.heappush(heap, (-d, -s, e, pid, lab))
            i += 1
        while heap and heap[0][2] <= lo:  # ended: gone (lazily, once on top)
            heapq.heappop(heap)
        out.append((lo, hi, (heap[0][3], heap[0][4]) if heap else (root, OUTSIDE)))
    return out


def _totals(segments: list[tuple[int, int, tuple[int, str]]]) -> dict[tuple[int, str], int]:
    """ns owned by each (pid, label) in a window's segments."""
    out: dict[tuple[int, str], int] = {}
    for lo, hi, key in segments:
        out[key] = out.get(key, 0) + (hi - lo)
    return out


def _delay(window: tuple[int, int], calls: list[dict[str, Any]]) -> int:
    """The run delay (waits for a CPU) of the calls that lie inside the window."""
    a, b = window
    return sum(int(c.get("run_delay_ns", 0)) for c in calls if c["start_ns"] >= a and c["end_ns"] <= b)


def _own_ns(spans: list[tuple[int, int]], starts: list[int], lo: int, hi: int) -> int:
    """ns of the (sorted, disjoint) spans inside [lo, hi]."""
    i = max(0, bisect.bisect_right(starts, lo) - 1)
    total = 0
    while i < len(spans) and spans[i][0] < hi:
        total += max(0, min(spans[i][1], hi) - max(spans[i][0], lo))
        i += 1
    return total


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def first_request(records: list[Any], processes: dict[int, dict[str, Any]], children: dict[int, list[int]],
                  pid: int, label: str, own_spans: dict[int, dict[int, list[tuple[int, int]]]] | None = None) -> dict[str, Any] | None:
    """The split of process pid's first `label` call (the first response) against its later calls of the
    same key, or None where there is no later one to compare it with. own_spans: each process's own spans by OS
    thread id (assemble.own_spans), for warmprof's own line."""
    metas = {r.pid: r.meta for r in records}
    mine = [c for c in metas.get(pid, {}).get("calls", []) if c["label"] == label]
    if not mine:
        return None
    first = mine[0]
    depth = _depths(children, pid)
    # a later request counts where every process's record covers it: a process killed at the end (vLLM's
    # EngineCore) has only its last checkpoint's, and its calls after it are not known
    cut = [int(m["t_end_ns"]) for p, m in metas.items() if p in depth and m.get("end") == CHECKPOINT_END]
    later = [c for c in mine[1:] if c["key"] == first["key"] and all(c["end_ns"] <= t for t in cut)]
    if not later:
        return None
    spans = [(depth[p], int(c["start_ns"]), int(c["end_ns"]), p, c["label"])
             for p, m in metas.items() if p in depth and p != pid for c in m.get("calls", [])]
    spans += [(0, int(c["start_ns"]), int(c["end_ns"]), pid, c["label"])
              for c in metas[pid].get("calls", []) if c["label"] != label]

    def window(c: dict[str, Any]) -> tuple[int, int]:
        return int(c["start_ns"]), int(c["end_ns"])

    ranked = sorted(later, key=lambda c: c["end_ns"] - c["start_ns"])
    n = len(ranked)
    middle = ranked[(n - 1) // 2: n // 2 + 1]  # one (odd) or the two middle ones (even): their mean is the median

    def steady_of(fn: Any) -> float:
        return sum(fn(c) for c in middle) / len(middle)

    first_segments = _segments(window(first), spans, pid)
    steady_segments = [_segments(window(c), spans, pid) for c in middle]
    first_parts = _totals(first_segments)
    steady_parts = [_totals(x) for x in steady_segments]
    keys = sorted(set(first_parts) | {k for p in steady_parts for k in p},
                  key=lambda k: (-(first_parts.get(k, 0) - sum(p.get(k, 0) for p in steady_parts) / len(middle)), k))
    # the first calls (at their key) of each process that lie inside the first window, with their causes
    every_first: dict[tuple[int, str], list[tuple[dict[str, Any], dict[str, Any]]]] = {}  # part -> [(call, entry)]
    a, b = window(first)
    for p, m in metas.items():
        if p not in depth:
            continue
        seen: set[tuple[str, str]] = set()
        entries = {(e["label"], e["key"]): e for e in processes.get(p, {}).get("calls", [])}
        for c in m.get("calls", []):
            k = (c["label"], str(c["key"]))
            if k in seen:
                continue
            seen.add(k)
            e = entries.get((c["label"], c["key"]))
            if e is None or c is first or not (c["start_ns"] >= a and c["end_ns"] <= b):
                continue
            every_first.setdefault((p, c["label"]), []).append((c, e))
    # those with causes (every_first's others count for later_ms and the part's run delay)
    firsts = {k: with_causes for k, v in every_first.items() if (with_causes := [x for x in v if x[1].get("causes")])}
    # the request's own part: the request's own causes (first_calls attributed it on its thread, against
    # the later ones at its key)
    own = next((e for e in processes.get(pid, {}).get("calls", [])
                if (e["label"], e["key"]) == (label, first["key"]) and e.get("causes")), None)
    if own is not None:
        firsts[(pid, OUTSIDE)] = [(first, own)]
    # other processes' calls by start, to find those inside a call (its wait was theirs: booked there)
    others = sorted((s, e, p) for _, s, e, p, _ in spans if s < b and e > a)
    starts = [x[0] for x in others]

    def holds_another_process(c: dict[str, Any], p: int) -> bool:
        lo, hi = int(c["start_ns"]), int(c["end_ns"])
        return any(e <= hi and q != p for _, e, q in others[bisect.bisect_left(starts, lo):bisect.bisect_left(starts, hi)])

    def causes_of(c: dict[str, Any], e: dict[str, Any], p: int) -> dict[tuple[str, str], tuple[float, set[str]]]:
        """e's causes by (cause, evidence), summed over their sources (a call's disk reads outside and inside
        oneDNN's creations are two entries) with the sources named, less those of the same process's first
        calls nested in c (theirs, booked in their own part: first_calls measured c over its whole window),
        and without its wait where another process's calls lie inside it."""
        out: dict[tuple[str, str], tuple[float, set[str]]] = {}
        for x in e["causes"]:
            ms, sources = out.get((x["cause"], x["evidence"]), (0.0, set()))
            out[(x["cause"], x["evidence"])] = (ms + float(x["ms"]), sources | ({x["source"]} if x.get("source") else set()))
        for q_calls in (v for (q, _), v in firsts.items() if q == p):
            for c2, e2 in q_calls:
                if c2 is not c and c["start_ns"] <= c2["start_ns"] and c2["end_ns"] <= c["end_ns"]:
                    for x in e2["causes"]:
                        k = (x["cause"], x["evidence"])
                        if k in out:
                            out[k] = (max(0.0, out[k][0] - float(x["ms"])), out[k][1])
        if holds_another_process(c, p):
            out = {k: v for k, v in out.items() if k[0] != Name.WAIT}
        return out

    def first_delay(c: dict[str, Any], same: list[dict[str, Any]]) -> float:
        """A first call's run delay beyond the median of the later calls' at its key (its own extra wait,
        booked by first_calls as contention or inside a cause span's time)."""
        later = [int(x.get("run_delay_ns", 0)) for x in same if x["key"] == c["key"] and x is not c
                 and x["start_ns"] > c["start_ns"]]
        return int(c.get("run_delay_ns", 0)) - (statistics.median(later) if later else 0.0)

    def part_delay(p: int, lab: str) -> tuple[list[dict[str, Any]], float]:
        """The part's process's calls of that label, and their run delay inside the first window less the
        steady windows' (ns)."""
        same = [c for c in metas[p].get("calls", []) if c["label"] == lab]
        return same, _delay(window(first), same) - steady_of(lambda c: _delay(window(c), same))

    # warmprof's own spans of each process on the threads that make its calls (the request's, a step's), as
    # one union by start: another thread's (a sampler's) runs beside them
    def call_tids(q: int) -> set[Any]:
        return {c.get("tid") for c in metas.get(q, {}).get("calls", [])} or {metas.get(q, {}).get("main_tid")}

    own_of = {q: _union([x for t, v in by_tid.items() if t in call_tids(q) for x in v])
              for q, by_tid in (own_spans or {}).items()}
    own_starts = {q: [x[0] for x in v] for q, v in own_of.items()}
    below = {q: set(_depths(children, q)) for q in depth}  # each process and those under it

    def own_by_part(segments: list[tuple[int, int, tuple[int, str]]]) -> dict[tuple[int, str], int]:
        """warmprof's own ns in a window's segments by part: at the instants a part owns, the own spans of its process
        and of the processes under it (what its call waits on: the Worker's record of a step inside the
        engine's step); in the request's own part, the request's process's only (the others' run beside it)."""
        out: dict[tuple[int, str], int] = {}
        if not own_of:
            return out
        for lo, hi, key in segments:
            procs = [key[0]] if key[1] == OUTSIDE else below.get(key[0], {key[0]})
            ns = sum(_own_ns(own_of[q], own_starts[q], lo, hi) for q in procs if q in own_of)
            if ns:
                out[key] = out.get(key, 0) + ns
        return out

    own_first = own_by_part(first_segments)
    own_steady = [own_by_part(x) for x in steady_segments]

    rows: list[dict[str, Any]] = []
    by_cause: dict[str, float] = {}
    unattributed = own_total = 0.0
    for key in keys:
        p, lab = key
        f_ms = first_parts.get(key, 0) / 1e6
        s_ms = sum(q.get(key, 0) for q in steady_parts) / len(middle) / 1e6
        excess = f_ms - s_ms
        row: dict[str, Any] = {"pid": p, "part": lab, "first_ms": f_ms, "steady_ms": s_ms, "excess_ms": excess,
                               "causes": []}
        booked: list[dict[str, Any]] = []
        own_ms = (own_first.get(key, 0) - sum(o.get(key, 0) for o in own_steady) / len(middle)) / 1e6
        own_ms = min(own_ms, excess) if own_ms > 0 and excess > 0 else 0.0  # measured, and never the model's
        if excess > 0 and key in firsts:
            for c, e in firsts[key]:
                for (cause, evidence), (ms, sources) in causes_of(c, e, p).items():
                    booked.append({"cause": cause, "ms": ms, "evidence": evidence, "sources": sorted(sources),
                                   "detail": f"the first {e['label']} [{e['key']}] (its excess against its later calls)"})
            row["first_calls"] = [{"key": e["key"], "first_ms": e["first_ms"], "steady_ms": e["steady_ms"],
                                   "excess_ms": e["excess_ms"]} for _, e in firsts[key]]
            deepest = lab != OUTSIDE and not any(holds_another_process(c, p) for c, _ in every_first[key])
            if deepest:  # its other calls' extra wait for a CPU: the part's, less its first calls' own
                same, delay = part_delay(p, lab)
                extra = (delay - sum(first_delay(c, same) for c, _ in every_first[key])) / 1e6
                if extra > 0:
                    booked.append({"cause": Name.CPU_CONTENTION, "ms": extra, "evidence": "measured", "sources": ["run_queue"],
                                   "detail": "its later calls' extra wait for a CPU (the part's run delay, first less "
                                             "steady, less its first calls' own beyond their later calls')"})
                if all(e.get("excess_ms") is not None for _, e in every_first[key]):
                    # what its first calls' own excess leaves is its other calls' (not the first at their key)
                    row["later_ms"] = excess - sum(float(e["excess_ms"]) for _, e in every_first[key])
        elif excess > 0:
            if key == (pid, OUTSIDE):  # the request's own clocks
                delay = int(first.get("run_delay_ns", 0)) - steady_of(lambda c: int(c.get("run_delay_ns", 0)))
            else:  # the part's process's calls of that label inside each window
                _, delay = part_delay(p, lab)
            extra = delay / 1e6
            if extra > 0:
                booked.append({"cause": Name.CPU_CONTENTION, "ms": extra, "evidence": "measured", "sources": ["run_queue"],
                               "detail": "its extra wait for a CPU, from the thread's run delay (first less steady)"})
        total = sum(c["ms"] for c in booked)
        room = excess - own_ms  # the model's causes share what warmprof's own time leaves of the part's excess
        scale = min(1.0, room / total) if total > 0 and room > 0 else 0.0
        if own_ms > 0:
            booked.append({"cause": Name.PROFILER_OVERHEAD, "ms": own_ms, "evidence": "measured",
                           "sources": ["own_spans"], "detail": "warmprof's own time in the part (its own spans), first "
                           "less steady"})
        merged: dict[tuple[str, str], dict[str, Any]] = {}  # one entry per cause and evidence
        for c in booked:
            ms = c["ms"] if c["cause"] == Name.PROFILER_OVERHEAD else c["ms"] * scale
            if ms <= 0:
                continue
            m = merged.setdefault((c["cause"], c["evidence"]), {**c, "ms": 0.0, "detail": "", "sources": []})
            m["ms"] += ms
            m["sources"] = sorted(set(m["sources"]) | set(c["sources"]))
            if c["detail"] not in m["detail"]:
                m["detail"] = "; ".join(x for x in (m["detail"], c["detail"]) if x)
            if c["cause"] == Name.PROFILER_OVERHEAD:
                own_total += ms
            else:
                by_cause[c["cause"]] = by_cause.get(c["cause"], 0.0) + ms
        row["causes"] = sorted(merged.values(), key=lambda c: -c["ms"])
        row["own_ms"] = sum(c["ms"] for c in row["causes"] if c["cause"] == Name.PROFILER_OVERHEAD)
        row["unattributed_ms"] = excess - sum(c["ms"] for c in row["causes"])
        unattributed += row["unattributed_ms"]
        rows.append(row)
    f_total = (first["end_ns"] - first["start_ns"]) / 1e6
    s_total = statistics.median((c["end_ns"] - c["start_ns"]) / 1e6 for c in later)
    excess_total = f_total - s_total
    explained = sum(by_cause.values())
    model = excess_total - own_total  # the model's excess: warmprof's own on neither side
    return {"pid": pid, "label": label, "key": str(first["key"]), "first_ms": f_total, "steady_ms": s_total,
            "later": len(later), "excess_ms": excess_total, "by_part": rows,
            "by_cause": dict(sorted(by_cause.items(), key=lambda kv: -kv[1])), "own_ms": own_total,
            "unattributed_ms": unattributed, "explained_share": explained / model if model > 0 else None}

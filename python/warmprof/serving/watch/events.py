"""One kept call -> one event: what the call took, against what, and its causes with evidence.

The native hot path hands over, for a kept call only, one WatchCall (its fields are declared once, in
csrc/watch_type.cpp): the key, whether it was the key's first call or an outlier against the key's
median, its duration, the idle gap before it, the device clock at its start (after an idle gap, when a
clock source is given), the thread's CPU time (and whether it was read exactly), page faults, blocks
read and involuntary context switches over the call, its run-queue delay where read, its key's usual
time off the CPU, the stretches dynamo's callbacks bracketed during it, and CUPTI's rows when asked
for. facts() turns it into attribution's CallFacts; attribution/calls.py books the causes, by the rules
warmup books a warm-up call by (compiles by trigger, CUDA calls measured, faults outside the compiles
above the one noise floor at the one price, contention, a wait or disk read off the CPU, the clock ramp
after an idle gap, the residual); this module words each cause's detail.

A first call at a key has no median to be measured against: its causes are listed as they are,
with no excess and no residual.
"""

from __future__ import annotations

from typing import Any

from ...attribution import Calibration
from ...attribution.calls import (
    SOURCES,
    Bracketed,
    CallFacts,
    CallPart,
    CudaCalls,
    attribute_call,
)
from ...attribution.compiles import COMPILE_SOURCE, is_compile
from ...causes import Name
from .sources import cupti_rows as cupti_rows_by_name


# A key's name is kept for every event and series: never longer than this (a request's JSON body as a
# dict of thousands of fields made names of tens of kB, +194 MiB over 2,000 requests).
KEY_NAME_CHARS = 200


def describe(args: tuple, kwargs: dict | None) -> str:
    """A call's arguments as its default key reads them: each tensor's shape and dtype, each other
    argument's type."""
    def one(v: Any, depth: int = 0) -> str:
        try:
            shape = getattr(v, "shape", None)
        except Exception:  # a .shape that raises is no shape (the key did the same)
            shape = None
        if shape is not None and not isinstance(v, (int, float, str, bytes)):
            try:
                dims = "x".join(str(int(d)) for d in shape)
            except Exception:
                dims = str(shape)
            try:
                dtype = str(getattr(v, "dtype", "")).removeprefix("torch.")
            except Exception:
                dtype = ""
            return f"{dims or 'scalar'} {dtype}".strip()
        if isinstance(v, (list, tuple)) and depth < 2:
            more = f", ... {len(v)} in all" if len(v) > 16 else ""
            return "(" + ", ".join(one(x, depth + 1) for x in list(v)[:16]) + more + ")"
        if isinstance(v, dict) and depth < 2:
            items = sorted(v.items(), key=lambda kv: str(kv[0]))
            more = f", ... {len(items)} in all" if len(items) > 16 else ""
            return "{" + ", ".join(f"{str(k)[:40]}: {one(x, depth + 1)}" for k, x in items[:16]) + more + "}"
        return type(v).__name__
    parts = [one(a) for a in args] + [f"{str(k)[:40]}={one(v)}" for k, v in sorted((kwargs or {}).items())]
    return ", ".join(parts) or "no arguments"  # the Watcher cuts it to KEY_NAME_CHARS


class CallCosts:
    """The unit costs a call's faults are priced with, read once on first use: the same figure warmup
    prices faults with (traces/calibrate.call_costs: a trace's calibration when one ran here, else
    measured once); no price (0) when it cannot be measured."""

    def __init__(self, calibration: Calibration | None = None) -> None:
        self._cal = calibration

    def get(self) -> Calibration:
        if self._cal is None:
            from ...traces import calibrate

            try:
                self._cal = calibrate.call_costs()
            except Exception:
                self._cal = Calibration()
        return self._cal


def facts(call: Any, *, idle_ns: int, side: list[tuple] | None = None,
          cuda_reserved_bytes: int | None = None) -> CallFacts:
    """A WatchCall as attribution's CallFacts. `side`: the stretches dynamo's callbacks bracketed on the
    thread since the last event, (source, ns[, faults[, end ns]]), of which those that ended inside this
    call count; a CUDA graph recording or autotuning run is taken out of the compile time the hot path
    counted; the compiles' own faults are known only when every compile the hot path counted is among
    them. `cuda_reserved_bytes`: the CUDA caching allocator's growth since the previous event."""
    compiles, compile_ns = int(call.compiles), int(call.compile_ns)
    bracketed: list[Bracketed] = []
    seen_compiles: list[tuple] = []
    t0, t1 = int(call.start_ns), int(call.start_ns) + int(call.dur_ns)
    for item in side or []:
        if len(item) > 3 and not t0 <= int(item[3]) <= t1:
            continue  # ended outside this call (a compile on this thread while no watched call ran)
        kind, ns = str(item[0]), int(item[1])
        if is_compile(kind):
            seen_compiles.append(item)
            continue
        took = min(ns, compile_ns)
        compile_ns -= took
        compiles = max(0, compiles - 1)
        bracketed.append(Bracketed(kind, float(took), faults=int(item[2]) if len(item) > 2 else None))
    if compiles:
        known = len(seen_compiles) == compiles and all(len(c) > 2 for c in seen_compiles)
        bracketed.append(Bracketed(COMPILE_SOURCE, float(compile_ns), count=compiles,
                                   faults=sum(int(c[2]) for c in seen_compiles) if known else None))
    dur, median = int(call.dur_ns), float(call.median_ns)
    gap = int(call.gap_ns)
    rows = cupti_rows_by_name(call.cupti) if call.cupti else {}
    cuda = {name: CudaCalls(row["calls"], row["ns"], row["bytes"]) for name, row in rows.items() if name in CUPTI_CAUSES}
    # counters read before the call began (its thread's last read, at most 200 us back): the stretch before it
    # is taken as all on the CPU, so the window's time off the CPU is all the call's (at most what it was)
    before = counters_before_ns(call)
    return CallFacts(ns=dur, bracketed=tuple(bracketed), faults=int(call.minflt) + int(call.majflt),
                     cuda_reserved_bytes=cuda_reserved_bytes, cpu_ns=max(0, int(call.cpu_ns) - before),
                     involuntary_switches=int(call.nivcsw), cuda_calls=cuda,
                     # a record made before these fields (a test's, a recorded one) has None: not read
                     run_delay_ns=None if call.run_delay_ns is None else int(call.run_delay_ns),
                     cpu_exact=None if call.cpu_exact is None else bool(call.cpu_exact),
                     usual_off_cpu_ns=float(call.usual_off_cpu_ns or 0.0),
                     major_faults=int(call.majflt), blocks_read=int(call.inblock or 0),
                     voluntary_switches=None if call.nvcsw is None else int(call.nvcsw),
                     excess_ns=float(dur - median) if call.outlier and median > 0 else None,
                     after_idle_s=gap / 1e9 if gap >= idle_ns and gap > 0 and call.outlier else None,
                     clock_mhz=_clock(call.clock))


def counters_before_ns(call: Any) -> int:
    """How long before the call its thread's counters (CPU time, faults, switches, blocks read) were read:
    0 when the call read them itself; up to 200 us for a call kept only after it ran (csrc/watch_type.cpp
    reads them around a sample of a thread's calls, not each: a read is a system call)."""
    start = getattr(call, "counters_from_ns", None)  # None: a record made before the field
    return max(0, int(call.start_ns) - int(start)) if start is not None else 0


# the causes read from the thread's counters, whose figures a read before the call widens
_COUNTED = (SOURCES["faults"], SOURCES["files"], SOURCES["off_cpu"], SOURCES["blocked"])


def build(call: Any, *, index: int, key: str, start_ns: int, idle_ns: int, dynamo: Any, costs: CallCosts,
          reserved: tuple[Any, Any], side: list[tuple] | None = None) -> dict[str, Any]:
    """The event for one kept call (a WatchCall: csrc/watch_type.cpp)."""
    grown = _reserve_grown(reserved)
    f = facts(call, idle_ns=idle_ns, side=side, cuda_reserved_bytes=max(1, grown[0]) if grown else None)
    got = attribute_call(f, costs.get)
    parts = list(got.parts)
    if any(p.source == SOURCES["faults"] for p in parts):  # the reserve's growth is said in the faults' detail
        parts = [p for p in parts if p.source != SOURCES["cuda_reserved"]]
    cuda_calls = cupti_rows_by_name(call.cupti) if call.cupti else None
    dur, median_ns, gap = int(call.dur_ns), float(call.median_ns), int(call.gap_ns)
    excess = f.excess_ns / 1e6 if f.excess_ns is not None else None
    reasons: list[str] = []
    causes: list[dict[str, Any]] = []
    before = counters_before_ns(call)
    for part in parts:
        detail = _detail(part, f, gap, grown)
        if before and part.source in _COUNTED:
            detail += (f"; counted from {before / 1e3:.0f} us before the call began, its thread's last read of its "
                       "counters (read around a sample of the calls, not each: a read is a system call): what the "
                       "thread did in that stretch, taken as on its CPU, is in the figure")
        if part.cause == Name.JIT_COMPILE and part.source == SOURCES["compiles"]:
            reasons = dynamo.recompile_reasons() if dynamo is not None else []
            cache = dynamo.cache().text() if dynamo is not None else ""
            if cache:
                detail += f"; {cache}"
            if reasons:
                detail += "; recompiled because " + "; ".join(reasons[:3])
        causes.append({"cause": part.cause, "ms": part.ms or 0.0, "evidence": part.evidence, "source": part.source,
                       "count": int(part.count), "detail": detail})
    attributed = sum(c["ms"] for c in causes)
    return {
        "index": index, "key": key, "t_s": (int(call.start_ns) - start_ns) / 1e9, "ms": dur / 1e6, "gap_s": gap / 1e9,
        "first": bool(call.first), "outlier": bool(call.outlier), "after_idle": gap >= idle_ns and gap > 0,
        "median_ms": median_ns / 1e6 if median_ns else None, "calls_before": int(call.calls_before),
        "excess_ms": excess, "causes": causes,
        "unattributed_ms": (excess - attributed) if excess is not None else None,
        "recompile_reasons": reasons,
        "cuda_calls": cuda_calls,
        "clock_mhz": list(f.clock_mhz) if f.clock_mhz is not None else None,
        # only where the call's counters start before it (the thread's last read): absent, they are its own
        **({"counters_before_us": before / 1e3} if before else {}),
    }


def _reserve_grown(reserved: tuple[Any, Any]) -> tuple[int, int] | None:
    """(bytes, segments) the CUDA caching allocator grew since the previous event; None: it did not."""
    before, after = reserved
    if before is None or after is None or not (after[0] > before[0] or after[1] > before[1]):
        return None
    return after[0] - before[0], after[1] - before[1]


def _detail(part: CallPart, f: CallFacts, gap: int, grown: tuple[int, int] | None) -> str:
    """What an event says of one part."""
    if part.source == SOURCES["compiles"]:
        return f"{part.count} compile(s) dynamo ran during the call"
    if part.source == SOURCES["cupti"]:
        detail = f"{part.count} {CUPTI_CAUSES[part.cause]} on the calling thread, timed by CUPTI"
        if part.figures.get("bytes"):
            detail += f": {part.figures['bytes'] / 2**20:.1f} MiB"
        if part.figures.get("scale", 1.0) < 1.0:
            detail += (f"; scaled by {part.figures['scale']:.2f} to fit the call's time outside dynamo's compiles (a CUDA "
                       "call made inside a compile is the compile's time)")
        return detail
    if part.cause in (Name.GRAPH_CAPTURE, Name.ALGORITHM_SELECTION):
        return ("bracketed by dynamo's callbacks during the call"
                + (" (cudagraph trees record a shape's graph on its second call)" if part.cause == Name.GRAPH_CAPTURE else ""))
    if part.source in (SOURCES["faults"], SOURCES["cuda_reserved"]):
        said = (f"the CUDA caching allocator grew {grown[0] / 2**20:.1f} MiB in {grown[1]} new segments (cudaMalloc "
                "calls) since the previous event") if grown else ""
        if part.source == SOURCES["cuda_reserved"]:
            return said + " (no page faults to price: measured growth, no time figure)"
        return (f"{part.count} page faults on the calling thread x {part.figures['fault_cost_ns']:.0f} ns, the "
                f"first-touch cost of a page measured here{'; ' + said if said else ''}")
    if part.source == SOURCES["off_cpu"] and part.evidence == "measured":
        return ("the thread's run-queue delay over the call (schedstat): ready to run, no CPU (the machine's load; "
                "no warm-up removes it)")
    if part.source == SOURCES["off_cpu"]:
        return (f"the call's wall time less its thread's CPU time, with {part.count} involuntary context "
                "switches: ready to run, no CPU (the machine's load; no warm-up removes it)")
    if part.source == SOURCES["blocked"]:
        return _blocked_detail(part, f)
    if part.source == SOURCES["idle_clock"] and f.clock_mhz is not None:
        mhz, top = f.clock_mhz
        return f"the device clock was {mhz:.0f} of {top:.0f} MHz at the call's start, after {gap / 1e9:.1f} s idle"
    return ""


def _blocked_detail(part: CallPart, f: CallFacts) -> str:
    """What a wait or a disk read says: how long the thread was off its CPU, what of it is taken out,
    and what it read from storage."""
    fig = part.figures
    said = [f"the call's thread was off its CPU, neither running nor waiting for one, for "
            f"{fig['off_cpu_ns'] / 1e6:.2f} ms{' or more' if fig.get('lower_bound') else ''} (its wall time less its "
            "CPU time" + (" and run-queue delay" if f.run_delay_ns is not None else "") + ")"]
    if fig.get("measured_ns", 0) >= 10_000:
        said.append(f"less the {fig['measured_ns'] / 1e6:.2f} ms of the stretches measured in it (their waits are theirs)")
    if fig.get("usual_off_cpu_ns", 0) >= 10_000:
        said.append(f"less the {fig['usual_off_cpu_ns'] / 1e6:.2f} ms its key's usual calls spend so")
    if part.cause == Name.DISK_READ:
        reads = [f"{int(fig['major_faults'])} major page faults" if fig.get("major_faults") else "",
                 f"{int(fig['blocks_read'])} blocks read" if fig.get("blocks_read") else ""]
        said.append(f"it read from storage ({' and '.join(r for r in reads if r)}): a cold page cache, read once at "
                    "start-up")
    else:
        said.append("blocked: a sleep, a lock, I/O or a remote call")
    if 0 < fig.get("disk_share", 1.0) < 1 and fig.get("voluntary_switches", -1) > 0:
        said.append(f"split with the {'wait' if part.cause == Name.DISK_READ else 'disk read'} beside it by block "
                    f"counts: its reads account for {fig['disk_share']:.0%} of the thread's "
                    f"{int(fig['voluntary_switches'])} blocks (an estimate)")
    if f.run_delay_ns is None:
        said.append("its wait for a CPU was not read (only after an idle gap or at a new key): that wait is in it")
    if "capped_from_ns" in fig:
        said.append(f"fitted in the call's excess (from {fig['capped_from_ns'] / 1e6:.2f} ms)")
    return "; ".join(said)


# The causes watch books from CUPTI, each with what its calls are; a call during which one of these
# closed on its thread is kept (the native hot path gets them as a bit mask: cupti_cause_mask).
CUPTI_CAUSES = {
    Name.ALLOCATOR_GROWTH: "device memory allocations (cudaMalloc / cuMemAlloc / cuMemCreate)",
    Name.RUNTIME_INIT: "module loads and CUDA set-up (a kernel's module loaded on its first launch, a context)",
    Name.JIT_COMPILE: "PTX the driver compiled to this GPU's code (no cubin for its architecture)",
    Name.GRAPH_CAPTURE: "stream capture and graph instantiate / upload",
    Name.ALGORITHM_SELECTION: "algorithm selection calls",
}


def cupti_cause_mask() -> int:
    """CUPTI_CAUSES as the native hot path takes them: bit (1 << recorder id) per cause."""
    from ...causes import recorded

    ids = {name: cid for cid, name in recorded().items()}
    return sum(1 << ids[name] for name in CUPTI_CAUSES)


def _clock(reading: Any) -> tuple[float, float] | None:
    """A clock source's reading as (MHz, maximum MHz), or None when it is not two finite numbers."""
    import math

    try:
        mhz, top = float(reading[0]), float(reading[1])
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    return (mhz, top) if math.isfinite(mhz) and math.isfinite(top) and top > 0 else None


__all__ = ["CUPTI_CAUSES", "CallCosts", "build", "counters_before_ns", "cupti_cause_mask", "describe", "facts"]

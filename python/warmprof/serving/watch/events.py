"""One kept call -> one event: what the call took, against what, and its causes with evidence.

The native hot path hands over, for a kept call only: the key, whether it was the key's first call
or an outlier against the key's median, its duration, the idle gap before it, the device clock at
its start (after an idle gap, when a clock source is given), the thread's CPU time, page faults and
involuntary context switches over the call (getrusage RUSAGE_THREAD), and the compiles dynamo
finished during it with their summed time. The rules, each figure labelled as it is known:

- jit_compile (measured): the compiles' own time (dynamo's compile callbacks), with dynamo's
  recompile reasons (the guards that failed) and how many graphs came from the compile caches
  (hits) or were compiled (misses).
- With CUPTI asked for (watch(cupti=True)): the CUDA calls that closed on the calling thread during
  the call, each outermost call once, with CUPTI's enter/exit times (measured): cudaMalloc /
  cuMemAlloc / cuMemCreate as allocator_growth (bytes), module loads and context set-up as
  runtime_init, PTX the driver compiled as jit_compile, stream capture and graph instantiate as
  graph_capture. They fit in the call's time outside dynamo's compiles (a CUDA call made inside a
  compile is the compile's time): when they would not, they are scaled to fit and labelled
  estimated. A stream capture inside a CUDA graph recording dynamo bracketed is that recording's.
- allocator_growth (estimated): the thread's page faults over the call x the first-touch cost of a
  small page measured on this machine (once, when first needed), when there are more than a few and
  dynamo did not compile during the call (a compile's faults are its own time); on
  CUDA, the caching allocator's bytes and segments (cudaMalloc calls) grown since the previous event.
- cpu_contention (estimated): the call's wall time less its thread's CPU time, when the thread was
  preempted (involuntary switches): it was ready and had no CPU. A thread blocked on a worker or on
  the device is off its CPU too, so without a preemption nothing is booked.
- The estimates fit in the call's time outside its measured compiles (a compile waits on its worker
  processes and takes page faults: that is compile time) and, for an outlier, in its excess over the
  key's median less the compiles, allocator growth first. A clock reading that is not two finite
  numbers is left out.
- clock_ramp (inferred): an outlier after an idle gap (idle_s, 1 s by default) with the device clock
  below 90% of its maximum at the call's start, or, with no clock source, the gap alone: what is left
  of the excess after the causes above.
- unattributed: an outlier's excess over its key's median less its causes.

A first call at a key has no median to be measured against: its causes are listed as they are,
with no excess and no residual.
"""

from __future__ import annotations

from typing import Any

from .sources import cupti_rows as cupti_rows_by_name

FAULTS_FLOOR = 16  # fewer page faults than this over a call are noise, not allocator growth
CLOCK_LOW = 0.9  # a device clock below this share of its maximum has not ramped up


def describe(args: tuple, kwargs: dict | None) -> str:
    """A call's arguments as its default key reads them: each tensor's shape and dtype, each other
    argument's type."""
    def one(v: Any, depth: int = 0) -> str:
        shape = getattr(v, "shape", None)
        if shape is not None and not isinstance(v, (int, float, str, bytes)):
            try:
                dims = "x".join(str(int(d)) for d in shape)
            except Exception:
                dims = str(shape)
            dtype = str(getattr(v, "dtype", "")).removeprefix("torch.")
            return f"{dims or 'scalar'} {dtype}".strip()
        if isinstance(v, (list, tuple)) and depth < 2:
            more = f", ... {len(v)} in all" if len(v) > 16 else ""
            return "(" + ", ".join(one(x, depth + 1) for x in list(v)[:16]) + more + ")"
        if isinstance(v, dict) and depth < 2:
            return "{" + ", ".join(f"{k}: {one(x, depth + 1)}" for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))) + "}"
        return type(v).__name__
    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in sorted((kwargs or {}).items())]
    return ", ".join(parts) or "no arguments"


class FaultPrice:
    """ns per page fault, read once on first use: the same figure warmup prices faults with
    (warm.fault_ns: a trace's calibration when one ran here, else measured once)."""

    def __init__(self) -> None:
        self._ns: float | None = None

    def ns(self) -> float:
        if self._ns is None:
            from ..warmup import fault_ns

            try:
                self._ns = fault_ns()
            except Exception:
                self._ns = 0.0
        return self._ns


def build(info: tuple, *, index: int, key: str, start_ns: int, idle_ns: int, dynamo: Any, prices: FaultPrice,
          reserved: tuple[Any, Any], side: list[tuple[str, int]] | None = None) -> dict[str, Any]:
    """The event for one kept call (info: the native hot path's tuple, see csrc/watch_type.cpp)."""
    (_key, _key_obj, _args, _kwargs, first, outlier, start, dur, gap, clock, cpu_ns, minflt, majflt, nivcsw,
     compiles, compile_ns, calls_before, median_ns) = info[:18]
    cuda_calls = cupti_rows_by_name(info[18]) if len(info) > 18 and info[18] else None
    ms = dur / 1e6
    excess = (dur - median_ns) / 1e6 if outlier and median_ns > 0 else None
    causes: list[dict[str, Any]] = []
    reasons: list[str] = []
    # dynamo's callbacks also bracket CUDA graph recording and Triton autotuning: measured, not compiles
    for kind, ns in side or []:
        cause = "graph_capture" if kind.startswith("cudagraphs:") else "algorithm_selection"
        took = min(ns, compile_ns)
        compile_ns -= took
        compiles = max(0, compiles - 1)
        causes.append({"cause": cause, "ms": took / 1e6, "evidence": "measured", "source": kind, "count": 1,
                       "detail": "bracketed by dynamo's callbacks during the call"
                                 + (" (cudagraph trees record a shape's graph on its second call)"
                                    if cause == "graph_capture" else "")})
    if compiles:
        reasons = dynamo.recompile_reasons() if dynamo is not None else []
        cache = dynamo.cache().text() if dynamo is not None else ""
        detail = f"{compiles} compile(s) dynamo ran during the call"
        if cache:
            detail += f"; {cache}"
        if reasons:
            detail += "; recompiled because " + "; ".join(reasons[:3])
        causes.append({"cause": "jit_compile", "ms": compile_ns / 1e6, "evidence": "measured", "source": "dynamo",
                       "count": int(compiles), "detail": detail})
    captured = any(c["cause"] == "graph_capture" for c in causes)
    causes.extend(_cupti_causes(cuda_calls or {}, outside_ms=max(0.0, (dur - compile_ns) / 1e6), captured=captured))
    cuda_ms = sum(c["ms"] for c in causes if c["source"] == "cupti")
    # The compiles' and CUDA calls' time is measured; what the estimates below book must fit in the
    # rest of the call (a compile waits on its worker processes and takes faults: that is compile
    # time, not more), and for an outlier in what it took over its key's median.
    room = max(0.0, (dur - compile_ns) / 1e6 - cuda_ms)
    if excess is not None:
        room = min(room, max(0.0, excess - compile_ns / 1e6 - cuda_ms))
    faults = int(minflt) + int(majflt)
    if faults >= FAULTS_FLOOR and not compiles:  # faults inside a compile are its own: not split out
        per = prices.ns()
        grown = ""
        before, after = reserved
        if before is not None and after is not None and (after[0] > before[0] or after[1] > before[1]):
            grown = (f"; the CUDA caching allocator grew {(after[0] - before[0]) / 2**20:.1f} MiB in "
                     f"{after[1] - before[1]} new segments (cudaMalloc calls) since the previous event")
        booked = min(faults * per / 1e6, room)
        room -= booked
        causes.append({"cause": "allocator_growth", "ms": booked, "evidence": "estimated",
                       "source": "page_faults", "count": faults,
                       "detail": f"{faults} page faults on the calling thread x {per:.0f} ns, the first-touch cost of "
                                 f"a page measured here{grown}"})
    off_cpu = max(0, dur - int(cpu_ns))
    if nivcsw > 0 and off_cpu > 0 and room > 0:
        causes.append({"cause": "cpu_contention", "ms": min(off_cpu / 1e6, room), "evidence": "estimated",
                       "source": "off_cpu",
                       "count": int(nivcsw),
                       "detail": f"the call's wall time less its thread's CPU time, with {nivcsw} involuntary context "
                                 "switches: ready to run, no CPU (the machine's load; no warm-up removes it)"})
    after_idle = gap >= idle_ns and gap > 0
    clock = _clock(clock)
    if after_idle and outlier:
        left = (excess or 0.0) - sum(c["ms"] for c in causes)
        if clock is not None:
            mhz, top = clock
            if top > 0 and mhz < CLOCK_LOW * top and left > 0:
                causes.append({"cause": "clock_ramp", "ms": left, "evidence": "inferred", "source": "idle_clock",
                               "count": 1, "detail": f"the device clock was {mhz:.0f} of {top:.0f} MHz at the call's "
                                                     f"start, after {gap / 1e9:.1f} s idle"})
        elif left > 0:
            causes.append({"cause": "clock_ramp", "ms": left, "evidence": "inferred", "source": "idle_gap", "count": 1,
                           "detail": f"after {gap / 1e9:.1f} s idle, with no clock reading (no clock source): clocks "
                                     "and power states drop while idle, and caches go cold"})
    attributed = sum(c["ms"] for c in causes)
    return {
        "index": index, "key": key, "t_s": (start - start_ns) / 1e9, "ms": ms, "gap_s": gap / 1e9,
        "first": bool(first), "outlier": bool(outlier), "after_idle": bool(after_idle),
        "median_ms": median_ns / 1e6 if median_ns else None, "calls_before": int(calls_before),
        "excess_ms": excess, "causes": causes,
        "unattributed_ms": (excess - attributed) if excess is not None else None,
        "recompile_reasons": reasons,
        "cuda_calls": cuda_calls,
        "clock_mhz": list(clock) if clock is not None else None,
    }


# The causes watch books from CUPTI, each with what its calls are; a call during which one of these
# closed on its thread is kept (the native hot path gets them as a bit mask: cupti_cause_mask).
CUPTI_CAUSES = {
    "allocator_growth": "device memory allocations (cudaMalloc / cuMemAlloc / cuMemCreate)",
    "runtime_init": "module loads and CUDA set-up (a kernel's module loaded on its first launch, a context)",
    "jit_compile": "PTX the driver compiled to this GPU's code (no cubin for its architecture)",
    "graph_capture": "stream capture and graph instantiate / upload",
    "algorithm_selection": "algorithm selection calls",
}


def cupti_cause_mask() -> int:
    """CUPTI_CAUSES as the native hot path takes them: bit (1 << recorder id) per cause."""
    from ...causes import recorded

    ids = {name: cid for cid, name in recorded().items()}
    return sum(1 << ids[name] for name in CUPTI_CAUSES)


def _cupti_causes(by_name: dict[str, dict[str, int]], *, outside_ms: float, captured: bool) -> list[dict[str, Any]]:
    """CUPTI's one-time CUDA calls during the call as causes: measured, or scaled to fit the time
    outside dynamo's compiles (estimated) when they would not."""
    got = [(name, row) for name, row in by_name.items() if name in CUPTI_CAUSES and row["calls"] > 0
           and not (name == "graph_capture" and captured)]
    total = sum(row["ns"] for _, row in got) / 1e6
    scale = min(1.0, outside_ms / total) if total > 0 else 1.0
    out = []
    for name, row in got:
        detail = f"{row['calls']} {CUPTI_CAUSES[name]} on the calling thread, timed by CUPTI"
        if row["bytes"]:
            detail += f": {row['bytes'] / 2**20:.1f} MiB"
        if scale < 1.0:
            detail += (f"; scaled by {scale:.2f} to fit the call's time outside dynamo's compiles (a CUDA call "
                       "made inside a compile is the compile's time)")
        out.append({"cause": name, "ms": row["ns"] / 1e6 * scale, "evidence": "measured" if scale >= 1.0 else "estimated",
                    "source": "cupti", "count": row["calls"], "detail": detail})
    return out


def _clock(reading: Any) -> tuple[float, float] | None:
    """A clock source's reading as (MHz, maximum MHz), or None when it is not two finite numbers."""
    import math

    try:
        mhz, top = float(reading[0]), float(reading[1])
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    return (mhz, top) if math.isfinite(mhz) and math.isfinite(top) and top > 0 else None


__all__ = ["CUPTI_CAUSES", "FaultPrice", "build", "cupti_cause_mask", "describe"]

"""What one module boundary costs: the native entry the module hooks call (module_enter + module_exit,
host counters sampled at each), straight from Python, inside a recording, in ns per boundary.

    python bench/boundary.py [--batches 41] [--calls 2000] [--json PATH]

Every boundary samples (the gap between samples set to 0 where the build has one: boundaries that come
within the gap of the last sample take none). Each batch makes `calls` enter/exit pairs (2 x calls
boundaries) and is timed with perf_counter_ns; an
empty loop of the same length, timed the same way, is subtracted. Reported: the p10 and the median
over the batches (a busy machine slows batches, never speeds them up: the p10 is the figure to compare
between builds). Two kinds of boundary are timed: `quiet` (the thread kept its CPU since the last
boundary, the usual case) and `switched` (the thread slept just before each boundary, so the counters
read only after a context switch are read too; the sleep itself is outside the timed part).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

from warmprof import _native, timeline


def _quiet_batch(nid: int, calls: int) -> int:
    enter, leave = _native.module_enter, _native.module_exit
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        enter(nid, True)
        leave(nid)
    return time.perf_counter_ns() - t0


def _empty_batch(calls: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        pass
    return time.perf_counter_ns() - t0


def _switched_ns(nid: int, calls: int) -> tuple[float, float]:
    """(p10 ns of a boundary right after the thread slept, p10 ns of the quiet boundary just after it),
    each timed with perf_counter_ns around the call: what the counters read after a switch add."""
    enter, leave = _native.module_enter, _native.module_exit
    switched, quiet = [], []
    for _ in range(calls):
        time.sleep(20e-6)  # a voluntary switch: the thread blocks, so the next boundary reads everything
        t0 = time.perf_counter_ns()
        enter(nid, True)
        t1 = time.perf_counter_ns()
        leave(nid)
        t2 = time.perf_counter_ns()
        switched.append(t1 - t0)
        quiet.append(t2 - t1)
    switched.sort()
    quiet.sort()
    return float(switched[len(switched) // 10]), float(quiet[len(quiet) // 10])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=41)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    nid = timeline.name_id("module:bench_boundary")
    gap = getattr(_native, "set_boundary_gap_ns", None)
    if gap is not None:
        gap(0)  # every boundary samples the host counters: the sample's own cost is what is timed
    gc.disable()
    quiet, empty = [], []
    try:
        for k in range(args.batches + 1):
            with timeline.Recording():  # a fresh one per batch: no batch runs into the module budget
                _native.begin_section(1)
                took = _quiet_batch(nid, args.calls)
                if k:  # the first batch warms the path
                    quiet.append(took)
                    empty.append(_empty_batch(args.calls))
        with timeline.Recording():
            _native.begin_section(1)
            switched, after = _switched_ns(nid, min(args.calls, 400))
    finally:
        gc.enable()
        if gap is not None:
            gap(-1)  # the default gap again
    floor = statistics.median(empty)
    per = sorted(max(0.0, (q - floor) / (2 * args.calls)) for q in quiet)
    out = {"quiet_p10_ns": round(per[len(per) // 10], 1), "quiet_median_ns": round(statistics.median(per), 1),
           "switched_p10_ns": round(switched, 1), "quiet_timed_p10_ns": round(after, 1), "batches": args.batches, "calls": args.calls,
           "schedstat": _native.thread_schedstat() is not None}
    print(f"module boundary (enter or exit, host counters sampled): p10 {out['quiet_p10_ns']:.0f} ns, median "
          f"{out['quiet_median_ns']:.0f} ns over {args.batches} batches of {2 * args.calls} boundaries; "
          f"timed one at a time with perf_counter_ns: right after a context switch p10 {switched:.0f} ns, the quiet "
          f"boundary after it p10 {after:.0f} ns")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

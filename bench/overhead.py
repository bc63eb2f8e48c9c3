"""What recording one span costs, from Python and from C++, against the usual alternatives.

    python bench/overhead.py [--json PATH] [--batches 31] [--quick]

Each method runs `batches` batches of N spans; a batch is timed with time.perf_counter_ns around
the loop, and the median of an empty loop of the same N, timed the same way, is subtracted.
The figures are ns per span (one open + one close): median and p10 over the batches.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import operator
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from warmprof import _native, timeline

# Spans per batch: enough that a batch takes milliseconds, few enough for a ~60 s run on 2 cores.
N_NATIVE = 100_000  # 200k records per batch, under the default 262144 per thread
N_PERF_COUNTER = 100_000
N_RECORD_FUNCTION = 20_000
N_RECORD_FUNCTION_PROFILER = 2_000
CPP_ITERATIONS = 100_000

# Issue #2 acceptance targets.
TARGET_NATIVE_NS = 60.0
TARGET_VS_PERF_COUNTER = 4.0
TARGET_VS_RECORD_FUNCTION = 20.0
TARGET_CPP_NS = 30.0


@dataclass
class Figure:
    median: float
    p10: float

    def as_dict(self) -> dict[str, float]:
        return {"median": round(self.median, 2), "p10": round(self.p10, 2)}


def _figure(per_span_ns: list[float]) -> Figure:
    ordered = sorted(per_span_ns)
    p10 = ordered[int(0.1 * (len(ordered) - 1))]
    return Figure(statistics.median(ordered), p10)


def _timed(loop: Callable[[int], None], n: int) -> int:
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        loop(n)
        return time.perf_counter_ns() - t0
    finally:
        if gc_was_enabled:
            gc.enable()


def _empty_loop(n: int) -> None:
    for _ in range(n):
        pass


def _empty_loop_ns(n: int, batches: int) -> float:
    _timed(_empty_loop, n)  # warm-up
    return statistics.median(_timed(_empty_loop, n) for _ in range(batches))


def _per_span(batch_ns: list[int], empty_ns: float, n: int) -> list[float]:
    return [max(0.0, (b - empty_ns) / n) for b in batch_ns]


# --- the four ways of recording one span from Python ---------------------------------------------


def bench_native(n: int, batches: int, empty_ns: float) -> Figure:
    nid = timeline.name_id("bench:span")
    cause = timeline.STRUCTURE

    def loop(count: int) -> None:
        # Everything the loop touches is a local: closure cells cost a few ns per access here.
        begin, end, c, n = timeline.begin, timeline.end, cause, nid
        for _ in range(count):
            begin(c, n)
            end(c, n)

    times = []
    for i in range(batches + 1):  # the first batch warms up
        # A fresh recording per batch: every batch starts with an empty buffer, so nothing drops.
        with timeline.Recording() as rec:
            elapsed = _timed(loop, n)
        tl = rec.drain()
        assert tl.dropped == 0, f"native batch {i} dropped {tl.dropped} records"
        assert int((tl.name == nid).sum()) == 2 * n, "native batch lost records"
        if i:
            times.append(elapsed)
    return _figure(_per_span(times, empty_ns, n))


def bench_perf_counter_pair(n: int, batches: int, empty_ns: float) -> Figure:
    stamps: list[int] = []

    def loop(count: int) -> None:
        append, clock = stamps.append, time.perf_counter_ns
        for _ in range(count):
            append(clock())
            append(clock())

    times = []
    for i in range(batches + 1):
        stamps.clear()
        elapsed = _timed(loop, n)
        assert len(stamps) == 2 * n
        if i:
            times.append(elapsed)
    return _figure(_per_span(times, empty_ns, n))


def bench_call_floor(n: int, batches: int, empty_ns: float) -> Figure:
    """Two calls of a trivial 2-argument C function: what any span recorded from Python pays."""

    def loop(count: int) -> None:
        call, a, b = operator.is_, 0, 1
        for _ in range(count):
            call(a, b)
            call(a, b)

    times = [_timed(loop, n) for _ in range(batches + 1)][1:]
    return _figure(_per_span(times, empty_ns, n))


@contextlib.contextmanager
def _quiet_stderr():
    """Kineto prints a line to fd 2 at every profiler start and stop; keep the table readable."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def bench_record_function(torch, n: int, batches: int, empty_ns: float) -> Figure:
    def loop(count: int) -> None:
        record_function = torch.autograd.profiler.record_function
        for _ in range(count):
            with record_function("bench:span"):
                pass

    times = [_timed(loop, n) for _ in range(batches + 1)][1:]
    return _figure(_per_span(times, empty_ns, n))


def bench_record_function_profiler(torch, n: int, batches: int, empty_ns: float) -> Figure:
    def loop(count: int) -> None:
        record_function = torch.autograd.profiler.record_function
        for _ in range(count):
            with record_function("bench:span"):
                pass

    times = []
    activities = [torch.profiler.ProfilerActivity.CPU]
    with _quiet_stderr():
        for i in range(batches + 1):
            # A fresh profiler per batch keeps its event list (and its post-processing) small.
            with torch.profiler.profile(activities=activities):
                elapsed = _timed(loop, n)
            if i:
                times.append(elapsed)
    return _figure(_per_span(times, empty_ns, n))


def bench_cpp_span(iterations: int, batches: int) -> Figure:
    nid = timeline.name_id("bench:cpp_span")
    # Outside any Recording: cpp_span_cost_ns starts and stops the recorder around its own loop.
    assert not timeline.active()
    _native.cpp_span_cost_ns(nid, iterations)  # warm-up
    return _figure([_native.cpp_span_cost_ns(nid, iterations) for _ in range(batches)])


def bench_clock_pair(iterations: int, batches: int) -> Figure:
    """Two raw reads of the hot-path clock in a C++ loop: what any span pays for its two timestamps."""
    _native.clock_read_cost_ns(iterations)  # warm-up
    return _figure([2 * _native.clock_read_cost_ns(iterations) for _ in range(batches)])


# --- report -------------------------------------------------------------------------------------


JSON_KEYS = ("native_span_ns", "perf_counter_pair_ns", "record_function_ns", "record_function_profiler_ns", "cpp_span_ns")
ROWS = [
    ("native_span_ns", "warmprof begin/end (Python)"),
    ("perf_counter_pair_ns", "2x perf_counter_ns + list.append"),
    ("record_function_ns", "torch record_function, no profiler"),
    ("record_function_profiler_ns", "torch record_function, profiler on"),
    ("cpp_span_ns", "warmprof begin/end (C++ loop)"),
    ("call_floor_ns", "reference: 2 empty C calls from Python"),
    ("clock_pair_ns", "reference: 2 raw clock reads (C++ loop)"),
]


def _table(results: dict[str, Figure | None]) -> str:
    native = results["native_span_ns"]
    lines = [f"{'method':<38} {'median ns':>10} {'p10 ns':>9} {'x native':>9}", "-" * 69]
    for key, label in ROWS:
        fig = results[key]
        if fig is None:
            lines.append(f"{label:<38} {'n/a':>10} {'n/a':>9} {'':>9}")
            continue
        ratio = fig.median / native.median if native.median > 0 else float("inf")
        lines.append(f"{label:<38} {fig.median:>10.1f} {fig.p10:>9.1f} {ratio:>8.1f}x")
    return "\n".join(lines)


def _checks(results: dict[str, Figure | None]) -> list[tuple[str, bool]]:
    native = results["native_span_ns"].median
    checks = [(f"native span median <= {TARGET_NATIVE_NS:.0f} ns", native <= TARGET_NATIVE_NS)]
    pair = results["perf_counter_pair_ns"].median
    checks.append((f"perf_counter pair >= {TARGET_VS_PERF_COUNTER:.0f}x native", pair >= TARGET_VS_PERF_COUNTER * native))
    if results["record_function_ns"] is not None:
        rf = results["record_function_ns"].median
        checks.append((f"record_function >= {TARGET_VS_RECORD_FUNCTION:.0f}x native", rf >= TARGET_VS_RECORD_FUNCTION * native))
    checks.append((f"C++ span median <= {TARGET_CPP_NS:.0f} ns", results["cpp_span_ns"].median <= TARGET_CPP_NS))
    return checks


def _floor_note(results: dict[str, Figure | None]) -> str:
    """The two costs every span recorded from Python pays, and the ratio to the perf_counter pair they
    leave room for. An estimate, labelled so: the two are measured apart, and in a real span they
    overlap a little in the CPU, so a span can come out a few percent under their sum."""
    parts = results["call_floor_ns"].median + results["clock_pair_ns"].median
    native = results["native_span_ns"].median
    pair = results["perf_counter_pair_ns"].median
    return (f"every span from Python pays 2 C calls + 2 clock reads: {parts:.1f} ns measured apart; "
            f"warmprof's span is {native / parts:.2f}x that sum.\n"
            f"estimate: on this machine a span from Python can be at most about {pair / parts:.1f}x cheaper than "
            f"the perf_counter pair (warmprof: {pair / native:.1f}x).")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument("--batches", type=int, default=31, help="timed batches per method (default 31)")
    parser.add_argument("--quick", action="store_true", help="a tenth of the spans per batch (smoke test)")
    args = parser.parse_args(argv)
    if args.batches < 3:
        parser.error("--batches must be at least 3")
    scale = 10 if args.quick else 1
    batches = args.batches

    try:
        import torch
    except ImportError:
        torch = None
        print("torch is not installed: the record_function rows are skipped", file=sys.stderr)

    n_native, n_pair = N_NATIVE // scale, N_PERF_COUNTER // scale
    n_rf, n_rfp = N_RECORD_FUNCTION // scale, N_RECORD_FUNCTION_PROFILER // scale
    empty = {n: _empty_loop_ns(n, batches) for n in {n_native, n_pair, n_rf, n_rfp}}

    started = time.perf_counter()
    results: dict[str, Figure | None] = {
        "native_span_ns": bench_native(n_native, batches, empty[n_native]),
        "perf_counter_pair_ns": bench_perf_counter_pair(n_pair, batches, empty[n_pair]),
        "record_function_ns": None,
        "record_function_profiler_ns": None,
        "cpp_span_ns": bench_cpp_span(CPP_ITERATIONS // scale, batches),
        "call_floor_ns": bench_call_floor(n_native, batches, empty[n_native]),
        "clock_pair_ns": bench_clock_pair(CPP_ITERATIONS // scale, batches),
    }
    if torch is not None:
        results["record_function_ns"] = bench_record_function(torch, n_rf, batches, empty[n_rf])
        results["record_function_profiler_ns"] = bench_record_function_profiler(torch, n_rfp, batches, empty[n_rfp])
    assert not timeline.active()

    clock = _native.clock_info()
    print(f"warmprof {_native.__version__}, clock {clock['source']} ({clock['ns_per_tick']:.4f} ns/tick), "
          f"python {sys.version.split()[0]}, torch {torch.__version__ if torch else 'absent'}")
    print(f"{batches} batches per method; "
          f"spans per batch: native {n_native}, perf_counter {n_pair}, record_function {n_rf}, "
          f"under profiler {n_rfp}; empty loop subtracted; {time.perf_counter() - started:.1f} s\n")
    print(_table(results))
    print()
    for label, ok in _checks(results):
        print(f"  [{'ok' if ok else 'MISS'}] {label}")
    print()
    print(_floor_note(results))
    if torch is not None:
        from warmprof.instruments.modules import ModuleHooks

        hooks = _figure([ModuleHooks.calibrate_cost(calls=1000 // scale * 2, batches=5) for _ in range(5)])
        print(f"\nwarmprof's module hooks (trace's placement): {hooks.median / 1000:.2f} us per module call "
              f"(p10 {hooks.p10 / 1000:.2f} us), reported in every trace as an estimated profiler_overhead")

    if args.json:
        payload = {key: (results[key].as_dict() if results[key] is not None else None) for key in JSON_KEYS}
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What warmprof.watch adds to a call when nothing fires: the watched and the plain callable, called
alternately in short batches, the difference per call.

    python bench/watch_overhead.py [--batches 41] [--calls 2000] [--json PATH]

Two forwards: an empty one (the watch's whole cost shows) and one of about 1 ms (an MLP whose batch
is sized at start to take ~1 ms here). Each batch times `calls` calls of the plain callable and then of the
watched one (same input, a seen key, no outlier); the per-call difference of each pair is one
sample. Prints the median and p10 in ns, and the ratio watched / plain on the 1 ms forward, all from
this one run. `--json PATH` writes {"watch_ns_per_call": {"median", "p10"}, "ratio_1ms_forward": r,
...}. Run by hand (timing on a busy machine moves; the check is the median over many short pairs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def _pairs(plain, watched, x, batches: int, calls: int) -> tuple[list[float], list[float]]:
    diffs, ratios = [], []
    for _ in range(batches):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            plain(x)
        t1 = time.perf_counter_ns()
        for _ in range(calls):
            watched(x)
        t2 = time.perf_counter_ns()
        a, b = (t1 - t0) / calls, (t2 - t1) / calls
        diffs.append(b - a)
        ratios.append(b / a)
    return diffs, ratios


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=41)
    ap.add_argument("--calls", type=int, default=2000, help="calls per batch on the empty forward")
    ap.add_argument("--json", metavar="PATH")
    a = ap.parse_args()

    import torch

    import warmprof

    torch.set_num_threads(1)
    x = torch.zeros(1, 64)

    def empty(t):
        return t

    # ~1 ms forward: a 512-wide MLP, its batch grown by a quarter at a time until a call takes ~1 ms here
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512))
    rows_in = 1.0
    with torch.no_grad():
        while rows_in < 65536:
            xm = torch.zeros(int(rows_in), 512)
            for _ in range(3):
                mlp(xm)
            t0 = time.perf_counter()
            for _ in range(10):
                mlp(xm)
            if (time.perf_counter() - t0) / 10 >= 1e-3:
                break
            rows_in *= 1.25

        rows = []
        for name, fn, inp, calls in (("empty forward", empty, x, a.calls),
                                     ("~1 ms forward", mlp, xm, max(20, a.calls // 200))):
            w = warmprof.watch(fn)
            for _ in range(20):  # past the first call and the outlier rule's first calls
                w(inp)
            diffs, ratios = _pairs(fn, w, inp, a.batches, calls)
            kept = w.stats()
            w.close()
            diffs.sort()
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                fn(inp)
            plain_ns = (time.perf_counter_ns() - t0) / calls
            rows.append({"forward": name, "plain_ns": plain_ns, "median_ns": statistics.median(diffs),
                         "p10_ns": diffs[len(diffs) // 10], "ratio": statistics.median(ratios),
                         "events": kept["events"], "calls": kept["calls"]})
    print(f"{'forward':<15} {'plain ns/call':>14} {'watch adds (median)':>20} {'p10':>8} {'ratio':>7} {'events':>7}")
    for r in rows:
        print(f"{r['forward']:<15} {r['plain_ns']:>14.0f} {r['median_ns']:>17.0f} ns {r['p10_ns']:>8.0f} "
              f"{r['ratio']:>7.4f} {r['events']:>7}")
    empty_row, ms_row = rows
    print(f"\nwatch adds {empty_row['median_ns']:.0f} ns a call (median of {a.batches} pairs of {a.calls} calls, "
          f"empty forward; p10 {empty_row['p10_ns']:.0f} ns); on a {ms_row['plain_ns'] / 1e6:.2f} ms forward the "
          f"watched call takes {ms_row['ratio']:.4f}x the plain one. Events kept: {empty_row['events']} and "
          f"{ms_row['events']} (the first call at each key).")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"watch_ns_per_call": {"median": empty_row["median_ns"], "p10": empty_row["p10_ns"]},
                       "ratio_1ms_forward": ms_row["ratio"], "forward_1ms_ns": ms_row["plain_ns"],
                       "watch_ns_per_call_1ms_forward": {"median": ms_row["median_ns"], "p10": ms_row["p10_ns"]},
                       "batches": a.batches, "calls": a.calls}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

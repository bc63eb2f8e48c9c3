"""CPU contention, planted: a CPU hog pinned to the trace's own CPU while the first pass runs, and
the report's cpu_contention against what the kernel says the process waited in that window.

    python bench/contention.py [--runs 3] [--hog-s 0.5] [--cpu N]

Each run is a fresh process pinned to one CPU (os.sched_setaffinity, as `taskset -c N` would). A hog
process pinned to the same CPU is started first and waits on a pipe; a forward pre-hook on the demo
model (registered before warmprof's hooks) releases it at the first pass's start, and it spins for
--hog-s seconds. The same hooks read /proc/self/task/*/schedstat with plain Python file reads at the
first forward's start and end: the kernel's run-queue delay for that window, for the pass's thread and
for every thread of the process (independent of warmprof's native sampling).

Prints one row per run and the ratios: booked cpu_contention / kernel's wait of the pass thread, and /
that wait less the steady passes' median wait (what the trace books beyond a steady pass). Also
whether the advice or the verdict leans on the contention (it must not call the pass warm or cold
on that basis). Run by hand; not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r'''
import json, os, subprocess, sys, threading
cpu, hog_s = int(sys.argv[1]), float(sys.argv[2])
os.sched_setaffinity(0, {cpu})
import torch
import warmprof
from warmprof.traces.demo import demo_model, DEFAULT_SHAPE

HOG = ("import os, sys, time; os.sched_setaffinity(0, {%d}); sys.stdin.read(1); "
       "t = time.monotonic() + %f\nwhile time.monotonic() < t: pass") % (cpu, hog_s)
hog = subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.PIPE)

def tasks():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[1])
        except OSError:
            pass
    return out

seen = {}
def pre(_m, _a):
    if "start" not in seen:
        seen["start"] = tasks()
        seen["tid"] = threading.get_native_id()
        hog.stdin.write(b"x"); hog.stdin.flush()
def post(_m, _a, _o):
    if "end" not in seen:
        seen["end"] = tasks()

model = demo_model()
model.register_forward_pre_hook(pre)
model.register_forward_hook(post)
r = warmprof.trace(model, DEFAULT_SHAPE, progress=False)
hog.wait()
s, e, tid = seen["start"], seen["end"], seen["tid"]
main_ms = (e[tid] - s.get(tid, 0)) / 1e6
all_ms = sum(v - s.get(t, 0) for t, v in e.items()) / 1e6
waits = r.protocol.steady_run_delay_ms
print(json.dumps({
    "booked_ms": r.cause_ms("cpu_contention"),
    "evidence": sorted({c.evidence for c in r.causes if c.cause == "cpu_contention"}),
    "kernel_main_ms": main_ms, "kernel_all_ms": all_ms,
    "steady_wait_median_ms": statistics.median(waits) if waits else None,
    "first_ms": r.first_pass_ms, "steady_median_ms": r.steady_median_ms,
    "steady_net_median_ms": r.protocol.steady_net_median_ms, "excess_ms": r.excess_ms, "noise_ms": r.noise_band_ms,
    "threads": torch.get_num_threads(),
    "advice": r.advice,
}))
'''.replace("import json, os", "import json, os, statistics")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hog-s", type=float, default=0.5)
    ap.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    a = ap.parse_args()
    rows = []
    for i in range(a.runs):
        out = subprocess.run([sys.executable, "-c", CHILD, str(a.cpu), str(a.hog_s)], capture_output=True, text=True,
                             timeout=600)
        if out.returncode != 0:
            print(out.stderr[-3000:], file=sys.stderr)
            return 1
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{'run':>3} {'booked ms':>10} {'kernel main':>12} {'kernel all':>11} {'steady wait':>12} "
          f"{'first ms':>9} {'steady ms':>10} {'net ms':>8} {'ratio':>6} {'ratio net':>9}")
    ratios, net_ratios = [], []
    for i, r in enumerate(rows):
        sw = r["steady_wait_median_ms"] or 0.0
        ratio = r["booked_ms"] / r["kernel_main_ms"] if r["kernel_main_ms"] > 0 else float("nan")
        beyond = r["kernel_main_ms"] - sw
        net_ratio = r["booked_ms"] / beyond if beyond > 0 else float("nan")
        ratios.append(ratio)
        net_ratios.append(net_ratio)
        print(f"{i:>3} {r['booked_ms']:>10.2f} {r['kernel_main_ms']:>12.2f} {r['kernel_all_ms']:>11.2f} {sw:>12.2f} "
              f"{r['first_ms']:>9.2f} {r['steady_median_ms']:>10.2f} {r['steady_net_median_ms'] or 0:>8.2f} "
              f"{ratio:>6.2f} {net_ratio:>9.2f}")
    print(f"\nbooked / kernel's wait of the pass thread: median {statistics.median(ratios):.2f} "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}); / that wait less a steady pass's: median "
          f"{statistics.median(net_ratios):.2f}; evidence {sorted({e for r in rows for e in r['evidence']})}; "
          f"torch threads {rows[0]['threads']}")
    leaning = [a for r in rows for a in r["advice"]
               if a.startswith("cpu_contention") and "no warm-up removes it" not in a]
    print("advice lines on cpu_contention that do not say a warm-up leaves it:", leaning or "none")
    for r in rows:
        print("advice:", *r["advice"], sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())

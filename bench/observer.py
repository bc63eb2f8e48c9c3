"""The observer effect: the demo's first-pass wall time plain, under warmprof.trace, and under
torch.profiler.profile(), each in fresh processes with their own empty inductor cache.

    python bench/observer.py [--runs 5] [--modes eager,compiled] [--json PATH]

Prints the median first-pass ms per (mode, observer) and the ratio to plain.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
import torch
from warmprof.traces.demo import demo_model, DEFAULT_SHAPE
observer, compiled = sys.argv[1], sys.argv[2] == "compiled"
model = demo_model()
x = torch.randint(0, model.vocab, DEFAULT_SHAPE)
runner = torch.compile(model) if compiled else model
if observer == "warmprof":
    import warmprof
    r = warmprof.trace(runner if not compiled else model, inputs=(x,), compile=True if compiled else None, steady=3)
    first = r.first_pass_ms
else:
    import contextlib
    ctx = torch.profiler.profile() if observer == "profiler" else contextlib.nullcontext()
    with torch.no_grad(), ctx:
        t0 = time.perf_counter_ns()
        runner(x)
        first = (time.perf_counter_ns() - t0) / 1e6
print(json.dumps({"first_ms": first}))
"""


def run_child(observer: str, mode: str) -> float:
    cache = tempfile.mkdtemp(prefix="warmprof-observer-")
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
               TRITON_CACHE_DIR=os.path.join(cache, "triton"))
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, observer, mode], env=env, capture_output=True,
                             text=True, check=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["first_ms"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--modes", default="eager,compiled")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    observers = ("plain", "warmprof", "profiler")
    results: dict[str, dict[str, list[float]]] = {}
    t_start = time.monotonic()
    for mode in args.modes.split(","):
        results[mode] = {o: [] for o in observers}
        for i in range(args.runs):
            for o in observers:  # interleaved, so drift in machine load hits all three alike
                ms = run_child(o, mode)
                results[mode][o].append(ms)
                print(f"  {mode:<8} run {i + 1}/{args.runs} {o:<9} first pass {ms:10.1f} ms", file=sys.stderr, flush=True)
    print(f"\nobserver effect on the demo's first pass ({args.runs} fresh processes each, "
          f"{time.monotonic() - t_start:.0f} s total)")
    print(f"{'mode':<9} {'observer':<10} {'median ms':>11} {'min ms':>10} {'max ms':>10} {'ratio to plain':>15}")
    summary = {}
    for mode, by_obs in results.items():
        plain = statistics.median(by_obs["plain"])
        for o, vals in by_obs.items():
            med = statistics.median(vals)
            summary[f"{mode}.{o}"] = {"median_ms": med, "runs": vals, "ratio_to_plain": med / plain}
            print(f"{mode:<9} {o:<10} {med:>11.1f} {min(vals):>10.1f} {max(vals):>10.1f} {med / plain:>15.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

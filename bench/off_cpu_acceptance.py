"""Issue 24, item 3 (off-CPU time, measured): a 60 ms sleep and a first read of a 64 MiB file not in the
page cache, planted in modules of their own (tests/integration/planted_off_cpu.py), each timed by itself
in fresh processes (no warmprof) and traced with `warmprof trace ... --threads 1` in fresh CLI processes;
medians of N runs each, side by side.

    python bench/off_cpu_acceptance.py [--runs 3] [--blob PATH] [--json PATH]

Ground truth, per fresh process: the time the sleep and the cold read kept the thread blocked (wall less
CPU time less run-queue delay: what the trace books as wait and disk_read; a busy machine's queueing for a
CPU is cpu_contention, measured apart), in the planted model's first call run without warmprof (each plant
timed by its own clocks) and in a bare script; beside them the sleep's wall time, and the read's whole cost on a
first call (a cold read's wall time less a warm one's, also net of each one's run-queue delay: the model
reads the file on every call) with its CPU time against a warm read's (the kernel's work filling the page
cache, which the trace does not book as disk_read). The trace's figures are
the wait and disk_read booked in the planted module, and what else it booked there (a compile, the
allocator, contention: none is expected of either plant).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLANTED = ROOT / "tests" / "integration" / "planted_off_cpu.py"
sys.path.insert(0, str(ROOT / "tests"))
import page_cache  # noqa: E402

TRUTH = r'''
import json, os, sys, time
SLEEP_S, BLOB = float(sys.argv[1]), sys.argv[2]

def clocks():
    with open("/proc/thread-self/schedstat") as f:
        delay = int(f.read().split()[1])
    return time.monotonic_ns(), time.thread_time_ns(), delay

def timed(fn):
    w0, c0, d0 = clocks()
    fn()
    w1, c1, d1 = clocks()
    return {"wall_ms": (w1 - w0) / 1e6, "cpu_ms": (c1 - c0) / 1e6, "delay_ms": (d1 - d0) / 1e6,
            "off_ms": ((w1 - w0) - (c1 - c0) - (d1 - d0)) / 1e6}

buf = bytearray(os.path.getsize(BLOB))
def read():
    with open(BLOB, "rb", buffering=0) as f:
        f.readinto(buf)
sleep = timed(lambda: time.sleep(SLEEP_S))
fd = os.open(BLOB, os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
cold = timed(read)
warm = timed(read)
print(json.dumps({"sleep": sleep, "cold": cold, "warm": warm}))
'''

# The planted model itself in a fresh process, no warmprof: its first call, each plant timed by its own clocks.
BY_ITSELF = r'''
import sys, torch
sys.path.insert(0, sys.argv[1])
torch.set_num_threads(1)
import planted_off_cpu
model = planted_off_cpu.both()
with torch.no_grad():
    model(torch.randn(4, 64))
'''

PLANTS = {"wait": "Planted.sleeper", "disk_read": "Planted.reader"}
OTHERS = ("jit_compile", "allocator_growth", "cpu_contention")


def truth_run(sleep_s: float, blob: str) -> dict:
    out = subprocess.run([sys.executable, "-c", TRUTH, str(sleep_s), blob], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    net = lambda x: x["wall_ms"] - x["delay_ms"]  # noqa: E731
    cold, warm = r["cold"], r["warm"]
    return {"sleep_ms": r["sleep"]["off_ms"], "sleep_wall_ms": r["sleep"]["wall_ms"],
            "read_first_extra_ms": cold["wall_ms"] - warm["wall_ms"], "read_first_extra_net_ms": net(cold) - net(warm),
            "cold_read_ms": cold["wall_ms"], "warm_read_ms": warm["wall_ms"], "cold_off_cpu_ms": cold["off_ms"],
            "cold_cpu_ms": cold["cpu_ms"], "warm_cpu_ms": warm["cpu_ms"]}


def model_run(blob: str, sleep_s: float, own: Path) -> dict:
    """The planted model's first call in a fresh process without warmprof: each plant's blocked ms."""
    own.unlink(missing_ok=True)
    env = {**os.environ, "PLANTED_BLOB": blob, "PLANTED_SLEEP_S": str(sleep_s), "PLANTED_SELF_TIMES": str(own)}
    subprocess.run([sys.executable, "-c", BY_ITSELF, str(PLANTED.parent)], env=env, capture_output=True, text=True,
                   check=True)
    got = {}
    for line in own.read_text().splitlines():
        o = json.loads(line)
        got[f"model_{o['what']}_ms"] = (o["ns"] - o["cpu_ns"] - o["delay_ns"]) / 1e6
    return got


def trace_run(blob: str, sleep_s: float, factory: str, out_json: Path) -> dict:
    selfs = out_json.with_suffix(".self.jsonl")
    env = {**os.environ, "PLANTED_BLOB": blob, "PLANTED_SLEEP_S": str(sleep_s), "PLANTED_SELF_TIMES": str(selfs)}
    cmd = [sys.executable, "-m", "warmprof", "trace", f"{PLANTED}:{factory}", "--shape", "4,64", "--threads", "1",
           "--quiet", "--json", str(out_json)]
    subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    r = json.loads(out_json.read_text())
    got = {"excess_ms": r["excess_ms"], "causes": [[c["cause"], c["source"], c["module"], c["ms"]] for c in r["causes"]]}
    for cause, module in PLANTS.items():
        got[f"{cause}_ms"] = _in_module(r, cause, module)
        got[f"{cause}_anywhere_ms"] = sum(c["ms"] for c in r["causes"] if c["cause"] == cause)
        for other in OTHERS:
            got[f"{other}_in_{module}_ms"] = _in_module(r, other, module)
    got["largest"] = max(r["causes"], key=lambda c: c["ms"])["cause"] if r["causes"] else None
    # The plants' own clocks in the traced process, first pass only (the trace's fresh process for the
    # instrumented passes writes last): each block's time off the CPU, and the run-queue delay around
    # it (the trace books the part of that which came with waking, with the block).
    own = [json.loads(line) for line in selfs.read_text().splitlines()] if selfs.exists() else []
    for what, cause in (("sleep", "wait"), ("read", "disk_read")):
        rows = [o for o in own if o["what"] == what]
        if rows:
            o = rows[-1]
            got[f"{cause}_self_ms"] = (o["ns"] - o["cpu_ns"] - o["delay_ns"]) / 1e6
            got[f"{cause}_self_delay_ms"] = o["delay_ns"] / 1e6
    return got


def _in_module(report: dict, cause: str, module: str) -> float:
    """ms of `cause` booked in `module` (the report's per-module table)."""
    for row in report.get("modules", []):
        if row.get("module") == module:
            return float(row.get("causes", {}).get(cause, 0.0))
    return 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--blob", help="the 64 MiB file to read (default: made in a temporary folder, removed after)")
    ap.add_argument("--sleep-s", type=float, default=0.06)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="warmprof-offcpu-", dir=os.environ.get("WARMPROF_BENCH_DIR"))
    blob = args.blob or os.path.join(tmp, "blob64.bin")
    if not args.blob:
        page_cache.make_file(blob, 64 << 20)
    why = page_cache.drop(blob)
    if why:
        print(f"cannot run the disk read plant: {why}")
        return 2
    truths, traces = [], []
    for k in range(args.runs):  # taken in turn, so that both meet the machine in the same moods
        truths.append({**truth_run(args.sleep_s, blob), **model_run(blob, args.sleep_s, Path(tmp) / f"model{k}.jsonl")})
        traces.append(trace_run(blob, args.sleep_s, "both", Path(tmp) / f"trace{k}.json"))
    med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
    summary = {key: med(truths, key) for key in truths[0]}
    summary.update({key: med(traces, key) for key in traces[0] if key.endswith("_ms")})
    print(f"ground truth, median of {args.runs} fresh processes each (no warmprof):")
    print(f"  the planted model's first call, each plant timed by its own clocks: sleep blocked "
          f"{summary['model_sleep_ms']:.2f} ms, 64 MiB cold read blocked {summary['model_read_ms']:.2f} ms")
    print("  the same by themselves in a bare script:")
    print(f"  sleep: blocked {summary['sleep_ms']:.2f} ms ({summary['sleep_wall_ms']:.2f} ms wall)")
    print(f"  64 MiB cold read: blocked {summary['cold_off_cpu_ms']:.2f} ms; cold {summary['cold_read_ms']:.2f} ms, warm "
          f"{summary['warm_read_ms']:.2f} ms wall, so the first call's extra {summary['read_first_extra_ms']:.2f} ms "
          f"({summary['read_first_extra_net_ms']:.2f} ms each less its run-queue delay); CPU time cold "
          f"{summary['cold_cpu_ms']:.2f} ms, warm {summary['warm_cpu_ms']:.2f} ms")
    print(f"warmprof trace {PLANTED.name}:both --shape 4,64 --threads 1, median of {args.runs} fresh CLI runs:")
    for cause, module in PLANTS.items():
        truth = summary["model_sleep_ms"] if cause == "wait" else summary["model_read_ms"]
        got = summary[f"{cause}_ms"]
        others = ", ".join(f"{o} {summary[f'{o}_in_{module}_ms']:.2f}" for o in OTHERS)
        print(f"  {cause} in {module}: {got:.2f} ms ({got / truth:.1%} of {truth:.2f} ms); {cause} anywhere "
              f"{summary[f'{cause}_anywhere_ms']:.2f} ms; also booked in {module}: {others} ms")
    for k, t in enumerate(traces):
        paired = ", ".join(f"{c} {t[c + '_ms']:.2f} ms against the plant's own clocks: {t[c + '_self_ms']:.2f} ms blocked "
                           f"+ {t[c + '_self_delay_ms']:.2f} ms queued for a CPU" for c in PLANTS if t.get(c + "_self_ms"))
        print(f"  run {k}: largest cause {t['largest']}, excess {t['excess_ms']:.2f} ms; {paired}")
    if args.json:
        args.json.write_text(json.dumps({"truth": truths, "traces": traces, "summary": summary}, indent=2) + "\n")
    if not args.blob:
        os.unlink(blob)
    return 0


if __name__ == "__main__":
    sys.exit(main())

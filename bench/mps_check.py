"""The Mac check: the one script to run on an Apple-silicon Mac against the warmprof installed there.

    python3 bench/mps_check.py [--out DIR] [--budget-s 600] [--lengths 16,32,64,...]

It builds nothing. Phases, each in a fresh child process (a true first call, and a crash or hang that
cannot take the others down), each cut to what is left of the budget:
  platform   the fingerprint: Apple chip, CPU and GPU cores, memory, Metal, macOS.
  probe      `warmprof probe --device mps`: matmul / softmax / elementwise first call vs steady at
             new shapes, the seen-shape re-run and equal-size pairs (the study's P1-P4 table) and
             the bucketing sweep (K lengths into B buckets).
  metal      the native Metal reference probe (warmprof.probes.metal_ref): newLibraryWithSource and
             newComputePipelineStateWithFunction timed per length (a function constant per length: a
             new pipeline each), and each dispatch's GPUStartTime/GPUEndTime.
  trace      `warmprof trace --demo --device mps`: each cause of the demo LM's first pass on the GPU.
Each phase prints its own table; its report is saved under --out (a temporary folder by default).
Exit codes: 0 every phase ran; 1 a phase failed (its error is printed); 3 not an Apple GPU here
(MPS unavailable; the reason is printed). Nothing here has been run on Apple hardware by the
people who wrote it: the first run on a Mac is the first proof.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXIT_FAILED = 1
EXIT_NO_MPS = 3
PHASES = {"platform": 60, "probe": 300, "metal": 120, "trace": 240}  # name -> cap (s)
DEFAULT_LENGTHS = (16, 32, 48, 64, 96, 128, 192, 256)

PLATFORM = """
import json, warmprof
from warmprof.system.platform import describe_device, fingerprint
fp = fingerprint()
print(json.dumps({"device": describe_device(fp, "mps"), **{k: fp[k] for k in sorted(fp) if k in (
    "apple_chip", "cpu_count", "cpu_performance_cores", "cpu_efficiency_cores", "gpu_cores", "memory_gb", "metal",
    "os", "os_build", "torch", "python")}}, indent=1))
print(json.dumps(warmprof.backends()["metal"]))
"""

METAL = """
import json, sys
from warmprof.probes.metal_ref import metal_reference
lengths = [int(x) for x in sys.argv[1].split(",")]
result = metal_reference(lengths=lengths, repeats=int(sys.argv[2]))
print(result.text())
with open(sys.argv[3], "w") as f:
    json.dump(result.to_dict(), f, indent=1)
"""


def mps_reason() -> str:
    """Why MPS cannot run here ('' when it can), asked in a child so this process stays cold."""
    code = ("import torch; ok = hasattr(torch.backends, 'mps') and torch.backends.mps.is_available(); "
            "print('' if ok else 'torch.backends.mps.is_available() is False (torch ' + torch.__version__ + ')')")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return f"could not ask torch: {e}"
    if done.returncode != 0:
        return "torch cannot be imported: " + (done.stderr.strip().splitlines() or ["?"])[-1]
    return done.stdout.strip()


def run_phase(name: str, argv: list[str], deadline: float) -> tuple[bool, str]:
    left = deadline - time.monotonic()
    cap = min(PHASES[name], left)
    if cap < 10:
        return False, f"{name}: not started ({left:.0f} s of the budget left)"
    print(f"\n=== {name} ({' '.join(argv[1:3])} ...; up to {cap:.0f} s) ===", flush=True)
    t0 = time.monotonic()
    try:
        done = subprocess.run(argv, text=True, timeout=cap)
    except subprocess.TimeoutExpired:
        return False, f"{name}: timed out after {cap:.0f} s"
    took = time.monotonic() - t0
    if done.returncode != 0:
        return False, f"{name}: exit code {done.returncode} after {took:.1f} s"
    return True, f"{name}: ok in {took:.1f} s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for the reports (default: a new temporary folder)")
    ap.add_argument("--budget-s", type=float, default=600.0, help="the whole run, start to summary (default 600)")
    ap.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)),
                    help="lengths for the Metal reference probe, one pipeline each")
    ap.add_argument("--repeats", type=int, default=5, help="dispatches per length in the Metal probe (default 5)")
    args = ap.parse_args(argv)
    why = mps_reason()
    if why:
        print(f"mps_check: no Apple GPU here: {why}. Nothing to check.", file=sys.stderr)
        return EXIT_NO_MPS
    out = Path(args.out or tempfile.mkdtemp(prefix="warmprof-mps-"))
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget_s
    py = sys.executable
    phases = [
        ("platform", [py, "-c", PLATFORM]),
        ("probe", [py, "-m", "warmprof", "probe", "--device", "mps", "--json", str(out / "probe_mps.json")]),
        ("metal", [py, "-c", METAL, args.lengths, str(args.repeats), str(out / "metal_ref.json")]),
        ("trace", [py, "-m", "warmprof", "trace", "--demo", "--device", "mps", "--json", str(out / "trace_mps.json")]),
    ]
    results = [run_phase(name, cmd, deadline) for name, cmd in phases]
    print("\n=== summary ===")
    for ok, line in results:
        print(("ok    " if ok else "FAIL  ") + line)
    print(f"reports in {out}: " + ", ".join(sorted(p.name for p in out.glob("*.json"))))
    summary = {"phases": [{"ok": ok, "line": line} for ok, line in results], "out": str(out)}
    (out / "mps_check.json").write_text(json.dumps(summary, indent=1))
    return 0 if all(ok for ok, _ in results) else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())

"""`warmprof run` on a CUDA process, without vLLM (issue 41's CUDA phases): a plain script that starts CUDA,
runs a first matmul, allocates 256 MiB and captures a CUDA graph, under `warmprof run`. What its report
says: the `cuda: init (context creation)` phase and its causes, whether CUPTI was on in the process, and
the time CUPTI's spans booked per cause (runtime_init: the context and lazy module loads; allocator_growth:
cuMemAlloc; graph_capture: the capture and instantiation) across the process's phases.

    python3 run_cuda.py OUT.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proof_common import exit_if_no_gpu, left_s, save  # noqa: E402

SCRIPT = r"""
import torch
x = torch.randn(1024, 1024, device="cuda")            # torch.cuda's lazy init: the context
y = x @ x                                              # cuBLAS: its handle, workspace, kernel module
big = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # a new segment: cuMemAlloc
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    y = x @ x
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):                               # stream capture and graph instantiate
    z = x @ x
g.replay()
torch.cuda.synchronize()
print("cuda work done", float(z[0, 0]) == float(z[0, 0]))
"""


def digest_report(report: dict) -> dict:
    """What the proof keeps of the run report: the CUDA process's CUDA init phase, CUPTI's state, and the
    time its spans booked per cause (pure: tests feed it a report)."""
    procs = report.get("processes") or []
    main = next((p for p in procs if p.get("parent") is None), procs[0] if procs else {})
    init = next((ph for ph in main.get("phases", []) if ph.get("name") == "cuda: init (context creation)"), None)
    by_cause: dict[str, float] = {}
    for ph in main.get("phases", []):
        for c in ph.get("causes", []):
            if str(c.get("source", "")).startswith("cupti"):
                by_cause[c["cause"]] = by_cause.get(c["cause"], 0.0) + float(c["ms"])
    return {
        "cupti": main.get("cupti"),
        "cuda_init": None if init is None else {"ms": init["ms"], "causes": init.get("causes", []),
                                                "unattributed_ms": init.get("unattributed_ms"),
                                                "detail": init.get("detail", "")},
        "cupti_ms_by_cause": by_cause,
        "phases": [(ph["name"], round(ph["ms"], 3)) for ph in main.get("phases", [])],
    }


def main(out: str) -> int:
    exit_if_no_gpu(out)
    with tempfile.TemporaryDirectory() as d:
        script, report = os.path.join(d, "cuda_start.py"), os.path.join(d, "run.json")
        with open(script, "w") as f:
            f.write(SCRIPT)
        try:
            p = subprocess.run([sys.executable, "-m", "warmprof", "run", "--quiet", "--json", report, "--",
                                sys.executable, script], capture_output=True, text=True, timeout=left_s(60))
        except subprocess.TimeoutExpired:
            save(out, {"error": "timed out"})
            return 1
        result: dict = {"rc": p.returncode, "stdout_tail": p.stdout[-3000:], "stderr_tail": p.stderr[-2000:]}
        if os.path.exists(report):
            with open(report) as f:
                result.update(digest_report(json.load(f)))
        save(out, result)
    ok = p.returncode == 0 and result.get("cuda_init") is not None
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""bench/gpu_proof's child programs (the code each phase script runs in a fresh process) call
warmprof's API as it is now: run here on the CPU, with 'cuda' made 'cpu', they finish and print
the JSON their phase reads. The drafts they came from imported `warmprof.demo`, which does not
exist: on a GPU each would have failed at its first line."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PROOF = Path(__file__).resolve().parents[2] / "bench" / "gpu_proof"
CPU_SHIM = "import torch\ntorch.cuda.synchronize = lambda *a, **k: None\n"
ON_CPU = (("device='cuda'", "device='cpu'"), (".cuda()", ""), ("torch.cuda.memory_stats()", "{}"),
          ("torch.cuda.get_allocator_backend()", "'cpu'"))


def child_code(script: str, name: str) -> str:
    """A module-level string constant of a phase script, read without running the script (they
    exit at once with no GPU)."""
    tree = ast.parse((PROOF / script).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise KeyError(f"{script} has no {name}")


def run_on_cpu(code: str, *args: str, timeout: float = 120) -> dict:
    for old, new in ON_CPU:
        code = code.replace(old, new)
    p = subprocess.run([sys.executable, "-c", CPU_SHIM + code, *args], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["none", "cupti"])
def test_the_ab_child_runs_and_says_why_cupti_is_off(mode):
    got = run_on_cpu(child_code("ab_first_pass.py", "CHILD"), mode)
    assert got["mode"] == mode and got["first_ms"] > 0 and got["steady_ms"] > 0
    assert (got["why"] != "") == (mode == "cupti")  # no CUPTI here: warmprof says why, never crashes


def test_the_seq_childs_warmprof_subscriber_runs():
    got = run_on_cpu(child_code("seq_probe.py", "WARMPROF_FRESH"))
    assert got["why"] and got["callbacks"] == 0 and "reason" in got["backend"]
    alloc = run_on_cpu(child_code("seq_probe.py", "ALLOC_CHILD"))
    assert alloc["why"] and set(alloc["stats_delta"]) >= {"num_device_alloc"}


@pytest.mark.slow  # an in-process warmprof.trace, calibration included: about 20 s here
def test_the_kineto_children_run():
    first = run_on_cpu(child_code("kineto_interplay.py", "WARMPROF_FIRST"))
    assert first["warmprof_start"] and "kernel_events_after_warmprof_left" in first
    kineto = run_on_cpu(child_code("kineto_interplay.py", "KINETO_FIRST").replace("'cuda'", "'cpu'"), timeout=180)
    assert kineto["first_ms_under_profiler"] > 0 and kineto["warmprof_after_profile"]
    assert kineto["trace"]["first_ms"] > 0 and isinstance(kineto["trace"]["causes"], list)

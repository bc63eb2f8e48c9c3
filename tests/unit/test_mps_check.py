"""bench/mps_check.py here (no Apple GPU): it says why and exits 3, and its phase scripts compile."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "mps_check.py"


def test_without_an_apple_gpu_it_says_why_and_exits_3():
    done = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert "no Apple GPU here" in done.stderr and "mps.is_available() is False" in done.stderr


def test_the_phase_scripts_it_runs_in_children_are_valid_python_naming_real_functions():
    spec = importlib.util.spec_from_file_location("mps_check", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for code in (mod.PLATFORM, mod.METAL):
        ast.parse(code)
    from warmprof.probes.metal_ref import MetalReference, metal_reference  # what METAL imports

    assert callable(metal_reference) and hasattr(MetalReference, "text") and hasattr(MetalReference, "to_dict")
    assert set(mod.PHASES) == {"platform", "probe", "metal", "trace"}

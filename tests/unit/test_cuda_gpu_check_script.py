"""bench/gpu_check.py on a machine without a GPU: it checks the backends, says so, and exits 0 (3 if required)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _gpu_here() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(_gpu_here(), reason="a GPU is usable here: bench/gpu_check.py would run the full check")
@pytest.mark.parametrize("extra,code", [([], 0), (["--require-gpu"], 3)])
def test_without_a_gpu_it_says_so_and_exits(extra, code):
    p = subprocess.run([sys.executable, str(SCRIPT), *extra], capture_output=True, text=True, timeout=120)
    assert p.returncode == code, p.stderr[-2000:]
    assert "NO GPU:" in p.stdout
    assert "backend cupti:" in p.stdout and "backend cuda_events:" in p.stdout


def test_close_and_table_helpers(capsys):
    m = _load()
    assert m.close(10.0, 15.0) and not m.close(10.0, 30.0)
    assert m.close(0.1, 0.9)  # both under the 1 ms floor
    assert not m.close(0.0, 5.0)
    m.print_table([{"section": "eager", "item": "x", "warmprof": 1.234, "reference": 1, "ok": True, "note": "n"}])
    out = capsys.readouterr().out
    assert "1.23" in out and "yes" in out


def test_every_section_has_a_function():
    m = _load()
    for name in m.SECTIONS:
        assert callable(getattr(m, f"section_{name}"))
    assert sum(m.SECTIONS.values()) > 0

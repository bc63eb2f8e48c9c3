"""The cold start before the first pass, in `warmprof trace`'s fresh process: importing torch, the
factory's module and the factory itself (a build or a weight load) are set-up steps of the report,
timed with host counters and Python imports on, never part of the first pass's excess. Checked
against the factory's own clock, on a factory that sleeps 200 ms and loads a 128 MiB state dict from a
file (issue 27's acceptance); with the file dropped from the page cache, its reads are disk_read in
the factory's step. Ratios only; --no-control, so the factory runs in the traced process alone (the
control process builds the model too, beside it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import page_cache  # noqa: E402

FACTORY = """
import json, os, time
import torch

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(32 << 20))  # 128 MiB
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.lin(x)

def make():
    t0 = time.perf_counter_ns()
    time.sleep(0.2)
    m = M()
    m.load_state_dict(torch.load(os.environ["CS_WEIGHTS"]))
    with open(os.environ["CS_OWN"], "w") as f:
        json.dump({"ms": (time.perf_counter_ns() - t0) / 1e6, "pid": os.getpid()}, f)
    return m
"""


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    import torch

    folder = tmp_path_factory.mktemp("cold_start")
    path = folder / "w.pt"
    torch.save({"w": torch.zeros(32 << 20), "lin.weight": torch.zeros(16, 16), "lin.bias": torch.zeros(16)}, path)
    (folder / "fac.py").write_text(FACTORY)
    return folder


def _trace(folder: Path, tag: str) -> tuple[dict, dict]:
    out, own = folder / f"{tag}.json", folder / f"{tag}.own.json"
    env = {**os.environ, "CS_WEIGHTS": str(folder / "w.pt"), "CS_OWN": str(own)}
    p = subprocess.run([sys.executable, "-m", "warmprof", "trace", f"{folder / 'fac.py'}:make", "--shape", "4,16",
                        "--steady", "5", "--quiet", "--no-control", "--json", str(out)], capture_output=True, text=True,
                       env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(out.read_text()), json.loads(own.read_text())


def test_the_cold_start_is_in_the_set_up_with_the_factory_at_its_own_time(weights):
    report, own = _trace(weights, "warm")
    setup = report["setup"]
    names = [s["name"] for s in setup["steps"]]
    assert names == ["import torch", f"import {weights / 'fac.py'}", "make() (the factory)", "inputs"], names
    step = {s["name"]: s["ms"] for s in setup["steps"]}["make() (the factory)"]
    assert step == pytest.approx(own["ms"], rel=0.15), (step, own)  # the factory's own clock, in that process
    assert setup["ms"] == pytest.approx(sum(s["ms"] for s in setup["steps"]), rel=0.01)  # and the moments between steps
    assert "the cold start before the model reached the trace" in setup["how"]
    # importing torch is the import's (runtime_init from the Python imports instrument, its disk reads)
    assert any(c["module"] == "import torch" for c in setup["causes"])
    # none of it is in the first pass's excess
    assert all(c["module"] not in names for c in report["causes"])


def test_a_cold_weight_file_is_a_disk_read_of_the_factory(weights):
    why = page_cache.drop(str(weights / "w.pt"))
    if why:
        pytest.skip(why)
    report, own = _trace(weights, "cold")
    reads = [c for c in report["setup"]["causes"] if c["cause"] == "disk_read" and c["module"] == "make() (the factory)"]
    assert reads and reads[0]["evidence"] == "measured", report["setup"]["causes"]
    step = {s["name"]: s["ms"] for s in report["setup"]["steps"]}["make() (the factory)"]
    assert step == pytest.approx(own["ms"], rel=0.15), (step, own)

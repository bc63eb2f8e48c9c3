"""The set-up before the first pass (model to the device, inputs), timed with instruments on and
reported in its own section, never in the first pass's excess (issue 25, item 3). The CUDA path (a
context created in model.to, weights staged) needs a GPU: here a model whose .to() records a
transfer span stands in for CUPTI's (tested with fakes)."""

from __future__ import annotations

import dataclasses
import time

import pytest

torch = pytest.importorskip("torch")

import warmprof  # noqa: E402
from warmprof import devices  # noqa: E402
from warmprof.report import load  # noqa: E402
from warmprof.timeline import DATA_TRANSFER, begin, end, name_id  # noqa: E402
from warmprof.traces import api  # noqa: E402


class Staged(torch.nn.Module):
    """A model whose move to the device holds a 'host-to-device copy' span, as CUPTI records one."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)
        self.moves = 0

    def to(self, *args, **kwargs):
        self.moves += 1
        nid = name_id("cupti:cudaMemcpyAsync")
        begin(DATA_TRANSFER, nid)
        out = super().to(*args, **kwargs)
        # a copy's work: 2 ms of this thread's CPU time (on a busy machine its waits for a CPU are
        # cpu_contention, and a bare .to() of 8x4 weights is under the report's 1 us floor for a row)
        t0 = time.thread_time_ns()
        while time.thread_time_ns() - t0 < 2_000_000:
            pass
        end(DATA_TRANSFER, nid)
        return out

    def forward(self, x):
        return self.lin(x)


@pytest.fixture
def a_device_kind(monkeypatch):
    """The CPU read as a device the model is moved to (as CUDA and MPS are): model.to(device) runs."""
    moved = dataclasses.replace(devices.HOST, host=False)
    monkeypatch.setattr(api.devices, "of", lambda device: moved)


def test_the_move_to_the_device_is_timed_with_instruments_on_as_the_set_up(a_device_kind):
    model = Staged()
    r = warmprof.trace(model, (1, 8), steady=2)
    assert model.moves == 1
    assert r.setup is not None
    names = [st["name"] for st in r.setup.steps]
    assert names == ["model.to(cpu)", "inputs"]
    transfer = [c for c in r.setup.causes if c.cause == "data_transfer"]
    assert transfer and transfer[0].module == "model.to(cpu)" and transfer[0].source == "cupti"
    assert r.setup.ms >= sum(st["ms"] for st in r.setup.steps) * 0.99
    assert not [c for c in r.causes if c.cause == "data_transfer"]  # never the first pass's
    assert abs(sum(c.ms for c in r.setup.causes) + r.setup.unattributed_ms - r.setup.ms) < 1e-6


def test_the_set_up_is_in_the_json_and_shown_above_the_first_pass(tmp_path):
    r = warmprof.trace(torch.nn.Linear(8, 4), (1, 8), steady=2)
    assert r.setup is not None and [st["name"] for st in r.setup.steps] == ["inputs"]  # on the host nothing moves
    lines = str(r).splitlines()
    at_setup = next(i for i, line in enumerate(lines) if "set-up before the first pass" in line)
    at_first = next(i for i, line in enumerate(lines) if line.startswith("  first pass"))
    assert at_setup < at_first
    path = tmp_path / "r.json"
    r.save(str(path))
    back = load(str(path))
    assert back.schema_version == 6 and back.setup is not None
    assert back.setup.steps == r.setup.steps


def test_a_report_before_the_set_up_section_loads_without_one():
    import json

    r = warmprof.trace(torch.nn.Linear(8, 4), (1, 8), steady=2)
    data = json.loads(r.to_json())
    data.pop("setup")
    data["schema_version"] = 4
    back = type(r).from_json(json.dumps(data))
    assert back.setup is None and "set-up before" not in str(back)

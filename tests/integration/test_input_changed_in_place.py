"""Issue 40: a model that changes its input in place (x.unsqueeze_(0), x.resize_(...), x.mul_(2) in forward)
got figures over different shapes, each pass on what the last one left, and a header with the last pass's
shape, and no note. A service gives each request a fresh tensor, so that is what a user expects the trace
to measure: each pass gets the input as it was made (put back in place after every pass, in the traced
process and in the control process), the header shows the shape asked for, and a note says the model
changed its input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import warmprof  # noqa: E402


class Changes(torch.nn.Module):
    """Records the shape and the sum of each input it gets, then changes it in place."""

    def __init__(self, change):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.change = change
        self.seen: list[tuple[tuple[int, ...], float]] = []

    def forward(self, x):
        self.seen.append((tuple(x.shape), round(float(x.sum()), 4)))
        out = self.lin(x)
        self.change(x)
        return out


@pytest.mark.parametrize("change, became", [
    (lambda x: x.unsqueeze_(0), "shape [2, 8] became [1, 2, 8]"),
    (lambda x: x.resize_(1, 8), "shape [2, 8] became [1, 8]"),
    (lambda x: x.t_(), "shape [2, 8] became [8, 2]"),
    (lambda x: x.mul_(3), "its values changed"),
])
def test_every_pass_runs_on_the_input_as_made_and_the_report_says_so(change, became):
    model = Changes(change)
    report = warmprof.trace(model, (2, 8), steady=3, progress=False)
    assert report.shape == [2, 8] and report.to_dict()["settings"]["input_shape"] == [2, 8]
    assert len(model.seen) > 3 and len(set(model.seen)) == 1 and model.seen[0][0] == (2, 8)
    (note,) = [n for n in report.notes if "changed its inputs in place" in n]
    assert f"argument 0: {became}" in note and "put them back as they were made" in note


def test_the_callers_own_input_ends_the_trace_as_given():
    x = torch.randn(2, 8)
    given = x.clone()
    model = Changes(lambda t: t.unsqueeze_(0).mul_(2))
    report = warmprof.trace(model, inputs=x, steady=3, progress=False)
    assert x.shape == (2, 8) and torch.equal(x, given)
    assert report.shape == [2, 8] and {s for s, _ in model.seen} == {(2, 8)}


def test_a_model_that_leaves_its_input_alone_gets_no_note():
    model = Changes(lambda x: None)
    report = warmprof.trace(model, (2, 8), steady=3, progress=False)
    assert not [n for n in report.notes if "in place" in n]


def test_from_the_cli_the_traced_and_the_control_process_each_put_it_back(tmp_path):
    """The default trace: a fresh process, and the control process's clean passes. The model refuses any
    shape but the one asked for, so a pass on a changed input is an error, not a quiet wrong figure."""
    (tmp_path / "grows.py").write_text(
        "import torch\n"
        "class Grows(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(8, 8)\n"
        "    def forward(self, x):\n"
        "        if tuple(x.shape) != (2, 8):\n"
        "            raise RuntimeError(f'a pass got shape {tuple(x.shape)}')\n"
        "        out = self.lin(x)\n"
        "        x.unsqueeze_(0)\n"
        "        return out\n"
        "def make():\n"
        "    return Grows()\n")
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "warmprof", "trace", "grows.py:make", "--shape", "2,8", "--steady", "3",
                        "--json", str(out), "--quiet"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["shape"] == [2, 8] and data["clean"]["first_pass_ms"] > 0
    assert any("argument 0: shape [2, 8] became [1, 2, 8]" in n for n in data["notes"]), data["notes"]
    assert "warmprof trace: Grows (2, 8)" in p.stdout


def test_an_input_that_cannot_be_put_back_is_said_so(monkeypatch):
    from warmprof.traces import inputs

    def refuse(t, copy):
        raise RuntimeError("set_ is not allowed here")

    monkeypatch.setattr(inputs, "_restore", refuse)
    model = Changes(lambda x: x.unsqueeze_(0))
    report = warmprof.trace(model, (2, 8), steady=3, progress=False)
    (note,) = [n for n in report.notes if "changed its inputs in place" in n]
    assert "could not put them back (RuntimeError: set_ is not allowed here)" in note and "mix" in note

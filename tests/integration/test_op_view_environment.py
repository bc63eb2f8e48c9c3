"""Issue 40: the op view sets KINETO_LOG_LEVEL (kineto prints two lines at every profiler start and stop
otherwise) and used to leave it set: the caller's environment changed, processes it started later were
silenced, and the trace's own environment check blamed "torch or the model" for it. The caller's value,
or its absence, is back when the op view ends, also when the model raised."""

import os

import pytest

torch = pytest.importorskip("torch")

import warmprof  # noqa: E402
from warmprof.errors import ModelError  # noqa: E402

NAME = "KINETO_LOG_LEVEL"


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x))


class RaisesOnSecond(Mlp):
    calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("the model fails on its second pass")
        return super().forward(x)


@pytest.fixture
def no_kineto_level(monkeypatch):
    monkeypatch.delenv(NAME, raising=False)


def test_an_op_view_trace_leaves_the_environment_as_it_found_it(no_kineto_level):
    before = dict(os.environ)
    report = warmprof.trace(Mlp(), (2, 8), steady=3, op_view=True, progress=False)
    assert report.instruments["aten_ops"]["active"]
    assert dict(os.environ) == before and NAME not in os.environ
    assert not [n for n in report.notes if "environment changed" in n], report.notes


def test_the_environment_comes_back_when_the_model_raises(no_kineto_level):
    before = dict(os.environ)
    with pytest.raises(ModelError, match="second pass"):
        warmprof.trace(RaisesOnSecond(), (2, 8), steady=3, op_view=True, progress=False)
    assert dict(os.environ) == before


def test_a_level_the_caller_set_is_kept(monkeypatch):
    monkeypatch.setenv(NAME, "2")
    warmprof.trace(Mlp(), (2, 8), steady=3, op_view=True, progress=False)
    assert os.environ[NAME] == "2"

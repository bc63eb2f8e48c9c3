"""Hostile calls of warmprof.trace: wrong argument types are InputErrors raised before anything
runs (never blamed on the model); a second trace or a calibration from another thread while one
runs is refused up front; a forward returning a generator is refused; what torch changed in the
process during an in-process trace is said in the report."""

from __future__ import annotations

import os
import re
import sys
import threading

import pytest
import torch
from torch import nn

import warmprof
from warmprof.traces import calibrate as calibration
from warmprof.errors import InputError, ModelError

from .helpers import Counting, Leftovers


@pytest.mark.parametrize("kwargs, message", [
    ({"steady_budget_s": "3"}, "steady_budget_s must be a non-negative number"),
    ({"steady_budget_s": float("nan")}, "steady_budget_s must be a non-negative number"),
    ({"steady_budget_s": True}, "steady_budget_s must be a non-negative number"),
    ({"label": 123}, "label must be a non-empty string"),
    ({"label": "  "}, "label must be a non-empty string"),
    ({"no_grad": "yes"}, "no_grad must be True or False"),
    ({"progress": "loud"}, "progress must be True, False or a callable"),
])
def test_wrongly_typed_options_are_refused_before_the_model_runs(kwargs, message):
    model = Counting()
    left = Leftovers(model)
    with pytest.raises(InputError, match=message):
        warmprof.trace(model, (2, 4), **kwargs)
    assert model.calls == 0
    left.check()


@pytest.mark.parametrize("inputs, message", [
    ({1: torch.zeros(2, 4)}, "key 1: a dict's keys are the model's keyword argument names"),
    (lambda: "hello", "inputs= gave 'hello' (str), which holds no tensor"),
    ("hello", "which holds no tensor"),
    ((1, 2), "which holds no tensor"),
])
def test_inputs_that_cannot_be_a_call_are_input_errors_not_the_models(inputs, message):
    model = Counting()
    with pytest.raises(InputError, match=re.escape(message)):
        warmprof.trace(model, inputs=inputs)
    assert model.calls == 0


def test_a_plain_callable_may_take_what_it_likes():
    """Only an nn.Module is held to tensors: a function may take a string."""
    lin = nn.Linear(4, 4)
    r = warmprof.trace(lambda text: lin(torch.ones(len(text), 4)), inputs=lambda: "hello", steady=2)
    assert r.first_pass_ms > 0


def test_a_label_makes_a_report_that_loads(tmp_path):
    r = warmprof.trace(Counting(), (2, 4), steady=2, label="my-net")
    path = r.save(tmp_path / "r.json")
    assert warmprof.load(path).model == "my-net"


class Gen(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ran = False

    def forward(self, x):
        def steps():
            self.ran = True
            yield x

        return steps()


def test_a_forward_returning_a_generator_is_refused_and_nothing_is_left():
    model = Gen()
    left = Leftovers(model)
    with pytest.raises(InputError, match="returned a generator: nothing ran"):
        warmprof.trace(model, (2, 4))
    assert not model.ran
    left.check()


class Blocking(nn.Module):
    """Blocks its first call until released, so another thread can act while a trace runs."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = threading.Event()
        self.release = threading.Event()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if not self.inside.is_set():
            self.inside.set()
            assert self.release.wait(120), "the test never released the model"
        return self.lin(x)


def _trace_in_thread(model, out: dict) -> threading.Thread:
    def run():
        try:
            out["report"] = warmprof.trace(model, (2, 4), steady=2)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    return t


@pytest.mark.parametrize("second", ["trace", "calibrate"])
def test_a_second_trace_or_calibration_from_another_thread_is_refused_up_front(monkeypatch, second):
    monkeypatch.setattr(calibration, "_calibration", None)  # make calibrate() do real work
    model, out = Blocking(), {}
    t = _trace_in_thread(model, out)
    try:
        assert model.inside.wait(120), "the first trace never reached its first pass"
        other = Counting()
        with pytest.raises(InputError, match="already running in this process"):
            if second == "trace":
                warmprof.trace(other, (2, 4), steady=2)
            else:
                warmprof.calibrate()
        assert other.calls == 0
    finally:
        model.release.set()
        t.join(120)
    assert "error" not in out, out.get("error")
    assert out["report"].first_pass_ms > 0  # the running trace finished, unharmed
    warmprof.trace(Counting(), (2, 4), steady=2)  # and the next one runs


class ChangesTheProcess(nn.Module):
    """Does on its first call what importing inductor does: an env var and a sys.path entry."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        os.environ.setdefault("WARMPROF_TEST_TORCH_SET", "cache-dir")
        if self.path not in sys.path:
            sys.path.append(self.path)
        return self.lin(x)


def test_what_the_traced_code_changed_in_the_process_is_said(tmp_path):
    try:
        r = warmprof.trace(ChangesTheProcess(str(tmp_path)), (2, 4), steady=2)
        notes = "\n".join(r.notes)
        assert "WARMPROF_TEST_TORCH_SET set" in notes
        assert "cache-dir" not in notes  # values can be secrets: names only
        assert f"sys.path grew during the trace, by torch or the model (warmprof leaves it so): {tmp_path}" in notes
    finally:
        os.environ.pop("WARMPROF_TEST_TORCH_SET", None)
        if str(tmp_path) in sys.path:
            sys.path.remove(str(tmp_path))


def test_a_trace_that_changes_nothing_says_nothing_about_it():
    r = warmprof.trace(Counting(), (2, 4), steady=2)
    assert not any("during the trace" in n for n in r.notes), r.notes


def test_a_model_raising_leaves_the_lock_free():
    class Raises(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    with pytest.raises(ModelError):
        warmprof.trace(Raises(), (2, 4))
    warmprof.trace(Counting(), (2, 4), steady=2)


def test_a_trace_started_from_inside_a_trace_is_refused_up_front():
    inner = Counting()

    class TracesItself(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            warmprof.trace(inner, (2, 4), steady=2)
            return self.lin(x)

    model = TracesItself()
    left = Leftovers(model)
    with pytest.raises(InputError, match="already running in this process"):
        warmprof.trace(model, (2, 4))
    assert inner.calls == 0
    left.check()

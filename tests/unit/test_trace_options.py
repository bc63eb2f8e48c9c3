"""warmprof.TraceOptions: trace()'s options as one frozen, validated value. A wrong value is an
InputError when the options are made (nothing runs), with the same message as the keyword form;
trace(model, options=TraceOptions(...)) records the same settings as trace(model, **the keywords);
options and keywords together are refused."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
from torch import nn

import warmprof
from warmprof import TraceOptions
from warmprof.errors import InputError
from warmprof.report.trace import RunContext
from warmprof.traces.options import NAMES


class Counting(nn.Module):
    """Counts its forward calls: a refused trace never calls it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.lin(x)


BAD = [
    ({"steady": 0}, r"steady must be a positive int N or a \(min, max\) pair"),
    ({"steady": (6, 5)}, r"steady must be a positive int N or a \(min, max\) pair"),
    ({"steady": "5"}, r"steady must be a positive int N or a \(min, max\) pair"),
    ({"steady_budget_s": -1.0}, "steady_budget_s must be a non-negative number"),
    ({"steady_budget_s": float("nan")}, "steady_budget_s must be a non-negative number"),
    ({"progress": "loud"}, "progress must be True, False or a callable"),
    ({"no_grad": "yes"}, "no_grad must be True or False"),
    ({"label": "  "}, "label must be a non-empty string"),
    ({"run": "fresh"}, "run must be a warmprof.report.trace.RunContext or None"),
    ({"op_view": "yes"}, "op_view must be True or False"),
    ({"explain": 1}, "explain must be True or False"),
    ({"explain_top": 0}, "explain_top must be an integer from 1 to 100"),
    ({"explain_top": True}, "explain_top must be an integer from 1 to 100"),
    ({"explain": True, "compile": True}, "explain is for eager models"),
    ({"generate": 1}, "generate must be a number of new tokens from 2 to"),
    ({"generate": 4, "kv_cache": "paged"}, "kv_cache must be None"),
    ({"kv_cache": "static"}, "kv_cache goes with generate"),
    ({"generate": 4, "op_view": True}, "generate does not go with op_view or explain"),
]


@pytest.mark.parametrize("options, message", BAD)
def test_a_bad_value_is_refused_when_the_options_are_made(options, message):
    with pytest.raises(InputError, match=message):
        TraceOptions(**options)


@pytest.mark.parametrize("options, message", BAD)
def test_the_keyword_form_refuses_it_alike_before_the_model_runs(options, message):
    model = Counting()
    with pytest.raises(InputError, match=message):
        warmprof.trace(model, (2, 8), **options)
    assert model.calls == 0


def test_a_replaced_value_is_checked_too():
    opts = TraceOptions(shape=(2, 8), steady=2)
    with pytest.raises(InputError, match="steady must be"):
        dataclasses.replace(opts, steady=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.steady = 3  # type: ignore[misc]


def test_the_defaults_and_steady_as_a_range():
    opts = TraceOptions()
    assert opts.steady_range == (5, 50) and opts.device == "cpu" and opts.no_grad and not opts.compiled
    assert TraceOptions(steady=7).steady_range == (7, 7) and TraceOptions(steady=[2, 3]).steady_range == (2, 3)
    assert TraceOptions(generate=False).generate is False  # no generation, as generate=None
    assert TraceOptions(run=RunContext(), progress=print, label="m", explain=True, explain_top=3).explain_top == 3


def test_the_fields_are_trace_s_keywords_and_the_signature_lists_them():
    params = inspect.signature(warmprof.trace).parameters
    assert set(NAMES) <= set(params) and "options" in params
    for name in NAMES:
        if name != "shape":
            assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
            assert params[name].default == getattr(TraceOptions(), name)


def test_options_and_keywords_together_are_refused():
    model = Counting()
    with pytest.raises(InputError, match="not both: options= came with steady"):
        warmprof.trace(model, options=TraceOptions(shape=(2, 8)), steady=2)
    with pytest.raises(InputError, match="not both: options= came with shape"):
        warmprof.trace(model, (2, 8), options=TraceOptions(steady=2))
    with pytest.raises(InputError, match="options must be a warmprof.TraceOptions"):
        warmprof.trace(model, options={"shape": (2, 8)})
    with pytest.raises(TypeError, match="unexpected keyword argument 'stedy'"):
        warmprof.trace(model, (2, 8), stedy=2)
    assert model.calls == 0


def test_options_give_the_same_settings_as_the_keywords():
    keywords = dict(steady=2, steady_budget_s=0.0, label="tiny", dtype=torch.float32, no_grad=True)
    by_keywords = warmprof.trace(Counting(), (2, 8), **keywords)
    by_options = warmprof.trace(Counting(), options=TraceOptions(shape=(2, 8), **keywords))
    assert by_options.settings == by_keywords.settings
    for field in ("model", "shape", "dtype", "device", "compile", "inputs", "steady_passes"):
        assert getattr(by_options, field) == getattr(by_keywords, field), field
    assert by_options.model == "tiny" and by_options.settings.steady == [2, 2]

"""warmup and assert_warm on eager CPU models: what a first call paid, a warm check that passes and
one that fails, and bad input refused clearly with nothing left behind."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from warmprof.traces.demo import demo_model
from warmprof.errors import DeviceError, InputError, ModelError, NotWarmError
from warmprof.instruments.torch_compile import registered_callbacks
from warmprof.serving.warmup import assert_warm, warmup

from .helpers import Counting, FirstTouch, Leftovers, RaisesOnCall, release_freed_heap


class Leaky(nn.Module):
    """Keeps `nbytes` of fresh, touched memory from every call: never warm. The freed heap is given
    back first (release_freed_heap), so no call's block comes from pages earlier tests left resident."""

    def __init__(self, nbytes: int = 40 << 20) -> None:
        super().__init__()
        release_freed_heap()
        self.nbytes = nbytes
        self.kept: list[torch.Tensor] = []
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        self.kept.append(torch.ones(self.nbytes, dtype=torch.uint8))
        return self.lin(x)


def tiny_lm():
    return demo_model(vocab=64, d_model=16, n_heads=2, n_layers=1, max_seq=32)


def test_first_touch_is_paid_by_warmup_and_the_check_passes():
    model = FirstTouch(nbytes=32 << 20)
    left = Leftovers(model)
    paid = warmup(model, [(2, 8)])
    row = paid.row((2, 8))
    assert "allocator_growth" in row.fired and row.anon_bytes >= 30 << 20
    assert row.causes["allocator_growth"] > 0 and "estimated" in row.evidence["allocator_growth"]
    assert row.ms >= row.causes["allocator_growth"] * 0.5  # an estimate, of the same order as the call
    checked = assert_warm(model, [(2, 8)])
    assert checked.warm and checked.row((2, 8)).fired == []
    assert "warm (no one-time cost fired)" in str(checked)
    left.check()


def test_memory_kept_by_every_call_fails_the_check_unless_ignored():
    model = Leaky()
    warmup(model, [(1, 8)])
    with pytest.raises(NotWarmError) as info:
        assert_warm(model, [(1, 8)])
    err = info.value
    assert err.exit_code == 7 and "(1, 8): allocator_growth" in str(err) and "MiB anonymous" in str(err)
    assert err.result.row((1, 8)).fired == ["allocator_growth"]
    assert assert_warm(model, [(1, 8)], ignore=("allocator_growth",)).row((1, 8)).fired == ["allocator_growth"]


def test_shapes_and_inputs_each_make_a_row():
    model = tiny_lm()
    r = warmup(model, [(1, 4), "1,8"], passes=2)
    assert [row.shape for row in r] == [(1, 4), (1, 8)] and all(row.calls == 2 for row in r)
    ids = torch.randint(0, 64, (1, 6))
    r = warmup(model, inputs=[(ids,), {"ids": ids}, lambda: ids])
    assert [row.shape for row in r] == ["[1, 6]", "ids=[1, 6]", "[1, 6]"]
    assert r.model == "DemoLM" and r.device == "cpu"


@pytest.mark.parametrize("kwargs, error, match", [
    ({"shapes": [(1, 8)], "device": "tpu:0"}, DeviceError, "unknown device|not supported"),
    ({"shapes": (1, 8)}, InputError, r"reads as one shape: write \[\(1, 8\)\]"),
    ({"shapes": []}, InputError, "empty"),
    ({"shapes": [(1, 8), (1, 0)]}, InputError, "<= 0"),  # refused before the first shape runs
    ({"shapes": [(1, 8)], "inputs": [torch.zeros(1, 8)]}, InputError, "not both"),
    ({"inputs": torch.zeros(1, 8)}, InputError, "non-empty list"),
    ({}, InputError, "give the shapes"),
    ({"shapes": [(1, 8)], "dtype": "complex32"}, InputError, "dtype"),
    ({"shapes": [(1, 8)], "passes": 0}, InputError, "passes"),
])
def test_bad_arguments_are_refused_before_the_model_runs(kwargs, error, match):
    model = Counting()
    left = Leftovers(model)
    with pytest.raises(error, match=match):
        warmup(model, **kwargs)
    assert model.calls == 0
    left.check()


def test_unknown_cause_to_ignore():
    with pytest.raises(InputError, match="unknown cause"):
        assert_warm(Counting(), [(1, 4)], ignore=("jit",))


def test_a_model_that_raises_is_a_model_error_naming_the_shape():
    model = RaisesOnCall(2)
    left = Leftovers(model)
    with pytest.raises(ModelError, match=r"at \(1, 4\) during warmup: RuntimeError: call 2 fails") as info:
        warmup(model, [(1, 4), (1, 4)])
    assert isinstance(info.value.__cause__, RuntimeError)
    left.check()


def test_a_shape_the_model_cannot_take_is_a_model_error():
    model = tiny_lm()  # positions up to 32
    left = Leftovers(model)
    with pytest.raises(ModelError, match=r"at \(1, 40\) during assert_warm: IndexError"):
        assert_warm(model, [(1, 8), (1, 40)])
    left.check()


def test_a_compiled_model_that_raises_leaves_no_callback_registered():
    import torch._dynamo

    torch._dynamo.reset()
    before = registered_callbacks()
    model = torch.compile(Counting(), backend="eager")
    with pytest.raises(ModelError, match=r"at \(1, 5\)"):
        warmup(model, [(1, 5)])  # Linear(4, 4) on a last dimension of 5
    assert registered_callbacks() == before
    torch._dynamo.reset()

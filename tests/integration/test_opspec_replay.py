"""opspec on real ops: a call written down as JSON builds again and runs, shapes, dtypes and strides kept."""

import json

import pytest
import torch

from warmprof import opspec
from warmprof.probes.aten_table import call_for
from warmprof.probes.aten_variants import new_sizes, perturbations, variant


def record(op, *args, **kwargs):
    raw_args = tuple(opspec.raw(a, torch.Tensor, torch.dtype) for a in args)
    raw_kwargs = {k: opspec.raw(v, torch.Tensor, torch.dtype) for k, v in kwargs.items()}
    return json.loads(json.dumps(opspec.call_spec(str(op), raw_args, raw_kwargs)))


def replay(spec):
    args, kwargs = opspec.build(spec, "cpu")
    return args, opspec.resolve_op(spec["op"])(*args, **kwargs)


@pytest.mark.parametrize("op, make", [
    (torch.ops.aten.addmm.default, lambda: (torch.randn(32), torch.randn(8, 16), torch.randn(32, 16).t())),
    (torch.ops.aten.gelu.default, lambda: (torch.randn(4, 8),)),
    (torch.ops.aten.native_layer_norm.default, lambda: (torch.randn(4, 8), [8], torch.randn(8), torch.randn(8), 1e-5)),
    (torch.ops.aten.embedding.default, lambda: (torch.randn(50, 8), torch.zeros(2, 3, dtype=torch.int64))),
    (torch.ops.aten._softmax.default, lambda: (torch.randn(4, 8), -1, False)),
])
def test_a_recorded_call_replays_with_the_same_shapes_dtypes_and_strides(op, make):
    args = make()
    want = op(*args)
    spec = record(op, *args)
    assert opspec.replayable(spec) == ""
    built, got = replay(spec)
    for a, b in zip(args, built):
        if isinstance(a, torch.Tensor):
            assert (a.shape, a.dtype, a.stride()) == (b.shape, b.dtype, b.stride())
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    assert [w.shape for w in want] == [g.shape for g in got]


def test_a_recorded_calls_new_shapes_run():
    spec = record(torch.ops.aten.addmm.default, torch.randn(32), torch.randn(8, 16), torch.randn(32, 16).t())
    what, targets, size = next(perturbations(spec))
    for n in new_sizes(size):
        _, out = replay(variant(spec, targets, n))
        assert out.shape == (n, 32)


@pytest.mark.parametrize("name", ["conv2d", "conv1d", "linear", "addmm", "mm", "bmm", "baddbmm", "layer_norm:8x16", "gelu",
                                  "relu", "silu", "embedding", "_softmax", "softmax.int", "add", "mul",
                                  "scaled_dot_product_attention", "batch_norm"])
def test_every_default_call_runs(name):
    spec = call_for(name)
    assert opspec.replayable(spec) == ""
    replay(spec)

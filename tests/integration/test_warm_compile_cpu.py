"""Real torch.compile on the CPU (seconds per compile: few, small): warmup at three lengths, then
assert_warm passes there and names jit_compile with dynamo's recompile reason at a fourth; and a
compile after a dynamo reset loaded from inductor's cache, said by the trace's jit_compile entry."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import warmprof
from warmprof.traces.demo import demo_model
from warmprof.errors import NotWarmError
from warmprof.probes.compile_env import _clear_inductor_caches
from warmprof.serving.warmup import assert_warm, warmup

from .helpers import Leftovers


@pytest.fixture
def fresh_compile(tmp_path, monkeypatch):
    """A reset dynamo and an empty inductor cache folder of the test's own, put back afterwards."""
    import torch._dynamo

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    torch._dynamo.reset()
    _clear_inductor_caches()
    yield
    torch._dynamo.reset()
    _clear_inductor_caches()


LENGTHS = [(1, 4), (1, 8), (1, 12)]


@pytest.mark.slow
def test_warm_at_three_lengths_then_a_fourth_recompiles(fresh_compile):
    model = demo_model(vocab=64, d_model=16, n_heads=2, n_layers=1, max_seq=32)
    compiled = torch.compile(model, dynamic=False)  # each new length recompiles
    left = Leftovers(model)
    paid = warmup(compiled, LENGTHS)
    for row in paid:
        assert row.fired[0] == "jit_compile" and row.compiles == 1 and row.causes["jit_compile"] > 0
        assert row.cache["compiled"] == 1 and row.cache["loaded"] == 0  # an empty cache folder
    assert paid.rows[0].recompile_reasons == []  # the frame's first compile is not a recompile
    assert all(len(r.recompile_reasons) == 1 for r in paid.rows[1:])
    print(paid)

    checked = assert_warm(compiled, LENGTHS)
    assert checked.warm and all(r.compiles == 0 for r in checked)

    with pytest.raises(NotWarmError) as info:
        assert_warm(compiled, [(1, 8), (1, 16)])
    msg = str(info.value)
    print(msg)
    bad = info.value.result.row((1, 16))
    assert bad.fired[0] == "jit_compile" and info.value.result.row((1, 8)).fired == []
    assert "at 1 of 2 shapes" in msg and "(1, 16): jit_compile" in msg
    (reason,) = bad.recompile_reasons  # dynamo's own: the guard on the length that failed
    assert "16" in reason and reason in msg
    left.check()


@pytest.mark.slow
def test_trace_says_a_compile_after_a_reset_came_from_inductors_cache(fresh_compile):
    import torch._dynamo

    def run():
        torch._dynamo.reset()  # dynamo forgets its graphs; inductor's cache folder keeps them
        model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
        return warmprof.trace(model, (2, 8), compile=True, steady=3)

    def jit_detail(r) -> str:
        return "; ".join(c.detail for c in r.causes if c.cause == "jit_compile" and c.detail)

    cold, warm = run(), run()
    tc_cold, tc_warm = cold.instruments["torch_compile"], warm.instruments["torch_compile"]
    assert (tc_cold["graphs_compiled"], tc_cold["graphs_from_cache"]) == (1, 0)
    assert (tc_warm["graphs_compiled"], tc_warm["graphs_from_cache"]) == (0, 1)
    assert "1 graph compiled from scratch, 0 loaded from cache" in jit_detail(cold)
    assert "0 graphs compiled from scratch, 1 loaded from cache" in jit_detail(warm)
    assert tc_warm["compiles"][0]["cache"]["loaded"] == 1
    print(f"cold compile {tc_cold['compiles'][0]['span_ms']:.0f} ms, from cache {tc_warm['compiles'][0]['span_ms']:.0f} ms")

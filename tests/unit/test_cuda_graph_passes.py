"""compile="reduce-overhead" on CUDA: cudagraph trees warm up eagerly on call 1, record on call 2 and
replay from call 3, so a pass of such a trace is calls 1+2 (issue 25, item 2). No GPU here: the
decision is tested on its own, and the protocol on the CPU with the decision forced (tested with fakes)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import warmprof  # noqa: E402
from warmprof.traces import api  # noqa: E402


def test_cudagraph_modes_on_cuda_take_two_calls_per_pass():
    from warmprof.traces.compile_options import calls_per_pass, uses_cudagraphs

    assert calls_per_pass("reduce-overhead", "cuda") == 2
    assert calls_per_pass("reduce-overhead", torch.device("cuda", 1)) == 2
    assert calls_per_pass({"mode": "reduce-overhead"}, "cuda:0") == 2
    assert calls_per_pass({"options": {"triton.cudagraphs": True}}, "cuda") == 2
    assert calls_per_pass("max-autotune", "cuda") == 2  # it turns CUDA graphs on too
    assert calls_per_pass("reduce-overhead", "cpu") == 1  # no CUDA graph on the CPU
    assert calls_per_pass(None, "cuda") == 1 and calls_per_pass("default", "cuda") == 1
    assert not uses_cudagraphs("max-autotune-no-cudagraphs")
    assert not uses_cudagraphs({"backend": "eager", "mode": None})


def test_a_repeated_runner_calls_the_model_n_times_and_returns_the_last_output():
    from warmprof.traces.compile_options import repeated

    calls = []
    run = repeated(lambda x: calls.append(x) or len(calls), 2)
    assert run(7) == 2 and calls == [7, 7]
    f = object()
    assert repeated(f, 1) is f


class Counted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.lin(x)


def test_with_cudagraph_trees_the_first_pass_is_calls_one_and_two(monkeypatch):
    monkeypatch.setattr(api, "calls_per_pass", lambda compile, device: 2, raising=False)
    model = Counted()
    r = warmprof.trace(model, (1, 4), steady=2)
    top = [s for s in r.spans if s.module == "Counted"]  # the root module's calls
    first = [s for s in top if s.pass_ == "first"]
    rerun = [s for s in top if s.pass_ == "seen_rerun"]
    assert len(first) == 2 and len(rerun) == 2  # the model ran twice in each instrumented pass
    assert r.protocol.calls_per_pass == 2
    assert any("record on the second" in n for n in r.notes)
    assert "calls 1-2" in str(r)
    loaded = type(r).from_json(r.to_json())
    assert loaded.protocol.calls_per_pass == 2


def test_without_cuda_graphs_a_pass_is_one_call():
    r = warmprof.trace(Counted(), (1, 4), steady=2)
    top = [s for s in r.spans if s.module == "Counted"]
    assert len([s for s in top if s.pass_ == "first"]) == 1
    assert r.protocol.calls_per_pass == 1 and "calls 1-" not in str(r)


def test_graphs_the_tree_skipped_are_said(monkeypatch):
    """A graph cudagraph trees decline (torch's cudagraph_skips) is never recorded nor replayed: said."""
    from torch._dynamo.utils import counters

    monkeypatch.setattr(api, "calls_per_pass", lambda compile, device: 2, raising=False)

    class Skipping(Counted):
        def forward(self, x):
            if self.calls == 0:
                counters["inductor"]["cudagraph_skips"] += 1  # as inductor does for a graph it will not capture
            return super().forward(x)

    before = counters["inductor"]["cudagraph_skips"]
    try:
        r = warmprof.trace(Skipping(), (1, 4), steady=2)
    finally:
        counters["inductor"]["cudagraph_skips"] = before
    assert any("skipped 1 graph" in n for n in r.notes)

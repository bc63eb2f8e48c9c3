"""A small torch.compile probe on the CPU: dynamo counts equal K and B, every first call pays, state restored."""

import os

import pytest

import warmprof


@pytest.mark.slow
def test_compile_probe_counts_graphs_and_restores_state():
    import torch._dynamo

    limit_before = torch._dynamo.config.recompile_limit
    env_before = {k: os.environ.get(k) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    lines = []
    r = warmprof.probe(("matmul", "elementwise"), device="cpu", backend="compile", shapes_per_op=2, steady_calls=5,
                       rerun_rounds=2, K=4, B=2, progress=lines.append)
    # the first compile is said before it runs, not only after it took its seconds
    first = next(i for i, line in enumerate(lines) if line.startswith("compiling a 1-element add"))
    assert first < next(i for i, line in enumerate(lines) if line.startswith("launch band:"))

    b = r.bucketing
    assert b["counted"] and (b["distinct"]["compiles"], b["bucketed"]["compiles"]) == (4, 2)
    assert b["default_dynamic"]["compiles"] < 4  # automatic dynamic shapes after the second length
    assert r.prediction("P4").holds
    for _, row in r.rows():
        assert row.first_ms > row.steady_ms  # every never-seen shape compiled on its first call
        assert row.seen_rerun_ms < row.first_ms  # and the compiled graph was reused at the seen shape
    assert all(p["keyed"] == "shape" for p in r.shape_vs_size)
    assert r.verdicts().get("compile", 0) >= len(r.rows()) // 2

    assert torch._dynamo.config.recompile_limit == limit_before
    assert {k: os.environ.get(k) for k in env_before} == env_before

"""The advice's wording: no line nests brackets, and CUDA-only advice is never given on a CPU trace."""

from __future__ import annotations

import dataclasses
import re

import pytest

from factories import trace_report
from warmprof import causes
from warmprof.report.trace import Protocol
from warmprof.traces import advice
from warmprof.traces.advice import advise

# What only means something on a CUDA device: its environment variables, cuDNN, CUDA graphs, cudaMalloc.
CUDA_ONLY = re.compile(r"PYTORCH_CUDA_ALLOC_CONF|CUDA_MODULE_LOADING|cudnn|CUDA graph|cudagraph|cudaMalloc", re.IGNORECASE)


def _depth(line: str) -> int:
    """How deep the line's brackets go: 1 for "a (b) c (d)", 2 for "a (b (c))"."""
    depth = deepest = 0
    for ch in line:
        if ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth -= 1
    return deepest


def test_depth_tells_nested_brackets():
    assert _depth("a (b) c (d)") == 1 and _depth("a (b (c))") == 2 and _depth("none") == 0


def _dominated_by(cause: str, source: str, device: str):
    """A report whose excess is mostly `cause`, booked from `source`."""
    r = trace_report({cause: 50.0, "jit_compile" if cause != "jit_compile" else "runtime_init": 1.0}, device=device)
    r.causes = [dataclasses.replace(c, source=source) if c.cause == cause else c for c in r.causes]
    return r


def _unattributed(rows: list[dict], device: str = "cpu"):
    r = trace_report({"jit_compile": 0.2}, unattributed=3.0, device=device)
    r.unattributed_where = rows
    return r


def _representative_reports():
    """Every cause dominating (from a generic source and from each source with lines of its own),
    on a CPU and on a CUDA device; an unattributed part dominating, with module rows, op rows and
    probed op rows; a first pass within the noise; warmprof's own cost; crowded threads."""
    blamed = [c.name for c in map(causes.get, causes.names()) if c is not None and c.blamed_on_model]
    for device in ("cpu", "cuda"):
        for cause in blamed:
            yield f"{cause} on {device}", _dominated_by(cause, f"src_{cause}", device)
        for cause, source in advice._BY_SOURCE:
            yield f"{cause}/{source} on {device}", _dominated_by(cause, source, device)
    yield "unattributed, modules", _unattributed([{"module": "L0.attn", "ms": 2.0}, {"module": "L0", "ms": 0.5}])
    yield "unattributed, ops", _unattributed([{"module": "L0.mlp", "ms": 2.0, "op": "aten.addmm.default", "calls": 1},
                                              {"module": "L0.act", "ms": 0.5, "op": "aten.gelu.default", "calls": 1}])
    yield "unattributed, probed ops", _unattributed([{"module": "L0.mlp", "ms": 2.0, "op": "aten.addmm.default",
                                                      "inferred": {"cause": "runtime_init", "ms": 0.1}}])
    yield "unattributed, nowhere", _unattributed([])
    noisy = trace_report({"allocator_growth": 0.1}, unattributed=0.05)
    yield "within the noise", noisy
    own = trace_report({"profiler_overhead": 30.0}, unattributed=0.1)
    yield "warmprof's own cost", own
    crowded = trace_report({"allocator_growth": 20.0})
    crowded.protocol = Protocol(oversubscription="4 intra-op threads on 2 CPUs: use --threads 2")
    yield "crowded threads", crowded


def test_no_advice_line_nests_brackets():
    seen = 0
    for what, report in _representative_reports():
        lines = advise(report)
        assert lines, what
        for line in lines:
            seen += 1
            assert _depth(line) <= 1, f"{what}: {line}"
    assert seen > 30  # every representative report was walked, a line or more each


@pytest.mark.parametrize("cause", ["allocator_growth", "runtime_init", "algorithm_selection", "graph_capture"])
def test_cuda_only_advice_is_given_on_cuda_traces_only(cause):
    cpu = advise(_dominated_by(cause, f"src_{cause}", "cpu"))
    assert any(line.startswith(cause) for line in cpu)  # the cause is advised on: the generic line
    assert not [line for line in cpu if CUDA_ONLY.search(line)]
    cpu_text = str(dataclasses.replace(_dominated_by(cause, f"src_{cause}", "cpu"), advice=cpu))
    assert not CUDA_ONLY.search(cpu_text.split("advice:")[1])  # nor printed
    cuda = advise(_dominated_by(cause, f"src_{cause}", "cuda:0"))
    assert [line for line in cuda if CUDA_ONLY.search(line)]


def test_no_cpu_trace_is_given_cuda_only_advice():
    for what, report in _representative_reports():
        if report.device == "cpu":
            assert not [line for line in advise(report) if CUDA_ONLY.search(line)], what


def test_the_cause_tables_generic_advice_is_true_on_any_device():
    """CUDA-only sentences belong in cuda_advice, never in the line every device is given."""
    for name in causes.names():
        row = causes.get(name)
        assert not CUDA_ONLY.search(row.advice), name


@pytest.mark.parametrize("cache, kept", [("hit", False), ("miss", True), ("n/a", True)])
def test_no_keep_the_cache_line_after_an_inductor_cache_hit(cache, kept):
    from warmprof.report.trace import TorchCompileFigures

    r = trace_report({"jit_compile": 40.0}, compile="default")
    r.causes = [dataclasses.replace(c, source="torch.compile/inductor") if c.cause == "jit_compile" else c
                for c in r.causes]
    r.torch_compile = TorchCompileFigures(torch_reported_ms=40.0, compiles=1, inductor_cache=cache)
    lines = advise(r)
    assert lines[0].startswith("jit_compile (") and "mostly torch.compile" in lines[0], lines
    assert any("Keep inductor's cache" in line for line in lines) == kept, lines


def test_the_dimension_to_mark_dynamic_is_named_as_dynamo_wrote_it():
    from warmprof.report.trace import TorchCompileFigures, recompile_groups

    r = trace_report({"jit_compile": 40.0}, compile="default")
    r.causes = [dataclasses.replace(c, source="torch.compile/dynamo") if c.cause == "jit_compile" else c
                for c in r.causes]
    groups = recompile_groups([{"recompile_reason": f"0/{i}: tensor 'args[0]' size mismatch at index 1. expected {n}, "
                                                    f"actual {n + 1}", "span_ms": 5.0} for i, n in enumerate((4, 5))])
    r.torch_compile = TorchCompileFigures(torch_reported_ms=40.0, compiles=3, recompiles=groups)
    line = advise(r)[0]
    assert "a new size of args[0] at dimension 1" in line and "torch._dynamo.mark_dynamic(args[0], 1)" in line, line

"""What a compile built from scratch and what it loaded from cache, from dynamo's counters (made-up
counter deltas: the real cache hit is tests/integration/test_warm_compile_cpu.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from warmprof.instruments.torch_compile import CacheOutcome, CompileEvent, TorchCompile, cache_outcome, counters_since
from warmprof.report import CauseEntry
from warmprof.traces.build import with_compile_cache

COLD = {"stats.unique_graphs": 1, "inductor.fxgraph_cache_miss": 1, "aot_autograd.autograd_cache_miss": 1,
        "aot_autograd.autograd_cache_saved": 1}
WARM = {"stats.unique_graphs": 1, "inductor.fxgraph_cache_hit": 1, "aot_autograd.autograd_cache_hit": 1}


@pytest.mark.parametrize("delta, want", [
    (COLD, (1, 1, 0, "inductor FX graph cache")),  # torch 2.13, a fresh cache folder
    (WARM, (1, 0, 1, "inductor FX graph cache")),  # AOT autograd's hit loads inductor's graph too: counted once
    # training: one dynamo graph, a forward and a backward graph for inductor
    ({"stats.unique_graphs": 1, "inductor.fxgraph_cache_hit": 2, "aot_autograd.autograd_cache_hit": 1}, (1, 0, 2, "inductor FX graph cache")),
    # a graph inductor cannot cache (a bypass) is compiled from scratch
    ({"stats.unique_graphs": 2, "inductor.fxgraph_cache_bypass": 1, "inductor.fxgraph_cache_hit": 1}, (2, 1, 1, "inductor FX graph cache")),
    # only AOT autograd's counters moved (a release whose hit does not count inductor's): read those;
    # its guard miss is followed by its plain miss, not counted twice
    ({"stats.unique_graphs": 1, "aot_autograd.autograd_cache_hit": 1}, (1, 0, 1, "AOT autograd cache")),
    ({"aot_autograd.autograd_cache_guard_miss": 1, "aot_autograd.autograd_cache_miss": 1}, (0, 1, 0, "AOT autograd cache")),
    # other inductor caches (kernels, generated modules) are not graphs
    ({"stats.unique_graphs": 1, "inductor.async_compile_cache_hit": 3}, (1, 0, 0, "")),
    ({}, (0, 0, 0, "")),
])
def test_cache_outcome_from_made_up_counters(delta, want):
    out = cache_outcome(delta)
    assert (out.graphs, out.compiled, out.loaded, out.counter) == want


def test_frames_loaded_whole_from_dynamos_cache():
    out = cache_outcome({"dynamo_cache.dynamo_cache_hit": 2, "dynamo_cache.dynamo_cache_miss": 1})
    assert out.frames_loaded == 2 and out.counter == "dynamo cache"
    assert "2 frames loaded whole from dynamo's cache" in out.text()


def test_outcome_text():
    assert cache_outcome(COLD).text() == "1 graph compiled from scratch, 0 loaded from cache (inductor FX graph cache)"
    assert cache_outcome(WARM).text() == "0 graphs compiled from scratch, 1 loaded from cache (inductor FX graph cache)"
    assert CacheOutcome().text() == ""
    assert CacheOutcome(graphs=2).text().startswith("2 graphs compiled (no compile-cache counter moved")


def test_outcomes_add_up():
    total = cache_outcome(COLD) + cache_outcome(WARM) + CacheOutcome(graphs=1)
    assert (total.graphs, total.compiled, total.loaded, total.counter) == (3, 1, 1, "inductor FX graph cache")


def test_counters_since_keeps_what_moved():
    before = {"stats.unique_graphs": 3, "inductor.fxgraph_cache_miss": 2, "inductor.fxgraph_cache_hit": 1}
    after = {"stats.unique_graphs": 4, "inductor.fxgraph_cache_miss": 2, "inductor.fxgraph_cache_hit": 2,
             "aot_autograd.autograd_cache_hit": 1}
    assert counters_since(before, after) == {"stats.unique_graphs": 1, "inductor.fxgraph_cache_hit": 1,
                                             "aot_autograd.autograd_cache_hit": 1}
    # from {} (dynamo imported after the snapshot: its counters started at zero) the delta is the counters
    assert counters_since({}, {"stats.unique_graphs": 1}) == {"stats.unique_graphs": 1}


def test_reading_the_counters_does_not_import_dynamo():
    code = ("import sys; import torch; from warmprof.instruments.torch_compile import compile_counters, "
            "compilation_metrics_mark, recompile_reasons; "
            "assert compile_counters() == {} and compilation_metrics_mark() == [] and recompile_reasons([]) == {}; "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_instrument_summary_says_compiled_and_loaded_per_pass():
    tc = TorchCompile()
    tc.compiles = [CompileEvent("0/0", "torch.compile:compile", 900.0, cache=cache_outcome(COLD).to_dict(), pass_="first"),
                   CompileEvent("1/0", "torch.compile:compile", 40.0, cache=cache_outcome(WARM).to_dict(), pass_="first"),
                   CompileEvent("", "cudagraphs:record", 3.0, pass_="seen_rerun")]
    tc.cache = {"stats.unique_graphs": 2, "inductor.fxgraph_cache_miss": 1, "inductor.fxgraph_cache_hit": 1}
    tc.cache_outcome = cache_outcome(tc.cache)
    s = tc.summary()
    assert (s["graphs_compiled"], s["graphs_from_cache"]) == (1, 1)
    assert s["cache_by_pass"] == {"first": "1 graph compiled from scratch, 1 loaded from cache (inductor FX graph cache)"}
    assert s["inductor_cache"] == "miss"  # unchanged meaning: any inductor miss


def _entry(source: str, ms: float, detail: str = "") -> CauseEntry:
    return CauseEntry(cause="jit_compile", ms=ms, share=0.1, evidence="measured", source=source, detail=detail)


def test_the_pass_largest_compile_entry_says_what_came_from_cache():
    entries = [_entry("torch.compile/dynamo", 30.0), _entry("torch.compile/codegen_and_cxx_compile", 900.0, "x"),
               _entry("onednn", 950.0), CauseEntry("allocator_growth", 5.0, 0.0, "estimated", "host_faults")]
    text = "1 graph compiled from scratch, 0 loaded from cache (inductor FX graph cache)"
    out = with_compile_cache(entries, text)
    assert out[1].detail == "x; " + text  # the largest torch.compile jit_compile entry, added to its detail
    assert [e.detail for e in out if e is not out[1]] == ["", "", ""]
    assert with_compile_cache([_entry("torch.compile", 1.0)], "")[0].detail == ""

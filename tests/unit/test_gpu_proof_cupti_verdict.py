"""bench/gpu_proof's reading of its phases: the differential that tells "CUPTI refused by the
platform" (the raw ctypes subscribe, no warmprof code, fails too) from "warmprof broken" (the raw
one works and warmprof's does not), and digests that never cost the summary."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PROOF = Path(__file__).resolve().parents[2] / "bench" / "gpu_proof"


@pytest.fixture(scope="module")
def d():
    spec = importlib.util.spec_from_file_location("gpu_proof_digest", PROOF / "proof_digest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def raw(result: int = 0, callbacks: int = 120, text: str = "CUPTI_SUCCESS", holder: str = "") -> dict:
    steps = {"gelu_first": {"ms": 0.4, "callbacks": callbacks, "launches": [], "module_loaded": []}}
    return {"subscribe": {"api": "v2", "result": result, "text": text, "holder": holder},
            **({"steps": steps, "raw_callbacks": callbacks} if result == 0 else {})}


def wp(why: str = "", callbacks: int = 40) -> dict:
    return {"why": why, "callbacks": callbacks, "launches": 1, "new_kernels": 1}


def ab(why: str = "", callbacks: int = 300) -> dict:
    run = {"mode": "cupti", "why": why, "first_ms": 20.0, "first_pass_callbacks": callbacks}
    return {"runs": [{"mode": "none", "first_ms": 18.0}, run, {"mode": "none", "first_ms": 18.5}, dict(run)]}


def test_both_subscribes_delivering_is_cupti_works(d):
    v = d.cupti_verdict({**raw(), "warmprof_fresh": wp(), "warmprof_silu": wp()}, ab())
    assert v["verdict"] == d.WORKS and v["text"].startswith("CUPTI WORKS")


def test_the_raw_subscribe_failing_too_is_refused_by_the_platform(d):
    refused = "CUPTI_ERROR_NOT_SUPPORTED"
    seq = {**raw(result=15, text=refused), "warmprof_fresh": wp(why=f"cuptiSubscribe failed: {refused}", callbacks=0)}
    v = d.cupti_verdict(seq, ab(why=f"cuptiSubscribe failed: {refused}", callbacks=0))
    assert v["verdict"] == d.REFUSED
    assert v["text"].startswith("REFUSED BY THE PLATFORM") and "raw ctypes CUPTI subscribe" in v["text"]
    assert refused in v["text"] and "WARMPROF BROKEN" not in v["text"]


def test_a_raw_subscribe_that_delivers_nothing_is_refused_too(d):
    seq = {**raw(callbacks=0), "warmprof_fresh": wp(callbacks=0)}
    v = d.cupti_verdict(seq, None)
    assert v["verdict"] == d.REFUSED and "no callback" in v["text"]


@pytest.mark.parametrize("fresh,silu,ab_run,where", [
    (wp(why="cuptiSubscribe failed: CUPTI_ERROR_UNKNOWN"), wp(), ab(), "fresh process"),
    (wp(callbacks=0), wp(), ab(), "fresh process"),  # subscribed, and nothing came: broken too
    (wp(), wp(), ab(why="", callbacks=0), "A/B run"),
])
def test_the_raw_subscribe_working_and_warmprofs_not_is_warmprof_broken(d, fresh, silu, ab_run, where):
    v = d.cupti_verdict({**raw(), "warmprof_fresh": fresh, "warmprof_silu": silu}, ab_run)
    assert v["verdict"] == d.BROKEN
    assert v["text"].startswith("WARMPROF BROKEN: the raw ctypes subscribe works") and where in v["text"]


def test_nothing_to_compare_is_not_settled(d):
    assert d.cupti_verdict(None, None)["verdict"] == d.NOT_SETTLED
    assert d.cupti_verdict({"error": "timed out"}, ab())["verdict"] == d.NOT_SETTLED
    v = d.cupti_verdict(raw(), {"runs": [{"mode": "cupti", "rc": 1, "err": "ImportError: warmprof"}]})
    assert v["verdict"] == d.NOT_SETTLED and "not tried" in v["text"] and "ImportError" in v["text"]


def test_raw_failing_while_warmprofs_works_is_not_called_a_refusal(d):
    v = d.cupti_verdict({**raw(result=39, text="MULTIPLE_SUBSCRIBERS"), "warmprof_fresh": wp()}, None)
    assert v["verdict"] == d.ODD and "REFUSED" not in v["text"]


@pytest.mark.parametrize("name", ["facts", "build", "seq", "kineto", "ab", "trace_eager", "trace_compile",
                                  "trace_ro", "gpu_check", "run_cuda"])
@pytest.mark.parametrize("result", [{}, {"error": "boom"}, {"no_gpu": "none"}, {"runs": "x", "steps": 3, "rows": [1]},
                                    {"gpu": None, "torch": [], "causes": [None], "import": "x"}])
def test_a_digest_never_raises(d, name, result):
    lines = d.digest(name, result)
    assert isinstance(lines, list) and all(isinstance(x, str) for x in lines)


def test_the_digests_say_what_settles_each_question(d):
    seq = {**raw(), "warmprof_fresh": wp(), "steps": {"gelu_first": {
        "ms": 0.5, "callbacks": 9, "launches": [{"name": "__cudaLaunchKernel", "params_null": True}],
        "module_loaded": [{"in": "__cudaLaunchKernel", "magic": "7f454c46"}], "longest": []}}}
    text = "\n".join(d.digest("seq", seq))
    assert "__cudaLaunchKernel (params NULL)" in text and "MODULE_LOADED x1" in text and "7f454c46" in text
    ab_text = "\n".join(d.digest("ab", ab()))
    assert "adds +1.75 ms to the first pass" in ab_text
    check = {"rows": [{"section": "op", "item": "first call of a jiterator op", "result": "FAIL", "attributed": "runtime_init",
                       "expect": "jit_compile > 0", "note": ""}, {"result": "PASS"}]}
    lines = d.digest("gpu_check", check)
    assert lines[0] == "PASS 1, FAIL 1, N/A 0, INFO 0" and "jiterator" in lines[1]


def test_the_run_cuda_digest_keeps_the_cuda_init_phase_and_cuptis_time_per_cause(d):
    spec = importlib.util.spec_from_file_location("gpu_proof_run_cuda", PROOF / "run_cuda.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    report = {"processes": [{"pid": 1, "parent": None, "cupti": {"on": True, "subscribe_ms": 80.0, "callbacks": 412},
                             "phases": [
                                 {"name": "import torch", "ms": 900.0, "causes": [{"cause": "runtime_init", "source": "python_import", "ms": 880.0}]},
                                 {"name": "cuda: init (context creation)", "ms": 310.0, "unattributed_ms": 20.0,
                                  "causes": [{"cause": "runtime_init", "source": "cupti", "ms": 290.0}]},
                                 {"name": "(unnamed code)", "ms": 50.0, "unattributed_ms": 1.0,
                                  "causes": [{"cause": "allocator_growth", "source": "cupti", "ms": 4.0},
                                             {"cause": "graph_capture", "source": "cupti", "ms": 45.0}]}]}]}
    got = mod.digest_report(report)
    assert got["cuda_init"]["ms"] == 310.0 and got["cupti"]["callbacks"] == 412
    assert got["cupti_ms_by_cause"] == {"runtime_init": 290.0, "allocator_growth": 4.0, "graph_capture": 45.0}
    text = "\n".join(d.digest("run_cuda", {"rc": 0, **got}))
    assert "CUPTI on (412 callbacks" in text and "cuda init 310.00 ms: runtime_init 290.00 ms" in text

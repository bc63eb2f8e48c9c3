"""The op_probe report: JSON round trip, load-time checks, text, `show`; the trace's op rows it probes."""

import json

import pytest
from factories import ADD_CALL, ADDMM_CALL, op_probe_report, trace_report_with_ops

from warmprof import cli
from warmprof.errors import InputError, ReportError
from warmprof.probes import aten
from warmprof.report import load
from warmprof.report.op_probe import OpProbeReport


def test_round_trip_keeps_every_field(tmp_path):
    r = op_probe_report()
    back = load(r.save(tmp_path / "ops.json"))
    assert isinstance(back, OpProbeReport)
    assert back.to_dict() == r.to_dict()


def test_one_op_result_has_the_figures_the_trace_view_folds_in():
    d = op_probe_report().to_dict()["ops"][0]
    for k in ("op", "short", "label", "call", "verdict", "evidence", "first_ms", "steady_ms", "steady_p10_ms",
              "steady_p90_ms", "cold_excess_ms", "shape_excess_ms", "rerun_ms", "runtime_warmup_ms", "alloc_hi_ms",
              "variants", "error", "source"):
        assert k in d


def test_text_has_one_row_per_op_with_verdict_and_evidence():
    text = str(op_probe_report())
    table = text.split("First call vs steady, per op call (ms)\n")[1].split("\n\n")[0].splitlines()
    rows = table[2:]  # below the header and its rule
    assert len(rows) == 2
    assert "jit_compile" in rows[0] and "first 1 ms vs steady" in rows[0]
    assert "failed" in rows[1] and "RuntimeError: boom" in rows[1]
    assert "shape excess" in text and "blocks.0.mlp" in text


def test_show_prints_a_saved_op_probe_report(tmp_path, capsys):
    path = op_probe_report().save(tmp_path / "ops.json")
    assert cli.main(["show", str(path)]) == 0
    assert "First call vs steady, per op call" in capsys.readouterr().out
    assert cli.main(["show", str(path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "op_probe"


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["ops"][0].update(verdict="compile"), "verdict"),
    (lambda d: d["ops"][0].update(steady_ms=5.0), "outside p10-p90"),
    (lambda d: d["ops"][0].update(cold_excess_ms=3.0), "cold_excess_ms"),
    (lambda d: d["ops"][0].update(first_ms=None), "first_ms missing"),
    (lambda d: d["ops"][1].update(error=""), "without its error"),
    (lambda d: d["ops"][0].update(rerun_ms=-1.0), "negative"),
    (lambda d: d.update(ops=[]), "no ops"),
    (lambda d: d["ops"][0].update(surprise=1), "unexpected key"),
])
def test_a_corrupt_report_is_refused_naming_the_field(tmp_path, edit, message):
    d = op_probe_report().to_dict()
    edit(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ReportError, match=message):
        load(path)


def test_op_sites_take_the_largest_distinct_replayable_calls():
    sites = aten.op_sites(trace_report_with_ops(), top=5)
    assert [c for c, _ in sites] == [ADDMM_CALL, ADD_CALL]  # the second addmm row is the same call
    assert sites[0][1] == {"module": "blocks.0.mlp", "ms": 0.9, "calls": 2}
    assert len(aten.op_sites(trace_report_with_ops(), top=1)) == 1


def test_a_trace_without_op_rows_says_to_trace_with_the_op_view():
    with pytest.raises(InputError, match=r"warmprof trace --explain"):
        aten.probe_from(trace_report_with_ops([{"module": "blocks.0", "ms": 1.0}]))


def test_op_rows_that_cannot_be_replayed_say_why():
    bad = dict(ADD_CALL, args=[{"unsupported": "Generator"}])
    with pytest.raises(InputError, match="Generator cannot be rebuilt"):
        aten.probe_from(trace_report_with_ops([{"module": "m", "ms": 1.0, "op": "aten.add.Tensor", "call": bad}]))


def test_a_trace_report_with_op_rows_loads_back_from_json(tmp_path):
    path = trace_report_with_ops().save(tmp_path / "trace.json")
    sites = aten.op_sites(load(path), top=5)
    assert [c["op"] for c, _ in sites] == ["aten.addmm.default", "aten.add.Tensor"]


@pytest.mark.parametrize("answer, error", [
    ({"ok": False, "error": "RuntimeError: boom"}, "RuntimeError: boom"),
    ({"ok": False, "error": "timed out after 5 s (the child was killed)"}, "timed out"),
])
def test_a_child_that_fails_becomes_a_failed_row(answer, error):
    r = aten.probe_one(ADD_CALL, run=lambda job, threads, timeout: (answer, 12.0))
    assert r.verdict == "failed" and error in r.error and r.first_ms is None


def test_a_child_answer_is_judged_into_a_result():
    answer = {"ok": True, "first_ms": 2.0, "steady": {"steady_ms": 0.02, "steady_p10_ms": 0.019, "steady_p90_ms": 0.021},
              "rerun_ms": 0.02, "runtime_warmup_ms": 1.2, "launch_hi_ms": 0.002, "alloc_hi_ms": 0.05,
              "working_set_bytes": 256, "threads": 1, "dropped_variants": [],
              "variants": [{"what": "w", "label": "l", "first_ms": 0.02, "steady_ms": 0.02, "steady_p10_ms": 0.02,
                            "steady_p90_ms": 0.02}]}
    r = aten.probe_one(ADD_CALL, run=lambda job, threads, timeout: (answer, 12.0))
    assert r.verdict == "runtime_init" and r.cold_excess_ms == pytest.approx(1.98) and r.shape_excess_ms == 0.0


@pytest.mark.parametrize("rc, out, err, message", [
    (-11, b"", b"Fatal Python error: Segmentation fault\n", "killed by SIGSEGV: Fatal Python error"),
    (1, b"", b"Traceback\nImportError: no torch\n", "exited with code 1: ImportError: no torch"),
    (0, b"not json\n", b"", "gave no answer"),
])
def test_a_child_that_crashes_or_answers_nothing_is_named(rc, out, err, message):
    answer = aten._answer(rc, out, err)
    assert answer["ok"] is False and message in answer["error"]

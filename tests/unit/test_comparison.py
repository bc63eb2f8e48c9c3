"""warmprof.compare: one row per cause (or op), each report's own figures, ratios to the first."""

from __future__ import annotations

import json
import math

import pytest

import warmprof
from warmprof.cli import main
from warmprof.report.comparison import Comparison, compare
from warmprof.errors import InputError, ReportError
from warmprof.render.compare_text import CompareTextRenderer
from warmprof.render.format import ms_cell
from warmprof.report import CauseEntry, Report

from factories import DESKTOP, ORIN, probe_report, trace_report

# -- trace comparisons ---------------------------------------------------------------------------
def test_rows_carry_each_reports_own_figures():
    a = trace_report({"jit_compile": 10.0, "runtime_init": 50.0, "allocator_growth": 5.0}, platform=ORIN, device="cuda")
    b = trace_report({"jit_compile": 2.0, "runtime_init": 45.0, "allocator_growth": 6.0}, steady=1.0, device="cuda")
    c = compare(a, b)
    assert isinstance(c, Comparison) and c.kind == "trace"
    for i, r in enumerate((a, b)):
        for row in c.rows:
            expected = [e for e in r.causes if e.cause == row.key]
            assert row.cells[i].ms == pytest.approx(sum(e.ms for e in expected))
            assert row.cells[i].share == pytest.approx(sum(e.share for e in expected))
        summary = {row.key: row.cells[i].ms for row in c.summary}
        assert summary == {"first pass": r.first_pass_ms, "seen re-run": r.seen_rerun_ms,
                           "steady median": r.steady_median_ms, "excess": r.excess_ms}
    assert {row.key for row in c.rows} == {"jit_compile", "runtime_init", "allocator_growth", "unattributed"}


def test_rows_sorted_by_largest_change_with_unattributed_last():
    a = trace_report({"jit_compile": 10.0, "runtime_init": 50.0, "allocator_growth": 5.0}, unattributed=0.5)
    b = trace_report({"jit_compile": 2.0, "runtime_init": 45.0, "allocator_growth": 6.0}, unattributed=30.0)
    keys = [row.key for row in compare(a, b).rows]
    assert keys == ["jit_compile", "runtime_init", "allocator_growth", "unattributed"]


def test_ratios_are_to_the_first_report_and_new_causes_have_none():
    a = trace_report({"runtime_init": 40.0})
    b = trace_report({"runtime_init": 20.0, "jit_compile": 300.0})
    c3 = trace_report({"runtime_init": 80.0})
    c = compare(a, b, c3)
    rows = {row.key: row for row in c.rows}
    assert rows["runtime_init"].ratios == pytest.approx([1.0, 0.5, 2.0])
    assert rows["jit_compile"].ratios[1] is None  # absent from the baseline: no ratio
    assert rows["jit_compile"].cells[0].ms == 0.0 and rows["jit_compile"].cells[2].ms == 0.0
    assert c.rows[0].key == "jit_compile"  # moved the most
    text = str(c)
    jit_line = next(line for line in text.splitlines() if line.strip().startswith("jit_compile"))
    assert "new" in jit_line and "x2.00" in next(line for line in text.splitlines() if line.strip().startswith("runtime_init"))


def test_text_table_numbers_equal_the_reports_own():
    a = trace_report({"jit_compile": 12.345, "runtime_init": 50.0}, platform=ORIN, device="cuda")
    b = trace_report({"jit_compile": 1.5, "runtime_init": 45.25}, steady=1.0, device="cuda")
    text = str(compare(a, b, labels=["orin", "rtx4090"]))
    for r in (a, b):
        for cause, ms in r.by_cause().items():
            line = next(line for line in text.splitlines() if line.strip().startswith(cause + " "))
            assert ms_cell(ms) in line.split()
        for value in (r.first_pass_ms, r.steady_median_ms, r.excess_ms):
            assert ms_cell(value) in text
    assert "orin" in text and "rtx4090" in text and "Jetson AGX Orin (MAXN)" in text and "NVIDIA GeForce RTX 4090" in text


def test_platform_lines_that_differ_are_listed_above_the_table():
    a = trace_report({"jit_compile": 1.0}, platform=ORIN, device="cuda")
    b = trace_report({"jit_compile": 1.0}, platform=DESKTOP, device="cuda", compile="default")
    c = compare(a, b)
    keys = [k for k, _ in c.differs]
    assert [r.key for r in c.settings_differ()] == ["compile"]  # settings are the settings record's
    assert {"cpu", "cpu_count", "gpu", "jetson", "power_mode", "cuda_driver"} <= set(keys)
    assert "os" not in keys and "torch" not in keys and "compile" not in keys
    assert dict(c.differs)["jetson"] == ["NVIDIA Jetson AGX Orin Developer Kit", "-"]
    text = str(c)
    assert text.index("settings that differ") < text.index("  compile: off (eager) vs default") \
        < text.index("platform differs") < text.index("cause (share")
    same = str(compare(a, a))
    assert "settings: identical" in same and "platform: identical" in same


@pytest.mark.parametrize("field, value", [("model", "other_model"), ("shape", (1, 128)), ("version", "0.2.0")])
def test_warning_when_model_shape_or_version_differ(field, value):
    a = trace_report({"jit_compile": 1.0})
    b = trace_report({"jit_compile": 1.0}, **{field: value})
    c = compare(a, b)
    assert len(c.warnings) == 1
    word = {"version": "warmprof version"}.get(field, field)
    assert c.warnings[0].startswith(f"{word} differs")
    assert f"warning: {word} differs" in str(c)
    assert compare(a, trace_report({"jit_compile": 5.0})).warnings == []


def test_mixing_kinds_is_a_report_error():
    with pytest.raises(ReportError, match="different kinds"):
        compare(trace_report({"jit_compile": 1.0}), probe_report())


def test_bad_calls_are_input_errors():
    a = trace_report({"jit_compile": 1.0})
    with pytest.raises(InputError, match="at least two"):
        compare(a)
    with pytest.raises(InputError, match="labels"):
        compare(a, a, labels=["one"])
    with pytest.raises(InputError, match="not dict"):
        compare(a, {"kind": "trace"})


def test_compare_paths_uses_file_names_as_labels(tmp_path):
    a, b = trace_report({"jit_compile": 3.0}), trace_report({"jit_compile": 6.0})
    pa, pb = a.save(tmp_path / "eager.json"), b.save(tmp_path / "threads1.json")
    c = warmprof.compare(pa, str(pb))
    assert c.labels == ["eager", "threads1"] and c.sources == [str(pa), str(pb)]
    assert c.rows[0].cells[1].ms == pytest.approx(6.0)
    assert compare([pa, pb]).labels == ["eager", "threads1"]


def test_corrupt_or_foreign_files_give_a_clear_error(tmp_path):
    good = trace_report({"jit_compile": 1.0}).save(tmp_path / "good.json")
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"schema_version": 1, "kind": "trace", "model": ')
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(ReportError, match="invalid JSON"):
        compare(good, corrupt)
    with pytest.raises(ReportError, match="not a warmprof report"):
        compare(good, foreign)
    with pytest.raises(ReportError, match="no such file"):
        compare(good, tmp_path / "missing.json")


def test_comparison_json_is_data_and_not_loadable_as_a_report(tmp_path):
    c = compare(trace_report({"jit_compile": 1.0}), trace_report({"jit_compile": 2.0}))
    d = json.loads(c.to_json())
    assert d["kind"] == "comparison" and d["report_kind"] == "trace"
    assert d["rows"][0]["cells"][1]["ms"] == pytest.approx(2.0)
    path = tmp_path / "cmp.json"
    path.write_text(c.to_json())
    with pytest.raises(ReportError, match="unknown report kind 'comparison'"):
        warmprof.load(path)


def test_two_real_reports_compare_into_their_own_numbers(tmp_path):
    torch = pytest.importorskip("torch", reason="a real trace needs torch")
    from warmprof.traces.demo import demo_model

    threads = torch.get_num_threads()
    paths = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            paths.append(warmprof.trace(demo_model(), (1, 16), steady=5).save(tmp_path / f"threads{n}.json"))
    finally:
        torch.set_num_threads(threads)
    reports = [Report.load(p) for p in paths]
    c = compare(*paths)
    text = str(c)
    for i, r in enumerate(reports):
        own = {e.cause: 0.0 for e in r.causes}
        for e in r.causes:
            own[e.cause] += e.ms
        for row in c.rows:
            if row.key in own:
                assert row.cells[i].ms == pytest.approx(own[row.key], abs=1e-12)
            line = next(line for line in text.splitlines() if line.strip().startswith(row.key + " "))
            assert ms_cell(row.cells[i].ms) in line.split()
        assert [row.cells[i].ms for row in c.summary][:4] == [r.first_pass_ms, r.seen_rerun_ms, r.steady_median_ms,
                                                             r.excess_ms]
        # warmprof's own cost: its own summary line, never a cause row
        own_rows = {row.key: row.cells[i].ms for row in c.summary[4:]}
        assert own_rows == {"warmprof's own cost, per pass": r.own_cost["steady_ms"]}
        assert "profiler_overhead" not in {row.key for row in c.rows}
    threads = next(row for row in c.settings if row.key == "threads")
    assert threads.values == ["1", "2"] and "threads: 1 vs 2" in text
    assert all(r.settings is not None and r.settings.threads_set is False for r in reports)


# -- probe comparisons ---------------------------------------------------------------------------
def test_probe_reports_compare_per_op_and_prediction():
    a, b = probe_report(), probe_report(scale=3.0, platform=ORIN, holds=False, backend="eager")
    c = compare(a, b)
    assert c.kind == "probe" and c.summary == []
    keys = [row.key for row in c.rows]
    assert keys[0] == "matmul 64x64x64"  # the only op that moved
    assert set(keys) == {"matmul 64x64x64", "matmul 96x64x32", "softmax 1x1024", "softmax 3x1024"}
    matmul = c.rows[0]
    assert [cell.ms for cell in matmul.cells] == [30.0, 90.0]
    assert matmul.cells[0].steady_ms == 0.05 and matmul.cells[0].verdict == "compile"
    assert matmul.ratios == pytest.approx([1.0, 3.0])
    preds = {p.id: p for p in c.predictions}
    assert preds["P3"].holds == [True, False] and preds["P3"].claim == "keyed on shape, not size"
    assert preds["P1"].figures == ["median first/steady: matmul 600x"] * 2
    assert ("backend", ["compile", "eager"]) in c.differs
    text = str(c)
    assert "matmul 64x64x64" in text and "x3.00" in text
    p3 = next(line for line in text.splitlines() if line.strip().startswith("P3"))
    assert p3.split()[1:3] == ["holds", "fails"]
    assert "B: both pay > 5x? matmul 64x64 12x / 32x128 1.1x" in text


def test_probe_rows_absent_from_a_report_are_shown_as_absent():
    c = compare(probe_report(), probe_report(ops=("matmul",)))
    softmax = next(row for row in c.rows if row.key == "softmax 1x1024")
    assert softmax.cells[1].ms is None and softmax.ratios[1] is None
    line = next(line for line in str(c).splitlines() if line.strip().startswith("softmax 1x1024"))
    assert line.split()[-4:] == ["-", "-", "-", "-"]


def test_probe_reports_compare_from_files(tmp_path):
    pa = probe_report().save(tmp_path / "cpu.json")
    pb = probe_report(scale=2.0).save(tmp_path / "gpu.json")
    c = compare(pa, pb)
    assert c.labels == ["cpu", "gpu"] and c.rows[0].cells[1].ms == pytest.approx(60.0)


# -- the command ---------------------------------------------------------------------------------
def test_cli_compare_prints_the_table(tmp_path, capsys):
    pa = trace_report({"jit_compile": 3.0}, platform=ORIN, device="cuda").save(tmp_path / "jetson.json")
    pb = trace_report({"jit_compile": 1.0}, device="cuda").save(tmp_path / "desktop.json")
    out_json = tmp_path / "cmp.json"
    assert main(["compare", str(pa), str(pb), "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("warmprof compare: 2 trace reports")
    assert "jetson" in out and "desktop" in out and "jit_compile" in out
    assert json.loads(out_json.read_text())["labels"] == ["jetson", "desktop"]


def test_cli_compare_errors_are_one_line(tmp_path, capsys):
    pa = trace_report({"jit_compile": 3.0}).save(tmp_path / "a.json")
    bad = tmp_path / "b.json"
    bad.write_text("not json")
    assert main(["compare", str(pa), str(bad)]) == ReportError.exit_code
    err = capsys.readouterr().err
    assert err.startswith("warmprof: error:") and err.count("\n") == 1 and "b.json" in err
    assert main(["compare", str(pa)]) == InputError.exit_code



@pytest.mark.parametrize("form", ["--label a b after the reports", "--label a b before the reports",
                                  "--label a --label b after", "--label a --label b before", "between the reports"])
def test_cli_compare_takes_the_labels_after_one_flag_or_one_per_flag(tmp_path, capsys, form):
    pa = trace_report({"jit_compile": 3.0}).save(tmp_path / "x.json")
    pb = trace_report({"jit_compile": 9.0}).save(tmp_path / "y.json")
    a, b = str(pa), str(pb)
    argv = {"--label a b after the reports": [a, b, "--label", "fast", "slow"],
            "--label a b before the reports": ["--label", "fast", "slow", a, b],
            "--label a --label b after": [a, b, "--label", "fast", "--label", "slow"],
            "--label a --label b before": ["--label", "fast", "--label", "slow", a, b],
            "between the reports": [a, "--label", "fast", "slow", b]}[form]
    out_json = tmp_path / "cmp.json"
    assert main(["compare", *argv, "--json", str(out_json)]) == 0
    assert json.loads(out_json.read_text())["labels"] == ["fast", "slow"]
    assert json.loads(out_json.read_text())["sources"] == [a, b]
    legend = capsys.readouterr().out.splitlines()[1:3]
    assert legend[0].split()[:2] == ["A", "fast"] and legend[1].split()[:2] == ["B", "slow"]


def test_cli_compare_refuses_labels_that_do_not_match_the_reports(tmp_path, capsys):
    pa = trace_report({"jit_compile": 3.0}).save(tmp_path / "x.json")
    pb = trace_report({"jit_compile": 9.0}).save(tmp_path / "y.json")
    assert main(["compare", str(pa), str(pb), "--label", "a", "b", "c"]) == InputError.exit_code
    assert "3 labels for 2 reports" in capsys.readouterr().err
    assert main(["compare", "--label", "a", "b"]) == InputError.exit_code  # no reports at all
    assert "at least two reports" in capsys.readouterr().err

def test_renderer_handles_many_reports():
    reports = [trace_report({"jit_compile": 1.0 + i}) for i in range(4)]
    text = CompareTextRenderer().render(compare(*reports))
    assert "D/A" in text and math.isfinite(compare(*reports).rows[0].change_ms)


def test_cause_cells_say_how_each_report_knows():
    a = trace_report({"jit_compile": 10.0, "allocator_growth": 2.0})
    b = trace_report({"jit_compile": 8.0, "allocator_growth": 3.0})
    for e in b.causes:
        if e.cause == "allocator_growth":
            e.evidence = "estimated"
    b.causes.append(CauseEntry("jit_compile", 0.5, 0.0, "estimated", "other", "blocks.0"))
    c = compare(a, b, labels=["a", "b"])
    cells = {row.key: row.cells for row in c.rows}
    assert [cell.evidence for cell in cells["allocator_growth"]] == ["measured", "estimated"]
    assert [cell.evidence for cell in cells["jit_compile"]] == ["measured", "measured+estimated"]
    assert [cell.evidence for cell in cells["unattributed"]] == ["residual", "residual"]
    line = next(ln for ln in str(c).splitlines() if ln.strip().startswith("allocator_growth"))
    assert "measured" in line and "estimated" in line
    assert json.loads(c.to_json())["rows"][0]["cells"][0]["evidence"]


def test_a_negative_residual_in_both_reports_is_not_called_new():
    a = trace_report({"jit_compile": 10.0}, unattributed=-1.0)
    c = compare(a, a, labels=["a", "b"])
    line = next(ln for ln in str(c).splitlines() if ln.strip().startswith("unattributed"))
    assert "new" not in line


def test_a_report_whose_causes_overshoot_its_excess_is_flagged_and_its_residual_has_no_share_or_ratio():
    a = trace_report({"jit_compile": 10.0})
    b = trace_report({"jit_compile": 10.0}, unattributed=-1.0)  # causes 10 ms, excess 9 ms
    c = compare(a, b, labels=["a", "b"])
    assert any(w.startswith("b: its causes add up to 10.00 ms, more than its excess (9.00 ms)") for w in c.warnings)
    assert not any(w.startswith("a:") for w in c.warnings)
    (row,) = [r for r in c.rows if r.key == "unattributed"]
    assert row.cells[1].share is None and row.ratios[1] is None
    line = next(ln for ln in str(c).splitlines() if ln.strip().startswith("unattributed"))
    assert "x-" not in line and "%" not in line.split("-1.00", 1)[1]


def test_compare_labels_that_swallow_every_report_are_refused_saying_so(capsys):
    from warmprof.cli import main

    assert main(["compare", "--label", "x", "y", "a.json", "b.json", "c.json"]) == 2
    err = capsys.readouterr().err
    assert "--label took 5 words and no report followed" in err

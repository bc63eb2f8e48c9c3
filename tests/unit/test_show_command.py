"""warmprof show: the text report of a saved file (trace or probe), or its JSON; bad files fail clearly."""

from __future__ import annotations

import json

import pytest

from factories import probe_report, trace_report
from warmprof.cli import main
from warmprof.errors import ReportError


def test_show_prints_the_trace_text_report(tmp_path, capsys):
    r = trace_report({"jit_compile": 3.0, "runtime_init": 9.0})
    path = r.save(tmp_path / "r.json")
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("warmprof trace: demo_lm (1, 64) float32 on cpu, eager")
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.strip().startswith(("jit_compile", "runtime_init"))}
    assert rows["jit_compile"][1] == "3.00" and rows["runtime_init"][1] == "9.00"  # the file's own figures
    assert rows["runtime_init"][2] == f"{9.0 / r.excess_ms:.1%}"


def test_show_prints_the_probe_text_report(tmp_path, capsys):
    path = probe_report().save(tmp_path / "p.json")
    assert main(["show", str(path)]) == 0
    assert "matmul" in capsys.readouterr().out


def test_show_text_to_a_file(tmp_path, capsys):
    path = trace_report({"jit_compile": 3.0}).save(tmp_path / "r.json")
    out = tmp_path / "r.txt"
    assert main(["show", str(path), "-o", str(out)]) == 0
    assert "jit_compile" in out.read_text() and capsys.readouterr().out == ""


@pytest.mark.parametrize("make", [lambda: trace_report({"jit_compile": 3.0}), probe_report])
def test_show_json_round_trips(tmp_path, capsys, make):
    report = make()
    path = report.save(tmp_path / "r.json")
    assert main(["show", str(path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(report.to_json())


@pytest.mark.parametrize("content, message", [
    ('{"schema_version": 1, "kind": "trace", ', "invalid JSON"),
    ('{"traceEvents": []}', "not a warmprof report"),
    ('{"schema_version": 1, "kind": "flamegraph"}', "unknown report kind"),
    ('{"schema_version": 1, "kind": "trace", "model": "m"}', "missing field"),
    ('{"schema_version": 99, "kind": "trace"}', "newer than this warmprof"),
])
def test_corrupt_or_foreign_files_fail_with_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    for fmt in ("text", "chrome"):
        assert main(["show", str(path), "--format", fmt]) == ReportError.exit_code
        err = capsys.readouterr().err
        assert err.startswith("warmprof: error: ") and message in err and err.count("\n") == 1


def test_missing_file(tmp_path, capsys):
    assert main(["show", str(tmp_path / "nope.json")]) == ReportError.exit_code
    assert "no such file" in capsys.readouterr().err


def test_chrome_of_a_probe_report_is_refused(tmp_path, capsys):
    path = probe_report().save(tmp_path / "p.json")
    assert main(["show", str(path), "--format", "chrome"]) == ReportError.exit_code
    assert "needs a trace report" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["text", "json", "chrome"])
def test_an_output_path_that_cannot_be_written_is_one_line_before_any_work(tmp_path, capsys, fmt):
    path = trace_report({"jit_compile": 3.0}).save(tmp_path / "r.json")
    code = main(["show", str(path), "--format", fmt, "-o", str(tmp_path / "nodir" / "out.txt")])
    err = capsys.readouterr().err
    assert code != 0 and err.startswith("warmprof: error: ") and err.count("\n") == 1
    assert "does not exist" in err


def test_a_json_syntax_error_names_line_and_column_once(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text('{"a": "x\x01"}')
    assert main(["show", str(path)]) == ReportError.exit_code
    err = capsys.readouterr().err
    assert "Invalid control character at line 1, column 9" in err and "at at" not in err


def test_the_entry_points_are_the_real_functions_for_help():
    import inspect

    import warmprof

    params = inspect.signature(warmprof.trace).parameters
    assert {"model", "shape", "inputs", "dtype", "device", "compile", "steady"} <= set(params)
    assert "backend" in inspect.signature(warmprof.probe).parameters
    assert "labels" in inspect.signature(warmprof.compare).parameters
    assert {"trace", "probe", "compare", "load"} <= set(dir(warmprof))
    with pytest.raises(AttributeError):
        warmprof.no_such_entry_point

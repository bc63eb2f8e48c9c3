"""A trace report records every setting that changes what is measured, and `compare` names each one
that differs (text, JSON, the PNG's title); "settings: identical" only when they are; a report written
before the record loads, and compare says which settings it cannot tell."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from warmprof.cli import main
from warmprof.errors import ReportError
from warmprof.report import SCHEMA_VERSION, Report, load
from warmprof.report.comparison import compare
from warmprof.report.settings import COMPARED, NAMES, Settings, values_of

from factories import trace_report, trace_settings

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"


def _with(**over) -> Report:
    """A report whose settings record differs from the factory's by `over`."""
    return trace_report({"jit_compile": 1.0}, settings=trace_settings(**over))


# -- the record in the report ----------------------------------------------------------------------
def test_the_settings_record_round_trips_in_this_schema_version(tmp_path):
    r = _with(op_view=True, explain=True, explain_top=4, threads=2, threads_set=True, warm_shape=[2, 64],
              controls=["clean cold pass", {"name": "warm control", "shape": [1, 64]}], model_cast="bfloat16",
              model_dtype="bfloat16")
    path = r.save(tmp_path / "r.json")
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION == 6
    assert data["settings"]["threads"] == 2 and data["settings"]["controls"][1]["name"] == "warm control"
    again = load(path)
    assert again.settings == r.settings and again.to_dict() == r.to_dict()


def test_a_newer_writers_settings_keys_are_kept():
    d = _with().to_dict()
    d["settings"]["interop_threads"] = 3
    r = Report.from_dict(d)
    assert r.settings.extra == {"interop_threads": 3} and r.to_dict()["settings"]["interop_threads"] == 3


@pytest.mark.parametrize("key, bad, says", [("threads", 0, "settings.threads: expected a positive integer"),
                                            ("op_view", "yes", "settings.op_view: expected true or false"),
                                            ("device", "tpu", "settings.device: unknown device"),
                                            ("controls", "none", "settings.controls: expected a list")])
def test_a_bad_setting_is_refused_naming_it(key, bad, says):
    d = _with().to_dict()
    d["settings"][key] = bad
    with pytest.raises(ReportError, match=says):
        Report.from_dict(d)


def test_a_version_2_report_loads_without_a_record_and_saves_back_without_one(tmp_path):
    v2 = json.loads((GOLDEN / "trace_eager.json").read_text())["report"]
    assert v2["schema_version"] == 2 and "settings" not in v2
    r = Report.from_dict(v2)
    assert r.settings is None
    again = json.loads(r.save(tmp_path / "again.json").read_text())
    assert "settings" not in again and again == dict(v2, schema_version=SCHEMA_VERSION)


def test_a_repeated_traces_median_view_keeps_the_runs_settings():
    from warmprof.report.repeat import RepeatReport

    runs = [_with(threads=2), _with(threads=2)]
    assert RepeatReport.of_runs(runs).median_view().settings == runs[0].settings


# -- compare names each setting that differs ---------------------------------------------------------
# (change to the record, the line compare prints)
DIFFERENCES = [
    ({"threads": 2}, "threads: 4 vs 2"),
    ({"op_view": True}, "op view: off vs on"),
    ({"explain": True, "explain_top": 8}, "explain: off vs on (top 8)"),
    ({"model_dtype": "bfloat16", "model_cast": "bfloat16"}, "model dtype: float32 vs bfloat16"),
    ({"input_dtype": "int64"}, "input dtype: float32 vs int64"),
    ({"input_shape": [1, 128]}, "input: shape 1,64 vs shape 1,128"),
    ({"inputs": {"args": [[1, 64]], "kwargs": {"mask": [1, 64]}}}, "input: shape 1,64 vs [1, 64], mask=[1, 64]"),
    ({"device": "cuda"}, "device: cpu vs cuda"),
    ({"compile": "reduce-overhead"}, "compile: off (eager) vs reduce-overhead"),
    ({"cache": "keep"}, "cache: fresh vs keep"),
    ({"fresh_process": False, "cache": "in-process (caller's)"}, "process: fresh vs in-process"),
    ({"steady": [20, 20]}, "steady passes: 5-50 (adaptive) vs 20"),
    ({"steady_budget_s": 10.0}, "steady budget: 3 s vs 10 s"),
    ({"no_grad": False}, "grad: off (no_grad) vs on"),
    ({"warm_shape": [2, 64]}, "warm-up shape: none vs 2,64"),
    ({"torch": "2.6.0"}, "torch: 2.5.0 vs 2.6.0"),
    ({"controls": ["clean cold pass", {"name": "warm control"}]}, "controls: none vs clean cold pass, warm control"),
]


@pytest.mark.parametrize("over, line", DIFFERENCES, ids=[next(iter(o)) for o, _ in DIFFERENCES])
def test_compare_names_each_setting_that_differs_with_both_values(over, line, tmp_path):
    a, b = _with(), _with(**over)
    c = compare(a, b)
    text = str(c)
    assert "settings that differ" in text and f"  {line}\n" in text
    assert "settings: identical" not in text
    name = line.split(":")[0]
    assert [r.name for r in c.settings_differ()] == [name] or name == "process"  # process: the cache too
    # the JSON says it the same way
    d = json.loads(c.to_json())
    rows = {r["name"]: r for r in d["settings"]}
    assert rows[name]["differs"] and rows[name]["values"] == line.split(": ", 1)[1].split(" vs ")
    assert d["settings_identical"] is False
    # and the PNG's title
    pytest.importorskip("matplotlib", reason="the PNG needs matplotlib")
    from warmprof.render.png import figure, settings_header

    assert line in settings_header(c)
    title = figure(c).axes[0].get_title()
    assert line in " ".join(title.split())  # wrapped over lines: the same words


def test_identical_settings_read_identical_everywhere():
    c = compare(_with(), _with())
    assert c.settings_identical() and not c.settings_differ() and not c.settings_unknown()
    text = str(c)
    assert "settings: identical" in text and "settings that differ" not in text
    assert json.loads(c.to_json())["settings_identical"] is True
    from warmprof.render.png import settings_header

    assert settings_header(c) == "settings: identical"


def test_every_compared_setting_has_a_name_and_reads_as_text():
    s = Settings()
    assert len(NAMES) == len(COMPARED) and all(isinstance(v, str) and v for v in values_of(
        trace_report({"jit_compile": 1.0}, settings=s)).values())
    covered = {key for key, _ in values_of(trace_report({"jit_compile": 1.0}, settings=s)).items()}
    fields = {f.name for f in dataclasses.fields(Settings)} - {"extra", "threads_set", "model_cast", "explain_top"}
    assert covered == (fields - {"input_shape", "inputs"}) | {"input"}  # every field is compared (the input as one)


# -- a report from before the record ------------------------------------------------------------------
def test_compare_with_a_report_from_before_the_record_says_what_it_cannot_tell():
    old, new = trace_report({"jit_compile": 1.0}, settings=None), _with()
    c = compare(old, new, labels=["old", "new"])
    unknown = {r.name for r in c.settings_unknown()}
    assert {"model dtype", "op view", "explain", "steady passes", "warm-up shape", "controls", "threads"} <= unknown
    assert not {"device", "compile", "input", "input dtype", "torch"} & unknown  # its own fields tell these
    assert not c.settings_identical()
    text = str(c)
    assert "settings: identical" not in text
    assert "settings it cannot tell" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("  A: "))
    assert "model dtype" in line and "op view" in line and "device" not in line
    assert not any(ln.startswith("  B: ") for ln in text.splitlines())  # the new one tells them all
    assert "settings: the same wherever the reports record them" in text


def test_two_old_reports_still_show_a_device_and_threads_that_differ():
    a = trace_report({"jit_compile": 1.0}, settings=None, device="cpu", platform={"torch": "2.5.0", "torch_threads": 1})
    b = trace_report({"jit_compile": 1.0}, settings=None, device="cuda", platform={"torch": "2.5.0", "torch_threads": 2})
    c = compare(a, b)
    lines = {r.name: r for r in c.settings_differ()}
    assert set(lines) == {"device", "threads"} and lines["threads"].values == ["1", "2"]
    assert "torch_threads" not in dict(c.differs)  # said once, as a setting


def test_an_old_report_with_op_rows_reads_as_op_view_on():
    r = trace_report({"jit_compile": 1.0}, settings=None)
    r.unattributed_where = [{"module": "m", "ms": 1.0, "op": "aten.mm.default", "calls": 1}]
    assert values_of(r)["op_view"] == "on" and values_of(r)["explain"] is None


def test_cli_compare_prints_the_settings_and_writes_them_to_json(tmp_path, capsys):
    pa = _with(threads=1).save(tmp_path / "one.json")
    pb = _with(threads=2, op_view=True).save(tmp_path / "two.json")
    out_json = tmp_path / "cmp.json"
    assert main(["compare", str(pa), str(pb), "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "  threads: 1 vs 2\n" in out and "  op view: off vs on\n" in out
    names = {r["name"] for r in json.loads(out_json.read_text())["settings"] if r["differs"]}
    assert names == {"threads", "op view"}


# -- explain marks the record ---------------------------------------------------------------------------
def test_explain_marks_the_settings_even_when_nothing_is_probed(monkeypatch):
    from warmprof.errors import InputError
    from warmprof.probes import aten
    from warmprof.traces.explain import explain_report

    def nothing(*_a, **_k):
        raise InputError("no op rows")

    monkeypatch.setattr(aten, "probe_from", nothing)
    r = _with()
    assert explain_report(r, top=3) == []
    assert r.settings.explain and r.settings.explain_top == 3


# -- what the protocol fills in ---------------------------------------------------------------------------
def test_the_protocol_reads_the_models_dtypes_the_threads_and_the_warm_up_shape():
    torch = pytest.importorskip("torch")
    from warmprof.report.trace import RunContext
    from warmprof.traces.settings import model_dtypes, trace_settings as settings_of

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4).to(torch.bfloat16))
    assert model_dtypes(torch, model) == "bfloat16+float32"
    assert model_dtypes(torch, lambda x: x) == "" and model_dtypes(torch, torch.nn.ReLU()) == ""
    s = settings_of(torch, model, device="cpu", compile=None, input_dtype="float32", input_shape=[2, 4], inputs=None,
                    op_view=True, steady=(3, 3), steady_budget_s=1.5, no_grad=False, model_cast=torch.bfloat16,
                    run=RunContext(fresh_process=True, cache="keep", threads=2, warm_shape="3,4"))
    assert (s.threads, s.threads_set) == (torch.get_num_threads(), True)  # as measured; set for the trace
    assert (s.warm_shape, s.model_cast, s.cache, s.fresh_process) == ([3, 4], "bfloat16", "keep", True)
    assert (s.steady, s.steady_budget_s, s.no_grad, s.op_view) == ([3, 3], 1.5, False, True)
    assert s.torch_version == torch.__version__ and s.controls == []


def test_the_trace_command_hands_its_warm_up_shape_to_the_trace():
    import argparse

    from warmprof.commands import trace as cmd

    parser = argparse.ArgumentParser()
    cmd.setup(parser)
    args = parser.parse_args(["--demo", "--warm-shape", "2,16", "--fresh-process", "--threads", "1"])
    run = cmd._run_context(args)
    assert (run.warm_shape, run.threads, run.fresh_process) == ("2,16", 1, True)
    assert cmd._run_context(parser.parse_args(["--demo", "--warm-shape", "2,16"])).warm_shape == "2,16"

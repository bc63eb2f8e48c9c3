"""The warmup report kind (report/warmup.py): warmup's and assert_warm's result is data, saved and
loaded like every kind (a bad field is a ReportError naming it); str() is the registry's text format
(render/warmup_text.py), and that text is the one the golden file recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import warmprof
from warmprof import render
from warmprof.cli import main
from warmprof.errors import ReportError
from warmprof.render.warmup_text import WarmupTextRenderer
from warmprof.report.base import ReportBase
from warmprof.report.warmup import WarmRow, WarmupResult

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden" / "warmup.json"


def _golden(key: str = "result") -> tuple[WarmupResult, dict]:
    doc = json.loads(GOLDEN.read_text())
    return WarmupResult.from_dict(doc[key]), doc


def checked() -> WarmupResult:
    """An assert_warm result with a failing shape, a label shape and a note."""
    bad = WarmRow(shape=(1, 8), ms=12.0, calls=2, causes={"allocator_growth": 3.0},
                  evidence={"allocator_growth": "+4.0 MiB anonymous", "runtime_init": "+2.0 MiB file-backed"},
                  faults=900, anon_bytes=4 << 20, file_bytes=-4096, per_call=[{"ms": 8.0, "fired": ["allocator_growth"]},
                                                                             {"ms": 4.0, "fired": ["allocator_growth"]}],
                  not_warm=["allocator_growth"])
    ok = WarmRow(shape="[2, 8], mask=-", ms=1.0, calls=1, per_call=[{"ms": 1.0, "fired": []}])
    return WarmupResult("assert_warm", "Net", "cpu", [bad, ok], ["a note"])


@pytest.mark.parametrize("key", ["result", "grown_result"])
def test_the_golden_result_loads_and_its_text_is_the_recorded_text(key):
    result, doc = _golden(key)
    assert result.to_dict() == doc[key]  # to_dict is the dict warmup has always returned
    text = doc["text" if key == "result" else "grown_text"]
    assert WarmupTextRenderer().render(result) == text + "\n"
    assert str(result) == text  # through the render hook, without the text format's final newline
    assert render.render(result, "text") == text + "\n"


def test_str_goes_through_the_registered_text_renderer(monkeypatch):
    monkeypatch.setattr(WarmupTextRenderer, "render", lambda self, r: f"rendered {r.model}\n")
    assert str(checked()) == "rendered Net"


def test_a_result_round_trips_through_dict_and_json(tmp_path):
    r = checked()
    assert WarmupResult.from_dict(r.to_dict()) == r
    assert WarmupResult.from_dict(json.loads(r.to_json())) == r
    back = warmprof.load(r.save(tmp_path / "w.json"))  # any-kind load: "assert_warm" names this kind too
    assert isinstance(back, WarmupResult) and back == r and back.kind == "assert_warm"
    assert back.row((1, 8)).shape == (1, 8) and back.row("[2, 8], mask=-").calls == 1
    assert str(back) == str(r) and not back.warm
    assert json.loads(r.to_json())["schema_version"] == warmprof.report.SCHEMA_VERSION


def test_row_finds_a_shape_however_it_is_written():
    r = checked()
    assert r.row((1, 8)) is r.row([1, 8]) is r.row("1,8") is r.row("1, 8") is r.rows[0]
    for missing in ((1, 9), "1,,8", (1, 0), "[1, 8]", 1.5):
        with pytest.raises(KeyError):
            r.row(missing)


def test_show_and_the_json_format_render_a_saved_result(tmp_path, capsys):
    r = checked()
    path = r.save(tmp_path / "w.json")
    assert main(["show", str(path)]) == 0
    assert capsys.readouterr().out == str(r) + "\n"
    assert main(["show", str(path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(r.to_json())
    assert render.formats("warmup") == ["text", "json"]


def test_text_makes_control_characters_visible():
    r = checked()
    r.model = "net\x1b[2J"
    assert "net\\x1b[2J" in str(r)


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(kind="warm"), r"kind: unknown warmup kind 'warm'"),
    (lambda d: d.pop("model"), r"missing field 'model'"),
    (lambda d: d.update(rows={}), r"rows: expected a list"),
    (lambda d: d["rows"][0].update(shape=[1, 0]), r"rows\[0\]\.shape: expected a list of positive integers or a label"),
    (lambda d: d["rows"][0].update(ms="fast"), r"rows\[0\]\.ms: expected a finite number"),
    (lambda d: d["rows"][0].update(ms=-1.0), r"rows\[0\]\.ms is negative"),
    (lambda d: d["rows"][0].update(calls=-2), r"rows\[0\]\.calls: expected a non-negative integer"),
    (lambda d: d["rows"][0].update(surprise=1), r"rows\[0\]: unexpected key 'surprise'"),
    (lambda d: d["rows"][0]["causes"].update(allocator_growth=-3.0), r"rows\[0\]\.causes\['allocator_growth'\] is negative"),
    (lambda d: d["rows"][0]["evidence"].update(magic="x"), r"rows\[0\]\.evidence: unknown cause 'magic'"),
    (lambda d: d["rows"][0]["evidence"].pop("allocator_growth"), r"rows\[0\]\.causes: 'allocator_growth' has no evidence"),
    (lambda d: d["rows"][0]["per_call"][1].update(fired=["nope"]), r"rows\[0\]\.per_call\[1\]\.fired: unknown cause 'nope'"),
    (lambda d: d["rows"][0]["per_call"][0].pop("ms"), r"rows\[0\]\.per_call\[0\]: missing key 'ms'"),
    (lambda d: d["rows"][0].update(cuda_reserved_bytes=1.5), r"rows\[0\]\.cuda_reserved_bytes: expected an integer or null"),
    (lambda d: d.update(kind="warmup"), r"rows\[0\]\.not_warm: only assert_warm fails a shape"),
    (lambda d: d.update(notes="a note"), r"notes: expected a list"),
])
def test_a_bad_field_is_refused_naming_it(change, message, tmp_path):
    data = json.loads(checked().to_json())
    change(data)
    with pytest.raises(ReportError, match=message):
        WarmupResult.from_dict(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReportError, match=f"{path}: " if "kind" not in message else "unknown"):
        warmprof.load(path)


def test_another_kind_is_not_a_warmup_result(tmp_path):
    path = tmp_path / "w.json"
    checked().save(path)
    assert type(ReportBase.load(path)) is WarmupResult
    data = json.loads(path.read_text())
    data["kind"] = "watch"
    with pytest.raises(ReportError, match="a 'watch' report, not a 'warmup' report"):
        WarmupResult.from_json(json.dumps(data))

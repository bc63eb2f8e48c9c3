"""Output formats are one registry (render/registry.py): `show --format` and its choices, `show -o
NAME.ext`, str() of a report or a comparison and `compare --png/--json` all look renderers up there
by format name and kind; a binary format is never printed; render/format.py says figures one way."""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys

import pytest
from factories import op_probe_report, op_result, probe_report, trace_report
from warmprof import render
from warmprof.cli import main
from warmprof.report.comparison import compare
from warmprof.errors import InputError, ReportError
from warmprof.render import format as fmt
from warmprof.render import registry
from warmprof.render.base import Renderer

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# -- the registry --------------------------------------------------------------------------------
def test_formats_are_listed_by_name_and_by_kind():
    assert render.formats() == ["text", "json", "chrome", "png"]
    assert render.formats("trace") == ["text", "json", "chrome", "png"]
    assert render.formats("probe") == ["text", "json", "png"]  # a Chrome trace needs spans
    assert render.formats("comparison") == ["text", "json", "png"]


@pytest.mark.parametrize("name, kind, cls", [
    ("text", "trace", "TraceTextRenderer"), ("text", "probe", "ProbeTextRenderer"),
    ("text", "comparison", "CompareTextRenderer"), ("json", "probe", "JsonRenderer"),
    ("chrome", "trace", "ChromeTraceRenderer"), ("png", "comparison", "PngRenderer"),
])
def test_a_renderer_is_found_by_format_and_kind(name, kind, cls):
    renderer = render.get(name, kind)
    assert type(renderer).__name__ == cls and isinstance(renderer, Renderer)
    row = render.find(name)
    assert (renderer.extension, renderer.binary) == (row.extension, row.binary)


def test_extension_and_binary_are_declared_per_format():
    rows = {name: render.find(name) for name in render.formats()}
    assert {name: (r.extension, r.binary) for name, r in rows.items()} == {
        "text": (".txt", False), "json": (".json", False), "chrome": (".json", False), "png": (".png", True)}
    assert not rows["chrome"].inferred  # a .json file is the report's own JSON


def test_an_unknown_format_names_the_known_ones():
    with pytest.raises(InputError, match=r"unknown output format 'svg' \(known: text, json, chrome, png\)"):
        render.get("svg", "trace")


def test_a_format_that_does_not_render_a_kind_says_what_does():
    with pytest.raises(ReportError, match=r"the chrome format needs a trace report or a run report, not a probe report "
                                          r"\(a probe report can be shown as text, json, png\)"):
        render.get("chrome", "probe")


def test_the_kind_of_a_report_and_of_a_comparison():
    assert render.kind_of(trace_report({"jit_compile": 1.0})) == "trace"
    assert render.kind_of(probe_report()) == "probe"
    assert render.kind_of(compare(probe_report(), probe_report(scale=2.0))) == "comparison"
    with pytest.raises(Exception, match="neither a report nor a comparison"):
        render.kind_of(object())


def test_str_of_a_report_and_of_a_comparison_is_the_registered_text_format():
    r = trace_report({"jit_compile": 3.0}, model="net\x1b[2J")
    assert str(r) == render.render(r, "text") == render.get("text", "trace").output(r)
    assert "net\\x1b[2J" in str(r)  # output() makes control characters visible, for every kind
    c = compare(r, trace_report({"jit_compile": 9.0}), labels=["a\rb", "b"])
    assert str(c) == render.render(c, "text") and "a\\x0db" in str(c)
    p = probe_report()
    assert str(p) == render.render(p, "text")


def test_output_checks_text_against_binary():
    class Confused(Renderer):
        binary = True

        def render(self, report):
            return "text from a binary format"

    with pytest.raises(TypeError, match="binary=True"):
        Confused().output(trace_report({"jit_compile": 1.0}))


def test_importing_warmprof_loads_no_renderer_module():
    # `import warmprof` loads no part of the render layer (warmprof run's agent imports warmprof in every
    # process of a command's tree); the first str() of a report loads it, and with it only the text
    # renderers' table, not matplotlib.
    code = ("import sys, warmprof; "
            "print(sorted(m for m in sys.modules if m.startswith('warmprof.render') or m == 'matplotlib'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert json.loads(out.replace("'", '"')) == []
    code = ("import sys, warmprof; from warmprof.report.run import RunReport; "
            "t = str(RunReport(command=['x'], duration_ms=1.0, processes=[])); assert t.startswith('warmprof run: x'), t; "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == "False"


class _Shouting(Renderer):
    format = "shout"
    kinds = ("trace",)
    extension = ".shout"

    def render(self, report):
        return str(report).upper()


@pytest.fixture
def shout_format(monkeypatch):
    """A format added at run time, gone after the test."""
    registry.formats()  # the built-in ones first
    monkeypatch.setattr(registry, "_FORMATS", dict(registry._FORMATS))
    registry.register(_Shouting)


def test_a_format_added_at_run_time_needs_no_dispatcher_changed(tmp_path, capsys, shout_format):
    path = trace_report({"jit_compile": 3.0}).save(tmp_path / "r.json")
    assert main(["show", str(path), "--format", "shout"]) == 0
    assert capsys.readouterr().out.startswith("WARMPROF TRACE: DEMO_LM")
    assert main(["show", str(path), "-o", str(tmp_path / "r.shout")]) == 0
    assert (tmp_path / "r.shout").read_text().startswith("WARMPROF TRACE")
    with pytest.raises(ValueError, match="already renders trace"):
        registry.register(type("Other", (_Shouting,), {}))


# -- show: the format from --format, else from the -o file's extension ---------------------------
def test_show_picks_json_from_a_json_file_name(tmp_path, capsys):
    report = probe_report()
    path = report.save(tmp_path / "p.json")
    assert main(["show", str(path), "-o", str(tmp_path / "out.json")]) == 0
    assert json.loads((tmp_path / "out.json").read_text()) == json.loads(report.to_json())


def test_show_picks_png_from_a_png_file_name(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="PNG export needs the plot extra (matplotlib)")
    path = trace_report({"jit_compile": 3.0}).save(tmp_path / "r.json")
    assert main(["show", str(path), "-o", str(tmp_path / "r.PNG")]) == 0
    assert (tmp_path / "r.PNG").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize("name", ["r.txt", "r", "r.report"])
def test_show_writes_text_to_any_other_file_name(tmp_path, capsys, name):
    report = trace_report({"jit_compile": 3.0})
    path = report.save(tmp_path / "r.json")
    assert main(["show", str(path), "-o", str(tmp_path / name)]) == 0
    assert (tmp_path / name).read_text() == str(report)


def test_an_explicit_format_wins_over_the_extension(tmp_path, capsys):
    report = trace_report({"jit_compile": 3.0})
    path = report.save(tmp_path / "r.json")
    assert main(["show", str(path), "--format", "chrome", "-o", str(tmp_path / "t.json")]) == 0
    assert "traceEvents" in json.loads((tmp_path / "t.json").read_text())  # chrome only when asked for
    assert main(["show", str(path), "--format", "text", "-o", str(tmp_path / "t.png")]) == 0
    assert (tmp_path / "t.png").read_text() == str(report)


def test_show_format_choices_come_from_the_registry(tmp_path, capsys):
    path = trace_report({"jit_compile": 3.0}).save(tmp_path / "r.json")
    with pytest.raises(SystemExit) as info:
        main(["show", str(path), "--format", "svg"])
    assert info.value.code == 2
    assert "invalid choice: 'svg' (choose from 'text', 'json', 'chrome', 'png')" in capsys.readouterr().err.replace("\n", " ")


# -- a binary format is never printed ------------------------------------------------------------
@contextlib.contextmanager
def stdout_on_a_terminal():
    """sys.stdout on a pseudo-terminal, set inside the test (pytest sets its own at each phase);
    yields the reader end."""
    reader, writer = os.openpty()
    try:
        with open(writer, "w", encoding="utf-8") as tty:
            saved, sys.stdout = sys.stdout, tty
            try:
                assert sys.stdout.isatty()
                yield reader
            finally:
                sys.stdout = saved
    finally:
        os.close(reader)


def _printed(reader: int) -> bytes:
    sys.stdout.flush()
    got = b""
    while select.select([reader], [], [], 0.2)[0]:
        got += os.read(reader, 1 << 16)
    return got


def test_a_binary_format_is_refused_to_a_terminal(tmp_path, capsys):
    path = trace_report({"jit_compile": 3.0}).save(tmp_path / "r.json")
    with stdout_on_a_terminal() as terminal:
        assert main(["show", str(path), "--format", "png"]) == InputError.exit_code
        assert _printed(terminal) == b""  # nothing reached the terminal
    err = capsys.readouterr().err
    assert err.startswith("warmprof: error: --format png writes binary data") and "-o FILE.png" in err
    assert err.count("\n") == 1


def test_text_still_reaches_a_terminal(tmp_path, capsys):
    path = trace_report({"jit_compile": 3.0}).save(tmp_path / "r.json")
    with stdout_on_a_terminal() as terminal:
        assert main(["show", str(path)]) == 0
        assert b"warmprof trace: demo_lm" in _printed(terminal)


def test_a_binary_format_is_refused_to_standard_output_before_the_report_is_read(tmp_path, capsys):
    assert main(["show", str(tmp_path / "missing.json"), "--format", "png"]) == InputError.exit_code
    assert "-o FILE.png" in capsys.readouterr().err


# -- compare writes its files through the registry ----------------------------------------------
def test_compare_json_is_the_registered_json_format(tmp_path, capsys):
    a = trace_report({"jit_compile": 3.0}).save(tmp_path / "a.json")
    b = trace_report({"jit_compile": 9.0}).save(tmp_path / "b.json")
    assert main(["compare", str(a), str(b), "--json", str(tmp_path / "c.json")]) == 0
    c = compare(str(a), str(b))
    assert (tmp_path / "c.json").read_text() == render.render(c, "json")
    assert capsys.readouterr().out == str(c)


# -- render/format.py ----------------------------------------------------------------------------
@pytest.mark.parametrize("v, text", [(12345.6, "12.3 s"), (-12345.6, "-12.3 s"), (2490.0, "2490 ms"), (12.34, "12.3 ms"),
                                     (0.5, "0.50 ms"), (0.0, "0.00 ms"), (0.03, "30.0 µs"), (-0.03, "-30.0 µs")])
def test_ms_in_a_sentence_carries_its_unit(v, text):
    assert fmt.ms(v) == text


@pytest.mark.parametrize("v, text", [(5.0, "5.00"), (0.003, "<0.01"), (-0.003, ">-0.01"), (0.0, "0.00"), (-1.0, "-1.00"),
                                     (2490.0, "2490.00"), (12345.6, "12.3 s")])
def test_cause_ms_never_shows_a_misleading_zero(v, text):
    assert fmt.cause_ms(v) == text


@pytest.mark.parametrize("v, cell, decimals", [(None, "-", "-"), (0.0, "0.00", "0.0000"), (0.0123, "0.0123", "0.0123"),
                                               (0.5, "0.5", "0.500"), (25.0, "25.00", "25.0"), (2500.0, "2500.00", "2500.0"),
                                               (12345.6, "12.3 s", "12.3 s")])
def test_the_table_ms_variants(v, cell, decimals):
    assert fmt.ms_cell(v) == cell and fmt.ms_decimals(v) == decimals


@pytest.mark.parametrize("v, text", [(12345.6, "12.3 s"), (2490.0, "2490 ms"), (2.5, "2.5 ms")])
def test_duration_in_seconds_from_10_s(v, text):
    assert fmt.duration(v) == text


def test_times_over_10_s_are_in_seconds_in_every_text_renderer():
    """One rule for the trace text, the comparison text and the probe texts: 10 s or more is
    written in seconds ('12.3 s'), never as 12345.6 ms (or 12345.60 in an ms column)."""
    slow = trace_report({"jit_compile": 12345.6}, rerun_causes={"jit_compile": 11000.0})
    slow.modules = [{"module": "blocks.0", "causes": {"jit_compile": 12345.6}}]
    fast = trace_report({"jit_compile": 3.0})
    probe = probe_report(scale=411.52)  # matmul's first call: 12345.6 ms
    texts = {"trace": str(slow), "comparison": str(compare(fast, slow)),
             "probe": str(probe), "probe comparison": str(compare(probe_report(), probe)),
             "op probe": str(op_probe_report([op_result(first_ms=12345.6, cold_excess_ms=12345.0, source={
                 "module": "blocks.0.mlp", "ms": 12345.6, "calls": 2})]))}
    for what, text in texts.items():
        assert "12.3 s" in text, what
        assert "12345" not in text, (what, [line for line in text.splitlines() if "12345" in line])


def test_a_table_aligns_its_columns():
    rows = [["matmul", "1.50", "x"], ["softmax 3x1024", "12.25", "yy"]]
    assert fmt.table(["op", "ms", "v"], rows, right={1}) == [
        "  op                 ms  v", "  matmul           1.50  x", "  softmax 3x1024  12.25  yy"]
    assert fmt.table(["op", "ms"], [["a", "1"]], rule=True) == ["  op  ms", "  --  --", "  a   1"]


def test_subject_and_device_name_what_was_measured_and_where():
    from factories import ORIN

    r = trace_report({"jit_compile": 1.0}, compile="default", platform=ORIN, device="cuda")
    assert fmt.subject(r) == "demo_lm (1, 64) float32, compile=default"
    assert fmt.subject(probe_report()) == "op probes (compile, float32)"
    assert fmt.subject(None) == ""
    assert fmt.device(r) == "Jetson AGX Orin (MAXN)"

"""Names come from users: no control character in one reaches the terminal raw, and a very long
one is cut in a PNG so the figure stays drawable."""

from __future__ import annotations

import re

import pytest

from factories import DESKTOP, probe_report, trace_report
from warmprof.cli import main
from warmprof.report.comparison import compare
from warmprof.errors import ReportError
from warmprof.render.safe import safe_text

RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but \n and \t
EVIL = "net\x1b[2J\r\x07\x9b31m"


def test_safe_text_escapes_controls_and_keeps_newlines_tabs_and_unicode():
    assert safe_text(EVIL) == "net\\x1b[2J\\x0d\\x07\\x9b31m"
    assert safe_text("a\tb\nc\x00\x7f é … 名") == "a\tb\nc\\x00\\x7f é … 名"


def test_str_of_a_trace_report_shows_a_hostile_model_name_escaped():
    text = str(trace_report({"jit_compile": 3.0}, model=EVIL))
    assert not RAW_CONTROL.search(text) and "net\\x1b[2J" in text


def test_str_of_a_probe_report_shows_hostile_platform_text_escaped():
    text = str(probe_report(platform=dict(DESKTOP, cpu="cpu\x1b]0;owned\x07")))
    assert not RAW_CONTROL.search(text) and "cpu\\x1b]0;owned\\x07" in text


def test_str_of_a_comparison_shows_hostile_labels_escaped():
    a, b = trace_report({"jit_compile": 3.0}, model=EVIL), trace_report({"jit_compile": 9.0})
    text = str(compare(a, b, labels=["a\rb", "bell\x07"]))
    assert not RAW_CONTROL.search(text) and "a\\x0db" in text and "bell\\x07" in text


@pytest.mark.parametrize("argv", [["show", "{a}"], ["compare", "{a}", "{b}", "--label", "x\x1b[2J", "--label", "y"]])
def test_show_and_compare_print_no_raw_control_characters(tmp_path, capsys, argv):
    a = trace_report({"jit_compile": 3.0}, model=EVIL).save(tmp_path / "a.json")
    b = trace_report({"jit_compile": 9.0}).save(tmp_path / "b.json")
    assert main([x.format(a=a, b=b) for x in argv]) == 0
    out = capsys.readouterr().out
    assert not RAW_CONTROL.search(out) and "\\x1b[2J" in out


def test_show_text_written_to_a_file_is_escaped_too(tmp_path, capsys):
    a = trace_report({"jit_compile": 3.0}, model=EVIL).save(tmp_path / "a.json")
    assert main(["show", str(a), "-o", str(tmp_path / "a.txt")]) == 0
    assert not RAW_CONTROL.search((tmp_path / "a.txt").read_text())


def test_the_one_line_error_is_escaped(tmp_path, capsys):
    missing = tmp_path / "gone\x1b[2J\r.json"
    assert main(["show", str(missing)]) == ReportError.exit_code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not RAW_CONTROL.search(err) and "gone\\x1b[2J\\x0d.json: no such file" in err


def test_a_5000_character_model_name_is_cut_in_the_png():
    pytest.importorskip("matplotlib", reason="PNG export needs the plot extra (matplotlib)")
    from matplotlib.figure import Figure

    from warmprof.render import png

    r = trace_report({"jit_compile": 3.0}, model="M" * 5000)
    assert png.PngRenderer().render(r).startswith(b"\x89PNG\r\n\x1a\n")
    title = png._trace_figure(Figure, r).axes[0].get_title()
    assert "M" * png.NAME_CHARS not in title and "M…" in title and len(title) < 400


def test_long_labels_are_cut_in_a_comparison_png():
    pytest.importorskip("matplotlib", reason="PNG export needs the plot extra (matplotlib)")
    from matplotlib.figure import Figure

    from warmprof.render import png

    c = compare(trace_report({"jit_compile": 3.0}), trace_report({"jit_compile": 9.0}), labels=["L" * 5000, "short"])
    ax = png._comparison_figure(Figure, c).axes[0]
    texts = [ax.get_title()] + [t.get_text() for t in ax.get_legend().get_texts()]
    assert all(len(t) < 400 for t in texts) and any("L…" in t for t in texts)


def test_a_name_holding_newlines_cannot_forge_lines_of_the_report():
    """A class name or label is one field: its newlines are escaped, so it cannot print a fake
    advice block under the real report."""
    from warmprof.render.safe import one_line

    forged = "Net\n  advice:\n    - no warm-up needed"
    r = trace_report({"jit_compile": 3.0})
    r.model = forged
    r.notes = ["a note\n  advice:\n    - forged"]
    text = str(r)
    assert "\n  advice:\n    - no warm-up needed" not in text and "\n    - forged" not in text
    assert one_line(forged) in text
    assert one_line("a\tb\n") == "a\\x09b\\x0a"


BIDI_AND_SURROGATE = "admin\u202egnp.exe\u2066x\u2069\u200f\udcff"


def test_bidi_controls_and_lone_surrogates_are_shown_escaped():
    """Issue 26: bidi override characters reached the terminal (they reorder what it shows), and a lone
    surrogate (a module name read with surrogateescape, a report's "\\udcff") ended in a traceback when
    printed."""
    assert safe_text(BIDI_AND_SURROGATE) == "admin\\u202egnp.exe\\u2066x\\u2069\\u200f\\udcff"
    text = str(trace_report({"jit_compile": 3.0}, model=BIDI_AND_SURROGATE))
    assert "admin\\u202egnp.exe" in text and not re.search("[\u202a-\u202e\u2066-\u2069\u200e\u200f\ud800-\udfff]", text)
    text.encode("utf-8")  # printable: no lone surrogate left


def test_show_of_a_report_with_a_surrogate_and_bidi_in_a_name_prints_it_escaped(tmp_path, capsys):
    import json

    path = tmp_path / "r.json"
    d = trace_report({"jit_compile": 3.0}).to_dict()
    d["model"] = BIDI_AND_SURROGATE
    path.write_text(json.dumps(d))  # ensure_ascii: the surrogate travels as "\udcff"
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "admin\\u202egnp.exe" in out and "\\udcff" in out

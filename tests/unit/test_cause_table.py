"""One table of causes: a cause added at run time is validated, drawn, coloured and named everywhere."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from warmprof import _native, causes
from warmprof.traces.advice import advise
from warmprof.errors import ReportError, WarmprofError
from warmprof.report import load

from factories import trace_report

FAKE = causes.Cause(None, "kernel_gremlins", "kernel gremlins", "#123456", "cq_build_failed", True,
                    advice="Feed the gremlins before midnight.")


def _fake_report():
    return trace_report({"kernel_gremlins": 30.0, "jit_compile": 5.0})


def test_an_unknown_cause_is_refused_until_it_is_in_the_table(tmp_path):
    with causes.added(FAKE):
        path = _fake_report().save(tmp_path / "r.json")
    with pytest.raises(ReportError, match="unknown cause 'kernel_gremlins'"):
        load(path)
    with causes.added(FAKE):
        assert [c.cause for c in load(path).causes][0] == "kernel_gremlins"
    assert "kernel_gremlins" not in causes.names()


def test_a_new_cause_is_named_and_advised_in_the_text():
    with causes.added(FAKE):
        report = _fake_report()
        report.advice = advise(report)  # advice is written into the report when it is built
        text = str(report)
    assert "kernel_gremlins" in text
    assert "Feed the gremlins before midnight." in text


def test_a_new_cause_has_its_colour_in_the_chrome_trace():
    from warmprof.render.chrome import ChromeTraceRenderer

    with causes.added(FAKE):
        events = json.loads(ChromeTraceRenderer().render(_fake_report()))["traceEvents"]
    fake = [e for e in events if e.get("cat") == "kernel_gremlins"]
    assert fake and all(e["cname"] == "cq_build_failed" for e in fake)


def test_a_new_cause_is_drawn_in_its_colour_in_the_png():
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    from warmprof.render.png import PngRenderer

    with causes.added(FAKE):
        png = PngRenderer().render(_fake_report())
    pixels = (imread(io.BytesIO(png), format="png")[..., :3] * 255).round().astype(int)
    fake_rgb = np.array([0x12, 0x34, 0x56])
    assert (pixels == fake_rgb).all(axis=-1).sum() > 100  # a bar and a legend patch, not a stray pixel


def test_the_table_refuses_a_taken_name_or_id():
    with pytest.raises(WarmprofError, match="already in the table"):
        causes.register(causes.Cause(None, "jit_compile", "x", "#000000", "grey", True))
    with pytest.raises(WarmprofError, match="already taken"):
        causes.register(causes.Cause(causes.JIT_COMPILE, "other", "x", "#000000", "grey", True))
    with pytest.raises(WarmprofError, match="the recorder takes ids"):  # a new recorded id needs causes.h first
        causes.register(causes.Cause(_native.NUM_CAUSES, "other", "x", "#000000", "grey", True))
    with pytest.raises(WarmprofError, match="cannot remove"):
        causes.unregister("unattributed")
    assert causes.names()[-1] == "unattributed"


def test_every_cause_a_warm_up_moves_says_how_the_advice_test_follows_it():
    """traces/advice.FOLLOW says what following a cause's advice means for tests/integration/
    test_advice_followed.py (a warm-up pass at the served shape, at any, at the largest): a cause the
    table says a warm-up moves and advises on has an entry, or that test fails once the cause is advised."""
    from warmprof.traces.advice import FOLLOW

    missing = [n for n in causes.names() if (c := causes.get(n)) is not None and c.warmup_fixes and c.advice
               and n not in FOLLOW]
    assert not missing, missing

"""report_build's cause entries: shares are fractions of the excess and never sum past 1."""

import pytest

from warmprof.attribution import Part, PassAttribution
from warmprof.report_build import _entries


def _att(*ms: float) -> PassAttribution:
    parts = [Part("jit_compile", f"src{i}", "measured", ns=m * 1e6, count=1, by_module={"M": m * 1e6})
             for i, m in enumerate(ms)]
    return PassAttribution(pass_ms=100.0, parts=parts, spans=[])


def test_shares_are_fractions_of_the_excess():
    entries = _entries(_att(30.0, 10.0), excess_ms=80.0)
    assert [e.share for e in entries] == pytest.approx([30 / 80, 10 / 80])


def test_attributed_past_the_excess_is_shared_out_of_the_attributed_time():
    entries = _entries(_att(30.0, 10.0), excess_ms=20.0)
    assert sum(e.share for e in entries) == pytest.approx(1.0)


@pytest.mark.parametrize("excess", [0.0, -5.0])
def test_no_excess_means_no_share(excess):
    entries = _entries(_att(0.1), excess_ms=excess)
    assert entries[0].ms == pytest.approx(0.1) and entries[0].share == 0.0


def test_parts_under_a_microsecond_are_left_out():
    assert [e.source for e in _entries(_att(5.0, 0.0005), excess_ms=10.0)] == ["src0"]


def test_causes_overshooting_the_excess_are_noted_with_what_shares_then_mean():
    from warmprof.report_build import overshoot_note

    assert overshoot_note(4.0, 5.0, 0.5) == ""
    assert overshoot_note(4.0, 0.0, 0.5) == ""  # no excess: shares are 0, nothing to explain
    outside = overshoot_note(4.95, 3.21, 0.3)
    assert "1.74 ms more than the excess" in outside and "outside the noise band" in outside
    assert "fractions of the attributed time" in outside
    assert "within the noise band" in overshoot_note(3.3, 3.21, 0.3)


def test_advice_and_text_say_attributed_time_when_causes_overshoot():
    from warmprof.advice import advise
    from warmprof.report import CauseEntry, Report

    r = Report(model="M", shape=[1, 8], device="cpu", first_pass_ms=13.21, seen_rerun_ms=10.1, steady_median_ms=10.0,
               noise_band_ms=0.3, excess_ms=3.21, unattributed_ms=-1.74, attributed_ms=4.95,
               causes=[CauseEntry("allocator_growth", 4.71, 4.71 / 4.95, "estimated", "host_faults", "M", count=900),
                       CauseEntry("jit_compile", 0.24, 0.24 / 4.95, "measured", "onednn", "M")])
    (line,) = [a for a in advise(r) if a.startswith("allocator_growth")]
    assert "95% of the attributed time" in line
    row = next(ln for ln in str(r).splitlines() if ln.strip().startswith("unattributed"))
    assert "-1.74" in row and "%" not in row  # no share of a negative residual

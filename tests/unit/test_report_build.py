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

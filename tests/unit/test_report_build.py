"""traces.build's cause entries: shares are fractions of the excess and never sum past 1."""

import pytest

from warmprof.attribution import Part, PassAttribution
from warmprof.traces.build import _entries


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


def test_a_part_detail_becomes_the_cause_entry_detail():
    att = _att(5.0)
    att.parts[0].detail = "1 module load inside a compile span ... the innermost span wins"
    assert _entries(att, excess_ms=10.0)[0].detail == att.parts[0].detail


def test_causes_overshooting_the_excess_are_noted_with_what_shares_then_mean():
    from warmprof.traces.build import overshoot_note

    assert overshoot_note(4.0, 5.0, 0.5) == ""
    assert overshoot_note(4.0, 0.0, 0.5) == ""  # no excess: shares are 0, nothing to explain
    outside = overshoot_note(4.95, 3.21, 0.3)
    assert "1.74 ms more than the excess" in outside and "outside the noise band" in outside
    assert "fractions of the attributed time" in outside
    assert "within the noise band" in overshoot_note(3.3, 3.21, 0.3)


def test_advice_and_text_say_attributed_time_when_causes_overshoot():
    from warmprof.traces.advice import advise
    from warmprof.report import CauseEntry, Report

    r = Report(model="M", shape=[1, 8], device="cpu", first_pass_ms=13.21, seen_rerun_ms=10.1, steady_median_ms=10.0,
               noise_band_ms=0.3, excess_ms=3.21, unattributed_ms=-1.74, attributed_ms=4.95,
               causes=[CauseEntry("allocator_growth", 4.71, 4.71 / 4.95, "estimated", "host_faults", "M", count=900),
                       CauseEntry("jit_compile", 0.24, 0.24 / 4.95, "measured", "onednn", "M")])
    (line,) = [a for a in advise(r) if a.startswith("allocator_growth")]
    assert "95% of the attributed time" in line
    row = next(ln for ln in str(r).splitlines() if ln.strip().startswith("unattributed"))
    # no negative figure and no share of a negative residual: "none", with how much the causes overshoot
    assert "none" in row and "1.74 ms more than the excess" in row and "%" not in row and "-1.74" not in row


def _facts(**over):
    from warmprof.report.trace import RunContext
    from warmprof.timeline import Timeline
    from warmprof.traces.build import InstrumentSummary, TraceFacts

    kw = dict(model="M", shape=[1, 8], dtype="float32", device="cpu", compile="default", input_desc="randn [1, 8]",
              first=_att(30.0, 10.0), rerun=PassAttribution(pass_ms=10.5, parts=[], spans=[]),
              steady_ms=[10.0, 10.2, 9.8], steady_faults=[3, 1, 2], timeline=Timeline.empty(),
              instruments=[InstrumentSummary("torch_compile", {"active": True, "compiles": [{}, {}],
                                                               "torch_reported_compile_ms": 38.5,
                                                               "inductor_cache": "miss"}),
                           InstrumentSummary("onednn", {"active": False, "reason": "no oneDNN"}, reason="no oneDNN"),
                           InstrumentSummary("modules", {"active": True}, notes=["only the top-level module"])],
              calibration={"fault_cost_ns": 1000.0}, warm_reasons=[], platform={"cpu": "test cpu"},
              run=RunContext(), created="2025-01-01T00:00:00+00:00")
    kw.update(over)
    return TraceFacts(**kw)


def test_a_report_is_built_from_summarised_instruments_and_given_facts():
    """No live instrument and no platform probe: build_report takes data, and says what it was given."""
    from warmprof.traces.build import IN_PROCESS_NOTE, build_report

    r = build_report(_facts())
    assert r.steady_median_ms == pytest.approx(10.0) and r.excess_ms == pytest.approx(90.0)
    assert r.platform == {"cpu": "test cpu"} and r.counters["steady_faults_median"] == 2
    assert r.instruments["torch_compile"]["torch_reported_compile_ms"] == 38.5
    assert (r.torch_compile.torch_reported_ms, r.torch_compile.compiles, r.torch_compile.inductor_cache) == (38.5, 2, "miss")
    assert "onednn: off (no oneDNN)" in r.notes and "modules: only the top-level module" in r.notes
    assert r.notes[-1] == IN_PROCESS_NOTE  # the caller's process: what ran there before is unknown
    assert not r.protocol.run.fresh_process and r.protocol.run.cache == "in-process (caller's)"
    assert "torch reports 38.5 ms of compile time; 2 compile(s); inductor cache: miss" in str(r)


def test_a_fresh_process_gets_no_in_process_note_and_records_its_caches():
    from warmprof.report.trace import RunContext
    from warmprof.traces.build import IN_PROCESS_NOTE, build_report

    run = RunContext(fresh_process=True, cache="fresh", threads=2, caches={"TMPDIR": "fresh (removed after)"})
    r = build_report(_facts(run=run, instruments=[]))
    assert IN_PROCESS_NOTE not in r.notes
    assert r.torch_compile is None and "torch reports" not in str(r)
    d = r.to_dict()["protocol"]
    assert list(d) == ["input", "steady_ms", "calibration", "runtime_warm", "warm_reasons", "unattributed_within_noise",
                       "attribution_thread_only", "instrumented_steady_ms", "seen_rerun_residual_ms", "oversubscription",
                       "steady_run_delay_ms", "steady_net_median_ms", "recorder",
                       "fresh_process", "cache", "threads", "caches"]
    assert d["fresh_process"] is True and d["threads"] == 2 and d["caches"] == {"TMPDIR": "fresh (removed after)"}


def test_the_first_call_note_does_not_call_a_negative_residual_a_place_for_work():
    from warmprof.traces.build import first_call_residual_note

    positive = first_call_residual_note(2.5, 0.1, 0.3)
    assert "part of the unattributed 2.50 ms, placed by module" in positive
    negative = first_call_residual_note(-0.36, 0.1, 0.3)
    assert "part of the unattributed" not in negative
    assert "causes already add up to 0.36 ms more than the excess they explain" in negative and "-0.36" not in negative

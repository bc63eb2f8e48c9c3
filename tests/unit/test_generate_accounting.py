"""Issue 38: a generate trace's phases each hold one accounting exactly, and its verdict follows its own
headline. On synthetic sections (no model runs):

    headline_excess_ms = attributed_ms + run_to_run_ms + unattributed_ms        (to 0.01 ms)

with the headline the clean call's excess where the control ran (else the instrumented call's less
warmprof's own cost in the phase), run_to_run_ms the clean excess less the instrumented excess less own
cost (0 with no clean control), and unattributed_ms the instrumented excess less own cost less causes.
`--generate 8` once printed "excess 52.9 ms (1.9x steady)" under "no first-call cost at this shape"."""

from __future__ import annotations

import copy

import pytest

from warmprof.traces.generate import (
    FIRST_CALL_COST,
    FIRST_PASS_FASTER,
    NO_FIRST_CALL_COST,
    CallSteps,
    fold_controls,
    headline_verdict,
    section,
)


def _less(entries, booked):
    """fold._less's contract (by (cause, source), never below 0), kept here so the test needs no fold."""
    out = []
    for e in entries:
        took = sum(b["ms"] for b in booked if (b["cause"], b["source"]) == (e.cause, e.source))
        e.ms = max(0.0, e.ms - took)
        if e.ms > 0:
            out.append(e)
    return out


def _cause(cause, ms, source="src"):
    from warmprof.report import CauseEntry

    return CauseEntry(cause=cause, ms=ms, share=0.0, evidence="measured", source=source)


def _call(t0_ms, starts_ms, t1_ms):
    ns = [int(x * 1e6) for x in starts_ms]
    return CallSteps(int(t0_ms * 1e6), int(t1_ms * 1e6), ns, 0, 0, [0] * len(ns))


def _section(causes_by_phase, own_by_phase=None):
    """An instrumented first call (prefill 80 ms, first_decode 10 ms, rest 20 ms) against steady calls
    (prefill about 20, decode 5, rest 10), with the given causes and warmprof's own cost per phase."""
    from warmprof.causes import Name

    first = _call(0, [0, 80, 90, 95], 110)
    steady = [_call(0, [0, 20 + d, 25 + d, 30 + d], 40 + d) for d in (-0.4, -0.2, 0.0, 0.2, 0.4)]
    own_by_phase = own_by_phase or {}

    def causes_of(phase, window, excess):
        got = [_cause(c, ms) for c, ms in causes_by_phase.get(phase, {}).items()]
        if own_by_phase.get(phase):
            got.append(_cause(Name.PROFILER_OVERHEAD, own_by_phase[phase], "hooks"))
        return got

    return section(first, steady, 4, None, True, causes_of, 16)


def _holds(row):
    total = row["attributed_ms"] + row["run_to_run_ms"] + row["unattributed_ms"]
    assert abs(row["headline_excess_ms"] - total) <= 0.01, row
    assert row["attributed_ms"] == pytest.approx(sum(c["ms"] for c in row["causes"]))


def test_without_a_clean_control_each_phase_is_the_instrumented_one_less_own_cost():
    s = _section({"prefill": {"jit_compile": 30.0, "disk_read": 5.0}, "first_decode": {"allocator_growth": 9.0}},
                 own_by_phase={"prefill": 2.0, "rest": 0.5})
    fold_controls(s, None, None, _less)
    rows = {r["phase"]: r for r in s["phases"]}
    for row in rows.values():
        _holds(row)
        assert row["run_to_run_ms"] == 0.0
        assert row["headline_excess_ms"] == pytest.approx(row["excess_ms"] - row["own_cost_ms"])
    pre = rows["prefill"]
    assert pre["excess_ms"] == pytest.approx(60.0) and pre["unattributed_ms"] == pytest.approx(60.0 - 2.0 - 35.0)
    # a phase whose causes pass its excess: a negative unattributed, never a cause cut to fit
    dec = rows["first_decode"]
    assert dec["attributed_ms"] == pytest.approx(9.0) and dec["unattributed_ms"] == pytest.approx(5.0 - 9.0)
    # the TTFT headline is the prefill's, warmprof's own cost out of it
    assert s["ttft"]["excess_ms"] == pytest.approx(pre["headline_excess_ms"]) and s["ttft"]["own_cost_ms"] == 2.0
    for p in ("prefill", "first_decode", "rest"):
        assert {"steady_p10_ms", "steady_p90_ms", "noise_band_ms"} <= set(rows[p])


def test_with_the_clean_control_the_run_to_run_difference_is_its_own_term():
    s = _section({"prefill": {"jit_compile": 30.0}, "first_decode": {"disk_read": 2.0}},
                 own_by_phase={"prefill": 1.0})
    clean = {"phases": [{"phase": "prefill", "first_ms": 45.0, "steady_median_ms": 19.0, "excess_ms": 26.0,
                         "noise_band_ms": 0.5},
                        {"phase": "first_decode", "first_ms": 80.9, "steady_median_ms": 5.0, "excess_ms": 75.9},
                        {"phase": "rest", "first_ms": 10.0, "steady_median_ms": 10.0, "excess_ms": 0.0}]}
    warm = [{"phase": "prefill", "causes": [{"cause": "jit_compile", "source": "src", "ms": 4.0}]}]
    fold_controls(s, clean, warm, _less)
    rows = {r["phase"]: r for r in s["phases"]}
    for row in rows.values():
        _holds(row)
    pre = rows["prefill"]
    # headline 26 = causes 26 (30 less the warm control's 4) + run-to-run (26 - (60 - 1)) + unattributed (59 - 26)
    assert pre["headline_excess_ms"] == 26.0 and pre["attributed_ms"] == pytest.approx(26.0)
    assert pre["run_to_run_ms"] == pytest.approx(26.0 - 59.0) and pre["unattributed_ms"] == pytest.approx(33.0)
    dec = rows["first_decode"]
    assert dec["run_to_run_ms"] == pytest.approx(75.9 - 5.0) and dec["unattributed_ms"] == pytest.approx(3.0)
    assert s["ttft"]["source"] == "clean" and s["ttft"]["excess_ms"] == 26.0
    assert pre["clean"]["noise_band_ms"] == 0.5
    # folded again (a loaded report re-rendered, or the fold run twice): the same figures
    again = copy.deepcopy(s)
    fold_controls(again, clean, None, _less)
    assert [r["unattributed_ms"] for r in again["phases"]] == pytest.approx([r["unattributed_ms"] for r in s["phases"]])


def test_a_warm_control_phase_with_its_first_call_measures_warmprofs_own_cost():
    s = _section({"prefill": {"jit_compile": 30.0}}, own_by_phase={"prefill": 1.0})
    clean = {"phases": [{"phase": "prefill", "first_ms": 50.0, "steady_median_ms": 20.0, "excess_ms": 30.0}]}
    fold_controls(s, clean, [{"phase": "prefill", "causes": [], "first_ms": 24.0}], _less)
    pre = s["phases"][0]
    assert pre["own_cost_ms"] == pytest.approx(4.0) and pre["own_cost_estimated_ms"] == 1.0
    _holds(pre)
    assert pre["unattributed_ms"] == pytest.approx(60.0 - 4.0 - 30.0)


def _verdict_section(excess, band, source="clean"):
    return {"ttft": {"first_ms": 20.0 + excess, "steady_median_ms": 20.0, "excess_ms": excess, "source": source},
            "phases": [{"phase": "prefill", "noise_band_ms": 99.0, "headline_excess_ms": excess,
                        "clean": {"first_ms": 20.0 + excess, "steady_median_ms": 20.0, "excess_ms": excess,
                                  "noise_band_ms": band}}]}


@pytest.mark.parametrize("excess, band, want", [
    (52.9, 3.0, FIRST_CALL_COST),  # the issue's: an excess outside the band is a first-call cost
    (2.0, 3.0, NO_FIRST_CALL_COST),
    (-2.0, 3.0, NO_FIRST_CALL_COST),
    (-5.0, 3.0, FIRST_PASS_FASTER),
    (0.0, 0.0, NO_FIRST_CALL_COST),
])
def test_the_verdict_follows_the_ttft_headline_against_the_prefill_noise_band(excess, band, want):
    assert headline_verdict(_verdict_section(excess, band)) == want


def test_without_the_control_the_instrumented_prefill_band_is_the_one():
    s = _verdict_section(50.0, 0.1, source="instrumented")
    del s["phases"][0]["clean"]
    assert headline_verdict(s) == NO_FIRST_CALL_COST  # the instrumented prefill's band is 99 ms here
    s["phases"][0]["noise_band_ms"] = 10.0
    assert headline_verdict(s) == FIRST_CALL_COST
    s = _section({"prefill": {"jit_compile": 30.0}})
    fold_controls(s, None, None, _less)
    assert headline_verdict(s) == FIRST_CALL_COST  # 60 ms over a prefill steady band under 1 ms


def _text(section_):
    from factories import trace_report

    r = trace_report({"jit_compile": 10.0})
    r.generate = section_
    return str(r)


def test_the_phase_rows_say_run_to_run_signed_and_never_a_negative_cost():
    s = _section({"prefill": {"jit_compile": 30.0}, "first_decode": {"disk_read": 9.0}})
    clean = {"phases": [{"phase": "prefill", "first_ms": 45.0, "steady_median_ms": 19.0, "excess_ms": 26.0},
                        {"phase": "first_decode", "first_ms": 4.0, "steady_median_ms": 5.0, "excess_ms": -1.0},
                        {"phase": "rest", "first_ms": 10.0, "steady_median_ms": 10.0, "excess_ms": 0.0}]}
    fold_controls(s, clean, None, _less)
    lines = _text(s).splitlines()
    pre = next(line for line in lines if "prefill (TTFT)" in line)
    dec = next(line for line in lines if line.strip().startswith("first_decode"))
    assert "jit_compile 30.0 ms" in pre and "run-to-run -34.0 ms" in pre and "unattributed 30.0 ms" in pre
    assert "none measurable" in dec and "unattributed none" in dec and "run-to-run -6.00 ms" in dec
    assert any("a difference between the two processes, not a cost" in line for line in lines)
    assert not any("unattributed -" in line for line in lines)
    ttft = next(line for line in lines if "time to first token" in line)
    assert "excess 26.0 ms" in ttft
    s["ttft"]["excess_ms"] = -3.0
    assert "excess none measurable" in next(line for line in _text(s).splitlines() if "time to first token" in line)


def test_a_section_with_its_accounting_saves_and_loads():
    from warmprof.report import Report

    s = _section({"prefill": {"jit_compile": 30.0}})
    fold_controls(s, {"phases": [{"phase": "prefill", "first_ms": 45.0, "steady_median_ms": 19.0, "excess_ms": 26.0,
                                  "steady_p10_ms": 18.9, "steady_p90_ms": 19.4, "noise_band_ms": 0.5}]}, None, _less)
    from factories import trace_report

    r = trace_report({"jit_compile": 10.0})
    r.generate = s
    back = Report.from_json(r.to_json())
    assert back.generate == s
    for row in back.generate["phases"]:
        _holds(row)

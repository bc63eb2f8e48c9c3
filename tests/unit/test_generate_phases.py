"""traces/generate.py's phase arithmetic on synthetic step stamps (no model runs): the windows tile
the call, each phase's faults are its own, and a call that never reached a decode step is all prefill."""

from __future__ import annotations

import pytest

from warmprof.traces.generate import CallSteps, fold_controls, phase_figures, settle


def _call(t0, starts, t1, faults=None):
    faults = faults or [10 * (i + 1) for i in range(len(starts))]
    return CallSteps(t0, t1, list(starts), 0, 100, faults)


def test_windows_tile_the_call_and_split_at_the_second_and_third_forward():
    c = _call(0, [1_000_000, 5_000_000, 6_000_000, 7_000_000], 9_000_000)
    assert c.windows() == {"prefill": (0, 5_000_000), "first_decode": (5_000_000, 6_000_000), "rest": (6_000_000, 9_000_000)}
    assert c.phase_ms() == {"prefill": 5.0, "first_decode": 1.0, "rest": 3.0}
    assert sum(c.phase_ms().values()) == pytest.approx((c.t1 - c.t0) / 1e6)
    assert c.forwards() == {"prefill": 1, "first_decode": 1, "rest": 2}
    # faults at the boundaries: 0 at the start, 20 at the second forward, 30 at the third, 100 at the end
    assert c.phase_faults() == {"prefill": 20, "first_decode": 10, "rest": 70}


@pytest.mark.parametrize("starts, phases", [([], ["prefill"]), ([100], ["prefill"]), ([100, 200], ["prefill", "first_decode"])])
def test_a_call_with_few_forwards_has_only_the_phases_it_reached(starts, phases):
    c = _call(0, starts, 1000)
    assert list(c.windows()) == phases
    assert sum(c.phase_ms().values()) == pytest.approx(1000 / 1e6)
    assert sum(c.phase_faults().values()) == 100


def test_each_phase_is_set_against_its_own_steady_median():
    first = _call(0, [0, 8_000_000, 9_000_000, 10_000_000], 12_000_000)
    steady = [_call(0, [0, 2_000_000 + d, 3_000_000 + d, 4_000_000 + d], 6_000_000 + d) for d in (0, 100_000, 200_000)]
    rows = {r["phase"]: r for r in phase_figures(first, steady)}
    assert rows["prefill"]["first_ms"] == 8.0 and rows["prefill"]["steady_median_ms"] == pytest.approx(2.1)
    assert rows["first_decode"]["excess_ms"] == pytest.approx(0.0)
    assert rows["rest"]["steady_calls"] == 3


def test_the_clean_call_is_the_headline_and_the_warm_controls_causes_come_off():
    from warmprof.traces.fold import _less

    row = {"phase": "prefill", "first_ms": 9.0, "steady_median_ms": 2.0, "excess_ms": 7.0, "own_cost_ms": 0.5,
           "causes": [{"cause": "disk_read", "ms": 4.0, "share": 0.0, "evidence": "measured", "source": "storage",
                       "module": "", "count": 1, "detail": ""}]}
    settle(row)
    assert row["unattributed_ms"] == pytest.approx(7.0 - 0.5 - 4.0)
    section = {"ttft": {"first_ms": 9.0, "steady_median_ms": 2.0, "excess_ms": 7.0, "source": "instrumented"},
               "phases": [row]}
    clean = {"phases": [{"phase": "prefill", "first_ms": 6.0, "steady_median_ms": 2.0, "excess_ms": 4.0}]}
    warm = [{"phase": "prefill", "causes": [{"cause": "disk_read", "source": "storage", "ms": 1.0}]}]
    fold_controls(section, clean, warm, _less)
    assert section["ttft"]["source"] == "clean" and section["ttft"]["first_ms"] == 6.0
    assert section["ttft"]["instrumented_first_ms"] == 9.0
    (c,) = row["causes"]
    assert c["ms"] == pytest.approx(3.0) and "warm control" in c["detail"]
    # issue 38's one accounting: the clean headline (4) = causes (3) + run-to-run (4 less the instrumented
    # 7 less own 0.5) + unattributed (the instrumented 6.5 less the causes), never the clean excess less causes
    assert row["unattributed_ms"] == pytest.approx(7.0 - 0.5 - 3.0)
    assert row["run_to_run_ms"] == pytest.approx(4.0 - 6.5) and row["headline_excess_ms"] == 4.0

"""The op view in attribution: unexplained time by (module, op) site on synthetic timelines."""

import pytest

from warmprof.attribution import Calibration, attribute_pass, unattributed_sites
from warmprof.timeline import JIT_COMPILE, STRUCTURE

from test_attribution import MS, TL


def _pass(name, addmm_ms, gelu_ms, code_ms, faults=0):
    """Module M: 5 ms of its own code (+code_ms), op addmm (10 ms + addmm_ms, 4 ms of which an oneDNN
    span), op gelu twice (3 ms each, the first + gelu_ms), then module N with one relu (2 ms)."""
    tl = TL()
    t = 0.0
    end_m = 5 + code_ms + 10 + addmm_ms + 6 + gelu_ms
    tl.span(STRUCTURE, f"pass:{name}", 0, end_m + 2)
    tl.span(STRUCTURE, "module:M", 0, end_m)
    t = 5 + code_ms
    tl.span(STRUCTURE, "op:aten.addmm.default", t, t + 10 + addmm_ms)
    tl.span(JIT_COMPILE, "onednn:matmul", t + 1, t + 5)
    t += 10 + addmm_ms
    tl.span(STRUCTURE, "op:aten.gelu.default", t, t + 3 + gelu_ms)
    t += 3 + gelu_ms
    tl.span(STRUCTURE, "op:aten.gelu.default", t, t + 3)
    tl.span(STRUCTURE, "module:N", end_m, end_m + 2).span(STRUCTURE, "op:aten.relu.default", end_m, end_m + 2)
    tl.counter("host:minor_faults", 0, 0).counter("host:major_faults", 0, 0)
    tl.counter("host:minor_faults", end_m, faults).counter("host:major_faults", end_m, 0)
    return attribute_pass(tl.build(), name, calibration=Calibration(fault_cost_ns=0.01 * MS))


def test_free_time_is_placed_by_module_and_op():
    first = _pass("first", addmm_ms=0, gelu_ms=0, code_ms=0)
    by_site = {k: v / MS for k, v in first.unexplained_by_site.items()}
    assert by_site == {("M", ""): pytest.approx(5.0), ("M", "aten.addmm.default"): pytest.approx(6.0),
                       ("M", "aten.gelu.default"): pytest.approx(6.0), ("N", "aten.relu.default"): pytest.approx(2.0)}
    # each site's first call (index in call order) and its calls
    assert first.op_sites == {("M", "aten.addmm.default"): (0, 1), ("M", "aten.gelu.default"): (1, 2),
                              ("N", "aten.relu.default"): (3, 1)}
    assert first.op_calls == 4


def test_sites_give_the_first_pass_excess_over_the_rerun():
    first = _pass("first", addmm_ms=3, gelu_ms=2, code_ms=1)
    rerun = _pass("seen_rerun", addmm_ms=0, gelu_ms=0, code_ms=0)
    rows = unattributed_sites(first, rerun)
    assert rows == [("M", "aten.addmm.default", pytest.approx(3.0)), ("M", "aten.gelu.default", pytest.approx(2.0)),
                    ("M", "", pytest.approx(1.0))]
    assert sum(ms for *_, ms in rows) == pytest.approx(first.pass_ms - rerun.pass_ms)


def test_an_estimate_placed_in_a_module_is_taken_from_its_sites_by_their_free_time():
    # 300 faults x 0.01 ms = 3 ms of allocator_growth estimated in M, spread over M's sites
    first = _pass("first", addmm_ms=0, gelu_ms=0, code_ms=0, faults=300)
    total_free_m = 5 + 6 + 6
    for site, free in ((("M", ""), 5), (("M", "aten.addmm.default"), 6), (("M", "aten.gelu.default"), 6)):
        assert first.unexplained_by_site[site] / MS == pytest.approx(free - 3.0 * free / total_free_m)
    assert first.unexplained_by_site[("N", "aten.relu.default")] / MS == pytest.approx(2.0)


def test_no_op_spans_no_sites():
    tl = TL().span(STRUCTURE, "pass:first", 0, 10).span(STRUCTURE, "module:M", 0, 10).build()
    att = attribute_pass(tl, "first")
    assert att.unexplained_by_site == {} and att.op_sites == {} and att.op_calls == 0
    assert unattributed_sites(att, att) == []


def test_the_op_views_first_dispatch_is_estimated_once_per_distinct_op_in_the_first_pass_only():
    def run(name):
        tl = TL()
        tl.span(STRUCTURE, f"pass:{name}", 0, 20).span(STRUCTURE, "module:M", 0, 20)
        for k, op in enumerate(("aten.addmm.default", "aten.gelu.default", "aten.addmm.default")):
            tl.span(STRUCTURE, f"op:{op}", 2 + 5 * k, 4 + 5 * k)
        return attribute_pass(tl.build(), name, calibration=Calibration(op_view_cold_ns=0.02 * MS))

    first = {(p.cause, p.source): p for p in run("first").parts}
    p = first[("profiler_overhead", "op_view")]
    assert (p.count, p.evidence) == (2, "estimated") and p.ms == pytest.approx(0.04)
    assert p.by_module == {"M": pytest.approx(0.04 * MS)}
    assert ("profiler_overhead", "op_view") not in {(q.cause, q.source) for q in run("seen_rerun").parts}

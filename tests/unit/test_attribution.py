"""Attribution on synthetic timelines: nesting, overlap, counters, residual, empty input."""

import pytest

from warmprof.attribution import Calibration, Figure, attribute_pass, build_spans, steady_stats, summarize
from warmprof.timeline import (
    BEGIN, COUNTER, END, JIT_COMPILE, RUNTIME_INIT, STRUCTURE, Timeline,
)

MS = 1_000_000


class TL:
    """Builds a synthetic timeline: spans by name, counters by name, ms timestamps."""

    def __init__(self):
        self.names: list[str] = []
        self.records: list[tuple] = []

    def nid(self, name):
        if name not in self.names:
            self.names.append(name)
        return self.names.index(name)

    def span(self, cause, name, t0_ms, t1_ms, thread=0):
        self.records.append((int(t0_ms * MS), BEGIN, cause, self.nid(name), 0, thread))
        self.records.append((int(t1_ms * MS), END, cause, self.nid(name), 0, thread))
        return self

    def counter(self, name, t_ms, value, thread=0):
        self.records.append((int(t_ms * MS), COUNTER, STRUCTURE, self.nid(name), value, thread))
        return self

    def build(self):
        return Timeline.from_records(self.records, self.names)


def parts(att):
    return {(p.cause, p.source): round(p.ms, 6) for p in att.parts}


def test_nested_causes_are_never_double_counted():
    # compile (0-100) holds a oneDNN create (20-30) inside a module inside another module.
    tl = (TL().span(STRUCTURE, "pass:first", 0, 120)
          .span(STRUCTURE, "module:M", 0, 110).span(STRUCTURE, "module:M.inner", 5, 105)
          .span(JIT_COMPILE, "torch.compile:compile", 10, 100)
          .span(JIT_COMPILE, "onednn:convolution", 20, 30).build())
    att = attribute_pass(tl, "first")
    assert parts(att) == {("jit_compile", "torch.compile"): 80.0, ("jit_compile", "onednn"): 10.0}
    assert att.attributed_ms == pytest.approx(90.0)
    assert att.pass_ms == pytest.approx(120.0)
    # all of it happened in the innermost module
    assert att.by_module() == {"M.inner": {"jit_compile": pytest.approx(90.0)}}


def test_overlapping_spans_go_to_the_latest_start():
    # Not properly nested: A 0-50, B 40-80. 40-50 belongs to B (innermost = latest start).
    tl = (TL().span(STRUCTURE, "pass:first", 0, 100)
          .span(JIT_COMPILE, "a:x", 0, 50).span(RUNTIME_INIT, "b:y", 40, 80).build())
    att = attribute_pass(tl, "first")
    assert parts(att) == {("jit_compile", "a"): 40.0, ("runtime_init", "b"): 40.0}
    assert att.attributed_ms <= att.pass_ms


def test_other_threads_are_not_counted_in_the_pass():
    tl = (TL().span(STRUCTURE, "pass:first", 0, 100)
          .span(JIT_COMPILE, "a:main", 10, 20)
          .span(JIT_COMPILE, "a:worker", 0, 90, thread=1).build())
    att = attribute_pass(tl, "first")
    assert parts(att) == {("jit_compile", "a"): 10.0}
    assert att.off_thread_ms == pytest.approx(90.0)


def test_faults_inside_a_cause_belong_to_it_and_outside_become_an_estimate():
    tl = (TL().span(STRUCTURE, "pass:first", 0, 100)
          .span(STRUCTURE, "module:M", 0, 100)
          .span(JIT_COMPILE, "torch.compile:compile", 10, 50)
          .counter("host:minor_faults", 0, 1000).counter("host:major_faults", 0, 0)
          .counter("host:minor_faults", 10, 1000)
          .counter("host:minor_faults", 50, 5000)   # 4000 faults inside the compile span
          .counter("host:minor_faults", 90, 5300)   # 300 faults outside any cause
          .build())
    cal = Calibration(fault_cost_ns=1000.0)
    att = attribute_pass(tl, "first", calibration=cal, steady_faults=100)
    p = {(x.cause, x.source): x for x in att.parts}
    est = p[("allocator_growth", "host_faults")]
    assert est.evidence == "estimated"
    assert est.count == 200  # 300 outside causes minus 100 a steady pass also takes
    assert est.ms == pytest.approx(200 * 1000 / 1e6)
    assert est.top_module == "M"
    assert att.faults == 4300 and att.faults_outside_causes == 300
    assert p[("jit_compile", "torch.compile")].ms == pytest.approx(40.0)


def test_new_threads_outside_causes_are_runtime_init_estimates():
    tl = (TL().span(STRUCTURE, "pass:first", 0, 100).span(STRUCTURE, "module:Pool", 0, 100)
          .counter("host:threads", 1, 1).counter("host:threads", 60, 3).build())
    att = attribute_pass(tl, "first", calibration=Calibration(thread_start_ns=50_000))
    p = {(x.cause, x.source): x for x in att.parts}
    assert p[("runtime_init", "thread_pool")].count == 2
    assert p[("runtime_init", "thread_pool")].ms == pytest.approx(0.1)
    assert att.new_threads == 2


def test_unclosed_span_is_closed_at_the_window_end():
    t = TL().span(STRUCTURE, "pass:first", 0, 100)
    t.records.append((10 * MS, BEGIN, JIT_COMPILE, t.nid("x:open"), 0, 0))
    spans = build_spans(t.build())
    open_span = [s for s in spans if s.name == "x:open"][0]
    assert not open_span.closed and open_span.end_ns == 100 * MS


def test_empty_timeline_and_missing_pass():
    att = attribute_pass(Timeline.empty(), "first")
    assert att.parts == [] and att.pass_ms == 0.0
    assert build_spans(Timeline.empty()) == []


def test_negative_residual_within_noise_is_flagged_as_within():
    s = summarize(first_pass_ms=100.0, steady_median_ms=95.0, noise_band_ms=10.0, attributed_ms=8.0)
    assert s.excess_ms == pytest.approx(5.0)
    assert s.unattributed_ms == pytest.approx(-3.0)
    assert s.within_noise
    s2 = summarize(first_pass_ms=100.0, steady_median_ms=10.0, noise_band_ms=1.0, attributed_ms=50.0)
    assert s2.unattributed_ms == pytest.approx(40.0) and not s2.within_noise


def test_steady_stats_band_and_median():
    st = steady_stats([10.0, 11.0, 9.0, 10.5, 30.0])
    assert st.median == pytest.approx(10.5)
    assert st.p10 <= st.median <= st.p90
    assert st.noise_band >= st.p90 - st.p10 - 1e-9
    assert steady_stats([]).n == 0


def test_extra_inferred_figures_are_added_as_given():
    tl = TL().span(STRUCTURE, "pass:first", 0, 100).build()
    att = attribute_pass(tl, "first", inferred=[Figure("clock_ramp", "clock:nvml", 3.0)])
    (p,) = att.parts
    assert (p.cause, p.source, p.evidence) == ("clock_ramp", "clock:nvml", "inferred")
    assert p.ms == pytest.approx(3.0)


def _pass(name, attn_ms, head_ms, faults_in_head=0):
    """Module A (50 + attn ms, plus a 10 ms compile inside), then module H (50 + head ms), which may fault."""
    a_end = 60 + attn_ms
    end = a_end + 50 + head_ms
    tl = (TL().span(STRUCTURE, f"pass:{name}", 0, end)
          .span(STRUCTURE, "module:A", 0, a_end).span(JIT_COMPILE, "onednn:create", 5, 15)
          .span(STRUCTURE, "module:H", a_end, end)
          .counter("host:minor_faults", a_end, 0).counter("host:major_faults", a_end, 0)
          .counter("host:minor_faults", end, faults_in_head).counter("host:major_faults", end, 0))
    return attribute_pass(tl.build(), name, calibration=Calibration(fault_cost_ns=0.01 * MS))


def test_unexplained_time_is_found_by_module_against_the_seen_rerun():
    from warmprof.attribution import unattributed_where

    # First pass: A takes 7 ms more than in the re-run (besides its compile), H 3 ms more, of
    # which 2 ms are 200 faults x 0.01 ms (an estimate): 1 ms of H stays unexplained.
    first = _pass("first", attn_ms=7.0, head_ms=3.0, faults_in_head=200)
    rerun = attribute_pass(_pass_tl_rerun(), "seen_rerun", calibration=Calibration(fault_cost_ns=0.01 * MS))
    assert first.unexplained_by_module["A"] == pytest.approx((60 + 7 - 10) * MS)
    assert first.unexplained_by_module["H"] == pytest.approx((50 + 3 - 2) * MS)
    where = dict(unattributed_where(first, rerun))
    assert where == {"A": pytest.approx(7.0), "H": pytest.approx(1.0)}
    assert [m for m, _ in unattributed_where(first, rerun)] == ["A", "H"]  # largest first
    assert unattributed_where(first, rerun, top=1) == [("A", pytest.approx(7.0))]


def _pass_tl_rerun():
    # The re-run: same modules, no compile, no faults.
    return (TL().span(STRUCTURE, "pass:seen_rerun", 0, 100)
            .span(STRUCTURE, "module:A", 0, 50).span(STRUCTURE, "module:H", 50, 100).build())


def test_nothing_unexplained_when_the_first_pass_matches_the_rerun():
    from warmprof.attribution import unattributed_where

    rerun = attribute_pass(_pass_tl_rerun(), "seen_rerun")
    again = attribute_pass(_pass_tl_rerun(), "seen_rerun")
    assert unattributed_where(again, rerun) == []
    assert unattributed_where(attribute_pass(TL().build(), "first"), rerun) == []  # an empty timeline


def test_module_calls_times_the_calibrated_hook_cost_is_estimated_profiler_overhead():
    tl = (TL().span(STRUCTURE, "pass:first", 0, 100)
          .span(STRUCTURE, "module:M", 0, 90).span(STRUCTURE, "module:M.a", 10, 20).span(STRUCTURE, "module:M.a", 30, 40)
          .span(STRUCTURE, "module:M.b", 50, 60).span(JIT_COMPILE, "onednn:create", 52, 58)
          .span(STRUCTURE, "module:other_thread", 0, 50, thread=1).build())
    att = attribute_pass(tl, "first", calibration=Calibration(hook_cost_ns=0.002 * MS))
    (p,) = [p for p in att.parts if p.cause == "profiler_overhead"]
    assert (p.source, p.evidence, p.count) == ("module_hooks", "estimated", 4)  # 4 calls on the pass thread
    assert p.ms == pytest.approx(0.008)
    assert p.by_module == {"M": pytest.approx(0.002 * MS), "M.a": pytest.approx(0.004 * MS), "M.b": pytest.approx(0.002 * MS)}
    assert not [p for p in attribute_pass(tl, "first").parts if p.cause == "profiler_overhead"]  # no calibration, no estimate


def test_a_collection_is_its_own_cause_but_inside_a_compile_it_stays_the_compiles():
    """A garbage collection is the innermost span where it lands (garbage_collection, measured), but one
    inside a compile span stays the compile's time, as the compiler's imports do (torch's compile timers
    count it too)."""
    from warmprof.causes import GARBAGE_COLLECTION

    tl = (TL().span(STRUCTURE, "pass:first", 0, 100)
          .span(STRUCTURE, "module:M", 0, 100)
          .span(GARBAGE_COLLECTION, "gc:gen2", 5, 9)     # in the module: its own cause
          .span(JIT_COMPILE, "torch.compile:compile", 10, 50)
          .span(GARBAGE_COLLECTION, "gc:gen1", 20, 30)   # inside the compile: the compile's
          .build())
    att = attribute_pass(tl, "first")
    assert parts(att) == {("garbage_collection", "gc"): 4.0, ("jit_compile", "torch.compile"): 40.0}

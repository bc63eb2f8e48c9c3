"""Each attribution estimator on a hand-built PassContext, the context built from a timeline, and
the loop in attribute_pass (the one place estimators run; an appended estimator is all it takes)."""

import pytest

from warmprof.attribution import (
    ESTIMATORS, Calibration, CounterStep, Figure, InstrumentCost, Part, PassContext, SpanRec, attribute_pass, build_context,
    cause_spans, cupti_callback_cost, host_faults, inferred_figures, instrument_cost, module_hook_cost, thread_starts,
)
from warmprof.timeline import BEGIN, COUNTER, CUPTI_CALLBACKS, END, JIT_COMPILE, RUNTIME_INIT, STRUCTURE, Timeline

MS = 1_000_000


def span(name, t0_ms, t1_ms, cause=STRUCTURE, depth=0):
    return SpanRec(name, cause, int(t0_ms * MS), int(t1_ms * MS), 0, depth)


PASS = span("pass:first", 0, 100)
M, M_A = span("module:M", 0, 90), span("module:M.a", 60, 70, depth=1)
COMPILE = span("torch.compile:compile", 10, 70, JIT_COMPILE, depth=1)
ONEDNN = span("onednn:convolution", 50, 60, JIT_COMPILE, depth=2)


def context(**fields) -> PassContext:
    return PassContext(pass_span=PASS, **{"spans": (), "segments": (), **fields})


def by_key(parts):
    return {(p.cause, p.source): p for p in parts}


def test_cause_spans_gives_each_segment_to_its_innermost_cause_span():
    segments = (
        (0, 10 * MS, None, M, "M", ""),
        (10 * MS, 50 * MS, COMPILE, M, "M", ""),
        (50 * MS, 60 * MS, ONEDNN, M, "M", ""),
        (60 * MS, 70 * MS, COMPILE, M_A, "M.a", ""),
        (70 * MS, 100 * MS, None, None, "", ""),
    )
    parts = by_key(cause_spans(context(segments=segments, evidence={"onednn": "inferred"})))
    assert set(parts) == {("jit_compile", "torch.compile"), ("jit_compile", "onednn")}
    compile_part = parts[("jit_compile", "torch.compile")]
    assert (compile_part.evidence, compile_part.count, compile_part.ns) == ("measured", 1, 50 * MS)
    assert compile_part.by_module == {"M": 40 * MS, "M.a": 10 * MS}
    onednn_part = parts[("jit_compile", "onednn")]
    assert (onednn_part.evidence, onednn_part.count, onednn_part.by_module) == ("inferred", 1, {"M": 10 * MS})
    assert cause_spans(context(segments=((0, 100 * MS, None, None, "", ""),))) == []


def test_host_faults_estimates_only_faults_outside_causes_less_steady_and_own():
    steps = (
        CounterStep(10 * MS, 50 * MS, 4000, COMPILE, "M"),  # inside the compile: the compile's
        CounterStep(70 * MS, 80 * MS, 300, None, "M"),
        CounterStep(80 * MS, 90 * MS, 100, None, ""),
    )
    ctx = context(fault_steps=steps, steady_faults=100, own_faults=50, calibration=Calibration(fault_cost_ns=1000.0))
    (p,) = host_faults(ctx)
    # 400 outside causes - 100 steady - 50 warmprof's own = 250, spread 3:1 over M and "".
    assert (p.cause, p.source, p.evidence, p.count) == ("allocator_growth", "host_faults", "estimated", 250)
    assert p.ns == pytest.approx(250 * 1000.0)
    assert p.by_module == {"M": pytest.approx(187.5 * 1000.0), "": pytest.approx(62.5 * 1000.0)}
    assert host_faults(context(fault_steps=steps, steady_faults=100)) == []  # no calibrated cost
    assert host_faults(context(fault_steps=steps, steady_faults=400, calibration=Calibration(fault_cost_ns=1.0))) == []


def test_thread_starts_counts_new_threads_outside_causes():
    steps = (
        CounterStep(1 * MS, 60 * MS, 2, None, "Pool"),
        CounterStep(60 * MS, 61 * MS, 1, COMPILE, "Pool"),  # started by the compile: its time
        CounterStep(61 * MS, 70 * MS, -1, None, "Pool"),  # a thread ended
    )
    (p,) = thread_starts(context(thread_steps=steps, calibration=Calibration(thread_start_ns=50_000)))
    assert (p.cause, p.source, p.evidence, p.count) == ("runtime_init", "thread_pool", "estimated", 2)
    assert p.by_module == {"Pool": 100_000}
    assert thread_starts(context(thread_steps=steps)) == []  # no calibrated cost
    assert thread_starts(context(thread_steps=steps[1:], calibration=Calibration(thread_start_ns=1.0))) == []


def test_module_hook_cost_is_module_calls_times_the_hook_cost():
    spans = (M, span("module:M.a", 10, 20, depth=1), M_A, span("module:M.b", 50, 60, depth=1),
             span("onednn:create", 52, 58, JIT_COMPILE, depth=2))
    (p,) = module_hook_cost(context(spans=spans, calibration=Calibration(hook_cost_ns=2000.0)))
    assert (p.cause, p.source, p.evidence, p.count) == ("profiler_overhead", "module_hooks", "estimated", 4)
    assert p.by_module == {"M": 2000.0, "M.a": 4000.0, "M.b": 2000.0} and p.ns == 8000.0
    assert module_hook_cost(context(spans=spans)) == []  # no calibrated cost
    assert module_hook_cost(context(spans=spans[-1:], calibration=Calibration(hook_cost_ns=1.0))) == []


def _callback_samples(*samples):
    """A timeline holding only "cupti:callbacks" counter samples: (t_ms, cumulative callbacks)."""
    return Timeline.from_records([(int(t * MS), COUNTER, STRUCTURE, 0, v) for t, v in samples], [CUPTI_CALLBACKS])


def test_cupti_callback_cost_is_the_pass_callbacks_times_the_handler_cost():
    # Sampled before the pass starts and after it ends (the instrument's mark_pass / end_pass), then
    # again around the next pass, whose callbacks are not this pass's.
    tl = _callback_samples((-0.5, 500), (100.5, 2500), (150, 2600), (300, 9000))
    (p,) = cupti_callback_cost(context(timeline=tl, calibration=Calibration(cupti_handler_ns=30.0)))
    assert (p.cause, p.source, p.evidence, p.count) == ("profiler_overhead", "cupti_callbacks", "estimated", 2000)
    assert p.ns == pytest.approx(2000 * 30.0) and p.by_module == {"": pytest.approx(60_000.0)}
    assert "CUPTI's own dispatch" in p.detail and "not included" in p.detail  # the handler's cost only
    assert cupti_callback_cost(context(timeline=tl)) == []  # no calibrated cost
    one_sample = context(timeline=_callback_samples((-1, 5)), calibration=Calibration(cupti_handler_ns=1.0))
    assert cupti_callback_cost(one_sample) == []
    assert cupti_callback_cost(context(calibration=Calibration(cupti_handler_ns=1.0))) == []  # no timeline
    assert cupti_callback_cost in ESTIMATORS


def test_cupti_callback_cost_takes_samples_inside_the_pass_when_none_lie_outside():
    tl = _callback_samples((10, 100), (90, 400))
    (p,) = cupti_callback_cost(context(timeline=tl, calibration=Calibration(cupti_handler_ns=10.0)))
    assert p.count == 300


def test_cupti_callback_cost_goes_through_attribute_pass_as_profiler_overhead():
    names = ["pass:first", CUPTI_CALLBACKS]
    recs = [(0, BEGIN, STRUCTURE, 0, 0, 0), (100 * MS, END, STRUCTURE, 0, 0, 0),
            (0, COUNTER, STRUCTURE, 1, 1000, 0), (100 * MS, COUNTER, STRUCTURE, 1, 101_000, 0)]
    att = attribute_pass(Timeline.from_records(recs, names), "first", calibration=Calibration(cupti_handler_ns=50.0))
    p = by_key(att.parts)[("profiler_overhead", "cupti_callbacks")]
    assert (p.count, p.ms) == (100_000, pytest.approx(5.0))
    assert att.unexplained_by_module == {"": pytest.approx(95 * MS)}  # an estimate: it leaves free time


def test_cause_spans_says_when_a_module_load_sits_inside_a_compile_span():
    """Triton loads the cubin it built inside inductor's compile: the load's time is runtime_init
    (innermost wins), and the part says so."""
    compile_span = span("torch.compile:compile", 10, 70, JIT_COMPILE, depth=1)
    load = span("cupti:cuModuleLoadData", 30, 40, RUNTIME_INIT, depth=2)
    lazy = span("cupti:lazy_load", 80, 90, RUNTIME_INIT, depth=1)  # outside the compile: not counted
    segments = ((0, 10 * MS, None, None, "", ""), (10 * MS, 30 * MS, compile_span, None, "", ""),
                (30 * MS, 40 * MS, load, None, "", ""), (40 * MS, 70 * MS, compile_span, None, "", ""),
                (70 * MS, 80 * MS, None, None, "", ""), (80 * MS, 90 * MS, lazy, None, "", ""),
                (90 * MS, 100 * MS, None, None, "", ""))
    parts = by_key(cause_spans(context(spans=(compile_span, load, lazy), segments=segments)))
    cupti = parts[("runtime_init", "cupti")]
    assert cupti.ns == 20 * MS and "1 module load inside a compile span" in cupti.detail
    assert "innermost span wins" in cupti.detail and "runtime_init" in cupti.detail
    assert parts[("jit_compile", "torch.compile")].detail == ""
    alone = by_key(cause_spans(context(spans=(load,), segments=((30 * MS, 40 * MS, load, None, "", ""),))))
    assert alone[("runtime_init", "cupti")].detail == ""


def test_inferred_figures_are_added_as_given():
    inferred = (Figure("clock_ramp", "clock:nvml", 3.0), Figure("clock_ramp", "clock:nvml", 1.0, module="M", count=2),
                Figure("data_transfer", "uvm", 0.5, evidence="estimated"))
    parts = by_key(inferred_figures(context(inferred=inferred)))
    ramp = parts[("clock_ramp", "clock:nvml")]
    assert (ramp.evidence, ramp.count, ramp.ns, ramp.by_module) == ("inferred", 3, 4.0 * MS, {"": 3.0 * MS, "M": 1.0 * MS})
    assert parts[("data_transfer", "uvm")].evidence == "estimated"


def _timeline():
    """Pass 0-100 ms on thread 0: module M 0-90 holding a compile 10-50; a worker thread's compile
    0-30; fault samples at 0, 10, 50 (4000 inside the compile) and 90 (300 outside)."""
    names = ["pass:first", "module:M", "torch.compile:compile", "host:minor_faults", "host:major_faults", "w:x"]
    recs = [(0, BEGIN, STRUCTURE, 0, 0, 0), (100 * MS, END, STRUCTURE, 0, 0, 0),
            (0, BEGIN, STRUCTURE, 1, 0, 0), (90 * MS, END, STRUCTURE, 1, 0, 0),
            (10 * MS, BEGIN, JIT_COMPILE, 2, 0, 0), (50 * MS, END, JIT_COMPILE, 2, 0, 0),
            (0, BEGIN, JIT_COMPILE, 5, 0, 1), (30 * MS, END, JIT_COMPILE, 5, 0, 1)]
    for t, minor in ((0, 1000), (10, 1000), (50, 5000), (90, 5300)):
        recs += [(t * MS, COUNTER, STRUCTURE, 3, minor, 0), (t * MS, COUNTER, STRUCTURE, 4, 0, 0)]
    return Timeline.from_records(recs, names)


def test_the_context_places_counter_steps_under_the_cause_span_covering_them():
    import numpy as np

    tl = _timeline()
    tl.own_fault_ns = np.array([5 * MS, 200 * MS], dtype=np.int64)  # one inside the pass
    ctx = build_context(tl, "first", steady_faults=7.0)
    assert ctx.window == (0, 100 * MS) and [s.name for s in ctx.spans] == ["module:M", "torch.compile:compile"]
    assert [(s.delta, s.cause_span and s.cause_span.name, s.module) for s in ctx.fault_steps] == [
        (4000, "torch.compile:compile", "M"), (300, None, "M")]
    assert ctx.thread_steps == () and ctx.own_faults == 1 and ctx.steady_faults == 7.0
    assert ctx.off_thread_ns == 30 * MS  # the worker's compile: not this pass's time
    assert [seg[:2] for seg in ctx.segments] == [(0, 10 * MS), (10 * MS, 50 * MS), (50 * MS, 90 * MS), (90 * MS, 100 * MS)]
    assert ctx.free_by_module == {"M": 50 * MS, "": 10 * MS}
    assert ctx.span_keys == {("jit_compile", "torch.compile")}
    assert ctx.cover(20 * MS, 60 * MS)[0].name == "torch.compile:compile"
    assert build_context(tl, "no_such_pass") is None


def test_an_appended_estimator_is_all_a_new_rule_takes():
    def contention(ctx):
        return [Part("cpu_contention", "schedstat", "measured", ns=2 * MS, count=3, by_module={"M": 2 * MS})]

    tl = _timeline()
    att = attribute_pass(tl, "first", estimators=(*ESTIMATORS, contention))
    p = by_key(att.parts)[("cpu_contention", "schedstat")]
    assert (p.ms, p.count, p.evidence) == (2.0, 3, "measured")
    # Not a cause span's part: it sits in free time, so it leaves M's unexplained time.
    assert att.unexplained_by_module == {"M": 48 * MS, "": 10 * MS}
    assert attribute_pass(tl, "first").unexplained_by_module == {"M": 50 * MS, "": 10 * MS}
    bare = attribute_pass(tl, "first", estimators=())
    assert bare.parts == [] and bare.faults == 4300 and bare.faults_outside_causes == 300


def test_parts_of_one_cause_and_source_from_two_estimators_add_up():
    given = Part("jit_compile", "torch.compile", "estimated", ns=1 * MS, count=1, by_module={"": 1 * MS})

    def more_compile(ctx):
        return [given]

    att = attribute_pass(_timeline(), "first", estimators=(cause_spans, more_compile, more_compile))
    (p,) = att.parts
    assert (p.evidence, p.count, p.ns) == ("measured", 3, 42 * MS)  # the first estimator's evidence stands
    assert p.by_module == {"M": 40 * MS, "": 2 * MS}
    (twice,) = attribute_pass(_timeline(), "first", estimators=(more_compile, more_compile)).parts
    assert (twice.evidence, twice.count, twice.ns, twice.by_module) == ("estimated", 2, 2 * MS, {"": 2 * MS})
    assert (given.ns, given.count, given.by_module) == (1 * MS, 1, {"": 1 * MS})  # the estimator's part is untouched
    # A cause span's (cause, source) was measured inside the span: it never takes free time.
    assert att.unexplained_by_module == {"M": 50 * MS, "": 10 * MS}


HOOKED = (M, span("module:M.a", 10, 20, depth=1), M_A, span("module:M.b", 50, 60, depth=1))


def test_instrument_cost_books_the_measured_difference_placed_by_module_calls():
    cost = InstrumentCost((12.0, 13.0, 11.0), clean_median_ms=10.0, noise_ns=0.5 * MS, calls={"M": 1, "M.a": 2, "M.b": 1})
    ctx = context(spans=HOOKED, calibration=Calibration(hook_cost_ns=2000.0), instrument_cost=cost)
    (p,) = instrument_cost(ctx)
    assert (p.cause, p.source, p.evidence, p.count) == ("profiler_overhead", "instrumented_steady", "estimated", 3)
    assert p.ns == pytest.approx(2 * MS)  # median 12 ms less the clean median 10 ms
    assert p.by_module == pytest.approx({"M": 0.5 * MS, "M.a": 1 * MS, "M.b": 0.5 * MS})
    assert "12.000 ms" in p.detail and "noise" not in p.detail
    # It stands in for the calibrated per-call figures: no double counting.
    assert module_hook_cost(ctx) == [] and module_hook_cost(context(spans=HOOKED, calibration=ctx.calibration))
    assert instrument_cost(context(spans=HOOKED)) == []  # nothing measured: nothing here


def test_instrument_cost_never_goes_below_the_calibrated_floor_and_says_when_noisy():
    floor_cal = Calibration(hook_cost_ns=0.3 * MS)  # 4 calls: 1.2 ms
    below = InstrumentCost((10.2, 9.0, 10.5), clean_median_ms=10.0, noise_ns=0.8 * MS, calls={"M": 1})
    (p,) = instrument_cost(context(spans=HOOKED, calibration=floor_cal, instrument_cost=below))
    assert p.ns == pytest.approx(1.2 * MS) and p.by_module == pytest.approx({"M": 0.3 * MS, "M.a": 0.6 * MS,
                                                                              "M.b": 0.3 * MS})
    assert "below the calibrated floor" in p.detail
    negative = InstrumentCost((9.0,), clean_median_ms=10.0)
    assert negative.per_pass_ns == 0.0 and negative.within_noise
    assert instrument_cost(context(spans=HOOKED, instrument_cost=negative)) == []  # no floor, nothing measured
    noisy = InstrumentCost((10.6,), clean_median_ms=10.0, noise_ns=1.0 * MS)  # no module calls: outside modules
    (q,) = instrument_cost(context(instrument_cost=noisy))
    assert q.by_module == pytest.approx({"": 0.6 * MS}) and "within the noise band" in q.detail


def test_instrument_cost_is_the_last_estimator_and_leaves_free_time():
    assert ESTIMATORS[-1] is instrument_cost
    cost = InstrumentCost((14.0,), clean_median_ms=10.0, calls={"M": 2})
    att = attribute_pass(_timeline(), "first", calibration=Calibration(hook_cost_ns=1000.0), instrument_cost=cost)
    parts = by_key(att.parts)
    assert ("profiler_overhead", "module_hooks") not in parts
    assert parts[("profiler_overhead", "instrumented_steady")].ns == pytest.approx(4 * MS)
    assert att.unexplained_by_module == {"M": 46 * MS, "": 10 * MS}


def test_python_imports_inside_a_compile_span_stay_the_compiles_time():
    """Imports the compiler runs inside its span are counted in jit_compile, as torch's own compile
    timers count them (taking them out put jit_compile 6% below torch's figure); an import outside
    any compile is runtime_init of its own."""
    names = ["pass:first", "module:M", "torch.compile:compile", "python_import:torch._inductor.codegen",
             "python_import:json"]
    recs = [(0, BEGIN, STRUCTURE, 0, 0, 0), (100 * MS, END, STRUCTURE, 0, 0, 0),
            (0, BEGIN, STRUCTURE, 1, 0, 0), (90 * MS, END, STRUCTURE, 1, 0, 0),
            (10 * MS, BEGIN, JIT_COMPILE, 2, 0, 0), (70 * MS, END, JIT_COMPILE, 2, 0, 0),
            (20 * MS, BEGIN, RUNTIME_INIT, 3, 0, 0), (30 * MS, END, RUNTIME_INIT, 3, 0, 0),
            (80 * MS, BEGIN, RUNTIME_INIT, 4, 0, 0), (85 * MS, END, RUNTIME_INIT, 4, 0, 0)]
    att = attribute_pass(Timeline.from_records(recs, names), "first")
    parts = {(p.cause, p.source): p for p in att.parts}
    jit = parts[("jit_compile", "torch.compile")]
    assert jit.ns == 60 * MS and jit.detail.startswith("includes 1 Python imports the compiler ran")
    imp = parts[("runtime_init", "python_import")]
    assert imp.ns == 5 * MS and imp.count == 1

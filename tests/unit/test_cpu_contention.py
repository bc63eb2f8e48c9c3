"""cpu_contention: the pass thread's run-queue delay (schedstat) booked as measured time, placed by
module; a wait inside a cause span stays that cause's time and is said there (waited_ns), less a steady
pass's own wait; other threads' waits
reported and never booked; no schedstat -> a note and nothing else."""

import pytest

from warmprof import causes
from warmprof.attribution import ESTIMATORS, attribute_pass, build_context, cpu_contention
from warmprof.instruments.host import threads_waited
from warmprof.timeline import BEGIN, COUNTER, END, JIT_COMPILE, STRUCTURE, Timeline

MS = 1_000_000
NAMES = ["pass:first", "module:M", "module:M.a", "torch.compile:compile", "host:run_delay_ns",
         "host:involuntary_switches"]


def _timeline(delays, worker_delays=()):
    """Pass 0-100 ms on thread 0: module M 0-90, its child M.a 20-40, a compile 50-70 inside M.
    `delays`: (t_ms, cumulative run delay ns) samples of thread 0; `worker_delays` the same on thread 1."""
    recs = [(0, BEGIN, STRUCTURE, 0, 0, 0), (100 * MS, END, STRUCTURE, 0, 0, 0),
            (0, BEGIN, STRUCTURE, 1, 0, 0), (90 * MS, END, STRUCTURE, 1, 0, 0),
            (20 * MS, BEGIN, STRUCTURE, 2, 0, 0), (40 * MS, END, STRUCTURE, 2, 0, 0),
            (50 * MS, BEGIN, JIT_COMPILE, 3, 0, 0), (70 * MS, END, JIT_COMPILE, 3, 0, 0)]
    recs += [(int(t * MS), COUNTER, STRUCTURE, 4, int(v), 0) for t, v in delays]
    recs += [(int(t * MS), COUNTER, STRUCTURE, 4, int(v), 1) for t, v in worker_delays]
    recs.sort(key=lambda r: r[0])
    return Timeline.from_records(recs, NAMES)


def _parts(tl, **kw):
    return {(p.cause, p.source): p for p in attribute_pass(tl, "first", **kw).parts}


def test_the_pass_threads_wait_is_booked_measured_in_the_module_it_happened_in():
    # 0 -> 20 ms (M): 2 ms; 20 -> 40 (M.a): 6 ms; 40 -> 50 (M): none; 90 -> 100 (outside modules): 1 ms
    tl = _timeline([(0, 0), (20, 2 * MS), (40, 8 * MS), (50, 8 * MS), (90, 8 * MS), (100, 9 * MS)])
    p = _parts(tl)[("cpu_contention", "run_queue")]
    assert p.evidence == "measured"
    assert p.ns == pytest.approx(9 * MS)
    assert p.by_module == pytest.approx({"M": 2 * MS, "M.a": 6 * MS, "": 1 * MS})
    # booked time leaves the unexplained time of those modules
    att = attribute_pass(tl, "first")
    assert att.unexplained_by_module["M.a"] == pytest.approx(20 * MS - 6 * MS)


def test_a_wait_inside_a_cause_span_stays_in_that_cause_and_is_said_there_not_counted_twice():
    # 50 -> 70 ms is the compile (and nothing else): 5 ms of it was a wait for a CPU
    tl = _timeline([(0, 0), (50, 0), (70, 5 * MS), (100, 5 * MS)])
    parts = _parts(tl)
    compile_part = parts[("jit_compile", "torch.compile")]
    # the compile keeps its wall time and says how much of it waited for a CPU (issue 38: one figure per cause)
    assert compile_part.ns == pytest.approx(20 * MS) and compile_part.waited_ns == pytest.approx(5 * MS)
    assert not any(src.startswith("run_queue_in") for _, src in parts)
    assert ("cpu_contention", "run_queue") not in parts
    att = attribute_pass(tl, "first")
    # the pass's total is the compile span's 20 ms, once
    assert sum(p.ns for p in att.parts) == pytest.approx(20 * MS)
    assert att.unexplained_by_module["M"] == pytest.approx(90 * MS - 20 * MS - 20 * MS)  # less M.a and the compile
    # and by module the compile is the same 20 ms as in the cause table
    assert att.by_module()["M"] == pytest.approx({"jit_compile": 20.0})


def test_a_wait_between_samples_is_spread_over_the_time_between_them():
    # one step 40 -> 80 ms: M 40-50, the compile 50-70, M 70-80: 4 ms spread 1:2:1
    tl = _timeline([(0, 0), (40, 0), (80, 4 * MS), (100, 4 * MS)])
    parts = _parts(tl)
    assert parts[("cpu_contention", "run_queue")].by_module == pytest.approx({"M": 2 * MS})
    assert parts[("jit_compile", "torch.compile")].waited_ns == pytest.approx(2 * MS)
    assert parts[("jit_compile", "torch.compile")].ns == pytest.approx(20 * MS)


def test_a_steady_passs_own_wait_is_taken_off_in_proportion():
    tl = _timeline([(0, 0), (20, 2 * MS), (40, 8 * MS), (100, 8 * MS)])
    p = _parts(tl, steady_run_delay_ns=4 * MS)[("cpu_contention", "run_queue")]
    assert p.ns == pytest.approx(4 * MS)
    assert p.by_module == pytest.approx({"M": 1 * MS, "M.a": 3 * MS})
    assert "steady pass" in p.detail
    # a steady pass that waited as long or longer: nothing booked
    assert ("cpu_contention", "run_queue") not in _parts(tl, steady_run_delay_ns=9 * MS)


def test_workers_waits_are_never_booked_and_no_samples_means_no_part():
    worker = [(0, 0), (50, 40 * MS), (100, 80 * MS)]
    tl = _timeline([(0, 0), (100, 1 * MS)], worker_delays=worker)
    parts = _parts(tl)
    booked = sum(p.ns for p in parts.values() if p.cause == "cpu_contention")
    inside = parts[("jit_compile", "torch.compile")].waited_ns
    assert booked + inside == pytest.approx(1 * MS)  # thread 0's only (a fifth of it fell in the compile)
    assert inside == pytest.approx(0.2 * MS)
    assert not [p for p in _parts(_timeline([], worker_delays=worker)).values() if p.cause == "cpu_contention"]
    ctx = build_context(_timeline([(0, 0)]), "first")
    assert cpu_contention(ctx) == []  # one sample: no change to read
    assert cpu_contention in ESTIMATORS


def test_the_cause_is_in_the_table_and_never_something_a_warmup_fixes():
    row = causes.get("cpu_contention")
    assert row is not None and row.id == causes.CPU_CONTENTION and not row.warmup_fixes
    assert "no warm-up removes it" in row.advice


def test_threads_waited_reads_the_pass_thread_apart_from_the_others():
    before = {10: {"delay_ns": 100, "involuntary": 2}, 11: {"delay_ns": 0, "involuntary": 0}}
    after = {10: {"delay_ns": 5100, "involuntary": 5}, 11: {"delay_ns": 3000, "involuntary": 1},
             12: {"delay_ns": 2000, "involuntary": 0}}  # 12 started inside the pass: counted from 0
    got = threads_waited(before, after, main_tid=10)
    assert got == {"run_delay_ns": 5000, "involuntary_switches": 3, "worker_threads": 2, "workers_waiting": 2,
                   "worker_run_delay_max_ns": 3000, "worker_run_delay_total_ns": 5000}
    assert threads_waited({}, {10: {"delay_ns": None, "involuntary": -1}}, 10) == {}  # no schedstat
    assert threads_waited({}, {}, 10) == {}


def test_notes_say_when_contention_was_not_measured_and_report_the_other_threads():
    from warmprof.traces.build import contention_notes

    (missing,) = contention_notes({"first": {"minor_faults": 3}}, [], 0.0, 0.5)
    assert "not measured" in missing and "schedstat" in missing
    host = {"first": {"run_delay_ns": 2 * MS, "worker_threads": 3, "workers_waiting": 2,
                      "worker_run_delay_max_ns": 4 * MS, "worker_run_delay_total_ns": 6 * MS}}
    (workers,) = contention_notes(host, [], 2.0, 0.5)
    assert "up to 4.00 ms on one thread (6.00 ms in all): not booked" in workers
    quiet = {"first": {**host["first"], "worker_run_delay_total_ns": 0}}
    assert contention_notes(quiet, [], 0.0, 0.5) == []
    (steady,) = contention_notes(quiet, [0.0, 1.0, 3.0], 2.0, 0.5)
    assert "steady passes waited 1.00 ms each" in steady


def _report(contention_ms: float, other_ms: float, band: float = 0.5):
    from warmprof.report import CauseEntry, Report

    excess = contention_ms + other_ms
    entries = [CauseEntry("cpu_contention", contention_ms, contention_ms / excess, "measured", "run_queue", "M")]
    if other_ms:
        entries.append(CauseEntry("allocator_growth", other_ms, other_ms / excess, "estimated", "host_faults", "M"))
    return Report(model="M", shape=[1, 8], device="cpu", first_pass_ms=10.0 + excess, seen_rerun_ms=10.0,
                  steady_median_ms=10.0, noise_band_ms=band, excess_ms=excess, unattributed_ms=0.0,
                  attributed_ms=excess, causes=entries)


def test_a_first_pass_slow_only_from_waiting_for_a_cpu_is_too_noisy_to_tell_not_cold():
    from warmprof.traces.advice import advise

    lines = advise(_report(contention_ms=20.0, other_ms=0.2))
    assert lines[0].startswith("No first-call cost of the model's at this shape: without the wait for a CPU (20.00 ms, measured)")
    assert any("no warm-up removes it" in a for a in lines)
    assert not any(a.startswith("allocator_growth") for a in lines)
    # beyond the wait, a real first-call cost is still advised on, and the wait's line says no warm-up fixes it
    lines = advise(_report(contention_ms=20.0, other_ms=10.0))
    assert any(a.startswith("allocator_growth") for a in lines)
    assert [a for a in lines if a.startswith("cpu_contention")][0].count("no warm-up removes it") == 1


def test_a_wait_longer_than_the_time_between_its_samples_is_capped_never_taken_past_a_span():
    # a compile of 1 ms (50-51 ms) with samples at its start and end that read 3 ms of wait (a wait
    # read a moment after its sample's clock): no more than the span's 1 ms is said as its wait
    tl = Timeline.from_records(sorted([
        (0, BEGIN, STRUCTURE, 0, 0, 0), (100 * MS, END, STRUCTURE, 0, 0, 0),
        (50 * MS, BEGIN, JIT_COMPILE, 3, 0, 0), (51 * MS, END, JIT_COMPILE, 3, 0, 0),
        (0, COUNTER, STRUCTURE, 4, 0, 0), (50 * MS, COUNTER, STRUCTURE, 4, 0, 0),
        (51 * MS, COUNTER, STRUCTURE, 4, 3 * MS, 0), (100 * MS, COUNTER, STRUCTURE, 4, 3 * MS, 0)],
        key=lambda r: r[0]), NAMES)
    parts = _parts(tl)
    assert parts[("jit_compile", "torch.compile")].ns == pytest.approx(1 * MS)
    assert parts[("jit_compile", "torch.compile")].waited_ns == pytest.approx(1 * MS)
    assert all(p.ns >= 0 for p in parts.values())


def test_a_rest_no_larger_than_a_workers_wait_is_too_noisy_to_tell():
    from warmprof.traces.advice import advise

    r = _report(contention_ms=20.0, other_ms=10.0)
    r.counters = {"first_pass": {"worker_run_delay_max_ns": 12 * MS}}  # one other thread waited 12 ms
    (first, *rest) = advise(r)
    assert first.startswith("Too noisy to tell: the rest of the excess (10.00 ms")
    assert "one other thread of the process waited for a CPU (12.00 ms)" in first
    assert not any(a.startswith("allocator_growth") for a in rest)
    r.counters = {"first_pass": {"worker_run_delay_max_ns": 1 * MS}}  # too small to cover the rest
    assert any(a.startswith("allocator_growth") for a in advise(r))

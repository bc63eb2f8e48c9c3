"""Page faults split by what grew: anonymous memory is the allocator's (allocator_growth), file-backed
pages are a library's code and data paged in on first use (runtime_init, source file_pages); each kind
priced by the bytes it grew at the first-touch cost calibrated for that size."""

import pytest

from warmprof.attribution import (
    Calibration, CounterStep, PassContext, SpanRec, build_context, host_faults, per_byte_at, split_faults,
    thread_starts,
)
from warmprof.timeline import BEGIN, COUNTER, END, JIT_COMPILE, STRUCTURE, Timeline

MS = 1_000_000
KIB, MIB = 1 << 10, 1 << 20
PASS = SpanRec("pass:first", STRUCTURE, 0, 100 * MS, 0, 0)
COMPILE = SpanRec("torch.compile:compile", JIT_COMPILE, 10 * MS, 50 * MS, 0, 1)
# 0.25 ns a byte at 4 MiB, 0.5 at 256 MiB (a large touch costs more per byte on some machines);
# huge pages 0.02 ns a byte; file pages 0.05 ns a byte, one fault per 64 KiB (fault-around).
CAL = Calibration(fault_cost_ns=1000.0, touch_ns_per_byte=((4 * MIB, 0.25), (256 * MIB, 0.5)),
                  huge_touch_ns_per_byte=((32 * MIB, 0.02),), file_ns_per_byte=0.05,
                  file_faults_per_byte=1 / (64 * KIB))


def context(steps, grown, **fields) -> PassContext:
    return PassContext(pass_span=PASS, spans=(), segments=(), fault_steps=tuple(steps), fault_bytes=tuple(grown),
                       **{"calibration": CAL, **fields})


def by_key(parts):
    return {(p.cause, p.source): p for p in parts}


def test_per_byte_cost_interpolates_on_log_size_and_holds_the_end_points():
    pts = ((4 * MIB, 0.25), (256 * MIB, 0.5))
    assert per_byte_at(pts, 1 * MIB) == 0.25 and per_byte_at(pts, 1 << 30) == 0.5
    assert per_byte_at(pts, 32 * MIB) == pytest.approx(0.375)  # halfway in log2: 2^22 .. 2^28 -> 2^25
    assert per_byte_at((), 32 * MIB) == 0.0


def test_an_anonymous_step_is_allocator_growth_priced_at_its_own_size():
    pages = 256 * MIB // 4096
    (p,) = host_faults(context([CounterStep(60 * MS, 90 * MS, pages, None, "Touch")], [(256 * MIB, 0)]))
    assert (p.cause, p.source, p.evidence, p.count) == ("allocator_growth", "host_faults", "estimated", pages)
    # At the 256 MiB cost (0.5 ns a byte), not at a small size's (0.25) nor faults x fault_cost_ns.
    assert p.ns == pytest.approx(256 * MIB * 0.5)
    assert p.by_module == {"Touch": pytest.approx(256 * MIB * 0.5)}
    assert "split from file-backed faults" in p.detail


def test_a_file_backed_step_is_runtime_init_lazy_loading_not_the_allocator():
    # A first Linear call: 56 faults, 36 KiB anonymous, 2.4 MiB of a library's code paged in.
    file_bytes = int(2.4 * MIB)
    parts = by_key(host_faults(context([CounterStep(60 * MS, 61 * MS, 56, None, "lin")], [(36 * KIB, file_bytes)])))
    files = parts[("runtime_init", "file_pages")]
    assert files.evidence == "estimated" and files.by_module == {"lin": pytest.approx(file_bytes * 0.05)}
    file_faults = file_bytes / (64 * KIB)
    assert files.count == round(file_faults) and "2.4 MiB of file-backed pages" in files.detail
    anon = parts[("allocator_growth", "host_faults")]
    # The other faults are anonymous: more faults than 36 KiB needs, so small pages, one page each.
    assert anon.count == round(56 - file_faults)
    assert anon.ns == pytest.approx((56 - file_faults) * 4096 * 0.25)


def test_huge_pages_are_told_by_bytes_per_fault_and_priced_at_the_huge_page_cost():
    sp = split_faults(128, 256 * MIB, 0, CAL)  # 128 faults for 256 MiB: 2 MiB a fault
    assert sp.huge_faults == pytest.approx(128) and sp.file_faults == 0
    assert sp.anon_ns == pytest.approx(256 * MIB * 0.02)
    no_huge = Calibration(**{**CAL.__dict__, "huge_touch_ns_per_byte": ()})
    assert split_faults(128, 256 * MIB, 0, no_huge).huge_faults == 0  # THP off: never claimed


def test_faults_with_no_growth_are_small_anonymous_pages_and_steady_faults_come_off():
    # Memory given back and touched again: nothing grew, each fault one small page.
    steps = [CounterStep(60 * MS, 70 * MS, 1000, None, "M"), CounterStep(70 * MS, 80 * MS, 500, COMPILE, "M")]
    (p,) = host_faults(context(steps, [(0, 0), (4 * MIB, 0)], steady_faults=200, own_faults=100))
    assert p.count == 700  # 1000 outside causes (the compile's 500 are the compile's) - 200 - 100
    assert p.ns == pytest.approx(1000 * 4096 * 0.25 * 0.7)


def test_without_memory_samples_every_fault_is_one_anonymous_small_page():
    ctx = context([CounterStep(60 * MS, 70 * MS, 300, None, "M")], [])
    (p,) = host_faults(ctx)
    assert (p.source, p.count, p.ns) == ("host_faults", 300, pytest.approx(300 * 4096 * 0.25))
    assert "no memory samples" in p.detail
    # A calibration with no first-touch points (a report written before them): fault_cost_ns a fault.
    (old,) = host_faults(context([CounterStep(60 * MS, 70 * MS, 300, None, "M")], [],
                                 calibration=Calibration(fault_cost_ns=1000.0)))
    assert old.ns == 300 * 1000.0


def test_an_unusable_first_touch_calibration_counts_without_time_and_says_why():
    cal = Calibration(unusable={"first_touch": "p90/low 5.0 > 3"}, file_ns_per_byte=0.05,
                      file_faults_per_byte=1 / (64 * KIB))
    (p,) = host_faults(context([CounterStep(60 * MS, 70 * MS, 300, None, "M")], [(300 * 4096, 0)], calibration=cal))
    assert (p.count, p.ns) == (300, 0.0) and "not used (p90/low 5.0 > 3)" in p.detail


def test_an_unusable_thread_start_calibration_counts_starts_without_time():
    steps = (CounterStep(60 * MS, 61 * MS, 2, None, "M"),)
    cal = Calibration(unusable={"thread_start": "low 9 us, p90 4e+03 us"})
    (p,) = thread_starts(PassContext(pass_span=PASS, spans=(), segments=(), thread_steps=steps, calibration=cal))
    assert (p.source, p.count, p.ns) == ("thread_pool", 2, 0.0) and "too spread" in p.detail
    ok = thread_starts(PassContext(pass_span=PASS, spans=(), segments=(), thread_steps=steps,
                                   calibration=Calibration(thread_start_ns=20_000.0)))
    assert ok[0].ns == 40_000.0 and ok[0].detail == ""


def test_the_context_reads_what_each_fault_step_grew_from_the_memory_samples():
    """Memory is sampled where faults moved (and at pass boundaries): the sample at or before a
    step's start and end gives its growth, anonymous (RSS less file bytes) and file-backed."""
    names = ["pass:first", "host:minor_faults", "host:major_faults", "host:rss_bytes", "host:file_bytes"]
    recs = [(0, BEGIN, STRUCTURE, 0, 0, 0), (100 * MS, END, STRUCTURE, 0, 0, 0)]
    # t, faults, rss, file (None: no memory read there: faults had not moved)
    samples = ((0, 1000, 100 * MIB, 40 * MIB), (20, 1000, None, None), (40, 1600, 102 * MIB + 2 * MIB, 42 * MIB),
               (60, 1600, None, None), (80, 67136, 360 * MIB, 42 * MIB))
    for t, faults, rss, file_b in samples:
        recs += [(t * MS, COUNTER, STRUCTURE, 1, faults, 0), (t * MS, COUNTER, STRUCTURE, 2, 0, 0)]
        if rss is not None:
            recs += [(t * MS, COUNTER, STRUCTURE, 3, rss, 0), (t * MS, COUNTER, STRUCTURE, 4, file_b, 0)]
    ctx = build_context(Timeline.from_records(recs, names), "first", calibration=CAL)
    assert [s.delta for s in ctx.fault_steps] == [600, 65536]
    assert ctx.fault_bytes == ((2 * MIB, 2 * MIB), (256 * MIB, 0))
    parts = by_key(host_faults(ctx))
    assert set(parts) == {("allocator_growth", "host_faults"), ("runtime_init", "file_pages")}

"""Off-CPU time: where the pass thread was blocked (wall less CPU time less run-queue delay between
samples of its clocks) is a measured wait, or a disk read where it read from storage, in the module
it happened in; a disk read inside a cause span is taken out of that span; no wait where CPU time
kept up with wall time; a steady pass's own blocked time taken off; waits under a floor not booked."""

import pytest
from factories import thread_clock_timeline

from warmprof.attribution import ESTIMATORS, Calibration, attribute_pass, build_context, off_cpu_time, split_faults, stretches
from warmprof.attribution.off_cpu import WAIT_FLOOR_NS
from warmprof.causes import Name
from warmprof.instruments.host import blocked_ns
from warmprof.timeline import JIT_COMPILE, STRUCTURE

MS = 1_000_000
MIB = 1 << 20
# M runs 0-90 ms, its child M.a 20-40, and a compile 50-70 inside M.
SPANS = [("module:M", STRUCTURE, 0, 90), ("module:M.a", STRUCTURE, 20, 40),
         ("torch.compile:compile", JIT_COMPILE, 50, 70)]


def _full(t_ms, cpu_ms, voluntary=0, read_bytes=0, majors=0, delay_ns=0):
    """A boundary after the thread left its CPU: every clock read."""
    return (t_ms, delay_ns, int(cpu_ms * MS), voluntary, read_bytes, majors)


def _placed_in(part, module, ns):
    """All of `part` in `module`, but for the 2 us between the boundary and the clocks' read after it."""
    assert part.by_module[module] == pytest.approx(ns, rel=1e-3)
    assert sum(v for m, v in part.by_module.items() if m != module) < 0.01 * MS


def _parts(tl, **kw):
    return {(p.cause, p.source): p for p in attribute_pass(tl, "first", **kw).parts}


def _blocked_in_child(blocked_ms=15.0, **counters):
    """Blocked `blocked_ms` inside M.a (20-40 ms); the boundary at 20 ms found the thread on its CPU."""
    return thread_clock_timeline(SPANS, [
        _full(0, 0), (20, 0), _full(40, 40 - blocked_ms, voluntary=1, **counters), (50, 0), (70, 0), (90, 0),
        _full(100, 100 - blocked_ms, voluntary=1, **counters),
    ])


def test_a_sleep_is_a_measured_wait_in_the_module_that_slept():
    parts = _parts(_blocked_in_child())
    wait = parts[(Name.WAIT, "off_cpu")]
    assert wait.evidence == "measured" and wait.count == 1
    assert wait.ns == pytest.approx(15 * MS, rel=1e-3)
    # placed after the boundary at 20 ms (the thread kept its CPU up to there), not spread over 0-40
    _placed_in(wait, "M.a", 15 * MS)
    assert not [p for p in parts.values() if p.cause in (Name.DISK_READ, Name.JIT_COMPILE) and p.source != "torch.compile"]
    att = attribute_pass(_blocked_in_child(), "first")
    assert att.unexplained_by_module["M.a"] == pytest.approx(20 * MS - 15 * MS, rel=1e-3)
    assert parts[(Name.JIT_COMPILE, "torch.compile")].ns == pytest.approx(20 * MS)


@pytest.mark.parametrize("counters, pages", [({"read_bytes": 4 * MIB}, 1024), ({"majors": 3}, 3),
                                             ({"read_bytes": 64 * 1024, "majors": 20}, 20)])
def test_block_input_or_major_faults_make_it_a_disk_read(counters, pages):
    parts = _parts(_blocked_in_child(**counters))
    disk = parts[(Name.DISK_READ, "storage")]
    assert disk.evidence == "measured" and disk.count == pages
    _placed_in(disk, "M.a", 15 * MS)
    assert f"{pages} pages read from disk" in disk.detail
    assert (Name.WAIT, "off_cpu") not in parts


def test_a_wait_while_other_threads_read_from_disk_is_a_wait_that_says_so():
    # the pass thread read nothing itself; the process took 30 major faults meanwhile (its pool's threads)
    tl = thread_clock_timeline(SPANS, [_full(0, 0), (20, 0), _full(40, 25, voluntary=1), _full(100, 85, voluntary=1)],
                               process_major_faults=[(0, 100), (20, 100), (40, 130), (100, 130)])
    parts = _parts(tl)
    wait = parts[(Name.WAIT, "off_cpu")]
    _placed_in(wait, "M.a", 15 * MS)
    assert "other threads took 30 major faults" in wait.detail
    assert (Name.DISK_READ, "storage") not in parts


def test_a_compile_span_holding_a_disk_read_is_net_of_it():
    # 8 ms of the compile's 20 ms the thread waited for reads from storage (a cold page cache)
    tl = thread_clock_timeline(SPANS, [_full(0, 0), (20, 0), (40, 0), (50, 0),
                                       _full(70, 62, voluntary=10, read_bytes=2 * MIB, majors=10), (90, 0),
                                       _full(100, 92, voluntary=10, read_bytes=2 * MIB, majors=10)])
    parts = _parts(tl)
    compile_part = parts[(Name.JIT_COMPILE, "torch.compile")]
    carved = parts[(Name.DISK_READ, "storage_in:torch.compile")]
    assert compile_part.ns == pytest.approx(12 * MS, rel=1e-3)
    assert carved.ns == pytest.approx(8 * MS, rel=1e-3) and carved.carved and carved.evidence == "measured"
    assert "never booked as their cause" in carved.detail
    att = attribute_pass(tl, "first")
    assert sum(p.ns for p in att.parts) == pytest.approx(20 * MS, rel=1e-3)  # the compile span's time, split
    assert att.unexplained_by_module["M"] == pytest.approx(90 * MS - 20 * MS - 20 * MS, rel=1e-3)


def test_a_stretch_of_many_blocks_and_a_small_read_is_a_disk_read_only_by_its_share():
    # a compile's 20 ms: blocked 16 ms over 64 blocks (its workers), 20 KiB of a cold file among them
    tl = thread_clock_timeline(SPANS, [_full(0, 0), (50, 0), _full(70, 54, voluntary=64, read_bytes=20 << 10),
                                       _full(100, 84, voluntary=64, read_bytes=20 << 10)])
    parts = _parts(tl)
    carved = parts[(Name.DISK_READ, "storage_in:torch.compile")]
    assert carved.ns == pytest.approx(16 * MS / 64, rel=1e-3)  # one block of 64: one readahead window read
    assert carved.evidence == "estimated" and "split between them by count of blocks" in carved.detail
    assert parts[(Name.JIT_COMPILE, "torch.compile")].ns == pytest.approx(20 * MS - 16 * MS / 64, rel=1e-3)
    # a cold read as large as its blocks: every block a read, all of it measured
    big = thread_clock_timeline(SPANS, [_full(0, 0), (50, 0), _full(70, 54, voluntary=8, read_bytes=8 << 20),
                                        _full(100, 84, voluntary=8, read_bytes=8 << 20)])
    whole = _parts(big)[(Name.DISK_READ, "storage_in:torch.compile")]
    assert whole.ns == pytest.approx(16 * MS, rel=1e-3) and whole.evidence == "measured"


def test_a_wait_inside_a_cause_span_stays_with_that_span():
    # a compile waiting for its compiler's processes: the compile's own time, not a wait
    tl = thread_clock_timeline(SPANS, [_full(0, 0), (50, 0), _full(70, 62, voluntary=3), _full(100, 92, voluntary=3)])
    parts = _parts(tl)
    assert parts[(Name.JIT_COMPILE, "torch.compile")].ns == pytest.approx(20 * MS)
    assert not [p for p in parts.values() if p.cause in (Name.WAIT, Name.DISK_READ)]


def test_the_wait_for_a_cpu_after_a_block_stays_contention():
    # blocked 15 ms in M.a, then 2 ms runnable with no CPU (a busy machine): the block is the wait, the
    # queueing is the machine's, measured where it happened, as every other wait for a CPU
    tl = thread_clock_timeline(SPANS, [_full(0, 0), (20, 0), _full(40, 23, voluntary=1, delay_ns=2 * MS),
                                       _full(100, 83, voluntary=1, delay_ns=2 * MS)])
    parts = _parts(tl)
    _placed_in(parts[(Name.WAIT, "off_cpu")], "M.a", 15 * MS)
    assert parts[(Name.CPU_CONTENTION, "run_queue")].by_module == pytest.approx({"M.a": 2 * MS}, rel=1e-3)


def test_no_wait_where_cpu_time_kept_up_with_wall_time():
    # voluntary switches that blocked for nothing (a futex handed over), a preemption (its wait for a
    # CPU is the run-queue delay: contention), and time gone with no voluntary switch (steal, skew)
    tl = thread_clock_timeline(SPANS, [_full(0, 0), _full(30, 30, voluntary=4), (40, 0),
                                       _full(60, 55, voluntary=4, delay_ns=5 * MS), _full(80, 73, voluntary=4, delay_ns=5 * MS),
                                       _full(100, 93, voluntary=4, delay_ns=5 * MS)])
    parts = _parts(tl)
    assert not [p for p in parts.values() if p.cause in (Name.WAIT, Name.DISK_READ)]
    # the 5 ms wait for a CPU: outside cause spans as cpu_contention, inside one said as that cause's wait
    waited = sum(p.ns for p in parts.values() if p.cause == Name.CPU_CONTENTION) + sum(
        p.waited_ns for p in parts.values() if p.cause != Name.CPU_CONTENTION)
    assert waited == pytest.approx(5 * MS)
    assert [s for s in stretches(tl, 0, 0, 100 * MS)] == []


def test_a_steady_passs_own_blocked_time_is_taken_off_and_small_waits_are_not_booked():
    tl = _blocked_in_child()
    wait = _parts(tl, steady_off_cpu_ns=5 * MS)[(Name.WAIT, "off_cpu")]
    assert wait.ns == pytest.approx(10 * MS, rel=1e-3)
    assert "steady pass" in wait.detail
    assert (Name.WAIT, "off_cpu") not in _parts(tl, steady_off_cpu_ns=15 * MS - WAIT_FLOOR_NS / 2)
    small = _blocked_in_child(blocked_ms=WAIT_FLOOR_NS / MS / 2)
    assert (Name.WAIT, "off_cpu") not in _parts(small)
    # a disk read has no floor: reading from storage at all is the cold cache's doing
    assert (Name.DISK_READ, "storage") in _parts(_blocked_in_child(blocked_ms=WAIT_FLOOR_NS / MS / 2, majors=1))


def test_what_a_steady_pass_waited_beyond_the_waits_comes_off_the_disk_reads():
    tl = _blocked_in_child(read_bytes=MIB)
    assert _parts(tl, steady_off_cpu_ns=5 * MS)[(Name.DISK_READ, "storage")].ns == pytest.approx(10 * MS, rel=1e-3)


def test_only_the_pass_threads_blocks_are_booked_and_no_clocks_means_nothing():
    assert off_cpu_time(build_context(_blocked_in_child(), "first")) != []
    # the same clocks read on another thread (a worker's blocks): nothing of the pass thread's
    worker = thread_clock_timeline(SPANS, [_full(0, 0), (20, 0), _full(40, 25, voluntary=1), _full(100, 85, voluntary=1)],
                                   clock_thread=1)
    assert off_cpu_time(build_context(worker, "first")) == []
    # a timeline recorded before the counters existed: only run-queue delay samples
    assert off_cpu_time(build_context(thread_clock_timeline(SPANS, [(0, 0), (50, 0), (100, 0)]), "first")) == []
    assert off_cpu_time in ESTIMATORS


def test_a_major_fault_is_never_priced_as_an_anonymous_first_touch():
    cal = Calibration(fault_cost_ns=1000.0, file_faults_per_byte=1 / 65536, file_ns_per_byte=0.01)
    plain = split_faults(10, 0, 4096 * 10, cal)
    assert plain.anon_faults == pytest.approx(10 - 40960 / 65536)
    with_majors = split_faults(10, 0, 4096 * 10, cal, major=10)
    assert with_majors.anon_faults == 0 and with_majors.anon_ns == 0
    assert with_majors.file_ns == plain.file_ns  # the mapping's cost stays; the read's wait is disk_read's
    assert split_faults(10, 0, 0, cal, major=25).file_faults == 10  # never more than the step's faults


def test_blocked_time_between_two_reads_of_the_threads_clocks():
    a = {"ns": 0, "cpu_ns": 0, "run_delay_ns": 0, "voluntary": 5, "storage_read_bytes": 0, "major_faults": 0}
    slept = {**a, "ns": 100 * MS, "cpu_ns": 30 * MS, "run_delay_ns": 10 * MS, "voluntary": 6}
    assert blocked_ns(a, slept) == pytest.approx(60 * MS)
    assert blocked_ns(a, {**slept, "voluntary": 5}) == 0.0  # no block: skew or steal
    assert blocked_ns(None, slept) is None and blocked_ns(a, None) is None

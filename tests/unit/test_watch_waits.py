"""watch: an off-CPU stall reads as a wait. A kept call's time off its CPU that was no wait for a CPU
(its run-queue delay, where read) and more than its key's usual calls spend off it is `wait`, or
`disk_read` when the call read from storage; booked before clock_ramp; never from a measured stretch's
own time; not below the floor. The hot path reads the CPU time exactly (and the run-queue delay) for a
call it knows will be kept."""

from __future__ import annotations

import threading
import time

import pytest

from warmprof import _native
from warmprof.attribution.calls import WAIT_FLOOR_NS, CallFacts, attribute_call
from warmprof.serving.watch.events import build

from factories import call_costs, watch_call

MS = 1_000_000


def _event(*, dur_ms=30.0, median_ms=1.0, cpu_ms=1.0, run_delay_ms=None, exact=True, majflt=0, inblock=0,
           nivcsw=0, usual_off_cpu_ms=0.0, outlier=True, first=False, clock=None, gap_ns=0, compile_ms=0.0,
           nvcsw=None):
    """The event watch builds for one kept call with these figures (a WatchCall made by hand)."""
    info = watch_call(1, None, (), None, first, outlier, 10**9, int(dur_ms * MS), gap_ns, clock, int(cpu_ms * MS), 0,
                      majflt, nivcsw, 1 if compile_ms else 0, int(compile_ms * MS), 9, median_ms * MS if outlier else 0.0,
                      None, inblock, None if run_delay_ms is None else int(run_delay_ms * MS), exact,
                      usual_off_cpu_ms * MS, nvcsw)
    return build(info, index=0, key="k", start_ns=0, idle_ns=10**8, dynamo=None, costs=call_costs(1000.0),
                 reserved=(None, None))


def _causes(e):
    return {c["cause"]: c for c in e["causes"]}


def test_time_off_the_cpu_that_was_no_wait_for_a_cpu_is_a_measured_wait():
    e = _event(run_delay_ms=2.0)  # 30 ms over a 1 ms median; 1 ms on the CPU, 2 ms waiting for one
    got = _causes(e)
    assert set(got) == {"cpu_contention", "wait"}
    assert got["cpu_contention"]["ms"] == pytest.approx(2.0) and got["cpu_contention"]["evidence"] == "measured"
    assert got["wait"]["ms"] == pytest.approx(27.0) and got["wait"]["evidence"] == "measured"
    assert got["wait"]["source"] == "thread_blocked" and "27.00 ms" in got["wait"]["detail"]
    assert e["unattributed_ms"] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("reads, said", [({"majflt": 5}, "5 major page faults"), ({"inblock": 64}, "64 blocks read")])
def test_a_stall_that_read_from_storage_is_a_disk_read(reads, said):
    got = _causes(_event(run_delay_ms=0.0, **reads))
    assert set(got) == {"disk_read"}
    assert got["disk_read"]["ms"] == pytest.approx(29.0) and got["disk_read"]["evidence"] == "estimated"
    assert said in got["disk_read"]["detail"]


@pytest.mark.parametrize("reads, blocks, disk_ms", [
    ({"majflt": 1}, 4, 29.0 / 4),  # one page read from disk, three other blocks (a sleep, a lock)
    ({"inblock": 512}, 4, 29.0 / 2),  # 256 KiB read: two readahead windows of four blocks
    ({"majflt": 5}, 5, 29.0),  # every block a read: all of it disk
    ({"majflt": 9}, 3, 29.0),  # more faults than blocks (some served by readahead in flight): all disk
])
def test_a_stall_that_read_and_also_waited_is_split_by_block_counts(reads, blocks, disk_ms):
    got = _causes(_event(run_delay_ms=0.0, nvcsw=blocks, **reads))
    assert got["disk_read"]["ms"] == pytest.approx(disk_ms) and got["disk_read"]["evidence"] == "estimated"
    if disk_ms < 29.0:
        assert got["wait"]["ms"] == pytest.approx(29.0 - disk_ms) and got["wait"]["evidence"] == "estimated"
        assert "by block counts" in got["wait"]["detail"] and "by block counts" in got["disk_read"]["detail"]
        assert got["wait"]["count"] == blocks - (reads.get("majflt") or 2)
    else:
        assert "wait" not in got and "by block counts" not in got["disk_read"]["detail"]


def test_a_real_sleep_is_a_wait_with_its_voluntary_switch_counted():
    """The hot path hands over the thread's voluntary switches (ru_nvcsw): a 20 ms sleep blocks once."""
    from warmprof.serving.watch import watch

    raw = []
    w = watch(lambda: time.sleep(0.02))
    w._set_on_event(lambda call: (raw.append(call), w._on_event(call)))
    w()
    w.close()
    (call,) = raw
    if _native.thread_times() is None:
        pytest.skip("no per-thread CPU time here: no wait is read")
    assert call.nvcsw >= 1
    (e,) = w.events()
    assert "wait" in _causes(e) and _causes(e)["wait"]["ms"] >= 0.9 * 20.0


def test_what_the_keys_usual_calls_wait_is_not_booked():
    # every call at the key waits 10 ms (a remote call it always makes): only the 17 ms beyond is this one's
    got = _causes(_event(median_ms=11.0, cpu_ms=3.0, run_delay_ms=0.0, usual_off_cpu_ms=10.0))
    assert got["wait"]["ms"] == pytest.approx(17.0) and "10.00 ms its key's usual calls" in got["wait"]["detail"]


def test_off_cpu_time_under_the_floor_is_no_wait():
    e = _event(dur_ms=5.0, cpu_ms=5.0 - (WAIT_FLOOR_NS - 1000) / MS, run_delay_ms=0.0)
    assert not e["causes"] and e["unattributed_ms"] == pytest.approx(4.0)


def test_an_outlier_read_through_getrusage_books_at_least_its_wait_estimated():
    e = _event(exact=False)  # not known to be kept before it ran: CPU time from getrusage at its start
    (wait,) = e["causes"]
    assert wait["cause"] == "wait" and wait["evidence"] == "estimated" and wait["ms"] == pytest.approx(29.0)
    assert "or more" in wait["detail"] and "was not read" in wait["detail"]


def test_preempted_with_no_run_queue_delay_read_is_contention_as_before():
    e = _event(exact=False, nivcsw=2)
    assert [c["cause"] for c in e["causes"]] == ["cpu_contention"]  # the split is not known: no wait invented
    assert e["causes"][0]["ms"] == pytest.approx(29.0) and e["causes"][0]["evidence"] == "estimated"


def test_a_wait_is_booked_before_a_low_clock_and_the_ramp_takes_what_is_left():
    e = _event(dur_ms=30.0, median_ms=5.0, cpu_ms=20.0, run_delay_ms=0.0, clock=(500.0, 1500.0), gap_ns=10**9)
    got = _causes(e)
    assert got["wait"]["ms"] == pytest.approx(10.0) and got["clock_ramp"]["ms"] == pytest.approx(15.0)
    assert e["unattributed_ms"] == pytest.approx(0.0, abs=1e-9)


def test_a_first_call_that_waited_lists_its_wait():
    e = _event(dur_ms=50.0, cpu_ms=10.0, run_delay_ms=0.0, outlier=False, first=True)
    assert _causes(e)["wait"]["ms"] == pytest.approx(40.0) and e["excess_ms"] is None


def test_a_compiles_own_time_is_never_a_wait():
    # a 30 ms call that compiled for 20 ms of it and was 25 ms off its CPU: only 5 ms is surely outside the compile
    e = _event(outlier=False, first=True, cpu_ms=5.0, run_delay_ms=0.0, compile_ms=20.0)
    got = _causes(e)
    assert got["jit_compile"]["ms"] == pytest.approx(20.0) and got["wait"]["ms"] == pytest.approx(5.0)


def test_a_warm_up_call_with_no_cpu_time_books_no_wait():
    got = attribute_call(CallFacts(ns=30 * MS), call_costs(1000.0).get())
    assert not [p for p in got.parts if p.cause in ("wait", "disk_read")]


# -- the hot path's record -------------------------------------------------------------------------------
def _raw_calls(fn, drive, **options):
    """The WatchCall records a WatchCore hands over while `drive(core)` calls it."""
    got = []
    core = _native.WatchCore(fn, None, None, 100, 8, 3.0, 50_000, int(options.get("idle_s", 0.2) * 1e9))
    core._set_on_event(got.append)
    drive(core)
    core._set_closed(True)
    return got


def test_a_call_known_to_be_kept_is_read_exactly_and_an_outlier_from_getrusage():
    state = {"sleep": 0.0}

    def serve(x):
        if state["sleep"]:
            time.sleep(state["sleep"])
        return x

    def drive(core):
        for _ in range(10):
            core(1)
        state["sleep"] = 0.02
        core(1)  # an outlier: known only once it ran
        state["sleep"] = 0.0
        for _ in range(3):
            core(1)
        time.sleep(0.3)
        state["sleep"] = 0.02
        core(1)  # after an idle gap: known before it ran

    first, outlier, after_idle = _raw_calls(serve, drive)
    assert first.first and first.cpu_exact and after_idle.cpu_exact and not outlier.cpu_exact
    assert outlier.outlier and outlier.run_delay_ns is None
    schedstat = _native.thread_schedstat() is not None
    for call in (first, after_idle):
        assert (call.run_delay_ns is not None) == schedstat and (call.run_delay_ns or 0) >= 0
    assert after_idle.dur_ns - after_idle.cpu_ns >= 20 * MS - 1  # the sleep was off the CPU, read to the ns
    assert 0 <= after_idle.cpu_ns < after_idle.dur_ns and isinstance(after_idle.inblock, int)
    assert after_idle.usual_off_cpu_ns >= 0.0


def test_a_call_on_another_thread_is_read_on_its_own_thread():
    """The CPU clock and schedstat are the calling thread's: a busy thread beside it adds nothing."""
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pass

    t = threading.Thread(target=spin)
    t.start()
    try:
        (call,) = _raw_calls(lambda: time.sleep(0.02), lambda core: core())
    finally:
        stop.set()
        t.join()
    assert call.first and call.cpu_exact and call.cpu_ns < 10 * MS


def test_a_read_from_a_cold_page_cache_is_a_disk_read(tmp_path):
    """A file written, synced and dropped from the page cache (posix_fadvise DONTNEED: no root needed),
    then read by a watched call: its blocks come from storage."""
    import os

    from warmprof.serving.watch import watch

    path = tmp_path / "weights.bin"
    with open(path, "wb") as f:
        f.write(os.urandom(16 << 20))
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    raw = []

    def load(p):
        return len(p.read_bytes())

    w = watch(load)
    w._set_on_event(lambda call: (raw.append(call), w._on_event(call)))  # the record too, for its block count
    w(path)
    w.close()
    (call,) = raw
    if not call.inblock:
        pytest.skip("this filesystem read no blocks for the file (tmpfs, or the kernel kept its pages)")
    (e,) = w.events()
    (disk,) = [c for c in e["causes"] if c["cause"] == "disk_read"]
    assert disk["count"] == call.inblock + call.majflt and f"{call.inblock} blocks read" in disk["detail"]
    assert not any(c["cause"] == "wait" for c in e["causes"])


def test_a_call_read_never_to_have_blocked_books_no_wait_nor_disk_read():
    # off its CPU with no voluntary switch (nvcsw read: 0): the clocks' skew or steal, as a trace reads it
    got = _causes(_event(run_delay_ms=0.0, majflt=3, nvcsw=0))
    assert "wait" not in got and "disk_read" not in got

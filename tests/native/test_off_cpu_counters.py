"""The pass thread's clocks for off-CPU time: its CPU time, voluntary switches, storage reads and major
faults, recorded at pass boundaries always and at module boundaries only after the thread left its CPU;
wall less CPU less run-queue delay across a sleep is at least the sleep; a cold read shows as storage
reads (where the page cache can be dropped here)."""

import os
import sys
import time
from pathlib import Path

import pytest

from warmprof import _native, timeline
from warmprof.timeline import (
    COUNTER,
    OFF_CPU_COUNTERS,
    RUN_DELAY_COUNTER,
    STORAGE_READ_COUNTER,
    THREAD_CPU_COUNTER,
    VOLUNTARY_COUNTER,
    Recording,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import page_cache  # noqa: E402

pytestmark = pytest.mark.skipif(_native.thread_times() is None,
                                reason="no per-thread schedstat or RUSAGE_THREAD here: off-CPU time is not read")


def _series(tl, name):
    """(ts, values) of one counter on the recording's first thread (the test's)."""
    nid = tl.names.index(name) if name in tl.names else -1
    sel = (tl.kind == COUNTER) & (tl.name == nid) & (tl.thread == tl.thread[0])
    return tl.ts_ns[sel].tolist(), tl.value[sel].tolist()


def _blocked_ns(tl, k0, k1):
    """wall less CPU less run-queue delay between the k0-th and k1-th CPU samples."""
    ct, cv = _series(tl, THREAD_CPU_COUNTER)
    dt, dv = _series(tl, RUN_DELAY_COUNTER)

    def delay_at(t):
        return [v for ts, v in zip(dt, dv) if ts <= t][-1]

    return (ct[k1] - ct[k0]) - (cv[k1] - cv[k0]) - (delay_at(ct[k1]) - delay_at(ct[k0]))


def test_every_counter_is_recorded_at_a_pass_boundary_and_after_a_sleep():
    nid = timeline.name_id("module:test_off_cpu_sleep")
    with Recording() as rec:
        timeline.sample_host()
        _native.module_enter(nid, True)
        t0 = time.monotonic_ns()
        time.sleep(0.02)
        slept = time.monotonic_ns() - t0
        _native.module_exit(nid)
        timeline.sample_host()
    tl = rec.drain()
    for name in OFF_CPU_COUNTERS:
        ts, _ = _series(tl, name)
        assert len(ts) >= 3, name  # both pass boundaries, and the exit after the sleep
    _, vol = _series(tl, VOLUNTARY_COUNTER)
    assert vol[-1] > vol[0]
    ct, _ = _series(tl, THREAD_CPU_COUNTER)
    exit_k = max(k for k, t in enumerate(ct) if t < ct[-1])  # the last sample before the closing pass boundary
    blocked = _blocked_ns(tl, 0, exit_k)
    # the kernel sleeps at least what was asked; the thread cannot be blocked longer than it was away
    assert 0.95 * 20e6 <= blocked <= slept + 2e6


def test_quiet_boundaries_do_not_read_the_cpu_clock():
    nid = timeline.name_id("module:test_off_cpu_quiet")
    with Recording() as rec:
        _native.begin_section(1)
        timeline.sample_host()
        for _ in range(200):
            _native.module_enter(nid, True)
            _native.module_exit(nid)
    tl = rec.drain()
    boundaries, _ = _series(tl, RUN_DELAY_COUNTER)
    cpu, _ = _series(tl, THREAD_CPU_COUNTER)
    # module boundaries sample the host counters at most once a gap (instruments/modules.py): 200 empty
    # calls in a row sample rarely, the section's own sample always; each sample reads the run-queue delay
    assert 1 <= len(boundaries) <= 401
    # the CPU clock only where the thread left its CPU since the sample before: a busy machine
    # preempts now and then, never at most samples
    assert len(cpu) <= len(boundaries) and (len(boundaries) < 20 or len(cpu) < len(boundaries) / 2)


def test_thread_times_reads_what_the_boundaries_record():
    a = _native.thread_times()
    time.sleep(0.01)
    b = _native.thread_times()
    assert set(a) == {"ns", "cpu_ns", "run_delay_ns", "voluntary", "storage_read_bytes", "major_faults"}
    assert b["voluntary"] > a["voluntary"] and b["ns"] - a["ns"] >= 10e6
    assert (b["ns"] - a["ns"]) - (b["cpu_ns"] - a["cpu_ns"]) - (b["run_delay_ns"] - a["run_delay_ns"]) >= 0.95 * 10e6


def test_a_cold_read_is_counted_as_bytes_read_from_storage(tmp_path):
    path = str(tmp_path / "cold.bin")
    page_cache.make_file(path, 4 << 20)
    why = page_cache.drop(path)
    if why:
        pytest.skip(why)
    nid = timeline.name_id("module:test_off_cpu_read")
    buf = bytearray(4 << 20)
    with Recording() as rec:
        timeline.sample_host()
        _native.module_enter(nid, True)
        with open(path, "rb", buffering=0) as f:
            f.readinto(buf)
        _native.module_exit(nid)
        timeline.sample_host()
    os.unlink(path)
    tl = rec.drain()
    _, read = _series(tl, STORAGE_READ_COUNTER)
    assert read[-1] - read[0] >= 0.9 * (4 << 20)

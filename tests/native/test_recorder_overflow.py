"""A full buffer drops records and counts them; it never grows and never crashes."""

import threading

import numpy as np
import pytest

from warmprof import _native, timeline
from warmprof.timeline import BEGIN, END, Recording

SMALL = 64


@pytest.fixture
def small_capacity(recorder_capacity):
    recorder_capacity(SMALL)
    return SMALL


def test_a_full_buffer_keeps_the_first_records_and_counts_the_rest(small_capacity):
    nid = timeline.name_id("test:overflow")
    with Recording() as rec:
        for i in range(1000):
            timeline.instant(timeline.STRUCTURE, nid, i)
    tl = rec.drain()
    assert len(tl) == small_capacity
    assert tl.dropped == 1000 - small_capacity
    assert np.array_equal(tl.value, np.arange(small_capacity))


def test_spans_past_capacity_are_dropped_without_error(small_capacity):
    nid = timeline.name_id("test:overflow_spans")
    with Recording() as rec:
        for _ in range(500):
            timeline.begin(timeline.STRUCTURE, nid)
            timeline.end(timeline.STRUCTURE, nid)
        timeline.sample_host()  # minor, major faults, RSS, file bytes, threads (+ run delay, involuntary switches,
        # and the thread's CPU time, voluntary switches, storage reads and major faults)
    tl = rec.drain()
    assert len(tl) == small_capacity
    host_counters = 5 + 2 * (_native.thread_schedstat() is not None) + 4 * (_native.thread_times() is not None)
    assert tl.dropped == 1000 + host_counters - small_capacity
    assert np.array_equal(tl.kind, np.tile(np.array([BEGIN, END], dtype=np.uint8), small_capacity // 2))


def test_capacity_is_per_thread(small_capacity):
    nids = [timeline.name_id(f"test:overflow_thread{k}") for k in range(2)]

    def fill(nid: int) -> None:
        for i in range(200):
            timeline.instant(timeline.STRUCTURE, nid, i)

    with Recording() as rec:
        workers = [threading.Thread(target=fill, args=(nid,)) for nid in nids]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    tl = rec.drain()
    for nid in nids:
        assert int(np.count_nonzero(tl.name == nid)) == small_capacity
    assert tl.dropped == 2 * (200 - small_capacity)


def test_the_next_recording_starts_with_room_and_no_drops(small_capacity):
    nid = timeline.name_id("test:overflow_again")
    with Recording() as rec:
        for _ in range(small_capacity * 2):
            timeline.instant(timeline.STRUCTURE, nid)
    assert rec.drain().dropped == small_capacity
    with Recording() as rec:
        timeline.instant(timeline.STRUCTURE, nid)
    tl = rec.drain()
    assert tl.dropped == 0 and len(tl) == 1


def test_capacity_reports_the_setting_and_cannot_change_while_recording(small_capacity):
    assert _native._testing.capacity() == small_capacity
    with Recording():
        with pytest.raises(ValueError, match="while recording"):
            _native._testing.set_capacity(small_capacity * 2)
    assert _native._testing.capacity() == small_capacity


def test_restoring_a_larger_capacity_makes_room_again():
    previous = _native._testing.capacity()
    _native._testing.set_capacity(SMALL)
    _native._testing.set_capacity(previous)
    assert _native._testing.capacity() == previous
    nid = timeline.name_id("test:overflow_restored")
    with Recording() as rec:
        for _ in range(1000):
            timeline.instant(timeline.STRUCTURE, nid)
    tl = rec.drain()
    assert tl.dropped == 0 and len(tl) == 1000

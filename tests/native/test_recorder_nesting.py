"""Records come back in the order they were made, nested spans keep their structure."""

import numpy as np
import pytest

from warmprof import _native, timeline
from warmprof.errors import WarmprofError
from warmprof.timeline import BEGIN, COUNTER, END, INSTANT, Recording


def _drain_after(body) -> timeline.Timeline:
    with Recording() as rec:
        body()
    return rec.drain()


def _own_records(tl: timeline.Timeline, names: set[str]) -> list[tuple[int, int, str, int]]:
    """(kind, cause, name, value) of the records whose names are in `names`, in drained order."""
    return [
        (int(tl.kind[i]), int(tl.cause[i]), tl.name_of(i), int(tl.value[i]))
        for i in range(len(tl))
        if tl.name_of(i) in names
    ]


def test_nested_spans_come_back_in_order():
    outer, inner = timeline.name_id("test:outer"), timeline.name_id("test:inner")
    mark, count = timeline.name_id("test:mark"), timeline.name_id("test:count")

    def body():
        timeline.begin(timeline.STRUCTURE, outer)
        timeline.begin(timeline.JIT_COMPILE, inner)
        timeline.instant(timeline.JIT_COMPILE, mark, 7)
        timeline.counter(count, -3)
        timeline.end(timeline.JIT_COMPILE, inner)
        timeline.end(timeline.STRUCTURE, outer)

    tl = _drain_after(body)
    assert tl.dropped == 0
    assert _own_records(tl, {"test:outer", "test:inner", "test:mark", "test:count"}) == [
        (BEGIN, timeline.STRUCTURE, "test:outer", 0),
        (BEGIN, timeline.JIT_COMPILE, "test:inner", 0),
        (INSTANT, timeline.JIT_COMPILE, "test:mark", 7),
        (COUNTER, timeline.STRUCTURE, "test:count", -3),
        (END, timeline.JIT_COMPILE, "test:inner", 0),
        (END, timeline.STRUCTURE, "test:outer", 0),
    ]
    assert np.all(np.diff(tl.ts_ns) >= 0)


def test_deep_nesting_balances_and_closes_innermost_first():
    ids = [timeline.name_id(f"test:depth{d}") for d in range(50)]

    def body():
        for nid in ids:
            timeline.begin(timeline.STRUCTURE, nid)
        for nid in reversed(ids):
            timeline.end(timeline.STRUCTURE, nid)

    tl = _drain_after(body)
    names = {f"test:depth{d}" for d in range(50)}
    recs = _own_records(tl, names)
    assert [r[0] for r in recs] == [BEGIN] * 50 + [END] * 50
    opened = [r[2] for r in recs[:50]]
    closed = [r[2] for r in recs[50:]]
    assert closed == list(reversed(opened))


def test_drained_arrays_share_one_index_and_have_fixed_dtypes():
    nid = timeline.name_id("test:dtypes")

    def body():
        for _ in range(10):
            timeline.begin(timeline.STRUCTURE, nid)
            timeline.end(timeline.STRUCTURE, nid)

    with Recording():
        body()
        _native.stop()
        d = _native.drain()
    lengths = {len(d[k]) for k in ("ts_ns", "kind", "cause", "name", "value", "thread")}
    assert lengths == {20}
    assert d["ts_ns"].dtype == np.int64 and d["value"].dtype == np.int64
    assert d["kind"].dtype == np.uint8 and d["cause"].dtype == np.uint8
    assert d["name"].dtype == np.uint32 and d["thread"].dtype == np.uint16
    assert d["names"][nid] == "test:dtypes"
    assert d["dropped"] == 0 and d["threads"] >= 1


def test_span_context_manager_closes_on_exception():
    def body():
        with pytest.raises(RuntimeError):
            with timeline.span(timeline.RUNTIME_INIT, "test:raises"):
                raise RuntimeError("boom")

    recs = _own_records(_drain_after(body), {"test:raises"})
    assert [r[0] for r in recs] == [BEGIN, END]
    assert {r[1] for r in recs} == {timeline.RUNTIME_INIT}


def test_records_after_stop_are_not_kept():
    nid = timeline.name_id("test:after_stop")
    with Recording() as rec:
        timeline.begin(timeline.STRUCTURE, nid)
    timeline.end(timeline.STRUCTURE, nid)  # recorder off: silently not recorded
    recs = _own_records(rec.drain(), {"test:after_stop"})
    assert [r[0] for r in recs] == [BEGIN]


def test_a_new_recording_starts_empty():
    first, second = timeline.name_id("test:first"), timeline.name_id("test:second")
    _drain_after(lambda: timeline.instant(timeline.STRUCTURE, first))
    tl = _drain_after(lambda: timeline.instant(timeline.STRUCTURE, second))
    assert "test:first" not in {tl.name_of(i) for i in range(len(tl))}
    assert len(_own_records(tl, {"test:second"})) == 1


def test_records_with_explicit_times_sort_into_place():
    live = timeline.name_id("test:live")

    def tick_clock_ns() -> int:
        # Times on the recorder's own clock: this test is about sorting, not about how closely
        # the tick calibration follows CLOCK_MONOTONIC (test_clock_calibration covers that).
        return _native.ticks_to_ns(_native.now_ticks())

    def body():
        t_before = tick_clock_ns()
        timeline.instant(timeline.STRUCTURE, live)
        # Learned after the fact: a span that began before the live instant and ended after it.
        timeline.record_span_ns(timeline.ALGORITHM_SELECTION, "test:late", t_before - 1000, tick_clock_ns() + 1000)

    recs = _own_records(_drain_after(body), {"test:live", "test:late"})
    assert [(r[0], r[2]) for r in recs] == [(BEGIN, "test:late"), (INSTANT, "test:live"), (END, "test:late")]


def test_record_span_ns_refuses_a_span_that_ends_before_it_starts():
    with Recording():
        with pytest.raises(WarmprofError, match="ends before it starts"):
            timeline.record_span_ns(timeline.STRUCTURE, "test:backwards", 2000, 1000)


def test_sample_host_records_the_host_counters_and_rss_only_when_asked():
    names = {"host:minor_faults", "host:major_faults", "host:rss_bytes", "host:file_bytes", "host:threads"}
    with Recording() as rec:
        timeline.sample_host()
    recs = _own_records(rec.drain(), names)
    assert sorted(r[2] for r in recs) == sorted(names)
    assert all(r[0] == COUNTER and r[3] >= 0 for r in recs)
    values = dict((r[2], r[3]) for r in recs)
    assert values["host:rss_bytes"] > 0 and values["host:threads"] >= 1
    assert 0 < values["host:file_bytes"] < values["host:rss_bytes"]  # the loaded libraries' pages, part of RSS
    with Recording() as rec:
        timeline.sample_host(False)  # module boundaries: faults and threads only
    assert sorted(r[2] for r in _own_records(rec.drain(), names)) == sorted(names - {"host:rss_bytes", "host:file_bytes"})


def test_recording_is_not_reentrant():
    with Recording():
        with pytest.raises(WarmprofError, match="already active"):
            with Recording():
                pass
        assert timeline.active()

"""Bad arguments are refused with an error that says what was wrong, and record nothing."""

import pytest

from warmprof import _native, timeline
from warmprof.timeline import Recording

NID = timeline.name_id("test:bad_arguments")
UNKNOWN = 10**9

HOT_PATH_CASES = [
    (_native.begin, ("a", NID), TypeError, "cause must be an int, not str"),
    (_native.begin, (1.0, NID), TypeError, "cause must be an int, not float"),
    (_native.begin, (0, "x"), TypeError, "name id must be an int, not str"),
    (_native.begin, (_native.NUM_CAUSES, NID), ValueError, f"cause {_native.NUM_CAUSES} out of range"),
    (_native.begin, (-1, NID), ValueError, "cause must be a non-negative int"),
    (_native.begin, (0, UNKNOWN), ValueError, "name id 1000000000 out of range"),
    (_native.begin, (0,), TypeError, r"begin\(\) takes exactly 2 arguments \(1 given\)"),
    (_native.begin, (0, NID, 0), TypeError, r"begin\(\) takes exactly 2 arguments \(3 given\)"),
    (_native.end, (), TypeError, r"end\(\) takes exactly 2 arguments \(0 given\)"),
    (_native.end, (0, -3), ValueError, "name id must be a non-negative int"),
    (_native.instant, (0, NID, "v"), TypeError, "value must be an int, not str"),
    (_native.instant, (0, NID, 1.5), TypeError, "value must be an int, not float"),
    (_native.instant, (0, NID, 2**70), OverflowError, "too big"),
    (_native.instant, (0, NID, 0, 0), TypeError, r"instant\(\) takes 2 to 3 arguments \(4 given\)"),
    (_native.counter, (NID,), TypeError, r"counter\(\) takes 2 arguments \(1 given\)"),
    (_native.counter, ("x", 1), TypeError, "name id must be an int"),
    (_native.counter, (NID, None), TypeError, "value must be an int, not NoneType"),
    (_native.counter, (UNKNOWN, 1), ValueError, "name id .* out of range"),
    (_native.sample_host, (1,), TypeError, r"sample_host\(rss\): rss must be True or False, not int"),
    (_native.sample_host, (True, 2), TypeError, r"sample_host\(\) takes at most 1 argument \(2 given\)"),
    (_native.now_ticks, (1,), TypeError, r"now_ticks\(\) takes no arguments"),
]


@pytest.mark.parametrize("fn, args, error, message", HOT_PATH_CASES)
def test_hot_entry_points_refuse_bad_arguments_and_record_nothing(fn, args, error, message):
    with Recording() as rec:
        with pytest.raises(error, match=message):
            fn(*args)
    tl = rec.drain()
    assert len(tl) == 0 and tl.dropped == 0


@pytest.mark.parametrize("fn", [_native.begin, _native.end, _native.instant])
def test_hot_entry_points_take_no_keywords(fn):
    with pytest.raises(TypeError, match="keyword"):
        fn(cause=0, name=NID)


COLD_CASES = [
    (_native._testing.set_capacity, (0,), ValueError, "capacity must be positive, got 0"),
    (_native._testing.set_capacity, (-5,), ValueError, "capacity must be positive, got -5"),
    (_native._testing.set_capacity, ("x",), TypeError, "incompatible function arguments"),
    # its byte count wrapped: 2**60 records mapped a few bytes and the next recording segfaulted
    (_native._testing.set_capacity, (2**60,), ValueError, "capacity must be at most 67108864 records"),
    (_native._testing.set_capacity, (2**26 + 1,), ValueError, "at most 67108864"),
    (_native._testing.set_capacity, (2**63,), TypeError, "incompatible function arguments"),
    (_native.calibrate_fault_cost, (-1,), ValueError, "bytes must be positive, got -1"),
    (_native.calibrate_fault_cost, (4096, 0), ValueError, "trials must be positive, got 0"),
    (_native.fresh_allocation_ns, (0,), ValueError, "bytes must be positive"),
    (_native.fresh_allocation_ns, (4096, -1), ValueError, "trials must be positive"),
    (_native.thread_start_ns, (0,), ValueError, "trials must be positive"),
    (_native.calibrate_clock, (0, 1.0), ValueError, "pairs must be positive"),
    (_native.calibrate_clock, (10, 0.0), ValueError, "duration_ms must be positive"),
    (_native.calibrate_clock, (10, float("nan")), ValueError, "duration_ms must be positive"),
    (_native.cpp_span_cost_ns, (NID, 0), ValueError, "iterations must be positive"),
    (_native.clock_read_cost_ns, (0,), ValueError, "iterations must be positive"),
    (_native.cpp_span_cost_ns, (UNKNOWN, 10), ValueError, "unknown name id"),
    (_native.record_at, (4, 0, NID, 0, 1), ValueError, "kind must be 0..3"),
    (_native.record_at, (0, _native.NUM_CAUSES, NID, 0, 1), ValueError, "cause out of range"),
    (_native.record_at, (0, 0, UNKNOWN, 0, 1), ValueError, "unknown name id"),
    (_native.intern, (5,), TypeError, "incompatible function arguments"),
    (_native.ticks_to_ns, (-1,), TypeError, "incompatible function arguments"),
    (_native._testing.median, (["a"],), TypeError, "incompatible function arguments"),
    (_native._testing.percentile, ([1.0, 2.0, 3.0], -1e12), ValueError, r"q must be within \[0, 1\]"),
    (_native._testing.percentile, ([1.0, 2.0, 3.0], 5.0), ValueError, r"q must be within \[0, 1\]"),
    (_native._testing.percentile, ([1.0, 2.0, 3.0], float("nan")), ValueError, r"q must be within \[0, 1\]"),
]


@pytest.mark.parametrize("fn, args, error, message", COLD_CASES)
def test_cold_functions_refuse_bad_arguments(fn, args, error, message):
    with pytest.raises(error, match=message):
        fn(*args)


def test_a_refused_set_capacity_keeps_the_old_capacity():
    before = _native._testing.capacity()
    with pytest.raises(ValueError):
        _native._testing.set_capacity(0)
    assert _native._testing.capacity() == before


def test_cpp_span_cost_refuses_to_run_inside_a_recording_and_keeps_its_records():
    with Recording() as rec:
        timeline.instant(timeline.STRUCTURE, NID, 1)
        with pytest.raises(ValueError, match="while a recording is active"):
            _native.cpp_span_cost_ns(NID, 100)
    tl = rec.drain()
    assert int((tl.name == NID).sum()) == 1


def test_cpp_span_cost_refuses_a_buffer_too_small_for_a_span():
    previous = _native._testing.capacity()
    _native._testing.set_capacity(1)
    try:
        with pytest.raises(ValueError, match="capacity of at least 2"):
            _native.cpp_span_cost_ns(NID, 10)
    finally:
        _native._testing.set_capacity(previous)

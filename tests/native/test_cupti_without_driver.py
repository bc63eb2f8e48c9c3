"""On a machine with the CUDA toolkit but no driver: CUPTI and CUDA events are compiled, off, and say why.

Starting the instruments here must leave nothing behind (no subscription, no event slots, no
recording) and carry the native reason into their summaries.
"""

from __future__ import annotations

import re

import pytest
from libcuda_probe import has_libcuda

import warmprof
from warmprof import _native
from warmprof.instruments.cuda import Cupti
from warmprof.instruments.cuda_events import CudaEvents
from warmprof.timeline import Recording


pytestmark = pytest.mark.skipif(has_libcuda(), reason="libcuda.so.1 is present: this file covers the driverless case")


@pytest.fixture(autouse=True)
def nothing_left_subscribed():
    yield
    assert _native.cupti_active() is False


@pytest.mark.parametrize("name", ["cupti", "cuda_events"])
def test_compiled_here_but_off_for_want_of_a_driver(name):
    entry = warmprof.backends()[name]
    if not entry["compiled"]:
        pytest.skip(f"{name} is a stub in this build: {entry['reason']}")
    assert entry["available"] is False
    assert "no NVIDIA driver" in entry["reason"] and "libcuda.so.1" in entry["reason"]


def test_cupti_start_returns_the_reason_and_subscribes_nothing():
    reason = warmprof.backends()["cupti"]["reason"]
    before = _native.cupti_stats()
    assert _native.cupti_start() == reason
    assert _native.cupti_start() == reason  # repeatable, no state kept
    assert _native.cupti_active() is False
    _native.cupti_stop()
    _native.cupti_stop()
    assert _native.cupti_stats()["subscribe_ns"] == before["subscribe_ns"] == 0.0


def test_cuda_event_calls_raise_the_reason():
    reason = warmprof.backends()["cuda_events"]["reason"]
    assert reason  # "no NVIDIA driver: ..." here; "built without CUDA headers ..." in a build without them
    with pytest.raises(RuntimeError, match=re.escape(reason.split(":")[0])):
        _native.cuda_event_record()
    with pytest.raises(RuntimeError, match=re.escape(reason.split(":")[0])):
        _native.cuda_event_elapsed_ms(0, 1)
    _native.cuda_events_release()
    assert _native.cuda_events_pool_size() == 0


def test_cupti_instrument_reports_the_reason_and_leaves_nothing_behind():
    reason = warmprof.backends()["cupti"]["reason"]
    names_before = len(_native.names())
    with Recording() as rec:
        with Cupti() as inst:
            inst.mark_pass("first")
            inst.end_pass("first")
    tl = rec.drain()
    assert inst.reason == reason and not inst.available
    assert inst.summary() == {"active": False, "reason": reason}
    assert not any(n.startswith("cupti:") for n in (tl.name_of(i) for i in range(len(tl))))
    assert _native.cupti_active() is False
    assert len(_native.names()) == names_before


def test_cuda_events_instrument_reports_the_reason():
    with CudaEvents(stream=0) as inst:
        inst.mark_pass("first")
        inst.end_pass("first")
    assert inst.summary() == {"active": False, "reason": warmprof.backends()["cuda_events"]["reason"]}
    assert _native.cuda_events_pool_size() == 0


@pytest.mark.parametrize("start,end", [(-1, 0), (0, -1), (10**6, 0)])
def test_cuda_event_elapsed_bad_slots_never_crash(start, end):
    with pytest.raises(RuntimeError):
        _native.cuda_event_elapsed_ms(start, end)

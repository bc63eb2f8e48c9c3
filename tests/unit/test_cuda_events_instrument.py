"""The CUDA-events instrument's Python logic, with the native events faked: which stream and
device each event goes to, and where in the pass the end event is recorded (before the host sync).

The native side (each event in its stream's own context) is tested against a fake libcuda in
tests/native/test_cuda_events_context.py.
"""

from __future__ import annotations

import itertools
import types

import pytest
from warmprof.instruments import cuda_events
from warmprof.timeline import Recording
from warmprof.traces.passes import run_pass


class FakeEvents(types.SimpleNamespace):
    """warmprof._native's CUDA-event entry points; `log` keeps every call in order."""

    def __init__(self, log: list, fail_record_after: int | None = None) -> None:
        super().__init__()
        self.log = log
        self.slots = itertools.count()
        self.fail_after = fail_record_after

    def backends(self):
        return {"cuda_events": {"compiled": True, "available": True, "reason": ""}}

    def cuda_event_record(self, stream: int = 0, device: int = -1) -> int:
        slot = next(self.slots)
        if self.fail_after is not None and slot >= self.fail_after:
            raise RuntimeError("cuEventRecord failed: CUresult 400: invalid resource handle")
        self.log.append(("record", stream, device, slot))
        return slot

    def cuda_event_elapsed_ms(self, start: int, end: int) -> float:
        self.log.append(("elapsed", start, end))
        return 1.5 * (end - start)

    def cuda_events_release(self) -> None:
        self.log.append(("release",))


@pytest.fixture
def log(monkeypatch) -> list:
    calls: list = []
    monkeypatch.setattr(cuda_events, "_native", FakeEvents(calls))
    return calls


def test_a_pass_is_timed_from_its_start_to_before_the_host_sync(log):
    with Recording(), cuda_events.CudaEvents(device=1, stream=lambda: 77) as inst:
        run_pass(lambda: log.append(("model",)), (), {}, "first", [inst], lambda: log.append(("sync",)))
    in_pass = log[log.index(("release",)) + 1:]
    assert [c[0] for c in in_pass] == ["record", "model", "record", "sync", "elapsed", "release"]
    assert {(c[1], c[2]) for c in log if c[0] == "record"} == {(77, 1)}  # the stream, and its device
    assert inst.summary()["gpu_ms"] == {"first": 1.5}


def test_a_model_that_raises_leaves_no_gpu_time_and_no_error(log):
    def broken():
        raise ValueError("model failed")

    with Recording(), cuda_events.CudaEvents(device=0, stream=5) as inst:
        with pytest.raises(ValueError):
            run_pass(broken, (), {}, "first", [inst], lambda: log.append(("sync",)))
    assert inst.summary() == {"active": True, "gpu_ms": {}}
    assert not any(c[0] == "elapsed" for c in log)


def test_the_end_event_goes_on_the_start_events_stream(log):
    """A stream callable read at each record would let a pass end on another stream."""
    streams = iter([10, 20, 30])  # the pool warm-up, the pass start, (never) the pass end
    with cuda_events.CudaEvents(device=0, stream=lambda: next(streams)) as inst:
        inst.mark_pass("first")
        inst.before_sync("first")
        inst.end_pass("first")
    warm_up = [10] * (2 * cuda_events.PASSES_AHEAD)  # the pool filled before the passes, on one stream read
    assert [c[1] for c in log if c[0] == "record"] == warm_up + [20, 20]


def test_the_pool_is_filled_for_the_first_pass_and_the_seen_rerun_before_either(log):
    """Slots come back only at exit: with two events made ahead, the seen re-run created its own
    (cuEventCreate inside a timed pass)."""
    with cuda_events.CudaEvents(device=0, stream=7):
        pass
    assert len([c for c in log if c[0] == "record"]) >= 4


def test_failing_at_enter_turns_the_instrument_off(monkeypatch):
    monkeypatch.setattr(cuda_events, "_native", FakeEvents([], fail_record_after=0))
    with cuda_events.CudaEvents(device=0, stream=0) as inst:
        inst.mark_pass("first")
        inst.before_sync("first")
        inst.end_pass("first")
    assert "invalid resource handle" in inst.reason
    assert "gpu_ms" not in inst.summary()


def test_failing_mid_trace_leaves_a_note(monkeypatch):
    monkeypatch.setattr(cuda_events, "_native", FakeEvents([], fail_record_after=2 * cuda_events.PASSES_AHEAD + 1))  # the pass end fails
    with cuda_events.CudaEvents(device=0, stream=0) as inst:
        inst.mark_pass("first")
        inst.before_sync("first")
        inst.end_pass("first")
    summary = inst.summary()
    assert summary["gpu_ms"] == {}
    assert any("cuEventRecord failed" in n for n in summary["notes"])


@pytest.mark.parametrize("device,index", [(3, 3), ("cuda:2", 2), ("cpu", cuda_events.NO_DEVICE)])
def test_device_index(device, index):
    pytest.importorskip("torch")
    assert cuda_events.device_index(device) == index


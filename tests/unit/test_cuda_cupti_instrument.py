"""The CUPTI and CUDA-event instruments' Python logic, with the native subscription faked.

The fake stands in only for what needs a driver (backends, cupti_start/stop, cuda events); the
callbacks still go through the real native handler via _testing.cupti_inject, so per-pass launch counts
and first-seen kernels are the native ones.
"""

from __future__ import annotations

import itertools
import types

import pytest

from warmprof import _native, timeline
from warmprof.instruments import cuda
from warmprof.timeline import PROFILER_OVERHEAD, Recording

if not _native.backends()["cupti"]["compiled"]:
    pytest.skip("the CUPTI backend is not compiled into this build", allow_module_level=True)

LAUNCH = 307  # CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel (checked against the header in tests/native)
_kernels = itertools.count(50_000)


class FakeNative(types.SimpleNamespace):
    """warmprof._native with a subscription that always succeeds (or fails with `start_reason`)."""

    def __init__(self, start_reason: str = "", subscribe_ns: float = 2.5e6) -> None:
        super().__init__()
        self.start_reason = start_reason
        self.subscribe_ns = subscribe_ns
        self.active = False
        self.stops = 0

    def backends(self):
        entry = {"compiled": True, "available": True, "reason": ""}
        return {"cupti": dict(entry), "cuda_events": dict(entry), "metal": dict(entry)}

    def cupti_start(self) -> str:
        if self.start_reason:
            return self.start_reason
        self.active = True
        return ""

    def cupti_stop(self) -> None:
        self.stops += 1
        self.active = False

    def cupti_stats(self):
        s = _native.cupti_stats()
        s["subscribe_ns"] = self.subscribe_ns
        return s


@pytest.fixture
def fake(monkeypatch):
    f = FakeNative()
    monkeypatch.setattr(cuda, "_native", f)
    return f


def launch(n: int, kernel: int | None = None) -> None:
    for _ in range(n):
        k = next(_kernels) if kernel is None else kernel
        _native._testing.cupti_inject(1, LAUNCH, True, _native.now_ticks(), k)
        _native._testing.cupti_inject(1, LAUNCH, False, _native.now_ticks(), k)


def test_pass_delta_is_pure():
    before = {"kernel_launches": 10, "new_kernel_count": 2, "new_kernels": ["a", "b"], "callbacks": 40, "pool_hits": 1}
    after = {"kernel_launches": 25, "new_kernel_count": 3, "new_kernels": ["a", "b", "c"], "callbacks": 70,
             "pool_hits": 4}
    assert cuda.pass_delta(before, after) == {"kernel_launches": 15, "new_kernels": 1, "new_kernel_names": ["c"],
                                              "callbacks": 30, "pool_hits": 3}


def test_new_kernels_are_counted_past_the_names_kept():
    before = {"kernel_launches": 0, "new_kernel_count": 16384, "new_kernels": ["k"] * 16384, "callbacks": 0,
              "pool_hits": 0}
    after = dict(before, new_kernel_count=16390)  # the names stop at the arena's room, the count does not
    assert cuda.pass_delta(before, after)["new_kernels"] == 6


def test_subscribe_cost_is_a_profiler_overhead_span(fake):
    with Recording() as rec:
        with cuda.Cupti() as inst:
            assert fake.active
    tl = rec.drain()
    spans = [(int(tl.cause[i]), tl.name_of(i), int(tl.ts_ns[i])) for i in range(len(tl))
             if tl.name_of(i) == "cupti:subscribe"]
    assert [s[0] for s in spans] == [PROFILER_OVERHEAD, PROFILER_OVERHEAD]
    assert spans[1][2] - spans[0][2] == pytest.approx(2.5e6, rel=1e-3, abs=100)
    assert inst.summary()["subscribe_ms"] == pytest.approx(2.5)
    assert fake.stops == 1 and not fake.active


def test_per_pass_launches_and_first_seen_kernels(fake):
    repeated = next(_kernels)
    with Recording():
        with cuda.Cupti() as inst:
            inst.mark_pass("first")
            launch(3)
            launch(2, kernel=repeated)
            inst.end_pass("first")
            inst.mark_pass("seen_rerun")
            launch(4, kernel=repeated)
            inst.end_pass("seen_rerun")
    passes = inst.summary()["passes"]
    assert passes["first"]["kernel_launches"] == 5
    assert passes["first"]["new_kernels"] == 4
    assert passes["seen_rerun"] == {"kernel_launches": 4, "new_kernels": 0, "new_kernel_names": [], "callbacks": 8,
                                    "pool_hits": 0}


def test_each_pass_samples_the_callback_counter_at_its_start_and_end(fake):
    """The counter attribution's cupti_callback_cost reads: cumulative callbacks, two samples a pass."""
    with Recording() as rec:
        with cuda.Cupti() as inst:
            inst.mark_pass("first")
            launch(6)
            inst.end_pass("first")
    tl = rec.drain()
    samples = [int(tl.value[i]) for i in range(len(tl))
               if tl.kind[i] == timeline.COUNTER and tl.name_of(i) == timeline.CUPTI_CALLBACKS]
    assert len(samples) == 2 and samples[1] - samples[0] == 12
    assert inst.summary()["passes"]["first"]["callbacks"] == 12


def test_callbacks_an_older_libcupti_refused_are_noted(fake, monkeypatch):
    real = fake.cupti_stats
    monkeypatch.setattr(fake, "cupti_stats", lambda: dict(real(), refused_callbacks=3))
    with Recording():
        with cuda.Cupti() as inst:
            pass
    assert any("refused 3 of the callbacks" in n for n in inst.summary()["notes"])


def test_stop_runs_even_when_the_pass_raises(fake):
    with pytest.raises(ZeroDivisionError):
        with Recording():
            with cuda.Cupti() as inst:
                inst.mark_pass("first")
                1 / 0
    assert fake.stops == 1 and not fake.active
    assert "first" in inst.passes  # the open pass was closed on exit


def test_another_subscriber_turns_the_instrument_off_with_the_reason(monkeypatch):
    held = "another CUPTI subscriber holds the process (torch.profiler or Nsight): CUPTI for kineto"
    fake = FakeNative(start_reason=held)
    monkeypatch.setattr(cuda, "_native", fake)
    with Recording():
        with cuda.Cupti() as inst:
            inst.mark_pass("first")
            inst.end_pass("first")
    assert inst.reason == held
    summary = inst.summary()
    assert summary["active"] is False and summary["reason"] == held
    assert any("torch/CuPy instruments" in n for n in summary["notes"])
    assert fake.stops == 0


class FakeEvents(FakeNative):
    def __init__(self, fail_record_after: int | None = None) -> None:
        super().__init__()
        self.slots = itertools.count()
        self.released = 0
        self.streams: list[int] = []
        self.fail_after = fail_record_after

    def cuda_event_record(self, stream: int = 0) -> int:
        slot = next(self.slots)
        if self.fail_after is not None and slot >= self.fail_after:
            raise RuntimeError("cuEventRecord failed: CUresult 700")
        self.streams.append(stream)
        return slot

    def cuda_event_elapsed_ms(self, start: int, end: int) -> float:
        return 1.5 * (end - start)

    def cuda_events_release(self) -> None:
        self.released += 1


def test_cuda_events_time_each_pass_on_the_given_stream(monkeypatch):
    fake = FakeEvents()
    monkeypatch.setattr(cuda, "_native", fake)
    with cuda.CudaEvents(stream=lambda: 1234) as inst:
        inst.mark_pass("first")
        inst.end_pass("first")
    assert inst.summary()["gpu_ms"] == {"first": 1.5}
    assert set(fake.streams) == {1234}
    assert fake.released == 2  # after the pool warm-up, and on exit


def test_cuda_events_failing_at_enter_turn_the_instrument_off(monkeypatch):
    monkeypatch.setattr(cuda, "_native", FakeEvents(fail_record_after=0))
    with cuda.CudaEvents(stream=0) as inst:
        inst.mark_pass("first")
        inst.end_pass("first")
    assert "cuEventRecord failed" in inst.reason
    assert "gpu_ms" not in inst.summary()


def test_cuda_events_failing_mid_trace_leave_a_note(monkeypatch):
    monkeypatch.setattr(cuda, "_native", FakeEvents(fail_record_after=3))
    with cuda.CudaEvents(stream=0) as inst:
        inst.mark_pass("first")
        inst.end_pass("first")
    summary = inst.summary()
    assert summary["gpu_ms"] == {}
    assert any("cuEventRecord failed" in n for n in summary["notes"])


def test_the_calibration_measures_the_cupti_handler_and_hands_it_to_attribution():
    from warmprof.traces import calibrate

    cost = calibrate.cupti_handler_cost(pairs=2000, batches=3)
    assert cost > 0
    costs = calibrate.MachineCosts(timer_overhead_ns=20.0, fault_cost_ns=500.0, fault_cost_per_page_ns=500.0,
                                   thread_start_ns=20_000.0, hook_cost_ns=4000.0, cupti_handler_ns=cost)
    assert costs.for_attribution().cupti_handler_ns == cost
    assert costs.to_dict()["cupti_handler_ns"] == cost  # kept in the report's protocol


def test_no_recording_left_behind():
    assert not timeline.active()

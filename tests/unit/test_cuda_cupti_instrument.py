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


TORN_DOWN = "the CUPTI subscription was torn down by another tool calling cuptiFinalize (cuptiGetCallbackState: CUPTI_ERROR_INVALID_PARAMETER)"


class FakeNative(types.SimpleNamespace):
    """warmprof._native with a subscription that always succeeds (or fails with `start_reason`).

    tear_down() stands for another tool calling cuptiFinalize: the native check and stop then
    report it, as the real ones do."""

    def __init__(self, start_reason: str = "", subscribe_ns: float = 2.5e6, cupti_entry: dict | None = None) -> None:
        super().__init__()
        self.start_reason = start_reason
        self.subscribe_ns = subscribe_ns
        self.cupti_entry = cupti_entry or {"compiled": True, "available": True, "reason": "", "path": "/fake/libcupti.so.12"}
        self.active = False
        self.stops = 0
        self.starts = 0
        self.torn_down = ""
        self.overheads: list[dict] = []  # CUPTI OVERHEAD records the next cupti_overheads() returns

    def backends(self):
        entry = {"compiled": True, "available": True, "reason": ""}
        return {"cupti": dict(self.cupti_entry), "cuda_events": dict(entry), "metal": dict(entry)}

    def cupti_start(self) -> str:
        self.starts += 1
        if self.start_reason:
            return self.start_reason
        self.active = True
        return ""

    def tear_down(self) -> None:
        self.torn_down = TORN_DOWN
        self.active = False

    def cupti_check(self) -> str:
        return self.torn_down

    def cupti_stop(self) -> str:
        self.stops += 1
        self.active = False
        why, self.torn_down = self.torn_down, ""
        return why

    def cupti_stats(self):
        s = _native.cupti_stats()
        s["subscribe_ns"] = self.subscribe_ns
        return s

    def cupti_overheads(self):
        records, self.overheads = self.overheads, []
        return {"records": records, "dropped": 0, "enabled": True, "reason": ""}


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
    assert summary["notes"] == [cuda.HELD_ELSEWHERE_NOTE]
    assert "torch.profiler" in cuda.HELD_ELSEWHERE_NOTE and "CUDA events" in cuda.HELD_ELSEWHERE_NOTE
    assert fake.stops == 0


def test_loaded_but_not_yet_subscribed_still_subscribes(monkeypatch):
    # backends() says available only after a subscribe succeeded; a loaded libcupti is tried.
    not_yet = {"compiled": True, "available": False, "path": "/fake/libcupti.so.12",
               "reason": "loaded, not yet subscribed (libcupti /fake/libcupti.so.12): ..."}
    fake = FakeNative(cupti_entry=not_yet)
    monkeypatch.setattr(cuda, "_native", fake)
    with Recording():
        with cuda.Cupti() as inst:
            assert fake.active
    assert inst.available and fake.starts == 1 and fake.stops == 1


def test_nothing_loaded_keeps_the_instrument_off_without_subscribing(monkeypatch):
    off = {"compiled": True, "available": False, "path": "", "reason": "libcupti not found (...)"}
    fake = FakeNative(cupti_entry=off)
    monkeypatch.setattr(cuda, "_native", fake)
    with cuda.Cupti() as inst:
        pass
    assert inst.reason == "libcupti not found (...)" and fake.starts == 0


def test_teardown_during_a_pass_marks_it_partial_and_says_where_data_stops(fake):
    with Recording():
        with cuda.Cupti() as inst:
            inst.mark_pass("first")
            launch(2)
            fake.tear_down()  # another tool calls cuptiFinalize
            inst.end_pass("first")
            inst.mark_pass("seen_rerun")
            launch(3)
            inst.end_pass("seen_rerun")
    summary = inst.summary()
    assert summary["passes"]["first"]["partial"] is True
    assert "seen_rerun" not in summary["passes"]  # no counts presented as if whole
    assert summary["stopped_early"] == {"at": "during pass 'first' (the subscription stood when it began)",
                                        "reason": TORN_DOWN}
    assert summary["notes"] == [f"CUPTI data stops during pass 'first' (the subscription stood when it began): "
                                f"{TORN_DOWN}; the other instruments carry on"]
    assert fake.stops == 1  # stop still runs, and its report of the teardown is not a second note


def test_teardown_between_passes_stops_before_the_next(fake):
    with Recording():
        with cuda.Cupti() as inst:
            inst.mark_pass("first")
            inst.end_pass("first")
            fake.tear_down()
            inst.mark_pass("seen_rerun")
            inst.end_pass("seen_rerun")
    summary = inst.summary()
    assert "partial" not in summary["passes"]["first"]
    assert "seen_rerun" not in summary["passes"]
    assert summary["stopped_early"]["at"] == "before pass 'seen_rerun'"


def test_teardown_seen_only_by_stop_is_a_note_not_an_error(fake):
    with Recording():
        with cuda.Cupti() as inst:
            inst.mark_pass("first")
            inst.end_pass("first")
            fake.tear_down()
    summary = inst.summary()
    assert summary["passes"]["first"]["kernel_launches"] == 0
    assert summary["stopped_early"] == {"at": "after the last instrumented pass", "reason": TORN_DOWN}
    assert inst.available  # CUPTI worked for every pass


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


def test_the_calibration_measures_the_cupti_handler_and_hands_it_to_attribution():
    from warmprof.traces import calibrate

    cost = calibrate.cupti_handler_cost(pairs=2000, batches=3)
    assert cost > 0
    costs = calibrate.MachineCosts(timer_overhead_ns=20.0, fault_cost_ns=500.0, fault_cost_per_page_ns=500.0,
                                   thread_start_ns=20_000.0, hook_cost_ns=4000.0, cupti_handler_ns=cost)
    assert costs.for_attribution().cupti_handler_ns == cost
    assert costs.to_dict()["cupti_handler_ns"] == cost  # kept in the report's protocol


# --- CUPTI delivered nothing (issue 25, item 9) -------------------------------------------------


def _two_passes(inst, work=None) -> None:
    for name in ("first", "seen_rerun"):
        inst.mark_pass(name)
        if work:
            work()
        inst.end_pass(name)


def test_a_subscription_with_no_callbacks_while_the_gpu_worked_is_cupti_delivering_nothing(fake):
    with Recording():
        with cuda.Cupti(gpu_ms=lambda: {"first": 3.0, "seen_rerun": 2.0}) as inst:
            _two_passes(inst)
    summary = inst.summary()
    assert summary["active"] is False
    assert summary["reason"].startswith("CUPTI delivered nothing")
    assert "5.000 ms of GPU work" in summary["reason"]
    assert fake.stops == 1  # still unsubscribed cleanly


def test_callbacks_or_no_gpu_work_leave_cupti_active(fake):
    with Recording():
        with cuda.Cupti(gpu_ms=lambda: {"first": 3.0}) as busy:
            _two_passes(busy, work=lambda: launch(1))
        with cuda.Cupti(gpu_ms=lambda: {"first": 0.0}) as idle:  # no evidence CUPTI missed anything
            _two_passes(idle)
        with cuda.Cupti() as unknown:  # no CUDA events to compare with
            _two_passes(unknown)
    assert [i.summary()["active"] for i in (busy, idle, unknown)] == [True, True, True]


def test_delivered_nothing_is_pure():
    assert cuda.delivered_nothing(0, {"first": 1.25}).startswith("CUPTI delivered nothing")
    assert cuda.delivered_nothing(4, {"first": 1.25}) == ""
    assert cuda.delivered_nothing(0, {}) == ""
    assert cuda.delivered_nothing(0, {"first": 0.0, "seen_rerun": -1.0}) == ""


def test_the_cuda_set_gives_cupti_the_cuda_events_gpu_times():
    from warmprof.instruments.cuda_set import cuda_instruments

    insts = cuda_instruments({"device": "cuda:0", "cupy": False})
    cupti = next(i for i in insts if i.name == "cupti")
    events = next(i for i in insts if i.name == "cuda_events")
    events.gpu_ms["first"] = 4.0
    assert cupti._gpu_ms() == {"first": 4.0}


# --- CUPTI's OVERHEAD records (issue 25, item 8) ------------------------------------------------


def _overhead(kind: str, cause: int, start_ns: int, end_ns: int, this_thread: bool = True) -> dict:
    return {"kind": kind, "cause": cause, "start_ns": start_ns, "end_ns": end_ns, "thread": 7,
            "this_thread": this_thread}


def test_overhead_records_on_the_pass_thread_become_spans_and_every_one_is_counted(fake):
    with Recording() as rec:
        with cuda.Cupti() as inst:
            inst.mark_pass("first")
            t = _native.now_ns()
            fake.overheads = [
                _overhead("lazy_function_loading", timeline.RUNTIME_INIT, t + 1_000, t + 3_001_000),
                _overhead("driver_compiler", timeline.JIT_COMPILE, t + 4_000_000, t + 5_000_000),
                _overhead("module_loading", timeline.RUNTIME_INIT, t + 1_000, t + 2_001_000, this_thread=False),
                _overhead("module_loading", timeline.RUNTIME_INIT, 0, 0),  # CUPTI could not time it: left out
            ]
            inst.end_pass("first")
    tl = rec.drain()
    spans = [(int(tl.kind[i]), int(tl.cause[i]), tl.name_of(i)) for i in range(len(tl))
             if tl.name_of(i).startswith("cupti:overhead:")]
    assert spans == [(timeline.BEGIN, timeline.RUNTIME_INIT, "cupti:overhead:lazy_function_loading"),
                     (timeline.END, timeline.RUNTIME_INIT, "cupti:overhead:lazy_function_loading"),
                     (timeline.BEGIN, timeline.JIT_COMPILE, "cupti:overhead:driver_compiler"),
                     (timeline.END, timeline.JIT_COMPILE, "cupti:overhead:driver_compiler")]
    got = inst.summary()["passes"]["first"]["overheads"]
    assert got["lazy_function_loading"] == {"count": 1, "ms": pytest.approx(3.0), "other_threads": 0}
    assert got["module_loading"] == {"count": 1, "ms": pytest.approx(2.0), "other_threads": 1}
    assert got["driver_compiler"]["count"] == 1


def test_overhead_records_from_before_a_pass_are_not_the_pass_s(fake):
    with Recording():
        with cuda.Cupti() as inst:
            t = _native.now_ns()
            fake.overheads = [_overhead("module_loading", timeline.RUNTIME_INIT, t, t + 1_000)]
            inst.mark_pass("first")
            inst.end_pass("first")
    assert "overheads" not in inst.summary()["passes"]["first"]


# --- torch.profiler's Kineto keeps CUPTI (issue 25, item 11) ---------------------------------------


def test_watch_s_backend_error_says_kineto_keeps_cupti_and_what_holding_it_does_to_torch_profiler(monkeypatch):
    from warmprof.errors import BackendError
    from warmprof.serving.watch import sources

    held = "another CUPTI subscriber holds the process (torch.profiler or Nsight)"
    monkeypatch.setattr(sources, "_native", types.SimpleNamespace(cupti_start=lambda: held))
    monkeypatch.setattr(sources.cuda_paths, "install", lambda: None)
    with pytest.raises(BackendError) as err:
        sources.acquire_cupti()
    text = str(err.value)
    assert held in text
    assert "first torch.profiler use" in text and "life of the process" in text
    assert "torch.profiler falls back to CPU-only" in text
    assert sources._cupti_users == 0  # nothing held


def test_no_recording_left_behind():
    assert not timeline.active()

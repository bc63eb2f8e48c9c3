"""The MPS instruments against a fake torch.mps (no Apple GPU here): GPU and host time per pass, the
inferred pipeline compile and its cap, allocator memory at module boundaries, the compile_shader
wrapper, and the trace's wiring. Nothing here has run on Apple hardware."""

from __future__ import annotations

import pytest
import torch

from warmprof.attribution import Figure, attribute_pass
from warmprof.instruments.mps import (
    PIPELINE_SOURCE, MpsAllocator, MpsEvents, MpsShaderCompile, mps_instruments,
)
from warmprof.timeline import BEGIN, END, JIT_COMPILE, STRUCTURE, Recording, Timeline

MS = 1_000_000


class FakeMps:
    """torch.mps as the instruments use it: a GPU clock the test moves, events that read it, memory
    figures the test sets, and a compile_shader."""

    def __init__(self) -> None:
        self.gpu_ms = 0.0
        self.host_ns = 0
        self.syncs = 0
        self.allocated = 0
        self.driver = 0
        self.compiled: list[str] = []
        self.elapsed_override = None
        mps = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                assert enable_timing
                self.at = None

            def record(self) -> None:
                self.at = mps.gpu_ms

            def elapsed_time(self, other: "Event") -> float:
                if mps.elapsed_override is not None:
                    return mps.elapsed_override
                return other.at - self.at

        self.event = type("event", (), {"Event": Event})

    def synchronize(self) -> None:
        self.syncs += 1

    def current_allocated_memory(self) -> int:
        return self.allocated

    def driver_allocated_memory(self) -> int:
        return self.driver

    def empty_cache(self) -> None:
        pass

    def compile_shader(self, source: str) -> str:
        self.compiled.append(source)
        return f"lib({len(source)})"

    def clock(self) -> int:
        return self.host_ns


def _run(ev: MpsEvents, mps: FakeMps, name: str, host_ms: float, gpu_ms: float) -> None:
    ev.mark_pass(name)
    mps.host_ns += int(host_ms * MS)
    mps.gpu_ms += gpu_ms
    ev.before_sync(name)
    ev.end_pass(name)


def test_gpu_and_host_time_per_pass_and_the_pipeline_compile_inferred_from_their_difference():
    mps = FakeMps()
    ev = MpsEvents(mps=mps, clock=mps.clock, compile_band_ms=lambda: (1.0, 12.0))
    with ev:
        _run(ev, mps, "first", host_ms=30.0, gpu_ms=5.0)  # 25 ms of host time over the GPU's
        _run(ev, mps, "seen_rerun", host_ms=6.0, gpu_ms=5.0)  # 1 ms: the launch overhead
    assert ev.gpu_ms == {"first": pytest.approx(5.0), "seen_rerun": pytest.approx(5.0)}
    assert ev.host_ms == {"first": pytest.approx(30.0), "seen_rerun": pytest.approx(6.0)}
    (fig,) = ev.inferred("first")
    assert fig.cause == "jit_compile" and fig.source == PIPELINE_SOURCE and fig.evidence == "inferred"
    assert fig.ms == pytest.approx(24.0) and fig.fills_unexplained
    assert "within the Metal pipeline compile measured here" in fig.detail
    assert ev.inferred("seen_rerun") == []
    summary = ev.summary()
    assert summary["pipeline_compile_inferred_ms"] == pytest.approx(24.0) and summary["compile_band_ms"] == [1.0, 12.0]


def test_no_compile_is_inferred_when_the_first_pass_is_not_host_bound():
    mps = FakeMps()
    ev = MpsEvents(mps=mps, clock=mps.clock)
    with ev:
        _run(ev, mps, "first", host_ms=10.05, gpu_ms=10.0)
        _run(ev, mps, "seen_rerun", host_ms=10.0, gpu_ms=10.0)
    assert ev.inferred("first") == []  # 0.05 ms over: under the floor, noise


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf")])
def test_a_bad_gpu_time_is_left_out_with_a_note(bad):
    mps = FakeMps()
    mps.elapsed_override = bad
    ev = MpsEvents(mps=mps, clock=mps.clock)
    with ev:
        _run(ev, mps, "first", host_ms=30.0, gpu_ms=5.0)
        _run(ev, mps, "seen_rerun", host_ms=6.0, gpu_ms=5.0)
    assert ev.gpu_ms == {} and ev.inferred("first") == []
    assert any("left out" in n for n in ev.notes) and "first" in ev.host_ms


def test_a_band_probe_that_fails_is_a_note_not_an_error():
    mps = FakeMps()

    def broken():
        raise RuntimeError("no Metal device")

    ev = MpsEvents(mps=mps, clock=mps.clock, compile_band_ms=broken)
    with ev:
        _run(ev, mps, "first", host_ms=30.0, gpu_ms=5.0)
        _run(ev, mps, "seen_rerun", host_ms=6.0, gpu_ms=5.0)
    (fig,) = ev.inferred("first")
    assert "reference probe" not in fig.detail and any("no Metal device" in n for n in ev.notes)


def test_the_inferred_compile_takes_only_what_the_other_causes_left_unexplained():
    # a 40 ms pass, 20 ms of it a measured compile span: 20 ms free; the inferred figure asks 30
    names = ["pass:first", "onednn:create"]
    recs = [(0, BEGIN, STRUCTURE, 0, 0), (40 * MS, END, STRUCTURE, 0, 0),
            (5 * MS, BEGIN, JIT_COMPILE, 1, 0), (25 * MS, END, JIT_COMPILE, 1, 0)]
    tl = Timeline.from_records(recs, names)
    fig = Figure("jit_compile", PIPELINE_SOURCE, 30.0, fills_unexplained=True, detail="host over GPU")
    alloc = Figure("allocator_growth", "mps:driver_allocated", 5.0, evidence="estimated", fills_unexplained=True)
    att = attribute_pass(tl, "first", inferred=[fig, alloc])
    got = {(p.cause, p.source): p for p in att.parts}
    # estimated first (5 ms of the 20 free), then the inferred compile gets the 15 left
    assert got[("allocator_growth", "mps:driver_allocated")].ms == pytest.approx(5.0)
    pipe = got[("jit_compile", PIPELINE_SOURCE)]
    assert pipe.ms == pytest.approx(15.0) and "capped at what the pass's other causes left unexplained" in pipe.detail
    assert sum(att.unexplained_by_module.values()) == pytest.approx(0.0, abs=1e3)


class Hooks:
    """Stand-ins for torch's global module hooks: the test calls the registered functions."""

    def __init__(self) -> None:
        self.pre, self.post, self.removed = [], [], 0

    def register(self, kind):
        def reg(fn):
            getattr(self, kind).append(fn)
            outer = self

            class Handle:
                def remove(self_inner):
                    outer.removed += 1
                    getattr(outer, kind).remove(fn)

            return Handle()

        return reg


def test_allocator_memory_is_read_at_module_boundaries_and_its_growth_placed_in_the_outer_module():
    mps, hooks = FakeMps(), Hooks()
    alloc = MpsAllocator(mps=mps, hooks=(hooks.register("pre"), hooks.register("post")))
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    alloc.label_modules(model)
    with Recording() as rec:
        with alloc:
            alloc.mark_pass("first")
            (pre,), (post,) = hooks.pre, hooks.post
            pre(model[0], ())
            mps.driver += 8 << 20
            mps.allocated += 1 << 20
            post(model[0], (), None)
            pre(model[1], ())
            post(model[1], (), None)
            alloc.end_pass("first")
    # at exit it measured a fresh 8 MiB allocation on mps: not here (no mps), which it says
    assert alloc.alloc_cost == {} and any("could not be measured" in n for n in alloc.notes)
    assert alloc.inferred("first") == []  # no cost, no estimate
    alloc.alloc_cost = {"bytes": float(8 << 20), "ms": 2.0}  # as a Mac would have measured it
    assert hooks.removed == 2 and hooks.pre == [] and hooks.post == []  # nothing left behind
    p = alloc.passes["first"]
    assert p["driver_grown"] == 8 << 20 and p["allocated_grown"] == 1 << 20 and p["by_module"] == {"0": 8 << 20}
    (fig,) = alloc.inferred("first")
    assert fig.cause == "allocator_growth" and fig.evidence == "estimated" and fig.module == "0"
    assert fig.ms == pytest.approx(2.0) and fig.fills_unexplained
    tl = rec.drain()
    counters = [tl.name_of(i) for i in range(len(tl)) if tl.name_of(i).startswith("mps:")]
    assert counters.count("mps:driver_allocated") >= 6  # pass start/end and each module's entry/exit


def test_compile_shader_is_wrapped_as_a_measured_span_and_put_back():
    mps = FakeMps()
    original = mps.compile_shader
    inst = MpsShaderCompile(mps=mps)
    with Recording() as rec:
        with inst:
            assert mps.compile_shader is not original
            inst.mark_pass("first")
            assert mps.compile_shader("kernel void k() {}") == "lib(18)"
            inst.end_pass("first")
    assert mps.compile_shader == original and mps.compiled == ["kernel void k() {}"]
    assert inst.summary()["calls"] == {"first": 1}
    tl = rec.drain()
    spans = [(int(tl.kind[i]), int(tl.cause[i])) for i in range(len(tl)) if tl.name_of(i) == "mps:compile_shader"]
    assert spans == [(BEGIN, JIT_COMPILE), (END, JIT_COMPILE)]


def test_compile_shader_is_put_back_when_the_pass_raises():
    mps = FakeMps()
    original = mps.compile_shader
    with pytest.raises(ValueError):
        with MpsShaderCompile(mps=mps):
            raise ValueError("the model raised")
    assert mps.compile_shader == original


def test_on_this_machine_the_mps_instruments_say_why_they_are_off():
    got = mps_instruments({"model": None})
    assert [i.name for i in got] == ["mps_events", "mps_allocator", "mps_compile_shader"]
    for inst in got:
        assert not inst.available and "mps" in inst.reason.lower()
        with inst:  # entering an unavailable instrument does nothing and leaves nothing
            inst.mark_pass("first")
            inst.end_pass("first")
        assert inst.inferred("first") == []


def test_a_trace_on_mps_here_is_a_clear_device_error():
    import warmprof
    from warmprof.errors import DeviceError

    with pytest.raises(DeviceError, match="mps"):
        warmprof.trace(torch.nn.Linear(4, 4), (1, 4), device="mps")


def test_the_trace_runs_the_mps_instruments_on_an_mps_device():
    from warmprof.traces.passes import instruments

    names = [i.name for i in instruments(torch.nn.Linear(2, 2), torch.device("mps"), compiled=False)]
    assert {"mps_events", "mps_allocator", "mps_compile_shader"} <= set(names) and "onednn" not in names


def test_on_a_compiled_model_the_allocator_sets_no_module_hooks_and_keeps_the_pass_growth():
    mps, hooks = FakeMps(), Hooks()
    alloc = MpsAllocator(mps=mps, hooks=(hooks.register("pre"), hooks.register("post")), per_module=False)
    with alloc:
        assert hooks.pre == [] and hooks.post == []
        alloc.mark_pass("first")
        mps.driver += 4 << 20
        alloc.end_pass("first")
    assert alloc.passes["first"]["driver_grown"] == 4 << 20 and "by_module" not in alloc.passes["first"]
    alloc.alloc_cost = {"bytes": float(4 << 20), "ms": 1.0}
    (fig,) = alloc.inferred("first")
    assert fig.module == "" and fig.ms == pytest.approx(1.0)


def test_a_fresh_device_allocation_empties_the_cache_before_each_trial_and_after_the_last():
    from warmprof.instruments.device_memory import fresh_allocation_ms

    calls = []
    ms = fresh_allocation_ms(torch, "cpu", 1 << 20, 3, empty_cache=lambda: calls.append("empty"),
                             sync=lambda: calls.append("sync"))
    assert ms > 0
    assert calls == ["empty", "sync", "sync"] * 3 + ["empty"]

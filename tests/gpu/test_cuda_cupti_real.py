"""The CUDA backends on a real GPU: real CUPTI callbacks and CUDA events.

torch is imported first (its CUDA wheels map the libcupti warmprof then finds). Without a GPU every
test skips; with one, a backend that cannot work fails with its reason, unless the platform
refuses profiling, which the skip names (tests/gpu_gate.py).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch")

# After torch: its CUDA wheels map the libcupti that warmprof's backends then find.
import gpu_gate
import warmprof
from warmprof import _native
from warmprof.attribution import build_spans
from warmprof.timeline import ALLOCATOR_GROWTH, DATA_TRANSFER, GRAPH_CAPTURE, Recording

NO_GPU = gpu_gate.gpu_absent(torch)
if not NO_GPU:
    torch.zeros(1, device="cuda")  # context up, as in a trace, before CUPTI is asked
CUPTI = gpu_gate.decide("CUPTI", NO_GPU, "" if NO_GPU else gpu_gate.cupti_reason(_native))
EVENTS = gpu_gate.decide("CUDA events", NO_GPU, warmprof.backends()["cuda_events"]["reason"])

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(bool(NO_GPU), reason=f"no CUDA GPU: {NO_GPU}")]


def _gate(gate: gpu_gate.Gate) -> None:
    """First line of each test of a backend: a failure (not a setup error) when it cannot work here."""
    if gate.action == "skip":
        pytest.skip(gate.message)
    if gate.action == "fail":
        pytest.fail(gate.message, pytrace=False)


@pytest.fixture(autouse=True)
def nothing_left_subscribed():
    yield
    _native.cupti_stop()
    assert _native.cupti_active() is False


def _spans_while_subscribed(body) -> list:
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    with Recording() as rec:
        assert _native.cupti_start() == ""
        try:
            body()
            torch.cuda.synchronize()
        finally:
            _native.cupti_stop()
    return build_spans(rec.drain())


def test_subscribe_measures_its_cost_and_unsubscribes():
    _gate(CUPTI)
    assert _native.cupti_start() == ""
    assert _native.cupti_active()
    assert _native.cupti_start() != ""  # already active: says so, does not double subscribe
    assert _native.cupti_stats()["subscribe_ns"] > 0
    _native.cupti_stop()
    assert not _native.cupti_active()


def test_overhead_records_are_enabled_and_well_formed_with_a_real_libcupti():
    """CUPTI's OVERHEAD activity records (lazy module/function loads, the driver's PTX compiles):
    enabled at subscribe; whatever a first use of new kernels produces is well formed. Whether any
    record comes (the kernels may already be loaded) is not asserted."""
    _gate(CUPTI)
    torch.cuda.synchronize()
    assert _native.cupti_start() == ""
    try:
        assert _native.cupti_overheads()["enabled"] is True, _native.cupti_overheads()["reason"]
        x = torch.arange(4099, device="cuda", dtype=torch.float64)
        torch.cumsum(x.flip(0), 0).sum().item()
        got = _native.cupti_overheads()
    finally:
        _native.cupti_stop()
    kinds = {"module_loading", "lazy_function_loading", "driver_compiler"}
    assert all(r["kind"] in kinds and r["end_ns"] >= r["start_ns"] for r in got["records"]), got
    assert got["dropped"] == 0


def test_new_segment_is_an_allocation_span_with_bytes():
    _gate(CUPTI)
    torch.cuda.empty_cache()
    size = 192 << 20
    spans = _spans_while_subscribed(lambda: torch.empty(size, dtype=torch.uint8, device="cuda"))
    allocs = [s for s in spans if s.cause == ALLOCATOR_GROWTH]
    assert allocs and sum(s.value for s in allocs) >= size


def test_host_to_device_copy_is_data_transfer_with_bytes():
    _gate(CUPTI)
    host = torch.ones(8 << 20, dtype=torch.uint8)
    spans = _spans_while_subscribed(lambda: host.to("cuda"))
    assert sum(s.value for s in spans if s.cause == DATA_TRANSFER) >= 8 << 20


def test_graph_capture_span_and_launch_counts():
    _gate(CUPTI)
    y = torch.zeros(4096, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y.add_(1)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()

    def body():
        with torch.cuda.graph(g):
            y.add_(1)
        g.replay()

    spans = _spans_while_subscribed(body)
    names = {x.name for x in spans if x.cause == GRAPH_CAPTURE}
    assert "cupti:stream_capture" in names
    assert any("Instantiate" in n for n in names)
    assert _native.cupti_stats()["kernel_launches"] >= 1  # the captured add (counted since start)


def test_cuda_events_time_a_gpu_sleep():
    _gate(EVENTS)
    torch.zeros(1, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    a = _native.cuda_event_record(stream)
    torch.cuda._sleep(20_000_000)
    b = _native.cuda_event_record(stream)
    assert _native.cuda_event_elapsed_ms(a, b) > 0
    _native.cuda_events_release()


def _gpu_sleep_ms(cycles: int) -> float:
    """torch.cuda's own event timing of a GPU sleep (the reference)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(cycles)
    b.record()
    b.synchronize()
    return a.elapsed_time(b)


def test_a_pass_is_timed_on_the_gpu_up_to_its_sync_not_after():
    """The host idles 200 ms after the sync (as slow instruments' end_pass would): a GPU time that
    counts it had its end event recorded after the sync, on an idle stream."""
    _gate(EVENTS)
    from warmprof.instruments.cuda_events import CudaEvents
    from warmprof.traces.passes import run_pass

    cycles = 20_000_000
    ref_ms = _gpu_sleep_ms(cycles)

    def sync():
        torch.cuda.synchronize()
        time.sleep(0.2)

    with Recording(), CudaEvents(device=torch.cuda.current_device()) as inst:
        t0, t1 = run_pass(lambda: torch.cuda._sleep(cycles), (), {}, "first", [inst], sync)
    gpu_ms = inst.summary()["gpu_ms"]["first"]
    assert 0.5 * ref_ms < gpu_ms < ref_ms + 50, (gpu_ms, ref_ms, (t1 - t0) / 1e6)


def test_cuda_events_on_a_side_stream_and_on_another_device():
    """A created stream names its context (cuStreamGetCtx); the default stream of cuda:1 is handle 0,
    so the device names it. Either way the current device stays cuda:0's."""
    _gate(EVENTS)
    side = torch.cuda.Stream()
    a = _native.cuda_event_record(side.cuda_stream, 0)
    with torch.cuda.stream(side):
        torch.cuda._sleep(5_000_000)
    b = _native.cuda_event_record(side.cuda_stream, 0)
    assert _native.cuda_event_elapsed_ms(a, b) > 0
    _native.cuda_events_release()
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU here: the cuda:1 half needs two")
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda:1")
    for stream in (torch.cuda.Stream(device=1).cuda_stream, 0):
        a = _native.cuda_event_record(stream, 1)
        with torch.cuda.device(1):
            torch.cuda._sleep(5_000_000)
        b = _native.cuda_event_record(stream, 1)
        assert _native.cuda_event_elapsed_ms(a, b) >= 0
        assert torch.cuda.current_device() == 0
    _native.cuda_events_release()


def test_trace_on_cuda_in_a_fresh_process_reports_cuda_one_time_causes(tmp_path):
    """A cold process (the CLI's default): lazy kernel-module loading and the caching allocator's
    first segments happen in the first pass, and CUPTI sees them."""
    _gate(CUPTI)
    out = tmp_path / "cuda.json"
    run = subprocess.run([sys.executable, "-m", "warmprof", "trace", "--demo", "--device", "cuda", "--steady", "5",
                          "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    report = warmprof.load(out)
    assert report.first_pass_ms > report.steady_median_ms > 0
    assert not report.protocol.runtime_warm, report.protocol.warm_reasons
    assert report.instruments["torch_cuda_allocator"]["active"]
    cupti = report.instruments["cupti"]
    if not cupti["active"]:  # the parent could subscribe (the gate), so only a platform refusal excuses this
        _gate(gpu_gate.decide("CUPTI in the trace's child", "", cupti["reason"]))
    cuda_causes = {c.cause for c in report.causes if c.ms > 0 and c.evidence == "measured"}
    assert cuda_causes & {"runtime_init", "allocator_growth"}, [(c.cause, c.source, c.ms) for c in report.causes]


def test_second_subscriber_is_reported_not_fatal():
    """torch.profiler (kineto) may hold CUPTI for the rest of the process: run it in a child."""
    _gate(CUPTI)
    code = textwrap.dedent("""
        import torch
        from torch.profiler import profile, ProfilerActivity
        from warmprof import _native
        x = torch.ones(16, device="cuda")
        with profile(activities=[ProfilerActivity.CUDA]):
            why = _native.cupti_start()
            x.add_(1)
            torch.cuda.synchronize()
        _native.cupti_stop()
        print("WHY:" + why)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    why = out.stdout.split("WHY:", 1)[1].strip()
    # Either CUPTI lets a second subscriber in (newer CUPTI), or warmprof says who holds it.
    assert why == "" or "another CUPTI subscriber" in why, why


def test_watch_with_cupti_keeps_a_call_that_grew_the_device_allocator():
    """watch(cupti=True) on a real driver: a call whose tensor needs a new cudaMalloc is kept, with
    the allocation timed by CUPTI; the same call at the same shape afterwards (served from torch's
    cache) is not kept."""
    _gate(CUPTI)
    from warmprof.serving.watch import Watcher

    big = [0]

    def model(x):
        y = torch.empty(big[0] or 1, device="cuda") if big[0] else x * 2
        torch.cuda.synchronize()
        return y

    x = torch.ones(16, device="cuda")
    with Watcher(model, cupti=True, min_calls=1000) as w:
        for _ in range(10):
            w(x)
        torch.cuda.empty_cache()
        big[0] = 64 << 20  # 256 MiB of float32: past every cached block, a fresh cudaMalloc
        w(x)
        w(x)  # the block freed above is cached now: no cudaMalloc
    events = w.events()
    grown = [e for e in events if any(c["source"] == "cupti" and c["cause"] == "allocator_growth" for c in e["causes"])]
    assert [e["index"] for e in grown] == [1], events
    (cause,) = [c for c in grown[0]["causes"] if c["source"] == "cupti"]
    assert cause["evidence"] == "measured" and cause["ms"] > 0 and grown[0]["cuda_calls"]["allocator_growth"]["bytes"] >= 256 << 20
    assert not _native.cupti_active()

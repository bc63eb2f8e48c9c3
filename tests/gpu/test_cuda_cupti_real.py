"""The CUDA backends on a real GPU: real CUPTI callbacks and CUDA events (skipped elsewhere).

Skipped with the native module's own reason (warmprof.backends()), not a bare torch check, so a
GPU machine where the backend cannot load says why.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import warmprof
from warmprof import _native
from warmprof.attribution import build_spans
from warmprof.timeline import ALLOCATOR_GROWTH, DATA_TRANSFER, GRAPH_CAPTURE, Recording

_cupti = warmprof.backends()["cupti"]
_events = warmprof.backends()["cuda_events"]
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not _cupti["available"], reason=f"CUPTI backend off: {_cupti['reason']}"),
]

torch = pytest.importorskip("torch")


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
    assert _native.cupti_start() == ""
    assert _native.cupti_active()
    assert _native.cupti_start() != ""  # already active: says so, does not double subscribe
    assert _native.cupti_stats()["subscribe_ns"] > 0
    _native.cupti_stop()
    assert not _native.cupti_active()


def test_new_segment_is_an_allocation_span_with_bytes():
    torch.cuda.empty_cache()
    size = 192 << 20
    spans = _spans_while_subscribed(lambda: torch.empty(size, dtype=torch.uint8, device="cuda"))
    allocs = [s for s in spans if s.cause == ALLOCATOR_GROWTH]
    assert allocs and sum(s.value for s in allocs) >= size


def test_host_to_device_copy_is_data_transfer_with_bytes():
    host = torch.ones(8 << 20, dtype=torch.uint8)
    spans = _spans_while_subscribed(lambda: host.to("cuda"))
    assert sum(s.value for s in spans if s.cause == DATA_TRANSFER) >= 8 << 20


def test_graph_capture_span_and_launch_counts():
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


@pytest.mark.skipif(not _events["available"], reason=f"CUDA events off: {_events['reason']}")
def test_cuda_events_time_a_gpu_sleep():
    torch.zeros(1, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    a = _native.cuda_event_record(stream)
    torch.cuda._sleep(20_000_000)
    b = _native.cuda_event_record(stream)
    assert _native.cuda_event_elapsed_ms(a, b) > 0
    _native.cuda_events_release()


def test_trace_on_cuda_in_a_fresh_process_reports_cuda_one_time_causes(tmp_path):
    """A cold process (the CLI's default): lazy kernel-module loading and the caching allocator's
    first segments happen in the first pass, and CUPTI sees them."""
    out = tmp_path / "cuda.json"
    run = subprocess.run([sys.executable, "-m", "warmprof", "trace", "--demo", "--device", "cuda", "--steady", "5",
                          "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    report = warmprof.load(out)
    assert report.first_pass_ms > report.steady_median_ms > 0
    assert not report.protocol.runtime_warm, report.protocol.warm_reasons
    assert report.instruments["torch_cuda_allocator"]["active"]
    cupti = report.instruments["cupti"]
    if not cupti["active"]:
        assert "another CUPTI subscriber" in cupti["reason"]
        pytest.skip(f"CUPTI held by another subscriber: {cupti['reason']}")
    cuda_causes = {c.cause for c in report.causes if c.ms > 0 and c.evidence == "measured"}
    assert cuda_causes & {"runtime_init", "allocator_growth"}, [(c.cause, c.source, c.ms) for c in report.causes]


def test_second_subscriber_is_reported_not_fatal():
    """torch.profiler (kineto) may hold CUPTI for the rest of the process: run it in a child."""
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

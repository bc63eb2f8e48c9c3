"""What the CUPTI callbacks cost the instrumented passes, and what they never do on the timed path.

- Only the callbacks the table maps are enabled (one cuptiEnableCallback per id, never a whole
  domain), every callback taken is counted, and the handler's own cost per callback is measured here.
- Inside a callback: no heap allocation, no page fault, and the thread's recorder buffer is set up
  before the clock is read (a thread's first callback does not time its own registration).
- Launches are counted, not recorded: a 100k-launch pass cannot fill the recorder and drop the
  cause spans around it.
"""

from __future__ import annotations

import threading

import pytest
from cupti_calls import (
    DRIVER, RESOURCE, RUNTIME, Clock, D, R, RT, inject_call, kernel_ids, records, skip_without_cupti, span,
)

from warmprof import _native
from warmprof.timeline import ALLOCATOR_GROWTH, BEGIN, END, STRUCTURE, Recording

skip_without_cupti()


def _mapped_in_headers() -> set[tuple[int, int]]:
    ids = {(D, v) for k, v in DRIVER.items() if k != "SIZE"}
    ids |= {(RT, v) for k, v in RUNTIME.items() if k != "SIZE"}
    ids |= {(R, v) for k, v in RESOURCE.items() if k != "SIZE"}
    return {key for key in ids if _native.cupti_classify(*key) != -1}


def test_the_enabled_callbacks_are_exactly_the_table_s_ids():
    enabled = _native._testing.cupti_enabled_callbacks()
    assert len(enabled) == len(set(enabled))
    assert set(enabled) == _mapped_in_headers()
    per_domain = {d: sum(1 for dom, _ in enabled if dom == d) for d in (D, RT, R)}
    # A small part of each domain, not the domains: ~800 driver and ~500 runtime functions stay off.
    assert 0 < per_domain[D] < DRIVER["SIZE"] // 5 and 0 < per_domain[RT] < RUNTIME["SIZE"] // 5
    assert per_domain[R] == 3
    key_calls = {("cuLaunchKernel", D), ("cuMemAlloc_v2", D), ("cuModuleLoadData", D), ("cuMemCreate", D)}
    assert {(D, DRIVER[n]) for n, _ in key_calls} <= set(enabled)
    assert {(RT, RUNTIME[n]) for n in ("cudaLaunchKernel_v7000", "cudaMalloc_v3020", "cudaMemcpyAsync_v3020",
                                        "cudaStreamBeginCapture_v10000", "cudaGraphInstantiate_v12000")} <= set(enabled)


def test_every_callback_taken_is_counted():
    before = _native.cupti_stats()["callbacks"]
    with Recording():
        c = Clock()
        for _ in range(5):
            inject_call(c, "cuMemAlloc_v2", value=1)
    assert _native.cupti_stats()["callbacks"] - before == 10


def test_the_handler_cost_per_callback_is_measured_and_leaves_the_counts_alone():
    before = _native.cupti_stats()
    cost = _native.cupti_handler_cost_ns(20_000)
    assert 0 < cost < 5_000  # tens of ns on any machine that runs this; a loose bound on a busy one
    after = _native.cupti_stats()
    assert {k: after[k] for k in ("callbacks", "kernel_launches", "new_kernel_count")} == {
        k: before[k] for k in ("callbacks", "kernel_launches", "new_kernel_count")}
    with Recording(), pytest.raises(ValueError, match="while recording"):
        _native.cupti_handler_cost_ns(10)


def test_a_pass_of_100k_launches_drops_nothing_and_keeps_its_cause_spans(recorder_capacity):
    """Each launch was a span (2 records): 100k launches filled a buffer and dropped the allocation
    spans among them. Now repeat launches are counted: only first launches and causes are records."""
    recorder_capacity(4096)
    kernels = [next(kernel_ids) for _ in range(50)]
    launch = DRIVER["cuLaunchKernel"]
    before = _native.cupti_stats()
    with Recording() as rec:
        c = Clock()
        for i in range(100_000):
            if i % 5000 == 0:
                inject_call(c, "cuMemAlloc_v2", value=i + 1)
            k = kernels[i % len(kernels)]
            _native._testing.cupti_inject(D, launch, True, c(), k)
            _native._testing.cupti_inject(D, launch, False, c(), k)
    tl = rec.drain()
    assert tl.dropped == 0
    got = records(tl)
    allocs = [r for r in got if r[2] == "cupti:cuMemAlloc_v2"]
    assert allocs == [r for i in range(0, 100_000, 5000) for r in span(ALLOCATOR_GROWTH, "cupti:cuMemAlloc_v2", i + 1)]
    firsts = [r for r in got if r[2] == "cupti:cuLaunchKernel"]
    assert firsts == span(STRUCTURE, "cupti:cuLaunchKernel", 1) * len(kernels)
    assert _native.cupti_stats()["kernel_launches"] - before["kernel_launches"] == 100_000


def test_first_launches_take_no_heap_memory():
    """The first-seen set and the kernel names live in fixed, pre-faulted tables: a std::unordered_set
    and a vector of std::string took heap on every new kernel, inside the callback."""
    _native._testing.cupti_launch_heap_bytes(next(kernel_ids) * 1_000_000, 1, "warm_up")  # the table's first build
    first = next(kernel_ids) * 1_000_000
    assert _native._testing.cupti_launch_heap_bytes(first, 2000, "_Z20a_kernel_with_a_long_mangled_name") == 0
    before = _native.cupti_stats()
    _native._testing.cupti_launch_heap_bytes(first, 10, "seen")  # seen kernels: not new again
    assert _native.cupti_stats()["new_kernel_count"] == before["new_kernel_count"]


def _first_and_later_span_ns(tl) -> list[tuple[int, int]]:
    """Per recording thread: (its first cuMemAlloc_v2 span, its median later one), in ns."""
    out = []
    for th in sorted(set(tl.thread.tolist())):
        starts, spans = [], []
        for i in range(len(tl)):
            if tl.thread[i] != th or tl.name_of(i) != "cupti:cuMemAlloc_v2":
                continue
            if tl.kind[i] == BEGIN:
                starts.append(int(tl.ts_ns[i]))
            elif tl.kind[i] == END and starts:
                spans.append(int(tl.ts_ns[i]) - starts.pop())
        if len(spans) >= 3:
            later = sorted(spans[1:])
            out.append((spans[0], later[len(later) // 2]))
    return out


def test_a_thread_s_first_callback_does_not_time_its_own_registration():
    """A thread's first record registers its recorder buffer (a lock, a buffer; here no spare, so a
    fresh mapping). Done before the callback reads the clock, it is outside the span; done inside,
    every new thread's first span held it. Real callback entry: the clock is read inside."""
    alloc = DRIVER["cuMemAlloc_v2"]

    def worker():
        _native._testing.cupti_call_now(alloc, 1 << 20, 9)

    with Recording(spare_buffers=0) as rec:
        for _ in range(6):
            t = threading.Thread(target=worker)
            t.start()
            t.join()
    pairs = _first_and_later_span_ns(rec.drain())
    assert len(pairs) == 6
    # The least disturbed thread: its first span is of the order of its later ones, not of a registration.
    first, later = min(pairs)
    assert first < 10 * later + 2_000, pairs


def test_callbacks_on_many_threads_are_counted_apart_and_together():
    kernel = next(kernel_ids)
    before = _native.cupti_stats()["kernel_launches"]
    with Recording(spare_buffers=4) as rec:
        def launches():
            _native._testing.cupti_call_now(DRIVER["cuLaunchKernel"], kernel, 500)

        threads = [threading.Thread(target=launches) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert _native.cupti_stats()["kernel_launches"] - before == 2000
    assert [r[0] for r in records(rec.drain())] == [BEGIN, END]  # one first launch across the threads

"""Launches as nvcc 13 compiles them, and one operation reported twice.

nvcc 13 compiles `<<<...>>>` to `__cudaGetKernel` + `__cudaLaunchKernel` (crt/host_runtime.h), for
which CUDA 13.0's meta header declares no parameter struct: where CUPTI passes none, the kernel is
known by its symbol name. A call of an operation made while a call of the same operation is open on
the thread is that call's implementation, whatever the two domains (the driver's inside the
runtime's, cudaLaunchKernel inside __cudaLaunchKernel, one driver entry inside another).
"""

from __future__ import annotations

import pytest
from cupti_calls import (
    RUNTIME, RT, drained, inject_call, inject_runtime_call, kernel_ids, records, skip_without_cupti,
    span, stats_delta,
)

from warmprof import _native
from warmprof.timeline import ALLOCATOR_GROWTH, BEGIN, END, STRUCTURE

skip_without_cupti()

if "__cudaLaunchKernel_v13000" not in RUNTIME:
    pytest.skip("the toolkit's CUPTI headers predate CUDA 13 (no __cudaLaunchKernel)", allow_module_level=True)

NV13_LAUNCH = RUNTIME["__cudaLaunchKernel_v13000"]


def _unparamed_launch(c, symbol: str, cbid: int = NV13_LAUNCH) -> None:
    _native._testing.cupti_inject_unparamed(RT, cbid, True, c(), symbol)
    _native._testing.cupti_inject_unparamed(RT, cbid, False, c(), symbol)


def test_a_launch_without_parameters_is_known_by_its_symbol_name():
    a, b = f"_Z7kernelA{next(kernel_ids)}v", f"_Z7kernelB{next(kernel_ids)}v"
    before = _native.cupti_stats()
    got = records(drained(lambda c: [_unparamed_launch(c, s) for s in (a, a, b, a)]))
    after = _native.cupti_stats()
    assert got == span(STRUCTURE, "cupti:__cudaLaunchKernel", 1) * 2  # a's and b's first launches only
    delta = stats_delta(before, after)
    assert delta["kernel_launches"] == 4 and delta["new_kernel_count"] == 2
    if after["new_kernel_count"] <= len(after["new_kernels"]):  # the names kept (the first 16384) reach them
        assert after["new_kernels"][-2:] == [a, b]


def test_a_launch_with_neither_parameters_nor_a_name_is_counted_but_never_first():
    before = _native.cupti_stats()
    got = records(drained(lambda c: [_unparamed_launch(c, "") for _ in range(2)]))
    assert got == []
    delta = stats_delta(before, _native.cupti_stats())
    assert delta["kernel_launches"] == 2 and delta["new_kernel_count"] == 0


def test_cudalaunchkernel_inside_cudalaunchkernel_13_counts_once():
    """The runtime's own cudaLaunchKernel, if CUPTI reports it inside __cudaLaunchKernel: one launch."""
    kernel = next(kernel_ids)
    before = _native.cupti_stats()

    def body(c):
        for _ in range(3):
            inject_runtime_call(c, "__cudaLaunchKernel", value=kernel,
                                body=lambda: inject_runtime_call(c, "cudaLaunchKernel", value=kernel + 1,
                                                                 body=lambda: inject_call(c, "cuLaunchKernel",
                                                                                          value=kernel + 2)))

    got = records(drained(body))
    assert got == span(STRUCTURE, "cupti:__cudaLaunchKernel", 1)
    delta = stats_delta(before, _native.cupti_stats())
    assert delta["kernel_launches"] == 3 and delta["new_kernel_count"] == 1
    assert delta["callbacks"] == 18  # every callback taken still counts


def test_a_driver_launch_inside_another_driver_launch_counts_once():
    kernel = next(kernel_ids)
    before = _native.cupti_stats()
    got = records(drained(lambda c: inject_call(c, "cuLaunchKernel", value=kernel,
                                                body=lambda: inject_call(c, "cuLaunchKernelEx", value=kernel))))
    assert got == span(STRUCTURE, "cupti:cuLaunchKernel", 1)
    assert stats_delta(before, _native.cupti_stats())["kernel_launches"] == 1


def test_the_pool_s_own_growth_inside_a_runtime_async_allocation_holds_its_bytes():
    """A stream-ordered allocation is its own operation: a cuMemCreate CUPTI reports inside
    cudaMallocAsync is the pool growing, and carries the bytes (as inside cuMemAllocAsync)."""
    MiB = 1 << 20
    rt = RUNTIME["cudaMallocAsync_v11020"]

    def body(c):
        _native._testing.cupti_inject(RT, rt, True, c(), 0)
        inject_call(c, "cuMemAllocAsync", value=0)  # the runtime's own driver call: absorbed
        inject_call(c, "cuMemCreate", value=2 * MiB)
        _native._testing.cupti_inject(RT, rt, False, c(), 2 * MiB)

    got = records(drained(body))
    assert [(k, n, v) for k, _, n, v in got] == [
        (BEGIN, "cupti:cudaMallocAsync", 0), (BEGIN, "cupti:cuMemCreate", 2 * MiB),
        (END, "cupti:cuMemCreate", 2 * MiB), (END, "cupti:cudaMallocAsync", 0)]
    assert all(cause == ALLOCATOR_GROWTH for _, cause, _, _ in got)


def test_a_different_operation_inside_a_launch_is_still_recorded():
    kernel = next(kernel_ids)
    got = records(drained(lambda c: inject_runtime_call(
        c, "__cudaLaunchKernel", value=kernel, body=lambda: inject_call(c, "cuMemAlloc_v2", value=4096))))
    assert [n for _, _, n, _ in got] == ["cupti:__cudaLaunchKernel", "cupti:cuMemAlloc_v2", "cupti:cuMemAlloc_v2",
                                         "cupti:__cudaLaunchKernel"]

"""Allocator growth as CUPTI reports it.

- Expandable segments (PyTorch's expandable_segments, cuMemCreate + cuMemAddressReserve + cuMemMap +
  cuMemSetAccess): one growth, its bytes counted once (cuMemCreate's); the other steps are
  allocator_growth time with no bytes of their own.
- Stream-ordered allocations (the cudaMallocAsync backend): a pool hit is not allocator growth.
  Each such callback carries the pool's reserved bytes (injected here as the value); only a call in
  which the reservation grew is an allocator_growth span, valued at the growth.
"""

from __future__ import annotations

import pytest
from cupti_calls import (
    DRIVER, D, RT, drained, inject_call, inject_runtime_call, records, runtime_id, skip_without_cupti, span,
)

from warmprof import _native
from warmprof.timeline import ALLOCATOR_GROWTH, BEGIN, END

skip_without_cupti()

MiB = 1 << 20


def _bytes(got) -> int:
    return sum(v for kind, cause, _, v in got if kind == BEGIN and cause == ALLOCATOR_GROWTH)


def test_an_expandable_segment_counts_its_bytes_once():
    size = 20 * MiB

    def body(c):
        inject_call(c, "cuMemAddressReserve", value=size)
        inject_call(c, "cuMemCreate", value=size)
        inject_call(c, "cuMemMap", value=size)
        inject_call(c, "cuMemSetAccess", value=size)

    got = records(drained(body))
    assert got == (span(ALLOCATOR_GROWTH, "cupti:cuMemAddressReserve")
                   + span(ALLOCATOR_GROWTH, "cupti:cuMemCreate", size)
                   + span(ALLOCATOR_GROWTH, "cupti:cuMemMap")
                   + span(ALLOCATOR_GROWTH, "cupti:cuMemSetAccess"))
    assert _bytes(got) == size


@pytest.mark.parametrize("name", ["cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync",
                                  "cuMemAllocFromPoolAsync_ptsz"])
def test_a_pool_hit_is_not_growth_and_a_pool_that_grew_is(name):
    cbid = DRIVER[name]
    before = _native.cupti_stats()["pool_hits"]

    def body(c):
        for reserved_before, reserved_after in ((64 * MiB, 64 * MiB), (64 * MiB, 96 * MiB), (96 * MiB, 96 * MiB)):
            _native._testing.cupti_inject(D, cbid, True, c(), reserved_before)
            _native._testing.cupti_inject(D, cbid, False, c(), reserved_after)

    assert records(drained(body)) == span(ALLOCATOR_GROWTH, f"cupti:{name}", 32 * MiB)
    assert _native.cupti_stats()["pool_hits"] - before == 2


def test_an_unknown_pool_reservation_claims_no_growth():
    def body(c):
        _native._testing.cupti_inject(D, DRIVER["cuMemAllocAsync"], True, c(), -1)
        _native._testing.cupti_inject(D, DRIVER["cuMemAllocAsync"], False, c(), 8 * MiB)

    assert records(drained(body)) == []


def test_the_runtime_s_async_allocation_counts_once_with_the_driver_s_inside():
    def body(c):
        rt = runtime_id("cudaMallocAsync")
        _native._testing.cupti_inject(RT, rt, True, c(), 0)
        inject_call(c, "cuMemAllocAsync", value=0)  # absorbed: the runtime call is the operation
        _native._testing.cupti_inject(RT, rt, False, c(), 2 * MiB)
        inject_runtime_call(c, "cudaMallocAsync", value=2 * MiB)  # a hit

    assert records(drained(body)) == span(ALLOCATOR_GROWTH, "cupti:cudaMallocAsync", 2 * MiB)


def test_a_pool_that_grows_through_reported_vmm_calls_counts_the_bytes_there():
    """If CUPTI reports the pool's own cuMemCreate inside the async allocation, that call holds the
    bytes (and, innermost, its time); the async span around it adds no bytes of its own."""
    def body(c):
        cbid = DRIVER["cuMemAllocAsync"]
        _native._testing.cupti_inject(D, cbid, True, c(), 0)
        inject_call(c, "cuMemCreate", value=2 * MiB)
        inject_call(c, "cuMemMap", value=2 * MiB)
        _native._testing.cupti_inject(D, cbid, False, c(), 2 * MiB)

    got = records(drained(body))
    assert [(k, n) for k, _, n, _ in got] == [
        (BEGIN, "cupti:cuMemAllocAsync"), (BEGIN, "cupti:cuMemCreate"), (END, "cupti:cuMemCreate"),
        (BEGIN, "cupti:cuMemMap"), (END, "cupti:cuMemMap"), (END, "cupti:cuMemAllocAsync")]
    assert _bytes(got) == 2 * MiB


def test_a_failed_async_allocation_is_no_growth():
    def body(c):
        _native._testing.cupti_inject(D, DRIVER["cuMemAllocAsync"], True, c(), 4 * MiB)
        _native._testing.cupti_inject(D, DRIVER["cuMemAllocAsync"], False, c(), 4 * MiB, True)

    assert records(drained(body)) == []

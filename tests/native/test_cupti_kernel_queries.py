"""Queries on one kernel load it lazily outside any launch (CUDA 12.2+ loads kernels on first use):
cudaGetKernel, __cudaGetKernel, cudaFuncGetAttributes, the occupancy queries, cuFuncGetAttribute.
They are counted like launches: a runtime_init span for a kernel's first query, "cupti:lazy_load"
when a module was loaded inside, nothing for a repeat (a steady pass pays those too)."""

from __future__ import annotations

import pytest
from cupti_calls import (
    DRIVER, RUNTIME, D, RT, drained, inject_call, inject_resource, inject_runtime_call, kernel_ids, records,
    skip_without_cupti, span, stats_delta,
)

from warmprof import _native
from warmprof.timeline import BEGIN, END, INSTANT, RUNTIME_INIT, STRUCTURE

skip_without_cupti()

RUNTIME_QUERIES = ["cudaFuncGetAttributes_v3020", "cudaOccupancyMaxActiveBlocksPerMultiprocessor_v6050",
                   "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000",
                   "cudaOccupancyAvailableDynamicSMemPerBlock_v10200", "cudaOccupancyMaxPotentialClusterSize_v11070",
                   "cudaOccupancyMaxActiveClusters_v11070", "cudaGetKernel_v12000", "__cudaGetKernel_v13000"]
DRIVER_QUERIES = ["cuFuncGetAttribute", "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                  "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cuOccupancyMaxPotentialBlockSize",
                  "cuOccupancyMaxPotentialBlockSizeWithFlags", "cuOccupancyAvailableDynamicSMemPerBlock",
                  "cuOccupancyMaxPotentialClusterSize", "cuOccupancyMaxActiveClusters"]


@pytest.mark.parametrize("domain,name", [(RT, n) for n in RUNTIME_QUERIES] + [(D, n) for n in DRIVER_QUERIES])
def test_kernel_queries_are_mapped_and_enabled(domain, name):
    cbid = (RUNTIME if domain == RT else DRIVER).get(name)
    if cbid is None:
        pytest.skip(f"{name} is not in this toolkit's headers")
    assert _native.cupti_classify(domain, cbid) == RUNTIME_INIT
    assert _native.cupti_callback_name(domain, cbid) == (name.rsplit("_v", 1)[0] if domain == RT else name)
    assert (domain, cbid) in _native._testing.cupti_enabled_callbacks()


@pytest.mark.parametrize("domain,name", [(RT, n) for n in RUNTIME_QUERIES if n != "__cudaGetKernel_v13000"]
                         + [(D, n) for n in DRIVER_QUERIES])
def test_each_query_s_kernel_is_read_from_its_own_parameters(domain, name):
    """Through the real callback entry with the call's own parameter struct: two queries of one
    kernel and one of another are two first queries (a misread function would be 0, timed each time)."""
    cbid = (RUNTIME if domain == RT else DRIVER).get(name)
    if cbid is None:
        pytest.skip(f"{name} is not in this toolkit's headers")
    k1, k2 = next(kernel_ids), next(kernel_ids)

    def body(c):
        for k in (k1, k1, k2):
            _native._testing.cupti_inject_query(domain, cbid, True, c(), k)
            _native._testing.cupti_inject_query(domain, cbid, False, c(), k)

    label = name.rsplit("_v", 1)[0] if domain == RT else name
    assert records(drained(body)) == span(RUNTIME_INIT, f"cupti:{label}") * 2


def test_a_kernel_s_first_query_is_a_span_and_its_repeats_are_not():
    kernel = next(kernel_ids)
    got = records(drained(lambda c: [inject_runtime_call(c, "cudaFuncGetAttributes", value=kernel)
                                     for _ in range(3)]))
    assert got == span(RUNTIME_INIT, "cupti:cudaFuncGetAttributes")


def test_a_module_loaded_inside_a_query_makes_it_a_lazy_load():
    kernel = next(kernel_ids)

    def body(c):
        inject_runtime_call(c, "cudaFuncGetAttributes", value=kernel)  # the first: a span
        inject_runtime_call(c, "cudaFuncGetAttributes", value=kernel,
                            body=lambda: inject_resource(c, "MODULE_LOADED", 4096))

    got = records(drained(body))
    assert [r[:3] for r in got] == [*[r[:3] for r in span(RUNTIME_INIT, "cupti:cudaFuncGetAttributes")],
                                    (BEGIN, RUNTIME_INIT, "cupti:lazy_load"),
                                    (INSTANT, RUNTIME_INIT, "cupti:MODULE_LOADED"),
                                    (END, RUNTIME_INIT, "cupti:lazy_load")]


def test_the_driver_query_inside_the_runtime_s_counts_once():
    kernel = next(kernel_ids)
    got = records(drained(lambda c: inject_runtime_call(
        c, "cudaOccupancyMaxActiveBlocksPerMultiprocessor", value=kernel,
        body=lambda: inject_call(c, "cuOccupancyMaxActiveBlocksPerMultiprocessor", value=kernel + 1))))
    assert got == span(RUNTIME_INIT, "cupti:cudaOccupancyMaxActiveBlocksPerMultiprocessor")


def test_a_query_does_not_hide_the_kernel_s_first_launch_and_is_no_launch():
    kernel = next(kernel_ids)
    before = _native.cupti_stats()

    def body(c):
        inject_runtime_call(c, "cudaFuncGetAttributes", value=kernel)
        inject_runtime_call(c, "cudaLaunchKernel", value=kernel)

    got = records(drained(body))
    assert got == span(RUNTIME_INIT, "cupti:cudaFuncGetAttributes") + span(STRUCTURE, "cupti:cudaLaunchKernel", 1)
    delta = stats_delta(before, _native.cupti_stats())
    assert delta["kernel_launches"] == 1 and delta["new_kernel_count"] == 1


@pytest.mark.skipif("__cudaGetKernel_v13000" not in RUNTIME, reason="headers before CUDA 13")
def test_nvcc13_s_kernel_lookup_without_parameters_is_known_by_its_symbol():
    cbid = RUNTIME["__cudaGetKernel_v13000"]
    symbol = f"_Z6lookup{next(kernel_ids)}v"

    def body(c):
        for _ in range(2):
            _native._testing.cupti_inject_unparamed(RT, cbid, True, c(), symbol)
            _native._testing.cupti_inject_unparamed(RT, cbid, False, c(), symbol)

    assert records(drained(body)) == span(RUNTIME_INIT, "cupti:__cudaGetKernel")


def test_a_query_of_an_unknown_kernel_is_timed_every_time():
    if "__cudaGetKernel_v13000" not in RUNTIME:
        pytest.skip("headers before CUDA 13")
    cbid = RUNTIME["__cudaGetKernel_v13000"]

    def body(c):
        for _ in range(2):
            _native._testing.cupti_inject_unparamed(RT, cbid, True, c(), "")
            _native._testing.cupti_inject_unparamed(RT, cbid, False, c(), "")

    assert records(drained(body)) == span(RUNTIME_INIT, "cupti:__cudaGetKernel") * 2

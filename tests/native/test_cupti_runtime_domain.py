"""The CUDA runtime domain: eager PyTorch calls cudaLaunchKernel, cudaMalloc, cudaMemcpyAsync,
cudaStreamBeginCapture, cudaGraphInstantiate, and the runtime calls the driver inside. CUPTI may or
may not report those inner driver calls; either way each operation counts once: a driver call made
while a runtime call of the same operation is open on the thread is not counted again, a driver call
with no runtime call around it is counted, and a driver call of another operation (a module load
inside cudaLaunchKernel) is recorded inside the runtime call."""

from __future__ import annotations

import threading

import pytest
from cupti_calls import (
    DRIVER, RUNTIME, RT, Clock, D, drained, inject_call, inject_resource, inject_runtime_call, kernel_ids,
    records, runtime_id, skip_without_cupti, span,
)

from warmprof import _native
from warmprof.timeline import (
    ALLOCATOR_GROWTH, BEGIN, DATA_TRANSFER, END, GRAPH_CAPTURE, JIT_COMPILE, RUNTIME_INIT, STRUCTURE, Recording,
)

skip_without_cupti()

DRIVER_SIDE = 1_000_000_000  # the driver's CUfunction of a runtime-launched kernel: another value than its host entry

# Runtime calls by family (names without the version suffix) -> the cause they carry.
RUNTIME_FAMILIES = {
    RUNTIME_INIT: ["cudaInitDevice_v12000", "cudaLibraryLoadData_v12060", "cudaLibraryLoadFromFile_v12060"],
    STRUCTURE: ["cudaLaunchKernel_v7000", "cudaLaunchKernel_ptsz_v7000", "cudaLaunchCooperativeKernel_v9000",
                "cudaLaunchCooperativeKernel_ptsz_v9000", "cudaLaunchKernelExC_v11060",
                "cudaLaunchKernelExC_ptsz_v11060", "__cudaLaunchKernel_v13000", "__cudaLaunchKernel_ptsz_v13000"],
    ALLOCATOR_GROWTH: ["cudaMalloc_v3020", "cudaMallocPitch_v3020", "cudaMallocHost_v3020", "cudaHostAlloc_v3020",
                       "cudaMallocManaged_v6000", "cudaMemPoolCreate_v11020", "cudaMallocAsync_v11020",
                       "cudaMallocAsync_ptsz_v11020", "cudaMallocFromPoolAsync_v11020",
                       "cudaMallocFromPoolAsync_ptsz_v11020"],
    GRAPH_CAPTURE: ["cudaStreamBeginCapture_v10000", "cudaStreamBeginCapture_ptsz_v10000",
                    "cudaStreamBeginCaptureToGraph_v12030", "cudaStreamBeginCaptureToGraph_ptsz_v12030",
                    "cudaStreamEndCapture_v10000", "cudaStreamEndCapture_ptsz_v10000", "cudaGraphInstantiate_v10000",
                    "cudaGraphInstantiate_v12000", "cudaGraphInstantiateWithFlags_v11040",
                    "cudaGraphInstantiateWithParams_v12000", "cudaGraphInstantiateWithParams_ptsz_v12000",
                    "cudaGraphUpload_v10000", "cudaGraphUpload_ptsz_v10000"],
    DATA_TRANSFER: ["cudaMemcpy_v3020", "cudaMemcpy_ptds_v7000", "cudaMemcpyAsync_v3020", "cudaMemcpyAsync_ptsz_v7000",
                    "cudaMemcpyToSymbol_v3020", "cudaMemcpyToSymbol_ptds_v7000", "cudaMemcpyToSymbolAsync_v3020",
                    "cudaMemcpyToSymbolAsync_ptsz_v7000", "cudaMemPrefetchAsync_v8000",
                    "cudaMemPrefetchAsync_ptsz_v8000", "cudaMemPrefetchAsync_v12020",
                    "cudaMemPrefetchAsync_ptsz_v12020"],
}


@pytest.mark.parametrize("cause,names", sorted(RUNTIME_FAMILIES.items()), ids=lambda v: str(v)[:30])
def test_runtime_calls_are_classified_like_their_driver_calls(cause, names):
    for full in names:
        assert full in RUNTIME, f"{full} missing from the runtime header"
        assert _native.cupti_classify(RT, RUNTIME[full]) == cause, full
        assert _native.cupti_callback_name(RT, RUNTIME[full]) == full.rsplit("_v", 1)[0]  # records drop the version


def test_runtime_calls_warmprof_ignores():
    for name in ("cudaFree", "cudaGetDevice", "cudaSetDevice", "cudaStreamSynchronize", "cudaEventRecord",
                 "cudaGraphLaunch", "cudaDeviceSynchronize"):
        assert _native.cupti_classify(RT, runtime_id(name)) == -1, name


def _launch_pair(c, kernel, runtime_name="cudaLaunchKernel", driver_name="cuLaunchKernel", driver_too=True):
    """cudaLaunchKernel enter, [cuLaunchKernel enter/exit,] cudaLaunchKernel exit."""
    body = (lambda: inject_call(c, driver_name, value=kernel + DRIVER_SIDE)) if driver_too else None
    inject_runtime_call(c, runtime_name, value=kernel, body=body)


def test_a_runtime_launch_and_the_driver_launch_inside_it_count_once():
    kernel = next(kernel_ids)
    before = _native.cupti_stats()
    got = records(drained(lambda c: [_launch_pair(c, kernel) for _ in range(3)]))
    after = _native.cupti_stats()
    assert got == span(STRUCTURE, "cupti:cudaLaunchKernel", 1)  # one first launch: the runtime's
    assert after["kernel_launches"] - before["kernel_launches"] == 3  # not 6
    assert after["new_kernel_count"] - before["new_kernel_count"] == 1
    assert after["callbacks"] - before["callbacks"] == 12  # every callback taken is counted, absorbed ones too


def test_a_runtime_launch_counts_when_cupti_reports_no_driver_call_inside():
    kernel = next(kernel_ids)
    before = _native.cupti_stats()
    got = records(drained(lambda c: [_launch_pair(c, kernel, driver_too=False) for _ in range(2)]))
    assert got == span(STRUCTURE, "cupti:cudaLaunchKernel", 1)
    assert _native.cupti_stats()["kernel_launches"] - before["kernel_launches"] == 2


def test_a_driver_launch_without_a_runtime_call_around_it_counts():
    """Triton and CuPy launch through the driver directly."""
    kernel = next(kernel_ids)
    before = _native.cupti_stats()
    got = records(drained(lambda c: [inject_call(c, "cuLaunchKernel", value=kernel) for _ in range(2)]))
    assert got == span(STRUCTURE, "cupti:cuLaunchKernel", 1)
    assert _native.cupti_stats()["kernel_launches"] - before["kernel_launches"] == 2


def test_a_runtime_allocation_and_the_driver_allocation_inside_it_are_one_span_with_the_bytes_once():
    def body(c):
        inject_runtime_call(c, "cudaMalloc", value=8 << 20, body=lambda: inject_call(c, "cuMemAlloc_v2", value=8 << 20))
        inject_call(c, "cuMemAlloc_v2", value=1 << 20)  # on its own: counted

    assert records(drained(body)) == (span(ALLOCATOR_GROWTH, "cupti:cudaMalloc", 8 << 20) +
                                      span(ALLOCATOR_GROWTH, "cupti:cuMemAlloc_v2", 1 << 20))


def test_a_runtime_copy_and_the_driver_copy_inside_it_are_one_span():
    def body(c):
        inject_runtime_call(c, "cudaMemcpyAsync", value=4096,
                            body=lambda: inject_call(c, "cuMemcpyHtoDAsync_v2", value=4096))

    assert records(drained(body)) == span(DATA_TRANSFER, "cupti:cudaMemcpyAsync", 4096)


def test_a_runtime_stream_capture_with_driver_calls_inside_is_one_capture():
    kernel = next(kernel_ids)

    def body(c):
        inject_runtime_call(c, "cudaStreamBeginCapture", body=lambda: inject_call(c, "cuStreamBeginCapture_v2"))
        _launch_pair(c, kernel)
        inject_runtime_call(c, "cudaStreamEndCapture", body=lambda: inject_call(c, "cuStreamEndCapture"))
        inject_runtime_call(c, "cudaGraphInstantiate_v12000",
                            body=lambda: inject_call(c, "cuGraphInstantiateWithFlags"))

    got = records(drained(body))
    assert got == [(BEGIN, GRAPH_CAPTURE, "cupti:stream_capture", 0),
                   *span(STRUCTURE, "cupti:cudaLaunchKernel", 1),
                   (END, GRAPH_CAPTURE, "cupti:stream_capture", 0),
                   *span(GRAPH_CAPTURE, "cupti:cudaGraphInstantiate")]


def test_a_driver_call_of_another_operation_inside_a_runtime_call_is_recorded():
    """cudaLaunchKernel of a kernel whose module is loaded lazily: the load is its own operation."""
    kernel = next(kernel_ids)

    def body(c):
        def inside():
            inject_call(c, "cuLaunchKernel", value=kernel + DRIVER_SIDE,
                        body=lambda: inject_call(c, "cuModuleLoadData"))

        inject_runtime_call(c, "cudaLaunchKernel", value=kernel, body=inside)

    assert records(drained(body)) == [
        (BEGIN, RUNTIME_INIT, "cupti:lazy_load", 1),  # the runtime launch became the lazy load
        *span(RUNTIME_INIT, "cupti:cuModuleLoadData"),
        (END, RUNTIME_INIT, "cupti:lazy_load", 1),
    ]


def test_a_module_loaded_event_inside_a_runtime_launch_makes_it_a_lazy_load():
    kernel = next(kernel_ids)

    def body(c):
        inject_runtime_call(c, "cudaLaunchKernel", value=kernel,
                            body=lambda: inject_call(c, "cuLaunchKernel", value=kernel + DRIVER_SIDE,
                                                     body=lambda: inject_resource(c, "MODULE_LOADED", 512)))

    got = records(drained(body))
    assert [r[:3] for r in got] == [(BEGIN, RUNTIME_INIT, "cupti:lazy_load"),
                                    (2, RUNTIME_INIT, "cupti:MODULE_LOADED"),
                                    (END, RUNTIME_INIT, "cupti:lazy_load")]


def test_a_runtime_call_on_one_thread_does_not_absorb_a_driver_call_on_another():
    kernel = next(kernel_ids)
    before = _native.cupti_stats()
    with Recording() as rec:
        c = Clock()
        _native._testing.cupti_inject(RT, runtime_id("cudaLaunchKernel"), True, c(), kernel)
        t = threading.Thread(target=lambda: inject_call(c, "cuLaunchKernel", value=kernel + DRIVER_SIDE))
        t.start()
        t.join()
        _native._testing.cupti_inject(RT, runtime_id("cudaLaunchKernel"), False, c(), kernel)
    names = {r[2] for r in records(rec.drain())}
    assert names == {"cupti:cudaLaunchKernel", "cupti:cuLaunchKernel"}
    assert _native.cupti_stats()["kernel_launches"] - before["kernel_launches"] == 2


def test_frames_of_the_two_domains_do_not_match_each_other():
    """Runtime and driver ids are numbered apart: cudaMalloc's id (20) is cuModuleLoadDataEx's too. A
    driver exit never closes a runtime call of the same number, nor the reverse."""
    shared = RUNTIME["cudaMalloc_v3020"]
    assert DRIVER["cuModuleLoadDataEx"] == shared

    def body(c):
        _native._testing.cupti_inject(RT, shared, True, c(), 64)  # cudaMalloc enter
        _native._testing.cupti_inject(D, shared, False, c(), 0)  # a cuModuleLoadDataEx exit never entered: ignored
        _native._testing.cupti_inject(RT, shared, False, c(), 64)

    assert records(drained(body)) == span(ALLOCATOR_GROWTH, "cupti:cudaMalloc", 64)


def test_a_jit_load_inside_a_runtime_launch_is_jit_compile():
    ptx = b"//\n// Generated by NVIDIA NVVM Compiler\n.version 8.5\n.target sm_90\n"
    kernel = next(kernel_ids)

    def body(c):
        _native._testing.cupti_inject(RT, runtime_id("cudaLaunchKernel"), True, c(), kernel)
        _native._testing.cupti_inject_load(D, DRIVER["cuModuleLoadData"], True, c(), ptx)
        _native._testing.cupti_inject_load(D, DRIVER["cuModuleLoadData"], False, c(), ptx)
        _native._testing.cupti_inject(RT, runtime_id("cudaLaunchKernel"), False, c(), kernel)

    assert records(drained(body)) == [(BEGIN, JIT_COMPILE, "cupti:lazy_load", 1),
                                      *span(JIT_COMPILE, "cupti:cuModuleLoadData"),
                                      (END, JIT_COMPILE, "cupti:lazy_load", 1)]

"""CUPTI decoding and nesting, fed with synthetic callbacks through the real handler.

The callback ids are parsed from this machine's toolkit headers (cupti_calls.py), so the test checks
the decoder against the real ids, not against copies. Each family goes through
`_native._testing.cupti_inject` -> the same handler the CUPTI callback calls -> the recorder, and is
read back from a drained Recording. The runtime domain, module images, the hot path and the
allocator rules have files of their own (test_cupti_*.py).
"""

from __future__ import annotations

import itertools

import pytest
from cupti_calls import (
    DOMAIN,
    DRIVER,
    DRIVER_HEADER,
    RESOURCE,
    RT,
    RUNTIME,
    Clock,
    D,
    R,
    drained,
    inject_call,
    inject_resource,
    kernel_ids,
    records,
    runtime_id,
    skip_without_cupti,
    span,
)
from warmprof import _native, timeline
from warmprof.attribution import attribute_pass, build_spans
from warmprof.timeline import (
    ALLOCATOR_GROWTH,
    BEGIN,
    DATA_TRANSFER,
    END,
    GRAPH_CAPTURE,
    INSTANT,
    JIT_COMPILE,
    RUNTIME_INIT,
    STRUCTURE,
    Recording,
)

skip_without_cupti()
_kernel_ids = kernel_ids

# Every callback family the backend decodes, by header name -> expected cause.
RUNTIME_INIT_CALLS = ["cuInit", "cuCtxCreate", "cuCtxCreate_v2", "cuCtxCreate_v3", "cuCtxCreate_v4",
                      "cuDevicePrimaryCtxRetain"]
LOAD_CALLS = ["cuModuleLoad", "cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoadFatBinary",
              "cuLibraryLoadData", "cuLibraryLoadFromFile"]
LOOKUP_CALLS = ["cuModuleGetFunction", "cuLibraryGetModule", "cuLibraryGetKernel", "cuKernelGetFunction"]
MODULE_CALLS = LOAD_CALLS + LOOKUP_CALLS
LAUNCH_CALLS = ["cuLaunch", "cuLaunchGrid", "cuLaunchGridAsync", "cuLaunchKernel", "cuLaunchKernel_ptsz",
                "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz", "cuLaunchKernelEx",
                "cuLaunchKernelEx_ptsz"]
BYTE_ALLOC_CALLS = ["cuMemAlloc", "cuMemAlloc_v2", "cuMemAllocPitch", "cuMemAllocPitch_v2", "cuMemAllocManaged",
                    "cuMemAllocHost", "cuMemAllocHost_v2", "cuMemHostAlloc", "cuMemHostAlloc_v2", "cuMemCreate"]
VMM_STEP_CALLS = ["cuMemAddressReserve", "cuMemMap", "cuMemSetAccess", "cuMemPoolCreate"]
ASYNC_ALLOC_CALLS = ["cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync",
                     "cuMemAllocFromPoolAsync_ptsz"]
ALLOC_CALLS = BYTE_ALLOC_CALLS + VMM_STEP_CALLS + ASYNC_ALLOC_CALLS
CAPTURE_BEGIN_CALLS = ["cuStreamBeginCapture", "cuStreamBeginCapture_ptsz", "cuStreamBeginCapture_v2",
                       "cuStreamBeginCapture_v2_ptsz", "cuStreamBeginCaptureToGraph",
                       "cuStreamBeginCaptureToGraph_ptsz"]
CAPTURE_END_CALLS = ["cuStreamEndCapture", "cuStreamEndCapture_ptsz"]
GRAPH_CALLS = ["cuGraphInstantiate", "cuGraphInstantiate_v2", "cuGraphInstantiateWithFlags",
               "cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams_ptsz", "cuGraphUpload",
               "cuGraphUpload_ptsz"]
COPY_CALLS = ["cuMemcpyHtoD", "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds", "cuMemcpyHtoDAsync",
              "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz", "cuMemPrefetchAsync",
              "cuMemPrefetchAsync_ptsz", "cuMemPrefetchAsync_v2", "cuMemPrefetchAsync_v2_ptsz",
              "cuMemcpy", "cuMemcpy_ptds", "cuMemcpyAsync", "cuMemcpyAsync_ptsz"]
IGNORED_CALLS = ["cuMemFree_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2", "cuStreamSynchronize", "cuCtxGetCurrent",
                 "cuModuleUnload", "cuGraphLaunch", "cuEventRecord", "cuPointerGetAttribute"]

FAMILIES = {
    RUNTIME_INIT: RUNTIME_INIT_CALLS + MODULE_CALLS,
    STRUCTURE: LAUNCH_CALLS,
    ALLOCATOR_GROWTH: ALLOC_CALLS,
    GRAPH_CAPTURE: CAPTURE_BEGIN_CALLS + CAPTURE_END_CALLS + GRAPH_CALLS,
    DATA_TRANSFER: COPY_CALLS,
}


# --- the table: every id family, against the header's ids ----------------------------------------

@pytest.mark.parametrize("cause,names", sorted(FAMILIES.items()), ids=lambda v: str(v)[:30])
def test_classify_every_family(cause, names):
    for name in names:
        assert name in DRIVER, f"{name} missing from {DRIVER_HEADER}"
        assert _native.cupti_classify(D, DRIVER[name]) == cause, name
        assert _native.cupti_callback_name(D, DRIVER[name]) == name


def test_classify_resource_callbacks():
    for name in ("CONTEXT_CREATED", "CU_INIT_FINISHED", "MODULE_LOADED"):
        assert _native.cupti_classify(R, RESOURCE[name]) == RUNTIME_INIT, name
        assert _native.cupti_callback_name(R, RESOURCE[name]) == name
    for name in ("STREAM_CREATED", "CONTEXT_DESTROY_STARTING", "GRAPH_CREATED", "MODULE_UNLOAD_STARTING"):
        assert _native.cupti_classify(R, RESOURCE[name]) == -1, name


def test_ignored_and_out_of_range_ids():
    for name in IGNORED_CALLS:
        assert _native.cupti_classify(D, DRIVER[name]) == -1, name
        assert _native.cupti_callback_name(D, DRIVER[name]) == ""
    assert _native.cupti_classify(D, DRIVER["SIZE"]) == -1
    assert _native.cupti_classify(D, 2**32 - 1) == -1
    assert _native.cupti_classify(RT, RUNTIME["SIZE"]) == -1
    assert _native.cupti_classify(RT, runtime_id("cudaFree")) == -1
    assert _native.cupti_classify(DOMAIN["NVTX"], 1) == -1


# --- each family through the handler into the recorder -------------------------------------------

@pytest.mark.parametrize("name", RUNTIME_INIT_CALLS + MODULE_CALLS)
def test_runtime_init_calls_are_spans(name):
    tl = drained(lambda c: inject_call(c, name))
    assert records(tl) == span(RUNTIME_INIT, f"cupti:{name}")


@pytest.mark.parametrize("name", BYTE_ALLOC_CALLS)
def test_allocations_carry_bytes(name):
    tl = drained(lambda c: inject_call(c, name, value=3 << 20))
    assert records(tl) == span(ALLOCATOR_GROWTH, f"cupti:{name}", 3 << 20)


@pytest.mark.parametrize("name", COPY_CALLS)
def test_host_to_device_copies_carry_bytes(name):
    tl = drained(lambda c: inject_call(c, name, value=4096))
    assert records(tl) == span(DATA_TRANSFER, f"cupti:{name}", 4096)


@pytest.mark.parametrize("name", GRAPH_CALLS)
def test_graph_instantiate_and_upload(name):
    tl = drained(lambda c: inject_call(c, name))
    assert records(tl) == span(GRAPH_CAPTURE, f"cupti:{name}")


@pytest.mark.parametrize("begin_name,end_name", list(itertools.product(CAPTURE_BEGIN_CALLS, CAPTURE_END_CALLS)))
def test_stream_capture_is_one_span_from_begin_to_end(begin_name, end_name):
    def body(c):
        inject_call(c, begin_name)
        inject_call(c, "cuLaunchKernel", value=next(_kernel_ids))  # captured, not run
        inject_call(c, end_name)

    got = records(drained(body))
    assert got[0] == (BEGIN, GRAPH_CAPTURE, "cupti:stream_capture", 0)
    assert got[-1] == (END, GRAPH_CAPTURE, "cupti:stream_capture", 0)
    assert [r[2] for r in got[1:-1]] == ["cupti:cuLaunchKernel"] * 2


def test_failed_begin_capture_closes_the_capture_at_once():
    def body(c):
        inject_call(c, "cuStreamBeginCapture_v2", failed=True)
        inject_call(c, "cuMemAlloc_v2", value=1)

    assert records(drained(body)) == span(GRAPH_CAPTURE, "cupti:stream_capture") + span(
        ALLOCATOR_GROWTH, "cupti:cuMemAlloc_v2", 1)


def test_end_capture_without_begin_is_timed_as_its_own_call():
    tl = drained(lambda c: inject_call(c, "cuStreamEndCapture"))
    assert records(tl) == span(GRAPH_CAPTURE, "cupti:cuStreamEndCapture")


@pytest.mark.parametrize("name", ["CONTEXT_CREATED", "CU_INIT_FINISHED"])
def test_resource_init_events_are_instants(name):
    tl = drained(lambda c: inject_resource(c, name))
    assert records(tl) == [(INSTANT, RUNTIME_INIT, f"cupti:{name}", 0)]


# --- kernel launches: counted, a span for a kernel's first launch only ----------------------------

@pytest.mark.parametrize("name", LAUNCH_CALLS)
def test_launch_is_counted_and_only_the_first_launch_of_a_kernel_is_a_span(name):
    kernel = next(_kernel_ids)
    before = _native.cupti_stats()

    def body(c):
        for _ in range(3):
            inject_call(c, name, value=kernel)

    got = records(drained(body))
    assert got == span(STRUCTURE, f"cupti:{name}", 1)  # the repeat launches are counted, not recorded
    after = _native.cupti_stats()
    assert after["kernel_launches"] - before["kernel_launches"] == 3
    assert after["new_kernel_count"] - before["new_kernel_count"] == 1
    assert after["new_kernels"][len(before["new_kernels"]):] == [f"kernel#{kernel}"]
    assert after["callbacks"] - before["callbacks"] == 6


def test_launch_that_loads_a_module_is_runtime_init_lazy_load():
    kernel = next(_kernel_ids)

    def body(c):
        _native._testing.cupti_inject(D, DRIVER["cuLaunchKernel"], True, c(), kernel)
        inject_resource(c, "MODULE_LOADED", value=65536)
        _native._testing.cupti_inject(D, DRIVER["cuLaunchKernel"], False, c(), kernel)

    assert records(drained(body)) == [
        (BEGIN, RUNTIME_INIT, "cupti:lazy_load", 1),
        (INSTANT, RUNTIME_INIT, "cupti:MODULE_LOADED", 65536),
        (END, RUNTIME_INIT, "cupti:lazy_load", 1),
    ]


@pytest.mark.parametrize("load", LOAD_CALLS)
def test_launch_containing_a_load_call_is_lazy_load(load):
    def body(c):
        kernel = next(_kernel_ids)
        _native._testing.cupti_inject(D, DRIVER["cuLaunchKernelEx"], True, c(), kernel)
        inject_call(c, load)
        _native._testing.cupti_inject(D, DRIVER["cuLaunchKernelEx"], False, c(), kernel)

    assert records(drained(body)) == [
        (BEGIN, RUNTIME_INIT, "cupti:lazy_load", 1),
        *span(RUNTIME_INIT, f"cupti:{load}"),
        (END, RUNTIME_INIT, "cupti:lazy_load", 1),
    ]


@pytest.mark.parametrize("lookup", LOOKUP_CALLS)
def test_a_lookup_inside_a_launch_is_not_a_lazy_load(lookup):
    """cuModuleGetFunction, cuLibraryGetKernel, ... find what is loaded; they load nothing of their own."""
    kernel = next(_kernel_ids)

    def body(c):
        _native._testing.cupti_inject(D, DRIVER["cuLaunchKernelEx"], True, c(), kernel)
        inject_call(c, lookup)
        _native._testing.cupti_inject(D, DRIVER["cuLaunchKernelEx"], False, c(), kernel)

    assert records(drained(body)) == [
        (BEGIN, STRUCTURE, "cupti:cuLaunchKernelEx", 1),  # a first launch, not runtime_init
        *span(RUNTIME_INIT, f"cupti:{lookup}"),
        (END, STRUCTURE, "cupti:cuLaunchKernelEx", 1),
    ]


def test_a_lookup_that_loads_is_marked_by_the_load_not_by_itself():
    """With lazy loading the driver may load inside a lookup; MODULE_LOADED says so, and the launch
    around it is a lazy load then."""
    kernel = next(_kernel_ids)

    def body(c):
        _native._testing.cupti_inject(D, DRIVER["cuLaunchKernel"], True, c(), kernel)
        inject_call(c, "cuKernelGetFunction", body=lambda: inject_resource(c, "MODULE_LOADED", value=4096))
        _native._testing.cupti_inject(D, DRIVER["cuLaunchKernel"], False, c(), kernel)

    got = records(drained(body))
    assert got[0] == (BEGIN, RUNTIME_INIT, "cupti:lazy_load", 1) and got[-1] == (END, RUNTIME_INIT, "cupti:lazy_load", 1)


def test_module_load_inside_launch_inside_compile_nests_and_attributes():
    """A compile span (Python) holding a launch that lazily loads a module: nothing double counted."""
    compile_id = timeline.name_id("torch.compile:compile")
    pass_id = timeline.name_id("pass:first")
    kernel = next(_kernel_ids)
    with Recording() as rec:
        c = Clock()
        _native.record_at(BEGIN, STRUCTURE, pass_id, 0, c())
        _native.record_at(BEGIN, JIT_COMPILE, compile_id, 0, c())
        _native._testing.cupti_inject(D, DRIVER["cuLaunchKernel"], True, c(), kernel)
        inject_call(c, "cuModuleLoadData")
        inject_resource(c, "MODULE_LOADED", value=1024)
        _native._testing.cupti_inject(D, DRIVER["cuLaunchKernel"], False, c(), kernel)
        inject_call(c, "cuMemAlloc_v2", value=2 << 20)
        _native.record_at(END, JIT_COMPILE, compile_id, 0, c())
        _native.record_at(END, STRUCTURE, pass_id, 0, c())
    tl = rec.drain()

    spans = {s.name: s for s in build_spans(tl)}
    launch, load, compile_span = spans["cupti:lazy_load"], spans["cupti:cuModuleLoadData"], spans["torch.compile:compile"]
    alloc = spans["cupti:cuMemAlloc_v2"]
    assert compile_span.start_ns < launch.start_ns < load.start_ns < load.end_ns < launch.end_ns < compile_span.end_ns
    assert launch.cause == RUNTIME_INIT and launch.depth == compile_span.depth + 1 and load.depth == launch.depth + 1
    assert alloc.cause == ALLOCATOR_GROWTH and alloc.value == 2 << 20

    result = attribute_pass(tl, "first")
    by_cause = {}
    for p in result.parts:
        by_cause[p.cause] = by_cause.get(p.cause, 0.0) + p.ns
    # The whole launch (its load included) is runtime_init; the allocation is allocator growth;
    # the compile keeps the rest of its span; the sum never exceeds the pass.
    assert by_cause["runtime_init"] == pytest.approx(launch.end_ns - launch.start_ns)
    assert by_cause["allocator_growth"] == pytest.approx(alloc.end_ns - alloc.start_ns)
    compile_own = (compile_span.end_ns - compile_span.start_ns) - by_cause["runtime_init"] - by_cause["allocator_growth"]
    assert by_cause["jit_compile"] == pytest.approx(compile_own)
    assert sum(by_cause.values()) <= result.pass_ms * 1e6
    assert {p.source for p in result.parts} >= {"cupti", "torch.compile"}


def test_plain_launch_inside_compile_leaves_the_time_to_the_compile():
    compile_id = timeline.name_id("torch.compile:compile")
    pass_id = timeline.name_id("pass:first")
    with Recording() as rec:
        c = Clock()
        _native.record_at(BEGIN, STRUCTURE, pass_id, 0, c())
        _native.record_at(BEGIN, JIT_COMPILE, compile_id, 0, c())
        inject_call(c, "cuLaunchKernel", value=next(_kernel_ids))
        _native.record_at(END, JIT_COMPILE, compile_id, 0, c())
        _native.record_at(END, STRUCTURE, pass_id, 0, c())
    tl = rec.drain()
    parts = attribute_pass(tl, "first").parts
    assert [(p.cause, p.source) for p in parts] == [("jit_compile", "torch.compile")]


def test_exit_without_enter_is_ignored():
    def body(c):
        _native._testing.cupti_inject(D, DRIVER["cuMemAlloc_v2"], False, c(), 8)
        _native._testing.cupti_inject(D, DRIVER["cuLaunchKernel"], False, c(), next(_kernel_ids))

    assert records(drained(body)) == []


def test_deep_nesting_past_the_frame_limit_stays_balanced():
    depth = 40

    def body(c):
        for _ in range(depth):
            _native._testing.cupti_inject(D, DRIVER["cuMemAlloc_v2"], True, c(), 1)
        for _ in range(depth):
            _native._testing.cupti_inject(D, DRIVER["cuMemAlloc_v2"], False, c(), 1)

    got = records(drained(body))
    begins = sum(1 for r in got if r[0] == BEGIN)
    ends = sum(1 for r in got if r[0] == END)
    assert begins == ends and 0 < begins < depth


def test_open_calls_do_not_leak_into_the_next_recording():
    with Recording():
        _native._testing.cupti_inject(D, DRIVER["cuStreamBeginCapture_v2"], True, _native.now_ticks(), 0)
        _native._testing.cupti_inject(D, DRIVER["cuStreamBeginCapture_v2"], False, _native.now_ticks(), 0)
    tl = drained(lambda c: inject_call(c, "cuStreamEndCapture"))
    # The capture opened in the previous recording is gone: this EndCapture is timed on its own.
    assert records(tl) == span(GRAPH_CAPTURE, "cupti:cuStreamEndCapture")


def test_inject_outside_a_recording_writes_nothing_and_does_not_raise():
    assert not timeline.active()
    _native._testing.cupti_inject(D, DRIVER["cuMemAlloc_v2"], True, _native.now_ticks(), 1)
    _native._testing.cupti_inject(D, DRIVER["cuMemAlloc_v2"], False, _native.now_ticks(), 1)

"""torch's CUDA-side instruments with their torch inputs faked or run on the CPU."""

from __future__ import annotations

import pytest

from warmprof.instruments.torch_cuda import (
    ALLOCATOR_STATS,
    CudnnFind,
    InductorCudaMetrics,
    TorchCudaAllocator,
    allocator_delta,
    metric_totals_ms,
)
from warmprof.timeline import ALGORITHM_SELECTION, BEGIN, COUNTER, END, Recording

torch = pytest.importorskip("torch")


def _stats(segments: int, allocs: int, retries: int = 0, reserved: int = 0) -> dict:
    return {ALLOCATOR_STATS["segments"]: segments, ALLOCATOR_STATS["device_allocs"]: allocs,
            ALLOCATOR_STATS["alloc_retries"]: retries, ALLOCATOR_STATS["reserved_bytes"]: reserved}


def test_allocator_delta_is_pure_and_tolerates_missing_keys():
    d = allocator_delta(_stats(2, 5, reserved=1 << 20), _stats(7, 11, retries=1, reserved=9 << 20))
    assert d["segments"] == 5 and d["device_allocs"] == 6 and d["alloc_retries"] == 1
    assert d["reserved_bytes"] == 8 << 20
    assert d["ooms"] == 0 and d["device_frees"] == 0


def test_allocator_instrument_counts_growth_per_pass_and_writes_counters():
    feed = iter([_stats(0, 0), _stats(4, 6, reserved=8 << 20), _stats(4, 6, reserved=8 << 20),
                 _stats(4, 6, reserved=8 << 20)])
    with Recording() as rec:
        with TorchCudaAllocator(memory_stats=lambda: next(feed)) as inst:
            for name in ("first", "seen_rerun"):
                inst.mark_pass(name)
                inst.end_pass(name)
    tl = rec.drain()
    passes = inst.summary()["passes"]
    assert passes["first"]["segments"] == 4 and passes["first"]["device_allocs"] == 6
    assert passes["seen_rerun"]["segments"] == 0
    seg = [int(tl.value[i]) for i in range(len(tl)) if tl.kind[i] == COUNTER and tl.name_of(i) == "torch.cuda:segments"]
    assert seg == [0, 4, 4, 4]


def test_allocator_instrument_off_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    inst = TorchCudaAllocator()
    assert inst.reason == "torch.cuda is not available"
    with inst:
        inst.mark_pass("first")
        inst.end_pass("first")
    assert inst.summary() == {"active": False, "reason": "torch.cuda is not available"}


@pytest.fixture
def benchmark_on(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    monkeypatch.setattr(CudnnFind, "_first_done", True)  # cuDNN's first call of the process already ran


def _global_hook_count() -> int:
    m = torch.nn.modules.module
    return len(m._global_forward_pre_hooks) + len(m._global_forward_hooks)


def _find_spans(tl) -> list[tuple[int, int]]:
    return [(int(tl.kind[i]), int(tl.cause[i])) for i in range(len(tl)) if tl.name_of(i) == "cudnn:find"]


def test_cudnn_find_spans_first_call_per_new_conv_shape(benchmark_on):
    conv = torch.nn.Conv2d(3, 5, 3, padding=1)
    net = torch.nn.Sequential(conv, torch.nn.ReLU())
    hooks_before = _global_hook_count()
    # Unique spatial sizes: the instrument's seen set is process-wide, like cuDNN's cache.
    a, b = torch.randn(1, 3, 17, 19), torch.randn(1, 3, 23, 29)
    with Recording() as rec:
        with CudnnFind(require_cuda=False) as inst:
            inst.mark_pass("first")
            net(a)
            net(a)
            inst.mark_pass("seen_rerun")
            net(a)
            net(b)
    tl = rec.drain()
    assert _find_spans(tl) == [(BEGIN, ALGORITHM_SELECTION), (END, ALGORITHM_SELECTION)] * 2
    assert inst.summary()["new_shapes"] == {"first": 1, "seen_rerun": 1}
    assert _global_hook_count() == hooks_before


def test_cudnn_find_closes_its_span_when_the_conv_raises(benchmark_on):
    conv = torch.nn.Conv2d(3, 5, 3)
    hooks_before = _global_hook_count()
    with Recording() as rec:
        with CudnnFind(require_cuda=False):
            with pytest.raises(RuntimeError):
                conv(torch.randn(1, 4, 31, 37))  # wrong channel count: conv raises
    assert _find_spans(rec.drain()) == [(BEGIN, ALGORITHM_SELECTION), (END, ALGORITHM_SELECTION)]
    assert _global_hook_count() == hooks_before


def test_cudnn_find_ignores_cpu_tensors_by_default(benchmark_on):
    conv = torch.nn.Conv2d(3, 5, 3)
    inst = CudnnFind()
    if inst.reason:
        assert "cuDNN" in inst.reason
        return
    with Recording() as rec:
        with inst:
            conv(torch.randn(1, 3, 41, 43))
    assert _find_spans(rec.drain()) == []


def test_cudnn_find_off_when_benchmark_is_off(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    monkeypatch.setattr(CudnnFind, "_first_done", True)  # and cuDNN's first call already ran
    inst = CudnnFind(require_cuda=False)
    assert "benchmark is off" in inst.reason
    hooks_before = _global_hook_count()
    with inst:
        assert _global_hook_count() == hooks_before


def test_metric_totals_map_torch_keys_to_causes():
    metrics = {
        "CUDAGraphNode.record": [0.5, 0.25],
        "CachingAutotuner.benchmark_all_configs": [0.1, 0.2, 0.3],
        "CachingAutotuner.coordinate_descent_tuning": [0.05],
        "mm_template_autotuning": [1.0],
        "compile_fx_inner": [9.0],
    }
    since = {"CUDAGraphNode.record": 1, "CachingAutotuner.benchmark_all_configs": 1}
    got = metric_totals_ms(metrics, since)
    assert got == pytest.approx({"cudagraph_record_ms": 250.0, "triton_autotune_ms": 550.0,
                                 "template_autotune_ms": 1000.0})


def test_inductor_metrics_per_pass():
    metrics: dict[str, list[float]] = {"CUDAGraphNode.record": [1.0]}
    with InductorCudaMetrics(metrics=metrics) as inst:
        inst.mark_pass("first")
        metrics.setdefault("CachingAutotuner.benchmark_all_configs", []).append(0.002)
        inst.end_pass("first")
        inst.mark_pass("seen_rerun")
        metrics["CUDAGraphNode.record"].append(0.003)
        inst.end_pass("seen_rerun")
    passes = inst.summary()["passes"]
    assert passes["first"] == pytest.approx({"triton_autotune_ms": 2.0})
    assert passes["seen_rerun"] == pytest.approx({"cudagraph_record_ms": 3.0})


def test_inductor_metrics_reads_torch_by_default():
    inst = InductorCudaMetrics()
    assert inst.available
    with inst:
        inst.mark_pass("first")
        inst.end_pass("first")
    assert inst.summary()["passes"] == {"first": {}}


# ---- issue 25, item 4: cuDNN's first call apart from later finds; TunableOp; lazy loads, not selection ----

def _cudnn_spans(tl) -> list[tuple[str, int, int]]:
    return [(tl.name_of(i), int(tl.kind[i]), int(tl.cause[i])) for i in range(len(tl))
            if tl.name_of(i).startswith("cudnn:")]


def test_the_first_cudnn_call_is_runtime_init_and_later_new_shapes_are_finds(monkeypatch):
    from warmprof.timeline import RUNTIME_INIT

    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    monkeypatch.setattr(CudnnFind, "_first_done", False)  # a fresh process: cuDNN not called yet
    conv = torch.nn.Conv2d(3, 5, 3, padding=1)
    a, b = torch.randn(1, 3, 53, 59), torch.randn(1, 3, 61, 67)
    with Recording() as rec:
        with CudnnFind(require_cuda=False) as inst:
            inst.mark_pass("first")
            conv(a)  # handle creation, sub-library loads (and this shape's find)
            conv(b)  # a find
            conv(b)
    spans = _cudnn_spans(rec.drain())
    assert spans == [("cudnn:first_call", BEGIN, RUNTIME_INIT), ("cudnn:first_call", END, RUNTIME_INIT),
                     ("cudnn:find", BEGIN, ALGORITHM_SELECTION), ("cudnn:find", END, ALGORITHM_SELECTION)]
    s = inst.summary()
    assert s["new_shapes"] == {"first": 1} and s["first_call_pass"] == "first" and s["benchmark"] is True


def test_with_benchmark_off_only_cudnns_first_call_is_bracketed(monkeypatch):
    from warmprof.timeline import RUNTIME_INIT

    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    monkeypatch.setattr(CudnnFind, "_first_done", False)
    conv = torch.nn.Conv2d(3, 5, 3)
    with Recording() as rec:
        with CudnnFind(require_cuda=False) as inst:
            inst.mark_pass("first")
            conv(torch.randn(1, 3, 71, 73))
            conv(torch.randn(1, 3, 79, 83))  # heuristics: no find to bracket (its lazy load is CUPTI's)
    assert _cudnn_spans(rec.drain()) == [("cudnn:first_call", BEGIN, RUNTIME_INIT), ("cudnn:first_call", END, RUNTIME_INIT)]
    assert any("heuristics" in n for n in inst.notes)


class _FakeTunable:
    def __init__(self, enabled: bool, tuning: bool = True) -> None:
        self.enabled, self.tuning = enabled, tuning

    def is_enabled(self) -> bool:
        return self.enabled

    def tuning_is_enabled(self) -> bool:
        return self.tuning


class _FakeTorch:
    def __init__(self, tunable=None, backend=None, benchmark=False) -> None:
        import types

        cuda = types.SimpleNamespace()
        if tunable is not None:
            cuda.tunable = tunable
        if backend is not None:
            cuda.get_allocator_backend = lambda: backend
        self.cuda = cuda
        self.backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(benchmark=benchmark))


def test_tunableop_is_detected_from_torch_or_the_environment():
    from warmprof.instruments.torch_cuda import library_settings, tunableop_enabled

    assert tunableop_enabled(_FakeTorch(), environ={}) is False
    assert tunableop_enabled(_FakeTorch(), environ={"PYTORCH_TUNABLEOP_ENABLED": "1"}) is True  # torch < 2.3
    assert tunableop_enabled(_FakeTorch(_FakeTunable(True)), environ={}) is True  # torch.cuda.tunable.enable()
    assert tunableop_enabled(_FakeTorch(_FakeTunable(True, tuning=False)), environ={}) is False  # replays a file
    assert library_settings(_FakeTorch(benchmark=True), environ={}) == {"tunableop": False, "cudnn_benchmark": True}


def test_a_new_gemm_shape_is_a_lazy_kernel_load_unless_the_library_benchmarks():
    from warmprof.instruments.torch_cuda import shape_cost_cause

    off = {"tunableop": False, "cudnn_benchmark": False}
    assert shape_cost_cause("matmul", off) == "runtime_init"
    assert shape_cost_cause("conv", off) == "runtime_init"
    assert shape_cost_cause("matmul", {**off, "tunableop": True}) == "algorithm_selection"
    assert shape_cost_cause("conv", {**off, "cudnn_benchmark": True}) == "algorithm_selection"
    assert shape_cost_cause("matmul", {**off, "cudnn_benchmark": True}) == "runtime_init"


# ---- issue 25, item 6: the allocator backend, and growth from reserved bytes ----

def test_the_allocator_backend_is_read_from_torch_or_the_alloc_conf():
    from warmprof.instruments.torch_cuda import allocator_backend

    assert allocator_backend(_FakeTorch(), environ={})["backend"] == "native"
    got = allocator_backend(_FakeTorch(), environ={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
    assert got["backend"] == "cudaMallocAsync"
    got = allocator_backend(_FakeTorch(), environ={"PYTORCH_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:64"})
    assert got == {"backend": "native", "expandable_segments": True, "how": "PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF"}
    assert allocator_backend(_FakeTorch(backend="cudaMallocAsync"), environ={})["how"] == "torch.cuda.get_allocator_backend()"


def test_under_cudamallocasync_the_counters_are_null_and_growth_is_reserved_bytes():
    backend = {"backend": "cudaMallocAsync", "expandable_segments": False, "how": "given"}
    feed = iter([_stats(0, 0, reserved=0), _stats(0, 0, reserved=6 << 20)])
    with TorchCudaAllocator(memory_stats=lambda: next(feed), backend=backend) as inst:
        inst.mark_pass("first")
        inst.end_pass("first")
    s = inst.summary()
    first = s["passes"]["first"]
    assert first["segments"] is None and first["device_allocs"] is None  # not a 0 that looks measured
    assert first["growth_bytes"] == 6 << 20 and first["growth_from"] == "reserved_bytes"
    assert s["backend"]["backend"] == "cudaMallocAsync"
    assert any("cudaMallocAsync" in n for n in inst.notes)


def test_when_even_reserved_bytes_read_zero_the_devices_used_memory_stands_in():
    backend = {"backend": "cudaMallocAsync", "expandable_segments": False, "how": "given"}
    free = iter([(80 << 30, 96 << 30), (72 << 30, 96 << 30)])  # 8 GiB more in use after the pass
    with TorchCudaAllocator(memory_stats=lambda: _stats(0, 0), backend=backend, mem_get_info=lambda: next(free)) as inst:
        inst.mark_pass("first")
        inst.end_pass("first")
    first = inst.summary()["passes"]["first"]
    assert first["growth_bytes"] == 8 << 30 and "cudaMemGetInfo" in first["growth_from"]


def test_with_expandable_segments_device_allocations_are_not_segments():
    backend = {"backend": "native", "expandable_segments": True, "how": "given"}
    feed = iter([_stats(1, 1, reserved=2 << 20), _stats(1, 5, reserved=20 << 20)])
    with TorchCudaAllocator(memory_stats=lambda: next(feed), backend=backend) as inst:
        inst.mark_pass("first")
        inst.end_pass("first")
    first = inst.summary()["passes"]["first"]
    assert first["segments"] is None and first["device_allocs"] is None
    assert first["growth_bytes"] == 18 << 20


def test_the_warm_control_does_not_book_cudnns_first_call_again(monkeypatch):
    """The control's warm control runs after its clean pass ran the model: cuDNN's first call is behind it."""
    from warmprof.traces import calibrate, control_serve

    monkeypatch.setattr(CudnnFind, "_first_done", False)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    monkeypatch.setattr(calibrate, "seed", lambda costs: None)  # no process-wide calibration left behind
    monkeypatch.setattr(calibrate.MachineCosts, "from_dict", classmethod(lambda cls, d: None))

    class FakeApi:
        @staticmethod
        def trace(*a, **k):
            raise RuntimeError(f"stop here: {CudnnFind(require_cuda=False).reason}")

    with pytest.raises(RuntimeError, match="first call already ran"):
        control_serve._warm(FakeApi, torch.nn.Conv2d(1, 1, 1), (), {}, "cpu", None, False, {})


def test_the_warm_control_starts_from_a_collected_heap(monkeypatch):
    """A full collection the earlier phases left due would land in the warm control's first pass and be
    sized as warmprof's own cost: the warm control collects before its trace."""
    import gc

    from warmprof.traces import calibrate, control_serve

    monkeypatch.setattr(calibrate, "seed", lambda costs: None)
    monkeypatch.setattr(calibrate.MachineCosts, "from_dict", classmethod(lambda cls, d: None))
    garbage = [[i] for i in range(5000)]  # young objects the collector has not seen yet
    assert gc.get_count()[0] > 0
    seen = []

    class FakeApi:
        @staticmethod
        def trace(*a, **k):
            seen.append(gc.get_count())
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        control_serve._warm(FakeApi, torch.nn.Conv2d(1, 1, 1), (), {}, "cpu", None, False, {})
    del garbage
    assert seen and seen[0][1:] == (0, 0) and seen[0][0] < 50, seen

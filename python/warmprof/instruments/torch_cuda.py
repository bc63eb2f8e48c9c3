"""torch's own CUDA-side signals, for what CUPTI cannot name (or when CUPTI is held elsewhere).

- `TorchCudaAllocator`: the caching allocator's counters around each pass (new segments, device
  allocations, retries), as counters in the timeline and deltas in the summary. With CUPTI on,
  the time of each new segment is the measured cuMemAlloc span; these counts are the reference.
- `CudnnFind`: with `torch.backends.cudnn.benchmark` on, the first call of a convolution at a new
  shape runs cuDNN's find (it benchmarks candidate kernels). That call is bracketed as an
  `algorithm_selection` span "cudnn:find"; the time of the convolution itself is the steady
  pass's, small beside the find. Eager convolutions only (module hooks: a compiled graph calls
  convolutions without them).
- `InductorCudaMetrics`: torch's compile timers for CUDA-graph recording and Triton / template
  autotuning, per pass. The spans themselves come from the torch.compile instrument (dynamo's
  CUDAGRAPH_RECORDING / TRITON_AUTOTUNING callbacks); these totals are the independent reference.

cuBLAS / cuBLASLt handle and workspace creation has no Python-visible hook: it happens inside the
first matmul, where CUPTI shows its module loads (runtime_init) and workspace allocation
(allocator_growth), and the allocator delta counts the workspace segment.
"""

from __future__ import annotations

import threading
from typing import Any

from ..timeline import ALGORITHM_SELECTION, begin, counter, end, name_id
from .base import Instrument

# summary key -> torch.cuda.memory_stats() key
ALLOCATOR_STATS = {
    "segments": "segment.all.allocated",
    "device_allocs": "num_device_alloc",
    "device_frees": "num_device_free",
    "alloc_retries": "num_alloc_retries",
    "ooms": "num_ooms",
    "reserved_bytes": "reserved_bytes.all.allocated",
}

CUBLAS_NOTE = ("cuBLAS handle/workspace creation is not visible from Python: CUPTI shows it inside the "
               "first matmul as module loads (runtime_init) and a workspace allocation")


def allocator_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    """Per-pass growth of the allocator counters (pure; missing keys count as 0)."""
    return {k: int(after.get(src, 0)) - int(before.get(src, 0)) for k, src in ALLOCATOR_STATS.items()}


def _cuda_index(device: Any) -> int:
    import torch

    dev = torch.device(device) if device is not None else torch.device("cuda")
    return dev.index if dev.index is not None else torch.cuda.current_device()


class TorchCudaAllocator(Instrument):
    name = "torch_cuda_allocator"

    def __init__(self, device: Any = None, memory_stats: Any = None) -> None:
        super().__init__()
        self.passes: dict[str, dict[str, int]] = {}
        self._before: dict[str, dict[str, Any]] = {}
        self._stats = memory_stats
        if memory_stats is None:
            try:
                import torch

                if not torch.cuda.is_available():
                    self.reason = "torch.cuda is not available"
                    return
                index = _cuda_index(device)
                self._stats = lambda: torch.cuda.memory_stats(index)
            except Exception as e:
                self.reason = f"torch.cuda allocator stats unavailable ({type(e).__name__}: {e})"
                return
        self._counter_ids = {k: name_id(f"torch.cuda:{k}") for k in ("segments", "reserved_bytes")}
        self.notes.append(CUBLAS_NOTE)

    def _sample(self) -> dict[str, Any]:
        stats = dict(self._stats())
        counter(self._counter_ids["segments"], int(stats.get(ALLOCATOR_STATS["segments"], 0)))
        counter(self._counter_ids["reserved_bytes"], int(stats.get(ALLOCATOR_STATS["reserved_bytes"], 0)))
        return stats

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        if not self.reason:
            self._before[name] = self._sample()

    def end_pass(self, name: str) -> None:
        before = self._before.pop(name, None)
        if not self.reason and before is not None:
            self.passes[name] = allocator_delta(before, self._sample())

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if not self.reason:
            out["passes"] = self.passes
        return out


def conv_key(module: Any, x: Any) -> tuple | None:
    """What cuDNN's benchmark cache is keyed on, as far as the module call shows it."""
    w = getattr(module, "weight", None)
    if w is None or not hasattr(x, "shape"):
        return None
    return (type(module).__name__, tuple(x.shape), str(x.dtype), str(getattr(x, "device", "")),
            tuple(w.shape), str(w.dtype), getattr(module, "stride", None), getattr(module, "padding", None),
            getattr(module, "dilation", None), getattr(module, "groups", None),
            bool(getattr(x, "is_contiguous", lambda **_: True)()))


class CudnnFind(Instrument):
    """cuDNN find per new convolution shape (cudnn.benchmark), as algorithm_selection spans.

    The span is the host time of the convolution module's first call at a key warmprof has not
    seen: with benchmark on, cuDNN runs its find synchronously inside that call, and the kernel's
    own compute is asynchronous, so the call is mostly the find, but it also holds the launch and
    any workspace allocation. The cause is read from that fingerprint, not from a hook inside
    cuDNN: evidence `inferred`. Keys seen once stay seen for the process, as cuDNN's cache does;
    a convolution that ran before the first trace in this process is not known to warmprof (the
    report says when the runtime was already warm). `require_cuda=False` lets the hooks run on
    CPU tensors (tests).
    """

    name = "cudnn_benchmark"
    span_evidence = {"cudnn": "inferred"}
    _seen: set = set()  # process-wide, like cuDNN's benchmark cache

    def __init__(self, require_cuda: bool = True) -> None:
        super().__init__()
        self.finds: dict[str, int] = {}
        self._handles: list[Any] = []
        self._open = threading.local()
        self._require_cuda = require_cuda
        self._nid = name_id("cudnn:find")
        try:
            import torch
            from torch.nn.modules import conv
        except Exception as e:  # pragma: no cover - torch is a dependency of every caller
            self.reason = f"torch is not importable ({e})"
            return
        self._torch = torch
        self._conv_types = (conv._ConvNd,)
        if not torch.backends.cudnn.benchmark:
            self.reason = "torch.backends.cudnn.benchmark is off (cuDNN picks by heuristics; no find to time)"
        elif require_cuda and not torch.backends.cudnn.is_available():
            self.reason = "cuDNN is not available to torch"

    def _pre(self, module: Any, args: tuple) -> None:
        if not isinstance(module, self._conv_types) or not args:
            return
        x = args[0]
        if self._require_cuda and getattr(getattr(x, "device", None), "type", "") != "cuda":
            return
        key = conv_key(module, x)
        if key is None or key in CudnnFind._seen:
            return
        CudnnFind._seen.add(key)
        stack = getattr(self._open, "modules", None)
        if stack is None:
            stack = self._open.modules = []
        stack.append(id(module))
        self.finds[self.current_pass] = self.finds.get(self.current_pass, 0) + 1
        begin(ALGORITHM_SELECTION, self._nid)

    def _post(self, module: Any, args: tuple, output: Any) -> None:
        stack = getattr(self._open, "modules", None)
        if stack and stack[-1] == id(module):
            stack.pop()
            end(ALGORITHM_SELECTION, self._nid)

    def __enter__(self) -> "CudnnFind":
        if self.reason:
            return self
        hooks = self._torch.nn.modules.module
        self._handles.append(hooks.register_module_forward_pre_hook(self._pre))
        try:
            self._handles.append(hooks.register_module_forward_hook(self._post, always_call=True))
        except TypeError:  # torch without always_call: a raising conv leaves its span to the pass end
            self._handles.append(hooks.register_module_forward_hook(self._post))
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if not self.reason:
            out["new_shapes"] = dict(self.finds)
        return out


# Metric key (or suffix) -> summary name, from torch 2.9-2.13's dynamo_timed keys.
INDUCTOR_CUDA_METRICS = {
    "CUDAGraphNode.record": "cudagraph_record_ms",
    "CachingAutotuner.benchmark_all_configs": "triton_autotune_ms",
    "CachingAutotuner.coordinate_descent_tuning": "triton_autotune_ms",
    "CachingAutotuner.combo_sequential_autotune": "triton_autotune_ms",
    "_template_autotuning": "template_autotune_ms",
}


def metric_totals_ms(metrics: dict[str, list[float]], since: dict[str, int]) -> dict[str, float]:
    """Milliseconds added to each summary name since `since` (key -> list length); pure."""
    out: dict[str, float] = {}
    for key, values in metrics.items():
        name = INDUCTOR_CUDA_METRICS.get(key)
        if name is None:
            name = next((v for k, v in INDUCTOR_CUDA_METRICS.items() if k.startswith("_") and key.endswith(k)), None)
        if name is None:
            continue
        added = sum(values[since.get(key, 0):])
        if added:
            out[name] = out.get(name, 0.0) + 1e3 * float(added)
    return out


class InductorCudaMetrics(Instrument):
    name = "inductor_cuda"

    def __init__(self, metrics: dict[str, list[float]] | None = None) -> None:
        super().__init__()
        self.passes: dict[str, dict[str, float]] = {}
        self._since: dict[str, dict[str, int]] = {}
        self._metrics = metrics
        if metrics is None:
            try:
                from torch._dynamo.utils import compilation_time_metrics
            except Exception as e:
                self.reason = f"torch._dynamo is not available ({e})"
                return
            self._metrics = compilation_time_metrics

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        if not self.reason:
            self._since[name] = {k: len(v) for k, v in self._metrics.items()}

    def end_pass(self, name: str) -> None:
        since = self._since.pop(name, None)
        if not self.reason and since is not None:
            self.passes[name] = metric_totals_ms(self._metrics, since)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if not self.reason:
            out["passes"] = self.passes
        return out


__all__ = [
    "ALLOCATOR_STATS",
    "CudnnFind",
    "InductorCudaMetrics",
    "TorchCudaAllocator",
    "allocator_delta",
    "conv_key",
    "metric_totals_ms",
]

"""torch's own CUDA-side signals, for what CUPTI cannot name (or when CUPTI is held elsewhere).

- `TorchCudaAllocator`: the caching allocator's counters around each pass, as counters in the
  timeline and deltas in the summary, read for the backend that ran (`allocator_backend`): torch's
  native caching allocator counts segments and device allocations; with expandable segments a
  device allocation is a mapped chunk, not a segment, and under `backend:cudaMallocAsync` the
  segment and allocation counters read zeros (the driver's pool does the work). The growth every
  backend gives is the reserved-bytes delta (the pool's reserved memory under cudaMallocAsync, or
  the device's used memory from cudaMemGetInfo where even that reads zero); the summary says which
  backend ran and which figures mean nothing under it. With CUPTI on, the time of each growth is the
  measured cuMemAlloc / cuMemCreate span; these counts are the reference.
- `CudnnFind`: cuDNN per convolution. The process's first cuDNN convolution creates cuDNN's handle
  and loads its sub-libraries (dlopen of libcudnn_* engines, their file-backed page faults): that
  call is bracketed as a `runtime_init` span "cudnn:first_call", whatever cudnn.benchmark says.
  With `torch.backends.cudnn.benchmark` on, every later first call of a convolution at a new shape
  runs cuDNN's find (it benchmarks candidate kernels) and is bracketed as an `algorithm_selection`
  span "cudnn:find"; with it off cuDNN picks by heuristics, and a new shape's extra first-call time
  is mostly a lazily loaded kernel (CUPTI's module loads: runtime_init). Eager convolutions only
  (module hooks: a compiled graph calls convolutions without them).
- `InductorCudaMetrics`: torch's compile timers for CUDA-graph recording and Triton / template
  autotuning, per pass. The spans themselves come from the torch.compile instrument (dynamo's
  CUDAGRAPH_RECORDING / TRITON_AUTOTUNING callbacks); these totals are the independent reference.

cuBLAS / cuBLASLt do not benchmark by default: they pick a kernel by heuristics, so a new GEMM
shape's extra first-call time is mostly its kernel loaded lazily (runtime_init, CUPTI's module
loads) and the handle/workspace creation of the first matmul (runtime_init, allocator_growth). Only
TunableOp (`PYTORCH_TUNABLEOP_ENABLED=1` or torch.cuda.tunable.enable()) benchmarks GEMMs per
shape: `library_settings()` reads whether it is on, and the summary and the probes' verdicts follow.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

from ..system.torch_compat import MEMORY_STATS_KEYS, compile_time_metrics
from ..timeline import ALGORITHM_SELECTION, RUNTIME_INIT, begin, counter, end, name_id
from .base import Instrument

# summary key -> torch.cuda.memory_stats() key (the compatibility module's name for it, 2.9-2.15)
ALLOCATOR_STATS = {k: MEMORY_STATS_KEYS[k][0]
                   for k in ("segments", "device_allocs", "device_frees", "alloc_retries", "ooms", "reserved_bytes")}

CUBLAS_NOTE = ("cuBLAS handle/workspace creation is not visible from Python: CUPTI shows it inside the "
               "first matmul as module loads (runtime_init) and a workspace allocation")
NATIVE, ASYNC = "native", "cudaMallocAsync"
DEVICE_USED = "device_used_bytes"  # cudaMemGetInfo's total - free: the growth where the stats read zero
# The counters that count nothing under a backend or mode, and why (the summary says so).
MEANINGLESS = {
    ASYNC: (("segments", "device_allocs", "device_frees", "alloc_retries"),
            "under backend:cudaMallocAsync the driver's pool allocates: torch's segment and allocation counters read 0"),
    "expandable": (("segments", "device_allocs", "device_frees"),
                   "with expandable segments a device allocation maps a chunk of one growing segment: neither counts "
                   "segments"),
}


def alloc_conf(environ: Any = None) -> dict[str, str]:
    """The allocator settings (key -> value) from PYTORCH_CUDA_ALLOC_CONF, and PYTORCH_ALLOC_CONF
    (torch 2.9's name for it, which wins where both are set); pure over `environ`."""
    environ = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        for item in str(environ.get(var, "")).split(","):
            key, sep, value = item.partition(":")
            if sep and key.strip():
                out[key.strip()] = value.strip()
    return out


def allocator_backend(torch: Any = None, environ: Any = None) -> dict[str, Any]:
    """Which CUDA allocator runs: {"backend": "native" | "cudaMallocAsync", "expandable_segments":
    bool, "how": where it was read}. torch.cuda.get_allocator_backend() where it exists (it reads
    the settings torch parsed), else the environment's setting."""
    conf = alloc_conf(environ)
    backend, how = conf.get("backend", NATIVE), "PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF"
    getter = getattr(getattr(torch, "cuda", None), "get_allocator_backend", None)
    if getter is not None:
        try:
            backend, how = str(getter()), "torch.cuda.get_allocator_backend()"
        except Exception:
            pass
    expandable = conf.get("expandable_segments", "").lower() in ("true", "1")
    return {"backend": backend, "expandable_segments": expandable and backend == NATIVE, "how": how}


def allocator_delta(before: dict[str, Any], after: dict[str, Any], backend: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per-pass growth of the allocator counters (pure; missing keys count as 0). Under a backend
    or mode where a counter counts nothing (MEANINGLESS) it is None, not a 0 that looks measured;
    `growth_bytes` is the reserved-bytes delta, or the device's used bytes where the allocator's
    reserved bytes read 0 on both sides and cudaMemGetInfo was read (DEVICE_USED)."""
    out: dict[str, Any] = {k: int(after.get(src, 0)) - int(before.get(src, 0)) for k, src in ALLOCATOR_STATS.items()}
    backend = backend or {}
    modes = [m for m, on in ((ASYNC, backend.get("backend") == ASYNC), ("expandable", backend.get("expandable_segments")))
             if on]
    for mode in modes:
        for key in MEANINGLESS[mode][0]:
            out[key] = None
    out["growth_bytes"] = out["reserved_bytes"]
    reserved_read = int(before.get(ALLOCATOR_STATS["reserved_bytes"], 0)) or int(after.get(ALLOCATOR_STATS["reserved_bytes"], 0))
    if not reserved_read and DEVICE_USED in before and DEVICE_USED in after:
        out["growth_bytes"] = int(after[DEVICE_USED]) - int(before[DEVICE_USED])
        out["growth_from"] = "cudaMemGetInfo (device memory in use; other processes' use included)"
    else:
        out["growth_from"] = "reserved_bytes"
    return out


def _cuda_index(device: Any) -> int:
    import torch

    dev = torch.device(device) if device is not None else torch.device("cuda")
    return dev.index if dev.index is not None else torch.cuda.current_device()


class TorchCudaAllocator(Instrument):
    name = "torch_cuda_allocator"

    def __init__(self, device: Any = None, memory_stats: Any = None, backend: dict[str, Any] | None = None,
                 mem_get_info: Callable[[], tuple[int, int]] | None = None) -> None:
        """memory_stats / backend / mem_get_info: torch's, unless given (tests); backend as
        allocator_backend() gives it (default with injected stats: the native allocator)."""
        super().__init__()
        self.passes: dict[str, dict[str, Any]] = {}
        self._before: dict[str, dict[str, Any]] = {}
        self._stats = memory_stats
        self._mem_get_info = mem_get_info
        self.backend = backend or {"backend": NATIVE, "expandable_segments": False, "how": "given"}
        if memory_stats is None:
            try:
                import torch

                if not torch.cuda.is_available():
                    self.reason = "torch.cuda is not available"
                    return
                index = _cuda_index(device)
                self._stats = lambda: torch.cuda.memory_stats(index)
                self.backend = backend or allocator_backend(torch)
                if mem_get_info is None and self.backend["backend"] == ASYNC:
                    self._mem_get_info = lambda: torch.cuda.mem_get_info(index)
            except Exception as e:
                self.reason = f"torch.cuda allocator stats unavailable ({type(e).__name__}: {e})"
                return
        self._counter_ids = {k: name_id(f"torch.cuda:{k}") for k in ("segments", "reserved_bytes")}
        self.notes.append(CUBLAS_NOTE)
        for mode, on in ((ASYNC, self.backend["backend"] == ASYNC), ("expandable", self.backend.get("expandable_segments"))):
            if on:
                self.notes.append(f"allocator: {MEANINGLESS[mode][1]}; growth is read from the reserved bytes")

    def _sample(self) -> dict[str, Any]:
        stats = dict(self._stats())
        if self._mem_get_info is not None:
            try:
                free, total = self._mem_get_info()
                stats[DEVICE_USED] = int(total) - int(free)
            except Exception:
                pass
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
            self.passes[name] = allocator_delta(before, self._sample(), self.backend)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if not self.reason:
            out["backend"] = dict(self.backend)
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


def tunableop_enabled(torch: Any = None, environ: Any = None) -> bool:
    """Whether TunableOp benchmarks GEMMs per shape: PYTORCH_TUNABLEOP_ENABLED=1, or
    torch.cuda.tunable.is_enabled() where torch has it (2.3+; it reads the variable too)."""
    environ = os.environ if environ is None else environ
    on = str(environ.get("PYTORCH_TUNABLEOP_ENABLED", "")).strip() == "1"
    tunable = getattr(getattr(torch, "cuda", None), "tunable", None)
    check = getattr(tunable, "is_enabled", None)
    if check is not None:
        try:
            on = bool(check())
        except Exception:
            pass
    if on:  # tuning can be off with TunableOp on: it then replays results from its file, benchmarking nothing
        tuning = getattr(tunable, "tuning_is_enabled", None)
        try:
            if tuning is not None and not tuning():
                return False
        except Exception:
            pass
        if str(environ.get("PYTORCH_TUNABLEOP_TUNING", "1")).strip() == "0":
            return False
    return on


def library_settings(torch: Any = None, environ: Any = None) -> dict[str, Any]:
    """Whether the CUDA libraries benchmark kernels per shape here: {"tunableop": GEMMs through
    TunableOp, "cudnn_benchmark": convolutions through cuDNN's find}. Neither: cuBLAS/cuBLASLt and
    cuDNN pick by heuristics, and a new shape's extra first-call time is a lazily loaded kernel."""
    if torch is None:
        try:
            import torch
        except Exception:  # pragma: no cover - torch is a dependency of every caller
            torch = None
    cudnn = getattr(getattr(torch, "backends", None), "cudnn", None)
    return {"tunableop": tunableop_enabled(torch, environ), "cudnn_benchmark": bool(getattr(cudnn, "benchmark", False))}


def shape_cost_cause(family: str, settings: dict[str, Any]) -> str:
    """The cause of a new shape's extra first-call time in a CUDA library op (pure): family is
    "matmul" (cuBLAS/cuBLASLt) or "conv" (cuDNN); algorithm_selection only when that library
    benchmarks (TunableOp, cudnn.benchmark), else runtime_init (a lazily loaded kernel)."""
    from ..causes import Name

    tuned = settings.get("tunableop") if family == "matmul" else settings.get("cudnn_benchmark")
    return Name.ALGORITHM_SELECTION if tuned else Name.RUNTIME_INIT


class CudnnFind(Instrument):
    """cuDNN per convolution: the process's first cuDNN call as runtime_init, later finds per new
    shape (cudnn.benchmark) as algorithm_selection spans.

    Each span is the host time of a convolution module's call. The first cuDNN convolution of the
    process ("cudnn:first_call") creates cuDNN's handle and dlopens the sub-libraries it needs (their
    file-backed page faults and CUPTI's module loads inside it are their own spans and win, innermost);
    it also holds that shape's find when benchmark is on, which one call cannot split off. With
    benchmark on, cuDNN runs its find synchronously inside the first call at a key warmprof has not
    seen ("cudnn:find"); the kernel's own compute is asynchronous, so the call is mostly the find, but
    it also holds the launch and any workspace allocation. The cause is read from that fingerprint,
    not from a hook inside cuDNN: evidence `inferred`. Keys seen once stay seen for the process, as
    cuDNN's cache does; a convolution that ran before the first trace in this process is not known
    to warmprof (the report says when the runtime was already warm). `require_cuda=False` lets the
    hooks run on CPU tensors (tests). `torch_mod` stands in for torch (tests).
    """

    name = "cudnn_benchmark"
    span_evidence = {"cudnn": "inferred"}
    _seen: set = set()  # process-wide, like cuDNN's benchmark cache
    _first_done = False  # process-wide: cuDNN's handle and sub-libraries, once per process

    def __init__(self, require_cuda: bool = True, torch_mod: Any = None) -> None:
        super().__init__()
        self.finds: dict[str, int] = {}
        self.first_call: str = ""  # the pass the process's first cuDNN call ran in
        self._handles: list[Any] = []
        self._open = threading.local()
        self._require_cuda = require_cuda
        self._nid = name_id("cudnn:find")
        self._first_nid = name_id("cudnn:first_call")
        try:
            torch = torch_mod
            if torch is None:
                import torch
            from torch.nn.modules import conv
        except Exception as e:  # pragma: no cover - torch is a dependency of every caller
            self.reason = f"torch is not importable ({e})"
            return
        self._torch = torch
        self._conv_types = (conv._ConvNd,)
        self.settings = library_settings(torch)
        self.benchmark = bool(self.settings["cudnn_benchmark"])
        if require_cuda and not torch.backends.cudnn.is_available():
            self.reason = "cuDNN is not available to torch"
        elif not getattr(torch.backends.cudnn, "enabled", True):
            self.reason = "torch.backends.cudnn.enabled is False (convolutions do not go through cuDNN)"
        elif not self.benchmark and CudnnFind._first_done:
            self.reason = ("torch.backends.cudnn.benchmark is off (cuDNN picks by heuristics; no find to time) and "
                           "cuDNN's first call already ran in this process")
        if not self.reason and not self.benchmark:
            self.notes.append("cudnn.benchmark is off: cuDNN picks by heuristics, so only its first call (handle "
                              "creation, sub-library loads) is bracketed; a new shape's extra time is a lazily "
                              "loaded kernel (CUPTI's module loads: runtime_init)")
        if self.settings["tunableop"]:
            self.notes.append("TunableOp is on (PYTORCH_TUNABLEOP_ENABLED): a new GEMM shape's first call benchmarks "
                              "candidate kernels (algorithm selection); no hook brackets it, so its time is in the "
                              "GEMM's launches and the unattributed time")

    @classmethod
    def already_called(cls) -> None:
        """Say that cuDNN's first call already ran in this process, unseen (a model run before the
        trace: the control's warm control runs after its clean pass)."""
        cls._first_done = True

    def _pre(self, module: Any, args: tuple) -> None:
        if not isinstance(module, self._conv_types) or not args:
            return
        x = args[0]
        if self._require_cuda and getattr(getattr(x, "device", None), "type", "") != "cuda":
            return
        first = not CudnnFind._first_done
        key = conv_key(module, x)
        new_key = key is not None and key not in CudnnFind._seen
        if key is not None:
            CudnnFind._seen.add(key)
        if not first and not (self.benchmark and new_key):
            return
        stack = getattr(self._open, "modules", None)
        if stack is None:
            stack = self._open.modules = []
        if first:
            CudnnFind._first_done = True
            self.first_call = self.current_pass
            stack.append((id(module), RUNTIME_INIT, self._first_nid))
        else:
            self.finds[self.current_pass] = self.finds.get(self.current_pass, 0) + 1
            stack.append((id(module), ALGORITHM_SELECTION, self._nid))
        begin(stack[-1][1], stack[-1][2])

    def _post(self, module: Any, args: tuple, output: Any) -> None:
        stack = getattr(self._open, "modules", None)
        if stack and stack[-1][0] == id(module):
            _, cause, nid = stack.pop()
            end(cause, nid)

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
            out["benchmark"] = self.benchmark
            out["tunableop"] = bool(self.settings["tunableop"])
            if self.first_call:
                out["first_call_pass"] = self.first_call
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
            metrics = compile_time_metrics()
            if metrics is None:
                self.reason = "torch._dynamo is not available (no compilation_time_metrics)"
                return
            self._metrics = metrics

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        if not self.reason:
            assert self._metrics is not None  # None only where reason is set
            self._since[name] = {k: len(v) for k, v in self._metrics.items()}

    def end_pass(self, name: str) -> None:
        since = self._since.pop(name, None)
        if not self.reason and since is not None:
            assert self._metrics is not None  # None only where reason is set
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
    "alloc_conf",
    "allocator_backend",
    "allocator_delta",
    "conv_key",
    "library_settings",
    "metric_totals_ms",
    "shape_cost_cause",
    "tunableop_enabled",
]

"""CUDA driver-level sources: the CUPTI subscriber and CUDA events.

`Cupti` subscribes warmprof's native CUPTI handler for the instrumented passes, enabling only the
driver, runtime and resource callbacks its table maps. The handler writes those calls into the
recorder (csrc/backends/cupti_handler.h): context set-up and module loads (runtime_init for a
cubin, jit_compile for PTX the driver compiles, including a launch that loaded a module lazily),
allocations (allocator_growth, bytes counted once; a stream-ordered allocation the pool served is
not growth), stream capture / graph instantiate / upload (graph_capture), host-to-device copies
(data_transfer, bytes). Kernel launches are counted, with a span only for a kernel's first launch.
A runtime call (cudaLaunchKernel) and the driver call it makes inside count once.
CUPTI's own subscribe cost is recorded as a profiler_overhead span before the first pass, so it
is reported and never blamed on the model; the callbacks each pass takes are sampled as the
counter "cupti:callbacks" at the pass's start and end (attribution books them x the handler's
calibrated cost as estimated profiler_overhead). If another tool holds CUPTI (torch.profiler,
Nsight) the instrument is off with that reason and the other CUDA instruments still run.

`CudaEvents` records a pooled driver-API event on the model's stream at the start and end of each
pass: the GPU-side time of the pass, beside the host-side time the trace measures.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _native
from ..timeline import CUPTI_CALLBACKS, PROFILER_OVERHEAD, counter, name_id, now_ns, record_span_ns
from .base import Instrument

NEW_KERNEL_NAMES_KEPT = 20  # per pass, in the summary


def pass_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What one pass added to the cumulative CUPTI stats (pure)."""
    names = list(after["new_kernels"][len(before["new_kernels"]):])
    return {
        "kernel_launches": int(after["kernel_launches"] - before["kernel_launches"]),
        "new_kernels": int(after["new_kernel_count"] - before["new_kernel_count"]),
        "new_kernel_names": names[:NEW_KERNEL_NAMES_KEPT],
        "callbacks": int(after["callbacks"] - before["callbacks"]),
        "pool_hits": int(after["pool_hits"] - before["pool_hits"]),
    }


class Cupti(Instrument):
    name = "cupti"

    def __init__(self) -> None:
        super().__init__()
        entry = _native.backends()["cupti"]
        if not entry["available"]:
            self.reason = entry["reason"]
        self.subscribed = False
        self.subscribe_ms = 0.0
        self.passes: dict[str, dict[str, Any]] = {}
        self._open: dict[str, dict[str, Any]] = {}
        self._callbacks = 0

    def __enter__(self) -> "Cupti":
        if self.reason:
            return self
        why = _native.cupti_start()
        t1 = now_ns()
        if why:
            self.reason = why
            if "another CUPTI subscriber" in why:
                self.notes.append("CUDA causes come from the torch/CuPy instruments only (CUPTI is held elsewhere)")
            return self
        self.subscribed = True
        stats = _native.cupti_stats()
        subscribe_ns = int(stats["subscribe_ns"])
        self.subscribe_ms = subscribe_ns / 1e6
        record_span_ns(PROFILER_OVERHEAD, "cupti:subscribe", t1 - subscribe_ns, t1)
        if stats["refused_callbacks"]:
            self.notes.append(f"libcupti refused {stats['refused_callbacks']} of the callbacks warmprof maps "
                              "(a libcupti older than the headers warmprof was built with): those calls are not seen")
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.subscribed:
            return
        try:
            for name in list(self._open):
                self.end_pass(name)
            self._callbacks = int(_native.cupti_stats()["callbacks"])
        finally:
            _native.cupti_stop()
            self.subscribed = False

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        if self.subscribed:
            self._open[name] = self._sample()

    def end_pass(self, name: str) -> None:
        before = self._open.pop(name, None)
        if self.subscribed and before is not None:
            self.passes[name] = pass_delta(before, self._sample())

    @staticmethod
    def _sample() -> dict[str, Any]:
        """The cumulative stats, with the callback count put on the timeline as a counter sample."""
        stats = _native.cupti_stats()
        counter(name_id(CUPTI_CALLBACKS), int(stats["callbacks"]))
        return stats

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if self.reason:
            return out
        out["subscribe_ms"] = self.subscribe_ms
        out["callbacks"] = self._callbacks
        out["passes"] = self.passes
        return out


def _torch_stream(device: Any) -> Callable[[], int]:
    def current() -> int:
        import torch

        return int(torch.cuda.current_stream(device).cuda_stream)

    return current


class CudaEvents(Instrument):
    """GPU time of each pass from driver-API events on the model's stream.

    stream: a CUstream handle (int), a callable returning one at each pass start, or None for
    torch's current stream on `device`.
    """

    name = "cuda_events"

    def __init__(self, device: Any = None, stream: int | Callable[[], int] | None = None) -> None:
        super().__init__()
        entry = _native.backends()["cuda_events"]
        if not entry["available"]:
            self.reason = entry["reason"]
        if stream is None:
            stream = _torch_stream(device)
        self._stream = stream if callable(stream) else (lambda: int(stream))
        self.gpu_ms: dict[str, float] = {}
        self._start: dict[str, int] = {}

    def _record(self) -> int | None:
        try:
            return int(_native.cuda_event_record(self._stream()))
        except RuntimeError as e:
            self.notes.append(f"CUDA event not recorded: {e}")
            return None

    def __enter__(self) -> "CudaEvents":
        if self.reason:
            return self
        # Create the pool's events now, outside the passes they time.
        slots = [self._record(), self._record()]
        if None in slots:
            self.reason = self.notes.pop() if self.notes else "CUDA events could not be recorded"
        _native.cuda_events_release()
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.reason:
            _native.cuda_events_release()
        self._start.clear()

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        if self.reason:
            return
        slot = self._record()
        if slot is not None:
            self._start[name] = slot

    def end_pass(self, name: str) -> None:
        start = self._start.pop(name, None)
        if self.reason or start is None:
            return
        end = self._record()
        if end is None:
            return
        try:
            self.gpu_ms[name] = float(_native.cuda_event_elapsed_ms(start, end))
        except RuntimeError as e:
            self.notes.append(f"GPU time of pass {name!r} unavailable: {e}")

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if not self.reason:
            out["gpu_ms"] = dict(self.gpu_ms)
        return out


__all__ = ["Cupti", "CudaEvents", "pass_delta"]

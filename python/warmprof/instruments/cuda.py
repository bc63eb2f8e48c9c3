"""CUDA driver-level sources: the CUPTI subscriber and CUDA events.

`Cupti` subscribes warmprof's native CUPTI handler for the instrumented passes. The handler
writes the driver's own calls into the recorder (csrc/backends/cupti_handler.h): context and
module loads (runtime_init, including a first launch that loaded a module lazily), allocations
(allocator_growth, bytes), stream capture / graph instantiate / upload (graph_capture),
host-to-device copies (data_transfer, bytes), and every kernel launch as a structure span.
CUPTI's own subscribe cost is recorded as a profiler_overhead span before the first pass, so it
is reported and never blamed on the model. If another tool holds CUPTI (torch.profiler, Nsight)
the instrument is off with that reason and the other CUDA instruments still run. If another tool
tears warmprof's subscription down mid-trace (cuptiFinalize: torch.profiler's Kineto at exit with
TEARDOWN_CUPTI=1), the instrument finds out at the next pass boundary, stops cleanly and says from
which pass on its data is missing.

`CudaEvents` records a pooled driver-API event on the model's stream at the start and end of each
pass: the GPU-side time of the pass, beside the host-side time the trace measures.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _native, cuda_paths
from ..timeline import PROFILER_OVERHEAD, now_ns, record_span_ns
from .base import Instrument

NEW_KERNEL_NAMES_KEPT = 20  # per pass, in the summary
HELD_ELSEWHERE_NOTE = (
    "CUPTI is off: another subscriber holds it (torch.profiler's Kineto may keep it for the rest of "
    "the process once a profile has run; Nsight holds it while attached); CUDA causes come from "
    "CUDA events, torch's allocator statistics and hooks (and CuPy) only"
)


def pass_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What one pass added to the cumulative CUPTI stats (pure)."""
    names = list(after["new_kernels"][len(before["new_kernels"]):])
    return {
        "kernel_launches": int(after["kernel_launches"] - before["kernel_launches"]),
        "new_kernels": len(names),
        "new_kernel_names": names[:NEW_KERNEL_NAMES_KEPT],
    }


class Cupti(Instrument):
    name = "cupti"

    def __init__(self) -> None:
        super().__init__()
        cuda_paths.install()
        entry = _native.backends()["cupti"]
        # A loaded libcupti that has not subscribed yet is not a reason to stay off: subscribing
        # in __enter__ is what tells whether CUPTI works with this driver.
        if not entry["available"] and not entry.get("path"):
            self.reason = entry["reason"]
        self.subscribed = False
        self.subscribe_ms = 0.0
        self.passes: dict[str, dict[str, Any]] = {}
        self.stopped_early: dict[str, str] | None = None  # {"at", "reason"} once torn down
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
                self.notes.append(HELD_ELSEWHERE_NOTE)
            return self
        self.subscribed = True
        subscribe_ns = int(_native.cupti_stats()["subscribe_ns"])
        self.subscribe_ms = subscribe_ns / 1e6
        record_span_ns(PROFILER_OVERHEAD, "cupti:subscribe", t1 - subscribe_ns, t1)
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.subscribed:
            return
        try:
            for name in list(self._open):
                self.end_pass(name)
            self._callbacks = int(_native.cupti_stats()["callbacks"])
        finally:
            why = _native.cupti_stop() or ""  # an unsubscribe error is a reason, never a crash
            self.subscribed = False
        if why and self.stopped_early is None:
            self._stop_early("after the last instrumented pass", why)

    @property
    def _collecting(self) -> bool:
        return self.subscribed and self.stopped_early is None

    def _standing(self, at: str) -> bool:
        """Whether the subscription still stands; if not, says from where CUPTI data is missing."""
        why = _native.cupti_check() or ""
        if why:
            self._stop_early(at, why)
        return not why

    def _stop_early(self, at: str, why: str) -> None:
        self.stopped_early = {"at": at, "reason": why}
        self.notes.append(f"CUPTI data stops {at}: {why}; the other instruments carry on")

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        if self._collecting and self._standing(f"before pass {name!r}"):
            self._open[name] = _native.cupti_stats()

    def end_pass(self, name: str) -> None:
        before = self._open.pop(name, None)
        if not self._collecting or before is None:
            return
        delta = pass_delta(before, _native.cupti_stats())
        if not self._standing(f"during pass {name!r} (the subscription stood when it began)"):
            delta["partial"] = True
        self.passes[name] = delta

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if self.reason:
            return out
        out["subscribe_ms"] = self.subscribe_ms
        out["callbacks"] = self._callbacks
        out["passes"] = self.passes
        if self.stopped_early is not None:
            out["stopped_early"] = dict(self.stopped_early)
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
        cuda_paths.install()  # before the first backends(), which loads libcupti too
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

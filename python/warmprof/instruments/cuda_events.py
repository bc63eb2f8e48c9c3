"""GPU time of each instrumented pass, from pooled driver-API events on the model's stream.

The start event is recorded at mark_pass, the end event at before_sync: after the pass has queued
its work and before the host waits for it, so the pair brackets the GPU's work on that stream. (An
end event recorded after the sync would sit behind an idle stream and time the host's wait.) The
native side records each event in its stream's own context (csrc/backends/cuda_events.h), so a
trace on cuda:1 is timed on cuda:1 whatever context the calling thread has current.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _native
from .base import Instrument

NO_DEVICE = -1  # native: the calling thread's current context names the default stream's device


def device_index(device: Any) -> int:
    """The CUDA ordinal of `device` (an int, "cuda:N", a torch.device, or None for torch's current
    CUDA device); NO_DEVICE when it cannot be told here."""
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    try:
        import torch

        dev = torch.device(device) if device is not None else torch.device("cuda")
        if dev.type != "cuda":
            return NO_DEVICE
        if dev.index is not None:
            return int(dev.index)
        return int(torch.cuda.current_device()) if torch.cuda.is_available() else NO_DEVICE
    except Exception:
        return NO_DEVICE


def _torch_stream(device: Any) -> Callable[[], int]:
    def current() -> int:
        import torch

        return int(torch.cuda.current_stream(device).cuda_stream)

    return current


PASSES_AHEAD = 4  # instrumented passes a trace may time: first, seen re-run, and a margin


class CudaEvents(Instrument):
    """device: the CUDA device the model runs on (int, "cuda:N", torch.device, None = torch's
    current one). stream: a CUstream handle (int), a callable returning one at each pass start, or
    None for torch's current stream on `device`."""

    name = "cuda_events"

    def __init__(self, device: Any = None, stream: int | Callable[[], int] | None = None) -> None:
        super().__init__()
        entry = _native.backends()["cuda_events"]
        if not entry["available"]:
            self.reason = entry["reason"]
        self._device = device
        self._index = NO_DEVICE
        if stream is None:
            stream = _torch_stream(device)
        self._stream = stream if callable(stream) else (lambda: int(stream))
        self.gpu_ms: dict[str, float] = {}
        self._start: dict[str, tuple[int, int]] = {}  # pass -> (stream, start slot)
        self._end: dict[str, int] = {}

    def _record(self, stream: int) -> int | None:
        try:
            return int(_native.cuda_event_record(stream, self._index))
        except RuntimeError as e:
            self.notes.append(f"CUDA event not recorded: {e}")
            return None

    def __enter__(self) -> "CudaEvents":
        if self.reason:
            return self
        self._index = device_index(self._device)
        # Create the pool's events now, outside the passes they time: two per instrumented pass
        # (slots are only given back at exit, so each pass takes fresh ones from the pool).
        stream = self._stream()
        slots = [self._record(stream) for _ in range(2 * PASSES_AHEAD)]
        if None in slots:
            self.reason = self.notes.pop() if self.notes else "CUDA events could not be recorded"
        _native.cuda_events_release()
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.reason:
            _native.cuda_events_release()
        self._start.clear()
        self._end.clear()

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        if self.reason:
            return
        stream = self._stream()
        slot = self._record(stream)
        if slot is not None:
            self._start[name] = (stream, slot)

    def before_sync(self, name: str) -> None:
        if name in self._start:  # the same stream as the start event: one timeline
            slot = self._record(self._start[name][0])
            if slot is not None:
                self._end[name] = slot

    def end_pass(self, name: str) -> None:
        start = self._start.pop(name, None)
        end = self._end.pop(name, None)
        if start is None or end is None:
            return
        try:
            self.gpu_ms[name] = float(_native.cuda_event_elapsed_ms(start[1], end))
        except RuntimeError as e:
            self.notes.append(f"GPU time of pass {name!r} unavailable: {e}")

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if not self.reason:
            out["gpu_ms"] = dict(self.gpu_ms)
        return out


__all__ = ["CudaEvents", "device_index"]

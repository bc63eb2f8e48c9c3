"""What watch reads besides the clock: dynamo's compile callbacks (one pair for the process, shared
by every open Watcher, feeding a native counter the hot path reads), dynamo's recompile reasons and
cache counters, the CUDA caching allocator, and the device clock (NVML) for after-idle calls.

Each is read when an event is built, never on a call that keeps nothing, except the compile
callbacks, which run only when dynamo compiles."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from .. import _native

_lock = threading.Lock()
_users = 0
_open: dict[int, int] = {}  # thread ident -> compile start (ns)


def _on_start(*_args: Any) -> None:
    _open[threading.get_ident()] = time.monotonic_ns()


def _on_end(*_args: Any) -> None:
    t0 = _open.pop(threading.get_ident(), None)
    if t0 is not None:
        _native.watch_note_compile(max(0, time.monotonic_ns() - t0))


def acquire_compile_tap() -> bool:
    """Register the process's dynamo compile callbacks (once, however many Watchers are open).
    False where torch has no dynamo."""
    global _users
    try:
        from torch._dynamo import callback_handler
    except Exception:
        return False
    with _lock:
        if _users == 0:
            callback_handler.register_start_callback(_on_start)
            callback_handler.register_end_callback(_on_end)
        _users += 1
    return True


def release_compile_tap() -> None:
    global _users
    try:
        from torch._dynamo import callback_handler
    except Exception:
        return
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users == 0:
            for remove, cb in ((callback_handler.remove_start_callback, _on_start),
                               (callback_handler.remove_end_callback, _on_end)):
                try:
                    remove(cb)
                except ValueError:
                    pass
            _open.clear()


class DynamoState:
    """Dynamo's recompile reasons (guard failures) and compile cache counters, read as what changed
    since the last read."""

    CACHE = (("inductor", "fxgraph_cache_hit"), ("inductor", "fxgraph_cache_miss"),
             ("aot_autograd", "autograd_cache_hit"), ("aot_autograd", "autograd_cache_miss"))

    def __init__(self) -> None:
        self._seen: dict[int, int] = {}
        self._cache = self._counters()
        self._seen = {id(code): len(v) for code, v in self._failures().items()}

    @staticmethod
    def _failures() -> dict[Any, list]:
        try:
            from torch._dynamo.utils import guard_failures
        except Exception:
            return {}
        return dict(guard_failures)

    def _counters(self) -> dict[str, int]:
        try:
            from torch._dynamo.utils import counters
        except Exception:
            return {}
        return {f"{group}.{name}": int(counters.get(group, {}).get(name, 0)) for group, name in self.CACHE}

    def recompile_reasons(self) -> list[str]:
        """Guard failures dynamo recorded since the last call: why each recompile happened."""
        out = []
        for code, reasons in self._failures().items():
            seen = self._seen.get(id(code), 0)
            out.extend(str(r) for r in reasons[seen:])
            self._seen[id(code)] = len(reasons)
        return out

    def cache(self) -> dict[str, int]:
        """Cache hits and misses since the last call: graphs loaded from the compile caches, and compiled."""
        now = self._counters()
        delta = {k: v - self._cache.get(k, 0) for k, v in now.items() if v != self._cache.get(k, 0)}
        self._cache = now
        return delta


def cuda_reserved() -> tuple[int, int] | None:
    """(bytes, segments) the CUDA caching allocator holds now: each segment is one cudaMalloc (None
    without CUDA in use). Read when an event is built, never per call (memory_stats takes tens of us)."""
    try:
        import torch

        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        stats = torch.cuda.memory_stats()
        return int(stats.get("reserved_bytes.all.current", 0)), int(stats.get("segment.all.current", 0))
    except Exception:
        return None


def nvml_clock_source(index: int = 0) -> Callable[[], tuple[float, float]] | None:
    """A clock source for watch(clock_source=): the GPU's SM clock and its maximum, in MHz, through
    NVML (pynvml, or nvidia-ml-py). None where NVML cannot be loaded or has no such device."""
    try:
        import pynvml  # type: ignore

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        top = float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:
        return None

    def read() -> tuple[float, float]:
        return float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)), top

    return read


__all__ = ["DynamoState", "acquire_compile_tap", "cuda_reserved", "nvml_clock_source", "release_compile_tap"]

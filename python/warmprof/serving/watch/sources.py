"""What watch reads besides the clock: dynamo's compile callbacks (one pair for the process, shared
by every open Watcher, feeding a native counter the hot path reads), dynamo's recompile reasons and
cache counters, the CUDA caching allocator, the device clock (NVML) for after-idle calls, and, when
asked, warmprof's CUPTI subscription (one for the process, shared by the Watchers that asked).

Each is read when an event is built, never on a call that keeps nothing, except the compile
callbacks, which run only when dynamo compiles."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable

from ... import _native
from ...attribution.compiles import trigger_source
from ...errors import BackendError
from ...instruments.torch_compile import (
    CacheOutcome,
    cache_outcome,
    compilation_metrics_mark,
    compile_counters,
    counters_since,
    recompile_reasons,
)
from ...system import cuda_paths
from ...system.torch_compat import dynamo_callbacks, memory_stat, remove_callback

_lock = threading.Lock()
_users = 0
# dynamo calls the start callback when its process-wide count of compiles in progress goes 0 -> 1 and
# the end callback when it goes back to 0, on whichever thread that is: one start time, not per thread
_started: list[tuple[int, str, int]] = []
# What dynamo's callbacks bracketed (compiles, CUDA graph recordings, Triton autotuning),
# per thread, taken by the next event on that thread: (source, ns, page faults inside it, end on
# warmprof's clock: an event keeps only the stretches that ended inside its call).
_side: dict[int, collections.deque] = {}
SIDE_KEPT = 256  # per thread, the latest


def clock_ns() -> int:
    """Now on the clock a WatchCall's start_ns and dur_ns are read on (the native tick clock, converted
    to ns): a stretch's end is compared with the call's window on it. CLOCK_MONOTONIC (_native.now_ns)
    drifts from it by a few ppm, which after minutes of serving put a recording that ended inside its
    call outside the call's window, and its time read as a compile."""
    return int(_native.ticks_to_ns(_native.now_ticks()))


def _on_start(*args: Any) -> None:
    _started[:] = [(time.monotonic_ns(), trigger_source(args), _process_faults())]


def _process_faults() -> int:
    minor, major = _native.faults()[:2]
    return int(minor) + int(major)


def _on_end(*_args: Any) -> None:
    if not _started:
        return
    t0, kind, faults0 = _started.pop()
    ns = max(0, time.monotonic_ns() - t0)
    # counted on the thread that ends it (its call's; watch_note_compile is per thread): every kind
    # makes the call an event, and each stretch is kept with the process's page faults inside it, so
    # an event books only the faults outside its compiles (attribution/calls.py)
    _native.watch_note_compile(ns)
    _side.setdefault(threading.get_ident(), collections.deque(maxlen=SIDE_KEPT)).append(
        (kind, ns, max(0, _process_faults() - faults0), clock_ns()))


def take_side_work() -> list[tuple[str, int, int, int]]:
    """The stretches dynamo's callbacks bracketed on this thread since the last take (compiles, CUDA
    graph recordings, Triton autotuning): (source, ns, page faults of the process inside it, end ns)."""
    got = _side.pop(threading.get_ident(), None)
    return list(got) if got else []


def acquire_compile_tap() -> bool:
    """Register the process's dynamo compile callbacks (once, however many Watchers are open).
    False where torch has no dynamo, or where torch._dynamo is not imported yet: importing it costs
    1-2 s and leaves an inductor folder in the temp folder, which a watched plain function never
    needs (torch.compile imports it when a model is compiled; the Watcher taps it then)."""
    global _users
    callback_handler = dynamo_callbacks()
    if callback_handler is None:
        return False
    with _lock:
        if _users == 0:
            callback_handler.register_start_callback(_on_start)
            callback_handler.register_end_callback(_on_end)
        _users += 1
    return True


def release_compile_tap() -> None:
    global _users
    callback_handler = dynamo_callbacks()
    if callback_handler is None:
        return
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users == 0:
            remove_callback(callback_handler.remove_start_callback, _on_start)
            remove_callback(callback_handler.remove_end_callback, _on_end)
            _started.clear()
            _side.clear()


_cupti_users = 0
# CUPTI has one subscriber per process, and torch.profiler's Kineto (torch 2.11) subscribes on its
# first use and keeps the subscription: whoever comes first holds it for the life of the process.
KINETO_NOTE = ("CUPTI has one subscriber per process: torch.profiler's Kineto (torch 2.11) subscribes on the "
               "first torch.profiler use and keeps it for the life of the process, so after a profile has run "
               "watch(cupti=True) cannot subscribe; and if watch(cupti=True) holds CUPTI when torch.profiler is "
               "first used, torch.profiler falls back to CPU-only activity for the life of the process")


def acquire_cupti() -> None:
    """Subscribe warmprof's CUPTI handler (once, however many Watchers asked). Raises BackendError
    with CUPTI's reason when it cannot subscribe: no driver, or another tool holds CUPTI (a
    warmprof trace running now, torch.profiler, Nsight)."""
    global _cupti_users
    with _lock:
        if _cupti_users == 0:
            cuda_paths.install()
            why = _native.cupti_start()
            if why:
                raise BackendError(f"watch(cupti=True): CUPTI cannot subscribe: {why}. {KINETO_NOTE}")
            _native.cupti_set_recording(False)  # its calls go to watch's per-thread tally only
        _cupti_users += 1


def release_cupti() -> None:
    global _cupti_users
    with _lock:
        if _cupti_users == 0:
            return
        _cupti_users -= 1
        if _cupti_users == 0:
            _native.cupti_stop()  # a subscription another tool tore down is not an error here
            _native.cupti_set_recording(True)


def cupti_rows(rows: list[tuple[int, int, int, int]] | None) -> dict[str, dict[str, int]]:
    """The native hot path's CUPTI rows for one call, (cause id, spans, ns, bytes), by cause name."""
    from ...causes import recorded

    names = recorded()
    out: dict[str, dict[str, int]] = {}
    for cause, spans, ns, nbytes in rows or []:
        name = names.get(int(cause))
        if name is None:
            continue
        out[name] = {"calls": int(spans), "ns": max(0, int(ns)), "bytes": max(0, int(nbytes))}
    return out


class DynamoState:
    """Dynamo's recompile reasons and compile-cache counters, read as what changed since the last
    read (the rules instruments/torch_compile.py holds for trace and warmup too)."""

    def __init__(self) -> None:
        self._mark = compilation_metrics_mark()
        self._counters = compile_counters()

    def recompile_reasons(self) -> list[str]:
        """dynamo's recompile reason (the guard that failed) of each compile since the last call."""
        reasons = list(recompile_reasons(self._mark).values())
        self._mark = compilation_metrics_mark()
        return reasons

    def cache(self) -> CacheOutcome:
        """Graphs compiled from scratch and loaded from the compile caches since the last call."""
        now = compile_counters()
        out = cache_outcome(counters_since(self._counters, now))
        self._counters = now
        return out


def cuda_reserved() -> tuple[int, int] | None:
    """(bytes, segments) the CUDA caching allocator holds now: each segment is one cudaMalloc (None
    without CUDA in use). Read when an event is built, never per call (memory_stats takes tens of us)."""
    try:
        import torch

        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        stats = torch.cuda.memory_stats()
        return memory_stat(stats, "reserved_bytes_current") or 0, memory_stat(stats, "segments_current") or 0
    except Exception:
        return None


def nvml_clock_source(index: int = 0) -> Callable[[], tuple[float, float]] | None:
    """A clock source for watch(clock_source=): the GPU's SM clock and its maximum, in MHz, through
    NVML (pynvml, or nvidia-ml-py). None where NVML cannot be loaded or has no such device."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        top = float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:
        return None

    def read() -> tuple[float, float]:
        return float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)), top

    return read


__all__ = ["DynamoState", "acquire_compile_tap", "acquire_cupti", "cuda_reserved", "cupti_rows", "nvml_clock_source",
           "release_compile_tap", "release_cupti"]

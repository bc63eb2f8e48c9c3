"""Timed calls: each bracketed by the device's synchronize and read with the native clock."""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass
from typing import Callable, Iterator

from .. import _native
from ..stats import summarize

now_ns = _native.now_ns


def time_call(fn: Callable, args: tuple, sync: Callable[[], None]) -> float:
    """One call in ms: sync, clock, call, sync, clock. The result is freed after the clock stops."""
    sync()
    t0 = now_ns()
    out = fn(*args)
    sync()
    t1 = now_ns()
    del out
    return (t1 - t0) / 1e6


def time_calls(fn: Callable, args: tuple, sync: Callable[[], None], n: int) -> list[float]:
    return [time_call(fn, args, sync) for _ in range(n)]


@dataclass(frozen=True)
class Stats:
    median_ms: float
    p10_ms: float
    p90_ms: float
    max_ms: float
    n: int


def stats(samples: list[float]) -> Stats:
    if not samples:
        raise ValueError("no samples")
    s = summarize(samples)
    return Stats(s.median, s.p10, s.p90, s.max, s.n)


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """No garbage-collector pauses inside timed bursts; the caller's setting comes back afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def burst(fn: Callable, args: tuple, sync: Callable[[], None], steady_calls: int, warm_calls: int = 2) -> tuple[float, Stats]:
    """First call, a couple of warm calls left out of the stats, then steady_calls timed calls; no GC pauses."""
    with quiet_gc():
        first = time_call(fn, args, sync)
        for _ in range(warm_calls):
            time_call(fn, args, sync)
        return first, stats(time_calls(fn, args, sync, steady_calls))


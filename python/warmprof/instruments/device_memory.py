"""A fresh device allocation timed: the caching allocator emptied, then torch.empty + fill_ of the
size, synchronized; the median of a few. The probes' allocation band on cuda and mps and the MPS
allocator instrument's cost per byte both read it."""

from __future__ import annotations

import statistics
from typing import Any, Callable

from .. import _native


def fresh_allocation_ms(torch: Any, device: Any, nbytes: int, trials: int, *, empty_cache: Callable[[], None],
                        sync: Callable[[], None]) -> float:
    """ms of one fresh allocation of `nbytes` on `device` and its first write (median of `trials`);
    the cache is emptied before each and after the last, so the memory goes back."""
    samples = []
    for _ in range(trials):
        empty_cache()
        sync()
        t0 = _native.now_ns()
        buf = torch.empty(max(1, nbytes), dtype=torch.uint8, device=device)
        buf.fill_(1)
        sync()
        samples.append((_native.now_ns() - t0) / 1e6)
        del buf
    empty_cache()
    return statistics.median(samples)


__all__ = ["fresh_allocation_ms"]

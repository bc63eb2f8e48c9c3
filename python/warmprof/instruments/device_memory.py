"""A fresh device allocation timed (the caching allocator emptied, then torch.empty + fill_ of the
size, synchronized; the median of a few): the MPS allocator instrument's cost per byte reads it.
The loop lives in the device table (devices.fresh_allocation_ms), beside each kind's own timing
of a fresh allocation, which the probes' allocation band reads; this is its name for instruments."""

from __future__ import annotations

from ..devices import fresh_allocation_ms

__all__ = ["fresh_allocation_ms"]

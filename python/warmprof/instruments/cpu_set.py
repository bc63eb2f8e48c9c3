"""The instruments a trace on the CPU runs beyond the common ones (as cuda_set.py for CUDA).

    cpu_instruments(options) -> list[Instrument]

No option is read: oneDNN's primitive-creation lines (measured jit_compile) are the CPU's own source.
"""

from __future__ import annotations

from .base import Instrument
from .onednn import OneDNN


def cpu_instruments(options: dict) -> list[Instrument]:
    return [OneDNN()]


__all__ = ["cpu_instruments"]

"""Host memory and threads: fault counters, RSS and thread count sampled at pass boundaries.

The counts become time in attribution.py with the per-fault and per-thread costs calibrated on
this machine (evidence `estimated`).
"""

from __future__ import annotations

from typing import Any

from .. import _native
from ..timeline import sample_host
from .base import Instrument


class HostCounters(Instrument):
    name = "host"

    def __init__(self) -> None:
        super().__init__()
        self.samples: dict[str, dict[str, int]] = {}

    def sample(self) -> None:
        sample_host()  # faults, RSS and threads, in one native call

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        self.sample()
        minor, major = _native.faults()
        self.samples[name] = {"minor_faults": minor, "major_faults": major, "rss_bytes": _native.rss_bytes(),
                              "threads": _native.thread_count()}

    def end_pass(self, name: str) -> None:
        self.sample()
        minor, major = _native.faults()
        start = self.samples.get(name, {})
        self.samples[name] = {
            "minor_faults": minor - start.get("minor_faults", minor),
            "major_faults": major - start.get("major_faults", major),
            "rss_growth_bytes": _native.rss_bytes() - start.get("rss_bytes", 0),
            "new_threads": _native.thread_count() - start.get("threads", 0),
        }

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out["passes"] = self.samples
        return out

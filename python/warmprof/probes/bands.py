"""Bands calibrated on the machine, per run: launch, allocation (per op size), compile above both.

launch: the steady cost of a trivial op (a 1-element add) on this backend, with room for one extra
dispatch and sync. allocation: fresh memory plus first touch, on the device, of as many bytes as the op reads and writes
(inputs + output: a first call may need packing buffers and temporaries, not only its output).
compile: anything above the allocation band at that size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import BackendError
from .timing import Stats, stats, time_call, time_calls
from .verdict import RowBands

LAUNCH_MARGIN = 2.0  # one extra dispatch and one extra sync, each about a trivial op
ALLOC_MARGIN = 2.0  # page-fault cost varies run to run (zeroing, huge pages, a busy host): room for twice it
TRIVIAL_CALLS = 50


@dataclass
class Bands:
    trivial_first_ms: float  # the trivial op's first call: the runtime's own warm-up on this backend
    trivial: Stats
    alloc_how: str
    alloc_ms_by_bytes: dict[int, float] = field(default_factory=dict)

    @property
    def launch_hi_ms(self) -> float:
        return LAUNCH_MARGIN * self.trivial.median_ms

    def alloc_hi_ms(self, nbytes: int) -> float:
        return self.launch_hi_ms + ALLOC_MARGIN * self.alloc_ms_by_bytes[nbytes]

    def for_row(self, nbytes: int) -> RowBands:
        return RowBands(self.launch_hi_ms, self.alloc_hi_ms(nbytes))

    def to_report(self) -> dict[str, Any]:
        his = [self.alloc_hi_ms(b) for b in self.alloc_ms_by_bytes] or [self.launch_hi_ms]
        return {
            "launch": {
                "lo_ms": 0.0, "hi_ms": self.launch_hi_ms,
                "how": f"{LAUNCH_MARGIN:g} x the steady median of a 1-element add "
                       f"({self.trivial.median_ms:.4g} ms, p10-p90 {self.trivial.p10_ms:.4g}-{self.trivial.p90_ms:.4g}, "
                       f"{self.trivial.n} calls)",
                "trivial_first_ms": self.trivial_first_ms,
            },
            "allocation": {
                "lo_ms": self.launch_hi_ms, "hi_ms": max(his),
                "how": f"launch band + {ALLOC_MARGIN:g} x fresh allocation of the op's inputs + output bytes: "
                       f"{self.alloc_how}",
                "by_bytes": {str(b): {"alloc_ms": ms, "hi_ms": self.alloc_hi_ms(b)}
                                    for b, ms in sorted(self.alloc_ms_by_bytes.items())},
            },
            "compile": {
                "lo_ms": min(his), "hi_ms": None,
                "how": "above the allocation band at the op's size",
            },
        }


def calibrate(be: Any, alloc_bytes: list[int], say: Callable[[str], None]) -> Bands:
    """Warm the runtime, time the trivial op, and measure fresh allocation at every op size (inputs + output)."""
    be.runtime_warmup()
    with be.experiment("launch-band"):
        fn, args = be.trivial()
        note = getattr(be, "first_call_note", "")
        if note:  # a first call that takes seconds: say what it is before it starts
            say(note)
        try:
            first = time_call(fn, args, be.sync)
        except Exception as e:
            raise BackendError(f"{be.describe()} failed on a 1-element add: {type(e).__name__}: {e}") from e
        time_calls(fn, args, be.sync, 3)
        trivial = stats(time_calls(fn, args, be.sync, TRIVIAL_CALLS))
    say(f"launch band: trivial op first call {trivial_first(first)}, steady {trivial.median_ms:.4g} ms")
    bands = Bands(first, trivial, be.alloc_how)
    for nbytes in sorted(set(alloc_bytes)):
        bands.alloc_ms_by_bytes[nbytes] = be.alloc_ms(nbytes)
    say(f"allocation band: {len(bands.alloc_ms_by_bytes)} sizes, "
        f"{min(bands.alloc_ms_by_bytes.values()):.3g}-{max(bands.alloc_ms_by_bytes.values()):.3g} ms fresh")
    return bands


def trivial_first(ms: float) -> str:
    return f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.3g} ms"

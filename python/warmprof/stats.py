"""The one summary of repeated timings: median, p10, p90, min, max, the low figure and the noise band.

Percentiles are linearly interpolated between the sorted samples (numpy's default definition,
computed the way numpy computes it, so the figures equal np.percentile's); pure Python, so the
probes and a probe's child process need no numpy to time a call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

# Under this many samples the low figure is the minimum: a p10 of so few is mostly an interpolation
# between the two fastest trials, and a busy machine only ever makes a trial longer.
FEW_SAMPLES = 10
# The noise band's floor: 1.4826 * MAD estimates a normal sample's standard deviation; the band is
# never narrower than two of them.
MAD_SIGMA = 1.4826
MAD_WIDTHS = 2.0


@dataclass(frozen=True)
class Summary:
    """What repeated timings say, in the samples' own unit; all zero (n 0) for no samples."""

    n: int
    median: float
    p10: float
    p90: float
    min: float
    max: float
    low: float  # the figure a calibration uses: p10, or the minimum under FEW_SAMPLES samples
    noise_band: float  # p90 - p10, at least MAD_WIDTHS * MAD_SIGMA * MAD


def summarize(samples: Iterable[float]) -> Summary:
    s = sorted(float(x) for x in samples)
    if not s:
        return Summary(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    med, p10, p90 = _median_sorted(s), _percentile_sorted(s, 10), _percentile_sorted(s, 90)
    mad = median([abs(x - med) for x in s])
    return Summary(n=len(s), median=med, p10=p10, p90=p90, min=s[0], max=s[-1],
                   low=s[0] if len(s) < FEW_SAMPLES else p10,
                   noise_band=max(p90 - p10, MAD_WIDTHS * MAD_SIGMA * mad))


def median(samples: Iterable[float]) -> float:
    """The median (the mean of the two middle samples for an even count); ValueError for none."""
    s = sorted(samples)
    if not s:
        raise ValueError("median of no samples")
    return _median_sorted(s)


def percentile(samples: Iterable[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100), linearly interpolated; ValueError for no samples."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    return quantile(samples, q / 100, what="percentile")


def quantile(samples: Iterable[float], fraction: float, *, what: str = "quantile") -> float:
    """The quantile at `fraction` (0..1), as np.quantile computes it; ValueError for no samples."""
    s = sorted(samples)
    if not s:
        raise ValueError(f"{what} of no samples")
    if not 0 <= fraction <= 1:
        raise ValueError(f"quantile {fraction} outside 0..1")
    return _at(s, (len(s) - 1) * fraction)


def _median_sorted(s: list[float]) -> float:
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def _percentile_sorted(s: list[float], q: float) -> float:
    return _at(s, (len(s) - 1) * (q / 100))


def _at(s: list[float], pos: float) -> float:
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    a, b, t = s[lo], s[hi], pos - lo
    # numpy's lerp, from the nearer end: the same operations, so the same figures to the last bit
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


__all__ = ["FEW_SAMPLES", "MAD_SIGMA", "MAD_WIDTHS", "Summary", "median", "percentile", "quantile", "summarize"]

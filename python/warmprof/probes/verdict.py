"""Verdicts: which band a first-call tax falls in, whether it is cached, and what it is keyed on.

Pure functions over synthetic-able timings (ms), so every rule is unit-tested without a device.
The thresholds are named here, once; bands come from the machine (see bands.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..report.probe import KEYS, VERDICTS

PAYS_RATIO = 10.0  # the study's "first >> steady": more than 10x (P1, P3)
CACHED_FRACTION = 0.25  # a seen re-run keeping at most this share of the first call's excess is cached (P2)
NOISE_WIDTHS = 3.0  # an excess counts only beyond this many steady spreads (p90 - p10)
NOISY_SPREAD = 1.0  # steady spread wider than its own median: small taxes cannot be called
TIMER_FLOOR_MS = 0.002  # below this an excess is clock and sync jitter, whatever the spread says


@dataclass(frozen=True)
class Timing:
    """One op at one shape: a single first call, steady per-call stats, and a later seen-shape re-run."""

    first_ms: float
    steady_ms: float  # median
    steady_p10_ms: float
    steady_p90_ms: float
    seen_rerun_ms: float | None = None

    @property
    def excess_ms(self) -> float:
        return max(0.0, self.first_ms - self.steady_ms)

    @property
    def spread_ms(self) -> float:
        return max(0.0, self.steady_p90_ms - self.steady_p10_ms)

    @property
    def ratio(self) -> float:
        return self.first_ms / self.steady_ms if self.steady_ms > 0 else float("inf")


@dataclass(frozen=True)
class RowBands:
    """Band limits that apply to one op and shape: launch up to launch_hi, allocation up to alloc_hi."""

    launch_hi_ms: float
    alloc_hi_ms: float


def noise_floor_ms(t: Timing) -> float:
    return max(NOISE_WIDTHS * t.spread_ms, TIMER_FLOOR_MS)


def too_noisy(t: Timing) -> bool:
    """The steady loop varies by more than its own median, and the excess does not clear that spread."""
    wide = t.steady_ms <= 0 or t.spread_ms > NOISY_SPREAD * t.steady_ms
    return wide and t.excess_ms <= noise_floor_ms(t)


def has_tax(t: Timing) -> bool:
    """The first call cost measurably more than a steady call."""
    return t.excess_ms > noise_floor_ms(t)


def pays(t: Timing, bands: RowBands) -> bool:
    """A tax above the launch band: what counts when asking whether a shape 'pays'."""
    return has_tax(t) and t.excess_ms > bands.launch_hi_ms


def pays_full(t: Timing) -> bool:
    """The study's tax: first call more than PAYS_RATIO times steady."""
    return t.ratio > PAYS_RATIO


def band_of(excess_ms: float, bands: RowBands) -> str:
    if excess_ms <= bands.launch_hi_ms:
        return "launch"
    if excess_ms <= bands.alloc_hi_ms:
        return "allocation"
    return "compile"


def is_cached(t: Timing, bands: RowBands) -> bool | None:
    """Did the seen-shape re-run come back near steady? None when there was no re-run."""
    if t.seen_rerun_ms is None:
        return None
    rerun_excess = max(0.0, t.seen_rerun_ms - t.steady_ms)
    return rerun_excess <= max(CACHED_FRACTION * t.excess_ms, bands.launch_hi_ms)


def op_keying(first_shape_pays: bool, later_shapes_pay: list[bool]) -> str:
    """What an op's first-shape tax is keyed on, from whether later new shapes of the warmed op pay.

    "shape": most later new shapes pay again; "op": only the op's first shape paid (a one-time load);
    "none": nothing paid.
    """
    if later_shapes_pay and sum(later_shapes_pay) * 2 >= len(later_shapes_pay):
        return "shape"
    if first_shape_pays:
        return "op"
    return "shape" if any(later_shapes_pay) else "none"


def size_keying(a_pays: bool, b_pays: bool) -> str:
    """Two never-seen shapes of equal output size, A first: B paying again means keyed on shape."""
    if b_pays:
        return "shape"
    if a_pays:
        return "size"
    return "none"


def verdict(t: Timing, bands: RowBands, keyed: str) -> tuple[str, list[str]]:
    """The verdict for one op and shape, with the evidence behind it.

    keyed: what this row's tax is keyed on ("shape": a new shape of an already-warmed op, or the op's
    first shape when later shapes pay too; "op": the op's first shape and later shapes do not pay;
    "size": a matched-size partner did not pay again; "none": nothing of this op paid).
    """
    if keyed not in KEYS:
        raise ValueError(f"unknown keying {keyed!r}")
    ev = [f"first {t.first_ms:.3g} ms vs steady {t.steady_ms:.3g} ms (p10-p90 {t.steady_p10_ms:.3g}-"
          f"{t.steady_p90_ms:.3g}); excess {t.excess_ms:.3g} ms"]
    if too_noisy(t):
        ev.append(f"steady spread {t.spread_ms:.3g} ms exceeds its median and the excess does not clear "
                  f"{NOISE_WIDTHS:g} spreads: too noisy to call")
        return "too noisy", ev
    if not has_tax(t):
        ev.append(f"excess within the noise floor {noise_floor_ms(t):.3g} ms: no first-call tax")
        return "none", ev
    band = band_of(t.excess_ms, bands)
    ev.append(_band_sentence(band, t.excess_ms, bands))
    if band == "launch":
        return "launch", ev
    cached = is_cached(t, bands)
    if cached is not None:
        rerun = t.seen_rerun_ms or 0.0
        share = rerun / t.first_ms if t.first_ms > 0 else 0.0
        ev.append(f"seen re-run {rerun:.3g} ms = {share:.2g}x of first: " + ("cached" if cached else "paid again"))
    if keyed == "size":
        ev.append("a different shape of the same output size did not pay again: keyed on size")
        return "allocation", ev
    if keyed == "op" and cached is not False:
        ev.append("new shapes of the warmed op did not pay: keyed on the op (a one-time load)")
        return "one-time load", ev
    if band == "allocation":
        return "allocation", ev
    if cached is False:
        ev.append("above the allocation band yet not cached: a recurring cold-call cost, not a compile")
        return "recurring", ev
    ev.append("paid at every new shape: keyed on shape" if keyed == "shape" else "keying not established")
    return ("compile" if keyed == "shape" else "one-time load"), ev


def _band_sentence(band: str, excess_ms: float, bands: RowBands) -> str:
    if band == "launch":
        return f"excess {excess_ms:.3g} ms within the launch band (<= {bands.launch_hi_ms:.3g} ms)"
    if band == "allocation":
        return (f"excess {excess_ms:.3g} ms in the allocation band ({bands.launch_hi_ms:.3g}-"
                f"{bands.alloc_hi_ms:.3g} ms at this output size)")
    return f"excess {excess_ms:.3g} ms above the allocation band ({bands.alloc_hi_ms:.3g} ms): compile band"

"""Verdicts: which band a first-call tax falls in, whether it is cached, and what it is keyed on.

Pure functions over synthetic-able timings (ms), so every rule is unit-tested without a device.
The thresholds are named here, once; bands come from the machine (see bands.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..report.probe import KEYS, VERDICTS  # noqa: F401 (VERDICTS re-exported for callers)

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


def pay_rank(t: Timing, bands: RowBands) -> int:
    """0: no tax above the launch band; 1: a tax in the allocation band; 2: in the compile band."""
    if not pays(t, bands):
        return 0
    return 2 if band_of(t.excess_ms, bands) == "compile" else 1


def _most(flags: list[bool]) -> bool:
    return bool(flags) and sum(flags) * 2 >= len(flags)


def op_keying(first_rank: int, later_ranks: list[int]) -> str:
    """What an op's first-shape tax is keyed on, from the pay ranks of later new shapes of the warmed op.

    "shape": most later shapes pay again, in the same band as the first or above; "op": the first
    shape's tax does not come back at new shapes (a one-time load); "none": nothing paid.
    """
    if first_rank == 0:
        return "shape" if _most([r > 0 for r in later_ranks]) else "none"
    return "shape" if _most([r >= first_rank for r in later_ranks]) else "op"


def size_keying(a_rank: int, b_rank: int) -> str:
    """Two never-seen shapes of equal output size, A run first: B paying as much again means keyed on shape."""
    if b_rank > 0 and b_rank >= a_rank:
        return "shape"
    if a_rank > 0:
        return "size"
    return "none"


def cuda_eager_note(op: str, library: dict | None) -> str:
    """What a per-shape ("compile") verdict means for a probed op on CUDA eager, where nothing is
    compiled (torch's kernels are precompiled; the probed ops use no jiterator): cuBLAS/cuBLASLt pick
    a GEMM kernel by heuristics and benchmark nothing unless TunableOp is on, so a new shape's extra
    first-call time is mostly its kernel loaded lazily on first launch. `library`:
    instruments.torch_cuda.library_settings() in the probing process."""
    if op == "matmul" and (library or {}).get("tunableop"):
        return ("on CUDA with TunableOp on (PYTORCH_TUNABLEOP_ENABLED), a new GEMM shape's first call benchmarks "
                "candidate kernels: per-shape algorithm selection, not a compile")
    what = "cuBLAS/cuBLASLt pick a GEMM kernel by heuristics and benchmark nothing by default" if op == "matmul" else \
        "its kernels are precompiled"
    return (f"on CUDA eager nothing compiles here ({what}): a cost keyed on shape is mostly a kernel loaded lazily on "
            "its first launch (CUDA_MODULE_LOADING=LAZY: runtime_init), named 'compile' for its band and keying only")


def verdict(t: Timing, bands: RowBands, keyed: str, device_note: str = "") -> tuple[str, list[str]]:
    """The verdict for one op and shape, with the evidence behind it. device_note: what a per-shape
    verdict means on this device and backend (cuda_eager_note), added to its evidence.

    keyed: what the op's pattern says this row's tax is keyed on ("shape": most new shapes of the op
    pay, or both shapes of a matched-size pair do; "op": the op's first shape paid and its later new
    shapes did not; "size": the matched-size partner did not pay again; "none": no pattern, so a lone
    tax in the compile band is not called).
    """
    if keyed not in KEYS:
        raise ValueError(f"unknown keying {keyed!r}")
    ev = [f"first {_n(t.first_ms)} ms vs steady {_n(t.steady_ms)} ms (p10-p90 {_n(t.steady_p10_ms)}-"
          f"{_n(t.steady_p90_ms)}); excess {_n(t.excess_ms)} ms"]
    if too_noisy(t):
        ev.append(f"steady spread {_n(t.spread_ms)} ms exceeds its median and the excess does not clear "
                  f"{NOISE_WIDTHS:g} spreads: too noisy to call")
        return "too noisy", ev
    if not has_tax(t):
        ev.append(f"excess within the noise floor {_n(noise_floor_ms(t))} ms: no first-call tax")
        return "none", ev
    band = band_of(t.excess_ms, bands)
    ev.append(_band_sentence(band, t.excess_ms, bands))
    if band == "launch":
        return "launch", ev
    cached = is_cached(t, bands)
    if cached is not None:
        rerun = t.seen_rerun_ms or 0.0
        share = rerun / t.first_ms if t.first_ms > 0 else 0.0
        ev.append(f"seen re-run {_n(rerun)} ms = {share:.2g}x of first: " + ("cached" if cached else "paid again"))
    if keyed == "size":
        ev.append("a different shape of the same output size did not pay again: keyed on size")
        return "allocation", ev
    if keyed == "op" and cached is not False:
        ev.append("new shapes of the warmed op did not pay this much again: keyed on the op (a one-time load)")
        return "one-time load", ev
    if band == "allocation":
        return "allocation", ev
    if cached is False:
        ev.append("above the allocation band yet not cached: a recurring cold-call cost, not a compile")
        return "recurring", ev
    if keyed == "shape":
        ev.append("the op's new shapes pay again: keyed on shape")
        if device_note:
            ev.append(device_note)
        return "compile", ev
    ev.append("an isolated tax: the op's other new shapes did not pay, and one call cannot tell a compile "
              "from a scheduling stall")
    return "too noisy", ev


def _n(v: float) -> str:
    """A figure for evidence text: three significant digits, no exponent for large values."""
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def _band_sentence(band: str, excess_ms: float, bands: RowBands) -> str:
    if band == "launch":
        return f"excess {_n(excess_ms)} ms within the launch band (<= {_n(bands.launch_hi_ms)} ms)"
    if band == "allocation":
        return (f"excess {_n(excess_ms)} ms in the allocation band ({_n(bands.launch_hi_ms)}-"
                f"{_n(bands.alloc_hi_ms)} ms at this op size)")
    return f"excess {_n(excess_ms)} ms above the allocation band ({_n(bands.alloc_hi_ms)} ms): compile band"

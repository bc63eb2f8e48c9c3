"""Across passes: where the unexplained time sits, the summary against the noise band, and the steady
passes' statistics."""

from __future__ import annotations

from dataclasses import dataclass

from ..stats import summarize as summarize_samples
from .parts import PassAttribution


def unattributed_where(first: PassAttribution, rerun: PassAttribution, top: int = 8,
                       floor_ms: float = 0.01) -> list[tuple[str, float]]:
    """Where the first pass's unattributed time sits: each module's unexplained time in the first
    pass less its unexplained time in the seen-shape re-run (same input, same instruments, so
    instrument overhead and the module's steady work cancel). Largest first, positive only.

    The entries sum to the first pass's unexplained time over the re-run's, not over the steady
    median; the difference is what the re-run itself paid beyond a steady pass, unexplained."""
    mods = set(first.unexplained_by_module) | set(rerun.unexplained_by_module)
    out = []
    for mod in mods:
        ms = (first.unexplained_by_module.get(mod, 0.0) - rerun.unexplained_by_module.get(mod, 0.0)) / 1e6
        if ms >= floor_ms:
            out.append((mod, ms))
    out.sort(key=lambda kv: (-kv[1], kv[0]))
    return out[:top]


def unattributed_sites(first: PassAttribution, rerun: PassAttribution, top: int = 200,
                       floor_ms: float = 0.005) -> list[tuple[str, str, float]]:
    """unattributed_where by (module, op) site, when the op view ran: each site's unexplained time in
    the first pass less the same site's in the seen re-run; op "" is the module's own code outside
    ops. Largest first, positive only."""
    sites = set(first.unexplained_by_site) | set(rerun.unexplained_by_site)
    out = []
    for site in sites:
        ms = (first.unexplained_by_site.get(site, 0.0) - rerun.unexplained_by_site.get(site, 0.0)) / 1e6
        if ms >= floor_ms:
            out.append((site[0], site[1], ms))
    out.sort(key=lambda r: (-r[2], r[0], r[1]))
    return out[:top]


@dataclass
class Summary:
    excess_ms: float
    attributed_ms: float
    unattributed_ms: float
    noise_band_ms: float
    within_noise: bool


def summarize(first_pass_ms: float, steady_median_ms: float, noise_band_ms: float, attributed_ms: float) -> Summary:
    excess = first_pass_ms - steady_median_ms
    unattributed = excess - attributed_ms
    return Summary(excess, attributed_ms, unattributed, noise_band_ms, abs(unattributed) <= noise_band_ms)


@dataclass(frozen=True)
class SteadyStats:
    """The steady passes' times: median, p10, p90, the noise band and how many passes."""

    median: float
    p10: float
    p90: float
    noise_band: float
    n: int


def steady_stats(times_ms: list[float]) -> SteadyStats:
    """Median, p10, p90 and the noise band (p90 - p10, at least the MAD-based spread): stats.summarize."""
    s = summarize_samples(times_ms)
    return SteadyStats(s.median, s.p10, s.p90, s.noise_band, s.n)

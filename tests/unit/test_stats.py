"""The one summary of repeated timings (warmprof.stats) gives numpy's figures, and the rules its
users rely on: zeros for no samples, the minimum as the low figure under 10 samples, the MAD floor."""

import random

import numpy as np
import pytest

from warmprof import stats
from warmprof.probes import timing
from warmprof.traces.calibrate import Spread, spread_of


def _samples(rng: random.Random, n: int) -> list[float]:
    kind = rng.randrange(3)
    if kind == 0:  # steady timings with a slow tail
        return [rng.lognormvariate(0, 0.3) * 1e3 + (rng.random() < 0.1) * 1e5 for _ in range(n)]
    if kind == 1:  # many ties, as integer counts give
        return [float(rng.randrange(4)) for _ in range(n)]
    return [rng.uniform(-1e6, 1e6) for _ in range(n)]


@pytest.mark.parametrize("seed", range(40))
def test_the_figures_equal_numpys(seed):
    rng = random.Random(seed)
    x = _samples(rng, rng.randrange(1, 60))
    a = np.asarray(x)
    s = stats.summarize(x)
    med = float(np.median(a))
    p10, p90 = (float(v) for v in np.percentile(a, [10, 90]))
    band = max(p90 - p10, 2.0 * 1.4826 * float(np.median(np.abs(a - med))))
    got = (s.median, s.p10, s.p90, s.min, s.max, s.noise_band)
    want = (med, p10, p90, float(a.min()), float(a.max()), band)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert s.n == len(x)
    q = rng.uniform(0, 100)
    assert stats.percentile(x, q) == pytest.approx(float(np.percentile(a, q)), rel=1e-12, abs=1e-12)
    assert stats.median(x) == pytest.approx(med, rel=1e-12, abs=1e-12)


def test_no_samples_summarize_to_zeros_and_single_figures_refuse():
    assert stats.summarize([]) == stats.Summary(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        stats.median([])
    with pytest.raises(ValueError):
        stats.percentile([], 50)
    with pytest.raises(ValueError):
        stats.percentile([1.0], 101)
    with pytest.raises(ValueError):
        timing.stats([])


def test_one_sample_is_every_figure_with_no_noise():
    s = stats.summarize([2.5])
    assert (s.n, s.median, s.p10, s.p90, s.min, s.max, s.low, s.noise_band) == (1, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 0.0)


def test_the_low_figure_is_the_minimum_below_10_samples_and_p10_from_10():
    nine = [float(v) for v in range(10, 19)]
    assert stats.summarize(nine).low == 10.0 != stats.summarize(nine).p10
    ten = [float(v) for v in range(10, 20)]
    assert stats.summarize(ten).low == stats.summarize(ten).p10 == pytest.approx(10.9)
    assert spread_of(nine) == Spread(10.0, 14.0, stats.percentile(nine, 90), 9)


def test_the_noise_band_is_at_least_the_mad_spread():
    # Two clusters of passes: p10-p90 spans 1 ms, MAD is 0.5 ms, and the MAD floor sets the band.
    s = stats.summarize([10.0] * 5 + [11.0] * 5)
    assert (s.p90 - s.p10, s.median) == (1.0, 10.5)
    assert s.noise_band == pytest.approx(2 * 1.4826 * 0.5)
    same = stats.summarize([5.0] * 20)
    assert same.noise_band == 0.0 and same.p10 == same.p90 == 5.0


def test_the_probes_timing_stats_are_the_summary_in_ms():
    x = [3.0, 1.0, 2.0, 10.0]
    s, t = stats.summarize(x), timing.stats(x)
    assert (t.median_ms, t.p10_ms, t.p90_ms, t.max_ms, t.n) == (s.median, s.p10, s.p90, s.max, s.n)

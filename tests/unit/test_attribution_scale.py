"""Attribution stays near-linear in the number of samples (it was quadratic in the fault samples:
16k module calls took 180 s a pass)."""

import gc
import time

from warmprof.attribution import Calibration, attribute_pass
from warmprof.timeline import BEGIN, COUNTER, END, Timeline

NAMES = ["pass:first", "module:net", "module:net.block", "host:minor_faults", "host:major_faults",
         "host:threads", "test:compile"]


def _timeline(calls: int) -> Timeline:
    """A pass of `calls` module calls, fault and thread samples at every boundary, a fault
    every third call and a cause span every 100 calls."""
    recs = [(0, BEGIN, 0, 0, 0), (1, BEGIN, 0, 1, 0)]
    t, faults = 10, 0
    for i in range(calls):
        recs += [(t, COUNTER, 0, 3, faults), (t, COUNTER, 0, 4, 0), (t, COUNTER, 0, 5, 4), (t + 1, BEGIN, 0, 2, 0)]
        if i % 100 == 0:
            recs += [(t + 2, BEGIN, 1, 6, 0), (t + 5, END, 1, 6, 0)]
        faults += i % 3 == 0
        recs += [(t + 8, END, 0, 2, 0), (t + 9, COUNTER, 0, 3, faults), (t + 9, COUNTER, 0, 4, 0),
                 (t + 9, COUNTER, 0, 5, 4)]
        t += 10
    recs += [(t + 1, END, 0, 1, 0), (t + 2, END, 0, 0, 0)]
    return Timeline.from_records(recs, NAMES)


def _seconds(calls: int, runs: int) -> float:
    """The best of `runs` (a busy machine only ever adds time), with the collector off: in a long
    test session a full collection costs time in proportion to everything else alive."""
    tl = _timeline(calls)
    best = float("inf")
    gc.disable()
    try:
        for _ in range(runs):
            t0 = time.perf_counter()
            att = attribute_pass(tl, "first", calibration=Calibration(fault_cost_ns=1000.0, hook_cost_ns=1.0))
            best = min(best, time.perf_counter() - t0)
    finally:
        gc.enable()
    assert att.faults > 0 and any(p.cause == "jit_compile" for p in att.parts)
    return best


def test_attribution_at_50k_samples_is_near_linear():
    small, large = _seconds(5_000, runs=3), _seconds(50_000, runs=2)
    assert large < 120, f"50k module calls took {large:.1f} s to attribute"  # generous: linear is ~1 s here
    # 10x the samples: about 10x the time when linear, 100x when quadratic (the old code).
    assert large / small < 35, (small, large)

"""What a trace's headline says (the verdict), from the report's figures only: a first-call cost, none
at this shape, a first pass faster than steady, or an answer the two fresh processes do not agree on.
Data only: the bottom of traces/ (fold, advice and explain read it; it reads none of them)."""

from __future__ import annotations

from typing import Any

from ..causes import Name

NO_COST = "no_first_call_cost"
FIRST_CALL_COST = "first_call_cost"
FASTER = "first_pass_faster"
# The clean and the instrumented first pass differ by more than their measured waits and noise explain:
# which figure holds is not settled by one run (`--repeat N` runs N fresh processes).
UNSTABLE = "unstable"
VERDICTS = (FIRST_CALL_COST, NO_COST, FASTER, UNSTABLE)


def after_pause_ms(report: Any, net: bool = False) -> float:
    """The least a warm pass after a short pause paid over the back-to-back steady passes
    (report.clean's after_pause, measured by the control); 0 where none was measured or it paid nothing.
    net: both net of their waits for a CPU and off it (net_excess_ms), where the control read them; under load
    a pass woken from its sleep first waits for a CPU, which the wall-time figure counts."""
    clean = getattr(report, "clean", None)
    pause = clean.get("after_pause") if isinstance(clean, dict) else None
    if not isinstance(pause, dict):
        return 0.0
    try:
        return max(0.0, float(pause["net_excess_ms" if net and "net_excess_ms" in pause else "excess_ms"]))
    except (KeyError, TypeError, ValueError):
        return 0.0


# The most page faults beyond a steady pass's median a warm first pass takes: the heap growing by an arena or
# a buffer (0-41 in 122 pre-run traces of demo, llama, bert and t5, quiet and under two CPU hogs); a pass running
# code or touching data new to its process maps hundreds (450-2471 in 179 cold traces of the same models).
WARM_FAULTS = 64


def new_faults(first: Any, steady: Any) -> int | None:
    """The page faults a clean first pass took beyond the most any of its steady passes took (the control
    counts each; their median where an older control kept no most: demo's steady passes take 0 or ~480 each as
    the heap is trimmed and grown again, and a warm pass may take as many); None where either count is missing."""
    if not isinstance(first, dict) or not isinstance(steady, dict) or "faults" not in first or "faults" not in steady:
        return None
    try:
        return max(0, int(first["faults"]) - int(max(float(steady["faults"]), float(steady.get("faults_max", 0)))))
    except (TypeError, ValueError):
        return None


def first_pass_new_faults(report: Any) -> int | None:
    """new_faults of the report's clean first pass (report.clean); None without a control or its counts."""
    clean = getattr(report, "clean", None)
    if not isinstance(clean, dict):
        return None
    return new_faults(clean.get("first"), clean.get("steady"))


def no_cost_bound_parts(report: Any) -> tuple[float, bool, float]:
    """(spread, net, pause): what no_cost_bound_ms adds up. For a clean first pass that mapped pages new to
    its process (more than WARM_FAULTS page faults beyond the most a steady pass took: it ran code and touched
    data for the first time), the spread of the steady passes net of their waits for a CPU and off it, where
    the control read them (net: True), and no pause: what that pass paid is its own, and load widens the
    wall-time band past a small model's whole first-call cost (4.27 ms against a cold Llama's 3.06 ms with a
    hog on each core; 0.45 ms net) and the after-pause figure with it (a pass woken from its sleep first
    waits for a CPU: 4-17 ms under two hogs). For any other first pass (a warm one, or no fault counts) the
    steady passes' noise band and the least a warm pass after a short pause paid, both wall time: every first
    pass comes after other work, steady passes back to back, and a warm pass's wait for its workers or off the
    CPU (which the net spread leaves out, and its excess does not) must not read as a first-call cost."""
    new = first_pass_new_faults(report)
    if new is not None and new > WARM_FAULTS:
        clean = getattr(report, "clean", None)
        net_band = clean.get("steady_net_band_ms") if isinstance(clean, dict) else None
        if isinstance(net_band, (int, float)):
            return float(net_band), True, 0.0
        return float(report.noise_band_ms), False, 0.0
    return float(report.noise_band_ms), False, after_pause_ms(report)


def no_cost_bound_ms(report: Any) -> float:
    """The most a first pass may exceed the steady median (less its wait for a CPU) and still show no
    first-call cost: the steady passes' spread (net of their waits for a cold pass), plus the least a warm
    pass after a short pause paid unless the first pass was a cold one (no_cost_bound_parts)."""
    spread, _, pause = no_cost_bound_parts(report)
    return spread + pause


def causes_wait_ms(causes: Any) -> float:
    """What a pass's measured causes say it waited for a CPU: its cpu_contention entries and the waits
    inside the other causes' own spans (waited_ms)."""
    return sum(c.ms if c.cause == Name.CPU_CONTENTION else getattr(c, "waited_ms", 0.0)
               for c in causes if c.evidence == "measured")


def headline_wait_ms(report: Any) -> float:
    """What the headline's first pass waited for a CPU beyond a steady pass (measured): the clean pass's
    own (schedstat, in report.clean) where the control ran, else the booked cpu_contention and the
    waits inside causes of the instrumented pass."""
    clean = getattr(report, "clean", None)
    if isinstance(clean, dict) and isinstance(clean.get("first"), dict) and "run_delay_ms" in clean["first"]:
        steady = clean.get("steady")
        base = float(steady.get("run_delay_ms", 0.0)) if isinstance(steady, dict) else 0.0
        return max(0.0, float(clean["first"]["run_delay_ms"]) - base)
    return causes_wait_ms(report.causes)


def verdict(report: Any) -> str:
    """What the measured excess says: unstable where the accounting found the two processes apart
    beyond their waits and noise; else a first-call cost (beyond no_cost_bound_ms: the steady passes'
    spread and, for a first pass that mapped no new pages, the least a warm pass after a pause pays, once the
    headline pass's measured wait for a CPU is left out), none at this shape (within that), or a first pass
    faster than steady (noise too)."""
    acc = getattr(report, "accounting", None)
    if isinstance(acc, dict) and acc.get("unstable"):
        return UNSTABLE
    if report.excess_ms - headline_wait_ms(report) > no_cost_bound_ms(report):
        return FIRST_CALL_COST
    return NO_COST if report.excess_ms >= -report.noise_band_ms else FASTER


__all__ = ["FASTER", "FIRST_CALL_COST", "NO_COST", "UNSTABLE", "VERDICTS", "WARM_FAULTS", "after_pause_ms",
           "causes_wait_ms", "first_pass_new_faults", "headline_wait_ms", "new_faults", "no_cost_bound_ms", "no_cost_bound_parts",
           "verdict"]

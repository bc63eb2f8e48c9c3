"""Attribution: the one place signals become causes. Pure functions, no timing, no instruments.

- a trace's pass: engine.attribute_pass builds one PassContext from the recorded timeline
  (context.py, reading.py) and runs the estimators (estimators.py, each (context) -> parts) over it;
  time inside nested cause spans goes to the innermost one, counters sampled at span boundaries are
  placed under the cause span covering them, and the rest is the pass's unexplained time.
- one call (a warm-up call, a watched call): calls.attribute_call turns the call's facts (its time,
  the compiles dynamo bracketed, page faults and memory grown, CPU time, CUDA calls) into parts.
- off-CPU time (off_cpu.py): where the pass thread was blocked (wall less CPU less run-queue delay between
  boundary samples), a disk read where it read from storage, else a wait, taken out of the spans it fell in.
- shared by both: the compile trigger -> cause table (compiles.py), fault pricing with one noise floor
  and one calibration (faults.py), and the summary across passes (summary.py).

excess = first - steady median; unattributed = excess - attributed, judged against the noise band of
the steady passes (summary.summarize).
"""

from __future__ import annotations

from .context import PassContext, build_context
from .engine import attribute_pass
from .estimators import (
    ESTIMATORS,
    Estimator,
    cause_spans,
    cpu_contention,
    cupti_callback_cost,
    host_faults,
    inferred_figures,
    instrument_cost,
    module_hook_cost,
    op_view_first_dispatch,
    thread_starts,
)
from .off_cpu import Stretch, off_cpu_time, stretches
from .faults import FaultSplit, per_byte_at, split_faults
from .parts import Calibration, Figure, InstrumentCost, Part, PassAttribution, SpanRec
from .reading import CounterStep, Segment, build_spans
from .summary import (
    SteadyStats,
    Summary,
    steady_stats,
    summarize,
    unattributed_sites,
    unattributed_where,
)

__all__ = [
    "ESTIMATORS", "Calibration", "CounterStep", "Estimator", "FaultSplit", "Figure", "InstrumentCost", "Part", "PassAttribution",
    "PassContext", "Segment", "SpanRec", "SteadyStats", "Stretch", "Summary", "attribute_pass", "build_context", "build_spans",
    "cause_spans", "cpu_contention", "cupti_callback_cost", "host_faults", "inferred_figures", "instrument_cost",
    "module_hook_cost", "off_cpu_time", "op_view_first_dispatch", "per_byte_at", "split_faults", "steady_stats", "stretches",
    "summarize", "thread_starts", "unattributed_sites", "unattributed_where",
]

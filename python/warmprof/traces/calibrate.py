"""This machine's unit costs, measured once per process: timer overhead, page-fault cost, thread
start, module hook cost and the CUPTI handler's cost per callback. A trace measures them after its
passes (they would warm what the first pass measures cold); attribution multiplies counts by them."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import _native
from ..attribution import Calibration
from ..errors import InputError
from ..instruments.modules import ModuleHooks

# One trace or calibration at a time per process: they share the native recorder. Another thread,
# or a trace started from inside a trace (by the model, by a progress callable), is refused at
# once, never made to wait; trace() holds this lock and calibrates through measure().
busy = threading.Lock()


@dataclass(frozen=True)
class MachineCosts:
    """What calibrate() measured; the report's protocol keeps it as to_dict() gives it."""

    timer_overhead_ns: float
    fault_cost_ns: float  # one first-touch page fault, in the faulting thread's CPU time
    fault_cost_per_page_ns: float
    thread_start_ns: float
    # What warmprof's module hooks add to one module call: the first pass and the seen re-run run
    # with them, the steady passes without (an estimated profiler_overhead).
    hook_cost_ns: float
    # What warmprof's CUPTI handler adds to one callback (a repeat launch through the real callback
    # entry, no driver needed; 0 when the backend is not compiled). CUPTI's own dispatch of the
    # callback comes on top and is not measured here: the estimate built on this is a floor.
    cupti_handler_ns: float = 0.0
    clock: dict[str, Any] = field(default_factory=dict)  # the native clock's calibration

    def for_attribution(self) -> Calibration:
        return Calibration(fault_cost_ns=self.fault_cost_ns, thread_start_ns=self.thread_start_ns,
                           hook_cost_ns=self.hook_cost_ns, cupti_handler_ns=self.cupti_handler_ns)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_calibration: MachineCosts | None = None


def calibrate() -> MachineCosts:
    """Once per process (a trace does it by itself, after its passes): this machine's timer
    overhead, per-fault cost, thread start cost and module hook cost. Refused while a trace runs."""
    if _calibration is not None:
        return _calibration
    if not busy.acquire(blocking=False):
        raise InputError("a warmprof trace is already running in this process: calibrate after it (a trace "
                         "calibrates by itself)")
    try:
        return measure()
    finally:
        busy.release()


def measure() -> MachineCosts:
    """The process's calibration, measured on the first call. The caller holds `busy` (trace() does):
    measuring touches the recorder and hooks modules, which a running trace must not see."""
    global _calibration
    if _calibration is None:
        if not busy.locked():
            raise RuntimeError("traces.calibrate.measure() needs the `busy` lock held: call calibrate()")
        pairs = []
        for _ in range(201):
            a = _native.now_ns()
            b = _native.now_ns()
            pairs.append(b - a)
        pairs.sort()
        fault = _native.calibrate_fault_cost(16 << 20, 5)
        _calibration = MachineCosts(
            timer_overhead_ns=float(pairs[len(pairs) // 2]),
            fault_cost_ns=float(fault["ns_per_fault"]),
            fault_cost_per_page_ns=float(fault["ns_per_page"]),
            thread_start_ns=float(_native.thread_start_ns(9)),
            hook_cost_ns=float(ModuleHooks.calibrate_cost()),
            cupti_handler_ns=cupti_handler_cost(),
            clock=dict(_native.clock_info()),
        )
    return _calibration


def cupti_handler_cost(pairs: int = 20000, batches: int = 7) -> float:
    """ns warmprof's CUPTI handler adds to one callback: the median of `batches` native loops of
    `pairs` launch enter/exit callbacks (0.0 when the CUPTI backend is not compiled)."""
    if not _native.backends()["cupti"]["compiled"]:
        return 0.0
    runs = sorted(float(_native.cupti_handler_cost_ns(pairs)) for _ in range(batches))
    return runs[batches // 2]


def cached() -> MachineCosts | None:
    """The calibration if this process has one (set once a trace has run to its end here)."""
    return _calibration


__all__ = ["MachineCosts", "busy", "cached", "calibrate", "cupti_handler_cost", "measure"]

"""The set-up before the first pass, timed with instruments on: the model moved to the device (CUDA
context creation, lazy module loads, weight staging), cast, and its inputs made.

A pod's first request pays for these too, but they are not the first pass: ARCHITECTURE.md keeps
them a set-up phase of the report, shown before the first pass and never mixed into its
attribution. Each step is a span of its own in a recording of its own (its name is the step's
"module" in the set-up's causes), attributed by the same engine as a pass, with no steady baseline
(every cause is the set-up's own) and no warm control: what the set-up instruments themselves cost is
in it (the set-up's instruments are few: host counters, Python imports and, on CUDA, CUPTI, entered
before its window so that their own start is not in it). The device's checks before it
(torch.cuda.is_available(), the device count: the driver's cuInit) ran earlier and are not in it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from .. import _native
from ..attribution import attribute_pass
from ..causes import Name
from ..instruments.device_set import setup_instruments
from ..instruments.host import HostCounters
from ..instruments.python_imports import PythonImports
from ..report.trace import CauseEntry, Setup
from ..timeline import STRUCTURE, Recording, Timeline, begin, end, name_id

SETUP = "setup"  # the set-up's pass name: its span is pass:setup
STEP_PREFIX = "module:"  # each step is a span read as a module, so causes are placed by step
HOW = ("the set-up before the first pass (the model moved to the device, cast, its inputs made), timed with the "
       "set-up instruments on ({instruments}) and attributed by the trace's engine with no steady baseline: every "
       "cause is the set-up's own and none is in the first pass's excess")


@dataclass
class SetupRun:
    """What the set-up recorded: its timeline and window, each step's time, and its instruments."""

    timeline: Timeline | None
    window: tuple[int, int] | None
    steps: list[tuple[str, float]] = field(default_factory=list)  # (step, ms), in order
    instruments: list[Any] = field(default_factory=list)

    def attribute(self, calibration: Any = None) -> Setup | None:
        """The report's set-up section: the set-up's causes at this calibration (None: nothing ran)."""
        if self.timeline is None or self.window is None:
            return None
        att = attribute_pass(self.timeline, SETUP, calibration=calibration, steady_faults=0, window=self.window,
                             evidence={src: ev for i in self.instruments for src, ev in i.span_evidence.items()})
        total_ms = (self.window[1] - self.window[0]) / 1e6
        causes = [CauseEntry(cause=p.cause, ms=p.ms, share=p.ms / total_ms if total_ms > 0 else 0.0,
                             evidence=p.evidence, source=p.source, module=p.top_module, count=p.count, detail=p.detail)
                  for p in att.parts if p.ns >= 1000 and p.cause != Name.PROFILER_OVERHEAD]
        attributed = sum(c.ms for c in causes)
        if attributed > total_ms > 0:  # estimates past the set-up's time: shares of the attributed time
            for c in causes:
                c.share = c.ms / attributed
        on = {i.name: (f"off: {i.reason}" if i.reason else "on") for i in self.instruments}
        return Setup(ms=total_ms, steps=[{"name": n, "ms": ms} for n, ms in self.steps], causes=causes,
                     unattributed_ms=total_ms - attributed, instruments=on,
                     how=HOW.format(instruments=", ".join(f"{n} {v}" for n, v in on.items())))


@contextlib.contextmanager
def _stdio_held() -> Iterator[None]:
    """Standard descriptors the caller closed (0, 1, 2) held on /dev/null for the set-up, then closed
    again: a descriptor the set-up's instruments keep open (the host counters' /proc/self/statm)
    must not take the number, or the oneDNN instrument would read it as an open stdout and capture it."""
    held = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            got = os.open(os.devnull, os.O_RDWR)
            if got != fd:  # a lower one was free after all: not ours to hold
                os.close(got)
                continue
            held.append(fd)
    try:
        yield
    finally:
        for fd in held:
            with contextlib.suppress(OSError):
                os.close(fd)


def run_setup(kind: Any, device: Any, steps: list[tuple[str, Callable[[], Any]]],
              instruments: list[Any] | None = None) -> SetupRun:
    """Run the set-up's steps (name, function) in order inside one recorded window, each a span of
    its own, with the set-up instruments on (the host's and the device kind's: devices.DeviceKind
    .setup_instruments; `instruments` stands in for them, tests). A step that raises ends the set-up
    (instruments off, recording released) and the error goes to the caller as it was."""
    if instruments is None:
        instruments = [HostCounters(), PythonImports(), *setup_instruments(kind, {"device": device})]
    done: list[tuple[str, float]] = []
    pass_id = name_id(f"pass:{SETUP}")
    with _stdio_held(), Recording(spare_buffers=2) as rec:
        with contextlib.ExitStack() as stack:
            for inst in instruments:
                stack.enter_context(inst)
            for inst in instruments:
                inst.mark_pass(SETUP)
            begin(STRUCTURE, pass_id)
            t0 = _native.now_ns()
            try:
                for name, fn in steps:
                    nid = name_id(STEP_PREFIX + name)
                    a = _native.now_ns()
                    begin(STRUCTURE, nid)
                    try:
                        fn()
                    finally:
                        end(STRUCTURE, nid)
                        done.append((name, (_native.now_ns() - a) / 1e6))
            finally:
                t1 = _native.now_ns()
                end(STRUCTURE, pass_id)
                for inst in instruments:
                    inst.end_pass(SETUP)
        timeline = rec.drain()
    return SetupRun(timeline, (t0, t1), done, instruments)


COLD_START_HOW = ("the cold start before the model reached the trace (importing torch, the factory's module, the "
                  "factory: its build or weight load), timed in the trace's own fresh process with host counters and "
                  "Python imports on; then ")


def cold_start_instruments() -> list[Any]:
    """The cold start's instruments: the host's and Python imports' (no device instruments: they start
    before torch is imported, and a device's context is created in the set-up's to(device) step)."""
    return [HostCounters(), PythonImports()]


def merged(first: Setup | None, then: Setup | None) -> Setup | None:
    """One set-up section of two recorded one after the other (the cold start, then the trace's own set-up):
    steps in order, times and causes added, each cause's share of the whole."""
    if first is None or then is None:
        return first or then
    ms = first.ms + then.ms
    causes = [dataclasses.replace(c) for c in (*first.causes, *then.causes)]
    attributed = sum(c.ms for c in causes)
    for c in causes:
        c.share = c.ms / max(ms, attributed) if max(ms, attributed) > 0 else 0.0
    instruments = dict(first.instruments)
    for name, state in then.instruments.items():
        instruments[name] = state if instruments.get(name, "on") == "on" else instruments[name]
    return Setup(ms=ms, steps=[*first.steps, *then.steps], causes=causes,
                 unattributed_ms=first.unattributed_ms + then.unattributed_ms, instruments=instruments,
                 how=COLD_START_HOW + then.how)


__all__ = ["COLD_START_HOW", "SETUP", "SetupRun", "cold_start_instruments", "merged", "run_setup"]

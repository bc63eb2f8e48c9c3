"""The set-up before the first pass, timed with instruments on: the model moved to the device (CUDA
context creation, lazy module loads, weight staging), cast, and its inputs made.

A pod's first request pays for these too, but they are not the first pass: ARCHITECTURE.md keeps
them a set-up phase of the report, shown before the first pass and never mixed into its
attribution. Each step is a module span of its own in a recording of its own; the set-up is attributed
by the same engine as a pass, once over its whole window, and each cause's time is placed in the step it
happened in (the part's time by module), so a step carries its own causes, each with the step's name as
its "module", adding up to at most its time (what they leave is the step's unattributed). (Attributing
each step over its own window instead would book an off-CPU stretch that crosses a step boundary in both
steps: the thread's clocks are sampled where it left its CPU, not at every boundary.) There is no steady
baseline (every cause is the set-up's own) and no warm control: what the set-up instruments themselves
cost is in it (the set-up's instruments are few: host counters, Python imports and, on CUDA, CUPTI, entered
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
from ..attribution import Part, PassAttribution, attribute_pass
from ..causes import Name
from ..instruments.device_set import setup_instruments
from ..instruments.host import HostCounters
from ..instruments.gc_collections import GcCollections
from ..instruments.python_imports import PythonImports
from ..report.trace import CauseEntry, Setup
from .build import _entries
from ..timeline import STRUCTURE, Recording, Timeline, begin, end, name_id

SETUP = "setup"  # the set-up's pass name: its span is pass:setup
STEP_PREFIX = "module:"  # each step is a span read as a module: a part's time is placed by step (Part.by_module)
# A step's causes add up to at most its time: past it by more than this (an estimate over a short
# step), they are scaled down together to fit, and each scaled one says so.
STEP_SLACK_MS = 0.005
HOW = ("the set-up before the first pass (the model moved to the device, cast, its inputs made), timed with the "
       "set-up instruments on ({instruments}) and attributed by the trace's engine with no steady baseline, each "
       "cause's time placed in the step it happened in (a step's causes are inside it and add up to at most its "
       "time; what they leave is its unattributed): every cause is the set-up's own and none is in the first "
       "pass's excess")
IMPORTS_OFF = ("the Python-imports instrument was {state}: the time this step spent importing modules is not "
               "measured, and is in its unattributed time")


@dataclass
class SetupRun:
    """What the set-up recorded: its timeline and window, each step's own window, and its instruments.
    The steps' windows are contiguous and cover the set-up's window (a step's starts where the one
    before it ended), so the steps' times add up to the set-up's."""

    timeline: Timeline | None
    window: tuple[int, int] | None
    steps: list[tuple[str, int, int]] = field(default_factory=list)  # (step, start ns, end ns), in order
    instruments: list[Any] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)  # step -> what its figures leave out

    def attribute(self, calibration: Any = None) -> Setup | None:
        """The report's set-up section at this calibration (None: nothing ran): the set-up attributed once,
        over its whole window, and each part's time split by the step it happened in (its time by module:
        the steps are its module spans), so each step carries its own causes and a cause is inside one step.
        The set-up's `causes` are the steps' causes one after the other (each with its step as its module)."""
        if self.timeline is None or self.window is None:
            return None
        evidence = {src: ev for i in self.instruments for src, ev in i.span_evidence.items()}
        on = {i.name: (f"off: {i.reason}" if i.reason else "on") for i in self.instruments}
        imports = on.get("python_imports")
        att = attribute_pass(self.timeline, SETUP, calibration=calibration, steady_faults=0, window=self.window,
                             evidence=evidence)
        steps: list[dict[str, Any]] = []
        for name, a, b in self.steps:
            ms = (b - a) / 1e6
            step = step_entry(name, ms, in_step(att.parts, name, ms))
            note = self.notes.get(name, "")
            if imports is not None and imports != "on" and name.startswith("import "):
                note = "; ".join(x for x in (note, IMPORTS_OFF.format(state=imports)) if x)
            if note:
                step["note"] = note
            steps.append(step)
        total_ms = (self.window[1] - self.window[0]) / 1e6
        return Setup.of_steps(total_ms, steps, instruments=on,
                              how=HOW.format(instruments=", ".join(f"{n} {v}" for n, v in on.items())))


def in_step(parts: list[Part], step: str, step_ms: float) -> list[CauseEntry]:
    """The cause entries of one step: each part's time in the step's module span (Part.by_module), its
    count and the waits it holds (Part's *_ns figures besides its time) in the same proportion. A part that
    fell in several steps says which share of it this step's is. warmprof's own cost is not a cause."""
    out = []
    for p in parts:
        ns = p.by_module.get(STEP_PREFIX + step, p.by_module.get(step, 0.0))
        if p.cause == Name.PROFILER_OVERHEAD or ns < 1000 or p.ns <= 0:
            continue
        frac = min(1.0, ns / p.ns)
        changes: dict[str, Any] = {"ns": ns, "by_module": {step: ns}, "count": round(p.count * frac)}
        for f in dataclasses.fields(p):  # the waits a part holds inside its own time (waited_ns, blocked_ns)
            if f.name.endswith("_ns") and f.name != "ns" and isinstance(getattr(p, f.name), (int, float)):
                changes[f.name] = getattr(p, f.name) * frac
        if frac < 1.0 - 1e-9:
            changes["detail"] = (f"{ns / 1e6:.3f} ms of the set-up's {p.ms:.3f} ms, placed in this step by where it "
                                 f"happened" + (f"; the set-up's: {p.detail}" if p.detail else ""))
        q = dataclasses.replace(p, **changes)
        out += [dataclasses.replace(e, module=step) for e in _entries(PassAttribution(step_ms, [q], []), step_ms)]
    return out


def step_entry(name: str, ms: float, causes: list[CauseEntry]) -> dict[str, Any]:
    """One step of the set-up as the report holds it: its time, its causes (each a share of the step) and
    its unattributed time. Causes past the step's time (estimates: a step's measured causes are inside
    its window) are scaled down together to fit it, each saying by how much: a cause is never larger
    than its step, and none is sized as what the others leave."""
    attributed = sum(c.ms for c in causes)
    if attributed > ms + STEP_SLACK_MS and attributed > 0:
        keep = max(0.0, ms) / attributed
        for c in causes:
            c.scale(keep, f"scaled to {keep:.1%} with the step's other causes: together they came to {attributed:.3f} "
                          f"ms in a step of {ms:.3f} ms (an estimate past the step's time)")
        attributed = sum(c.ms for c in causes)
    for c in causes:
        c.share = c.ms / ms if ms > 0 else 0.0
    return {"name": name, "ms": ms, "causes": [dataclasses.asdict(c) for c in sorted(causes, key=lambda c: -c.ms)],
            "unattributed_ms": ms - attributed}


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
              instruments: list[Any] | None = None, notes: dict[str, str] | None = None) -> SetupRun:
    """Run the set-up's steps (name, function) in order inside one recorded window, each a span of
    its own, with the set-up instruments on (the host's and the device kind's: devices.DeviceKind
    .setup_instruments; `instruments` stands in for them, tests). A step's window runs from the end of
    the one before it (the set-up's start for the first) to its own end, so the steps cover the set-up.
    `notes`: step -> what its figures leave out, said in its entry. A step that raises ends the set-up
    (instruments off, recording released) and the error goes to the caller as it was."""
    if instruments is None:
        instruments = [HostCounters(), PythonImports(), GcCollections(), *setup_instruments(kind, {"device": device})]
    done: list[tuple[str, int, int]] = []
    pass_id = name_id(f"pass:{SETUP}")
    with _stdio_held(), Recording(spare_buffers=2) as rec:
        with contextlib.ExitStack() as stack:
            for inst in instruments:
                stack.enter_context(inst)
            for inst in instruments:
                inst.mark_pass(SETUP)
            begin(STRUCTURE, pass_id)
            t0 = _native.now_ns()
            at = t0
            try:
                for name, fn in steps:
                    nid = name_id(STEP_PREFIX + name)
                    begin(STRUCTURE, nid)
                    try:
                        fn()
                    finally:
                        end(STRUCTURE, nid)
                        t = _native.now_ns()
                        done.append((name, at, t))
                        at = t
            finally:
                t1 = at
                end(STRUCTURE, pass_id)
                for inst in instruments:
                    inst.end_pass(SETUP)
        timeline = rec.drain()
    return SetupRun(timeline, (t0, t1), done, instruments, dict(notes or {}))


COLD_START_HOW = ("the cold start before the model reached the trace (importing torch, the factory's module, the "
                  "factory: its build or weight load), timed in the trace's own fresh process with host counters, "
                  "Python imports and garbage collections on; then ")


def cold_start_instruments() -> list[Any]:
    """The cold start's instruments: the host's, Python imports' and garbage collections' (no device
    instruments: they start before torch is imported, and a device's context is created in the set-up's to(device) step)."""
    return [HostCounters(), PythonImports(), GcCollections()]


def merged(first: Setup | None, then: Setup | None) -> Setup | None:
    """One set-up section of two recorded one after the other (the cold start, then the trace's own set-up):
    steps in order, each with its own causes; times added; the set-up-wide causes each a share of the whole."""
    if first is None or then is None:
        return first or then
    instruments = dict(first.instruments)
    for name, state in then.instruments.items():
        instruments[name] = state if instruments.get(name, "on") == "on" else instruments[name]
    return Setup.of_steps(first.ms + then.ms, [dict(st) for st in (*first.steps, *then.steps)],
                          instruments=instruments, how=COLD_START_HOW + then.how)


__all__ = ["COLD_START_HOW", "SETUP", "STEP_SLACK_MS", "SetupRun", "cold_start_instruments", "merged", "run_setup",
           "step_entry"]

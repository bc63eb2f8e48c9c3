"""One call's facts -> parts: the rules warmup, assert_warm and watch book a call by (a trace's pass
goes through engine.attribute_pass; both share compiles.py's table and faults.py's pricing).

- What dynamo's callbacks bracketed (Bracketed): each stretch's cause from compiles.cause_of, its time
  measured; the compiles are one jit_compile part, each other cause one part.
- CUDA calls CUPTI timed on the calling thread (watch(cupti=True)): measured, scaled to fit the call's
  time outside its compiles when they would not (then estimated); a stream capture inside a CUDA graph
  recording dynamo bracketed is that recording's.
- Page faults outside the bracketed stretches (their own faults are theirs; when a stretch's are not
  known, none are booked): allocator_growth estimated at faults.split_faults' price when they pass
  faults.is_growth, file-backed growth as runtime_init (no time: mapping cached pages is cheap); growth
  of the CUDA caching allocator as allocator_growth with no time.
- cpu_contention: the thread's run-queue delay over the call where it was read (measured, from
  WAIT_FLOOR_NS); else (estimated) wall time less the thread's CPU time, when the thread was preempted.
- wait, or disk_read when the call read from storage (major faults, blocks read): its time off the
  CPU that was no wait for a CPU (above), less the measured stretches' time and what its key's usual
  calls spend off it, from WAIT_FLOOR_NS (measured where the CPU time and run-queue delay were read
  exactly, else estimated); before clock_ramp, which takes what the excess leaves.
- The estimates fit in the call's time outside its measured parts and, for an outlier, in its excess
  over the key's median less those, allocator growth first (`capped` says when one was cut).
- clock_ramp (inferred): an outlier after an idle gap with the device clock below CLOCK_LOW of its
  maximum: what the excess leaves after the causes above. With no clock reading, nothing: an idle gap
  alone is not a clock.
- residual: the excess (or, with no baseline, the call's time) less every part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Union

from ..causes import Name
from .compiles import cause_of
from .faults import FAULT_AROUND_PAGES, is_growth, split_faults
from .. import _native
from .off_cpu import READAHEAD_BYTES
from .parts import Calibration

CLOCK_LOW = 0.9  # a device clock below this share of its maximum has not ramped up
Costs = Union[Calibration, Callable[[], Calibration]]
SOURCES = {  # rule -> the source name a part carries
    "compiles": "dynamo", "counters": "dynamo_counters", "faults": "page_faults", "files": "file_pages", "cuda_reserved": "cuda_caching_allocator",
    "cupti": "cupti", "off_cpu": "off_cpu", "idle_clock": "idle_clock", "blocked": "thread_blocked",
}
# Off-CPU time below this is not booked as a wait (nor a run-queue delay as contention): both clocks
# read to the ns, but a call's own bookkeeping, a page-cache read or a GIL hand-off is tens of us off the
# CPU in any call; and it is watch's own default floor for an outlier (floor_ms 0.05), so a wait below it
# could not make a call slow enough to be kept.
WAIT_FLOOR_NS = 50_000
# getrusage's ru_inblock counts 512-byte blocks, whatever the device's own block size
BLOCK_BYTES = 512


@dataclass(frozen=True)
class Bracketed:
    """One stretch dynamo's callbacks bracketed during the call: a compile, a CUDA graph recording,
    Triton autotuning (source: compiles.TRIGGERS)."""

    source: str
    ns: float
    count: int = 1
    compile_id: str = ""
    recompile_reason: str = ""
    faults: int | None = None  # page faults taken inside it (None: not read)
    anon_bytes: int = 0  # anonymous resident growth inside it
    file_bytes: int = 0


@dataclass(frozen=True)
class CudaCalls:
    """CUPTI's one-time CUDA calls of one cause that closed on the calling thread during the call."""

    calls: int
    ns: int
    bytes: int = 0


@dataclass(frozen=True)
class CallFacts:
    """What one call gave. None: not read by that caller."""

    ns: int  # wall time
    bracketed: tuple[Bracketed, ...] = ()
    faults: int = 0  # page faults over the call, the bracketed stretches' included
    anon_bytes: int | None = None  # anonymous resident growth over the call
    file_bytes: int | None = None  # file-backed resident growth over the call
    cuda_reserved_bytes: int | None = None  # growth of the CUDA caching allocator's reserve
    cpu_ns: int | None = None  # the calling thread's CPU time over the call
    involuntary_switches: int = 0
    run_delay_ns: int | None = None  # the thread's run-queue delay over the call (schedstat), where read
    # False: cpu_ns may be high by a scheduler tick (its start read late), so its time off the CPU that low;
    # None: both ends may be a tick out either way (a record from before this field): no wait is read from it
    cpu_exact: bool | None = True
    usual_off_cpu_ns: float = 0.0  # what its key's usual calls spend off the CPU (their mean)
    major_faults: int = 0  # of `faults`, those that read a page from storage
    blocks_read: int = 0  # blocks the thread read from storage
    # its voluntary context switches (the times it blocked); None: not read (a record from before it)
    voluntary_switches: int | None = None
    cuda_calls: Mapping[str, CudaCalls] = field(default_factory=dict)  # CUPTI, by cause
    compiled_graphs: int = 0  # graphs dynamo's counters say it produced (seen even with no callback)
    excess_ns: float | None = None  # over its key's median, for an outlier; None: no baseline
    after_idle_s: float | None = None  # the idle gap before it, when it came after one
    clock_mhz: tuple[float, float] | None = None  # (MHz, maximum MHz) at its start, where read


@dataclass(frozen=True)
class CallPart:
    """One cause of one call. ns None: it fired with no time figure (its evidence is the growth)."""

    cause: str
    source: str
    evidence: str
    ns: float | None
    count: int = 0
    # what the caller words its detail with: faults, anon_faults, bytes, scale, capped_from_ns ...
    figures: Mapping[str, float] = field(default_factory=dict)

    @property
    def ms(self) -> float | None:
        return None if self.ns is None else self.ns / 1e6


@dataclass(frozen=True)
class CallAttribution:
    parts: tuple[CallPart, ...]
    residual_ns: float  # the excess (or the call's time, with no baseline) less every part's time

    def part(self, cause: str, source: str | None = None) -> CallPart | None:
        return next((p for p in self.parts if p.cause == cause and (source is None or p.source == source)), None)


def _bracketed_parts(facts: CallFacts) -> list[CallPart]:
    by_cause: dict[str, list[Bracketed]] = {}
    for b in facts.bracketed:
        by_cause.setdefault(cause_of(b.source), []).append(b)
    out = []
    for cause, found in by_cause.items():
        source = SOURCES["compiles"] if cause == Name.JIT_COMPILE else found[0].source
        out.append(CallPart(cause, source, "measured", sum(b.ns for b in found), sum(b.count for b in found)))
    if Name.JIT_COMPILE not in by_cause and facts.compiled_graphs > 0:  # compiled, no callback seen: no time
        out.insert(0, CallPart(Name.JIT_COMPILE, SOURCES["counters"], "measured", None, facts.compiled_graphs))
    return out


def _cupti_parts(facts: CallFacts, outside_ns: float, captured: bool) -> list[CallPart]:
    got = [(cause, c) for cause, c in facts.cuda_calls.items()
           if c.calls > 0 and not (cause == Name.GRAPH_CAPTURE and captured)]
    total = sum(c.ns for _, c in got)
    scale = min(1.0, outside_ns / total) if total > 0 else 1.0
    return [CallPart(cause, SOURCES["cupti"], "measured" if scale >= 1.0 else "estimated", c.ns * scale, c.calls,
                     {"bytes": c.bytes, "scale": scale}) for cause, c in got]


def outside_bracketed(facts: CallFacts) -> tuple[int, int | None, int | None] | None:
    """Faults, anonymous and file bytes outside the bracketed stretches; None when a stretch's own are
    not known (then no fault is the call's own)."""
    if any(b.faults is None for b in facts.bracketed if cause_of(b.source) == Name.JIT_COMPILE):
        return None
    inside = [b for b in facts.bracketed if b.faults is not None]
    faults = max(0, facts.faults - sum(b.faults or 0 for b in inside))
    anon = None if facts.anon_bytes is None else facts.anon_bytes - sum(b.anon_bytes for b in inside)
    files = None if facts.file_bytes is None else facts.file_bytes - sum(b.file_bytes for b in inside)
    return faults, anon, files


def _memory_parts(facts: CallFacts, costs: Costs) -> list[CallPart]:
    out = []
    outside = outside_bracketed(facts)
    faults, anon, files = outside if outside is not None else (0, None, None)
    page = _page_bytes()
    if outside is not None and is_growth(faults, anon, page):
        cal = costs() if callable(costs) else costs  # measured only when a call has faults to price
        # a call's file-backed faults are whole ones: one per fault-around block grown
        whole_files = max(0, files or 0) // (page * FAULT_AROUND_PAGES) * (page * FAULT_AROUND_PAGES)
        split = split_faults(faults, max(0, anon or 0), whole_files, cal)
        out.append(CallPart(Name.ALLOCATOR_GROWTH, SOURCES["faults"], "estimated", split.anon_ns, faults,
                            {"faults": faults, "anon_faults": split.anon_faults, "anon_bytes": anon or 0,
                             "fault_cost_ns": cal.fault_cost_ns}))
    if facts.cuda_reserved_bytes is not None and facts.cuda_reserved_bytes > 0:  # a shrinking reserve is no growth
        out.append(CallPart(Name.ALLOCATOR_GROWTH, SOURCES["cuda_reserved"], "measured", None, 0,
                            {"bytes": facts.cuda_reserved_bytes}))
    if outside is not None and files is not None and is_growth(faults, files, page):
        out.append(CallPart(Name.RUNTIME_INIT, SOURCES["files"], "estimated", None, faults, {"file_bytes": files}))
    return out


def _page_bytes() -> int:
    return int(_native.page_size())


def _fit(part: CallPart, room: float) -> CallPart:
    if part.ns is None or part.ns <= room:
        return part
    return CallPart(part.cause, part.source, part.evidence, max(0.0, room), part.count,
                    {**part.figures, "capped_from_ns": part.ns})


def _idle_part(facts: CallFacts, left: float) -> CallPart | None:
    """clock_ramp only from a clock reading that was low: an idle gap alone is not a clock (a sleep, a
    lock or a remote call after a quiet spell reads alike), so without a reading the excess stays
    unattributed."""
    if facts.after_idle_s is None or facts.excess_ns is None or left <= 0 or facts.clock_mhz is None:
        return None
    mhz, top = facts.clock_mhz
    if top > 0 and mhz < CLOCK_LOW * top:
        return CallPart(Name.CLOCK_RAMP, SOURCES["idle_clock"], "inferred", left, 1)
    return None


def _blocked_parts(facts: CallFacts, off_cpu_ns: float, measured_ns: float, room: float) -> list[CallPart]:
    """wait, and disk_read when the call read from storage: its time off the CPU that was no wait for a
    CPU (`off_cpu_ns`, that taken out already), less the measured stretches' time (a compile's or a
    CUDA call's own waits are theirs, and where in the call the thread was off its CPU is not known)
    and its key's usual, fitted in the room left. A call that read from storage and also blocked
    otherwise (a sleep beside a page read from disk) has it split by block counts, as a trace's
    stretches are (attribution.off_cpu): the reads account for one block a major fault or a readahead
    window, the rest of its voluntary switches were waits. Where the switches were not read, all of it
    is the disk read's (an estimate, as before they were)."""
    if facts.cpu_ns is None or facts.cpu_exact is None or room <= 0:
        return []
    beyond = off_cpu_ns - measured_ns - max(0.0, facts.usual_off_cpu_ns)
    if beyond < WAIT_FLOOR_NS:
        return []
    reads = facts.major_faults + facts.blocks_read
    exact = facts.cpu_exact and facts.run_delay_ns is not None
    switches = facts.voluntary_switches
    if switches == 0:  # read, and it never blocked: what is left is the clocks' skew or steal, no wait (as a trace reads it)
        return []
    share = 0.0
    io_blocks = 0
    if reads:
        io_blocks = max(facts.major_faults, -(-facts.blocks_read * BLOCK_BYTES // READAHEAD_BYTES))
        share = min(1.0, io_blocks / switches) if switches else 1.0
    figures = {"off_cpu_ns": float(off_cpu_ns), "measured_ns": float(measured_ns),
               "usual_off_cpu_ns": max(0.0, facts.usual_off_cpu_ns),
               "major_faults": facts.major_faults, "blocks_read": facts.blocks_read,
               "voluntary_switches": -1 if switches is None else switches, "disk_share": share,
               "lower_bound": 0.0 if facts.cpu_exact else 1.0}
    out = []
    disk_ns, wait_ns = beyond * share, beyond * (1.0 - share)
    if disk_ns > 0:
        out.append(_fit(CallPart(Name.DISK_READ, SOURCES["blocked"], "estimated", disk_ns, reads, figures), room))
        room -= out[-1].ns or 0.0
    if wait_ns >= WAIT_FLOOR_NS and room > 0:
        waits = max(1, (switches or 1) - io_blocks)
        out.append(_fit(CallPart(Name.WAIT, SOURCES["blocked"], "measured" if exact and not reads else "estimated",
                                 wait_ns, waits, figures), room))
    return out


def attribute_call(facts: CallFacts, costs: Costs) -> CallAttribution:
    """The parts of one call, in the order the rules find them (see the module docstring). `costs`: the
    unit costs its faults are priced with, or a callable giving them, called only when some faults
    pass the noise floor (watch's first event would otherwise pay a calibration on the serving thread)."""
    parts = _bracketed_parts(facts)
    compile_ns = sum(p.ns or 0.0 for p in parts)
    captured = any(p.cause == Name.GRAPH_CAPTURE for p in parts)
    outside = max(0.0, facts.ns - compile_ns)
    parts += _cupti_parts(facts, outside, captured)
    measured = sum(p.ns or 0.0 for p in parts)
    room = max(0.0, facts.ns - measured)
    if facts.excess_ns is not None:
        room = min(room, max(0.0, facts.excess_ns - measured))
    for p in _memory_parts(facts, costs):
        p = _fit(p, room)
        room -= p.ns or 0.0
        parts.append(p)
    off_cpu = facts.ns - facts.cpu_ns if facts.cpu_ns is not None else 0
    ready, evidence = 0.0, ""  # of the time off the CPU, the wait for a CPU, and how it is known
    if facts.run_delay_ns is not None:  # read: that wait itself
        ready = float(min(max(0, facts.run_delay_ns), max(0, off_cpu)))
        evidence = "measured" if ready >= WAIT_FLOOR_NS else ""
    elif facts.involuntary_switches > 0 and off_cpu > 0:  # preempted, the wait not read: all of it
        ready, evidence = float(off_cpu), "estimated"
    if evidence and room > 0:
        parts.append(CallPart(Name.CPU_CONTENTION, SOURCES["off_cpu"], evidence, min(ready, room),
                              facts.involuntary_switches))
        room -= parts[-1].ns or 0.0
    parts += _blocked_parts(facts, off_cpu - ready, measured, room)
    attributed = sum(p.ns or 0.0 for p in parts)
    idle = _idle_part(facts, (facts.excess_ns or 0.0) - attributed)
    if idle is not None:
        parts.append(idle)
        attributed += idle.ns or 0.0
    base = facts.excess_ns if facts.excess_ns is not None else float(facts.ns)
    return CallAttribution(tuple(parts), base - attributed)


__all__ = ["Bracketed", "CallAttribution", "CallFacts", "CallPart", "CudaCalls", "attribute_call", "outside_bracketed"]

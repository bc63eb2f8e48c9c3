"""The thin Python face of the native recorder: cause ids, spans, counters, drained arrays.

Instruments write through this module; attribution reads what it drains. Nothing here times
anything itself: every timestamp comes from the native clock.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np

from . import _native

# Cause ids come from the one table (causes.py, mirrored from csrc/core/causes.h); re-exported
# here because instruments record through this module.
from .causes import (  # noqa: F401
    ALGORITHM_SELECTION,
    ALLOCATOR_GROWTH,
    CLOCK_RAMP,
    CPU_CONTENTION,
    DATA_TRANSFER,
    GARBAGE_COLLECTION,
    GRAPH_CAPTURE,
    JIT_COMPILE,
    PROFILER_OVERHEAD,
    RUNTIME_INIT,
    STRUCTURE,
    UNATTRIBUTED,
    recorded,
)
from .errors import WarmprofError


def cause_name(cause_id: int) -> str:
    """The report name of a recorded cause id ("" for structure, "unattributed" if unknown)."""
    if cause_id == STRUCTURE:
        return ""
    return recorded().get(int(cause_id), UNATTRIBUTED)


BEGIN, END, INSTANT, COUNTER = 0, 1, 2, 3

# Hot entry points, straight from the native module (raw METH_FASTCALL functions).
begin = _native.begin
end = _native.end
instant = _native.instant
counter = _native.counter
sample_host = _native.sample_host
module_enter = _native.module_enter
module_exit = _native.module_exit
now_ticks = _native.now_ticks
begin_section = _native.begin_section

# Instant written by the recorder when module calls step down to fewer modules (value: the new
# level: 1 = coarse modules only, 0 = none), because a buffer's module budget was spent.
THINNED = "warmprof:thinned"
# Counter written by the torch kernel-cache instrument (instruments/kernel_cache.py) at the time a new
# file appeared in torch's NVRTC kernel cache during a pass (value: its bytes): a jiterator compile
# ended there (attribution.estimators.nvrtc_cache_compiles books it).
NVRTC_CACHE_FILE = "torch:nvrtc_cache_file"
# Counter written by the CUPTI instrument at the start and end of each instrumented pass: the
# callbacks warmprof's CUPTI handler has taken so far (attribution books them as its overhead).
CUPTI_CALLBACKS = "cupti:callbacks"

# Host counters, sampled natively at pass and module boundaries (sample_host, module_enter/exit) under
# the names csrc/bindings.cpp interns; tests/native/test_host_counter_names.py holds the two together.
MINOR_FAULTS_COUNTER = "host:minor_faults"
MAJOR_FAULTS_COUNTER = "host:major_faults"
FAULT_COUNTERS = (MINOR_FAULTS_COUNTER, MAJOR_FAULTS_COUNTER)
RSS_COUNTER = "host:rss_bytes"
THREAD_COUNTER = "host:threads"
FILE_COUNTER = "host:file_bytes"  # resident file-backed (and shared) bytes: RSS less this is anonymous
# The sampling thread's own run-queue delay (ns runnable, waiting for a CPU: schedstat) and its
# involuntary context switches; per-thread counters, read on the pass thread only.
RUN_DELAY_COUNTER = "host:run_delay_ns"
INVOLUNTARY_COUNTER = "host:involuntary_switches"
# Read with the involuntary switches, only where the thread left its CPU since its last sample (and at
# pass boundaries): its CPU time (wall less CPU less run-queue delay is the time it was blocked), its
# voluntary switches (each a block), bytes read from storage for it and its own major faults (a block
# that read from disk). Per-thread, like the run-queue delay.
THREAD_CPU_COUNTER = "host:thread_cpu_ns"
VOLUNTARY_COUNTER = "host:voluntary_switches"
STORAGE_READ_COUNTER = "host:storage_read_bytes"
THREAD_MAJOR_FAULTS_COUNTER = "host:thread_major_faults"
OFF_CPU_COUNTERS = (THREAD_CPU_COUNTER, VOLUNTARY_COUNTER, STORAGE_READ_COUNTER, THREAD_MAJOR_FAULTS_COUNTER)
HOST_COUNTERS = (*FAULT_COUNTERS, RSS_COUNTER, THREAD_COUNTER, FILE_COUNTER, RUN_DELAY_COUNTER, INVOLUNTARY_COUNTER,
                 *OFF_CPU_COUNTERS)

_name_ids: dict[str, int] = {}


def name_id(name: str) -> int:
    """Interned id of a span or counter name ("source:detail"); cached on the Python side."""
    nid = _name_ids.get(name)
    if nid is None:
        nid = _name_ids[name] = _native.intern(name)
    return nid


def source_of(name: str) -> str:
    """The source part of a "source:detail" name."""
    return name.split(":", 1)[0]


@contextlib.contextmanager
def span(cause: int, name: str) -> Iterator[None]:
    """A span for cold code (instruments' setup); hot paths call begin/end with cached ids."""
    nid = name_id(name)
    begin(cause, nid)
    try:
        yield
    finally:
        end(cause, nid)


def record_span_ns(cause: int, name: str, start_ns: int, end_ns: int, value: int = 0) -> None:
    """A span learned after the fact (oneDNN's create time, a compile metric), in monotonic ns."""
    if end_ns < start_ns:
        raise WarmprofError(f"span {name!r} ends before it starts ({start_ns} > {end_ns})")
    nid = name_id(name)
    _native.record_at(BEGIN, cause, nid, value, _native.ns_to_ticks(int(start_ns)))
    _native.record_at(END, cause, nid, value, _native.ns_to_ticks(int(end_ns)))


def now_ns() -> int:
    return int(_native.now_ns())


def counter_at(name: int, value: int, t_ns: int) -> bool:
    """A counter sample taken earlier, at CLOCK_MONOTONIC time t_ns (a sampler thread's reading).

    False when nothing is recording or the buffer is full (counted as dropped)."""
    return bool(_native.record_at(COUNTER, STRUCTURE, name, int(value), _native.ns_to_ticks(int(t_ns))))


@dataclass
class Timeline:
    """Drained records, sorted by time. Arrays share one index."""

    ts_ns: np.ndarray
    kind: np.ndarray
    cause: np.ndarray
    name: np.ndarray
    value: np.ndarray
    thread: np.ndarray
    names: list[str]
    dropped: int = 0  # records lost because a buffer was full (module calls are thinned first)
    threads: int = 0
    os_tids: list[int] = field(default_factory=list)
    thinned: int = 0  # module calls not recorded (their budget was spent)
    # When warmprof's own buffers took a page fault while recording (a page first written), in ns.
    own_fault_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def own_faults(self) -> int:
        return int(self.own_fault_ns.shape[0])

    def __len__(self) -> int:
        return int(self.ts_ns.shape[0])

    def name_of(self, i: int) -> str:
        return self.names[int(self.name[i])]

    @classmethod
    def empty(cls) -> "Timeline":
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z.astype(np.uint8), z.astype(np.uint8), z.astype(np.uint32), z, z.astype(np.uint16), [])

    @classmethod
    def from_records(cls, records: list[tuple], names: list[str]) -> "Timeline":
        """Synthetic timelines for tests: records are (ts_ns, kind, cause, name, value[, thread])."""
        recs = sorted(records, key=lambda r: r[0])
        cols: list[Sequence[Any]] = list(zip(*recs)) if recs else [[]] * 6
        thread = cols[5] if len(cols) > 5 else [0] * len(recs)
        return cls(
            ts_ns=np.asarray(cols[0], dtype=np.int64),
            kind=np.asarray(cols[1], dtype=np.uint8),
            cause=np.asarray(cols[2], dtype=np.uint8),
            name=np.asarray(cols[3], dtype=np.uint32),
            value=np.asarray(cols[4], dtype=np.int64),
            thread=np.asarray(thread, dtype=np.uint16),
            names=list(names),
            threads=len(set(thread)) if recs else 0,
        )


class Recording:
    """Starts a recorder generation; on exit it stops, drains and gives the buffers' memory back,
    so drain() (inside or after the context) returns the records. Not re-entrant.

    spare_buffers: buffers pre-faulted at the start besides the calling thread's, for threads
    that begin recording inside a pass (their pages are not first touched on the model's time)."""

    _active: "Recording | None" = None

    def __init__(self, spare_buffers: int = 0) -> None:
        self.timeline: Timeline | None = None
        self.spare_buffers = spare_buffers

    def __enter__(self) -> "Recording":
        if Recording._active is not None or _native.enabled():
            raise WarmprofError("a warmprof recording is already active in this process")
        Recording._active = self
        try:
            _native.start(self.spare_buffers)
        except BaseException:
            Recording._active = None
            raise
        return self

    def __exit__(self, *exc) -> None:
        _native.stop()
        try:
            if self.timeline is None:
                self.drain()
        finally:
            _native.release()
            Recording._active = None

    def drain(self) -> Timeline:
        if self.timeline is not None and Recording._active is not self:
            return self.timeline  # drained on exit; the buffers are released
        d = _native.drain()
        self.timeline = Timeline(
            ts_ns=d["ts_ns"], kind=d["kind"], cause=d["cause"], name=d["name"], value=d["value"],
            thread=d["thread"], names=list(d["names"]), dropped=int(d["dropped"]),
            threads=int(d["threads"]), os_tids=list(d["os_tids"]), thinned=int(d["thinned"]),
            own_fault_ns=d["own_fault_ns"],
        )
        return self.timeline


def active() -> bool:
    """True while a recording is on (tests assert it is off after each test)."""
    return bool(_native.enabled()) or Recording._active is not None

"""Off-CPU time: the stretches where the pass thread was blocked, neither running nor waiting for a
CPU. Between two samples of its clocks (module and pass boundaries, read wherever the thread left
its CPU since the boundary before), wall time less CPU time less run-queue delay is the time it was
blocked; it blocked only if it switched off voluntarily. A stretch in which the thread read from
storage (block input, or a major fault of its own) is a disk read; any other is a wait (a sleep, a
lock, a socket, a remote store; other threads' major faults meanwhile are said with it). Both are measured (clock differences) and placed in the module
they happened in."""

from __future__ import annotations

import bisect
from typing import NamedTuple

from ..causes import Name
from ..timeline import (
    MAJOR_FAULTS_COUNTER,
    RUN_DELAY_COUNTER,
    STORAGE_READ_COUNTER,
    THREAD_CPU_COUNTER,
    THREAD_MAJOR_FAULTS_COUNTER,
    VOLUNTARY_COUNTER,
    Timeline,
    cause_name,
    source_of,
)
from .context import PassContext
from .parts import Part
from .reading import _counter_series

# A pass's waits (after a steady pass's own are taken off) below this are not booked: the blocks
# any pass may take that are nobody's first-call cost (a futex handed between threads, a page
# under writeback, a pipe write) come to tens of microseconds; 0.2 ms is past them and under any
# sleep, lock or network call worth a line. A disk read has no floor: reading from storage at all
# is the cold page cache's doing, and it is booked at what it took.
WAIT_FLOOR_NS = 200_000
# The kernel's default readahead window (VM_READAHEAD_PAGES, 128 KiB): a cold read waits once for each
# window at most, so bytes read from storage account for at least this many blocks.
READAHEAD_BYTES = 128 << 10


class Stretch(NamedTuple):
    """Where the pass thread was blocked: somewhere in [start_ns, end_ns] (the boundary before the
    block and the one after it), for off_ns in all."""

    start_ns: int
    end_ns: int
    off_ns: int
    switches: int  # voluntary context switches (blocks)
    read_bytes: int  # bytes read from storage for the thread
    major_faults: int  # its page faults that read from storage
    # major faults of the process's other threads meanwhile: a pool paging its code in from disk while
    # the pass thread waits for it at a barrier, or another thread's own business (not told apart)
    others_major_faults: int = 0

    @property
    def disk(self) -> bool:
        return self.read_bytes > 0 or self.major_faults > 0

    @property
    def io_blocks(self) -> int:
        """The blocks its reads account for: one a major fault, or one a readahead window read (a
        cold sequential read blocks once a window or less), never more than it blocked."""
        return min(self.switches, max(self.major_faults, -(-self.read_bytes // READAHEAD_BYTES)))

    @property
    def disk_share(self) -> float:
        """The share of its blocked time that was a disk read: all of it where its reads account for
        every block, else theirs by count (a compile waiting 3 s on its workers while 20 KiB of a cold
        file came in is not 3 s of disk)."""
        return self.io_blocks / self.switches if self.switches else 0.0


def _at(ts: list[int], vals: list[int], t: int) -> int | None:
    """The value of a counter sampled at `ts` as it stood at `t` (the last sample at or before it)."""
    k = bisect.bisect_right(ts, t) - 1
    return vals[k] if k >= 0 else None


def stretches(tl: Timeline, thread: int, t0: int, t1: int) -> list[Stretch]:
    """The stretches of [t0, t1] in which `thread` was blocked, from its clocks' samples. Each
    sample of its CPU time comes after it left its CPU since the boundary before (its run-queue
    delay is read at every boundary), so the time blocked since the sample before lies after that
    boundary: the stretch starts there. Empty without the counters (no schedstat, no RUSAGE_THREAD,
    a timeline recorded before they existed)."""
    cpu_t, cpu_v = _counter_series(tl, THREAD_CPU_COUNTER, thread)
    delay_t, delay_v = _counter_series(tl, RUN_DELAY_COUNTER, thread)
    if len(cpu_t) < 2 or not delay_t:
        return []
    series = {name: _counter_series(tl, name, thread)
              for name in (VOLUNTARY_COUNTER, STORAGE_READ_COUNTER, THREAD_MAJOR_FAULTS_COUNTER)}
    series[MAJOR_FAULTS_COUNTER] = _counter_series(tl, MAJOR_FAULTS_COUNTER)  # the process's, at every boundary

    def grew(name: str, a: int, b: int) -> int:
        ts, vals = series[name]
        va, vb = _at(ts, vals, a), _at(ts, vals, b)
        return 0 if va is None or vb is None else max(0, vb - va)

    out = []
    lo_k = max(0, bisect.bisect_right(cpu_t, t0) - 1)
    for k in range(lo_k, len(cpu_t) - 1):
        ta, tb = cpu_t[k], cpu_t[k + 1]
        if ta >= t1:
            break
        da, db = _at(delay_t, delay_v, ta), _at(delay_t, delay_v, tb)
        if da is None or db is None:
            continue
        off = (tb - ta) - (cpu_v[k + 1] - cpu_v[k]) - (db - da)
        switches = grew(VOLUNTARY_COUNTER, ta, tb)
        # No voluntary switch, no block: what is left is the clocks' own skew (a preemption between
        # reading the delay and the CPU time) and time the hypervisor took (steal), neither a wait.
        if off <= 0 or switches <= 0:
            continue
        # The boundary before this sample's (whose run-delay sample is the last at or before tb): the
        # thread kept its CPU from the sample before up to there, or it would have been sampled. It was
        # back by this boundary's run-delay read (the switch had moved it): a preemption after that,
        # before the CPU clock's read, is run-queue delay, and must not stretch the block past it.
        at = bisect.bisect_right(delay_t, tb) - 1
        start = max(delay_t[at - 1], ta) if at >= 1 else ta
        lo, hi = max(start, t0), min(max(delay_t[at], start), t1)
        if hi <= lo:
            continue
        own_majors = grew(THREAD_MAJOR_FAULTS_COUNTER, ta, tb)
        out.append(Stretch(lo, hi, min(off, hi - lo), switches, grew(STORAGE_READ_COUNTER, ta, tb), own_majors,
                           max(0, grew(MAJOR_FAULTS_COUNTER, start, tb) - own_majors)))
    return out


def off_cpu_time(ctx: PassContext) -> list[Part]:
    """Measured wait and disk_read: the pass thread's blocked stretches (`stretches`), each spread over
    the segments it covers in proportion to their time (as cpu_contention spreads a wait for a CPU).
    A disk read is booked wherever it fell, and one inside a cause span (a oneDNN primitive created
    while its library's code was read from disk, an import reading a cold file) is taken out of that
    span's part, which measured wall time: pages read from disk are never booked as a compile. A wait
    is booked where no cause span covers it; one inside a cause span stays that span's (a compile
    waits for its compiler's processes, a driver call for the driver) and is said in the detail.
    A steady pass's own blocked time (ctx.steady_off_cpu_ns, the median) is taken off the waits, in
    proportion, and what is left of it off the disk reads; waits left under WAIT_FLOOR_NS are not
    booked."""
    tl = ctx.timeline
    if tl is None:
        return []
    got = stretches(tl, ctx.pass_span.thread, *ctx.window)
    if not got:
        return []
    wait = Part(Name.WAIT, "off_cpu", "measured")
    disk = Part(Name.DISK_READ, "storage", "measured")
    carved: dict[str, Part] = {}  # disk reads inside cause spans, by the spans' source
    lowered: dict[tuple[str, str, str], float] = {}  # (cause, source, module) -> ns taken out of its span
    kept_in_spans: dict[str, float] = {}  # waits left inside cause spans, by source
    blocked_in: dict[tuple[str, str], float] = {}  # the same by (cause, source): said on the span's part
    read_bytes = majors = blocks = disk_blocks = others = 0
    shared: dict[int, float] = {}  # id of a part -> ns of it split off stretches that also waited otherwise
    for st in got:
        share = st.disk_share
        disk_ns, wait_ns = st.off_ns * share, st.off_ns * (1 - share)
        if share > 0:
            read_bytes += st.read_bytes
            majors += st.major_faults
            disk_blocks += st.io_blocks
        if share < 1:
            blocks += st.switches - st.io_blocks
            others += st.others_major_faults
        for cause_span, mod, frac in ctx.spread(st.start_ns, st.end_ns, 1.0):
            d, w = disk_ns * frac, wait_ns * frac
            if cause_span is None:
                for p, ns in ((disk, d), (wait, w)):
                    if ns > 0:
                        p.add(mod, ns)
                        if 0 < share < 1:
                            shared[id(p)] = shared.get(id(p), 0.0) + ns
                continue
            src = source_of(cause_span.name)
            if w > 0:
                kept_in_spans[src] = kept_in_spans.get(src, 0.0) + w
                key2 = (cause_name(cause_span.cause), src)
                blocked_in[key2] = blocked_in.get(key2, 0.0) + w
            if d <= 0:
                continue
            into = carved.get(src)
            if into is None:
                into = carved[src] = Part(Name.DISK_READ, f"storage_in:{src}", "measured", carved=True)
            into.add(mod, d)
            if share < 1:
                shared[id(into)] = shared.get(id(into), 0.0) + d
            key = (cause_name(cause_span.cause), src, mod)
            lowered[key] = lowered.get(key, 0.0) + d
    steady = ctx.steady_off_cpu_ns
    wait_keep = max(0.0, wait.ns - steady) / wait.ns if wait.ns > 0 else 0.0
    disk_total = disk.ns + sum(p.ns for p in carved.values())
    left = max(0.0, steady - wait.ns)
    disk_keep = max(0.0, disk_total - left) / disk_total if disk_total > 0 else 0.0
    less = f", less a steady pass's own ({steady / 1e6:.3f} ms, the median)" if steady > 0 else ""
    how = "wall time less CPU time less run-queue delay, read at module boundaries"
    # waits kept inside cause spans: zero-time parts of the spans' (cause, source) carrying them, merged into
    # the spans' own parts (Part.blocked_ns), so a cause says how much of its time it was blocked
    parts = [Part(cause, src, ctx.evidence.get(src, "measured"), blocked_ns=ns)
             for (cause, src), ns in blocked_in.items() if ns > 0]
    if wait.ns * wait_keep >= WAIT_FLOOR_NS:
        _scale(wait, wait_keep)
        wait.count = blocks
        inside = sum(kept_in_spans.values())
        wait.detail = (f"the pass's thread was blocked off the CPU for {wait.ns / 1e6:.3f} ms outside cause spans "
                       f"({_switches(blocks)}: a sleep, a lock, a socket, a remote store; {how}){less}"
                       f"{_split(wait, shared, wait_keep)}")
        if others:
            wait.detail += (f"; the process's other threads took {others} major faults (pages read from disk) while it "
                            "waited: some of the wait may have been for them (a thread pool paging its code in)")
        if inside > 0:
            wait.detail += (f"; a further {inside / 1e6:.3f} ms blocked inside cause spans stays with them (their own "
                            f"waits, e.g. a compiler's processes): {_by_source(kept_in_spans)}")
        parts.append(wait)
    if disk_total * disk_keep <= 0:
        return parts
    pages = max(read_bytes // max(1, ctx.calibration.page_bytes), majors)
    what = (f"{pages} pages read from disk ({read_bytes / 2**20:.1f} MiB read from storage, {majors} major faults of the "
            f"pass's thread)")
    for p in (disk, *carved.values()):
        if p.ns <= 0:
            continue
        _scale(p, disk_keep)
        p.count = round(pages * p.ns / (disk_total * disk_keep))
        where = ("outside cause spans" if p is disk
                 else f"inside {p.source.split(':', 1)[1]} spans, taken out of their time: never booked as their cause")
        p.detail = (f"{what}: {p.ns / 1e6:.3f} ms of the {disk_total * disk_keep / 1e6:.3f} ms the thread waited for them "
                    f"{where} ({_switches(disk_blocks)}; {how}){less}{_split(p, shared, disk_keep)}")
        parts.append(p)
    for (cause, source, mod), ns in lowered.items():
        parts.append(Part(cause, source, "measured", ns=-ns * disk_keep, by_module={mod: -ns * disk_keep}))
    return parts


def _split(p: Part, shared: dict[int, float], keep: float) -> str:
    """Said of a part some of whose time came from stretches that held both disk reads and other
    blocks, split between them by count of blocks: that share is an estimate, and so is the part
    when it is more than a tenth of it."""
    ns = shared.get(id(p), 0.0) * keep
    if ns <= 0:
        return ""
    if ns > 0.1 * p.ns:
        p.evidence = "estimated"
    return (f"; {ns / 1e6:.3f} ms of it from stretches that held disk reads and other blocks too, split between them "
            "by count of blocks (one a major fault or a readahead window read)")


def _scale(p: Part, keep: float) -> None:
    p.ns *= keep
    p.by_module = {m: ns * keep for m, ns in p.by_module.items()}


def _by_source(ns_by_source: dict[str, float]) -> str:
    return ", ".join(f"{src} {ns / 1e6:.3f} ms" for src, ns in sorted(ns_by_source.items(), key=lambda kv: -kv[1]))


def _switches(n: int) -> str:
    return f"{n} voluntary context switch{'es' if n != 1 else ''}"

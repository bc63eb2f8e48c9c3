"""This machine's unit costs, measured once per process: timer overhead, first-touch cost per byte
at several sizes (small and huge pages), the cost of mapping file pages, thread start, module hook
cost and the CUPTI handler's cost per callback. A trace measures them after its passes (they would
warm what the first pass measures cold); attribution multiplies counts and bytes by them.

Robust to a busy machine: each cost is a low percentile of many short trials (a trial the machine
slowed is long, never short), and the spread is kept (median, p90); a calibration whose median is
past MAX_SPREAD x its low figure is listed in `unusable` with its figures and not used (attribution
then counts without time)."""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, fields, replace
from typing import IO, Any, Sequence

import numpy as np

from .. import _native
from ..attribution import Calibration
from ..attribution.faults import call_calibration
from ..errors import InputError
from ..instruments.modules import ModuleHooks
from ..stats import median, summarize
from ..timeline import COUNTER, FILE_COUNTER, RSS_COUNTER

# One trace or calibration at a time per process: they share the native recorder. Another thread,
# or a trace started from inside a trace (by the model, by a progress callable), is refused at
# once, never made to wait; trace() holds this lock and calibrates through measure().
busy = threading.Lock()


# median / the low figure used: a calibration spread wider than this is not used. The median, not
# the p90: a busy machine slows a few trials of any calibration (p90 of thread starts 12x the low
# figure with the median at 1.03x, seen here under load), which leaves the low figure sound; when
# half the trials are 3x past it, no figure is.
MAX_SPREAD = 3.0
MIB = 1 << 20
# First-touch sizes always calibrated (bytes, trials), and the large one calibrated only when a
# pass grew anonymous memory past LARGE_AFTER (a 256 MiB touch takes about 100 ms a trial).
SMALL_PAGE_SIZES = ((4 * MIB, 9), (32 * MIB, 5))
# Huge pages: one size. A large huge-page touch can stall in the kernel's compaction (THP defrag)
# for hundreds of ms when no huge page is free, which no model pays unless it asks for them.
HUGE_PAGE_SIZES = ((32 * MIB, 5),)
LARGE_SIZE = (256 * MIB, 2)
LARGE_AFTER = 64 * MIB
FILE_BYTES, FILE_TRIALS = 16 * MIB, 7
THREAD_TRIALS = 31


@dataclass(frozen=True)
class Spread:
    """A robust figure from repeated trials: `low` (p10, or the minimum under 10 trials) is the one
    used; median / low is the spread that decides whether it can be (p90 is kept for the report)."""

    low: float
    median: float
    p90: float
    n: int

    @property
    def ratio(self) -> float:
        return self.median / self.low if self.low > 0 else float("inf")

    @property
    def reliable(self) -> bool:
        return self.n > 0 and self.low > 0 and self.ratio <= MAX_SPREAD

    def describe(self, unit_ns: float = 1e3, unit: str = "us") -> str:
        return (f"low {self.low / unit_ns:.3g} {unit}, median {self.median / unit_ns:.3g} {unit}, "
                f"p90 {self.p90 / unit_ns:.3g} {unit} over {self.n} trials: median/low {self.ratio:.1f} > {MAX_SPREAD:g}")


def spread_of(samples: Sequence[float]) -> Spread:
    """The low figure (p10; the minimum under 10 samples), median and p90 of the positive `samples`."""
    s = summarize(x for x in samples if x > 0)
    return Spread(s.low, s.median, s.p90, s.n)


def thp_mode() -> str:
    """The kernel's transparent huge page mode: 'always', 'madvise', 'never' ('' if unknown)."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
    except OSError:
        return ""
    return text[text.find("[") + 1:text.find("]")] if "[" in text else ""


def huge_page_bytes() -> int:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 2 * MIB


def touch_point(nbytes: int, trials: int, huge: bool) -> dict[str, Any]:
    """First touch of `nbytes`, `trials` times: ns per byte (low, median, p90) and faults per trial."""
    got = _native.first_touch(nbytes, trials, huge)
    sp = spread_of([t / nbytes for t in got["cpu_ns"]])
    faults = sorted(got["faults"])
    return {"bytes": nbytes, "huge": huge, "ns_per_byte": sp.low, "median": sp.median, "p90": sp.p90,
            "trials": sp.n, "faults": faults[len(faults) // 2] if faults else 0, "reliable": sp.reliable}


def largest_loaded_library() -> str:
    """The largest shared library this process has mapped ('' if none is readable): its pages are
    in the page cache, and its file system and folio sizes are those lazy loading meets."""
    paths = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and ".so" in fields[5]:
                    paths.add(fields[5].strip())
    except OSError:
        return ""
    sizes = []
    for p in paths:
        try:
            sizes.append((os.path.getsize(p), p))
        except OSError:
            continue
    return max(sizes)[1] if sizes else ""


def file_page_cost(nbytes: int = FILE_BYTES, trials: int = FILE_TRIALS, path: str = "") -> dict[str, Any]:
    """Mapping a file whose pages are in the page cache and reading one byte a page (what a library's
    code costs when paged in on first use with no disk read): ns per byte (thread CPU time, the low
    figure of `trials`) and the faults per byte the kernel took (it maps several pages a fault, or a
    whole large folio). The file is `path`, else the largest library loaded here, else a temporary one."""
    ps = _native.page_size()
    path = path or largest_loaded_library()
    with contextlib.ExitStack() as stack:
        f: IO[bytes]
        if path:
            f = stack.enter_context(open(path, "rb"))
            nbytes = min(nbytes, os.path.getsize(path)) // ps * ps
        else:
            f = stack.enter_context(tempfile.TemporaryFile())
            f.write(b"\1" * nbytes)
            f.flush()
        per_byte, faults_per_byte = [], []
        for _ in range(trials if nbytes >= ps else 0):
            try:
                mapped = mmap.mmap(f.fileno(), nbytes, access=mmap.ACCESS_READ)
            except OSError:  # no address space left for it (an address-space limit): fewer trials, or none
                break
            with mapped as m:
                view = np.frombuffer(m, dtype=np.uint8)
                f0 = sum(_native.faults())
                c0 = time.thread_time_ns()
                view[::ps].sum()
                c1 = time.thread_time_ns()
                f1 = sum(_native.faults())
                del view
            per_byte.append((c1 - c0) / nbytes)
            faults_per_byte.append((f1 - f0) / nbytes)
    sp = spread_of(per_byte)
    return {"path": path, "bytes": nbytes, "ns_per_byte": sp.low, "median": sp.median, "p90": sp.p90,
            "trials": sp.n, "faults_per_byte": median(faults_per_byte) if faults_per_byte else 0.0,
            "reliable": sp.reliable}


@dataclass(frozen=True)
class MachineCosts:
    """What calibrate() measured; the report's protocol keeps it as to_dict() gives it."""

    timer_overhead_ns: float
    fault_cost_ns: float  # one first-touch page fault of a small page, in the faulting thread's CPU time
    fault_cost_per_page_ns: float
    thread_start_ns: float  # the low figure of many starts (0 when unusable)
    # What warmprof's module hooks add to one module call: the first pass and the seen re-run run
    # with them, the steady passes without (an estimated profiler_overhead).
    hook_cost_ns: float
    # What warmprof's CUPTI handler adds to one callback (a repeat launch through the real callback
    # entry, no driver needed; 0 when the backend is not compiled). CUPTI's own dispatch of the
    # callback comes on top and is not measured here: the estimate built on this is a floor.
    cupti_handler_ns: float = 0.0
    clock: dict[str, Any] = field(default_factory=dict)  # the native clock's calibration
    # First touch per size: touch_point()'s dicts (small pages, then huge pages where THP allows).
    first_touch: tuple[dict[str, Any], ...] = ()
    file_pages: dict[str, Any] = field(default_factory=dict)  # file_page_cost()
    thread_start: dict[str, float] = field(default_factory=dict)  # low, median, p90 (ns), n
    thp: str = ""  # the kernel's transparent huge page mode
    huge_page_bytes: int = 2 * MIB
    page_bytes: int = 4096
    unusable: dict[str, str] = field(default_factory=dict)  # calibration -> why it is not used

    def for_attribution(self) -> Calibration:
        def points(huge: bool) -> tuple[tuple[int, float], ...]:
            return tuple(sorted((p["bytes"], p["ns_per_byte"]) for p in self.first_touch
                                if p["huge"] == huge and p["reliable"]))
        return Calibration(fault_cost_ns=self.fault_cost_ns, thread_start_ns=self.thread_start_ns,
                           hook_cost_ns=self.hook_cost_ns, cupti_handler_ns=self.cupti_handler_ns,
                           touch_ns_per_byte=points(False), huge_touch_ns_per_byte=points(True),
                           huge_page_bytes=self.huge_page_bytes, page_bytes=self.page_bytes,
                           file_ns_per_byte=self.file_pages.get("ns_per_byte", 0.0) if "file_pages" not in self.unusable else 0.0,
                           file_faults_per_byte=self.file_pages.get("faults_per_byte", 0.0),
                           unusable=dict(self.unusable))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["first_touch"] = [dict(p) for p in self.first_touch]  # as JSON gives it back
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MachineCosts":
        """to_dict()'s figures back (another process's calibration: the control's warm trace is
        attributed at the trace's own). Keys this version does not know are left out."""
        names = {f.name for f in fields(cls)}
        kept = {k: v for k, v in d.items() if k in names}
        kept["first_touch"] = tuple(dict(p) for p in kept.get("first_touch", ()))
        return cls(**kept)


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


def measure(touched_bytes: int = 0) -> MachineCosts:
    """The process's calibration, measured on the first call. The caller holds `busy` (trace() does):
    measuring touches the recorder and hooks modules, which a running trace must not see.

    touched_bytes: the most anonymous memory a traced pass grew between two samples; past
    LARGE_AFTER the first-touch cost is calibrated at LARGE_SIZE too (once per process), so a large
    touch is priced at a large size's cost."""
    global _calibration
    if _calibration is None or (touched_bytes > LARGE_AFTER and not _has_large(_calibration)):
        if not busy.locked():
            raise RuntimeError("traces.calibrate.measure() needs the `busy` lock held: call calibrate()")
    if _calibration is None:
        pairs = []
        for _ in range(201):
            a = _native.now_ns()
            b = _native.now_ns()
            pairs.append(b - a)
        pairs.sort()
        thp = thp_mode()
        touch = [touch_point(n, k, False) for n, k in SMALL_PAGE_SIZES]
        if thp in ("always", "madvise"):
            touch += [touch_point(n, k, True) for n, k in HUGE_PAGE_SIZES]
        threads = spread_of(_native.thread_start_samples(THREAD_TRIALS))
        files = file_page_cost()
        unusable = _unusable(touch, threads, files)
        smallest = touch[0]
        ps = _native.page_size()
        _calibration = MachineCosts(
            timer_overhead_ns=float(pairs[len(pairs) // 2]),
            fault_cost_ns=smallest["ns_per_byte"] * ps if smallest["reliable"] else 0.0,
            fault_cost_per_page_ns=smallest["ns_per_byte"] * ps,
            thread_start_ns=threads.low if threads.reliable else 0.0,
            hook_cost_ns=float(ModuleHooks.calibrate_cost()),
            cupti_handler_ns=cupti_handler_cost(),
            clock=dict(_native.clock_info()),
            first_touch=tuple(touch),
            file_pages=files,
            thread_start={"low": threads.low, "median": threads.median, "p90": threads.p90, "n": threads.n},
            thp=thp,
            huge_page_bytes=huge_page_bytes(),
            page_bytes=ps,
            unusable=unusable,
        )
    if touched_bytes > LARGE_AFTER and not _has_large(_calibration):
        large = touch_point(*LARGE_SIZE, False)
        _calibration = replace(_calibration, first_touch=(*_calibration.first_touch, large))
    return _calibration


def _has_large(costs: MachineCosts) -> bool:
    return any(p["bytes"] >= LARGE_SIZE[0] and not p["huge"] for p in costs.first_touch)


def _unusable(touch: list[dict[str, Any]], threads: Spread, files: dict[str, Any]) -> dict[str, str]:
    """Which calibrations are too spread to use, each with its figures."""
    out = {}
    if not any(p["reliable"] for p in touch if not p["huge"]):
        p = touch[0]
        out["first_touch"] = Spread(p["ns_per_byte"] * 4096, p["median"] * 4096, p["p90"] * 4096,
                                    p["trials"]).describe(1e3, "us per 4 KiB")
    if not threads.reliable:
        out["thread_start"] = threads.describe()
    if not files["reliable"]:
        out["file_pages"] = Spread(files["ns_per_byte"] * MIB, files["median"] * MIB, files["p90"] * MIB,
                                   files["trials"]).describe(1e6, "ms per MiB")
    return out


def largest_anonymous_growth(tl: Any) -> int:
    """The most anonymous memory (RSS less file-backed bytes) grown between two consecutive memory
    samples of a recorded timeline: the size a first touch in it reached at most."""
    names = {n: i for i, n in enumerate(tl.names)}
    rss, files = names.get(RSS_COUNTER), names.get(FILE_COUNTER)
    if rss is None or files is None or len(tl) == 0:
        return 0
    rv = tl.value[(tl.kind == COUNTER) & (tl.name == rss)]
    fv = tl.value[(tl.kind == COUNTER) & (tl.name == files)]
    if rv.size < 2 or rv.size != fv.size:
        return 0
    return int(max(0, np.diff(rv - fv).max()))


def cupti_handler_cost(pairs: int = 20000, batches: int = 7) -> float:
    """ns warmprof's CUPTI handler adds to one callback: the median of `batches` native loops of
    `pairs` launch enter/exit callbacks (0.0 when the CUPTI backend is not compiled)."""
    if not _native.backends()["cupti"]["compiled"]:
        return 0.0
    runs = sorted(float(_native.cupti_handler_cost_ns(pairs)) for _ in range(batches))
    return runs[batches // 2]


def seed(costs: MachineCosts) -> None:
    """Take `costs` as this process's calibration (the control process: the trace's own figures,
    so both are attributed at one calibration and the control skips measuring)."""
    global _calibration
    _calibration = costs


def cached() -> MachineCosts | None:
    """The calibration if this process has one (set once a trace has run to its end here)."""
    return _calibration


CALL_FAULT_BYTES = 8 << 20  # one call's fault cost, measured once per process when first needed (about 10 ms)
_call_fault_ns: float | None = None


def call_costs() -> Calibration:
    """The unit costs warmup, assert_warm and watch price one call's faults with (attribution.faults
    .call_calibration): the first-touch cost of one fault from a trace's calibration when one ran in
    this process, else measured once here (CALL_FAULT_BYTES of fresh memory) and kept."""
    global _call_fault_ns
    if _call_fault_ns is None:
        cost = getattr(_calibration, "fault_cost_ns", 0.0) if _calibration is not None else 0.0
        _call_fault_ns = cost if cost > 0 else float(_native.calibrate_fault_cost(CALL_FAULT_BYTES, 3)["ns_per_fault"])
    return call_calibration(_call_fault_ns, _native.page_size())


__all__ = ["CALL_FAULT_BYTES", "MAX_SPREAD", "MachineCosts", "Spread", "busy", "cached", "calibrate", "call_costs", "cupti_handler_cost",
           "file_page_cost", "largest_anonymous_growth", "measure", "spread_of", "touch_point"]

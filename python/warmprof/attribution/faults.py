"""Page-fault pricing, the one place: a step's faults split by what grew (anonymous memory, file-backed
pages, huge pages) and priced at the first-touch cost calibrated for that size."""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

from .parts import Calibration


def per_byte_at(points: Sequence[tuple[int, float]], nbytes: float) -> float:
    """ns per byte of a first touch of `nbytes`, from calibrated (bytes, ns per byte) points sorted
    by size: interpolated on log(bytes) between points, the end point's outside them; 0 without points."""
    if not points:
        return 0.0
    if nbytes <= points[0][0]:
        return points[0][1]
    for (b0, c0), (b1, c1) in zip(points, points[1:]):
        if nbytes <= b1:
            w = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
            return c0 + w * (c1 - c0)
    return points[-1][1]


class FaultSplit(NamedTuple):
    """One fault step priced by kind: anonymous (small and huge pages) and file-backed."""

    anon_faults: float
    anon_ns: float
    file_faults: float
    file_ns: float
    huge_faults: float


def split_faults(faults: int, anon_bytes: int, file_bytes: int, cal: Calibration, major: int = 0) -> FaultSplit:
    """Prices one fault step from what it grew. File-backed bytes are priced at the page-cache
    mapping cost and take the faults that mapping takes per byte, and never fewer than the step's
    `major` faults (at most the step's all): a major fault reads a file page from storage, so it is
    never an anonymous first touch, and its wait for the read is disk_read's (off_cpu.py), not priced
    here. The other faults are anonymous: as many huge-page faults as the anonymous bytes need beyond
    one small page a fault, the rest small pages, each kind at the first-touch cost per byte for the
    bytes it touched. Faults with no growth (memory given back and touched again) are small pages too."""
    file_bytes = max(0, file_bytes)
    anon_bytes = max(0, anon_bytes)
    file_faults = min(float(faults), max(file_bytes * cal.file_faults_per_byte, float(max(0, major))))
    anon_faults = faults - file_faults
    ps, hs = cal.page_bytes, cal.huge_page_bytes
    huge = 0.0
    if cal.huge_touch_ns_per_byte and anon_bytes > anon_faults * ps and hs > ps:
        huge = min(anon_faults, (anon_bytes - anon_faults * ps) / (hs - ps))
    small_bytes = (anon_faults - huge) * ps
    huge_bytes = huge * hs
    if cal.touch_ns_per_byte:
        anon_ns = small_bytes * per_byte_at(cal.touch_ns_per_byte, small_bytes)
    else:
        anon_ns = (anon_faults - huge) * cal.fault_cost_ns
    anon_ns += huge_bytes * per_byte_at(cal.huge_touch_ns_per_byte, huge_bytes)
    return FaultSplit(anon_faults, anon_ns, file_faults, file_bytes * cal.file_ns_per_byte, huge)


# One call's page faults (a warm-up call, a watched call) are noise below these floors: Python's
# small-object arenas, a freed tensor's pages handed back and faulted in again, khugepaged collapsing
# pages (memory that appears without faults). A trace's pass needs no floor: it takes a steady pass's
# faults off instead.
NOISE_FAULTS = 8
NOISE_BYTES = 1 << 20  # anonymous (or file-backed) growth under 1 MiB in a call
FAULT_AROUND_PAGES = 16  # file faults map this many pages each (the kernel's default fault_around_bytes, 64 KiB)


def call_calibration(fault_cost_ns: float, page_bytes: int) -> Calibration:
    """The unit costs one call's faults are priced with: the first-touch cost of one small-page fault
    (a trace's calibration when one ran in the process, else measured once) and the kernel's
    fault-around for file pages; no per-size first-touch curve (a call's bytes are the process's)."""
    return Calibration(fault_cost_ns=fault_cost_ns, page_bytes=page_bytes,
                       file_faults_per_byte=1.0 / (page_bytes * FAULT_AROUND_PAGES))


def is_growth(faults: int, grown_bytes: int | None, page_bytes: int) -> bool:
    """One call's faults are growth, not churn: NOISE_BYTES grown, with at least NOISE_FAULTS faults.
    Where the bytes are not read (watch reads the thread's faults only), each fault stands for one
    small page."""
    grown = faults * page_bytes if grown_bytes is None else grown_bytes
    return faults >= NOISE_FAULTS and grown >= NOISE_BYTES

"""The Metal reference probe: what a compute pipeline costs on this machine's GPU, measured.

The native probe (`_native.metal_probe`, csrc/backends/metal.mm, Apple only) compiles a small MSL
row-softmax kernel at run time (`newLibraryWithSource:`, once), specialises it per length with a
function constant (`newFunctionWithName:constantValues:`) and builds a pipeline from each
specialisation (`newComputePipelineStateWithFunction:`), each timed with warmprof's clock; it
dispatches every length `repeats` times, one command buffer each, reading `GPUStartTime` and
`GPUEndTime`, and builds every length a second time after all of them ran. This module turns that
raw dict into rows (`parse`), runs it (`metal_reference`), and gives the MPS instruments the
per-shape compile band measured here (`compile_band_ms`).

A figure that cannot be a time (zero, negative, NaN, a GPU end before its start) is left out with a
note saying which and where; a result whose structure is broken (a missing field, a dispatch of a
length never built) is refused with a BackendError naming the field. Nothing here has run on Apple
hardware yet: the figures' meaning is from Apple's documentation, not from a measured Mac.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from ..errors import BackendError, InputError
from ..stats import median

DEFAULT_LENGTHS = (16, 32, 48, 64, 96, 128, 192, 256)
DEFAULT_REPEATS = 5
BAND_LENGTHS = (16, 64, 256)  # the compile band for a trace: three new shapes, two dispatches each
BAND_REPEATS = 2
MAX_LENGTH = 8192  # csrc/backends/metal.h kMaxLength
MAX_REPEATS = 1000  # kMaxRepeats
CACHED_RATIO = 0.25  # a re-build of a seen length under this share of its first build: a cache answered
ROW_SUM_TOLERANCE = 1e-3  # a softmax row sums to 1; further off, the kernel did not run as written
# GPUStartTime/GPUEndTime are host times in the mach time base; the host's commit..done window read in
# the same base should hold them. Slack for the two reads' own resolution and ordering.
WINDOW_SLACK_S = 50e-6
HOST_BELOW_GPU = 0.98  # host wall around commit + wait below this share of the GPU time: the clocks disagree


@dataclass(frozen=True)
class DispatchRow:
    """One command buffer: `index` 0 is the first dispatch after the length's pipeline was built."""

    length: int
    index: int
    gpu_ms: float | None  # GPUEndTime - GPUStartTime
    host_ms: float | None  # warmprof's clock around commit + waitUntilCompleted
    queue_ms: float | None  # GPUStartTime - the host's commit (same time base); None when not comparable
    host_over_gpu: float | None


@dataclass(frozen=True)
class ShapeRow:
    """One length: its first build (a new shape), its re-build (a seen one), its dispatches."""

    length: int
    specialise_ms: float | None  # newFunctionWithName:constantValues:error:, first build
    pipeline_ms: float | None  # newComputePipelineStateWithFunction:error:, first build
    compile_ms: float | None  # the two together: what a new shape costs
    rebuild_ms: float | None  # the same two for the second build of the length
    cached: bool | None  # the re-build took under CACHED_RATIO of the first
    first_gpu_ms: float | None  # dispatch 0
    first_host_ms: float | None
    steady_gpu_ms: float | None  # median of dispatches 1.. (None with one repeat)
    steady_host_ms: float | None
    first_over_steady: float | None  # first_host_ms / steady_host_ms
    host_over_gpu: float | None  # steady_host_ms / steady_gpu_ms: the dispatch's host overhead
    row_sum: float | None  # row 0 of the output (a softmax: about 1)


@dataclass(frozen=True)
class MetalReference:
    device: str
    kernel: str
    rows: int
    device_open_ms: float | None
    library_ms: float | None  # newLibraryWithSource:options:error:, once
    shapes: tuple[ShapeRow, ...]
    dispatches: tuple[DispatchRow, ...]
    notes: tuple[str, ...]
    error: str  # the native stage that failed ('' when all ran); the rows hold what ran before it

    @property
    def compile_band_ms(self) -> tuple[float, float] | None:
        """(lowest, highest) new-shape compile measured here, ms per pipeline; None when none was."""
        figures = [s.compile_ms for s in self.shapes if s.compile_ms is not None]
        return (min(figures), max(figures)) if figures else None

    def to_dict(self) -> dict[str, Any]:
        band = self.compile_band_ms
        return {"kind": "metal_reference", "device": self.device, "kernel": self.kernel, "rows": self.rows,
                "device_open_ms": self.device_open_ms, "library_ms": self.library_ms,
                "compile_band_ms": list(band) if band else None,
                "shapes": [asdict(s) for s in self.shapes], "dispatches": [asdict(d) for d in self.dispatches],
                "notes": list(self.notes), "error": self.error}

    def text(self) -> str:
        lines = [f"Metal reference probe on {self.device or '?'} (kernel {self.kernel or '?'}, "
                 f"{self.rows} rows per dispatch)",
                 f"library compile (newLibraryWithSource): {_ms(self.library_ms)}"]
        head = ("length", "specialise", "pipeline", "new shape", "re-build", "cached", "first host",
                "steady host", "steady GPU", "host/GPU", "first/steady")
        rows = [head] + [(str(s.length), _ms(s.specialise_ms), _ms(s.pipeline_ms), _ms(s.compile_ms),
                          _ms(s.rebuild_ms), {True: "yes", False: "no", None: "-"}[s.cached],
                          _ms(s.first_host_ms), _ms(s.steady_host_ms), _ms(s.steady_gpu_ms, 3),
                          _ratio(s.host_over_gpu), _ratio(s.first_over_steady)) for s in self.shapes]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
        band = self.compile_band_ms
        lines.append(f"pipeline compile per new shape: {band[0]:.2f}-{band[1]:.2f} ms" if band
                     else "pipeline compile per new shape: none measured")
        if self.error:
            lines.append(f"stopped early: {self.error}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _ms(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f} ms"


def _ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


# -- parsing ------------------------------------------------------------------------------------

def _bad(where: str, what: str) -> BackendError:
    return BackendError(f"Metal probe result: {where} {what}")


def _field(m: Any, key: str, where: str) -> Any:
    if not isinstance(m, Mapping):
        raise _bad(where, f"is {type(m).__name__}, not a dict")
    if key not in m:
        raise _bad(where, f"has no field {key!r}")
    return m[key]


def _number(m: Any, key: str, where: str) -> float:
    v = _field(m, key, where)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad(f"{where}.{key}", f"is {v!r}, not a number")
    return float(v)


def _int(m: Any, key: str, where: str) -> int:
    v = _field(m, key, where)
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(f"{where}.{key}", f"is {v!r}, not an int")
    return v


def _list(m: Any, key: str, where: str) -> list:
    v = _field(m, key, where)
    if not isinstance(v, (list, tuple)):
        raise _bad(f"{where}.{key}", f"is {type(v).__name__}, not a list")
    return list(v)


class _Notes:
    """Notes of one kind gathered with where they happened: one line per kind, not per dispatch."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._grouped: dict[str, list[str]] = {}

    def add(self, line: str) -> None:
        self.lines.append(line)

    def at(self, kind: str, where: str) -> None:
        self._grouped.setdefault(kind, []).append(where)

    def all(self) -> tuple[str, ...]:
        grouped = [f"{kind}: {len(where)} ({', '.join(where[:4])}{', ...' if len(where) > 4 else ''})"
                   for kind, where in self._grouped.items()]
        return tuple(self.lines + grouped)


def _time_ms(ns: float, what: str, where: str, notes: _Notes) -> float | None:
    """ns -> ms, or None with a note when it cannot be a measured time (zero, negative, NaN, inf)."""
    if math.isfinite(ns) and ns > 0:
        return ns / 1e6
    notes.at(f"{what} not a positive time, left out", f"{where}: {ns!r} ns")
    return None


def _builds(raw: Mapping, notes: _Notes) -> dict[tuple[int, bool], tuple[float | None, float | None]]:
    out: dict[tuple[int, bool], tuple[float | None, float | None]] = {}
    for i, b in enumerate(_list(raw, "builds", "result")):
        where = f"builds[{i}]"
        length = _int(b, "length", where)
        seen = _field(b, "seen", where)
        if not isinstance(seen, bool):
            raise _bad(f"{where}.seen", f"is {seen!r}, not a bool")
        if length < 1:
            raise _bad(f"{where}.length", f"is {length}, not a positive length")
        if (length, seen) in out:
            raise _bad(where, f"repeats the {'re-' if seen else 'first '}build of length {length}")
        if seen and (length, False) not in out:
            raise _bad(where, f"re-builds length {length}, which has no first build before it")
        label = f"length {length}{' re-build' if seen else ''}"
        out[(length, seen)] = (_time_ms(_number(b, "specialise_ns", where), "specialise time", label, notes),
                               _time_ms(_number(b, "pipeline_ns", where), "pipeline compile time", label, notes))
    return out


def _dispatch(d: Any, where: str, notes: _Notes) -> DispatchRow:
    length, index = _int(d, "length", where), _int(d, "index", where)
    label = f"length {length} #{index}"
    start, end = _number(d, "gpu_start_s", where), _number(d, "gpu_end_s", where)
    gpu_ms = None
    if not (math.isfinite(start) and math.isfinite(end)):
        notes.at("GPU timestamps not finite, GPU time left out", label)
    elif start == 0 and end == 0:
        notes.at("no GPU timestamps (GPUStartTime and GPUEndTime are 0), GPU time left out", label)
    elif end < start:
        notes.at("GPU end before GPU start, GPU time left out", label)
    elif end == start:
        notes.at("zero GPU time (GPUEndTime equals GPUStartTime), left out", label)
    else:
        gpu_ms = (end - start) * 1e3
    host_ms = _time_ms(_number(d, "host_ns", where), "host time", label, notes)
    queue_ms = None
    if gpu_ms is not None and "host_commit_s" in d and "host_done_s" in d:
        commit, done = _number(d, "host_commit_s", where), _number(d, "host_done_s", where)
        if commit > 0 and done >= commit:
            if start >= commit - WINDOW_SLACK_S and end <= done + WINDOW_SLACK_S:
                queue_ms = max(start - commit, 0.0) * 1e3
            else:
                notes.at("GPU window outside the host's commit..done (time bases differ?), queue time left out",
                         label)
    if gpu_ms is not None and host_ms is not None and host_ms < gpu_ms * HOST_BELOW_GPU:
        notes.at("host time shorter than GPU time (the clocks disagree)", label)
    ratio = host_ms / gpu_ms if gpu_ms and host_ms is not None else None
    return DispatchRow(length, index, gpu_ms, host_ms, queue_ms, ratio)


def _median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return median(got) if got else None


def _sum(*parts: float | None) -> float | None:
    return None if any(p is None for p in parts) else sum(parts)  # type: ignore[arg-type]


def _shape(length: int, builds: dict, dispatches: list[DispatchRow], row_sum: float | None) -> ShapeRow:
    specialise, pipeline = builds[(length, False)]
    compile_ms = _sum(specialise, pipeline)
    rebuild_ms = _sum(*builds[(length, True)]) if (length, True) in builds else None
    cached = None if compile_ms is None or rebuild_ms is None else rebuild_ms < CACHED_RATIO * compile_ms
    first = next((d for d in dispatches if d.index == 0), None)
    rest = [d for d in dispatches if d.index > 0]
    steady_gpu, steady_host = _median([d.gpu_ms for d in rest]), _median([d.host_ms for d in rest])
    first_host = first.host_ms if first else None
    return ShapeRow(
        length=length, specialise_ms=specialise, pipeline_ms=pipeline, compile_ms=compile_ms,
        rebuild_ms=rebuild_ms, cached=cached, first_gpu_ms=first.gpu_ms if first else None,
        first_host_ms=first_host, steady_gpu_ms=steady_gpu, steady_host_ms=steady_host,
        first_over_steady=first_host / steady_host if first_host is not None and steady_host else None,
        host_over_gpu=steady_host / steady_gpu if steady_host is not None and steady_gpu else None,
        row_sum=row_sum)


def _row_sums(raw: Mapping, notes: _Notes) -> dict[int, float]:
    sums = raw.get("row_sums", {})
    if not isinstance(sums, Mapping):
        raise _bad("result.row_sums", f"is {type(sums).__name__}, not a dict")
    out = {}
    for length, s in sums.items():
        if isinstance(s, bool) or not isinstance(s, (int, float)):
            raise _bad(f"result.row_sums[{length!r}]", f"is {s!r}, not a number")
        if not (math.isfinite(s) and abs(s - 1.0) <= ROW_SUM_TOLERANCE):
            notes.add(f"the kernel's output for length {length} sums to {s!r}, not 1: the dispatches may not "
                      "have run the kernel as written")
        out[int(length)] = float(s)
    return out


def parse(raw: Mapping[str, Any]) -> MetalReference:
    """The native probe's raw dict -> a MetalReference. BackendError when its structure is broken or
    the probe failed before measuring anything; figures that cannot be times become notes."""
    if not isinstance(raw, Mapping):
        raise _bad("result", f"is {type(raw).__name__}, not a dict")
    notes = _Notes()
    error = _field(raw, "error", "result")
    device = _field(raw, "device", "result")
    if not isinstance(error, str) or not isinstance(device, str):
        raise _bad("result", "has a non-text device or error")
    library_ns = _number(raw, "library_ns", "result")
    builds = _builds(raw, notes)
    if error and not builds and library_ns <= 0:
        raise BackendError(error)  # nothing measured: the failure is the result
    if error:
        notes.add(f"the probe stopped early: {error}")
    library_ms = _time_ms(library_ns, "library compile time", "newLibraryWithSource", notes)
    device_ns = _number(raw, "device_ns", "result") if "device_ns" in raw else 0.0
    rows = [_dispatch(d, f"dispatches[{i}]", notes) for i, d in enumerate(_list(raw, "dispatches", "result"))]
    seen_keys: set[tuple[int, int]] = set()
    for i, d in enumerate(rows):
        if (d.length, False) not in builds:
            raise _bad(f"dispatches[{i}]", f"dispatches length {d.length}, which was never built")
        if (d.length, d.index) in seen_keys:
            raise _bad(f"dispatches[{i}]", f"repeats dispatch #{d.index} of length {d.length}")
        seen_keys.add((d.length, d.index))
    sums = _row_sums(raw, notes)
    lengths = [length for (length, seen) in builds if not seen]
    shapes = []
    for length in lengths:
        mine = [d for d in rows if d.length == length]
        if not mine and not error:
            notes.add(f"length {length} was built but never dispatched")
        shapes.append(_shape(length, builds, mine, sums.get(length)))
    if shapes and all(s.compile_ms is None for s in shapes):
        notes.add("no new-shape compile time could be measured: no compile band")
    return MetalReference(
        device=device, kernel=str(raw.get("kernel", "")), rows=int(raw.get("rows", 0) or 0),
        device_open_ms=device_ns / 1e6 if math.isfinite(device_ns) and device_ns > 0 else None,
        library_ms=library_ms, shapes=tuple(shapes), dispatches=tuple(rows), notes=notes.all(), error=error)


# -- running ------------------------------------------------------------------------------------

def _check_arguments(lengths: Any, repeats: Any) -> list[int]:
    try:
        got = list(lengths)
    except TypeError:
        raise InputError(f"lengths must be a sequence of ints, not {type(lengths).__name__}") from None
    if not got:
        raise InputError("lengths must not be empty")
    for n in got:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_LENGTH:
            raise InputError(f"each length must be an int within 1..{MAX_LENGTH}, got {n!r}")
    if len(set(got)) != len(got):
        raise InputError(f"lengths must be distinct (each is a new shape), got {got}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
        raise InputError(f"repeats must be an int within 1..{MAX_REPEATS}, got {repeats!r}")
    return got


def _native_module(native: Any) -> Any:
    if native is not None:
        return native
    from .. import _native

    return _native


def metal_reference(lengths: Any = DEFAULT_LENGTHS, repeats: int = DEFAULT_REPEATS, *,
                    native: Any = None) -> MetalReference:
    """Runs the native Metal reference probe in this process and parses it. InputError for bad
    arguments; BackendError with the native reason where Metal is unavailable (not an Apple build,
    no Metal device) or the probe measured nothing. `native` replaces `warmprof._native` (tests)."""
    got = _check_arguments(lengths, repeats)
    native = _native_module(native)
    entry = native.backends()["metal"]
    if not entry["available"]:
        raise BackendError(entry["reason"] or "Metal: unavailable")
    try:
        raw = native.metal_probe(got, repeats)
    except ValueError as e:
        raise InputError(str(e)) from e
    except RuntimeError as e:
        raise BackendError(str(e)) from e
    return parse(raw)


def compile_band_ms(lengths: Any = BAND_LENGTHS, repeats: int = BAND_REPEATS, *,
                    native: Any = None) -> tuple[float, float] | None:
    """The Metal compile of a new shape measured here (lowest, highest ms per pipeline), for the MPS
    instruments; None where Metal is unavailable. BackendError when the probe ran and measured no
    compile (the MPS instrument turns that into a note)."""
    native = _native_module(native)
    if not native.backends()["metal"]["available"]:
        return None
    result = metal_reference(lengths, repeats, native=native)
    band = result.compile_band_ms
    if band is None:
        raise BackendError("Metal reference probe measured no pipeline compile"
                           + (f": {'; '.join(result.notes)}" if result.notes else ""))
    return band

"""oneDNN primitive creation (JIT code generation on the CPU), from oneDNN's own verbose lines.

VERBOSE_ON_CREATION makes oneDNN print one line per primitive creation with its creation time
(`create:cache_miss` = generated now, `create:cache_hit` = reused). The lines are printed by C
code to file descriptor 1, so while the instrument is on, fd 1 runs through a StdoutTap
(fd_capture.py): oneDNN's creation lines are taken by a native reader and parsed at each pass
end, everything else goes on to stdout untouched. end_pass marks the stream, so each line is
counted in the pass that printed it. With ONEDNN_VERBOSE_TIMESTAMP=1 (set before oneDNN first
reads its settings) each line carries its wall-clock start, which places the span exactly;
without it the creations are laid end to end at the close of the pass they came from (placement
unknown).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from ..timeline import JIT_COMPILE, now_ns, record_span_ns
from .base import Instrument
from .fd_capture import StdoutTap

_PREFIXES = ("onednn_verbose,", "dnnl_verbose,")


@dataclass
class CreateLine:
    wall_ms: float | None  # oneDNN's timestamp (ms since the epoch), if it printed one
    outcome: str  # "cache_miss" | "cache_hit"
    primitive: str
    impl: str
    ms: float


def parse_line(line: str) -> CreateLine | None:
    """One oneDNN verbose line -> a creation record, or None for any other line. Pure."""
    if not line.startswith(_PREFIXES):
        return None
    f = line.rstrip("\n").split(",")
    # onednn_verbose,v1,[timestamp,]primitive,create:cache_miss,cpu,convolution,impl,...,time
    i = 1
    if len(f) > i and f[i].startswith("v") and f[i][1:].isdigit():
        i += 1
    wall = None
    try:
        wall = float(f[i])
        i += 1
    except (ValueError, IndexError):
        pass
    if len(f) < i + 6 or f[i] != "primitive" or not f[i + 1].startswith("create:"):
        return None
    try:
        ms = float(f[-1])
    except ValueError:
        return None
    return CreateLine(wall, f[i + 1].split(":", 1)[1], f[i + 3], f[i + 4], ms)


class _Tally:
    """One pass's creations: counted whatever their number."""

    def __init__(self) -> None:
        self.miss = self.hit = 0
        self.miss_ms = 0.0
        self.timestamps = True

    def add(self, rec: CreateLine) -> None:
        if rec.outcome == "cache_miss":
            self.miss += 1
            self.miss_ms += rec.ms
        else:
            self.hit += 1
        self.timestamps = self.timestamps and rec.wall_ms is not None


class OneDNN(Instrument):
    name = "onednn"
    MAX_KEPT = 20_000  # cache misses kept to place as spans; past this they are only counted

    def __init__(self) -> None:
        super().__init__()
        self.by_pass: dict[str, dict[str, Any]] = {}
        self._tap: StdoutTap | None = None
        self._verbose: Any = None  # torch's mkldnn.verbose context, while entered
        self._env_set = False
        self._ends: list[tuple[str, int]] = []  # (pass, end ns), in end_pass order
        # Filled at each pass end from the tap's lines, keyed by the number of pass ends the
        # reader had seen: segment i is the pass self._ends[i] names (past the last end: "after").
        self._tallies: dict[int, _Tally] = {}
        self._kept: list[tuple[int, CreateLine]] = []
        self._dropped = 0
        try:
            import torch
        except ImportError:
            self.reason = "torch is not installed"
            return
        if not torch.backends.mkldnn.is_available():
            self.reason = "this torch build has no oneDNN (mkldnn)"
            return
        self._torch = torch

    def __enter__(self) -> "OneDNN":
        if self.reason:
            return self
        # Only creation lines are kept by the reader: the many `exec` lines are dropped there.
        tap = StdoutTap(tuple(p.encode() for p in _PREFIXES), self._on_line, keep=b",create:")
        why = tap.start()
        if why:  # the trace goes on without oneDNN's times
            self.reason = f"oneDNN times unavailable: {why}"
            return self
        self._tap = tap
        # Only effective if oneDNN has not read its settings yet (true in a fresh process);
        # removed again on exit.
        if "ONEDNN_VERBOSE_TIMESTAMP" not in os.environ:
            os.environ["ONEDNN_VERBOSE_TIMESTAMP"] = "1"
            self._env_set = True
        # Offset between oneDNN's wall clock (ms since the epoch) and the monotonic clock.
        self._wall_minus_mono_ns = time.time_ns() - now_ns()
        try:
            mkldnn = self._torch.backends.mkldnn
            self._verbose = mkldnn.verbose(mkldnn.VERBOSE_ON_CREATION)
            self._verbose.__enter__()
        except BaseException:
            self._verbose = None
            self._restore()
            raise
        return self

    # Passes whose lines need no boundary of their own: warmprof's instrumented steady passes (a warm
    # model creates nothing). A mark waits, asleep, until the reader has read to it (up to its pace,
    # 2 ms), and on a VM a pass right after its thread slept runs 0.1-0.2 ms slower (300 tiny modules,
    # AMD EPYC, 2 vCPU): that was booked as warmprof's own cost per pass. Their lines, if any, go to the
    # next boundary (or to "after").
    UNMARKED_PASSES = frozenset({"instrumented_steady"})

    def end_pass(self, name: str) -> None:
        if self._tap is None or name in self.UNMARKED_PASSES:
            return
        # mark() returns once every line printed in this pass has been read and handed over (by
        # segment: the i-th boundary is _ends[i]); a boundary that could not be marked is taken
        # back, so the lines go to the next one that is, not every later pass shifted by one.
        self._ends.append((name, now_ns()))
        if not self._tap.mark():
            self._ends.pop()

    def _on_line(self, line: bytes, segment: int) -> None:
        """One oneDNN creation line, printed after `segment` pass ends (called at a pass end)."""
        rec = parse_line(line.decode("utf-8", "replace"))
        if rec is None:
            return
        self._tallies.setdefault(segment, _Tally()).add(rec)
        if rec.outcome == "cache_miss":
            if len(self._kept) < self.MAX_KEPT:
                self._kept.append((segment, rec))
            else:
                self._dropped += 1

    def _restore(self) -> None:
        """Undo __enter__; never raises for the capture's sake."""
        try:
            if self._verbose is not None:
                self._verbose.__exit__(None, None, None)
        finally:
            self._verbose = None
            if self._tap is not None:
                self._tap.stop()
                self.notes.extend(self._tap.notes)
            if self._env_set:
                os.environ.pop("ONEDNN_VERBOSE_TIMESTAMP", None)
                self._env_set = False

    def __exit__(self, *exc: Any) -> None:
        if self._tap is None:
            return
        self._restore()
        self._tap = None
        self._ingest()

    def _pass_name(self, segment: int) -> str:
        return self._ends[segment][0] if segment < len(self._ends) else "after"

    def _ingest(self) -> None:
        tallies, kept, dropped = self._tallies, self._kept, self._dropped
        for seg, t in sorted(tallies.items()):
            self.by_pass[self._pass_name(seg)] = {
                "cache_miss": t.miss, "cache_hit": t.hit, "create_miss_ms": t.miss_ms, "timestamps": t.timestamps,
            }
        if dropped:
            self.notes.append(f"{dropped} oneDNN creations past the first {self.MAX_KEPT} were counted "
                              "but not placed on the timeline")
        for seg in sorted(tallies):
            end = self._ends[seg][1] if seg < len(self._ends) else None
            self._record([r for s, r in kept if s == seg], end)

    def _record(self, misses: list[CreateLine], pass_end_ns: int | None) -> None:
        untimed = [r for r in misses if r.wall_ms is None]
        for r in misses:
            if r.wall_ms is None:
                continue
            start = int(r.wall_ms * 1e6) - self._wall_minus_mono_ns
            record_span_ns(JIT_COMPILE, f"onednn:{r.primitive}", start, start + int(r.ms * 1e6))
        if untimed and pass_end_ns is not None:
            self.notes.append("oneDNN printed no timestamps: creations placed at the end of their pass")
            cursor = pass_end_ns - int(sum(r.ms for r in untimed) * 1e6)
            for r in untimed:
                dur = int(r.ms * 1e6)
                record_span_ns(JIT_COMPILE, f"onednn:{r.primitive}", cursor, cursor + dur)
                cursor += dur

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if not self.reason:
            out["passes"] = self.by_pass
        return out

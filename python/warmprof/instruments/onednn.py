"""oneDNN primitive creation (JIT code generation on the CPU), from oneDNN's own verbose lines.

VERBOSE_ON_CREATION makes oneDNN print one line per primitive creation with its creation time
(`create:cache_miss` = generated now, `create:cache_hit` = reused). The lines are printed by C
code to file descriptor 1, so while the instrument is on, fd 1 goes to a temporary file; on exit
fd 1 is restored, the oneDNN lines are parsed, and every other line (the user's own output) is
written back to stdout. With ONEDNN_VERBOSE_TIMESTAMP=1 (set before oneDNN first reads its
settings) each line carries its wall-clock start, which places the span exactly; without it the
creations are laid end to end at the close of the pass they came from (placement unknown).
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from ..timeline import JIT_COMPILE, now_ns, record_span_ns
from .base import Instrument

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


def _fflush_c_stdout() -> None:
    try:
        ctypes.CDLL(None).fflush(None)
    except Exception:
        pass


class OneDNN(Instrument):
    name = "onednn"

    def __init__(self) -> None:
        super().__init__()
        self.creates: list[CreateLine] = []
        self.by_pass: dict[str, dict[str, Any]] = {}
        self._saved_fd: int | None = None
        self._tmp = None
        self._verbose = None
        self._pass_marks: list[tuple[str, int, int]] = []  # (pass, file offset at end, end ns)
        try:
            import torch
        except ImportError:
            self.reason = "torch is not installed"
            return
        if not torch.backends.mkldnn.is_available():
            self.reason = "this torch build has no oneDNN (mkldnn)"
            return
        self._torch = torch
        self._env_set = False

    def __enter__(self) -> "OneDNN":
        if self.reason:
            return self
        sys.stdout.flush()
        _fflush_c_stdout()
        self._tmp = tempfile.TemporaryFile(mode="w+b")
        # Only effective if oneDNN has not read its settings yet (true in a fresh process);
        # removed again on exit.
        if "ONEDNN_VERBOSE_TIMESTAMP" not in os.environ:
            os.environ["ONEDNN_VERBOSE_TIMESTAMP"] = "1"
            self._env_set = True
        self._saved_fd = os.dup(1)
        # Offset between oneDNN's wall clock (ms since the epoch) and the monotonic clock.
        self._wall_minus_mono_ns = time.time_ns() - now_ns()
        try:
            os.dup2(self._tmp.fileno(), 1)
            self._verbose = self._torch.backends.mkldnn.verbose(self._torch.backends.mkldnn.VERBOSE_ON_CREATION)
            self._verbose.__enter__()
        except BaseException:
            self._restore()
            raise
        return self

    def end_pass(self, name: str) -> None:
        if self.reason or self._tmp is None:
            return
        _fflush_c_stdout()
        self._pass_marks.append((name, os.lseek(1, 0, os.SEEK_CUR), now_ns()))

    def _restore(self) -> bytes:
        data = b""
        if self._verbose is not None:
            try:
                self._verbose.__exit__(None, None, None)
            finally:
                self._verbose = None
        if self._saved_fd is not None:
            sys.stdout.flush()
            _fflush_c_stdout()
            os.dup2(self._saved_fd, 1)
            os.close(self._saved_fd)
            self._saved_fd = None
        if self._env_set:
            os.environ.pop("ONEDNN_VERBOSE_TIMESTAMP", None)
            self._env_set = False
        if self._tmp is not None:
            self._tmp.seek(0)
            data = self._tmp.read()
            self._tmp.close()
            self._tmp = None
        return data

    def __exit__(self, *exc: Any) -> None:
        if self.reason:
            return
        data = self._restore()
        self._ingest(data)

    def _ingest(self, data: bytes) -> None:
        passthrough: list[str] = []
        offset = 0
        marks = list(self._pass_marks)
        pending: dict[str, list[CreateLine]] = {}
        for raw in data.splitlines(keepends=True):
            line = raw.decode("utf-8", "replace")
            here = offset
            offset += len(raw)
            if not line.startswith(_PREFIXES):
                passthrough.append(line)
                continue
            rec = parse_line(line)
            if rec is None:
                continue
            pass_name = next((m[0] for m in marks if here < m[1]), "after")
            pending.setdefault(pass_name, []).append(rec)
            self.creates.append(rec)
        if passthrough:  # the user's own output printed during the passes
            sys.stdout.write("".join(passthrough))
            sys.stdout.flush()
        ends = {m[0]: m[2] for m in marks}
        for pass_name, recs in pending.items():
            misses = [r for r in recs if r.outcome == "cache_miss"]
            self.by_pass[pass_name] = {
                "cache_miss": len(misses),
                "cache_hit": len(recs) - len(misses),
                "create_miss_ms": sum(r.ms for r in misses),
                "timestamps": all(r.wall_ms is not None for r in recs),
            }
            self._record(misses, ends.get(pass_name))

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

"""The run report (`warmprof run -- CMD`): a command's process tree, each process's phases on one clock
with their causes, the first model calls against steady ones, and the path from the command's start to
ready and to the first response split by process, phase and cause (runs/assemble.py says how)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import causes as cause_table
from ..errors import ReportError
from . import schema as S
from .base import SCHEMA_VERSION, ReportBase, non_negative, register_kind

_PHASE = S.Obj({"name": S.STR, "start_ms": S.NUM, "ms": S.NUM, "causes": S.ListOf(S.ANY), "unattributed_ms": S.NUM},
               {"source": S.STR, "own": S.BOOL, "detail": S.STR, "logged_ms": S.NUM, "note": S.STR})
_PROCESS = S.Obj({"pid": S.NON_NEGATIVE_INT, "role": S.STR, "start_ms": S.NUM, "end_ms": S.NUM,
                  "phases": S.ListOf(_PHASE)},
                 {"ppid": S.NON_NEGATIVE_INT, "parent": S.Nullable(S.NON_NEGATIVE_INT), "title": S.STR,
                  "argv": S.ListOf(S.STR), "end": S.STR, "own_ms": S.NUM, "calls": S.ListOf(S.ANY),
                  "engine": S.MapOf(S.ANY), "samples_ms": S.NUM, "dropped": S.NON_NEGATIVE_INT,
                  "cupti": S.MapOf(S.ANY), "onednn": S.MapOf(S.ANY)})
_PATH = S.Obj({"ms": S.NUM, "by_phase": S.ListOf(S.ANY), "by_cause": S.MapOf(S.NUM), "own_ms": S.NUM,
               "unattributed_ms": S.NUM}, {"by_process": S.MapOf(S.NUM)})
_SPLIT = S.Obj({"pid": S.NON_NEGATIVE_INT, "label": S.STR, "first_ms": S.NUM, "steady_ms": S.NUM, "excess_ms": S.NUM,
                "by_part": S.ListOf(S.ANY), "by_cause": S.MapOf(S.NUM), "unattributed_ms": S.NUM},
               {"key": S.STR, "later": S.NON_NEGATIVE_INT, "explained_share": S.Nullable(S.NUM), "own_ms": S.NUM})
SCHEMA = S.Obj(
    {"command": S.ListOf(S.STR), "duration_ms": S.NUM, "processes": S.ListOf(_PROCESS)},
    {"returncode": S.Nullable(S.INT), "ended_by": S.STR, "unrecorded": S.ListOf(S.ANY),
     "ready": S.Nullable(S.MapOf(S.ANY)), "first_response": S.Nullable(S.MapOf(S.ANY)),
     "to_ready": S.Nullable(_PATH), "to_first_response": S.Nullable(_PATH), "engine": S.MapOf(S.ANY),
     "calibration": S.MapOf(S.ANY), "notes": S.ListOf(S.STR), "platform": S.PLATFORM, "warmprof_version": S.STR,
     "created": S.STR, "stopped": S.ListOf(S.STR), "first_request": S.Nullable(_SPLIT)},
)
PATH_SLACK_MS = 0.01


@register_kind
@dataclass
class RunReport(ReportBase):
    """A command's cold start across its process tree and its first model calls."""

    KIND = "run"
    SCHEMA = SCHEMA

    command: list[str]
    duration_ms: float
    processes: list[dict[str, Any]]
    returncode: int | None = None
    ended_by: str = "exit"
    unrecorded: list[dict[str, Any]] = field(default_factory=list)
    ready: dict[str, Any] | None = None  # {"ms", "by", "pid"}
    first_response: dict[str, Any] | None = None
    to_ready: dict[str, Any] | None = None  # the path: {"ms", "by_phase", "by_cause", "own_ms", "unattributed_ms"}
    to_first_response: dict[str, Any] | None = None
    # the first request's excess split across the tree: {"first_ms", "steady_ms", "excess_ms", "by_part",
    # "by_cause", "own_ms", "unattributed_ms", "explained_share"} (runs/requests.py says how)
    first_request: dict[str, Any] | None = None
    engine: dict[str, Any] = field(default_factory=dict)  # {"name", "checks": [...]}
    calibration: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    platform: dict[str, Any] = field(default_factory=dict)
    warmprof_version: str = ""
    created: str = ""
    schema_version: int = SCHEMA_VERSION

    def process(self, pid: int) -> dict[str, Any]:
        for p in self.processes:
            if p["pid"] == pid:
                return p
        raise KeyError(pid)

    def root(self) -> dict[str, Any] | None:
        pids = {p["pid"] for p in self.processes}
        return next((p for p in self.processes if p.get("parent") not in pids), None)

    def validate(self) -> None:
        non_negative(self.duration_ms, "duration_ms")
        for p in self.processes:
            at = None
            for ph in p["phases"]:
                non_negative(ph["ms"], f"pid {p['pid']}: phase {ph['name']!r} ms", slack=1e-6)
                if at is not None and abs(ph["start_ms"] - at) > 1e-3:
                    raise ReportError(f"pid {p['pid']}: phase {ph['name']!r} starts at {ph['start_ms']:.3f} ms, "
                                      f"not where the one before it ended ({at:.3f} ms)")
                at = ph["start_ms"] + ph["ms"]
                booked = sum(c["ms"] for c in ph["causes"])
                if booked > ph["ms"] + 0.01:
                    raise ReportError(f"pid {p['pid']}: phase {ph['name']!r}: causes {booked:.3f} ms past its "
                                      f"{ph['ms']:.3f} ms")
                for c in ph["causes"]:
                    if cause_table.get(c["cause"]) is None:
                        raise ReportError(f"pid {p['pid']}: phase {ph['name']!r}: unknown cause {c['cause']!r}")
        for name in ("to_ready", "to_first_response"):
            path = getattr(self, name)
            if path is None:
                continue
            total = sum(r["ms"] for r in path["by_phase"])
            if abs(total - path["ms"]) > PATH_SLACK_MS + 1e-6 * path["ms"]:
                raise ReportError(f"{name}: its phases add up to {total:.3f} ms, not its {path['ms']:.3f} ms")
            parts = sum(path["by_cause"].values()) + path["own_ms"] + path["unattributed_ms"]
            if abs(parts - path["ms"]) > PATH_SLACK_MS + 1e-6 * path["ms"]:
                raise ReportError(f"{name}: causes, own cost and unattributed add up to {parts:.3f} ms, not "
                                  f"{path['ms']:.3f} ms")

        split = self.first_request
        if split is not None:
            slack = PATH_SLACK_MS + 1e-6 * abs(split["excess_ms"])
            parts = sum(r["excess_ms"] for r in split["by_part"])
            if abs(parts - split["excess_ms"]) > slack:
                raise ReportError(f"first_request: its parts' excesses add up to {parts:.3f} ms, not its "
                                  f"{split['excess_ms']:.3f} ms")
            booked = sum(split["by_cause"].values()) + split.get("own_ms", 0.0) + split["unattributed_ms"]
            if abs(booked - split["excess_ms"]) > slack:
                raise ReportError(f"first_request: causes, warmprof's own and unattributed add up to {booked:.3f} ms, not its "
                                  f"{split['excess_ms']:.3f} ms excess")
            for r in split["by_part"]:
                for c in r.get("causes", []):
                    if cause_table.get(c["cause"]) is None:
                        raise ReportError(f"first_request: part {r.get('part')!r}: unknown cause {c['cause']!r}")


__all__ = ["RunReport"]

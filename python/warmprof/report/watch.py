"""The watch report: calls of a served model by key, the events kept, and their causes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import causes as cause_table
from ..causes import EVIDENCE
from ..errors import ReportError
from . import schema as S
from .base import SCHEMA_VERSION, ReportBase, non_negative, register_kind

_KEY = S.Obj({"key": S.STR, "calls": S.NON_NEGATIVE_INT, "first_ms": S.NUM, "p50_ms": S.NUM, "p90_ms": S.NUM,
              "p99_ms": S.NUM, "max_ms": S.NUM}, {"mean_ms": S.NUM, "events": S.NON_NEGATIVE_INT})
_FINITE_PAIR = S.ListOf(S.NUM)
_CAUSE = S.Obj({"cause": S.STR, "ms": S.NUM, "evidence": S.STR, "source": S.STR},
               {"count": S.NON_NEGATIVE_INT, "detail": S.STR})
_EVENT = S.Obj({"index": S.NON_NEGATIVE_INT, "key": S.STR, "t_s": S.NUM, "ms": S.NUM, "gap_s": S.NUM, "first": S.BOOL,
                "outlier": S.BOOL, "causes": S.ListOf(_CAUSE)},
               {"after_idle": S.BOOL, "median_ms": S.Nullable(S.NUM), "calls_before": S.NON_NEGATIVE_INT,
                "excess_ms": S.Nullable(S.NUM), "unattributed_ms": S.Nullable(S.NUM),
                "recompile_reasons": S.ListOf(S.STR), "clock_mhz": S.Nullable(S.ListOf(S.NUM)),
                "counters_before_us": S.NUM})
SCHEMA = S.Obj(
    {"model": S.STR, "calls": S.NON_NEGATIVE_INT, "keys": S.ListOf(_KEY), "events": S.ListOf(_EVENT)},
    {"errors": S.NON_NEGATIVE_INT, "overflow_calls": S.NON_NEGATIVE_INT,
     "events_kept": S.NON_NEGATIVE_INT, "events_dropped": S.NON_NEGATIVE_INT, "by_cause": S.MapOf(S.ANY),
     "rule": S.MapOf(S.ANY), "duration_s": S.NUM, "device": S.STR, "platform": S.PLATFORM, "notes": S.ListOf(S.STR),
     "warmprof_version": S.STR, "created": S.STR},
)


@register_kind
@dataclass
class WatchReport(ReportBase):
    """What watch saw: per key, its calls and latency quantiles (from a bounded sketch, within 12%);
    the events kept (first calls at a key, outliers, calls after an idle gap, calls that compiled),
    each with its causes; and the causes over all events."""

    KIND = "watch"
    SCHEMA = SCHEMA

    model: str
    calls: int
    keys: list[dict[str, Any]]
    events: list[dict[str, Any]]
    errors: int = 0
    overflow_calls: int = 0  # calls at keys past max_keys: counted, not kept (a compile there is still an event)
    events_kept: int = 0  # every event kept so far; `events` holds the last max_events of them
    events_dropped: int = 0
    by_cause: dict[str, dict[str, float]] = field(default_factory=dict)  # cause -> {"events", "ms"}
    rule: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    device: str = ""
    platform: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warmprof_version: str = ""
    created: str = ""
    schema_version: int = SCHEMA_VERSION

    def outliers(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["outlier"]]

    def validate(self) -> None:
        for k in self.keys:
            if not k["p50_ms"] <= k["p90_ms"] <= k["p99_ms"]:
                raise ReportError(f"keys: {k['key']!r}: quantiles out of order ({k['p50_ms']}, {k['p90_ms']}, "
                                  f"{k['p99_ms']})")
            non_negative(k["first_ms"], f"keys: {k['key']!r} first_ms")
        for i, e in enumerate(self.events):
            non_negative(e["ms"], f"events[{i}].ms")
            for c in e["causes"]:
                if cause_table.get(c["cause"]) is None or c["cause"] == "unattributed":
                    raise ReportError(f"events[{i}]: unknown cause {c['cause']!r}")
                if c["evidence"] not in EVIDENCE:
                    raise ReportError(f"events[{i}]: {c['cause']}: unknown evidence {c['evidence']!r}")
                non_negative(c["ms"], f"events[{i}]: {c['cause']} ms")
        if sum(k["calls"] for k in self.keys) + self.overflow_calls > self.calls:
            raise ReportError(f"keys hold more calls than the report's {self.calls}")

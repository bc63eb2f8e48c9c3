"""A Watcher's figures -> a WatchReport (data only)."""

from __future__ import annotations

import datetime
from typing import Any

from ... import __version__
from . import sources
from ...report.watch import WatchReport
from ...system.platform import fingerprint


def build_report(w: Any) -> WatchReport:
    stats = w.stats()
    events = w.events()
    by_cause: dict[str, dict[str, float]] = {}
    for e in events:
        for c in e["causes"]:
            row = by_cause.setdefault(c["cause"], {"events": 0, "ms": 0.0})
            row["events"] += 1
            row["ms"] += c["ms"]
        if e.get("unattributed_ms") is not None and e["unattributed_ms"] > 0:
            row = by_cause.setdefault("unattributed", {"events": 0, "ms": 0.0})
            row["events"] += 1
            row["ms"] += e["unattributed_ms"]
    notes = []
    if stats["overflow_calls"]:
        notes.append(f"{stats['overflow_calls']} calls came at keys past the first {w.rule['max_keys']}: counted, "
                     "not kept (raise max_keys, or give a key function that buckets them)")
    if stats["events_dropped"]:
        notes.append(f"{stats['events_dropped']} older events were dropped (the last {w.rule['max_events']} are kept)")
    if not w._tapped and not w.closed:
        notes.append("dynamo's compile callbacks are not available here: compiles are not seen")
    return WatchReport(
        model=str(w.label), calls=stats["calls"], keys=stats["keys"], events=events, errors=stats["errors"],
        overflow_calls=stats["overflow_calls"], events_kept=stats["events"],
        events_dropped=stats["events_dropped"], by_cause=by_cause, rule=dict(w.rule),
        duration_s=(sources.clock_ns() - w._started_ns) / 1e9, platform=fingerprint(), notes=notes,
        warmprof_version=__version__,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )

"""The Chrome-trace (Perfetto) renderer for a run report: one track per process of the tree."""

from __future__ import annotations

import json
from typing import Any

from .base import Renderer
from .registry import register


@register
class RunChromeRenderer(Renderer):
    """One track (a Chrome-trace process) per process of the tree: its phases, and its first calls."""

    format = "chrome"
    kinds = ("run",)
    extension = ".json"
    inferred = False
    about = "trace-event JSON for Perfetto or chrome://tracing"

    def render(self, report: Any) -> str:
        events: list[dict[str, Any]] = []
        for p in report.processes:
            pid = p["pid"]
            events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{p['role']} ({pid})"}})
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 0, "args": {"name": "phases"}})
            for ph in p["phases"]:
                events.append({"ph": "X", "name": ph["name"], "cat": ph.get("source") or "phase", "pid": pid, "tid": 0,
                               "ts": ph["start_ms"] * 1000.0, "dur": ph["ms"] * 1000.0,
                               "args": {"causes": {c["cause"]: round(c["ms"], 3) for c in ph["causes"]},
                                        "unattributed_ms": round(ph["unattributed_ms"], 3)}})
            for c in p.get("calls", []):
                events.append({"ph": "X", "name": f"first {c['label']} [{c['key']}]", "cat": "call", "pid": pid, "tid": 1,
                               "ts": c["start_ms"] * 1000.0, "dur": c["first_ms"] * 1000.0,
                               "args": {"steady_ms": c.get("steady_ms"), "excess_ms": c.get("excess_ms")}})
        for mark, name in ((report.ready, "ready"), (report.first_response, "first response")):
            if mark is not None:
                events.append({"ph": "i", "s": "g", "name": name, "pid": mark["pid"], "tid": 0, "ts": mark["ms"] * 1000.0})
        return json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}, separators=(",", ":"), allow_nan=False)

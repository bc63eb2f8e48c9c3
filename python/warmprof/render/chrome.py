"""A trace report as Chrome trace-event JSON, for Perfetto (ui.perfetto.dev) or chrome://tracing.

One process track per pass: the first pass, the seen-shape re-run and one steady pass, each
starting at 0 so they line up under each other. Spans become complete ("X") events on their
thread, categorized by cause (or "module" / "pass" for structure); counters become "C" events.
Times are microseconds. Events on one thread are nested strictly (a child that overruns its
parent by rounding is clipped to it), since viewers reject overlapping slices.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from typing import Any

from .. import causes
from ..errors import ReportError
from .base import Renderer
from .format import device
from .registry import register

PASSES = (("first", 1, "first pass"), ("seen_rerun", 2, "seen-shape re-run"), ("steady", 3, "steady pass"))
_PASS_MS = {"first": "first_pass_ms", "seen_rerun": "seen_rerun_ms", "steady": "steady_median_ms"}


@register
class ChromeTraceRenderer(Renderer):
    format = "chrome"
    kinds = ("trace",)
    extension = ".json"
    inferred = False  # a .json file is the report's own JSON unless --format chrome says otherwise
    about = "trace-event JSON for Perfetto or chrome://tracing"

    def render(self, report: Any) -> str:
        return json.dumps(self.events(report), indent=None, separators=(",", ":"), allow_nan=False)

    def events(self, report: Any) -> dict[str, Any]:
        if getattr(report, "KIND", "") != "trace":
            kind = getattr(report, "KIND", type(report).__name__)
            raise ReportError(f"a Chrome trace needs a trace report (with spans), not a {kind!r} report")
        events: list[dict[str, Any]] = _setup_track(getattr(report, "setup", None))
        for pass_, pid, title in PASSES:
            spans = [s for s in report.spans if s.pass_ == pass_]
            if pass_ == "steady":
                spans = _one_pass(spans)
            ms = float(getattr(report, _PASS_MS[pass_]))
            events += _metadata(pid, title, ms, spans)
            events += _slices(pid, _whole_pass_name(report, pass_, title), spans, ms)
            events += _counters(pid, [c for c in report.counter_samples if c.pass_ == pass_])
        return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": _other_data(report)}


SETUP_PID = 0  # the set-up's track, above the passes


def _setup_track(setup: Any) -> list[dict[str, Any]]:
    """The set-up before the first pass (the cold start's import torch, the factory; to(device), the
    inputs) as a track of its own: one slice per step, laid end to end in the order they ran (each
    step's time is recorded, the moments between them are not), each with the causes booked in it as
    its args (where in the step they fell is not recorded, so they are not drawn as slices)."""
    if setup is None or not setup.steps:
        return []
    out = [{"ph": "M", "name": "process_name", "pid": SETUP_PID, "tid": 0,
            "args": {"name": f"set-up before the first pass ({setup.ms:.2f} ms; steps end to end)"}},
           {"ph": "M", "name": "process_sort_index", "pid": SETUP_PID, "tid": 0, "args": {"sort_index": SETUP_PID}},
           {"ph": "M", "name": "thread_name", "pid": SETUP_PID, "tid": 0, "args": {"name": "main thread"}}]
    at = 0
    for step in setup.steps:
        dur = round(float(step["ms"]) * 1e6)
        booked = {f"{c.cause}/{c.source}": round(c.ms, 6) for c in setup.causes if c.module == step["name"]}
        args: dict[str, Any] = {"ms": round(float(step["ms"]), 6), "causes_ms": booked}
        out.append(_x(SETUP_PID, 0, str(step["name"]), "setup", at, dur, args))
        at += dur
    return out


def _metadata(pid: int, title: str, ms: float, spans: list[Any]) -> list[dict[str, Any]]:
    out = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"{title} ({ms:.2f} ms)"}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
    ]
    for tid in sorted({s.thread for s in spans} | {0}):
        name = "main thread" if tid == 0 else f"thread {tid}"
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
    return out


def _whole_pass_name(report: Any, pass_: str, title: str) -> str:
    if pass_ == "steady" and report.steady_passes:
        return f"steady pass (median of {report.steady_passes})"
    return title


def _slices(pid: int, whole_pass: str, spans: list[Any], pass_ms: float) -> list[dict[str, Any]]:
    if not spans:  # steady passes run uninstrumented: show the pass's length alone
        return [_x(pid, 0, whole_pass, "pass", 0, round(pass_ms * 1e6), {"ms": pass_ms})] if pass_ms > 0 else []
    by_tid: dict[int, list[Any]] = defaultdict(list)
    for s in spans:
        by_tid[s.thread].append(s)
    out = []
    for tid, group in sorted(by_tid.items()):
        # ns integers: nesting is decided exactly, then printed as microseconds with 3 decimals.
        items = sorted(((round(s.start_ms * 1e6), round(s.dur_ms * 1e6), s.depth, s) for s in group),
                       key=lambda t: (t[0], -t[1], t[2]))
        ends: list[int] = []
        for start, dur, _, s in items:
            while ends and ends[-1] <= start:
                ends.pop()
            end = min(start + dur, ends[-1]) if ends else start + dur
            ends.append(end)
            out.append(_x(pid, tid, s.name, _category(s), start, end - start, _args(s)))
    return out


def _x(pid: int, tid: int, name: str, cat: str, start_ns: int, dur_ns: int, args: dict[str, Any]) -> dict[str, Any]:
    event = {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid,
             "ts": start_ns / 1000, "dur": max(dur_ns, 0) / 1000, "args": args}
    cause = causes.get(cat)
    if cause is not None:  # reserved colour names of the trace viewer (Perfetto picks its own)
        event["cname"] = cause.chrome_colour
    return event


def _category(span: Any) -> str:
    if span.cause:
        return span.cause
    return "module" if span.module else "pass"


def _args(span: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"ms": round(span.dur_ms, 6)}
    for key in ("cause", "source", "module"):
        if getattr(span, key):
            args[key] = getattr(span, key)
    if span.value:
        args["value"] = span.value
    return args


def _counters(pid: int, samples: list[Any]) -> list[dict[str, Any]]:
    """One counter track per name; cumulative fault counts start at 0 at the pass's start."""
    out = []
    first: dict[str, float] = {}
    for c in sorted(samples, key=lambda c: c.t_ms):
        base = first.setdefault(c.name, c.value) if "fault" in c.name else 0.0
        series = c.name.split(":", 1)[-1]
        out.append({"ph": "C", "name": c.name, "pid": pid, "tid": 0, "ts": round(c.t_ms * 1e6) / 1000,
                    "args": {series: c.value - base}})
    return out


def _one_pass(spans: list[Any]) -> list[Any]:
    """The steady pass closest to the median length, with what it contains (when several were kept)."""
    tops = [s for s in spans if s.depth == 0]
    if len(tops) <= 1:
        return spans
    tops.sort(key=lambda s: s.dur_ms)
    top = tops[len(tops) // 2]
    end = top.start_ms + top.dur_ms
    inside = [s for s in spans if s is top or (s.depth > 0 and top.start_ms <= s.start_ms < end)]
    return [_shifted(s, top.start_ms) for s in inside]


def _shifted(span: Any, offset_ms: float) -> Any:
    return dataclasses.replace(span, start_ms=span.start_ms - offset_ms)


def _other_data(report: Any) -> dict[str, Any]:
    return {
        "warmprof_version": report.warmprof_version,
        "model": report.model,
        "shape": "x".join(str(d) for d in report.shape or []),
        "device": f"{report.device} ({device(report)})",
        "first_pass_ms": report.first_pass_ms,
        "steady_median_ms": report.steady_median_ms,
        "excess_ms": report.excess_ms,
        "causes_ms": {k: round(v, 3) for k, v in report.by_cause().items()},
    }

"""Text renderer for a watch report: the keys' latencies, the events with their causes, the totals."""

from __future__ import annotations

from typing import Any

from .base import Renderer
from .format import middle, table
from .format import ms as _ms
from .registry import register
from .safe import one_line

SHOWN_KEYS, SHOWN_EVENTS = 12, 20


def event_line(e: dict[str, Any]) -> str:
    """One event as a line: when, which key, how long against its median, and its causes (the line
    `warmprof watch --demo` prints as each event comes)."""
    why = "first at its key" if e["first"] else "outlier" if e["outlier"] else "after idle" if e.get("after_idle") \
        else "compiled"
    against = f" vs median {_ms(e['median_ms'])}" if e.get("median_ms") else ""
    causes = ", ".join(f"{c['cause']} {_ms(c['ms'])} ({c['evidence']})" for c in e["causes"]) or "no cause seen"
    left = e.get("unattributed_ms")
    if left is not None and left > 0:
        causes += f", unattributed {_ms(left)}"
    idle = f", {e['gap_s']:.1f} s idle before" if e.get("after_idle") else ""
    reason = f"; recompiled: {one_line(e['recompile_reasons'][0])}" if e.get("recompile_reasons") else ""
    return (f"#{e['index']:<4} t={e['t_s']:8.3f} s  {middle(one_line(e['key']), 34):<34} {_ms(e['ms']):>10}{against}"
            f"  [{why}{idle}] {causes}{reason}")


@register
class WatchTextRenderer(Renderer):
    format = "text"
    kinds = ("watch",)
    extension = ".txt"

    def render(self, report: Any) -> str:
        r = report
        out = [f"warmprof watch: {one_line(r.model)}: {r.calls} calls at {len(r.keys)} keys over {r.duration_s:.1f} s, "
               f"{r.events_kept} kept as events ({len(r.outliers())} outliers among the last {len(r.events)})"]
        rule = r.rule
        if rule:
            out.append(f"  an outlier: over {rule.get('factor')}x its key's median and {rule.get('floor_ms')} ms more, "
                       f"once the key has {rule.get('min_calls')} calls; idle gap {rule.get('idle_s')} s")
        keys = sorted(r.keys, key=lambda k: -k["calls"])[:SHOWN_KEYS]
        if keys:
            out += ["", f"  keys (the {len(keys)} with most calls; quantiles from a sketch, within 12%):"]
            rows = [[middle(one_line(k["key"]), 40), str(k["calls"]), _ms(k["first_ms"]), _ms(k["p50_ms"]),
                     _ms(k["p99_ms"]), _ms(k["max_ms"]), str(k.get("events", 0))] for k in keys]
            out += ["  " + ln for ln in table(["key", "calls", "first", "p50", "p99", "max", "events"], rows,
                                              right={1, 2, 3, 4, 5, 6}, rule=True)]
        shown = [e for e in r.events if e["outlier"] or e["causes"] or e.get("after_idle")][-SHOWN_EVENTS:]
        if shown:
            out += ["", f"  events with a cause or an outlier (the last {len(shown)}):"]
            out += [f"    {event_line(e)}" for e in shown]
        if r.by_cause:
            out += ["", "  causes over the events kept:"]
            rows = [[cause, str(int(v["events"])), _ms(v["ms"])]
                    for cause, v in sorted(r.by_cause.items(), key=lambda kv: -kv[1]["ms"])]
            out += ["  " + ln for ln in table(["cause", "events", "total"], rows, right={1, 2}, rule=True)]
        if r.errors:
            out.append(f"  {r.errors} calls raised (not timed as events)")
        if r.notes:
            out += ["", "  notes:"] + [f"    - {one_line(n)}" for n in r.notes]
        return "\n".join(out) + "\n"

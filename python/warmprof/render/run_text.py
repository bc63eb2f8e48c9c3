"""The text renderer for a run report: the headline (start to ready, to the first response,
each split by process and cause), the tree with a waterfall of each process's phases, the first calls."""

from __future__ import annotations

from typing import Any

from ..causes import Name
from .base import Renderer
from .format import ms as _ms
from .registry import register
from .safe import one_line

BAR = 40  # waterfall width in characters
SHOWN_PHASES = 14
SHOWN_CAUSES = 3
OWN_LINE = "warmprof's own"


def _bar(start: float, ms: float, total: float) -> str:
    if total <= 0:
        return ""
    a = int(round(start / total * BAR))
    b = max(a + 1, int(round((start + ms) / total * BAR)))
    a, b = min(a, BAR - 1), min(b, BAR)
    return "." * a + "#" * (b - a) + "." * (BAR - b)


def _causes(ph: dict[str, Any]) -> str:
    cs = sorted(ph["causes"], key=lambda c: -c["ms"])[:SHOWN_CAUSES]
    out = [f"{c['cause']} {_ms(c['ms'])} ({c['evidence']})" for c in cs if c["ms"] >= 0.05]
    if ph.get("unattributed_ms", 0) > 0.05 and ph["causes"]:
        out.append(f"unattributed {_ms(ph['unattributed_ms'])}")
    return ", ".join(out)


def _path_lines(r: Any, title: str, path: dict[str, Any] | None, mark: dict[str, Any] | None) -> list[str]:
    if path is None or mark is None:
        return []
    roles = {p["pid"]: p["role"] for p in r.processes}
    by_proc = sorted(path.get("by_process", {}).items(), key=lambda kv: -kv[1])
    out = [f"{title}: {_ms(path['ms'])}  ({one_line(mark.get('text') or mark.get('by', ''))})"]
    if by_proc:
        out.append("  by process: " + ", ".join(f"{one_line(roles.get(int(pid), pid))} {_ms(ms)}" for pid, ms in by_proc))
    causes = [f"{c} {_ms(ms)}" for c, ms in path["by_cause"].items() if ms >= 0.5]
    if path["own_ms"] >= 0.05:
        causes.append(f"{OWN_LINE} {_ms(path['own_ms'])}")
    causes.append(f"unattributed {_ms(path['unattributed_ms'])}")
    out.append("  by cause:   " + ", ".join(causes))
    top = [row for row in path["by_phase"] if row["ms"] >= 0.01 * path["ms"]][:6]
    if top:
        out.append("  longest phases on the path: " + ", ".join(
            f"{one_line(roles.get(row['pid'], row['pid']))}: {one_line(row['phase'])} {_ms(row['ms'])}" for row in top))
    return out


def _first_request_lines(r: Any) -> list[str]:
    """The first request's excess split across the tree, part by part (runs/requests.py)."""
    q = r.first_request
    roles = {p["pid"]: p["role"] for p in r.processes}
    share = q.get("explained_share")
    head = (f"first {one_line(q['label'])} across the tree: {_ms(q['first_ms'])} vs steady {_ms(q['steady_ms'])} "
            f"({q.get('later', 0)} later): excess {_ms(q['excess_ms'])}")
    own = q.get("own_ms", 0.0)
    if own > 0:
        head += f" ({OWN_LINE} {_ms(own)} of it)"
    if share is not None:
        head += f", {share:.0%} of {'the rest' if own > 0 else 'it'} to causes"
    out = [head]
    by = ", ".join(f"{c} {_ms(ms)}" for c, ms in q["by_cause"].items())
    out.append(f"  by cause:   {by + ', ' if by else ''}" + (f"{OWN_LINE} {_ms(own)}, " if own > 0 else "")
               + f"unattributed {_ms(q['unattributed_ms'])}")
    for row in q["by_part"][:6]:
        said = ", ".join(f"{OWN_LINE if c['cause'] == Name.PROFILER_OVERHEAD else c['cause']} {_ms(c['ms'])} ({c['evidence']}"
                         + (f": {', '.join(one_line(x) for x in c['sources'])}" if c.get("sources") else "") + ")"
                         for c in [c for c in row.get("causes", []) if c["ms"] >= 5e-5][:3])  # none shown as 0.0 µs
        out.append(f"  {one_line(roles.get(row['pid'], str(row['pid'])))}: {one_line(row['part'])} "
                   f"{_ms(row['first_ms'])} vs {_ms(row['steady_ms'])}: {row['excess_ms']:+.2f} ms"
                   + (f" = {said}" if said else "") + f", unattributed {_ms(row['unattributed_ms'])}"
                   + (f" ({row['later_ms']:+.2f} ms of the excess in its later calls, not the first at their key)"
                      if abs(row.get("later_ms", 0.0)) >= 0.05 else ""))
    if len(q["by_part"]) > 6:
        rest = q["by_part"][6:]
        out.append(f"  ({len(rest)} more parts, {sum(x['excess_ms'] for x in rest):+.2f} ms in all)")
    return out


@register
class RunTextRenderer(Renderer):
    format = "text"
    kinds = ("run",)
    extension = ".txt"

    def render(self, report: Any) -> str:
        r = report
        how = {"exit": f"exited {r.returncode}", "interrupt": "interrupted (Ctrl-C)", "calls": "ended after --calls",
               "terminated": "terminated", "timeout": "ended at --timeout"}.get(r.ended_by, r.ended_by)
        out = [f"warmprof run: {one_line(' '.join(r.command))}",
               f"  {len(r.processes)} Python process(es) recorded over {_ms(r.duration_ms)}; the command {how}"
               + (f"; engine: {r.engine['name']}" if r.engine.get("name") else "")]
        out += ["", *_path_lines(r, "start to ready", r.to_ready, r.ready)]
        first = _path_lines(r, "start to first response", r.to_first_response, r.first_response)
        if first:
            out += ["", *first]
        if r.ready is None:
            out.append("  (no ready point: no engine said it, no --ready-after mark, no watched call)")
        if r.first_request:
            out += ["", *_first_request_lines(r)]
        total = r.duration_ms
        on_path = {int(pid): ms for path in (r.to_ready, r.to_first_response) if path
                   for pid, ms in path.get("by_process", {}).items()}
        for p in sorted(r.processes, key=lambda p: p["start_ms"]):
            depth = _depth(r, p)
            pad = "  " * depth
            if _helper(p, on_path.get(p["pid"], 0.0), r.to_ready):
                causes: dict[str, float] = {}
                for ph in p["phases"]:
                    for c in ph["causes"]:
                        causes[c["cause"]] = causes.get(c["cause"], 0.0) + c["ms"]
                top = ", ".join(f"{c} {_ms(ms)}" for c, ms in sorted(causes.items(), key=lambda kv: -kv[1])[:2])
                out += ["", f"{pad}{one_line(p['role'])} (pid {p['pid']}{', parent ' + str(p['parent']) if p.get('parent') else ''}): "
                            f"a helper off the path, {_ms(p['end_ms'] - p['start_ms'])} alive" + (f" ({top})" if top else "")]
                continue
            out += ["", f"{pad}{one_line(p['role'])} (pid {p['pid']}{', parent ' + str(p['parent']) if p.get('parent') else ''}): "
                        f"{_ms(p['start_ms'])} .. {_ms(p['end_ms'])}, ended by {one_line(p.get('end', ''))}; "
                        f"{OWN_LINE} {_ms(p.get('own_ms', 0.0))}" + _cupti_said(p.get("cupti")) +
                        _onednn_said(p.get("onednn"))]
            phases = p["phases"]
            shown = sorted(phases, key=lambda ph: -ph["ms"])[:SHOWN_PHASES]
            keep = {id(ph) for ph in shown}
            hidden = [ph for ph in phases if id(ph) not in keep]
            for ph in phases:
                if id(ph) not in keep:
                    continue
                logged = f" [log: {_ms(ph['logged_ms'])}]" if ph.get("logged_ms") is not None else ""
                out.append(f"{pad}  {_bar(ph['start_ms'], ph['ms'], total)} {_ms(ph['ms']):>9} "
                           f"{one_line(ph['name'])[:48]}{logged}  {_causes(ph)}")
                if ph.get("detail") and ph.get("source") == "vllm":
                    out.append(f"{pad}  {' ' * BAR} {'':>9}   ({one_line(ph['detail'])[:160]})")
            if hidden:
                out.append(f"{pad}  ({len(hidden)} shorter phases, {_ms(sum(ph['ms'] for ph in hidden))} in all, not shown)")
            for c in p.get("calls", [])[:6]:
                line = (f"{pad}  first {one_line(c['label'])} [{one_line(c['key'])}] {_ms(c['first_ms'])}")
                if c.get("steady_ms") is not None:
                    line += f" vs steady {_ms(c['steady_ms'])} ({c['calls'] - 1} later)"
                    if c.get("excess_ms") is not None and c["excess_ms"] <= 0:
                        line += ": no excess (the first call was no slower than the later ones' median)"
                    elif c.get("excess_ms") is not None:
                        said = ", ".join(f"{x['cause']} {_ms(x['ms'])} ({x['evidence']})" for x in c.get("causes", [])[:3])
                        line += f": excess {_ms(c['excess_ms'])}" + (f" = {said}" if said else "")
                        if c.get("unattributed_ms") is not None:
                            line += f", unattributed {_ms(c['unattributed_ms'])}"
                out.append(line)
        checks = r.engine.get("checks", []) if r.engine else []
        if checks:
            out += ["", f"{r.engine['name']}'s own figures against warmprof's clock:"]
            for c in checks:
                if c.get("measured_ms") is not None:
                    how = ("agrees" if c.get("agrees") else "DISAGREES") + (
                        f", vLLM rounds to {_ms(c['resolution_ms'])}" if c.get("resolution_ms") else "")
                    apart = (f"{c['measured_ms'] / c['logged_ms'] - 1:+.1%}" if c["logged_ms"] > 0
                             else f"{_ms(c['measured_ms'] - c['logged_ms'])} apart")
                    out.append(f"  {one_line(c['phase'])} (pid {c.get('pid')}): logged {_ms(c['logged_ms'])}, timed "
                               f"{_ms(c['measured_ms'])} ({apart}; {how})")
                else:
                    out.append(f"  {one_line(c['phase'])} (pid {c.get('pid')}): logged {_ms(c['logged_ms'])}; warmprof "
                               "timed no such phase in that process")
        if r.unrecorded:
            out += ["", "not recorded: " + ", ".join(f"{one_line(u['name'])} (pid {u['pid']})" for u in r.unrecorded[:8])]
        for n in r.notes:
            out.append(f"note: {one_line(n)}")
        if r.stopped:
            out.append("stopped by warmprof at the end: " + ", ".join(one_line(s) for s in r.stopped[:8]))
        return "\n".join(out)


def _helper(p: dict[str, Any], path_ms: float, to_ready: dict[str, Any] | None) -> bool:
    """A process shown in one line: no watched call, no engine phase, and (nearly) never on the path."""
    if p.get("calls") or any(ph.get("source") == "vllm" for ph in p["phases"]):
        return False
    whole = to_ready["ms"] if to_ready else 0.0
    return whole > 0 and path_ms < 0.01 * whole


def _depth(r: Any, p: dict[str, Any]) -> int:
    pids = {q["pid"]: q for q in r.processes}
    d, at = 0, p
    while at.get("parent") in pids and d < 8:
        at = pids[at["parent"]]
        d += 1
    return d


def _onednn_said(state: Any) -> str:
    """oneDNN's primitive creations in the process (each a jit_compile span), or why they went untimed."""
    if not state:
        return ""
    if state.get("on") is False:
        return f"; oneDNN's creations untimed: {one_line(str(state.get('why', '')))}"
    return f"; oneDNN made {state.get('creations', 0)} primitive(s) in {_ms(float(state.get('creation_ms', 0.0)))}"


def _cupti_said(state: Any) -> str:
    """The process's CUPTI, where CUDA started in it: on (its callbacks), or off and why."""
    if not state:
        return ""
    if state.get("subscribe_ms") is not None:
        n = state.get("callbacks")
        return f"; CUPTI on ({n} callbacks)" if n is not None else "; CUPTI on"
    return f"; CUPTI off: {one_line(str(state.get('reason', '')))}"

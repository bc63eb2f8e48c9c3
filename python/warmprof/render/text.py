"""Text renderer for a trace report: header, protocol figures, cause table, top modules, advice."""

from __future__ import annotations

from typing import Any

from ..report.trace import break_headline, shown_compile
from .base import Renderer
from .format import cause_ms as _cause_ms
from .format import middle, subject
from .format import ms as _ms
from .registry import register
from .safe import one_line

NAME_CHARS = 60  # a name column (module, op) is as wide as its longest name up to this; longer names lose their middle


def _column(names: list[str], least: int) -> tuple[list[str], int]:
    """Names cut to one column width (at least `least`, at most NAME_CHARS), and that width: the
    columns after them stay aligned whatever the names' lengths."""
    width = min(max([least] + [len(n) for n in names]), NAME_CHARS)
    return [middle(n, width) for n in names], width


def _platform_line(p: dict[str, Any]) -> str:
    keys = ("jetson", "power_mode", "gpu", "cpu", "cpu_count", "os", "python", "torch", "cuda_runtime", "cuda_driver")
    parts = []
    for k in keys:
        v = p.get(k)
        if isinstance(v, dict):
            v = v.get("name") or v.get("model")
        if v:
            parts.append(f"{k.replace('_', ' ')} {v}")
    return ", ".join(parts) or "unknown platform"


@register
class TraceTextRenderer(Renderer):
    format = "text"
    kinds = ("trace",)
    extension = ".txt"

    def render(self, report: Any) -> str:
        r = report
        lines: list[str] = []
        what = subject(r, with_compile=False)  # the model, its input's shape (or every input's), its dtype
        mode = f"torch.compile({r.compile})" if r.compile else "eager"
        lines.append(f"warmprof trace: {what} on {one_line(r.device)}, {one_line(mode)}")
        lines.append(f"  platform: {_platform_line(r.platform)}")
        lines.extend(_setup_lines(r))
        lines.extend(_generate_lines(r))
        clean = " clean" if r.clean else ""
        calls = getattr(r.protocol, "calls_per_pass", 1) if r.protocol is not None else 1
        if calls > 1:  # cudagraph trees: a pass is calls 1..n (warm-up, record), the notes say why
            clean += f" (calls 1-{calls}: CUDA graphs record on call 2)"
        lines.append(
            f"  first pass{clean} {_ms(r.first_pass_ms)} | seen-shape re-run {_ms(r.seen_rerun_ms)} | "
            f"steady median {_ms(r.steady_median_ms)} (p10-p90 {_ms(r.steady_p10_ms)}-{_ms(r.steady_p90_ms)}, "
            f"{r.steady_passes} passes)"
        )
        ratio = r.first_pass_ms / r.steady_median_ms if r.steady_median_ms > 0 else float("inf")
        if r.excess_ms > 0:
            lines.append(f"  excess {_ms(r.excess_ms)} ({ratio:.1f}x steady); noise band {_ms(r.noise_band_ms)}")
        else:  # said as it is, with no shares: a first pass faster than the steady median is noise
            lines.append(f"  excess -{_ms(-r.excess_ms)}: the first pass was faster than the steady median; noise band "
                         f"{_ms(r.noise_band_ms)}")
        lines.extend(_own_cost_lines(r))
        pause = r.clean.get("after_pause") if isinstance(r.clean, dict) else None
        if isinstance(pause, dict) and isinstance(pause.get("excess_ms"), (int, float)):
            x = pause["excess_ms"]
            lines.append(f"  a warm pass after a short pause: {'+' if x >= 0 else '-'}{_ms(abs(x))} over steady at least "
                         "(what any pass after other work pays, not a first call)")
        if r.verdict == "no_first_call_cost":
            lines.append("  no first-call cost at this shape: the first pass is within the steady passes' noise band"
                         + (" and what a warm pass after a short pause pays" if r.excess_ms > r.noise_band_ms else ""))
        lines.append("")
        residual_source = "excess - attributed"
        rows = [(c, one_line(c.source) + (f" x{c.count}" if c.count > 1 else "")) for c in sorted(r.causes, key=lambda c: -c.ms)]
        width = min(max([len(residual_source), 6] + [len(src) for _, src in rows]), 48)
        lines.append(f"  {'cause':<20} {'ms':>10} {'share':>6}  {'evidence':<9} {'source':<{width}} where")
        lines.append(f"  {'-' * 20} {'-' * 10} {'-' * 6}  {'-' * 9} {'-' * width} {'-' * 20}")
        for c, src in rows:
            if len(src) > width:
                src = src[: width - 3] + "..."
            lines.append(
                f"  {c.cause:<20} {_cause_ms(c.ms):>10} {_share(c.share, r.excess_ms)}  {c.evidence:<9} {src:<{width}} "
                f"{one_line(c.module) or '-'}"
            )
        within = "within" if abs(r.unattributed_ms) <= r.noise_band_ms else "outside"
        # A share of a negative residual means nothing: the causes overshoot the excess (see notes).
        un_share = f"{r.unattributed_ms / r.excess_ms:>6.1%}" if r.excess_ms > 0 and r.unattributed_ms >= 0 else f"{'-':>6}"
        lines.append(
            f"  {'unattributed':<20} {_cause_ms(r.unattributed_ms):>10} {un_share}  {'residual':<9} "
            f"{residual_source:<{width}} ({within} the noise band)"
        )
        lines.extend(_where_lines(r))
        paid_again = [c for c in r.seen_rerun_causes if c.cause != "profiler_overhead"]  # warmprof's own, every pass
        if paid_again:
            rerun = ", ".join(f"{c.cause}/{c.source} {_ms(c.ms)}" for c in paid_again[:4])
            lines.append(f"  seen-shape re-run still paid: {rerun}")
        else:
            lines.append("  seen-shape re-run paid none of these causes (one-time costs)")
        tc = shown_compile(r)
        # An eager trace that compiled nothing has no compile time to report (the instrument is on
        # whenever dynamo is imported); a compiled one always says what torch reported, 0 included.
        if tc is not None:
            again = f", {tc.recompiled} of them recompiles" if tc.recompiled else ""
            lines.append(
                f"  torch reports {_ms(tc.torch_reported_ms)} of compile time; "
                f"{tc.compiles} compile(s){again}; inductor cache: {one_line(tc.inductor_cache)}"
            )
            lines.extend(_recompile_lines(tc.recompiles))
            lines.extend(_frame_lines(tc))
        # warmprof's own hook cost sits in every module: it says nothing about the model's.
        top = []
        for m in r.modules:
            causes = {k: v for k, v in m["causes"].items() if k != "profiler_overhead" and v > 0}
            if causes:
                top.append((one_line(m["module"]), sum(causes.values()), causes))
        top.sort(key=lambda t: -t[1])
        if top:
            lines.append("")
            lines.append("  top modules (attributed time, each cause in its innermost module):")
            names, width = _column([module for module, _, _ in top[:5]], 40)
            for name, (_, ms, causes) in zip(names, top[:5]):
                parts = ", ".join(f"{k} {_ms(v)}" for k, v in sorted(causes.items(), key=lambda kv: -kv[1]))
                lines.append(f"    {name:<{width}} {_ms(ms):>10}  {parts}")
        if r.advice:
            lines.append("")
            lines.append("  advice:")
            lines.extend(f"    - {one_line(a)}" for a in r.advice)
        if r.notes:
            lines.append("")
            lines.append("  notes:")
            lines.extend(f"    - {one_line(n)}" for n in r.notes)
        return "\n".join(lines) + "\n"


def _setup_lines(r: Any) -> list[str]:
    """The set-up before the first pass (model to the device, inputs): its own time and causes, never
    part of the first pass's excess."""
    setup = getattr(r, "setup", None)
    if setup is None:
        return []
    steps = ", ".join(f"{one_line(st['name'])} {_ms(st['ms'])}" for st in setup.steps)
    causes = sorted(setup.causes, key=lambda c: -c.ms)
    parts = [f"{c.cause} {_ms(c.ms)} ({one_line(c.source)}{', ' + c.evidence if c.evidence != 'measured' else ''})"
             for c in causes[:4]]
    if setup.unattributed_ms > 0:
        parts.append(f"unattributed {_ms(setup.unattributed_ms)}")
    out = [f"  set-up before the first pass (not in its excess): {_ms(setup.ms)}" + (f": {steps}" if steps else "")]
    if parts:
        out.append(f"    set-up causes: {', '.join(parts)}")
    return out


# What a kind of dynamo guard failure means, by a phrase of its reason (facts of dynamo's guards, not advice)
_GUARD_MEANS = (
    ("size mismatch", "a new size at that dimension: dynamo compiled a graph for it"),
    ("stride mismatch", "a new memory layout (strides) of that tensor: a graph for it"),
    ("dtype mismatch", "a new dtype of that tensor: a graph for it"),
    ("device mismatch", "that tensor on another device: a graph for it"),
    ("requires_grad mismatch", "that tensor's requires_grad changed: a graph for it"),
    ("len(", "the number of arguments (or of a list's items) changed: a graph for each count"),
    ("___check_obj_id", "another object where the compiled code saw one (a new module, closure or config each call)"),
    ("___check_type_id", "an argument of another type"),
    ("grad_mode", "grad mode changed (torch.no_grad on one call, not another)"),
)


def _generate_lines(r: Any) -> list[str]:
    """A generate trace's headline (time to first token) and its phases, each first call against its
    steady median, with the phase's largest causes (the report's `generate`)."""
    g = getattr(r, "generate", None)
    if not g:
        return []
    t = g["ttft"]
    ratio = f" ({t['first_ms'] / t['steady_median_ms']:.1f}x steady)" if t["steady_median_ms"] > 0 else ""
    which = "clean" if t.get("source") == "clean" else "instrumented"
    prompt = f" from a {g['prompt_tokens']}-token prompt" if g.get("prompt_tokens") else ""
    out = [f"  time to first token ({which} first call): {_ms(t['first_ms'])} vs {_ms(t['steady_median_ms'])} steady: "
           f"excess {_ms(t['excess_ms'])}{ratio}",
           f"  generate: {g['new_tokens']} new tokens{prompt}, KV cache {one_line(g.get('kv_cache', ''))}; the whole call "
           "is the first pass below",
           f"    {'phase':<15} {'forwards':>8} {'first':>10} {'steady':>10} {'excess':>10}  causes (first call, instrumented)"]
    for row in g["phases"]:
        name = "prefill (TTFT)" if row["phase"] == "prefill" else row["phase"]
        first = row.get("clean", row)  # the clean call's figures where the control ran
        by_cause: dict[str, float] = {}
        for c in row["causes"]:
            by_cause[c["cause"]] = by_cause.get(c["cause"], 0.0) + c["ms"]
        causes = sorted(by_cause.items(), key=lambda kv: -kv[1])
        said = [f"{cause} {_ms(ms)}" for cause, ms in causes[:3]]
        if len(causes) > 3:
            said.append(f"{len(causes) - 3} more {_ms(sum(ms for _, ms in causes[3:]))}")
        if row.get("unattributed_ms", 0.0) > 0:
            said.append(f"unattributed {_ms(row['unattributed_ms'])}")
        out.append(f"    {name:<15} {row.get('forwards', 0):>8} {_ms(first['first_ms']):>10} "
                   f"{_ms(first['steady_median_ms']):>10} {_ms(first['excess_ms']):>10}  {', '.join(said) or '-'}")
    out.extend(f"    note: {one_line(n)}" for n in g.get("notes", []))
    return out


def _frame_lines(tc: Any) -> list[str]:
    """torch.compile's graph breaks (each reason once, with its count) and, when more than one frame
    compiled, each frame's compiles and time with what came from the cache."""
    out = []
    breaks = getattr(tc, "graph_breaks", [])
    if breaks:
        out.append(f"    graph breaks: {sum(b['count'] for b in breaks)}")
        out += [f"      {b['count']}x {one_line(break_headline(b['reason']))}" for b in breaks[:8]]
        if len(breaks) > 8:
            out.append(f"      and {len(breaks) - 8} more reason(s) (the JSON has them all)")
    for f in getattr(tc, "frames", [])[:8]:
        cached = f", {f['graphs_from_cache']} graph(s) from cache" if f.get("graphs_from_cache") else ""
        out.append(f"    frame {f['frame']}: {f['compiles']} compile(s), {_ms(f['ms'])}{cached}")
    return out


def _recompile_lines(groups: list[dict[str, Any]]) -> list[str]:
    """dynamo's recompile reasons, grouped (report.trace.recompile_groups: one line a kind, not one a
    recompile), the most first, every kind the JSON holds: each with its count, the recompiles' time, an
    example with its numbers, and what that guard means."""
    out = []
    for g in groups:
        means = next((m for phrase, m in _GUARD_MEANS if phrase in g["reason"]), "")
        alike = f" (and {g['count'] - 1} more alike, other numbers)" if g["count"] > 1 else ""
        took = f", {_ms(g['ms'])}" if g.get("ms") else ""
        out.append(f"    recompiled {g['count']}x{took}: {one_line(g['example'])}{alike}"
                   + (f": {means}" if means else ""))
    return out


def _own_cost_lines(r: Any) -> list[str]:
    """warmprof's own cost, its own line: never a share of the model's excess."""
    own = r.own_cost or {}
    if not own:
        return []
    parts = []
    first = own.get("first_pass_ms")
    if isinstance(first, (int, float)):
        band = (r.clean or {}).get("noise_band_ms") if isinstance(r.clean, dict) else None
        if first < 0 or (isinstance(band, (int, float)) and abs(first) <= band):
            # the warm control's first pass came out at or under the clean steady median: the machine's
            # noise, not a saving; said so rather than as a cost of its own
            within = f", a noise band of {_ms(band)}" if isinstance(band, (int, float)) else ""
            parts.append(f"{_ms(first)} on a first pass (the warm control, measured; within the machine's "
                         f"noise{within}: read as none)")
        else:
            parts.append(f"{_ms(first)} on a first pass (the warm control, measured)")
    if isinstance(own.get("steady_ms"), (int, float)):
        parts.append(f"{_ms(own['steady_ms'])} per steady pass (estimated)")
    inst = own.get("instrumented_first_pass_ms")
    tail = f"; the instrumented first pass took {_ms(inst)}" if isinstance(inst, (int, float)) and r.clean else ""
    taken = own.get("in_headline_ms")
    if not r.clean and isinstance(taken, (int, float)) and taken > 0:
        tail += f"; {_ms(taken)} of it taken out of the excess"
    return [f"  warmprof's own cost (not the model's): {', '.join(parts) or 'not measured'}{tail}"]


def _where_lines(r: Any) -> list[str]:
    """Where the unattributed time sits: by module, or by (module, op) with the op view."""
    rows = [w for w in r.unattributed_where if w["ms"] > 0 or w.get("rerun_ms", 0) > 0]
    if not rows or r.unattributed_ms <= r.noise_band_ms:
        return []
    if not any("op" in w for w in rows):
        top = rows[:5]
        names, width = _column([one_line(w["module"]) for w in top], 40)
        return ([f"  unattributed sits in (each module's own time outside causes, first pass less seen re-run; "
                 f"largest {len(top)}):"] + [f"    {name:<{width}} {_ms(w['ms']):>10}" for name, w in zip(names, top)])
    from ..opspec import label, short_op
    from ..report.trace import unplaced_ms as left

    placed = sum(left(w) for w in rows)
    top = sorted((w for w in rows if left(w) > 0), key=lambda w: -left(w))[:8]
    out = ["  unattributed sits in (module, op): first pass less seen re-run outside causes"
           + (", plus seen re-run less a warm instrumented pass" if any("rerun_ms" in w for w in rows) else "")
           + (", less what the op probes inferred" if any("inferred" in w for w in rows) else "")
           + (", less what the warm processes of --explain booked"
              if any("warm_process_ms" in w or "warm_own_ms" in w for w in rows) else "")
           + (f"; {len(rows)} sites place {_ms(placed)} of {_ms(r.unattributed_ms)} ({placed / r.unattributed_ms:.0%}); "
              if placed < r.unattributed_ms else
              f"; {len(rows)} sites hold {_ms(placed)}, all of the unattributed {_ms(r.unattributed_ms)} (rows keep "
              "positive sites only, so they add up to more); ")
           + f"largest {len(top)}:"]
    modules, module_width = _column([one_line(w["module"]) for w in top], 44)
    ops, op_width = _column([one_line(short_op(w["op"])) if "op" in w else "(module code)" for w in top], 14)
    for w, module, op in zip(top, modules, ops):
        shapes = label(w["call"]) if "call" in w else ""
        out.append(f"    {_ms(left(w)):>10}  {module:<{module_width}} {op:<{op_width}} {one_line(shapes)}".rstrip())
    return out


def _share(share: float, excess_ms: float) -> str:
    """A cause's share of the excess; none when there is no excess to share."""
    return f"{share:>6.1%}" if excess_ms > 0 else f"{'-':>6}"

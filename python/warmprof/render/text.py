"""Text renderer for a trace report: header, protocol figures, cause table, top modules, advice."""

from __future__ import annotations

from typing import Any

from ..report.trace import break_headline, passes_gap_ms, shown_compile
from .base import Renderer
from .format import in_unit, middle, subject, table_unit
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
            lines.append(f"  excess: none measurable (the first pass was no slower than the steady median; the figure is "
                         f"in the JSON); noise band {_ms(r.noise_band_ms)}")
        lines.extend(_own_cost_lines(r))
        pause = r.clean.get("after_pause") if isinstance(r.clean, dict) else None
        if isinstance(pause, dict) and isinstance(pause.get("excess_ms"), (int, float)):
            x = pause["excess_ms"]
            said = (f"{_ms(x)} over steady at least (what any pass after other work pays, not a first call)" if x > 0 else
                    "none measurable over steady (the machine's load; the figure is in the JSON)")
            lines.append(f"  a warm pass after a short pause: {said}")
        lines.extend(_verdict_lines(r))
        lines.append("")
        lines.extend(_cause_table(r))
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
            unit = table_unit([ms for _, ms, _ in top[:5]])
            lines.append("")
            lines.append(f"  top modules ({unit}; each cause in its innermost module, as the cause table books it):")
            names, width = _column([module for module, _, _ in top[:5]], 40)
            for name, (_, ms, causes) in zip(names, top[:5]):
                parts = ", ".join(f"{k} {in_unit(v, unit)}" for k, v in sorted(causes.items(), key=lambda kv: -kv[1]))
                lines.append(f"    {name:<{width}} {in_unit(ms, unit):>10}  {parts}")
        if r.advice:
            lines.append("")
            lines.append("  advice:")
            lines.extend(f"    - {one_line(a)}" for a in r.advice)
        if r.notes:
            lines.append("")
            lines.append("  notes:")
            lines.extend(f"    - {one_line(n)}" for n in r.notes)
        return "\n".join(lines) + "\n"


def _verdict_lines(r: Any) -> list[str]:
    """What the headline says: no first-call cost at this shape, or an answer the two fresh processes do not
    agree on (the accounting's run-to-run difference beyond their waits and noise: --repeat)."""
    acc = getattr(r, "accounting", None)
    if r.verdict == "no_first_call_cost":
        bound = acc.get("no_cost_bound") if isinstance(acc, dict) else None
        if isinstance(bound, dict):  # the bound the verdict used (traces/verdict.no_cost_bound_parts)
            spread = ("the steady passes' spread net of their waits for a CPU" if bound.get("net_of_waits")
                      else "the steady passes' noise band")
            paused = float(bound.get("after_pause_ms", 0.0)) > 0 and r.excess_ms > float(bound.get("spread_ms", 0.0))
        else:  # a report written before the bound was kept
            spread, paused = "the steady passes' noise band", r.excess_ms > r.noise_band_ms
        return [f"  no first-call cost at this shape: the first pass is within {spread}"
                + (" and what a warm pass after a short pause pays" if paused else "")]
    if r.verdict == "unstable" and isinstance(acc, dict):
        rr = acc.get("run_to_run", {})
        beyond = float(rr.get("beyond_waits_ms", acc["run_to_run_ms"]))
        limit = _ms(acc.get("tolerance_ms", 0.0))
        why = []
        if abs(beyond) > float(acc.get("tolerance_ms", 0.0)):
            why.append(f"the clean and the instrumented first pass differ by {_ms(abs(passes_gap_ms(acc)))}, "
                       f"{_ms(abs(beyond))} of it beyond what their waits explain")
        if acc.get("residual_unsettled"):
            over = acc["unattributed_ms"]
            why.append(f"the instrumented process {'left' if over >= 0 else 'booked'} {_ms(abs(over))} "
                       f"{'unexplained' if over >= 0 else 'more than its excess'}")
        return [f"  unstable: {' and '.join(why) or 'the two processes disagree'}, more than the {limit} the noise of "
                "two single passes and a tenth of the excess allow: one run does not settle the figures; "
                "run `warmprof trace ... --repeat 5`"]
    return []


def _cause_table(r: Any) -> list[str]:
    """The cause table: every row in one unit, then the run-to-run difference (its own row, not a cause)
    and the unattributed time, and the accounting they add up to (report.accounting)."""
    from ..causes import count_label

    acc = getattr(r, "accounting", None)
    run_to_run = float(acc["run_to_run_ms"]) if isinstance(acc, dict) else 0.0
    causes = sorted(r.causes, key=lambda c: -c.ms)
    rows = [(c, " ".join(x for x in (one_line(c.source), count_label(c.source, c.count, c.cause)) if x)) for c in causes]
    unit = table_unit([c.ms for c in causes] + [r.excess_ms, run_to_run, r.unattributed_ms])
    # the instrumented pass's own causes: where the control ran, its own cpu_contention in place of the clean pass's
    residual_source = (("instrumented excess - own cost - its causes" if r.clean else "instrumented excess - own cost - causes")
                       if isinstance(acc, dict) else "excess - attributed")
    width = min(max([len(residual_source), 6] + [len(src) for _, src in rows]), 48)
    out = [f"  {'cause':<20} {unit:>10} {'share':>6}  {'evidence':<9} {'source':<{width}} where",
           f"  {'-' * 20} {'-' * 10} {'-' * 6}  {'-' * 9} {'-' * width} {'-' * 20}"]
    for c, src in rows:
        if len(src) > width:
            src = src[: width - 3] + "..."
        out.append(f"  {c.cause:<20} {in_unit(c.ms, unit):>10} {_share(c.share, r.excess_ms)}  {c.evidence:<9} "
                   f"{src:<{width}} {one_line(c.module) or '-'}")
        inside = [f"{_ms(v)} {what}" for v, what in ((getattr(c, "waited_ms", 0.0), "waiting for a CPU"),
                                                     (getattr(c, "blocked_ms", 0.0), "blocked off the CPU"))
                  if v >= max(0.01, 0.01 * c.ms)]
        if inside:
            out.append(f"  {'':<20} {'':>10} {'':>6}  of which {' and '.join(inside)}, inside its own spans")
    if isinstance(acc, dict) and r.clean:
        rr = acc.get("run_to_run", {})
        sign = "+" if run_to_run >= 0 else "-"
        out.append(f"  {'run-to-run':<20} {sign + in_unit(abs(run_to_run), unit):>10} {'':>6}  {'measured':<9} "
                   f"{'clean - instrumented':<{width}} (the run-to-run difference of two processes: not a cause)")
        if rr:
            # beyond a steady pass's median wait: a first pass that waited less than that waited nothing extra
            # (the JSON keeps the signed figure)
            def _w(key: str) -> str:
                return _ms(max(0.0, float(rr[key])))

            waited = max(float(rr["clean_waited_for_cpu_ms"]), float(rr["instrumented_waited_for_cpu_ms"]))
            booked = ("; the clean pass's wait for a CPU outside causes is the cpu_contention row, the instrumented "
                      "pass's is not the headline's: this row is their difference without them"
                      if "booked_waited_for_cpu_ms" in rr and waited >= 0.01 else "")
            out.append(f"  {'':<20} {'':>10} {'':>6}  the clean first pass waited {_w('clean_waited_for_cpu_ms')} for a "
                       f"CPU and {_w('clean_off_cpu_ms')} off it, the instrumented one "
                       f"{_w('instrumented_waited_for_cpu_ms')} and {_w('instrumented_off_cpu_ms')} (the two "
                       f"processes took turns: a wait is the machine's other work{booked})")
            if "clean_torch_compile_ms" in rr:
                out.append(f"  {'':<20} {'':>10} {'':>6}  torch's own compile timers: {_ms(rr['clean_torch_compile_ms'])} in "
                           f"the clean first pass, {_ms(rr['instrumented_torch_compile_ms'])} in the traced passes")
    # the residual is a difference of single passes (two processes' where the control ran): judged against
    # their noise together and a tenth of the excess (accounting.tolerance_ms), else the steady noise band
    limit = float(acc.get("tolerance_ms", r.noise_band_ms)) if isinstance(acc, dict) else r.noise_band_ms
    band = f"the noise, {_ms(limit)}" if isinstance(acc, dict) and "tolerance_ms" in acc else "the noise band"
    within = f"within {band}" if abs(r.unattributed_ms) <= limit else f"outside {band}"
    if r.unattributed_ms >= 0:
        # A share of a negative residual means nothing: the causes overshoot (said instead).
        un_share = f"{r.unattributed_ms / r.excess_ms:>6.1%}" if r.excess_ms > 0 else f"{'-':>6}"
        out.append(f"  {'unattributed':<20} {in_unit(r.unattributed_ms, unit):>10} {un_share}  {'residual':<9} "
                   f"{residual_source:<{width}} ({within})")
    else:
        out.append(f"  {'unattributed':<20} {'none':>10} {'-':>6}  {'residual':<9} {residual_source:<{width}} "
                   f"(the causes are {_ms(-r.unattributed_ms)} more than the excess they explain: {within})")
    if isinstance(acc, dict):
        headline = (_ms(acc["excess_ms"]) if acc["excess_ms"] >= 0 else
                    "none measurable (the first pass under the steady median; the figure is in the JSON)")
        out.append(f"  = excess {headline}: causes {_ms(acc['causes_ms'])}"
                   + (f" {'+' if run_to_run >= 0 else '-'} run-to-run {_ms(abs(run_to_run))}" if r.clean else "")
                   + (f" + unattributed {_ms(r.unattributed_ms)}" if r.unattributed_ms >= 0 else
                      f", the causes over by {_ms(-r.unattributed_ms)}"))
    return out


def _setup_lines(r: Any) -> list[str]:
    """The set-up before the first pass (importing torch, the factory, the model to the device, inputs):
    its own time and each step's largest causes, never part of the first pass's excess. A step's causes
    are inside it; its unattributed time is said when positive ("none" otherwise). A file written before
    the steps had causes of their own: the set-up's causes on one line, as it held them."""
    setup = getattr(r, "setup", None)
    if setup is None:
        return []
    steps = ", ".join(f"{one_line(st['name'])} {_ms(st['ms'])}" for st in setup.steps)
    out = [f"  set-up before the first pass (not in its excess): {_ms(setup.ms)}" + (f": {steps}" if steps else "")]

    def said(c: Any) -> str:
        waited = getattr(c, "waited_ms", 0.0)  # of its time, waiting for a CPU inside its own spans
        waited_said = f", {_ms(waited)} of it waiting for a CPU" if waited >= 0.005 else ""
        return (f"{c.cause} {_ms(c.ms)} ({one_line(c.source)}{', ' + c.evidence if c.evidence != 'measured' else ''}"
                f"{waited_said})")

    if not setup.has_step_causes():
        parts = [said(c) for c in sorted(setup.causes, key=lambda c: -c.ms)[:4]]
        if setup.unattributed_ms > 0:
            parts.append(f"unattributed {_ms(setup.unattributed_ms)}")
        if parts:
            out.append(f"    set-up causes: {', '.join(parts)}")
        return out
    for st in setup.steps:
        causes = sorted(setup.own_causes(st), key=lambda c: -c.ms)
        parts = [said(c) for c in causes[:3]]
        if len(causes) > 3:
            parts.append(f"{len(causes) - 3} more {_ms(sum(c.ms for c in causes[3:]))}")
        left = float(st.get("unattributed_ms", st["ms"] - sum(c.ms for c in causes)))
        parts.append(f"unattributed {_ms(left)}" if left > 0 else "unattributed none")
        out.append(f"    {one_line(st['name'])} {_ms(st['ms'])}: {', '.join(parts)}")
        if st.get("note"):
            out.append(f"      ({one_line(st['note'])})")
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
    steady median, with the phase's one accounting: its largest causes, the run-to-run difference between
    the clean and the instrumented process where nonzero (signed: a difference, not a cost), and its
    unattributed time when positive ("none" otherwise). An excess at or under zero is "none measurable"
    (the figure is in the JSON)."""
    g = getattr(r, "generate", None)
    if not g:
        return []
    t = g["ttft"]
    ratio = f" ({t['first_ms'] / t['steady_median_ms']:.1f}x steady)" if t["steady_median_ms"] > 0 else ""
    which = "clean" if t.get("source") == "clean" else "instrumented"
    prompt = f" from a {g['prompt_tokens']}-token prompt" if g.get("prompt_tokens") else ""
    own = f", warmprof's own {_ms(t['own_cost_ms'])} out of it" if t.get("own_cost_ms", 0.0) > 0 else ""
    excess = f"excess {_ms(t['excess_ms'])}{ratio}{own}" if t["excess_ms"] > 0 else "excess none measurable"
    out = [f"  time to first token ({which} first call): {_ms(t['first_ms'])} vs {_ms(t['steady_median_ms'])} steady: "
           f"{excess}",
           f"  generate: {g['new_tokens']} new tokens{prompt}, KV cache {one_line(g.get('kv_cache', ''))}; the whole call "
           "is the first pass below",
           f"    {'phase':<15} {'forwards':>8} {'first':>10} {'steady':>10} {'excess':>10}  causes (first call, instrumented)"]
    run_to_run = False
    for row in g["phases"]:
        name = "prefill (TTFT)" if row["phase"] == "prefill" else row["phase"]
        first = row.get("clean", row)  # the clean call's figures where the control ran
        headline = float(row.get("headline_excess_ms", first["excess_ms"]))
        by_cause: dict[str, float] = {}
        for c in row["causes"]:
            by_cause[c["cause"]] = by_cause.get(c["cause"], 0.0) + c["ms"]
        causes = sorted(by_cause.items(), key=lambda kv: -kv[1])
        said = [f"{cause} {_ms(ms)}" for cause, ms in causes[:3]]
        if len(causes) > 3:
            said.append(f"{len(causes) - 3} more {_ms(sum(ms for _, ms in causes[3:]))}")
        r2r = float(row.get("run_to_run_ms", 0.0))
        if abs(r2r) >= 0.005:  # shown at the text's own resolution
            run_to_run = True
            said.append(f"run-to-run {'+' if r2r > 0 else '-'}{_ms(abs(r2r))}")
        left = float(row.get("unattributed_ms", 0.0))
        said.append(f"unattributed {_ms(left)}" if left > 0 else "unattributed none")
        cell = _ms(headline) if headline > 0 else "none measurable"
        out.append(f"    {name:<15} {row.get('forwards', 0):>8} {_ms(first['first_ms']):>10} "
                   f"{_ms(first['steady_median_ms']):>10} {cell:>10}  {', '.join(said)}")
    if run_to_run:
        out.append("    run-to-run: the clean call's excess less the instrumented call's (less warmprof's own cost), "
                   "a difference between the two processes, not a cost")
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
        if first < 0:
            # the warm control's first pass came out under the clean steady median: the machine's noise, not a
            # saving; said so, with no negative figure (the JSON keeps it)
            parts.append("none measurable on a first pass (the warm control came out under the steady median: the "
                         "machine's load)")
        elif isinstance(band, (int, float)) and first <= band:
            parts.append(f"{_ms(first)} on a first pass (the warm control, measured; within the machine's "
                         f"noise, a noise band of {_ms(band)}, and taken out of the instrumented pass as measured)")
        else:
            parts.append(f"{_ms(first)} on a first pass (the warm control, measured)")
    faults = own.get("first_pass_faults_beyond_clean")
    if isinstance(faults, int) and faults > 0:
        parts.append(f"{faults} page faults ({_ms(float(own.get('first_pass_faults_ms', 0.0)))}) the instrumented first "
                     "pass took beyond the clean one (its buffers: counted, kept out of allocator_growth)")
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

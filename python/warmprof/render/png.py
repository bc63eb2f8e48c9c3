"""Reports and comparisons as PNG charts (matplotlib, the `plot` extra, drawn with Agg).

- a trace report: stacked bars of the first pass, the seen re-run and a steady pass, the excess
  split by cause;
- a comparison of trace reports: grouped bars of each cause's ms, one bar per report;
- a probe report: first call vs steady per op (log scale); a comparison of probe reports: each
  report's first call per op.
Titles name the device (the GPU, the Jetson board and power mode, or the CPU).
"""

from __future__ import annotations

import io
import math
import textwrap
from typing import Any

from .. import causes
from ..errors import WarmprofError
from ..report.trace import break_headline, shown_compile
from .base import Renderer
from .format import device, setting_line, subject
from .format import ms as _ms
from .registry import kind_of, register

STEADY_COLOR = "#7f7f7f"
REPORT_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
DPI = 120
NAME_CHARS = 80  # a user-supplied name (model, label, op, device) longer than this is cut with "…"


def _matplotlib() -> tuple[Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise WarmprofError("PNG export needs matplotlib: pip install 'warmprof[plot]'") from None
    return Figure, FigureCanvasAgg


def _label(cause: str) -> str:
    return _fit(causes.label(cause))


def _colour(cause: str) -> str:
    c = causes.get(cause)
    return c.colour if c is not None else "#aaaaaa"


def _plain(v: float) -> str:
    """A tick value in plain digits: '0.01', '0.5', '1', '300', '20000' (never 1e-2 or mathtext)."""
    if v == 0:
        return "0"
    if abs(v) >= 1:
        return f"{v:.0f}"
    return f"{v:.{-math.floor(math.log10(abs(v)) + 1e-9)}f}"


def _plain_log_axis(axis: Any) -> None:
    """A log axis whose tick labels are plain numbers. Matplotlib's log formatter writes
    '$\\mathdefault{10^{-2}}$', which only mathtext turns into 10⁻²; with mathtext off (names are
    drawn as given, see _drawing) those characters would be printed. matplotlib's own
    choice of which ticks carry a label is kept."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def __call__(self, x: float, pos: Any = None) -> str:
            return _plain(x) if super().__call__(x, pos) else ""

    axis.set_major_formatter(Plain())
    axis.set_minor_formatter(Plain(labelOnlyBase=False))


def _fit(text: str, limit: int = NAME_CHARS) -> str:
    """A name cut to `limit` characters: a 5,000-character model name would push the figure's
    layout (and Agg's pixel limit) past what can be drawn."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- one trace report: stacked bars ------------------------------------------------------------
def _trace_figure(Figure: Any, r: Any) -> Any:
    where = _fit(device(r))
    acc = getattr(r, "accounting", None)
    first = _segments(r.steady_median_ms, r.causes, r.first_pass_ms,
                      float(acc["run_to_run_ms"]) if isinstance(acc, dict) and r.clean else 0.0)
    rerun = _segments(min(r.steady_median_ms, r.seen_rerun_ms), r.seen_rerun_causes, r.seen_rerun_ms)
    bars = [("first pass", r.first_pass_ms, first), ("seen re-run", r.seen_rerun_ms, rerun),
            ("steady (median)", r.steady_median_ms, [("steady", r.steady_median_ms)])]
    setup = getattr(r, "setup", None)
    steps = list(setup.steps) if setup is not None else []
    gen = getattr(r, "generate", None)
    # panels under the passes: the set-up (its own seconds), a generation's phases
    panels = ([("setup", 1.1)] if steps else []) + ([("generate", 1.8)] if gen else [])
    fig = Figure(figsize=(12, 4.6 + sum(1.6 * h for _, h in panels)), layout="constrained")
    if panels:
        grid = fig.add_gridspec(1 + len(panels), 1, height_ratios=(3.0, *(h for _, h in panels)))
        ax = fig.add_subplot(grid[0])
        for i, (name, _) in enumerate(panels, start=1):
            if name == "setup":
                _setup_axes(fig.add_subplot(grid[i]), setup)
            else:
                _generate_axes(fig.add_subplot(grid[i]), gen or {}, seen_keys=set())
    else:
        ax = fig.add_subplot()
    seen: set[str] = set()
    widest = 0.0
    for y, (_, total_ms, segments) in enumerate(bars):
        left = 0.0
        for key, ms in segments:
            label = None if key in seen else _legend_entry(key, r)
            seen.add(key)
            ax.barh(y, ms, left=left, color=STEADY_COLOR if key == "steady" else
                    RUN_TO_RUN_COLOUR if key == RUN_TO_RUN else _colour(key),
                    edgecolor="white", linewidth=0.6, hatch="//" if key == "unattributed" else
                    ".." if key == RUN_TO_RUN else None, label=label, height=0.6)
            left += ms
        over = left - total_ms
        r2r = float(acc["run_to_run_ms"]) if y == 0 and isinstance(acc, dict) and r.clean else 0.0
        note = ("" if over <= 1e-6 * max(total_ms, 1.0) else
                f" (the instrumented process paid {over:.2f} ms more: the run-to-run difference, not a cause)"
                if r2r < 0 and abs(over + r2r) <= 1e-6 * max(total_ms, 1.0) else
                f" (causes overshoot by {over:.2f} ms)")
        ax.text(left, y, f"  {total_ms:.2f} ms{note}", va="center", fontsize=9)
        widest = max(widest, left)
    ax.set_yticks(range(len(bars)), [name for name, _, _ in bars])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, max(widest, r.first_pass_ms, r.seen_rerun_ms, r.steady_median_ms, 1e-3) * 1.3)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title(f"{_fit(subject(r))} on {where}\nfirst pass {r.first_pass_ms:.2f} ms vs steady {r.steady_median_ms:.2f} ms:"
                 + (f" {r.excess_ms:.2f} ms excess, split by cause" if r.excess_ms >= 0 else
                    " no excess (the first pass came in under the steady median)") + "".join("\n" + line for line in _compile_text(r)),
                 fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8.5, title="cause: ms (share of excess, evidence)",
              title_fontsize=8.5, frameon=False)  # beside the bars, never over them
    return fig


COMPILE_LINES = 4  # recompile reasons drawn under the title at most (the text and JSON have them all)


def _compile_text(r: Any) -> list[str]:
    """A compiled trace's torch.compile detail for the title: its compiles and recompiles, then each
    recompile's guard text (grouped, the most first)."""
    tc = shown_compile(r)
    if tc is None:
        return []
    out = [f"torch.compile: {tc.compiles} compile(s), {tc.recompiled} recompile(s), torch reports "
           f"{tc.torch_reported_ms:.1f} ms; inductor cache {tc.inductor_cache}"]
    out += [_fit(f"recompiled {g['count']}x ({_ms(float(g.get('ms', 0.0)))}): {g['example']}", 140)
            for g in tc.recompiles[:COMPILE_LINES]]
    if len(tc.recompiles) > COMPILE_LINES:
        out.append(f"and {len(tc.recompiles) - COMPILE_LINES} more recompile reason(s): see the text or JSON")
    breaks = getattr(tc, "graph_breaks", [])
    if breaks:
        out.append(_fit(f"{sum(b['count'] for b in breaks)} graph break(s), e.g. {break_headline(breaks[0]['reason'])}", 140))
    return out


def _generate_axes(ax: Any, gen: dict[str, Any], seen_keys: set[str]) -> None:
    """A generation's phases (report.generate), one bar each: the first call's phase as its steady
    median plus the phase's causes and what is left unattributed, labelled first vs steady."""
    from types import SimpleNamespace

    rows = gen["phases"]
    widest = 0.0
    for y, row in enumerate(rows):
        figures = row.get("clean", row)
        booked = [SimpleNamespace(cause=c["cause"], ms=c["ms"]) for c in row["causes"]]
        left = 0.0
        for key, ms in _segments(figures["steady_median_ms"], booked, figures["first_ms"]):
            label = None if key in seen_keys else ("steady" if key == "steady" else causes.label(key))
            seen_keys.add(key)
            ax.barh(y, ms, left=left, color=STEADY_COLOR if key == "steady" else _colour(key), edgecolor="white",
                    linewidth=0.6, hatch="//" if key == "unattributed" else None, label=label, height=0.6)
            left += ms
        ax.text(left, y, f"  first {figures['first_ms']:.2f} ms vs steady {figures['steady_median_ms']:.2f} ms",
                va="center", fontsize=9)
        widest = max(widest, left, figures["first_ms"])
    ax.set_yticks(range(len(rows)), ["prefill (TTFT)" if r["phase"] == "prefill" else r["phase"].replace("_", " ")
                                     for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, max(widest, 1e-3) * 1.45)
    ax.set_xlabel("time (ms)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    t = gen["ttft"]
    ax.set_title(f"generate {gen['new_tokens']} tokens: TTFT {t['first_ms']:.2f} ms vs {t['steady_median_ms']:.2f} ms steady "
                 f"({t.get('source', 'instrumented')}); causes: the instrumented first call's", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8.5, frameon=False)


SETUP_COLORS = ("#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#c6dbef", "#08519c")


def _setup_axes(ax: Any, setup: Any) -> None:
    """The set-up before the first pass on an axis of its own (its seconds would flatten the passes'
    milliseconds): one bar of its steps end to end, in the order they ran, each named in the legend
    with its time and the largest cause booked in it."""
    left = 0.0
    for i, step in enumerate(setup.steps):
        ms = float(step["ms"])
        booked = [c for c in setup.causes if c.module == step["name"] and c.cause != "unattributed"]
        top = max(booked, key=lambda c: c.ms, default=None)
        said = f", {causes.label(top.cause)} {_ms(top.ms)}" if top is not None else ""
        ax.barh(0, ms, left=left, color=SETUP_COLORS[i % len(SETUP_COLORS)], edgecolor="white", linewidth=0.6,
                height=0.6, label=_fit(f"{step['name']}: {_ms(ms)}{said}"))
        left += ms
    ax.text(left, 0, f"  {setup.ms:.2f} ms", va="center", fontsize=9)
    ax.set_yticks([0], ["set-up"])
    ax.set_xlim(0, max(left, setup.ms, 1e-3) * 1.3)
    ax.set_xlabel("time (ms)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title("the set-up before the first pass: its own time, not in the excess (steps end to end, in order)",
                 fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8.5, title="step: ms, its largest cause",
              title_fontsize=8.5, frameon=False)


RUN_TO_RUN = "run_to_run"  # the accounting's run-to-run difference: drawn as its own segment, never as a cause
RUN_TO_RUN_COLOUR = "#d9d9d9"


def _segments(steady_ms: float, causes: list[Any], total_ms: float, run_to_run_ms: float = 0.0) -> list[tuple[str, float]]:
    """steady + each cause (largest first) + the run-to-run difference (the accounting's, when positive) +
    what is left; unattributed is drawn only when positive, so the bar is the report's own figures."""
    by_cause: dict[str, float] = {}
    for c in causes:
        if c.cause != "unattributed":
            by_cause[c.cause] = by_cause.get(c.cause, 0.0) + c.ms
    out = [("steady", max(steady_ms, 0.0))]
    out += sorted(((k, v) for k, v in by_cause.items() if v > 0), key=lambda kv: -kv[1])
    if run_to_run_ms > 0:
        out.append((RUN_TO_RUN, run_to_run_ms))
    rest = total_ms - sum(v for _, v in out) - min(0.0, run_to_run_ms)
    if rest > 0:
        out.append(("unattributed", rest))
    return out


def _legend_entry(key: str, r: Any) -> str:
    if key == "steady":
        return f"steady work: {r.steady_median_ms:.2f} ms"
    if key == "unattributed":
        share = r.unattributed_ms / r.excess_ms if r.excess_ms > 0 else 0.0
        return f"unattributed: {r.unattributed_ms:.2f} ms ({share:.0%}, noise band {r.noise_band_ms:.2f} ms wide)"
    if key == RUN_TO_RUN:
        return (f"run-to-run difference: {r.accounting['run_to_run_ms']:.2f} ms (clean vs instrumented process; "
                "not a cause)")
    if not any(c.cause == key for c in r.causes):
        return f"{_label(key)}: seen re-run only"
    share = sum(c.share for c in r.causes if c.cause == key)
    kinds = sorted({c.evidence for c in r.causes if c.cause == key})
    return f"{_label(key)}: {r.cause_ms(key):.2f} ms ({share:.0%}, {'+'.join(kinds)})"


# -- a comparison: grouped bars ----------------------------------------------------------------
def _comparison_figure(Figure: Any, c: Any) -> Any:
    probe = c.kind == "probe"
    rows = [r for r in c.rows if any((cell.ms or 0) > 0 for cell in r.cells)] or c.rows
    n = len(c.labels)
    labels, devices = [_fit(lab) for lab in c.labels], [_fit(dev) for dev in c.devices]
    same_device = len(set(c.devices)) == 1
    totals = {row.key: [cell.ms or 0.0 for cell in row.cells] for row in c.summary}
    height = 0.8 / n
    fig = Figure(figsize=(12, 1.8 + 0.22 * n * max(len(rows), 1) + 0.5 * n), layout="constrained")
    ax = fig.add_subplot()
    for i, label in enumerate(labels):
        values = [row.cells[i].ms or 0.0 for row in rows]
        ys = [y + (i - (n - 1) / 2) * height for y in range(len(rows))]
        name = label if same_device else f"{label} ({devices[i]})"
        if not probe:
            name += f": first pass {totals['first pass'][i]:.1f} ms, excess {totals['excess'][i]:.1f} ms"
        bars = ax.barh(ys, values, height=height * 0.92, color=REPORT_COLORS[i % len(REPORT_COLORS)],
                       label=textwrap.fill(name, 44))
        ax.bar_label(bars, labels=[f" {_ms(v)}" if v > 0 else "" for v in values], fontsize=8)
    ax.set_yticks(range(len(rows)), [_fit(r.key) if probe else _label(r.key) for r in rows])
    ax.invert_yaxis()
    positive = [cell.ms for r in rows for cell in r.cells if (cell.ms or 0) > 0]
    top, low = (max(positive), min(positive)) if positive else (1.0, 1.0)
    unit = "first call (ms" if probe else "ms of the first-pass excess ("
    if probe or top / low > 50:  # a linear axis would flatten every bar but the largest
        ax.set_xscale("log")
        _plain_log_axis(ax.xaxis)
        ax.set_xlim(low / 3, top * 3)  # room for the value labels
        ax.set_xlabel(f"{unit}{', ' if probe else ''}log scale)")
    else:
        ax.set_xlim(0, top * 1.2)
        ax.set_xlabel("ms of the first-pass excess")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    what = "First call per op" if probe else "First-pass excess by cause"
    if same_device:
        who = f"on {devices[0]}: " + " vs ".join(labels)
    else:
        who = " vs ".join(f"{lab} on {dev}" for lab, dev in zip(labels, devices))
    settings = f"\n{textwrap.fill(_fit(settings_header(c), 400), 110)}" if c.kind == "trace" else ""
    ax.set_title(f"{what}\n{textwrap.fill(who, 110)}{settings}", fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8.5, frameon=False)  # beside the bars
    return fig


def settings_header(c: Any) -> str:
    """The trace comparison's settings in one line for the figure's title: those that differ, by name
    with every report's value, and how many a report cannot tell; "settings: identical" only when
    every report records every one alike."""
    if c.settings_identical():
        return "settings: identical"
    differ, unknown = c.settings_differ(), c.settings_unknown()
    said = "settings differ: " + "; ".join(setting_line(r) for r in differ) if differ else \
        "settings: the same wherever recorded"
    if unknown:
        said += f" ({len(unknown)} not recorded in every report: {', '.join(r.name for r in unknown)})"
    return said


# -- one probe report: first vs steady per op ------------------------------------------------------
def _probe_figure(Figure: Any, r: Any) -> Any:
    rows = r.rows()
    fig = Figure(figsize=(max(8.0, 0.9 * len(rows) + 3), 5.2), layout="constrained")
    ax = fig.add_subplot()
    xs = range(len(rows))
    for offset, key, name, color in ((-0.2, "first_ms", "first call", "#d62728"), (0.2, "steady_ms", "steady (median)", STEADY_COLOR)):
        values = [getattr(row, key) for _, row in rows]
        bars = ax.bar([x + offset for x in xs], values, width=0.38, color=color, label=name)
        ax.bar_label(bars, labels=[_ms(v) for v in values], fontsize=7.5)
    ax.set_xticks(list(xs), [f"{_fit(op)} {_fit(row.label)}\n{row.verdict}" for op, row in rows], rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    _plain_log_axis(ax.yaxis)
    ax.set_ylabel("time per call (ms, log scale)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title(f"{_fit(subject(r))} on {_fit(device(r))}: first call vs steady", fontsize=11)
    ax.legend(fontsize=9)
    return fig


# -- a repeated trace: each cause's median with its range over the runs ----------------------------
def _repeat_figure(Figure: Any, r: Any) -> Any:
    rows = [(c.cause, c.median_ms, c.min_ms, c.max_ms, f"{c.runs}/{c.of}") for c in r.causes if c.max_ms > 0]
    un = r.figures["unattributed_ms"]
    if un["max"] > 0:
        seen = sum(1 for run in r.runs if run.unattributed_ms > 0)
        rows.append(("unattributed", max(un["median"], 0.0), max(un["min"], 0.0), un["max"], f"{seen}/{len(r.runs)}"))
    fig = Figure(figsize=(12, 1.8 + 0.45 * max(len(rows), 1)), layout="constrained")
    ax = fig.add_subplot()
    ys = range(len(rows))
    medians = [m for _, m, _, _, _ in rows]
    errors = [[m - lo for _, m, lo, _, _ in rows], [hi - m for _, m, _, hi, _ in rows]]
    bars = ax.barh(list(ys), medians, xerr=errors, color=[_colour(k) for k, *_ in rows], height=0.6,
                   error_kw={"ecolor": "#333333", "capsize": 4, "linewidth": 1})
    ax.bar_label(bars, labels=[f"  {_ms(m)} (in {n} runs)" for _, m, _, _, n in rows], fontsize=8.5, padding=12)
    ax.set_yticks(list(ys), [_label(k) for k, *_ in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, max([hi for *_, hi, _ in rows] + [1e-3]) * 1.4)
    ax.set_xlabel("ms of the first-pass excess: median over the runs, whiskers min-max (a run without it counts 0)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    f, st, ex = (r.figures[k] for k in ("first_pass_ms", "steady_median_ms", "excess_ms"))
    ax.set_title(f"{_fit(subject(r))} on {_fit(device(r))}: {len(r.runs)} runs, each a fresh process\n"
                 f"first pass {_ms(f['median'])} ({_ms(f['min'])}-{_ms(f['max'])}), steady {_ms(st['median'])}, "
                 f"excess {_ms(ex['median'])} ({_ms(ex['min'])}-{_ms(ex['max'])})", fontsize=11)
    return fig


# -- a watch report: each key's p50 and p99, and what the events' causes took ---------------------
def _watch_figure(Figure: Any, r: Any) -> Any:
    keys = sorted(r.keys, key=lambda k: -k["calls"])[:16]
    causes_ = sorted(r.by_cause.items(), key=lambda kv: -kv[1]["ms"])
    fig = Figure(figsize=(12, 2.2 + 0.3 * max(len(keys), len(causes_), 1)), layout="constrained")
    left, right = fig.subplots(1, 2)
    ys = range(len(keys))
    left.barh([y - 0.2 for y in ys], [k["p50_ms"] for k in keys], height=0.4, color=REPORT_COLORS[0], label="p50")
    left.barh([y + 0.2 for y in ys], [k["p99_ms"] for k in keys], height=0.4, color=REPORT_COLORS[1], label="p99")
    left.set_yticks(list(ys), [_fit(k["key"], 40) for k in keys])
    left.invert_yaxis()
    positive = [v for k in keys for v in (k["p50_ms"], k["p99_ms"]) if v > 0]
    if positive and max(positive) / min(positive) > 50:
        left.set_xscale("log")
        _plain_log_axis(left.xaxis)
        left.set_xlabel("ms per call (log scale; quantiles from a sketch, within 12%)")
    else:
        left.set_xlabel("ms per call (quantiles from a sketch, within 12%)")
    left.legend(fontsize=8.5, frameon=False)
    left.set_title(f"calls by key ({len(keys)} of {len(r.keys)} keys, most called first)", fontsize=10)
    cy = range(len(causes_))
    bars = right.barh(list(cy), [v["ms"] for _, v in causes_], color=[_colour(c) for c, _ in causes_], height=0.6)
    right.bar_label(bars, labels=[f" {_ms(v['ms'])} in {int(v['events'])} events" for _, v in causes_], fontsize=8)
    right.set_yticks(list(cy), [_label(c) for c, _ in causes_])
    right.invert_yaxis()
    right.set_xlim(0, max([v["ms"] for _, v in causes_] + [1e-3]) * 1.5)
    right.set_xlabel("ms over the events kept")
    right.set_title("what the events' causes took", fontsize=10)
    fig.suptitle(f"warmprof watch: {_fit(r.model)}: {r.calls} calls, {r.events_kept} events", fontsize=11)
    return fig


RUN_PROCESSES = 12  # a run's waterfall: the longest-lived processes drawn, one row each


def _run_figure(Figure: Any, r: Any) -> Any:
    """A run's waterfall: one row per process on the run's clock, each phase a bar coloured by its largest
    cause (grey: none named), the ready and first-response marks as lines."""
    procs = sorted(r.processes, key=lambda p: -(p["end_ms"] - p["start_ms"]))[:RUN_PROCESSES]
    procs.sort(key=lambda p: p["start_ms"])
    fig = Figure(figsize=(12, 1.8 + 0.45 * max(len(procs), 1)), layout="constrained")
    ax = fig.subplots()
    seen: dict[str, str] = {}
    for y, p in enumerate(procs):
        for ph in p["phases"]:
            causes = ph.get("causes") or []
            top = max(causes, key=lambda c: c["ms"])["cause"] if causes else ""
            colour = _colour(top) if top and not ph.get("own") else "#bbbbbb"
            ax.barh(y, ph["ms"], left=ph["start_ms"], height=0.6, color=colour, edgecolor="none")
            if top and not ph.get("own"):
                seen.setdefault(top, colour)
    for mark, style in ((r.ready, "-"), (r.first_response, "--")):
        if mark and mark.get("ms") is not None:
            ax.axvline(mark["ms"], color="black", linestyle=style, linewidth=1)
    ax.set_yticks(list(range(len(procs))), [_fit(f"{p['role']} ({p['pid']})", 40) for p in procs])
    ax.invert_yaxis()
    ax.set_xlabel("ms from the command's start (solid line: ready; dashed: first response)")
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=_label(k)) for k, c in seen.items()] + [Patch(color="#bbbbbb", label="no cause named")]
    ax.legend(handles=handles, fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ready = f"ready at {_ms(r.ready['ms'])}" if r.ready else "no ready point"
    fig.suptitle(f"warmprof run: {_fit(' '.join(r.command), 80)}: {len(r.processes)} process(es), {ready}", fontsize=11)
    return fig


# -- the renderer: one figure per kind, chosen by the kind the registry names --------------------
_FIGURES = {"trace": _trace_figure, "probe": _probe_figure, "trace_repeat": _repeat_figure, "watch": _watch_figure,
            "comparison": _comparison_figure, "run": _run_figure}


@register
class PngRenderer(Renderer):
    format = "png"
    kinds = tuple(_FIGURES)
    extension = ".png"
    binary = True
    about = "a chart"

    def render(self, obj: Any) -> bytes:
        fig = figure(obj)
        buf = io.BytesIO()
        with _drawing():
            fig.savefig(buf, format="png", dpi=DPI)
        return buf.getvalue()


def _drawing() -> Any:
    """The settings every figure is built and drawn under. Names come from users (a model called
    "net$2$" is not mathtext): every string is drawn as given; the log axes' labels are plain
    numbers (_plain_log_axis), so nothing needs mathtext."""
    import matplotlib

    return matplotlib.rc_context({"text.parse_math": False, "axes.formatter.use_mathtext": False})


def figure(obj: Any, draw: bool = False) -> Any:
    """The figure PngRenderer saves for `obj` (a trace report, a probe report or a comparison), on
    an Agg canvas; `draw` draws it once, as savefig would, so its tick labels are what the PNG shows."""
    kind = kind_of(obj)
    if kind not in _FIGURES:
        raise WarmprofError(f"cannot draw {kind!r} as a PNG")
    figure_cls, canvas_cls = _matplotlib()
    with _drawing():
        fig = _FIGURES[kind](figure_cls, obj)
        canvas_cls(fig)
        if draw:
            fig.canvas.draw()
    return fig

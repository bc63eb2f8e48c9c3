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
from typing import Any

from ..errors import WarmprofError
from ..platform import describe_device
from .base import Renderer
from .compare_text import op_key

CAUSE_LABELS = {
    "jit_compile": "JIT compile", "algorithm_selection": "algorithm selection", "graph_capture": "graph capture",
    "allocator_growth": "allocator growth", "runtime_init": "runtime init", "data_transfer": "data transfer",
    "clock_ramp": "clock ramp", "profiler_overhead": "profiler overhead", "unattributed": "unattributed",
}
CAUSE_COLORS = {
    "jit_compile": "#d62728", "algorithm_selection": "#ff7f0e", "graph_capture": "#9467bd",
    "allocator_growth": "#bcbd22", "runtime_init": "#1f77b4", "data_transfer": "#17becf",
    "clock_ramp": "#e377c2", "profiler_overhead": "#8c564b", "unattributed": "#d9d9d9",
}
STEADY_COLOR = "#7f7f7f"
REPORT_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
DPI = 120


class PngRenderer(Renderer):
    extension = ".png"
    binary = True

    def render(self, obj: Any) -> bytes:
        figure_cls, canvas_cls = _matplotlib()
        if getattr(obj, "KIND", None) == "trace":
            fig = _trace_figure(figure_cls, obj)
        elif getattr(obj, "KIND", None) == "probe":
            fig = _probe_figure(figure_cls, obj.to_dict(), obj)
        elif hasattr(obj, "rows") and hasattr(obj, "labels"):
            fig = _comparison_figure(figure_cls, obj)
        else:
            raise WarmprofError(f"cannot draw a {type(obj).__name__} as a PNG")
        canvas_cls(fig)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI)
        return buf.getvalue()


def _matplotlib() -> tuple[Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise WarmprofError("PNG export needs matplotlib: pip install 'warmprof[plot]'") from None
    return Figure, FigureCanvasAgg


def _label(cause: str) -> str:
    return CAUSE_LABELS.get(cause, cause.replace("_", " "))


def _subject(report: Any) -> str:
    shape = f" ({', '.join(str(d) for d in report.shape)})" if report.shape else ""
    comp = f", compile={report.compile}" if report.compile else ""
    return f"{report.model}{shape}{comp}"


# -- one trace report: stacked bars ------------------------------------------------------------
def _trace_figure(Figure: Any, r: Any) -> Any:
    device = describe_device(r.platform, r.device)
    first = _segments(r.steady_median_ms, r.causes, r.first_pass_ms)
    rerun = _segments(min(r.steady_median_ms, r.seen_rerun_ms), r.seen_rerun_causes, r.seen_rerun_ms)
    bars = [("first pass", first), ("seen re-run", rerun), ("steady (median)", [("steady", r.steady_median_ms)])]
    fig = Figure(figsize=(10, 4.6), layout="constrained")
    ax = fig.add_subplot()
    seen: set[str] = set()
    for y, (_, segments) in enumerate(bars):
        left = 0.0
        for key, ms in segments:
            label = None
            if key not in seen:
                seen.add(key)
                label = _legend_entry(key, r) if y == 0 or key != "steady" else None
            hatch = "//" if key == "unattributed" else None
            ax.barh(y, ms, left=left, color=STEADY_COLOR if key == "steady" else CAUSE_COLORS.get(key, "#aaaaaa"),
                    edgecolor="white", linewidth=0.6, hatch=hatch, label=label, height=0.6)
            left += ms
        ax.text(left, y, f"  {left:.2f} ms", va="center", fontsize=9)
    ax.set_yticks(range(len(bars)), [name for name, _ in bars])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, max(r.first_pass_ms, r.seen_rerun_ms, r.steady_median_ms, 1e-3) * 1.18)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title(f"{_subject(r)} on {device}\nfirst pass {r.first_pass_ms:.2f} ms vs steady {r.steady_median_ms:.2f} ms:"
                 f" {r.excess_ms:.2f} ms excess, split by cause", fontsize=11)
    ax.legend(loc="lower right", fontsize=8.5, title="cause: ms (share of excess)", title_fontsize=8.5)
    return fig


def _segments(steady_ms: float, causes: list[Any], total_ms: float) -> list[tuple[str, float]]:
    """steady + each cause (largest first) + what is left; unattributed is drawn only when positive."""
    by_cause: dict[str, float] = {}
    for c in causes:
        if c.cause != "unattributed":
            by_cause[c.cause] = by_cause.get(c.cause, 0.0) + c.ms
    out = [("steady", max(steady_ms, 0.0))]
    out += sorted(((k, v) for k, v in by_cause.items() if v > 0), key=lambda kv: -kv[1])
    rest = total_ms - sum(v for _, v in out)
    if rest > 0:
        out.append(("unattributed", rest))
    return out


def _legend_entry(key: str, r: Any) -> str:
    if key == "steady":
        return f"steady work: {r.steady_median_ms:.2f} ms"
    if key == "unattributed":
        share = r.unattributed_ms / r.excess_ms if r.excess_ms > 0 else 0.0
        return f"unattributed: {r.unattributed_ms:.2f} ms ({share:.0%}, noise band ±{r.noise_band_ms:.2f} ms)"
    ms = r.cause_ms(key)
    share = sum(c.share for c in r.causes if c.cause == key)
    return f"{_label(key)}: {ms:.2f} ms ({share:.0%})"


# -- a comparison: grouped bars ----------------------------------------------------------------
def _comparison_figure(Figure: Any, c: Any) -> Any:
    probe = c.kind == "probe"
    rows = [r for r in c.rows if any((cell.ms or 0) > 0 for cell in r.cells)] or c.rows
    n = len(c.labels)
    totals = {row.key: [cell.ms or 0.0 for cell in row.cells] for row in c.summary}
    height = 0.8 / n
    fig = Figure(figsize=(10, 1.6 + 0.22 * n * max(len(rows), 1) + 0.5 * n), layout="constrained")
    ax = fig.add_subplot()
    for i, (label, device) in enumerate(zip(c.labels, c.devices)):
        values = [row.cells[i].ms or 0.0 for row in rows]
        ys = [y + (i - (n - 1) / 2) * height for y in range(len(rows))]
        summary = "" if probe else f": first pass {totals['first pass'][i]:.1f} ms, excess {totals['excess'][i]:.1f} ms"
        bars = ax.barh(ys, values, height=height * 0.92, color=REPORT_COLORS[i % len(REPORT_COLORS)],
                       label=f"{label} ({device}){summary}")
        ax.bar_label(bars, labels=[f" {v:.2f}" if v > 0 else "" for v in values], fontsize=8)
    ax.set_yticks(range(len(rows)), [_label(r.key) if not probe else r.key for r in rows])
    ax.invert_yaxis()
    if probe:
        ax.set_xscale("log")
        ax.set_xlabel("first call (ms, log scale)")
    else:
        ax.set_xlabel("share of the first-pass excess (ms)")
        ax.set_xlim(0, max([cell.ms or 0 for r in rows for cell in r.cells] + [1e-3]) * 1.2)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    what = "first call per op" if probe else "first-pass excess by cause"
    ax.set_title(f"{what}: " + " vs ".join(f"{lab} ({dev})" for lab, dev in zip(c.labels, c.devices)),
                 fontsize=11, wrap=True)
    ax.legend(loc="lower right", fontsize=8.5)
    return fig


# -- one probe report: first vs steady per op ------------------------------------------------------
def _probe_figure(Figure: Any, d: dict[str, Any], report: Any) -> Any:
        ops = [op for op in d.get("ops") or [] if isinstance(op, dict)]
    device = describe_device(d.get("platform") or {}, str(d.get("device", "")))
    fig = Figure(figsize=(max(8, 0.9 * len(ops) + 3), 5), layout="constrained")
    ax = fig.add_subplot()
    xs = range(len(ops))
    for offset, key, name, color in ((-0.2, "first_ms", "first call", "#d62728"), (0.2, "steady_ms", "steady", STEADY_COLOR)):
        values = [float(op.get(key) or 0.0) for op in ops]
        bars = ax.bar([x + offset for x in xs], values, width=0.38, color=color, label=name)
        ax.bar_label(bars, labels=[f"{v:.3g}" for v in values], fontsize=7.5)
    ax.set_xticks(list(xs), [f"{op_key(op)}\n{op.get('verdict') or ''}" for op in ops], rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("time per call (ms, log scale)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title(f"op probes on {device}: first call vs steady", fontsize=11)
    ax.legend(fontsize=9)
    return fig

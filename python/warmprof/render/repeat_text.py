"""Text renderer for a repeated trace: every run in a row, then each cause's median and range over
the runs and in how many it appeared, then the advice on the medians."""

from __future__ import annotations

from typing import Any

from .base import Renderer
from .format import ms as _ms
from .format import subject, table
from .registry import register
from .safe import one_line

_RANGE_TITLES = {"first_pass_ms": "first pass", "steady_median_ms": "steady median", "excess_ms": "excess",
                 "noise_band_ms": "noise band", "unattributed_ms": "unattributed"}


def _range(lo: float, hi: float) -> str:
    if lo == hi:
        return _ms(lo)
    if lo < 0:  # "-13.9 ms--4.85 ms" would read as a typo
        return f"{_neg(lo)} to {_neg(hi)}"
    return f"{_ms(lo)}-{_ms(hi)}"


def _neg(v: float) -> str:
    return f"-{_ms(-v)}" if v < 0 else _ms(v)


@register
class RepeatTextRenderer(Renderer):
    format = "text"
    kinds = ("trace_repeat",)
    extension = ".txt"

    def render(self, report: Any) -> str:
        r = report
        n = len(r.runs)
        mode = f"torch.compile({r.compile})" if r.compile else "eager"
        runs = "1 run (a fresh process)" if n == 1 else f"{n} runs (each a fresh process)"
        lines = [f"warmprof trace, {runs}: {subject(r)} on {one_line(r.device)}, {one_line(mode)}"]
        figures = [f"{title} {_neg(r.figures[key]['median'])} ({_range(r.figures[key]['min'], r.figures[key]['max'])})"
                   for key, title in _RANGE_TITLES.items() if key in r.figures]
        lines.append("  medians (range over the runs): " + " | ".join(figures[:3]))
        lines.append("  " + " | ".join(figures[3:]))
        lines.append("")
        rows = [[c.cause, _neg(c.median_ms), _range(c.min_ms, c.max_ms), f"{c.runs}/{c.of}", c.evidence]
                for c in r.causes]
        rr = r.figures.get("run_to_run_ms")
        if rr is not None:  # the accounting's run-to-run difference: its own row, never a cause
            moved = sum(1 for run in r.runs if abs(float((run.accounting or {}).get("run_to_run_ms", 0.0))) > 0)
            rows.append(["run-to-run", _neg(rr["median"]), _range(rr["min"], rr["max"]), f"{moved}/{n}",
                         "clean - instrumented"])
        un = r.figures.get("unattributed_ms")
        if un is not None:
            seen = sum(1 for run in r.runs if run.unattributed_ms > 0)
            rows.append(["unattributed", _neg(un["median"]), _range(un["min"], un["max"]), f"{seen}/{n}", "residual"])
        lines += table(["cause", "median", "range (min-max)", "in runs", "evidence"], rows, right={1, 2, 3}, rule=True)
        lines.append("  (a run without a cause counts as 0 ms: the median is what a fresh process can expect)")
        lines.append("")
        lines.append("  runs:")
        run_rows = []
        for k, run in enumerate(r.runs, 1):
            top = max((c for c in run.causes if c.cause != "unattributed"), key=lambda c: c.ms, default=None)
            run_rows.append([str(k), _ms(run.first_pass_ms), _ms(run.steady_median_ms), _neg(run.excess_ms),
                             _ms(run.noise_band_ms), f"{top.cause} {_ms(top.ms)}" if top else "-"])
        lines += ["  " + ln for ln in table(["run", "first pass", "steady", "excess", "noise band", "largest cause"],
                                            run_rows, right={0, 1, 2, 3, 4}, rule=True)]
        if r.failed:
            lines.append(f"  {len(r.failed)} run(s) gave no report: " + "; ".join(one_line(f) for f in r.failed))
        if r.advice:
            lines += ["", "  advice (on the medians):"] + [f"    - {one_line(a)}" for a in r.advice]
        if r.notes:
            lines += ["", "  notes:"] + [f"    - {one_line(x)}" for x in r.notes]
        return "\n".join(lines) + "\n"

"""A comparison as text: what differs between the platforms, then the table, largest change first."""

from __future__ import annotations

import string
from typing import Any

from ..report.trace import break_headline
from .base import Renderer
from .format import ms_cell, setting_line, subject, table
from .registry import register
from .safe import one_line

_WIDE = 100  # a "differs" line longer than this is stacked, one report per line


@register
class CompareTextRenderer(Renderer):
    format = "text"
    kinds = ("comparison",)
    extension = ".txt"

    def render(self, comparison: Any) -> str:
        c = comparison
        letters = _letters(len(c.labels))
        lines = [f"warmprof compare: {len(c.labels)} {c.kind} reports (ratios are to {letters[0]})"]
        lines += _legend(c, letters)
        if c.kind == "trace":  # settings one by one (the settings record), then the platform
            lines += [""] + _settings(c, letters)
            lines += ["", "platform differs"] + _differs(c.differs, letters) if c.differs else ["", "platform: identical"]
        elif c.differs:
            lines += ["", "differs"] + _differs(c.differs, letters)
        else:
            lines += ["", "platform and settings: identical"]
        if c.warnings:
            lines += [""] + [f"warning: {w}" for w in c.warnings]
        if c.kind == "run":  # phases by process role, then the causes on the path to ready
            lines += [""] + _summary_table(c.summary, letters)
            shown = c.rows[:RUN_ROWS]
            lines += [""] + _summary_table(shown, letters, "process: phase, or a cause on the path (largest change first)")
            if len(c.rows) > len(shown):
                lines.append(f"  ({len(c.rows) - len(shown)} rows with smaller changes not shown; --json has them all)")
        elif c.kind in ("trace", "watch"):
            lines += [""] + _summary_table(c.summary, letters)
            lines += [""] + _cause_table(c.rows, letters)
            lines += _compile_lines(getattr(c, "compile", []), letters)
        else:
            lines += [""] + _op_table(c.rows, letters)
            if c.predictions:
                lines += [""] + _prediction_table(c.predictions, letters)
        return "\n".join(lines) + "\n"  # Renderer.output escapes control characters: labels come from users


def _compile_lines(details: list[Any], letters: list[str]) -> list[str]:
    """Each compiled report's torch.compile detail: its compiles and recompiles, the inductor cache,
    and every recompile's guard text (grouped as the report groups them)."""
    if not any(details):
        return []
    out = ["", "torch.compile"]
    for letter, d in zip(letters, details):
        if d is None:
            out.append(f"  {letter}: compiled nothing")
            continue
        out.append(f"  {letter}: {d['compiles']} compile(s), {d['recompiles']} of them recompiles, torch reports "
                   f"{d['torch_ms']:.1f} ms; inductor cache: {d['inductor_cache']}")
        out += [f"     recompiled {g['count']}x, {g['ms']:.1f} ms: {g['example']}" for g in d["reasons"]]
        out += [f"     graph break {b['count']}x: {break_headline(b['reason'])}" for b in d.get("graph_breaks", [])]
    return out


def _letters(n: int) -> list[str]:
    abc = string.ascii_uppercase
    return [abc[i] if i < 26 else f"R{i + 1}" for i in range(n)]


def _legend(c: Any, letters: list[str]) -> list[str]:
    labels = [one_line(lab) for lab in c.labels]  # a label is one line, whatever it holds
    width = max(len(lab) for lab in labels)
    out = []
    for letter, label, device, source, report in zip(letters, labels, c.devices, c.sources, c.reports or [None] * len(labels)):
        what = subject(report)
        src = f"  [{one_line(source)}]" if source and source != label else ""
        out.append(f"  {letter}  {label:<{width}}  {what + ' ' if what else ''}on {one_line(device)}{src}")
    return out


def _settings(c: Any, letters: list[str]) -> list[str]:
    """Each setting that differs, by name with every report's value ("threads: 1 vs 2"); which settings
    a report cannot tell; "settings: identical" only when every report records every one alike."""
    if c.settings_identical():
        return ["settings: identical"]
    differ, unknown = c.settings_differ(), c.settings_unknown()
    out = (["settings that differ"] + [f"  {setting_line(row)}" for row in differ] if differ
           else ["settings: the same wherever the reports record them"])
    if unknown:
        out.append("settings it cannot tell (a report written before reports recorded their settings)")
        for i, letter in enumerate(letters):
            names = [row.name for row in unknown if row.values[i] is None]
            if names:
                out.append(f"  {letter}: {', '.join(names)}")
    return out


def _differs(differs: list[tuple[str, list[str]]], letters: list[str]) -> list[str]:
    keyw = max(len(k) for k, _ in differs)
    valw = max(len(v) for _, vals in differs for v in vals)
    out = []
    for key, values in differs:
        cells = [f"{letter}: {v}" for letter, v in zip(letters, values)]
        line = f"  {key:<{keyw}}  " + "   ".join(f"{cell:<{valw + 3}}" for cell in cells).rstrip()
        if len(line) <= _WIDE:
            out.append(line)
        else:
            out.append(f"  {key:<{keyw}}  {cells[0]}")
            out += [f"  {'':<{keyw}}  {cell}" for cell in cells[1:]]
    return out


def fmt_share(share: float | None, ms: float | None) -> str:
    if share is None or (not ms and not share):
        return "-"
    return f"{share * 100:.1f}%"


def fmt_ratio(ratio: float | None, ms: float | None, base: float | None) -> str:
    if ratio is not None:
        return "gone" if ratio == 0 and (base or 0) > 0 else f"x{ratio:.2f}"
    if ms and ms > 0 and not base:  # absent or zero in the baseline, present here
        return "new"
    return "-"  # no ratio to a negative baseline (a residual below zero), or nothing on either side


def _figures_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """The row's name left-aligned, its figures right-aligned."""
    return table(header, rows, right=range(1, len(header)))


def _ratio_cols(row: Any, i: int) -> list[str]:
    base = row.cells[0].ms
    return [] if i == 0 else [fmt_ratio(row.ratios[i], row.cells[i].ms, base)]


RUN_ROWS = 25  # a run comparison's rows shown in text


def _summary_table(rows: list[Any], letters: list[str], title: str = "") -> list[str]:
    header = [title]
    for i, letter in enumerate(letters):
        header += [f"{letter} ms"] + ([f"{letter}/{letters[0]}"] if i else [])
    body = []
    for row in rows:
        cells = [row.key]
        for i, cell in enumerate(row.cells):
            cells += [ms_cell(cell.ms)] + _ratio_cols(row, i)
        body.append(cells)
    return _figures_table(header, body)


def _cause_table(rows: list[Any], letters: list[str]) -> list[str]:
    header = ["cause (share of each excess)"]
    for i, letter in enumerate(letters):
        header += [f"{letter} ms", "share", "evidence"] + ([f"{letter}/{letters[0]}"] if i else [])
    body = []
    for row in rows:
        cells = [row.key]
        for i, cell in enumerate(row.cells):
            evidence = (cell.evidence or "-") if cell.ms else "-"
            cells += [ms_cell(cell.ms), fmt_share(cell.share, cell.ms), evidence] + _ratio_cols(row, i)
        body.append(cells)
    return _figures_table(header, body)


def _op_table(rows: list[Any], letters: list[str]) -> list[str]:
    header = ["op and shape (first call, steady, in ms)"]
    for i, letter in enumerate(letters):
        header += [f"{letter} first", f"{letter} steady", "verdict"] + ([f"{letter}/{letters[0]}"] if i else [])
    body = []
    for row in rows:
        cells = [row.key]
        for i, cell in enumerate(row.cells):
            cells += [ms_cell(cell.ms), ms_cell(cell.steady_ms), cell.verdict or "-"] + _ratio_cols(row, i)
        body.append(cells)
    if not body:
        return ["  (no op rows in these reports)"]
    return _figures_table(header, body)


def _prediction_table(predictions: list[Any], letters: list[str]) -> list[str]:
    header = ["prediction"] + letters + ["claim"]
    body = [[p.id] + ["-" if h is None else "holds" if h else "fails" for h in p.holds] + [p.claim] for p in predictions]
    out = table(header, body)
    for p in predictions:  # the figures behind each verdict, one report per line
        out += [f"  {p.id} {letter}: {figure}" for letter, figure in zip(letters, p.figures) if figure not in (None, "")]
    return out

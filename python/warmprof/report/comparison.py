"""Two or more reports side by side, as data: which cause (or op) moved, and on what platforms.

`compare(a, b, ...)` takes reports or paths to saved reports, all of one kind (trace or probe; a
repeated trace, `trace --repeat N`, is compared as a trace by its per-cause medians), and returns a
`Comparison`; renderers turn it into text (render/compare_text.py), JSON or a PNG.
Every figure in a comparison is one of the reports' own figures, or a ratio of two of them.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..causes import EVIDENCE
from ..errors import InputError, ReportError
from ..stats import median
from ..system.platform import describe_device
from . import SCHEMA_VERSION, ReportBase, load
from . import settings as trace_settings
from .trace import inputs_label, shown_compile

# Report settings that are part of the configuration being compared (shown when they differ). A trace
# report's are its settings record (report/settings.py), compared setting by setting (SettingRow).
_PROBE_SETTINGS = ("device", "backend", "dtype")
# Platform keys a trace's settings record already compares (torch's version, and its threads as measured)
_PLATFORM_IN_SETTINGS = ("torch", "torch_threads")
_SUMMARY = (("first pass", "first_pass_ms"), ("seen re-run", "seen_rerun_ms"),
            ("steady median", "steady_median_ms"), ("excess", "excess_ms"))


@dataclass
class Cell:
    """One report's figures in a row; ms is None where the row is absent from that report."""

    ms: float | None
    share: float | None = None  # of that report's excess (trace causes)
    steady_ms: float | None = None  # probe ops
    verdict: str = ""  # probe ops
    evidence: str = ""  # trace causes: how the report knows, e.g. "measured" or "measured+estimated"


@dataclass
class Row:
    key: str  # cause id, "op shape", or a summary line's name
    cells: list[Cell]
    ratios: list[float | None]  # each report's ms over the first report's; None where undefined
    change_ms: float  # the largest |ms - first report's ms|: what the rows are sorted by


@dataclass
class PredictionRow:
    id: str
    claim: str
    holds: list[bool | None]  # None: the prediction is absent from that report
    figures: list[Any]


@dataclass
class SettingRow:
    """One setting of the trace reports compared (report/settings.py COMPARED): how it reads in each
    report, None where that report cannot tell (written before the settings record)."""

    key: str  # the settings record's field
    name: str  # for people: "op view"
    values: list[str | None]

    @property
    def differs(self) -> bool:
        """Two reports that record it give different values."""
        return len({v for v in self.values if v is not None}) > 1

    @property
    def known(self) -> bool:
        return all(v is not None for v in self.values)


@dataclass
class Comparison:
    KIND: ClassVar[str] = "comparison"  # what the render registry calls it (a report's KIND is "trace"/"probe")
    kind: str  # the kind of the reports compared: "trace" | "probe"
    labels: list[str]
    sources: list[str]  # the file each report came from ("" for an in-memory report)
    devices: list[str]  # a short device name per report, for titles
    differs: list[tuple[str, list[str]]]  # platform keys (and a probe's or watch's settings) whose values differ
    warnings: list[str]
    summary: list[Row]  # trace: first pass, seen re-run, steady median, excess
    rows: list[Row]  # trace: one per cause; probe: one per op and shape
    predictions: list[PredictionRow] = field(default_factory=list)
    settings: list[SettingRow] = field(default_factory=list)  # trace reports: every compared setting
    # trace reports: each report's torch.compile figures (compile_detail), None for one that compiled nothing
    compile: list[dict[str, Any] | None] = field(default_factory=list)
    reports: list[ReportBase] = field(default_factory=list, repr=False)

    def settings_differ(self) -> list[SettingRow]:
        return [r for r in self.settings if r.differs]

    def settings_unknown(self) -> list[SettingRow]:
        """Settings some report cannot tell (it was written before the settings record)."""
        return [r for r in self.settings if not r.known]

    def settings_identical(self) -> bool:
        """Every report records every setting, with the same value: only then are they identical."""
        return all(r.known and not r.differs for r in self.settings)

    def to_dict(self) -> dict[str, Any]:
        """JSON of the comparison itself (kind "comparison": load() refuses it as a report)."""
        return {
            "schema_version": SCHEMA_VERSION, "kind": "comparison", "report_kind": self.kind,
            "labels": self.labels, "sources": self.sources, "devices": self.devices,
            "differs": [{"key": k, "values": v} for k, v in self.differs], "warnings": self.warnings,
            "summary": [asdict(r) for r in self.summary], "rows": [asdict(r) for r in self.rows],
            "predictions": [asdict(p) for p in self.predictions],
            **({"settings": [dict(asdict(r), differs=r.differs, known=r.known) for r in self.settings],
                "settings_identical": self.settings_identical(), "compile": self.compile} if self.kind == "trace" else {}),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def __str__(self) -> str:
        from .base import as_text

        return as_text(self)  # the "text" format, as for str() of a report


def compare(*reports: ReportBase | str | os.PathLike, labels: list[str] | None = None) -> Comparison:
    """Compare reports (objects or paths) of one kind; the first is the baseline of every ratio."""
    if len(reports) == 1 and isinstance(reports[0], (list, tuple)):
        reports = tuple(reports[0])
    if len(reports) < 2:
        raise InputError(f"compare needs at least two reports, got {len(reports)}")
    given: list[Any] = [_as_report(r) for r in reports]  # of any kind: their fields are read by KIND
    sources = [str(r) if isinstance(r, (str, os.PathLike)) else "" for r in reports]
    if labels is None:
        labels = _default_labels(sources)
    elif len(labels) != len(given):
        raise InputError(f"{len(labels)} labels for {len(given)} reports")
    # A repeated trace (`trace --repeat N`) is compared by its medians, and says so.
    repeated = [(lab, len(r.runs)) for lab, r in zip(labels, given) if r.KIND == "trace_repeat"]
    loaded = [r.median_view() if r.KIND == "trace_repeat" else r for r in given]
    kinds = [r.KIND for r in loaded]
    if len(set(kinds)) > 1:
        named = ", ".join(f"{lab}: {k}" for lab, k in zip(labels, kinds))
        raise ReportError(f"cannot compare reports of different kinds ({named}); compare trace with trace, probe with probe")
    kind = kinds[0]
    if kind not in ("trace", "probe", "watch", "run"):
        raise ReportError(f"cannot compare {kind!r} reports (only trace, probe, watch and run reports)")
    predictions: list[PredictionRow]
    if kind == "trace":
        summary = [_row(name, [Cell(float(getattr(r, key))) for r in loaded]) for name, key in _SUMMARY]
        # warmprof's own cost is its own line, never one of the causes (traces/fold.py)
        for name, key in (("warmprof's own cost, first pass", "first_pass_ms"),
                          ("warmprof's own cost, per pass", "steady_ms")):
            # a figure under zero is the machine's noise, not a saving: no negative cost is shown ("-")
            cells = [Cell(v if v is None or v >= 0 else None)
                     for v in (_number((getattr(r, "own_cost", None) or {}).get(key)) for r in loaded)]
            if any(c.ms is not None for c in cells):
                summary.append(_row(name, cells))
        # the accounting's run-to-run difference (clean vs instrumented process): its own row, never a cause
        acc_cells = [Cell(_number((getattr(r, "accounting", None) or {}).get("run_to_run_ms")) if r.clean else None)
                     for r in loaded]
        if any(c.ms is not None for c in acc_cells):
            summary.append(_row("run-to-run difference", acc_cells))
        summary += _generate_rows(loaded)
        if any(c is not None for c in (compile_detail(r) for r in loaded)):
            summary.append(_row("torch's compile time", [Cell((compile_detail(r) or {}).get("torch_ms")) for r in loaded]))
        rows, predictions = _cause_rows(loaded), []
    elif kind == "watch":
        summary = [_row(name, [Cell(fn(r)) for r in loaded]) for name, fn in _WATCH_SUMMARY]
        rows, predictions = _watch_cause_rows(loaded), []
    elif kind == "run":
        summary = [_row(name, [Cell(fn(r)) for r in loaded]) for name, fn in _RUN_SUMMARY]
        rows, predictions = _run_rows(loaded), []
    else:
        dicts = [r.to_dict() for r in loaded]  # read through the probe report's JSON contract
        summary, rows, predictions = [], _op_rows(dicts), _prediction_rows(dicts)
    medians = [f"{lab}: the median of {n} runs (each a fresh process), cause by cause; its ranges are in "
               "`warmprof show` of that report" for lab, n in repeated]
    return Comparison(
        kind=kind, labels=list(labels), sources=sources,
        devices=[describe_device(r.platform or {}, getattr(r, "device", "") or "cpu") for r in loaded],
        differs=_differs(loaded, kind), warnings=medians + _warnings(loaded, labels, kind),
        summary=summary, rows=rows, predictions=predictions, reports=loaded,
        settings=_setting_rows(loaded) if kind == "trace" else [],
        compile=[compile_detail(r) for r in loaded] if kind == "trace" else [],
    )


_RUN_SUMMARY = (
    ("start to ready", lambda r: (r.to_ready or {}).get("ms")),
    ("start to first response", lambda r: (r.to_first_response or {}).get("ms")),
    ("the whole run", lambda r: r.duration_ms),
)


def _run_rows(reports: list[Any]) -> list[Row]:
    """Run reports: each (process role: phase)'s time, summed over the processes of that role, then each
    cause's time on the path to ready; largest change first."""
    def phases(r: Any) -> dict[str, float]:
        out: dict[str, float] = {}
        for p in r.processes:
            for ph in p["phases"]:
                key = f"{p['role']}: {ph['name']}"
                out[key] = out.get(key, 0.0) + ph["ms"]
        return out

    tables = [phases(r) for r in reports]
    keys = list(dict.fromkeys(k for t in tables for k in t))
    rows = [_row(k, [Cell(t.get(k)) for t in tables]) for k in keys]
    paths = [(r.to_ready or {}).get("by_cause", {}) for r in reports]
    causes = list(dict.fromkeys(c for p in paths for c in p))
    rows += [_row(f"on the path to ready: {c}", [Cell(p.get(c)) for p in paths]) for c in causes]
    return _by_largest_change(rows)


def run_details(reports: list[Any]) -> list[tuple[str, list[str]]]:
    """What an engine said of each report's phases that differs (vLLM's compile cache across its warm-up)."""
    def said(r: Any) -> dict[str, str]:
        return {f"{p['role']}: {ph['name']}": ph["detail"] for p in r.processes for ph in p["phases"]
                if ph.get("source") == "vllm" and ph.get("detail")}

    tables = [said(r) for r in reports]
    out = []
    for key in dict.fromkeys(k for t in tables for k in t):
        values = [t.get(key, "-") for t in tables]
        if len(set(values)) > 1:
            out.append((key, values))
    return out


def compile_detail(r: Any) -> dict[str, Any] | None:
    """A trace report's torch.compile figures as compare shows them: torch's compile time, the compiles,
    the recompiles with each guard's text (grouped), the inductor cache; None where nothing compiled."""
    tc = shown_compile(r)
    if tc is None:
        return None
    return {"torch_ms": float(tc.torch_reported_ms), "compiles": int(tc.compiles), "recompiles": int(tc.recompiled),
            "inductor_cache": str(tc.inductor_cache),
            "reasons": [{"count": int(g["count"]), "ms": float(g.get("ms", 0.0)), "example": str(g["example"])}
                        for g in tc.recompiles],
            "graph_breaks": [dict(b) for b in getattr(tc, "graph_breaks", [])]}


def _generate_rows(reports: list[Any]) -> list[Row]:
    """A generate trace's time to first token and each phase's first call (rows only where some
    report has them; a report without is an absent cell)."""
    gens = [getattr(r, "generate", None) or None for r in reports]
    if not any(gens):
        return []
    rows = [_row("time to first token", [Cell(g["ttft"]["first_ms"] if g else None) for g in gens]),
            _row("TTFT excess", [Cell(g["ttft"]["excess_ms"] if g else None) for g in gens])]
    for phase in ("first_decode", "rest"):
        cells = []
        for g in gens:
            row = next((p for p in (g or {}).get("phases", []) if p["phase"] == phase), None)
            cells.append(Cell(row.get("clean", row)["excess_ms"] if row else None))
        if any(c.ms is not None for c in cells):
            rows.append(_row(f"{phase.replace('_', ' ')} excess", cells))
    return rows


def _as_report(r: ReportBase | str | os.PathLike) -> ReportBase:
    if isinstance(r, ReportBase):
        return r
    if isinstance(r, (str, os.PathLike)):
        return load(r)
    raise InputError(f"compare takes reports or paths to saved reports, not {type(r).__name__}")


def _default_labels(sources: list[str]) -> list[str]:
    labels = [Path(s).stem if s else f"report {i + 1}" for i, s in enumerate(sources)]
    if len(set(labels)) < len(labels):  # two runs saved under the same name in different folders
        labels = [f"{lab} ({i + 1})" for i, lab in enumerate(labels)]
    return labels


def _row(key: str, cells: list[Cell]) -> Row:
    base = cells[0].ms or 0.0
    # No ratio to or of a negative figure (a residual below zero): it would read as a speed-up.
    ratios = [None if c.ms is None or base <= 0 or c.ms < 0 else c.ms / base for c in cells]
    change = max(abs((c.ms or 0.0) - base) for c in cells)
    return Row(key=key, cells=cells, ratios=ratios, change_ms=change)


def _by_largest_change(rows: list[Row], last: tuple[str, ...] = ()) -> list[Row]:
    return sorted(rows, key=lambda r: (r.key in last, -r.change_ms, r.key))


# -- trace reports ---------------------------------------------------------------------------
def _cause_rows(reports: list[Any]) -> list[Row]:
    """Per cause and report: its ms and share summed over the report's own entries, and the kinds
    of evidence summed ("measured+estimated" when a measured and an estimated entry were added)."""
    per_report: list[dict[str, Cell]] = []
    for r in reports:
        cells: dict[str, Cell] = {}
        kinds: dict[str, set[str]] = {}
        for c in r.causes:
            cell = cells.setdefault(c.cause, Cell(0.0, 0.0))
            cell.ms += c.ms
            cell.share += c.share
            kinds.setdefault(c.cause, set()).add(c.evidence)
        for cause, cell in cells.items():
            cell.evidence = "+".join(sorted(kinds[cause], key=EVIDENCE.index))
            if cell.ms is not None and cell.ms < 0:
                cell.share = None  # a residual below zero has no share (the causes overshoot; see warnings)
        if "unattributed" not in cells:  # the residual lives in its own field when not listed
            excess = r.excess_ms
            share = r.unattributed_ms / excess if excess > 0 and r.unattributed_ms >= 0 else None  # as the text report
            # a negative residual is no cost (the causes overshoot): shown as none, the figure in the report
            cells["unattributed"] = Cell(r.unattributed_ms if r.unattributed_ms >= 0 else None, share, evidence="residual")
        per_report.append(cells)
    order = list(dict.fromkeys(k for cells in per_report for k in cells))
    rows = [_row(cause, [cells.get(cause, Cell(0.0, 0.0)) for cells in per_report]) for cause in order]
    return _by_largest_change(rows, last=("unattributed",))


# -- watch reports -----------------------------------------------------------------------------
def _median(values: list[float]) -> float | None:
    
    return median(values) if values else None


# Each report's figures in ms: its keys' median p50 and largest p99, and what its events' causes took.
_WATCH_SUMMARY = (
    ("p50 (median over keys)", lambda r: _median([k["p50_ms"] for k in r.keys])),
    ("p99 (largest key)", lambda r: max((k["p99_ms"] for k in r.keys), default=None)),
    ("events' causes (sum)", lambda r: sum(v["ms"] for v in r.by_cause.values())),
)


def _watch_cause_rows(reports: list[Any]) -> list[Row]:
    """Per cause and report: the ms its events' causes took (over the events kept), and that cause's
    share of the report's total."""
    per_report = []
    for r in reports:
        total = sum(v["ms"] for v in r.by_cause.values())
        per_report.append({cause: Cell(float(v["ms"]), v["ms"] / total if total > 0 else None)
                           for cause, v in r.by_cause.items()})
    order = list(dict.fromkeys(k for cells in per_report for k in cells))
    rows = [_row(cause, [cells.get(cause, Cell(0.0, 0.0)) for cells in per_report]) for cause in order]
    return _by_largest_change(rows, last=("unattributed",))


# -- probe reports (read through to_dict, the probe report's JSON contract) ---------------------
def op_key(row: dict[str, Any]) -> str:
    """'matmul 64x64x64' for a probe report's op row: the key that lines rows up across reports."""
    shape = row.get("label") or "x".join(str(d) for d in row.get("shape") or [])
    return f"{row.get('op', '?')} {shape}".strip()


def _op_list(d: dict[str, Any]) -> list[dict[str, Any]]:
    """The probe report's rows ({op: [rows]}) as one list, each row naming its op."""
    ops = d.get("ops") or {}
    return [dict(row, op=op) for op, rows in ops.items() for row in rows]


def _op_rows(dicts: list[dict[str, Any]]) -> list[Row]:
    per_report: list[dict[str, Cell]] = []
    for d in dicts:
        cells: dict[str, Cell] = {}
        for op in _op_list(d):
            key, n = op_key(op), 2
            while key in cells:  # the same op and shape probed twice (a seen-shape re-run, say)
                key = f"{op_key(op)} #{n}"
                n += 1
            cells[key] = Cell(_number(op.get("first_ms")), steady_ms=_number(op.get("steady_ms")),
                              verdict=str(op.get("verdict") or ""))
        per_report.append(cells)
    order = list(dict.fromkeys(k for cells in per_report for k in cells))
    return _by_largest_change([_row(key, [cells.get(key, Cell(None)) for cells in per_report]) for key in order])


def _prediction_rows(dicts: list[dict[str, Any]]) -> list[PredictionRow]:
    per_report = [{str(p.get("id")): p for p in d.get("predictions") or [] if isinstance(p, dict)} for d in dicts]
    ids = list(dict.fromkeys(k for preds in per_report for k in preds))
    return [
        PredictionRow(
            id=pid,
            claim=next((str(preds[pid].get("claim")) for preds in per_report if preds.get(pid, {}).get("claim")), ""),
            holds=[None if pid not in preds else bool(preds[pid].get("holds")) for preds in per_report],
            figures=[preds.get(pid, {}).get("figure") for preds in per_report],
        )
        for pid in ids
    ]


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


# -- what differs ----------------------------------------------------------------------------
def _setting_rows(reports: list[Any]) -> list[SettingRow]:
    """Each compared setting of the trace reports, as each reads it (report/settings.py)."""
    values = [trace_settings.values_of(r) for r in reports]
    return [SettingRow(key, name, [v[key] for v in values]) for key, name, _ in trace_settings.COMPARED]


def _differs(reports: list[Any], kind: str) -> list[tuple[str, list[str]]]:
    """A probe's or watch's settings, then platform keys: each whose values are not all equal (a trace's
    settings are its SettingRows; the platform keys they cover are left to them)."""
    settings = () if kind == "trace" else _PROBE_SETTINGS if kind == "probe" else ("command",) if kind == "run" \
        else ("model",)
    fields = [{k: getattr(r, k, None) for k in settings} for r in reports]
    platforms = [r.platform or {} for r in reports]
    sources = [(key, fields) for key in settings]
    covered = _PLATFORM_IN_SETTINGS if kind == "trace" else ()
    sources += [(key, platforms) for key in dict.fromkeys(k for p in platforms for k in p) if key not in covered]
    out: list[tuple[str, list[str]]] = run_details(reports) if kind == "run" else []
    for key, where in sources:
        values = [_show(w.get(key)) for w in where]
        if len(set(values)) > 1:
            out.append((key, values))
    return out


def _warnings(reports: list[Any], labels: list[str], kind: str) -> list[str]:
    out = []
    if kind == "trace":
        for lab, r in zip(labels, reports):
            if r.shares_of_attributed():
                out.append(f"{lab}: its causes add up to {r.causes_ms():.2f} ms, more than its excess ({r.excess_ms:.2f} ms): "
                           "its shares are of the attributed time, not of the excess")
    fields = (("model", "model"), ("shape", "shape")) if kind == "trace" else ()
    for name, key in fields + (("warmprof version", "warmprof_version"),):
        values = [_show(getattr(r, key, None)) for r in reports]
        if len(set(values)) > 1:
            listed = ", ".join(f"{lab}: {v}" for lab, v in zip(labels, values))
            out.append(f"{name} differs ({listed}): the reports may not measure the same work")
    if kind == "trace" and len({_show(r.shape) for r in reports}) == 1:
        # traced on the caller's inputs (trace(inputs=), --inputs): every argument's shape, which
        # `shape` (the first positional one's) does not tell apart
        shown = [inputs_label(getattr(r, "inputs", None)) or f"from shape {_show(r.shape)}" for r in reports]
        if len(set(shown)) > 1:
            listed = "; ".join(f"{lab}: {v}" for lab, v in zip(labels, shown))
            out.append(f"input shapes differ ({listed}): the reports may not measure the same work")
    return out


def _show(v: Any) -> str:
    if v is None or v == "":
        return "-"
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(str(x) for x in v) + ")"
    return str(v)

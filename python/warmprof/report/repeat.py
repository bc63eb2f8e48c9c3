"""Repeated traces: every run of one trace (each a fresh process) kept whole, with per-cause median,
min-max and how many runs the cause appeared in.

A single first pass is one sample: on a busy machine (or a cold disk, or a clock that had not
ramped) one run can show a cost that three more never show again. `warmprof trace --repeat N` runs
the trace N times, each in a fresh process, and keeps all N reports here.

The per-cause figures are over every run, a run without the cause counting as 0 ms (so a cause seen
in one run of five has median 0 and says "1/5"): what to expect of a fresh process, not of the runs
that happened to pay it. `median_view()` is a trace Report made of the medians (the excess and the
steady pass their own medians over the runs, the first pass their sum; the unattributed row is the
median excess less the causes' medians, since medians do not add up): what the advice and `compare`
read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import causes as cause_table
from ..causes import EVIDENCE
from ..errors import ReportError
from ..stats import median, summarize
from . import schema as S
from .base import SCHEMA_VERSION, ReportBase, register_kind
from .trace import _INPUTS, CauseEntry, Report
from .trace import SCHEMA as TRACE_SCHEMA

# The figures of every run summarised as {"median", "min", "max"}, in this order.
FIGURES = (("first pass", "first_pass_ms"), ("seen re-run", "seen_rerun_ms"), ("steady median", "steady_median_ms"),
           ("excess", "excess_ms"), ("noise band", "noise_band_ms"), ("unattributed", "unattributed_ms"))


@dataclass
class CauseSpread:
    """One cause over the runs: its ms in each run (0 where it did not appear), summarised."""

    cause: str
    median_ms: float
    min_ms: float
    max_ms: float
    runs: int  # runs it appeared in (any source, more than 0 ms)
    of: int  # runs in all
    evidence: str  # how the runs knew it: "measured", or "estimated+measured" when they differed
    ms: list[float] = field(default_factory=list)  # per run, in run order

    @classmethod
    def of_runs(cls, cause: str, runs: list[Report]) -> "CauseSpread":
        per_run = [sum(c.ms for c in r.causes if c.cause == cause) for r in runs]
        seen = [r for r, ms in zip(runs, per_run) if ms > 0]
        evidence = "+".join(sorted({c.evidence for r in runs for c in r.causes if c.cause == cause}))
        s = summarize(per_run)
        return cls(cause, s.median, s.min, s.max, len(seen), len(runs), evidence, per_run)


def _key(r: Report) -> tuple:
    """What every run of one repeated trace shares: the model, its input and how it ran."""
    return r.model, r.shape, r.inputs, r.device, r.dtype, r.compile


def spread(values: list[float]) -> dict[str, float]:
    s = summarize(values)
    return {"median": s.median, "min": s.min, "max": s.max}


_SPREAD = S.Obj({"median": S.NUM, "min": S.NUM, "max": S.NUM})
_CAUSE_SPREAD = S.Obj({"cause": S.STR, "median_ms": S.NUM, "min_ms": S.NUM, "max_ms": S.NUM,
                       "runs": S.NON_NEGATIVE_INT, "of": S.POSITIVE_INT, "evidence": S.STR},
                      {"ms": S.ListOf(S.NUM)})
SCHEMA = S.Obj(
    {"model": S.STR, "device": S.DEVICE, "runs": S.ListOf(TRACE_SCHEMA), "causes": S.ListOf(_CAUSE_SPREAD),
     "figures": S.MapOf(_SPREAD)},
    {"shape": S.Nullable(S.ListOf(S.NON_NEGATIVE_INT)), "dtype": S.STR, "compile": S.Nullable(S.STR),
     "platform": S.PLATFORM, "notes": S.ListOf(S.STR), "advice": S.ListOf(S.STR), "warmprof_version": S.STR,
     "created": S.STR, "failed": S.ListOf(S.STR), "inputs": S.Nullable(_INPUTS)},
)


@register_kind
@dataclass
class RepeatReport(ReportBase):
    """N traces of one model and input, each a fresh process: every run, and per-cause spreads."""

    KIND = "trace_repeat"
    SCHEMA = SCHEMA

    model: str
    device: str
    runs: list[Report]
    causes: list[CauseSpread]
    figures: dict[str, dict[str, float]]  # FIGURES' keys -> {"median", "min", "max"} over the runs
    shape: list[int] | None = None
    dtype: str = ""
    compile: str | None = None
    platform: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)  # on the median view (traces/advice.py)
    failed: list[str] = field(default_factory=list)  # runs that gave no report, and why
    inputs: dict[str, Any] | None = None  # the caller's inputs' shapes (a trace report's `inputs`), if given
    warmprof_version: str = ""
    created: str = ""
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def of_runs(cls, runs: list[Report], *, failed: list[str] | None = None, notes: list[str] | None = None,
                created: str = "") -> "RepeatReport":
        """The summary of `runs` (trace reports of one model, input and device, in run order)."""
        if not runs:
            raise ReportError("a repeated trace needs at least one run that gave a report")
        first = runs[0]
        for k, r in enumerate(runs[1:], 2):
            if _key(r) != _key(first):
                raise ReportError(f"run {k} traced {r.model} {r.shape} {r.dtype} on {r.device} ({r.compile or 'eager'}), "
                                  f"not {first.model} {first.shape} {first.dtype} on {first.device} "
                                  f"({first.compile or 'eager'}): a repeated trace is of one model and input")
        names = list(dict.fromkeys(c.cause for r in runs for c in r.causes if c.cause != "unattributed"))
        spreads = sorted((CauseSpread.of_runs(n, runs) for n in names), key=lambda c: (-c.median_ms, -c.max_ms))
        return cls(model=first.model, device=first.device, runs=list(runs), causes=spreads,
                   figures={**{key: spread([getattr(r, key) for r in runs]) for _, key in FIGURES},
                            # each run's run-to-run difference (its accounting's; 0 for a run with no second
                            # process), where any run has one: the view's accounting keeps it apart
                            **({"run_to_run_ms": spread([float((r.accounting or {}).get("run_to_run_ms", 0.0))
                                                         for r in runs])}
                               if any(r.accounting for r in runs) else {})},
                   shape=first.shape, dtype=first.dtype, compile=first.compile, platform=dict(first.platform),
                   notes=list(notes or []), failed=list(failed or []), warmprof_version=first.warmprof_version,
                   inputs=first.inputs,
                   created=created or first.created)

    def main_source(self, cause: str) -> str:
        """The source holding most of a cause over all the runs."""
        by: dict[str, float] = {}
        for r in self.runs:
            for c in r.causes:
                if c.cause == cause:
                    by[c.source] = by.get(c.source, 0.0) + c.ms
        return max(by, key=by.__getitem__) if by else ""

    @staticmethod
    def weakest(evidence: str) -> str:
        """One evidence for a cause whose runs knew it several ways ("estimated+measured"): the
        weakest of them, as a trace report's cause entry takes one."""
        return max(evidence.split("+"), key=EVIDENCE.index)

    def median(self, key: str) -> float:
        return self.figures[key]["median"]

    def median_view(self) -> Report:
        """A trace Report of the medians: the steady median and the excess their own medians over the
        runs, and the first pass their sum (a trace report's excess is first less steady; the median
        first pass itself is in `figures`), each cause its median over the runs, the run-to-run difference
        its median over the runs (its own term, never in the unattributed time), and the unattributed row what
        the causes' and the run-to-run difference's medians leave of the excess: the view's own accounting
        (excess = causes + run_to_run + unattributed) holds exactly."""
        steady, excess = self.median("steady_median_ms"), self.median("excess_ms")
        first = steady + excess
        kept = [c for c in self.causes if c.median_ms > 0]
        attributed = sum(c.median_ms for c in kept)
        run_to_run = self.figures["run_to_run_ms"]["median"] if "run_to_run_ms" in self.figures else 0.0
        whole = attributed if excess > 0 and attributed > excess else excess
        entries = [CauseEntry(c.cause, c.median_ms, c.median_ms / whole if excess > 0 else 0.0, self.weakest(c.evidence),
                              self.main_source(c.cause),
                              detail=f"median of {c.of} runs: in {c.runs} of them, {c.min_ms:.3f}-{c.max_ms:.3f} ms, known as {c.evidence}")
                   for c in kept]
        return Report(model=self.model, shape=self.shape, inputs=self.inputs, device=self.device, dtype=self.dtype,
                      compile=self.compile,
                      first_pass_ms=first, seen_rerun_ms=self.median("seen_rerun_ms"), steady_median_ms=steady,
                      noise_band_ms=self.median("noise_band_ms"), excess_ms=excess, attributed_ms=attributed,
                      unattributed_ms=excess - attributed - run_to_run, causes=entries, platform=dict(self.platform),
                      accounting=({"excess_ms": excess, "causes_ms": attributed, "run_to_run_ms": run_to_run,
                                   "unattributed_ms": excess - attributed - run_to_run,
                                   "how": f"the medians of {len(self.runs)} runs: the excess's, each cause's and the "
                                          "run-to-run difference's; the unattributed time what they leave"}
                                  if "run_to_run_ms" in self.figures else None),
                      steady_passes=int(median([r.steady_passes for r in self.runs])),
                      steady_p10_ms=median([r.steady_p10_ms for r in self.runs]),
                      steady_p90_ms=median([r.steady_p90_ms for r in self.runs]),
                      protocol=self.runs[0].protocol, settings=self.runs[0].settings,
                      notes=[f"the median of {len(self.runs)} runs, each a fresh process (warmprof trace --repeat)"],
                      warmprof_version=self.warmprof_version, created=self.created)

    # -- JSON ----------------------------------------------------------------------------------
    def _field_to_json(self, name: str, value: Any) -> Any:
        if name == "runs":
            return [r.to_dict() for r in value]
        if name == "causes":
            return [dict(c.__dict__) for c in value]
        return value

    @classmethod
    def _fields_from_json(cls, data: dict[str, Any]) -> dict[str, Any]:
        runs = []
        for k, d in enumerate(data["runs"]):
            if d.get("kind", Report.KIND) != Report.KIND:
                raise ReportError(f"runs[{k}]: a {d.get('kind')!r} report, not a trace report")
            try:
                runs.append(Report.from_dict(d))
            except ReportError as e:
                raise ReportError(f"runs[{k}]: {e}") from None
        known = set(CauseSpread.__dataclass_fields__)  # a newer writer's extra keys are left out
        return {"runs": runs, "causes": [CauseSpread(**{k: v for k, v in c.items() if k in known})
                                         for c in data["causes"]]}

    def validate(self) -> None:
        if not self.runs:
            raise ReportError("runs: a repeated trace holds at least one run")
        for _, key in FIGURES:
            if key not in self.figures:
                raise ReportError(f"figures: missing {key!r}")
            f = self.figures[key]
            if not f["min"] <= f["median"] <= f["max"]:
                raise ReportError(f"figures.{key}: median {f['median']} outside its range {f['min']}-{f['max']}")
        first = self.runs[0]
        for k, r in enumerate(self.runs[1:], 1):
            if _key(r) != _key(first):
                raise ReportError(f"runs[{k}]: {r.model} {r.shape} on {r.device}, not {first.model} {first.shape} on "
                                  f"{first.device}: a repeated trace is of one model and input")
        for c in self.causes:
            if cause_table.get(c.cause) is None or c.cause == "unattributed":
                raise ReportError(f"causes: unknown cause {c.cause!r}")
            if not c.evidence or any(e not in EVIDENCE for e in c.evidence.split("+")):
                raise ReportError(f"causes: {c.cause}: unknown evidence {c.evidence!r} (known: {', '.join(EVIDENCE)})")
            if c.ms and (len(c.ms) != len(self.runs) or abs(median(c.ms) - c.median_ms) > 1e-6
                         or min(c.ms) != c.min_ms or max(c.ms) != c.max_ms):
                raise ReportError(f"causes: {c.cause}: its per-run ms do not give its median and range")
            if not 0 <= c.min_ms <= c.median_ms <= c.max_ms:
                raise ReportError(f"causes: {c.cause}: median {c.median_ms} outside its range {c.min_ms}-{c.max_ms}")
            if not 0 <= c.runs <= c.of or c.of != len(self.runs):
                raise ReportError(f"causes: {c.cause}: in {c.runs} of {c.of} runs, but the report holds {len(self.runs)}")

"""The probe report: a backend's first-call fingerprint at never-seen shapes, with calibrated bands."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import ReportError
from . import schema as S
from .base import SCHEMA_VERSION, ReportBase, non_negative, register_kind

DEVICES = S.DEVICE_KINDS  # each optionally with an index: cuda:1 (schema.DEVICE)
BACKENDS = ("eager", "compile", "cupy")
VERDICTS = ("compile", "one-time load", "allocation", "launch", "recurring", "none", "too noisy")
ROLES = ("op_first", "new_shape", "pair_a", "pair_b")
KEYS = ("shape", "op", "size", "none")
PREDICTION_IDS = ("P1", "P2", "P3", "P4")
BAND_NAMES = ("launch", "allocation", "compile")


@dataclass
class ShapeRow:
    """One op at one never-seen shape: first call, steady per-call stats, seen-shape re-run, verdict."""

    shape: list[int]
    label: str
    role: str  # op_first (the op's first shape), new_shape (op already warmed), pair_a / pair_b
    output_bytes: int
    first_ms: float
    steady_ms: float  # median of the steady calls
    steady_p10_ms: float
    steady_p90_ms: float
    ratio: float  # first_ms / steady_ms
    seen_rerun_ms: float | None
    alloc_hi_ms: float  # the allocation band's upper limit at this op's size (alloc_bytes)
    keyed: str
    verdict: str
    evidence: list[str] = field(default_factory=list)
    alloc_bytes: int = 0  # the bytes the allocation band was sized on (inputs + output)

    @property
    def rerun_share(self) -> float | None:
        """Seen re-run as a share of the first call (the study's 0.13x)."""
        if self.seen_rerun_ms is None or self.first_ms <= 0:
            return None
        return self.seen_rerun_ms / self.first_ms

    def validate(self, op: str) -> None:
        where = f"ops[{op!r}] {self.label}"
        if not self.shape or any(not isinstance(d, int) or isinstance(d, bool) or d <= 0 for d in self.shape):
            raise ReportError(f"{where}: shape {self.shape!r} is not a list of positive integers")
        for name in ("first_ms", "steady_ms", "steady_p10_ms", "steady_p90_ms", "seen_rerun_ms", "alloc_hi_ms",
                     "output_bytes", "alloc_bytes"):
            non_negative(getattr(self, name), f"{where} {name}")
        if not self.steady_p10_ms <= self.steady_ms <= self.steady_p90_ms:
            raise ReportError(f"{where}: steady median {self.steady_ms} outside p10-p90 "
                              f"{self.steady_p10_ms}-{self.steady_p90_ms}")
        if self.steady_ms > 0:
            expected = self.first_ms / self.steady_ms
            if not math.isclose(self.ratio, expected, rel_tol=1e-3):
                raise ReportError(f"{where}: ratio {self.ratio} != first_ms / steady_ms ({expected:.4g})")


@dataclass
class Prediction:
    id: str
    claim: str
    holds: bool
    figure: str


# The JSON schema: every field a renderer (text, JSON, PNG, compare) reads, checked at load.
_SHAPE_ROW = S.Obj(
    {"shape": S.ListOf(S.INT), "label": S.STR, "role": S.OneOf("role", ROLES), "output_bytes": S.NON_NEGATIVE_INT,
     "first_ms": S.NUM, "steady_ms": S.NUM, "steady_p10_ms": S.NUM, "steady_p90_ms": S.NUM, "ratio": S.NUM,
     "seen_rerun_ms": S.Nullable(S.NUM), "alloc_hi_ms": S.NUM, "keyed": S.OneOf("keying", KEYS),
     "verdict": S.OneOf("verdict", VERDICTS)},
    {"evidence": S.ListOf(S.STR), "alloc_bytes": S.NON_NEGATIVE_INT},
    extra=False,
)
_PREDICTION = S.Obj(
    {"id": S.OneOf("prediction id", PREDICTION_IDS), "claim": S.STR, "holds": S.BOOL, "figure": S.STR}, extra=False)
_BAND = {"lo_ms": S.NUM, "hi_ms": S.Nullable(S.NUM)}
_BANDS = S.Obj({
    "launch": S.Obj(_BAND, {"trivial_first_ms": S.Nullable(S.NUM)}),
    "allocation": S.Obj(_BAND, {"by_bytes": S.MapOf(S.Obj({"hi_ms": S.NUM}))}),
    "compile": S.Obj(_BAND),
})
_PAIR = S.Obj(
    {"op": S.STR, "shape_a": S.STR, "shape_b": S.STR, "a_ratio": S.Nullable(S.NUM), "b_ratio": S.Nullable(S.NUM),
     "a_pays": S.BOOL, "b_pays": S.BOOL, "keyed": S.OneOf("keying", KEYS)},
    {"output_elems": S.NON_NEGATIVE_INT, "a_first_ms": S.Nullable(S.NUM), "b_first_ms": S.Nullable(S.NUM)},
)
_RUN = S.Obj({"wall_ms": S.Nullable(S.NUM)}, {"compiles": S.Nullable(S.NON_NEGATIVE_INT)})
_BUCKETING = S.Obj(
    {"K": S.POSITIVE_INT, "B": S.POSITIVE_INT, "distinct": _RUN, "bucketed": _RUN},
    {"default_dynamic": S.Nullable(_RUN), "lengths": S.ListOf(S.INT), "buckets": S.ListOf(S.INT)},
)
_OP_SUMMARY = S.Obj(
    {"median_ratio": S.Nullable(S.NUM), "min_ratio": S.Nullable(S.NUM), "max_ratio": S.Nullable(S.NUM),
     "first_median_ms": S.Nullable(S.NUM), "steady_median_ms": S.Nullable(S.NUM)},
    {"rerun_share_median": S.Nullable(S.NUM), "keyed": S.STR, "verdicts": S.MapOf(S.NUM)},
)
_LOAD_AVERAGE = S.Obj(optional={"before": S.Nullable(S.ListOf(S.NUM)), "after": S.Nullable(S.ListOf(S.NUM))})
SCHEMA = S.Obj(
    {
        "device": S.DEVICE, "backend": S.OneOf("backend", BACKENDS), "bands": _BANDS, "ops": S.MapOf(S.ListOf(_SHAPE_ROW)),
        "shape_vs_size": S.ListOf(_PAIR), "bucketing": _BUCKETING, "predictions": S.ListOf(_PREDICTION),
        "platform": S.PLATFORM,
    },
    {
        "dtype": S.STR, "op_summary": S.MapOf(_OP_SUMMARY), "protocol": S.Obj(optional={"load_average": S.Nullable(_LOAD_AVERAGE)}),
        "notes": S.ListOf(S.STR), "wall_s": S.NUM, "warmprof_version": S.STR, "created": S.STR,
    },
)


@register_kind
@dataclass
class ProbeReport(ReportBase):
    """A probe report. JSON field names are a public contract.

    bands: {"launch": {"lo_ms", "hi_ms", "how"}, "allocation": {"lo_ms", "hi_ms", "how", "by_bytes"},
            "compile": {"lo_ms", "hi_ms": null, "how"}}
    shape_vs_size: [{"op", "output_elems", "shape_a", "shape_b", "a_ratio", "b_ratio", "a_pays", "b_pays", "keyed"}]
    bucketing: {"K", "B", "lengths", "buckets", "d", "counter", "distinct": {"compiles", "wall_ms"},
                "bucketed": {"compiles", "wall_ms"}, "default_dynamic": null | {"compiles", "wall_ms"}}
    """

    KIND = "probe"
    SCHEMA = SCHEMA

    device: str
    backend: str
    bands: dict[str, Any]
    ops: dict[str, list[ShapeRow]]
    shape_vs_size: list[dict[str, Any]]
    bucketing: dict[str, Any]
    predictions: list[Prediction]
    platform: dict[str, Any] = field(default_factory=dict)
    dtype: str = "float32"
    op_summary: dict[str, dict[str, Any]] = field(default_factory=dict)
    protocol: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    warmprof_version: str = ""
    created: str = ""
    schema_version: int = SCHEMA_VERSION

    # -- data access -------------------------------------------------------------------------
    def prediction(self, pid: str) -> Prediction:
        for p in self.predictions:
            if p.id == pid:
                return p
        raise KeyError(pid)

    def rows(self, *roles: str) -> list[tuple[str, ShapeRow]]:
        """(op, row) pairs, optionally only those with the given roles."""
        return [(op, r) for op, rows in self.ops.items() for r in rows if not roles or r.role in roles]

    def verdicts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, r in self.rows():
            out[r.verdict] = out.get(r.verdict, 0) + 1
        return out

    # -- JSON ----------------------------------------------------------------------------------
    def _field_to_json(self, name: str, value: Any) -> Any:
        if name == "ops":
            return {op: [dataclasses.asdict(r) for r in rows] for op, rows in value.items()}
        if name == "predictions":
            return [dataclasses.asdict(p) for p in value]
        return value

    @classmethod
    def _fields_from_json(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {
            "ops": {op: [ShapeRow(**r) for r in rows] for op, rows in data["ops"].items()},
            "predictions": [Prediction(**p) for p in data["predictions"]],
        }

    def validate(self) -> None:
        """Invariants a loaded report must hold; a violation means a corrupt or edited file."""
        _validate_bands(self.bands)
        if not self.ops:
            raise ReportError("no ops probed")
        for op, rows in self.ops.items():
            if not rows:
                raise ReportError(f"ops[{op!r}] has no shapes")
            for r in rows:
                r.validate(op)
        for i, pair in enumerate(self.shape_vs_size):
            for k in ("a_ratio", "b_ratio"):
                non_negative(pair.get(k), f"shape_vs_size[{i}].{k}")
        _validate_bucketing(self.bucketing)
        ids = [p.id for p in self.predictions]
        if sorted(ids) != sorted(set(ids)):
            raise ReportError(f"duplicate prediction ids {ids}")


def _validate_bands(bands: dict[str, Any]) -> None:
    for name in BAND_NAMES:
        band = bands[name]
        non_negative(band["lo_ms"], f"bands.{name}.lo_ms")
        non_negative(band["hi_ms"], f"bands.{name}.hi_ms")
        if band["hi_ms"] is not None and band["hi_ms"] < band["lo_ms"]:
            raise ReportError(f"bands.{name}: hi_ms {band['hi_ms']} below lo_ms {band['lo_ms']}")
    if bands["launch"]["hi_ms"] is None or bands["allocation"]["hi_ms"] is None:
        raise ReportError("bands: launch and allocation need an upper limit")


def _validate_bucketing(b: dict[str, Any]) -> None:
    if b["B"] > b["K"]:
        raise ReportError(f"bucketing: B={b['B']} buckets exceed K={b['K']} lengths")
    if b.get("buckets") and not b.get("lengths"):
        raise ReportError("bucketing: buckets are given but lengths are missing or empty")
    for run in ("distinct", "bucketed", "default_dynamic"):
        entry = b.get(run)
        if entry is not None:
            non_negative(entry.get("wall_ms"), f"bucketing.{run}.wall_ms")

"""The probe report: a backend's first-call fingerprint at never-seen shapes, with calibrated bands."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import ReportError
from .base import SCHEMA_VERSION, ReportBase, non_negative, register_kind, require

DEVICES = ("cpu", "cuda", "mps")
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
        if self.role not in ROLES:
            raise ReportError(f"{where}: unknown role {self.role!r}")
        if self.verdict not in VERDICTS:
            raise ReportError(f"{where}: unknown verdict {self.verdict!r} (known: {', '.join(VERDICTS)})")
        if self.keyed not in KEYS:
            raise ReportError(f"{where}: unknown keying {self.keyed!r}")
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

    def validate(self) -> None:
        if self.id not in PREDICTION_IDS:
            raise ReportError(f"unknown prediction id {self.id!r}")
        if not isinstance(self.holds, bool):
            raise ReportError(f"prediction {self.id}: holds must be true or false, got {self.holds!r}")
        if not isinstance(self.figure, str):
            raise ReportError(f"prediction {self.id}: figure must be text")


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
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"schema_version": self.schema_version, "kind": self.KIND}
        for f in dataclasses.fields(self):
            if f.name == "schema_version":
                continue
            v = getattr(self, f.name)
            if f.name == "ops":
                v = {op: [dataclasses.asdict(r) for r in rows] for op, rows in v.items()}
            elif f.name == "predictions":
                v = [dataclasses.asdict(p) for p in v]
            d[f.name] = v
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ProbeReport":
        for key, types in (
            ("platform", dict), ("device", str), ("backend", str), ("bands", dict), ("ops", dict),
            ("shape_vs_size", list), ("bucketing", dict), ("predictions", list),
        ):
            require(data, key, types)
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["ops"] = {op: [_row(r) for r in rows] for op, rows in data["ops"].items()}
        kwargs["predictions"] = [Prediction(**p) for p in data["predictions"]]
        report = cls(**kwargs)
        report.validate()
        return report

    def validate(self) -> None:
        """Invariants a loaded report must hold; a violation means a corrupt or edited file."""
        if self.device not in DEVICES:
            raise ReportError(f"unknown device {self.device!r}")
        if self.backend not in BACKENDS:
            raise ReportError(f"unknown backend {self.backend!r}")
        _validate_bands(self.bands)
        if not self.ops:
            raise ReportError("no ops probed")
        for op, rows in self.ops.items():
            if not rows:
                raise ReportError(f"ops[{op!r}] has no shapes")
            for r in rows:
                r.validate(op)
        for pair in self.shape_vs_size:
            if pair.get("keyed") not in KEYS:
                raise ReportError(f"shape_vs_size: unknown keying {pair.get('keyed')!r}")
            for k in ("a_ratio", "b_ratio"):
                non_negative(pair.get(k), f"shape_vs_size {k}")
        _validate_bucketing(self.bucketing)
        ids = [p.id for p in self.predictions]
        if sorted(ids) != sorted(set(ids)):
            raise ReportError(f"duplicate prediction ids {ids}")
        for p in self.predictions:
            p.validate()

    # -- rendering -----------------------------------------------------------------------------
    def __str__(self) -> str:
        from ..render.probe_text import ProbeTextRenderer

        return ProbeTextRenderer().render(self)


def _row(d: dict[str, Any]) -> ShapeRow:
    if not isinstance(d, dict):
        raise ReportError(f"an ops row is a {type(d).__name__}, not an object")
    return ShapeRow(**d)


def _validate_bands(bands: dict[str, Any]) -> None:
    for name in BAND_NAMES:
        band = bands.get(name)
        if not isinstance(band, dict) or "lo_ms" not in band or "hi_ms" not in band:
            raise ReportError(f"bands: {name!r} needs lo_ms and hi_ms")
        non_negative(band["lo_ms"], f"bands.{name}.lo_ms")
        non_negative(band["hi_ms"], f"bands.{name}.hi_ms")
        if band["hi_ms"] is not None and band["hi_ms"] < band["lo_ms"]:
            raise ReportError(f"bands.{name}: hi_ms {band['hi_ms']} below lo_ms {band['lo_ms']}")
    if bands["launch"]["hi_ms"] is None or bands["allocation"]["hi_ms"] is None:
        raise ReportError("bands: launch and allocation need an upper limit")


def _validate_bucketing(b: dict[str, Any]) -> None:
    for key in ("K", "B"):
        v = b.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ReportError(f"bucketing.{key} must be a positive integer, got {v!r}")
    if b["B"] > b["K"]:
        raise ReportError(f"bucketing: B={b['B']} buckets exceed K={b['K']} lengths")
    for run in ("distinct", "bucketed", "default_dynamic"):
        entry = b.get(run)
        if entry is None and run == "default_dynamic":
            continue
        if not isinstance(entry, dict):
            raise ReportError(f"bucketing.{run} missing")
        compiles = entry.get("compiles")
        if compiles is not None and (not isinstance(compiles, int) or isinstance(compiles, bool) or compiles < 0):
            raise ReportError(f"bucketing.{run}.compiles must be a non-negative integer or null, got {compiles!r}")
        non_negative(entry.get("wall_ms"), f"bucketing.{run}.wall_ms")

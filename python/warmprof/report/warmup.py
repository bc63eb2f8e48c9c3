"""The warmup report: what warmprof.warmup (or assert_warm) paid at each shape, one row per shape.

One report kind, "warmup"; its `kind` field says which of the two made it ("warmup" or
"assert_warm"), and a saved assert_warm result loads by that name too. to_dict() is the dict
warmup has always returned (no schema_version: the golden files hold it so); to_json() and save()
add the version, as every kind's saved form has one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterator

from .. import causes as cause_table
from ..errors import ReportError
from . import schema as S
from .base import SCHEMA_VERSION, ReportBase, non_negative, register_kind

WARMUP_MAX_CALLS = 3  # warmup's default: calls per shape until one pays nothing, at most this many
MODES = ("warmup", "assert_warm")  # what a result's `kind` says made it


class _Shape(S.Spec):
    """A row's shape: the dimensions given (positive integers), or (inputs=) a label of the call's
    argument shapes."""

    what = "a list of positive integers or a label"

    def accepts(self, value: Any) -> bool:
        if isinstance(value, str):
            return True
        return isinstance(value, list) and bool(value) and all(S.POSITIVE_INT.accepts(d) for d in value)


_PER_CALL = S.Obj({"ms": S.NUM, "fired": S.ListOf(S.STR)})
_ROW = S.Obj(
    {"shape": _Shape(), "ms": S.NUM},
    {"calls": S.NON_NEGATIVE_INT, "causes": S.MapOf(S.NUM), "evidence": S.MapOf(S.STR),
     "compiles": S.NON_NEGATIVE_INT, "recompile_reasons": S.ListOf(S.STR), "cache": S.MapOf(S.ANY),
     "faults": S.NON_NEGATIVE_INT, "anon_bytes": S.INT, "file_bytes": S.INT,
     "cuda_reserved_bytes": S.Nullable(S.INT), "per_call": S.ListOf(_PER_CALL), "not_warm": S.ListOf(S.STR)},
    extra=False,  # each row becomes a WarmRow, which takes no other field
)
SCHEMA = S.Obj({"kind": S.OneOf("warmup kind", MODES), "model": S.STR, "device": S.STR, "rows": S.ListOf(_ROW)},
               {"notes": S.ListOf(S.STR)})


def shape_label(shape: Any) -> str:
    """A row's shape as the text names it: (1, 128), or an inputs= label as it is."""
    return str(tuple(shape)) if isinstance(shape, tuple) else str(shape)


@dataclass
class WarmRow:
    """What the call(s) at one shape paid."""

    shape: tuple[int, ...] | str  # the shape given, or (inputs=) the call's argument shapes as a label
    ms: float  # wall time of the call(s), the device synchronised
    calls: int = 0  # calls made at this shape
    causes: dict[str, float] = field(default_factory=dict)  # cause -> ms paid (see `evidence` for how known)
    evidence: dict[str, str] = field(default_factory=dict)  # every cause that fired -> its figures
    compiles: int = 0  # dynamo compiles (callbacks)
    recompile_reasons: list[str] = field(default_factory=list)  # dynamo's, one per recompile
    cache: dict[str, Any] = field(default_factory=dict)  # CacheOutcome.to_dict(): compiled vs loaded from cache
    faults: int = 0  # minor page faults of the call(s), compiles included
    anon_bytes: int = 0  # anonymous resident growth outside the compiles
    file_bytes: int = 0  # file-backed resident growth outside the compiles
    cuda_reserved_bytes: int | None = None  # growth of torch.cuda.memory_reserved (CUDA only)
    per_call: list[dict[str, Any]] = field(default_factory=list)  # {"ms", "fired"} for each call, in order
    not_warm: list[str] = field(default_factory=list)  # assert_warm: the causes that fail the check here

    @property
    def fired(self) -> list[str]:
        """The causes that fired, in the order found."""
        return list(self.evidence)

    @property
    def label(self) -> str:
        return shape_label(self.shape)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["shape"] = list(self.shape) if isinstance(self.shape, tuple) else self.shape
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "WarmRow":
        """A row from its dict, checked by the report's schema first (WarmupResult.from_dict)."""
        d = dict(data)
        d["shape"] = tuple(d["shape"]) if isinstance(d["shape"], list) else d["shape"]
        return cls(**d)


def _lookup_key(shape: Any) -> Any:
    """What a row's shape is compared with: (1, 128), [1, 128], 128 and "1,128" read as dimensions,
    any other string as an inputs= label. A lookup only: what no row has, malformed or not, is not
    found."""
    if isinstance(shape, str):
        words = shape.split(",")
        if all(w.strip().isdigit() for w in words):
            return tuple(int(w) for w in words)
        return shape
    if isinstance(shape, int) and not isinstance(shape, bool):
        return (shape,)
    try:
        return tuple(shape)
    except TypeError:
        return shape


@register_kind
@dataclass
class WarmupResult(ReportBase):
    """warmup's (or assert_warm's) rows, one per shape, in the order given. str() is a table
    (warmprof.render's text format, render/warmup_text.py)."""

    KIND = "warmup"
    KIND_ALIASES = ("assert_warm",)
    SCHEMA = SCHEMA

    kind: str  # "warmup" or "assert_warm"
    model: str
    device: str
    rows: list[WarmRow]
    notes: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def __iter__(self) -> Iterator[WarmRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def row(self, shape: Any) -> WarmRow:
        """The row of `shape` ((1, 128), "1,128" or an inputs= label); KeyError when none has it."""
        want = _lookup_key(shape)
        for r in self.rows:
            if r.shape == want:
                return r
        raise KeyError(shape)

    @property
    def total_ms(self) -> float:
        return sum(r.ms for r in self.rows)

    def paid(self) -> dict[str, float]:
        """cause -> ms over every shape."""
        out: dict[str, float] = {}
        for r in self.rows:
            for c, ms in r.causes.items():
                out[c] = out.get(c, 0.0) + ms
        return out

    @property
    def warm(self) -> bool:
        """assert_warm: no shape failed the check. warmup: every shape's last call paid nothing."""
        if self.kind == "assert_warm":
            return not any(r.not_warm for r in self.rows)
        return all(r.per_call and not r.per_call[-1]["fired"] for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model, "device": self.device,
                "rows": [r.to_dict() for r in self.rows], "notes": list(self.notes)}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps({"schema_version": self.schema_version, **self.to_dict()}, indent=indent, allow_nan=False)

    @classmethod
    def _fields_from_json(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {"rows": [WarmRow.from_dict(r) for r in data["rows"]]}

    def validate(self) -> None:
        for i, r in enumerate(self.rows):
            where = f"rows[{i}]"
            non_negative(r.ms, f"{where}.ms")
            for name, causes in (("causes", r.causes), ("evidence", r.evidence), ("not_warm", r.not_warm)):
                for c in causes:
                    _known_cause(c, f"{where}.{name}")
            for c, ms in r.causes.items():
                non_negative(ms, f"{where}.causes[{c!r}]")
                if c not in r.evidence:
                    raise ReportError(f"{where}.causes: {c!r} has no evidence")
            for j, call in enumerate(r.per_call):
                non_negative(call["ms"], f"{where}.per_call[{j}].ms")
                for c in call["fired"]:
                    _known_cause(c, f"{where}.per_call[{j}].fired")
            if r.not_warm and self.kind != "assert_warm":
                raise ReportError(f"{where}.not_warm: only assert_warm fails a shape, this is a {self.kind} result")

    def __str__(self) -> str:
        # The text format ends with a newline, as every kind's does; str() has never had it (print adds one).
        return super().__str__().removesuffix("\n")


def _known_cause(cause: str, where: str) -> None:
    if cause_table.get(cause) is None or cause == "unattributed":
        raise ReportError(f"{where}: unknown cause {cause!r}")


__all__ = ["MODES", "WARMUP_MAX_CALLS", "WarmRow", "WarmupResult", "shape_label"]

"""The bucket plan report: the padding buckets plan_buckets() chose for observed request lengths,
their cost in compiles plus padding, and the two baselines (one bucket per length, one bucket).
serving/buckets.py makes it; render/buckets_text.py prints it."""

from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass
from typing import Any

from ..errors import InputError, ReportError
from . import schema as S
from .base import SCHEMA_VERSION, ReportBase, non_negative, register_kind

_BUCKET = S.Obj({"upper": S.POSITIVE_INT, "lower": S.POSITIVE_INT, "lengths": S.POSITIVE_INT,
                 "requests": S.NON_NEGATIVE_INT, "padded_tokens": S.NON_NEGATIVE_INT}, extra=False)
_COST = S.Obj({"buckets": S.NON_NEGATIVE_INT, "padded_tokens": S.NON_NEGATIVE_INT, "compile_ms": S.NUM,
               "padding_ms": S.NUM, "cost_ms": S.NUM}, extra=False)
SCHEMA = S.Obj(
    {"boundaries": S.ListOf(S.POSITIVE_INT), "cost_ms": S.NUM, "compile_ms": S.NUM, "padding_ms": S.NUM,
     "padded_tokens": S.NON_NEGATIVE_INT, "requests": S.NON_NEGATIVE_INT, "distinct_lengths": S.POSITIVE_INT,
     "inputs": S.Obj({"compile_ms_per_bucket": S.NUM, "per_token_ms": S.NUM,
                      "max_buckets": S.Nullable(S.POSITIVE_INT)},
                     {"compiles": S.OneOf("compiles", ("static", "automatic"))}),
     "buckets": S.ListOf(_BUCKET), "baselines": S.Obj({"per_length": _COST, "one_bucket": _COST})},
    {"ratios": S.Obj(optional={"per_length_over_plan": S.Nullable(S.NUM),
                               "one_bucket_over_plan": S.Nullable(S.NUM)})},
)


@dataclass(frozen=True)
class Bucket:
    """One bucket of a plan: the requests whose length is in lower..upper, padded to upper."""

    upper: int  # the boundary: every request in the bucket is padded to it
    lower: int  # the shortest length in the bucket
    lengths: int  # distinct lengths in the bucket
    requests: int
    padded_tokens: int  # sum of (upper - length) over the bucket's requests


@dataclass(frozen=True)
class PlanCost:
    """What a set of boundaries costs over the observed requests."""

    buckets: int
    padded_tokens: int
    compile_ms: float  # compile_ms per bucket x buckets
    padding_ms: float  # per_token_ms x padded tokens
    cost_ms: float  # the two together


@register_kind
@dataclass(frozen=True)
class BucketPlan(ReportBase):
    """The cheapest boundaries for the observed lengths, with two baselines to weigh them against:
    one bucket per distinct length (no padding, a compile each) and one bucket at the longest
    length (one compile, the most padding). All ms are totals over the observed requests."""

    KIND = "buckets"
    SCHEMA = SCHEMA

    boundaries: tuple[int, ...]
    buckets: tuple[Bucket, ...]
    cost_ms: float
    compile_ms: float
    padding_ms: float
    padded_tokens: int
    requests: int
    distinct_lengths: int
    compile_ms_per_bucket: float  # the inputs the plan was made with
    per_token_ms: float
    max_buckets: int | None
    per_length: PlanCost  # baseline: one bucket per distinct length
    one_bucket: PlanCost  # baseline: one bucket, the longest length
    # how many compiles a plan pays: "static" one per bucket; "automatic" (torch.compile's automatic
    # dynamic shapes) min(buckets, 2)
    compiles: str = "static"
    schema_version: int = SCHEMA_VERSION

    @property
    def vs_per_length(self) -> float | None:
        """One bucket per length's cost over the plan's (>= 1); None when the plan costs nothing."""
        return _ratio(self.per_length.cost_ms, self.cost_ms)

    @property
    def vs_one_bucket(self) -> float | None:
        """One bucket's cost over the plan's (>= 1); None when the plan costs nothing."""
        return _ratio(self.one_bucket.cost_ms, self.cost_ms)

    @property
    def plan_cost(self) -> PlanCost:
        """The plan's own figures, as a baseline's are given."""
        return PlanCost(len(self.boundaries), self.padded_tokens, self.compile_ms, self.padding_ms, self.cost_ms)

    def bucket_for(self, length: int) -> int:
        """The boundary a request of `length` is padded to; a length above the longest is refused."""
        n = check_length(length, "length")
        for b in self.boundaries:
            if b >= n:
                return b
        raise InputError(f"length {n} is longer than the plan's longest bucket ({self.boundaries[-1]})")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version, "kind": self.KIND,
            "boundaries": list(self.boundaries),
            "cost_ms": self.cost_ms, "compile_ms": self.compile_ms, "padding_ms": self.padding_ms,
            "padded_tokens": self.padded_tokens, "requests": self.requests, "distinct_lengths": self.distinct_lengths,
            "inputs": {"compile_ms_per_bucket": self.compile_ms_per_bucket, "per_token_ms": self.per_token_ms,
                       "max_buckets": self.max_buckets, "compiles": self.compiles},
            "buckets": [vars(b).copy() for b in self.buckets],
            "baselines": {"per_length": vars(self.per_length).copy(), "one_bucket": vars(self.one_bucket).copy()},
            "ratios": {"per_length_over_plan": self.vs_per_length, "one_bucket_over_plan": self.vs_one_bucket},
        }

    @classmethod
    def _fields_from_json(cls, data: dict[str, Any]) -> dict[str, Any]:
        # The ratios are derived from the costs: read back from those, not from the file.
        inputs, baselines = data["inputs"], data["baselines"]
        return {"boundaries": tuple(data["boundaries"]), "buckets": tuple(Bucket(**b) for b in data["buckets"]),
                "compile_ms_per_bucket": inputs["compile_ms_per_bucket"], "per_token_ms": inputs["per_token_ms"],
                "max_buckets": inputs["max_buckets"], "compiles": inputs.get("compiles", "static"),
                "per_length": PlanCost(**baselines["per_length"]),
                "one_bucket": PlanCost(**baselines["one_bucket"])}

    def validate(self) -> None:
        if not self.buckets:
            raise ReportError("buckets: a plan has at least one bucket")
        if list(self.boundaries) != [b.upper for b in self.buckets]:
            raise ReportError(f"boundaries: {list(self.boundaries)} are not the buckets' upper ends "
                              f"{[b.upper for b in self.buckets]}")
        below = 0
        for i, b in enumerate(self.buckets):
            if not below < b.lower <= b.upper:
                raise ReportError(f"buckets[{i}]: lengths {b.lower}-{b.upper} do not follow the bucket below "
                                  f"(up to {below}) in ascending order")
            below = b.upper
        for name, total, part in (("requests", self.requests, "requests"), ("padded_tokens", self.padded_tokens,
                                  "padded_tokens"), ("distinct_lengths", self.distinct_lengths, "lengths")):
            held = sum(getattr(b, part) for b in self.buckets)
            if total != held:
                raise ReportError(f"{name}: {total}, but the buckets hold {held}")
        if self.max_buckets is not None and len(self.buckets) > self.max_buckets:
            raise ReportError(f"buckets: {len(self.buckets)} buckets, over inputs.max_buckets {self.max_buckets}")
        for name in ("cost_ms", "compile_ms", "padding_ms"):
            non_negative(getattr(self, name), name)
        non_negative(self.compile_ms_per_bucket, "inputs.compile_ms_per_bucket")
        non_negative(self.per_token_ms, "inputs.per_token_ms")
        for where, c in (("", self.plan_cost), ("baselines.per_length.", self.per_length),
                         ("baselines.one_bucket.", self.one_bucket)):
            for name in ("compile_ms", "padding_ms", "cost_ms"):
                non_negative(getattr(c, name), f"{where}{name}")
            if not math.isclose(c.cost_ms, c.compile_ms + c.padding_ms, rel_tol=1e-9, abs_tol=1e-9):
                raise ReportError(f"{where}cost_ms: {c.cost_ms} is not compile_ms + padding_ms "
                                  f"({c.compile_ms} + {c.padding_ms})")


def _ratio(baseline: float, plan: float) -> float | None:
    if plan > 0:
        return baseline / plan
    return 1.0 if baseline == 0 else None


MAX_LENGTH = 1 << 40  # tokens in one request: far past any context, and every plan's figure stays finite


def check_length(x: Any, what: str) -> int:
    """A request length (a positive integer) as an int; anything else refused with an InputError
    naming `what`."""
    if isinstance(x, bool):
        raise InputError(f"{what} is {x!r}, not a length: lengths are positive integers")
    try:
        n = operator.index(x)
    except TypeError:
        if isinstance(x, numbers.Real) and math.isnan(x):
            raise InputError(f"{what} is NaN: lengths are positive integers") from None
        raise InputError(f"{what} = {x!r} is not an integer: lengths are positive integers (token counts)") from None
    if n <= 0:
        raise InputError(f"{what} = {n}: lengths are positive integers")
    if n > MAX_LENGTH:
        raise InputError(f"{what} = {_short(n)}: longer than any context ({MAX_LENGTH:,} tokens at most)")
    return n


def _short(n: int) -> str:
    """A huge integer said by its size, not its digits (str() of one past 4,300 digits raises)."""
    return str(n) if n.bit_length() <= 64 else f"an integer of about {int(n.bit_length() * 0.30103) + 1} digits"


__all__ = ["Bucket", "BucketPlan", "PlanCost", "check_length"]

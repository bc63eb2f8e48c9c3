"""The op probe report: aten op calls (a model's own, or named ones) probed one per fresh process."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import ReportError
from . import schema as S
from .base import SCHEMA_VERSION, ReportBase, non_negative, register_kind

# The causes a probed op's first call is put down to (causes.py names), plus the two non-findings
# and a probe that could not run.
VERDICTS = ("runtime_init", "jit_compile", "algorithm_selection", "allocator_growth", "none", "too_noisy", "failed")
FIGURES = ("first_ms", "steady_ms", "steady_p10_ms", "steady_p90_ms", "cold_excess_ms", "shape_excess_ms", "rerun_ms",
           "runtime_warmup_ms", "launch_hi_ms", "alloc_hi_ms")


@dataclass
class OpResult:
    """One op call probed in its own fresh process. Figures are None when the probe failed (`error` says
    why); shape_excess_ms is None when no new shape of the op ran."""

    op: str  # aten.addmm.default
    short: str  # addmm
    label: str  # the call's tensors: "f32[128], f32[64,128], f32[128,128]*"
    call: dict[str, Any]  # the opspec call spec probed
    verdict: str  # one of VERDICTS
    evidence: str
    first_ms: float | None = None  # the op's first call in the process, at the recorded shapes
    steady_ms: float | None = None  # median of the steady calls
    steady_p10_ms: float | None = None
    steady_p90_ms: float | None = None
    cold_excess_ms: float | None = None  # max(0, first - steady)
    shape_excess_ms: float | None = None  # median over new shapes of the warm op of (first - own steady)
    rerun_ms: float | None = None  # the recorded shape again, after the new shapes ran (median of the rounds)
    runtime_warmup_ms: float | None = None  # the process's own warm-up: its first calls over their steady
    launch_hi_ms: float | None = None  # the launch band's top (2 x a 1-element add's steady)
    alloc_hi_ms: float | None = None  # the allocation band's top at the op's working set
    working_set_bytes: int | None = None  # inputs + output
    shape_alloc_hi_ms: float | None = None  # the allocation band's top at the largest new shape's working set
    variants: list[dict[str, Any]] = field(default_factory=list)  # {"what", "label", "first_ms", "steady_ms", ...}
    dropped_variants: list[str] = field(default_factory=list)  # size changes the op refused, with its error
    error: str = ""  # why the probe failed ("" when it ran)
    source: dict[str, Any] | None = None  # {"module", "ms", "calls"}: where a trace report found the call
    child_wall_ms: float | None = None
    threads: int | None = None  # torch.get_num_threads() in the child
    # Around the op's first call in the child, what a trace's own instruments would book there:
    # {"faults", "file_bytes" (file-backed growth), "onednn_create_ms" (cpu), "onednn" (why off, or "")}
    first_call: dict[str, Any] | None = None

    def validate(self, i: int) -> None:
        where = f"ops[{i}] {self.op}"
        for name in FIGURES + ("shape_alloc_hi_ms", "working_set_bytes", "child_wall_ms"):
            non_negative(getattr(self, name), f"{where} {name}")
        if self.verdict == "failed":
            if not self.error:
                raise ReportError(f"{where}: a failed probe without its error")
            return
        for name in FIGURES:
            if name != "shape_excess_ms" and getattr(self, name) is None:
                raise ReportError(f"{where}: {name} missing from a probe that ran")
        # the loop above refused a probe that ran without them
        assert self.steady_p10_ms is not None and self.steady_ms is not None and self.steady_p90_ms is not None
        assert self.first_ms is not None and self.cold_excess_ms is not None
        if not self.steady_p10_ms <= self.steady_ms <= self.steady_p90_ms:
            raise ReportError(f"{where}: steady median {self.steady_ms} outside p10-p90 "
                              f"{self.steady_p10_ms}-{self.steady_p90_ms}")
        expected = max(0.0, self.first_ms - self.steady_ms)
        if not math.isclose(self.cold_excess_ms, expected, rel_tol=1e-6, abs_tol=1e-9):
            raise ReportError(f"{where}: cold_excess_ms {self.cold_excess_ms} != max(0, first_ms - steady_ms) ({expected})")


_NUM = S.Nullable(S.NUM)
_RESULT = S.Obj(
    {"op": S.STR, "short": S.STR, "label": S.STR, "call": S.Obj({"op": S.STR}), "verdict": S.OneOf("verdict", VERDICTS),
     "evidence": S.STR},
    {**{k: _NUM for k in FIGURES}, "shape_alloc_hi_ms": _NUM, "working_set_bytes": S.Nullable(S.NON_NEGATIVE_INT),
     "variants": S.ListOf(S.Obj({"label": S.STR, "first_ms": S.NUM, "steady_ms": S.NUM})),
     "dropped_variants": S.ListOf(S.STR), "error": S.STR,
     "source": S.Nullable(S.Obj({"module": S.STR, "ms": S.NUM})), "child_wall_ms": _NUM,
     "threads": S.Nullable(S.POSITIVE_INT), "first_call": S.Nullable(S.MapOf(S.ANY))},
    extra=False,
)
SCHEMA = S.Obj(
    {"device": S.DEVICE, "ops": S.ListOf(_RESULT), "platform": S.PLATFORM},
    {"protocol": S.MapOf(S.ANY), "notes": S.ListOf(S.STR), "wall_s": S.NUM, "warmprof_version": S.STR, "created": S.STR},
)


@register_kind
@dataclass
class OpProbeReport(ReportBase):
    """An op probe report. JSON field names are a public contract: ops is a list of OpResult objects."""

    KIND = "op_probe"
    SCHEMA = SCHEMA

    device: str
    ops: list[OpResult]
    platform: dict[str, Any] = field(default_factory=dict)
    protocol: dict[str, Any] = field(default_factory=dict)  # threads, calls per phase, timeout, where the calls came from
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    warmprof_version: str = ""
    created: str = ""
    schema_version: int = SCHEMA_VERSION

    def verdicts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.ops:
            out[r.verdict] = out.get(r.verdict, 0) + 1
        return out

    def _field_to_json(self, name: str, value: Any) -> Any:
        if name == "ops":
            return [dataclasses.asdict(r) for r in value]
        return value

    @classmethod
    def _fields_from_json(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {"ops": [OpResult(**r) for r in data["ops"]]}

    def validate(self) -> None:
        if not self.ops:
            raise ReportError("no ops probed")
        for i, r in enumerate(self.ops):
            r.validate(i)

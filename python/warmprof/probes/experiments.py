"""The op experiments: first call vs steady at never-seen shapes, matched-size pairs, seen-shape re-runs.

Order (one experiment, one reset for compile): every op's new shapes in turn (first call, then a
steady burst), then the matched-size pairs, then rounds of seen-shape re-runs after all of that ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..stats import median
from . import ops as O
from .timing import Stats, burst, quiet_gc, time_call


@dataclass
class RawRow:
    op: str
    shape: tuple[int, ...]
    role: str  # op_first | new_shape | pair_a | pair_b
    output_bytes: int
    alloc_bytes: int  # the op's working set (inputs + output): what the allocation band is sized on
    first_ms: float = 0.0
    steady: Stats | None = None
    reruns_ms: list[float] = field(default_factory=list)
    args: tuple = ()  # kept alive for the re-runs; dropped once they ran

    @property
    def seen_rerun_ms(self) -> float | None:
        return median(self.reruns_ms) if self.reruns_ms else None


def plan(ops: tuple[str, ...], shapes_per_op: int, element_size: int) -> list[RawRow]:
    """Every (op, shape, role) the experiments will run, in run order."""
    todo = []
    for op in ops:
        todo += [(op, s, "op_first" if i == 0 else "new_shape") for i, s in enumerate(O.NEW_SHAPES[op][:shapes_per_op])]
    for op in ops:
        todo += [(op, s, role) for role, s in zip(("pair_a", "pair_b"), O.MATCHED_PAIRS[op])]
    return [RawRow(op, s, role, O.output_elems(op, s) * element_size, O.working_set_elems(op, s) * element_size)
            for op, s, role in todo]


def run(be: Any, rows: list[RawRow], steady_calls: int, rerun_rounds: int, say: Callable[[str], None]) -> list[RawRow]:
    limit = len(rows) + 8  # static shapes: one graph per shape; keep dynamo from giving up on the op
    with be.experiment("ops", recompile_limit=limit):
        if getattr(be, "first_call_note", ""):
            say(f"op experiments: {len(rows)} never-seen shapes, each first call compiling its own graph "
                f"({be.name}: up to seconds each)")
        for row in rows:
            row.args = be.inputs(row.op, row.shape)
            be.sync()
            row.first_ms, row.steady = burst(be.fn(row.op), row.args, be.sync, steady_calls)
            say(f"{row.op} {O.label(row.shape)} ({row.role}): first {row.first_ms:.3g} ms, "
                f"steady {row.steady.median_ms:.3g} ms ({row.first_ms / max(row.steady.median_ms, 1e-9):.1f}x)")
        for _ in range(rerun_rounds):
            with quiet_gc():
                for row in rows:
                    row.reruns_ms.append(time_call(be.fn(row.op), row.args, be.sync))
        say(f"seen-shape re-runs: {rerun_rounds} round(s) over {len(rows)} shapes")
    for row in rows:
        row.args = ()
    return rows

"""The bucketing sweep: a [seq, d] @ [d, d] matmul at K distinct lengths vs the same lengths padded to B buckets.

Compiles are counted by the backend's own counter where it has one (dynamo's unique_graphs);
elsewhere they are inferred: a call that costs more than PAYS_RATIO x a steady call at the largest
bucket paid a first-call tax. For torch.compile, dynamo's default (automatic dynamic shapes after
the second distinct shape) gets its own row.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from .timing import now_ns, quiet_gc, stats, time_call, time_calls
from .verdict import PAYS_RATIO

D = 128
FIRST_LENGTH, LENGTH_STEP = 17, 12  # odd lengths; buckets are multiples of 8, so never one of them


def lengths(K: int) -> list[int]:
    return [FIRST_LENGTH + LENGTH_STEP * i for i in range(K)]


def buckets(lens: list[int], B: int) -> tuple[list[int], list[int]]:
    """B bucket lengths (each group's longest, rounded up to a multiple of 8) and each length's bucket."""
    ordered = sorted(lens)
    bounds = [ordered[math.ceil(len(ordered) * (j + 1) / B) - 1] for j in range(B)]
    tops = [(b + 7) // 8 * 8 for b in bounds]
    padded = [next(t for t in tops if t >= n) for n in lens]
    return tops, padded


def _run(be: Any, fn: Callable, rows: list[int], pad_to: list[int] | None) -> tuple[float, list[float]]:
    """Inputs made first, then one timed call per request; returns (wall ms, per-call ms)."""
    w = be.randn((D, D))
    xs = [be.randn((n, D)) for n in rows]
    if pad_to is not None:
        xs = [be.pad_rows(x, p) for x, p in zip(xs, pad_to)]
    be.sync()
    with quiet_gc():
        t0 = now_ns()
        calls = [time_call(fn, (x, w), be.sync) for x in xs]
        return (now_ns() - t0) / 1e6, calls


def _counted(be: Any, name: str, pad_to: list[int] | None, lens: list[int], limit: int | None,
             dynamic_default: bool = False) -> dict[str, Any]:
    with be.experiment(name, recompile_limit=limit):
        before = be.compiles()
        wall, calls = _run(be, be.seq_fn(dynamic_default), lens, pad_to)
        after = be.compiles()
        steady = None
        if before is None:  # no counter: a steady reference at the largest bucket, for inferring
            top = max(pad_to or lens)
            x, w = be.randn((top, D)), be.randn((D, D))
            fn = be.seq_fn(dynamic_default)
            time_calls(fn, (x, w), be.sync, 2)
            steady = stats(time_calls(fn, (x, w), be.sync, 10)).median_ms
    if before is not None:
        compiles = after - before
    else:
        assert steady is not None  # measured above where there is no counter
        compiles = sum(1 for c in calls if c > PAYS_RATIO * steady)
    return {"compiles": compiles, "wall_ms": wall, "calls": len(calls),
            "first_calls_ms": calls, "steady_ref_ms": steady}


def run(be: Any, K: int, B: int, say: Callable[[str], None]) -> dict[str, Any]:
    lens = lengths(K)
    tops, padded = buckets(lens, B)
    limit = K + 8  # static shapes: K graphs of one function, above dynamo's default limit of 8
    distinct = _counted(be, "bucketing-distinct", None, lens, limit)
    say(f"bucketing: {K} distinct lengths -> {distinct['compiles']} compiles, {distinct['wall_ms']:.1f} ms")
    bucketed = _counted(be, "bucketing-buckets", padded, lens, limit)
    say(f"bucketing: {B} buckets -> {bucketed['compiles']} compiles, {bucketed['wall_ms']:.1f} ms")
    default_dynamic = None
    if be.name == "compile":  # dynamo's defaults, untouched: no raised limit, automatic dynamic shapes
        default_dynamic = _counted(be, "bucketing-default", None, lens, None, dynamic_default=True)
        say(f"bucketing: default dynamic, {K} lengths -> {default_dynamic['compiles']} compiles, "
            f"{default_dynamic['wall_ms']:.1f} ms")
    return {
        "op": f"[seq, {D}] @ [{D}, {D}] matmul", "d": D, "K": K, "B": len(tops), "lengths": lens, "buckets": tops,
        "padded": padded, "counter": be.counter or f"inferred: calls > {PAYS_RATIO:g}x a steady call at the largest bucket",
        "counted": be.counter is not None,
        "distinct": distinct, "bucketed": bucketed, "default_dynamic": default_dynamic,
    }

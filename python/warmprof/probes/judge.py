"""From measured rows to report rows: keying across an op's shapes, then a verdict per shape (pure)."""

from __future__ import annotations

from typing import Any

from ..report.probe import ShapeRow
from ..stats import median
from . import ops as O
from .experiments import RawRow
from .verdict import RowBands, Timing, op_keying, pay_rank, size_keying, verdict


def timing(r: RawRow) -> Timing:
    s = r.steady
    assert s is not None  # a measured row has its steady stats
    return Timing(r.first_ms, s.median_ms, s.p10_ms, s.p90_ms, r.seen_rerun_ms)


def judge(raw: list[RawRow], row_bands: dict[int, RowBands],
          device_notes: dict[str, str] | None = None) -> tuple[dict[str, list[ShapeRow]], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """(ops rows, shape_vs_size pairs, per-op summary). row_bands maps working-set bytes to that size's bands.
    device_notes: op -> what a per-shape verdict means on the probed device (verdict.cuda_eager_note)."""
    device_notes = device_notes or {}
    by_op: dict[str, list[RawRow]] = {}
    for r in raw:
        by_op.setdefault(r.op, []).append(r)
    ops_out, pairs, summary = {}, [], {}
    for op, rows in by_op.items():
        rank = {id(r): pay_rank(timing(r), row_bands[r.alloc_bytes]) for r in rows}
        seq = [r for r in rows if r.role in ("op_first", "new_shape")]
        op_key = op_keying(rank[id(seq[0])], [rank[id(r)] for r in seq[1:]]) if seq else "none"
        a = next((r for r in rows if r.role == "pair_a"), None)
        b = next((r for r in rows if r.role == "pair_b"), None)
        pair_key = size_keying(rank[id(a)], rank[id(b)]) if a and b else "none"
        keyed = {"op_first": op_key, "new_shape": "shape" if op_key == "shape" else "none",
                 "pair_a": pair_key, "pair_b": pair_key}
        ops_out[op] = [_row(r, row_bands[r.alloc_bytes], keyed[r.role], device_notes.get(op, "")) for r in rows]
        if a and b:
            pairs.append(_pair(op, a, b, rank[id(a)], rank[id(b)], pair_key))
        summary[op] = _summary(op, ops_out[op], op_key)
    return ops_out, pairs, summary


def _pair(op: str, a: RawRow, b: RawRow, a_rank: int, b_rank: int, keyed: str) -> dict[str, Any]:
    """One shape_vs_size entry; "pays" means a tax above the launch band."""
    return {
        "op": op, "output_elems": O.output_elems(op, a.shape), "shape_a": O.label(a.shape), "shape_b": O.label(b.shape),
        "a_first_ms": a.first_ms, "b_first_ms": b.first_ms, "a_ratio": timing(a).ratio, "b_ratio": timing(b).ratio,
        "a_pays": a_rank > 0, "b_pays": b_rank > 0, "keyed": keyed,
    }


def _row(r: RawRow, bands: RowBands, keyed: str, device_note: str = "") -> ShapeRow:
    t = timing(r)
    v, evidence = verdict(t, bands, keyed, device_note)
    return ShapeRow(
        shape=list(r.shape), label=O.label(r.shape), role=r.role, output_bytes=r.output_bytes,
        first_ms=t.first_ms, steady_ms=t.steady_ms, steady_p10_ms=t.steady_p10_ms, steady_p90_ms=t.steady_p90_ms,
        ratio=t.ratio, seen_rerun_ms=t.seen_rerun_ms, alloc_hi_ms=bands.alloc_hi_ms, keyed=keyed,
        verdict=v, evidence=evidence, alloc_bytes=r.alloc_bytes,
    )


def _summary(op: str, rows: list[ShapeRow], op_key: str) -> dict[str, Any]:
    new = [r for r in rows if r.role in ("op_first", "new_shape")] or rows
    ratios = [r.ratio for r in new]
    shares = [r.rerun_share for r in rows if r.rerun_share is not None]
    verdicts: dict[str, int] = {}
    for r in rows:
        verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
    return {
        "description": O.DESCRIPTION[op],
        "median_ratio": median(ratios), "min_ratio": min(ratios), "max_ratio": max(ratios),
        "first_median_ms": median(r.first_ms for r in new),
        "steady_median_ms": median(r.steady_ms for r in new),
        "rerun_share_median": median(shares) if shares else None,
        "keyed": op_key, "verdicts": verdicts,
    }

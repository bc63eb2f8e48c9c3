"""The study's predictions P1..P4, judged on measured rows: pure, each holds or fails with its figure."""

from __future__ import annotations

from typing import Any

from ..report.probe import Prediction, ShapeRow
from ..stats import median
from .verdict import CACHED_FRACTION, PAYS_RATIO

CLAIMS = {
    "P1": f"first call >> steady (> {PAYS_RATIO:g}x) at new shapes",
    "P2": "the cost is one-time and cached (seen-shape re-run cheap)",
    "P3": "keyed on shape, not size, on every op (matched-size pairs both pay)",
    "P4": "bucketing K lengths into B buckets costs about B compilations",
}


def predictions(ops: dict[str, list[ShapeRow]], pairs: list[dict[str, Any]], bucketing: dict[str, Any]) -> list[Prediction]:
    return [p1(ops), p2(ops), p3(pairs), p4(bucketing)]


def p1(ops: dict[str, list[ShapeRow]]) -> Prediction:
    parts, holds = [], bool(ops)
    for op, rows in ops.items():
        ratios = [r.ratio for r in rows if r.role in ("op_first", "new_shape")]
        if not ratios:
            holds = False
            continue
        med = median(ratios)
        holds = holds and med > PAYS_RATIO
        parts.append(f"{op} {_x(med)} ({_x(min(ratios))}-{_x(max(ratios))})")
    return Prediction("P1", CLAIMS["P1"], holds, "median first/steady: " + (", ".join(parts) or "no shapes"))


def p2(ops: dict[str, list[ShapeRow]]) -> Prediction:
    parts, holds = [], bool(ops)
    for op, rows in ops.items():
        shares = [r.rerun_share for r in rows if r.rerun_share is not None]
        if not shares:
            holds = False
            parts.append(f"{op} no re-run")
            continue
        med = median(shares)
        vs_steady = median(r.seen_rerun_ms / r.steady_ms for r in rows
                                      if r.seen_rerun_ms is not None and r.steady_ms > 0)
        holds = holds and med <= CACHED_FRACTION
        parts.append(f"{op} {med:.2g}x of first ({_x(vs_steady)} steady)")
    return Prediction("P2", CLAIMS["P2"], holds,
                      f"seen re-run, median (cached <= {CACHED_FRACTION:g}x of first): " + ", ".join(parts))


def p3(pairs: list[dict[str, Any]]) -> Prediction:
    if not pairs:
        return Prediction("P3", CLAIMS["P3"], False, "no matched-size pairs probed")
    holds = all(p["a_ratio"] > PAYS_RATIO and p["b_ratio"] > PAYS_RATIO for p in pairs)
    parts = [f"{p['op']} {p['shape_a']} {_x(p['a_ratio'])} / {p['shape_b']} {_x(p['b_ratio'])}" for p in pairs]
    return Prediction("P3", CLAIMS["P3"], holds, f"both pay > {PAYS_RATIO:g}x? " + "; ".join(parts))


def p4(b: dict[str, Any]) -> Prediction:
    K, B = b["K"], b["B"]
    distinct, bucketed = b["distinct"]["compiles"], b["bucketed"]["compiles"]
    if distinct is None or bucketed is None:
        return Prediction("P4", CLAIMS["P4"], False, "no compile count available")
    counted = b.get("counted", False)
    if counted:
        holds = distinct == K and bucketed == B
    else:  # inferred from call times: allow one miscount either way
        holds = distinct >= K - 1 and 0 < bucketed <= B + 1
    dw, bw = b["distinct"]["wall_ms"], b["bucketed"]["wall_ms"]
    if bw > 0 and dw >= bw:
        speedup = f", {dw / bw:.1f}x less wall"
    elif bw > 0 and dw > 0:
        speedup = f", {bw / dw:.1f}x more wall"
    else:
        speedup = ""
    figure = (f"{K} distinct lengths -> {distinct} compiles ({_ms(dw)}); {B} buckets -> {bucketed} compiles "
              f"({_ms(bw)}{speedup}); counted by {b.get('counter', '?')}")
    return Prediction("P4", CLAIMS["P4"], holds, figure)


def _x(ratio: float) -> str:
    return f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.1f}x"


def _ms(v: float) -> str:
    return f"{v / 1000:.2f} s" if v >= 1000 else f"{v:.1f} ms"

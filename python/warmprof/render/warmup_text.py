"""Text renderer for a warmup (or assert_warm) result: a head line, then one row per shape with what
its calls paid and the evidence for each cause."""

from __future__ import annotations

from typing import Any

from ..report.warmup import WARMUP_MAX_CALLS, WarmRow
from .base import Renderer
from .registry import register


def _ms(ms: float) -> str:
    return f"{ms / 1e3:.2f} s" if ms >= 1000 else f"{ms:.1f} ms"


def _paid(r: WarmRow) -> str:
    if not r.evidence:
        return "nothing one-time"
    parts = []
    for c in r.evidence:
        ms = r.causes.get(c)
        figure = "" if ms is None else f" {'~' if c == 'allocator_growth' else ''}{ms:.1f} ms"
        parts.append(f"{c}{figure} ({r.evidence[c]})")
    rest = r.ms - sum(r.causes.values())
    return "; ".join(parts) + f"; rest {rest:.1f} ms"


@register
class WarmupTextRenderer(Renderer):
    format = "text"
    kinds = ("warmup",)
    extension = ".txt"

    def render(self, result: Any) -> str:
        n = len(result.rows)
        head = (f"{result.kind} of {result.model} on {result.device}: {n} shape{'s' if n != 1 else ''}, "
                f"{_ms(result.total_ms)} in all")
        if result.kind == "assert_warm":
            head += "; warm (no one-time cost fired)" if result.warm else "; NOT warm"
        elif not result.warm:
            head += f"; a shape's last call still paid something (at most {WARMUP_MAX_CALLS} calls by default)"
        width = max([len(r.label) for r in result.rows] + [5])
        lines = [head, f"  {'shape':<{width}}  {'calls':>5}  {'ms':>10}  paid"]
        for r in result.rows:
            lines.append(f"  {r.label:<{width}}  {r.calls:>5}  {r.ms:>10.1f}  {_paid(r)}")
        lines.extend(f"  note: {x}" for x in result.notes)
        return "\n".join(lines) + "\n"

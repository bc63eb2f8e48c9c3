"""Text renderer for a bucket plan: the lengths and costs it was made from, its buckets, and its cost
against one bucket per length and one bucket."""

from __future__ import annotations

from typing import Any

from ..report.buckets import PlanCost
from .base import Renderer
from .format import cause_ms, ms, table
from .registry import register


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _per_token(v: float) -> str:
    return f"{v:.3g} ms"


def _cost_row(name: str, c: PlanCost, ratio: float | None) -> list[str]:
    if name == "plan":
        vs = ""
    elif ratio is None:
        vs = "plan costs 0"
    else:
        vs = f"{ratio:.2f}x"
    return [name, f"{c.buckets}", cause_ms(c.compile_ms), cause_ms(c.padding_ms), cause_ms(c.cost_ms), vs]


@register
class BucketsTextRenderer(Renderer):
    format = "text"
    kinds = ("buckets",)
    extension = ".txt"

    def render(self, plan: Any) -> str:
        lo, hi = plan.buckets[0].lower, plan.boundaries[-1]
        cap = f", at most {plan.max_buckets} buckets" if plan.max_buckets is not None else ""
        out = [f"warmprof buckets: {_n(plan.requests, 'request')} at {_n(plan.distinct_lengths, 'distinct length')} "
               f"({lo}-{hi})",
               f"  costs: {ms(plan.compile_ms_per_bucket)} per bucket compiled, {_per_token(plan.per_token_ms)} per "
               f"padded token{cap}",
               "  compiles: " + ("one per bucket (static shapes: torch.compile(dynamic=False), CUDA graphs, an engine "
                                 "per shape)" if plan.compiles == "static" else
                                 "two at most, whatever the buckets (torch.compile's automatic dynamic shapes: the second "
                                 "length recompiles with the size dynamic, that graph serves the rest; its own per-call "
                                 "cost is not modelled)"), "",
               f"Plan: {_n(len(plan.boundaries), 'bucket')}"]
        rows = [[f"{b.upper}", f"{b.lower}-{b.upper}" if b.lower != b.upper else f"{b.upper}", f"{b.lengths}",
                 f"{b.requests}", f"{b.padded_tokens}"] for b in plan.buckets]
        out += table(["bucket <=", "lengths", "distinct", "requests", "padded tokens"], rows, right={0, 2, 3, 4}, rule=True)
        out += ["", "Cost over the observed requests (ms)"]
        rows = [_cost_row("plan", plan.plan_cost, None)]
        rows.append(_cost_row("one per length", plan.per_length, plan.vs_per_length))
        rows.append(_cost_row("one bucket", plan.one_bucket, plan.vs_one_bucket))
        out += table(["", "buckets", "compile", "padding", "total", "vs plan"], rows, right={1, 2, 3, 4, 5}, rule=True)
        return "\n".join(out) + "\n"

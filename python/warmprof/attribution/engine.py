"""The loop: one pass's context, every estimator run on it in order, their parts merged by (cause,
source), the parts that may only fill what is left capped there, and the pass's unexplained time."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from ..timeline import Timeline
from .context import PassContext, build_context
from .estimators import ESTIMATORS, Estimator
from .parts import Part, PassAttribution


def attribute_pass(tl: Timeline, pass_name: str, *, estimators: Sequence[Estimator] = ESTIMATORS,
                   **context_args: Any) -> PassAttribution:
    """Attribute one recorded pass (the span named `pass:<pass_name>`) to causes: the pass's
    context (build_context, given `context_args`: calibration, steady_faults, evidence, inferred,
    window, instrument_cost) with each of `estimators` run on it in order, their parts merged by (cause, source).

    window: the pass's own clock reads (start_ns, end_ns); they give the pass time even if the
    recorder lost records. Faults warmprof's own buffers took in the pass (Timeline.own_fault_ns)
    are never charged to the model's allocator."""
    ctx = build_context(tl, pass_name, **context_args)
    if ctx is None:
        return PassAttribution(0.0, [], [])
    merged: dict[tuple[str, str], Part] = {}
    for estimate in estimators:
        for p in estimate(ctx):
            _merge_into(merged, p)
    _cap_fills(ctx, merged)
    return _assemble(ctx, merged)


def _cap_fills(ctx: PassContext, parts: dict[tuple[str, str], Part]) -> None:
    """Parts that may only take what the others left unexplained (Part.fills), capped there in
    turn, estimated before inferred; a capped one's detail says so."""
    fills = [p for p in parts.values() if p.fills]
    if not fills:
        return
    left = sum(ctx.free_by_module.values()) - sum(
        p.ns for k, p in parts.items() if not p.fills and k not in ctx.span_keys and not p.carved)
    for p in sorted(fills, key=lambda p: p.evidence != "estimated"):
        keep = min(1.0, max(0.0, left) / p.ns) if p.ns > 0 else 1.0
        if keep < 1.0:
            p.detail += (f"; capped at what the pass's other causes left unexplained ({max(0.0, left) / 1e6:.3f} ms of "
                         f"{p.ns / 1e6:.3f} ms)")
            p.ns *= keep
            p.by_module = {m: ns * keep for m, ns in p.by_module.items()}
        left -= p.ns


def _merge_into(merged: dict[tuple[str, str], Part], p: Part) -> None:
    key = (p.cause, p.source)
    have = merged.get(key)
    if have is None:
        merged[key] = replace(p, by_module=dict(p.by_module))  # never change an estimator's own Part
        return
    have.ns += p.ns
    have.waited_ns += p.waited_ns
    have.blocked_ns += p.blocked_ns
    have.count += p.count
    have.detail = have.detail or p.detail
    for mod, ns in p.by_module.items():
        have.by_module[mod] = have.by_module.get(mod, 0.0) + ns


def _assemble(ctx: PassContext, parts: dict[tuple[str, str], Part]) -> PassAttribution:
    """The pass's attribution: its parts (largest first), counter totals, and the unexplained
    time: free time (no cause span) less every part whose (cause, source) is not a cause span's
    (ctx.span_keys; an estimate merged into a cause span's part stays out of free time)."""
    unexplained = dict(ctx.free_by_module)
    estimated: dict[str, float] = {}
    for key, p in parts.items():
        if key in ctx.span_keys or p.carved:
            continue
        for mod, ns in p.by_module.items():
            unexplained[mod] = unexplained.get(mod, 0.0) - ns
            estimated[mod] = estimated.get(mod, 0.0) + ns
    op_view = bool(ctx.op_spans)
    t0, t1 = ctx.window
    return PassAttribution(
        pass_ms=(t1 - t0) / 1e6,
        parts=sorted(parts.values(), key=lambda p: -p.ns),
        spans=[ctx.pass_span, *ctx.spans],
        faults=sum(s.delta for s in ctx.fault_steps),
        faults_outside_causes=sum(s.delta for s in ctx.fault_steps if s.cause_span is None),
        own_faults=ctx.own_faults,
        new_threads=sum(s.delta for s in ctx.thread_steps if s.delta > 0),
        off_thread_ms=ctx.off_thread_ns / 1e6,
        unmatched=sum(1 for s in ctx.spans if not s.closed),
        unexplained_by_module=unexplained,
        unexplained_by_site=_spread_over_sites(ctx.free_by_site, estimated) if op_view else {},
        op_sites=dict(ctx.op_sites) if op_view else {},
        op_calls=len(ctx.op_spans),
    )


def _spread_over_sites(free: dict[tuple[str, str], float], estimated: dict[str, float]) -> dict[tuple[str, str], float]:
    """Free time by (module, op) less the estimates placed in each module, spread over that module's
    sites in proportion to their free time (estimates are placed by module, not by op)."""
    out = dict(free)
    by_mod: dict[str, float] = {}
    for (mod, _), ns in free.items():
        by_mod[mod] = by_mod.get(mod, 0.0) + max(ns, 0.0)
    for mod, ns in estimated.items():
        total = by_mod.get(mod, 0.0)
        if total <= 0:
            out[(mod, "")] = out.get((mod, ""), 0.0) - ns
            continue
        for site, f in free.items():
            if site[0] == mod and f > 0:
                out[site] -= ns * f / total
    return out

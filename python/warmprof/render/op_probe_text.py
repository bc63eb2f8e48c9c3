"""Text renderer for an op probe report: one row per op call (first, steady, cold and shape excess,
verdict, evidence), then each op's new shapes and what it refused."""

from __future__ import annotations

from typing import Any

from .base import Renderer
from .format import duration, ms, ms_decimals, table
from .registry import register
from .safe import one_line


@register
class OpProbeTextRenderer(Renderer):
    format = "text"
    kinds = ("op_probe",)
    extension = ".txt"

    def render(self, report: Any) -> str:
        r = report
        p = r.protocol
        out = [f"warmprof probe: {len(r.ops)} aten op call(s) on {r.device}, each in a fresh process"]
        plat = ", ".join(f"{k} {v}" for k, v in r.platform.items() if isinstance(v, (str, int, float)) and v)
        out.append(f"  platform: {plat or 'unknown'}")
        if p.get("from"):
            out.append(f"  calls from {p['from']} (the largest unattributed op sites first)")
        out.append(f"  threads {p.get('threads') or 'torch default'}; {p.get('steady_calls', '?')} steady calls, "
                   f"{p.get('variant_calls', '?')} per new shape, seen re-run = median of {p.get('rerun_rounds', '?')}; "
                   f"whole probe {r.wall_s:.1f} s")
        warmups = [o.runtime_warmup_ms for o in r.ops if o.runtime_warmup_ms is not None]
        if warmups:
            out.append(f"  runtime warm-up (a fresh process's first 1M-element and 1-element adds over their steady): "
                       f"{duration(min(warmups))}-{duration(max(warmups))}; each op below ran after it")
        out += ["", "First call vs steady, per op call (ms)"] + self._rows(r)
        extra = self._shapes(r)
        if extra:
            out += ["", "New shapes of each warm op (first / steady ms)"] + extra
        if r.notes:
            out += ["", "Notes"] + [f"  - {n}" for n in r.notes]
        return "\n".join(out) + "\n"

    def _rows(self, r: Any) -> list[str]:
        rows = []
        for o in r.ops:
            evidence = one_line(o.error if o.verdict == "failed" else o.evidence)
            rows.append([one_line(o.short), one_line(o.label), ms_decimals(o.first_ms), ms_decimals(o.steady_ms), ms_decimals(o.cold_excess_ms),
                         ms_decimals(o.shape_excess_ms), ms_decimals(o.rerun_ms), o.verdict, evidence])
        return table(["op", "shapes", "first", "steady", "cold excess", "shape excess", "re-run", "verdict", "evidence"],
                     rows, right={2, 3, 4, 5, 6}, rule=True)

    def _shapes(self, r: Any) -> list[str]:
        lines = []
        for o in r.ops:
            if o.source:
                lines.append(f"  {o.short} at {o.source['module']} ({ms(o.source['ms'])} unattributed"
                             f"{', ' + str(o.source['calls']) + ' calls' if o.source.get('calls') else ''})")
            for v in o.variants:
                lines.append(f"  {one_line(o.short)} {one_line(v['label'])}: {ms_decimals(v['first_ms'])} / {ms_decimals(v['steady_ms'])}")
            if o.verdict != "failed" and not o.variants:
                lines.append(f"  {o.short}: no new shape ran ({len(o.dropped_variants)} size change(s) refused"
                             + (f", first: {o.dropped_variants[0]}" if o.dropped_variants else "") + ")")
        return lines

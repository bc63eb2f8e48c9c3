"""Text renderer for a probe report: bands, first-vs-steady per shape, per-op medians, shape vs size,
bucketing, predictions, and one evidence line per op and verdict."""

from __future__ import annotations

from typing import Any

from .base import Renderer
from .format import duration, ms_decimals, table
from .registry import register


def _x(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}x" if v >= 10 else f"{v:.2g}x"


@register
class ProbeTextRenderer(Renderer):
    format = "text"
    kinds = ("probe",)
    extension = ".txt"

    def render(self, report: Any) -> str:
        r = report
        out: list[str] = []
        out.append(f"warmprof probe: {r.protocol.get('what') or r.backend + ' on ' + r.device} ({r.dtype})")
        plat = ", ".join(f"{k} {v}" for k, v in r.platform.items() if isinstance(v, (str, int, float)) and v)
        out.append(f"  platform: {plat or 'unknown'}")
        load = r.protocol.get("load_average") or {}
        if load.get("before"):
            out.append(f"  threads {r.protocol.get('threads')}, load average {load['before'][0]:.1f} -> "
                       f"{(load.get('after') or load['before'])[0]:.1f} on {load.get('cpus')} CPUs; "
                       f"compile cache: {r.protocol.get('compile_cache', '-')}")
        out.append(f"  {r.protocol.get('steady_calls', '?')} steady calls per shape, seen-shape re-run = median of "
                   f"{r.protocol.get('rerun_rounds', '?')} rounds; whole probe {r.wall_s:.1f} s")
        out += ["", "Bands (calibrated on this machine, this run)"] + self._bands(r.bands)
        out += ["", "First call vs steady at never-seen shapes (ms)"] + self._rows(r)
        out += ["", "Per op (median over the new shapes)"] + self._summary(r)
        out += ["", "Shape vs size (two never-seen shapes of equal output size)"] + self._pairs(r)
        out += ["", f"Bucketing: {r.bucketing.get('op', 'matmul')}"] + self._bucketing(r.bucketing)
        out += ["", "Predictions (what a JIT-compiling backend shows; checked against this run)"] + self._predictions(r)
        out += ["", "Evidence (one line per op and verdict)"] + self._evidence(r)
        if r.notes:
            out += ["", "Notes"] + [f"  - {n}" for n in r.notes]
        return "\n".join(out) + "\n"

    def _bands(self, bands: dict[str, Any]) -> list[str]:
        alloc_his = [v["hi_ms"] for v in bands["allocation"].get("by_bytes", {}).values()]
        by_size = (f"{ms_decimals(min(alloc_his))}..{ms_decimals(max(alloc_his))} by op size" if len(set(alloc_his)) > 1
                   else ms_decimals(bands["allocation"]["hi_ms"]))
        rows = [["launch", f"{ms_decimals(bands['launch']['lo_ms'])} - {ms_decimals(bands['launch']['hi_ms'])}"],
                ["allocation", f"{ms_decimals(bands['allocation']['lo_ms'])} - {by_size}"],
                ["compile", f"above {by_size}"]]
        lines = table(["band", "excess over steady (ms)"], rows, rule=True)
        lines += [f"  {name}: {bands[name].get('how', '')}" for name in ("launch", "allocation", "compile")]
        metal = bands["compile"].get("metal_reference")
        if metal:
            if metal.get("pipeline_lo_ms") is not None:
                lines.append(f"  Metal compile measured here (native reference probe): a new pipeline "
                             f"{ms_decimals(metal['pipeline_lo_ms'])} - {ms_decimals(metal['pipeline_hi_ms'])} ms, the "
                             f"library {ms_decimals(metal['library_ms']) if metal.get('library_ms') is not None else '-'} ms")
            else:
                lines.append(f"  Metal compile not measured: {metal.get('error') or 'no pipeline compiled'}")
        first = bands["launch"].get("trivial_first_ms")
        if first is not None:
            lines.append(f"  (the trivial op's own first call, the runtime's warm-up on this backend: {duration(first)})")
        return lines

    def _rows(self, r: Any) -> list[str]:
        rows = []
        for op, shape_rows in r.ops.items():
            for s in shape_rows:
                rows.append([op, s.label, s.role.replace("_", " "), ms_decimals(s.first_ms), ms_decimals(s.steady_ms),
                             _x(s.ratio), ms_decimals(s.seen_rerun_ms), _x(s.rerun_share), ms_decimals(s.alloc_hi_ms),
                             s.verdict])
        return table(["op", "shape", "role", "first", "steady", "ratio", "re-run", "re-run/first", "alloc band <=",
                      "verdict"], rows, right={3, 4, 5, 6, 7, 8}, rule=True)

    def _summary(self, r: Any) -> list[str]:
        rows = []
        for op, s in r.op_summary.items():
            verdicts = ", ".join(f"{v} {n}" for v, n in sorted(s.get("verdicts", {}).items(), key=lambda kv: -kv[1]))
            rows.append([op, _x(s["median_ratio"]), f"{_x(s['min_ratio'])}-{_x(s['max_ratio'])}",
                         ms_decimals(s["first_median_ms"]), ms_decimals(s["steady_median_ms"]), _x(s.get("rerun_share_median")),
                         s.get("keyed", "-"), verdicts])
        # "first tax keyed on": whether the op's first-shape tax comes back at its later new shapes
        # (shape) or not (op: a one-time load); the pairs table below asks a different question.
        return table(["op", "first/steady", "range", "first ms", "steady ms", "re-run/first", "first tax keyed on", "verdicts"],
                     rows, right={1, 2, 3, 4, 5}, rule=True)

    def _pairs(self, r: Any) -> list[str]:
        if not r.shape_vs_size:
            return ["  (no matched-size pairs probed)"]
        rows = [[p["op"], str(p.get("output_elems", "")), p["shape_a"], ms_decimals(p.get("a_first_ms")),
                 f"{_x(p['a_ratio'])} {'pays' if p['a_pays'] else 'free'}", p["shape_b"], ms_decimals(p.get("b_first_ms")),
                 f"{_x(p['b_ratio'])} {'pays' if p['b_pays'] else 'free'}", p["keyed"]] for p in r.shape_vs_size]
        return table(["op", "output elems", "shape A", "A first", "A first/steady", "shape B", "B first", "B first/steady",
                      "pair keyed on"], rows, right={1, 3, 4, 6, 7}, rule=True)

    def _bucketing(self, b: dict[str, Any]) -> list[str]:
        K, B = b["K"], b["B"]
        rows = [[f"{K} distinct lengths", str(K), _count(b["distinct"]), ms_decimals(b["distinct"]["wall_ms"])],
                [f"padded to {B} buckets", str(B), _count(b["bucketed"]), ms_decimals(b["bucketed"]["wall_ms"])]]
        if b.get("default_dynamic"):
            rows.append([f"{K} lengths, dynamo defaults (automatic dynamic)", str(K), _count(b["default_dynamic"]),
                         ms_decimals(b["default_dynamic"]["wall_ms"])])
        lines = table(["run", "distinct shapes", "compiles", "wall ms"], rows, right={1, 2, 3}, rule=True)
        if b.get("buckets"):
            lines.append(f"  buckets {b['buckets']}; lengths {b.get('lengths', [])[0]}..{b.get('lengths', [])[-1]}")
        lines.append(f"  compiles counted by {b.get('counter', '?')}")
        return lines

    def _predictions(self, r: Any) -> list[str]:
        lines = []
        for p in r.predictions:
            # A prediction that does not hold is a finding about this backend, not an error.
            lines.append(f"  {p.id}  {'holds        ' if p.holds else 'does not hold'}  {p.claim}")
            lines.append(f"                     {p.figure}")
        return lines

    def _evidence(self, r: Any) -> list[str]:
        lines = []
        for op, shape_rows in r.ops.items():
            seen: set[str] = set()
            for s in shape_rows:
                if s.verdict in seen:
                    continue
                seen.add(s.verdict)
                lines.append(f"  {op} {s.label}: {s.verdict}: " + "; ".join(s.evidence))
        return lines


def _count(run: dict[str, Any]) -> str:
    return "-" if run.get("compiles") is None else str(run["compiles"])

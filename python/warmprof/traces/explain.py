"""`trace --explain`: the ops holding the most unattributed time probed in fresh processes, their
verdicts folded back into the report as inferred causes with the probe as their source.

The trace's op view places the first pass's unexplained time by (module, op) site and keeps each
site's first call (shapes, dtypes, strides). The op probe (probes/aten.py) replays that call in a
fresh process: its first call there against its steady calls, new shapes of the warmed op, a seen
re-run. Its verdict says what a first call of that op costs and what it is keyed on; the fold books
it where the trace saw the op pay:

- paid once per process (runtime_init): the op's first site in the pass, up to the probe's
  op-cold excess;
- keyed on shape (jit_compile / algorithm_selection): the first site of each distinct call
  signature, up to the op-cold excess for the op's first site and the new-shape excess after it;
- allocation (allocator_growth): each site of a new signature, up to the op-cold excess.

Never more than the site's own residual (first pass less seen re-run, outside causes), so the fold
can only take time the trace measured as unexplained; every figure is labelled inferred, with the
probe's own figures in its detail. Sites whose op was not probed, whose probe found nothing or was
too noisy to call, and the modules' own code outside ops stay unattributed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from .. import devices
from ..attribution import Calibration, split_faults
from ..causes import Name
from ..opspec import short_op
from ..report.trace import warm_left_ms

SOURCE = "probe"
FOLDABLE = (Name.RUNTIME_INIT, Name.JIT_COMPILE, Name.ALGORITHM_SELECTION, Name.ALLOCATOR_GROWTH)


@dataclass
class Folded:
    cause: str
    ms: float
    sites: int
    module: str  # the site with the most of it
    detail: str


def _key(call: Mapping[str, Any]) -> str:
    return json.dumps(call, sort_keys=True)


@dataclass(frozen=True)
class Prices:
    """The trace's own calibration, to price what its instruments would book inside a probed first
    call (page faults, file-backed growth): that part is not the probe's to add again."""

    fault_ns: float = 0.0  # one anonymous first-touch fault
    file_ns_per_byte: float = 0.0
    file_faults_per_byte: float = 0.0

    @classmethod
    def of(cls, calibration: Mapping[str, Any] | None) -> "Prices":
        cal = calibration or {}
        unusable = cal.get("unusable") or {}
        fp = cal.get("file_pages") or {}
        file_ok = "file_pages" not in unusable and fp.get("reliable", True)
        return cls(fault_ns=0.0 if "first_touch" in unusable else float(cal.get("fault_cost_ns") or 0.0),
                   file_ns_per_byte=float(fp.get("ns_per_byte") or 0.0) if file_ok else 0.0,
                   file_faults_per_byte=float(fp.get("faults_per_byte") or 0.0) if file_ok else 0.0)


def booked_by_trace_ms(first_call: Mapping[str, Any] | None, prices: Prices) -> float:
    """What the trace's instruments would book inside the probe's first call: oneDNN creation
    (measured there as here), file-backed growth and the other faults at the trace's prices."""
    if not first_call:
        return 0.0
    cal = Calibration(fault_cost_ns=prices.fault_ns, file_ns_per_byte=prices.file_ns_per_byte,
                      file_faults_per_byte=prices.file_faults_per_byte)
    split = split_faults(int(first_call.get("faults") or 0), 0, int(first_call.get("file_bytes") or 0), cal)
    return float(first_call.get("onednn_create_ms") or 0.0) + (split.file_ns + split.anon_ns) / 1e6


def _shape_figure(v: Mapping[str, Any], prices: Prices) -> float | None:
    """The new-shape excess less what the trace books in each new shape's first call (the median over
    the probe's new shapes), or the probe's own figure for a verdict that carries no counters."""
    variants = [x for x in v.get("variants") or [] if x.get("first_call") is not None]
    if variants:
        figures = sorted(max(0.0, float(x["first_ms"]) - float(x["steady_ms"]) - booked_by_trace_ms(x["first_call"], prices))
                         for x in variants)
        return figures[len(figures) // 2]
    shape = v.get("shape_excess_ms")
    return max(0.0, float(shape)) if shape is not None else None


def fold(rows: list[dict[str, Any]], verdicts: Iterable[Mapping[str, Any]], prices: Prices = Prices(),
         budget_ms: float = float("inf")) -> list[Folded]:
    """Inferred causes from op probe verdicts over the (module, op) rows; marks each row it books
    (row["inferred"] = {"cause", "ms"}). Pure: rows and verdicts in, figures out.

    A verdict: {"op", "call", "verdict", "cold_excess_ms", "shape_excess_ms" (or None), "first_call"
    (the child's counters around the first call), "variants" (each new shape's, with its own), ...}.
    The op-cold figure is the probe's cold excess less what the trace itself books in such a call
    (booked_by_trace_ms): the trace already took that out of the site's residual; the same for the
    new-shape figure. Where rows say which holds the op's first call in the pass ("first_of_op") and
    which start a call signature not seen before ("new_signature"), those decide; older rows fall
    back to the order of "index" among the rows. Never more than a row's own ms, and never more than
    budget_ms in all (the report's unattributed time), booked in pass order."""
    by_op: dict[str, Mapping[str, Any]] = {}
    for v in verdicts:
        if v.get("verdict") in FOLDABLE and v.get("op") and v["op"] not in by_op:
            by_op[v["op"]] = v
    plan: list[tuple[int, str, dict[str, Any], str, float]] = []  # (index, op, row, cause, figure)
    for op, v in by_op.items():
        sites = sorted((r for r in rows if r.get("op") == op and warm_left_ms(r) > 0 and "inferred" not in r),
                       key=lambda r: r.get("index", 0))
        cause = v["verdict"]
        cold = max(0.0, float(v.get("cold_excess_ms") or 0.0) - booked_by_trace_ms(v.get("first_call"), prices))
        shape = _shape_figure(v, prices)
        seen: set[str] = set()
        for k, r in enumerate(sites):
            sig = _key(r["call"]) if "call" in r else f"#{k}"
            first = r["first_of_op"] if "first_of_op" in r else k == 0
            new_sig = r["new_signature"] if "new_signature" in r else sig not in seen
            seen.add(sig)
            # what a warm process already booked as paid once per process is not the probe's to add again
            cold_here = max(0.0, cold - r.get("warm_process_ms", 0.0))
            if cause == Name.RUNTIME_INIT:
                figure = cold_here if first else 0.0
            elif cause in (Name.JIT_COMPILE, Name.ALGORITHM_SELECTION):
                figure = (cold_here if first else (shape if shape is not None else 0.0)) if new_sig else 0.0
            else:  # allocator_growth
                figure = cold_here if new_sig else 0.0
            plan.append((int(r.get("index", 0)), op, r, cause, figure))
    totals: dict[str, list] = {}
    left = max(0.0, budget_ms)
    for _, op, r, cause, figure in sorted(plan, key=lambda p: p[0]):
        ms = min(warm_left_ms(r), figure, left)
        if ms <= 0:
            continue
        left -= ms
        r["inferred"] = {"cause": cause, "ms": ms}
        t = totals.setdefault(cause, [0.0, 0, {}, []])
        t[0] += ms
        t[1] += 1
        t[2][r["module"]] = t[2].get(r["module"], 0.0) + ms
        if short_op(op) not in t[3]:
            t[3].append(short_op(op))
    out = []
    for cause, (ms, n, mods, ops) in totals.items():
        out.append(Folded(cause, ms, n, max(mods, key=mods.get), (
            f"op probes in fresh processes ({', '.join(ops)}): each op's first call there cost more than its steady "
            "calls, beyond what this trace's instruments book in such a call (oneDNN creation, page faults at this "
            f"machine's prices); booked at {n} (module, op) site(s) where the trace saw the op pay, never more than "
            "the site's own residual nor, in all, the unattributed time (inferred: the probe ran the op alone, "
            "not in this pass)")))
    out.sort(key=lambda f: -f.ms)
    return out


def apply(report: Any, verdicts: Sequence[Mapping[str, Any]], wall_s: float | None = None) -> list[Folded]:
    """Fold probe verdicts into a trace report: inferred causes (source "probe"), the attributed and
    unattributed totals and every share recomputed, the verdicts kept under instruments["op_probes"],
    the advice written again."""
    from ..errors import InputError
    from ..report import CauseEntry

    if "op_probes" in report.instruments:
        raise InputError("this report already has op probe verdicts folded in (instruments.op_probes)")
    calibration = report.protocol.calibration if report.protocol is not None else {}
    kind = devices.find(str(report.device))
    folds = kind is not None and kind.fold_op_probes
    # Off the CPU the probe's child does not yet read what the trace's CUDA instruments book in a
    # first call (CUPTI's module loads, cuBLAS set-up), so its excess would be counted twice: kept, not folded.
    folded = fold(report.unattributed_where, verdicts, Prices.of(calibration),
                  budget_ms=max(0.0, report.unattributed_ms)) if folds else []
    for f in folded:
        report.causes.append(CauseEntry(cause=f.cause, ms=f.ms, share=0.0, evidence="inferred", source=SOURCE,
                                        module=f.module, count=f.sites, detail=f.detail))
    added = sum(f.ms for f in folded)
    _retotal(report, added)
    report.instruments["op_probes"] = {"verdicts": [dict(v) for v in verdicts],
                                       "folded_ms": added, **({"wall_s": wall_s} if wall_s is not None else {})}
    if not folds:
        report.notes.append(f"--explain on {report.device}: the verdicts are kept under instruments.op_probes but not "
                            "folded in (the probe does not yet read what this trace's CUDA instruments book in a first call)")
    probed = len(verdicts)
    found = sum(1 for v in verdicts if v.get("verdict") in FOLDABLE)
    report.notes.append(
        f"--explain: {probed} op(s) probed in fresh processes, {found} with a first-call cost the probe could name; "
        f"{added:.2f} ms folded in as inferred causes (source probe)"
        + (f"; the probes took {wall_s:.1f} s" if wall_s is not None else ""))
    return folded


def explain_report(report: Any, *, top: int = 8, threads: int | None = None, device: str | None = None,
                   progress: Any = False) -> list[Folded]:
    """Probe the report's top op sites in fresh processes and fold the verdicts in (see apply)."""
    import dataclasses
    import time

    from ..errors import InputError, ReportError
    from ..probes.aten import probe_from
    from .settings import mark_explained

    mark_explained(report, top)
    t0 = time.monotonic()
    try:
        result = probe_from(report, top=top, threads=threads, device=device, progress=progress, one_per_op=True)
    except (InputError, ReportError) as e:  # nothing to probe: the trace stands, and says why
        report.notes.append(f"--explain: nothing probed: {e}")
        return []
    verdicts = [dataclasses.asdict(v) for v in result.ops]
    return apply(report, verdicts, time.monotonic() - t0)


# -- Two more fresh processes: the model run once before its trace, at the same and at another shape --

WARM_SOURCE = "warm_process"  # runtime_init: what a process that ran the model at another shape did not pay
OWN_SOURCE = "warm_same_shape"  # profiler_overhead: what is left when the model ran at this very shape first


def other_shape(shape: list[int], more: int = 1) -> list[int]:
    """The input shape of an other-shape run: `more` more in the batch dimension (a size every model
    accepts, and one the traced pass never ran at)."""
    return [shape[0] + more, *shape[1:]] if shape else []


SHRINK_MIN = 8  # a dimension is made smaller for the control's other shapes only from this size


def control_other_shapes(shape: list[int], n: int, shrink: bool = True) -> list[list[list[int]]]:
    """The control's other shapes, as sets to try in order (a model that refuses the first shape of a set
    gets the next set): the first dimension after the batch of at least SHRINK_MIN (a sequence, an image's
    height) 1..n smaller; then 1..n more in the batch dimension, which every model takes (one refused pass
    at most: a forward the model gave up partway leaves what it did). A smaller shape is new to the process
    but fits in the memory the traced shape's passes already grew, so its first pass pays what a new shape
    pays (shape-keyed kernels and primitives, new code paths) and no allocator growth, at the traced pass's
    own cost and noise; a larger batch pays growth too (booked apart, as allocator_growth) and its passes,
    2-4x the traced one's, are that much noisier (the demo at 1x128 in fresh processes: a first pass at
    batch 2-4 over its steady passes -10 to +8 ms, at 127-125 tokens -1.1 to +1.0 ms, against 1-2 ms paid
    per process). `shrink` False: the batch set only."""
    if not shape:
        return []
    dims = [d for d in range(1, len(shape)) if shrink and shape[d] >= SHRINK_MIN][:1]
    sets = [[[*shape[:d], shape[d] - k, *shape[d + 1:]] for k in range(1, n + 1)] for d in dims]
    return [*sets, [other_shape(shape, k) for k in range(1, n + 1)]]


def _row_key(w: Mapping[str, Any]) -> tuple[str, str]:
    return (str(w.get("module")), str(w.get("op", "")))


def _spread(rows: list[tuple[dict[str, Any], float]], total: float, field_name: str) -> float:
    """Book `total` over rows in proportion to each row's figure (each at most its figure)."""
    weight = sum(f for _, f in rows)
    if total <= 0 or weight <= 0:
        return 0.0
    scale = min(1.0, total / weight)
    booked = 0.0
    for w, f in rows:
        w[field_name] = w.get(field_name, 0.0) + f * scale
        booked += f * scale
    return booked


def _free_excess_ms(r: Any) -> float:
    """A trace's first pass over its seen re-run, outside every cause and estimate: the signed sum of
    all its (module, op) sites (the rows keep the positive ones only)."""
    rerun = r.protocol.seen_rerun_residual_ms if r.protocol is not None else None
    return float(r.unattributed_ms) - float(rerun or 0.0)


def _own_unbooked_ms(report: Any) -> float:
    """warmprof's own first-pass cost (the control's warm control) beyond what it booked as causes:
    what of it a trace without a control keeps in its residual."""
    own = getattr(report, "own_cost", None) or {}
    first = own.get("first_pass_ms")
    if not isinstance(first, (int, float)):
        return 0.0
    return max(0.0, float(first) - float(own.get("booked_in_control_ms", 0.0) or 0.0))


def fold_warm_processes(report: Any, same: Any | None, other: Any | None) -> list[Folded]:
    """Fold in two more traces of the same model (op view on), each in a fresh process that ran the
    model once first, row by (module, op) row (c: this trace's row, r_c its rerun_ms; s, r_s: the
    same where the model first ran at this very shape; o: where it first ran at another shape;
    missing rows are 0):

    - own = min(c, s - max(0, r_c - r_s)): the model was warm there, so what its first traced pass
      still paid over its re-run is warmprof's own first-pass cost, the cold paths of its instruments
      (less what the model itself still paid at its second call: in this trace that is in rerun_ms,
      not in c): profiler_overhead, source warm_same_shape;
    - once = min(c - own, c - o): what the process that ran another shape first did not pay again,
      what a process pays once whatever the shape (the first run of the model's Python code and
      torch's bindings, op set-up): runtime_init, source warm_process;
    - what is left (o - s, keyed on the shape; and noise) stays for the op probes, or unattributed.

    Rows keep positive sites only, so their sums lean high on noise: each total is capped by the
    signed figure of the whole traces (each one's first pass over its re-run outside causes, all
    sites: _free_excess_ms): own by the same-shape trace's, once by this trace's less the
    other-shape trace's; and, in all, by the unattributed time. Rows get a total in proportion."""
    from ..errors import InputError
    from ..report import CauseEntry

    if any(c.source in (WARM_SOURCE, OWN_SOURCE) for c in report.causes):
        raise InputError("this report already has the warm processes folded in")
    rows = list(report.unattributed_where)
    budget = max(0.0, report.unattributed_ms)
    here_free = _free_excess_ms(report)
    out: list[Folded] = []
    for cause, source, warm in ((Name.PROFILER_OVERHEAD, OWN_SOURCE, same), (Name.RUNTIME_INIT, WARM_SOURCE, other)):
        if warm is None:
            continue
        theirs = {_row_key(w): w for w in warm.unattributed_where}
        per_row = []
        for w in rows:
            c = float(w.get("ms", 0.0))
            t = theirs.get(_row_key(w), {})
            if cause == Name.PROFILER_OVERHEAD:
                second_call = max(0.0, float(w.get("rerun_ms", 0.0)) - float(t.get("rerun_ms", 0.0)))
                f = min(c, float(t.get("ms", 0.0)) - second_call)
            else:
                # the other run had no control: its rows hold warmprof's own first-call time at the
                # site, which this trace's control measured (own_ms) and took out of this row
                theirs_net = float(t.get("ms", 0.0)) - float(w.get("own_ms", 0.0))
                f = min(c - w.get("warm_own_ms", 0.0), c - theirs_net)
            if f > 0:
                per_row.append((w, f))
        signed = (_free_excess_ms(warm) if cause == Name.PROFILER_OVERHEAD
                  else here_free - (_free_excess_ms(warm) - _own_unbooked_ms(report)))
        booked = _spread(per_row, min(max(0.0, signed), budget), "warm_own_ms" if cause == Name.PROFILER_OVERHEAD
                         else "warm_process_ms")
        if booked <= 0:
            continue
        budget -= booked
        field_name = "warm_own_ms" if cause == Name.PROFILER_OVERHEAD else "warm_process_ms"
        by_module: dict[str, float] = {}
        for w, _ in per_row:
            by_module[w["module"]] = by_module.get(w["module"], 0.0) + w.get(field_name, 0.0)
        shape = "x".join(str(d) for d in (warm.shape or []))
        if cause == Name.PROFILER_OVERHEAD:
            detail = (f"the same trace in a fresh process that first ran the model once at this very shape ({shape}) "
                      f"still paid {booked:.2f} ms over its re-run at these rows ({len(per_row)} of {len(rows)}; at most "
                      f"that trace's whole first pass over its re-run, {signed:.2f} ms): with the model warm, that is "
                      "warmprof's own first-pass cost, the cold paths of its instruments that the warm instrumented "
                      "steady passes cannot see (inferred: two processes compared, one run each)")
        else:
            detail = (f"the same trace in a fresh process that first ran the model once at input shape {shape} paid "
                      f"{booked:.2f} ms less at these rows ({len(per_row)} of {len(rows)}; at most the difference of the "
                      f"two traces' whole first passes over their re-runs, {signed:.2f} ms): what a process pays once "
                      "whatever the shape, the first run of the model's Python code and torch's bindings, op set-up "
                      "(inferred: two processes compared, one run each)")
        module = max(by_module, key=by_module.__getitem__)
        report.causes.append(CauseEntry(cause=cause, ms=booked, share=0.0, evidence="inferred", source=source,
                                        module=module, count=len(per_row), detail=detail))
        _retotal(report, booked)
        out.append(Folded(cause, booked, len(per_row), module, detail))
    return out


def _retotal(report: Any, added: float) -> None:
    """The totals, shares, notes and advice after `added` ms more were attributed."""
    from .advice import advise
    from .build import first_call_residual_note, share_of

    from .fold import modules_as_booked, settle_unstable, settle_verdict

    report.attributed_ms += added
    report.unattributed_ms -= added
    acc = getattr(report, "accounting", None)
    if isinstance(acc, dict):  # the one accounting: the time moves from unattributed to the causes
        acc["causes_ms"] = report.attributed_ms
        acc["unattributed_ms"] = report.unattributed_ms
        settle_unstable(acc)
    settle_verdict(report)
    for c in report.causes:
        c.share = share_of(c.ms, report.excess_ms, report.attributed_ms)
    report.causes.sort(key=lambda c: -c.ms)
    report.modules = modules_as_booked(report.modules, report.causes)
    if report.protocol is not None:  # (unattributed_within_noise: settle_verdict, against the accounting's limit)
        residual_rerun = report.protocol.seen_rerun_residual_ms
        for i, note in enumerate(report.notes):  # the note that quotes the unattributed time, said again
            if note.startswith("first-call work no instrument brackets") and residual_rerun is not None:
                report.notes[i] = first_call_residual_note(report.unattributed_ms, residual_rerun, report.noise_band_ms)
    report.advice = advise(report)

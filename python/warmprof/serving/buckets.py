"""Bucket plans: which padded lengths to compile for, so that compiles plus padding cost the least.

A service that pads each request up to a bucket pays two costs: a compile (a graph, a capture, an
algorithm choice: whatever a new shape costs the first time) once per bucket it uses, and padding on
every request, (bucket - length) wasted tokens each. Few buckets waste tokens; many buckets pay
compiles. plan_buckets() finds the boundaries that minimise

    cost = compile_ms x buckets used + per_token_ms x sum over the requests of (boundary - length)

where a request of length L goes to the smallest boundary >= L and the last boundary is the longest
length seen. It is exact: an optimal boundary always sits on an observed length (lowering a boundary
to the longest length in its bucket only removes padding), so a dynamic programme over the n distinct
lengths finds the optimum: O(n^2) at most without a cap on the number of buckets (the scan for a
bucket's lower end stops once that bucket alone costs more than the best plan found, which keeps
large inputs fast without changing the answer), plus O(max_buckets x n log n) with a cap that the
uncapped optimum exceeds (see _layers).

The lengths are the traffic the compiles are paid over (a process's life, say): padding grows with
the number of requests, compiles do not, so a count scaled up favours more buckets.

costs_from_probe() reads compile_ms and per_token_ms off a `warmprof probe` report; how, and from
which fields, is in its docstring. Nothing here imports torch.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from ..errors import InputError
from ..report.buckets import Bucket, BucketPlan, PlanCost, check_length
from ..stats import median


@dataclass(frozen=True)
class ProbeCosts:
    """compile_ms and per_token_ms for plan_buckets(), and how each was found."""

    compile_ms: float
    per_token_ms: float
    compile_how: str
    per_token_how: str

    def to_dict(self) -> dict[str, Any]:
        return vars(self).copy()


MAX_COST_MS = 1e9  # what one bucket or one padded token may cost: with MAX_LENGTH and MAX_COUNT, every sum stays finite
MAX_COUNT = 10**15  # requests of one length


STATIC = "static"  # every bucket compiles its own graph: torch.compile(dynamic=False), CUDA graphs, a TensorRT engine
AUTOMATIC = "automatic"  # torch.compile's default (dynamic=None): the second distinct shape recompiles with the
# varying size marked dynamic, and that one dynamic graph serves every later length: two compiles at most
COMPILE_MODELS = (STATIC, AUTOMATIC)
AUTOMATIC_COMPILES = 2


def plan_buckets(lengths: Any, *, compile_ms: float, per_token_ms: float, max_buckets: int | None = None,
                 compiles: str = STATIC) -> BucketPlan:
    """The bucket boundaries that cost the least in compiles plus padding, found exactly.

    lengths: the observed request lengths, a list with repeats (the distribution) or a {length:
    count} mapping; positive integers. compile_ms: what a bucket costs once, the first time its shape
    runs. per_token_ms: what one padded token costs (a request of length L in bucket B pays
    (B - L) x per_token_ms). max_buckets: at most this many buckets (None: no cap).

    Returns a BucketPlan: .boundaries (ascending, the last the longest length), .cost_ms =
    .compile_ms + .padding_ms, and the same figures for one bucket per length (.per_length) and
    one bucket (.one_bucket). Among plans of equal cost, the one with fewest buckets is returned.

    compiles: how many compiles a plan pays. "static" (the default): one per bucket used, as
    torch.compile(dynamic=False), CUDA graph capture or an engine per shape pay. "automatic":
    torch.compile's default automatic dynamic shapes, where the second distinct length recompiles
    with that size dynamic and the one dynamic graph serves the rest: min(buckets, 2) compiles, so
    past two buckets padding only adds cost (the plan is then one bucket, or one per length, or the
    least padding the cap allows). A dynamic graph's own per-call cost is not modelled: measure it.
    """
    hist = _histogram(lengths)
    compile_ms = _cost(compile_ms, "compile_ms")
    per_token_ms = _cost(per_token_ms, "per_token_ms")
    if max_buckets is not None:
        max_buckets = _positive_int(max_buckets, "max_buckets")
    if compiles not in COMPILE_MODELS:
        raise InputError(f"compiles must be one of {', '.join(COMPILE_MODELS)}, not {compiles!r}")
    values = [v for v, _ in hist]
    P, Q = [0], [0]  # prefix sums: requests, and tokens
    for v, c in hist:
        P.append(P[-1] + c)
        Q.append(Q[-1] + c * v)
    n = len(values)

    def costed(buckets: int, padded: int) -> PlanCost:
        if compiles == AUTOMATIC:
            return _plan_cost(min(buckets, AUTOMATIC_COMPILES), padded, compile_ms, per_token_ms, buckets=buckets)
        return _plan_cost(buckets, padded, compile_ms, per_token_ms)

    if compiles == STATIC:
        ends = _optimal_ends(values, P, Q, compile_ms, per_token_ms, max_buckets)
    else:
        # two compiles at most: the least padding the cap allows (a programme with no compile cost;
        # ties to fewer buckets), against one bucket's one compile
        least = _optimal_ends(values, P, Q, 0.0, per_token_ms, max_buckets)
        pad_least = sum(_padding(values, P, Q, i, k) for i, k in zip([0, *least[:-1]], least))
        one = [n]
        ends = min((least, one), key=lambda e: (costed(len(e), pad_least if e is least else _padding(values, P, Q, 0, n))
                                                .cost_ms, len(e)))
    buckets, start = [], 0
    for end in ends:  # each bucket: distinct lengths start..end-1, padded to values[end - 1]
        top = values[end - 1]
        buckets.append(Bucket(upper=top, lower=values[start], lengths=end - start, requests=P[end] - P[start],
                              padded_tokens=top * (P[end] - P[start]) - (Q[end] - Q[start])))
        start = end
    plan = costed(len(buckets), sum(b.padded_tokens for b in buckets))
    return BucketPlan(
        boundaries=tuple(b.upper for b in buckets), buckets=tuple(buckets), cost_ms=plan.cost_ms,
        compile_ms=plan.compile_ms, padding_ms=plan.padding_ms, padded_tokens=plan.padded_tokens,
        requests=P[n], distinct_lengths=n, compile_ms_per_bucket=compile_ms, per_token_ms=per_token_ms,
        max_buckets=max_buckets,
        per_length=costed(n, 0),
        one_bucket=costed(1, values[-1] * P[n] - Q[n]),
        compiles=compiles,
    )


def costs_from_probe(report: Any, *, compile_ms: float | None = None, per_token_ms: float | None = None) -> ProbeCosts:
    """compile_ms and per_token_ms for plan_buckets(), estimated from a `warmprof probe` report (a
    ProbeReport, or the path of one saved with `warmprof probe --json`). A figure given here is
    used as it is; the other is estimated. Both are estimates from the probe's own ops on its own
    device, not from your model: measure your model's where you can. ProbeCosts.compile_how and
    .per_token_how say which of the sources below each came from, with the figures used.

    per_token_ms, the steady time per row (token) at the largest length, from the first of:
      1. the bucketing sweep's steady reference ([seq, d] @ [d, d] run steady at the sweep's largest
         length; written where the backend has no compile counter): bucketing.bucketed.steady_ref_ms
         / max(bucketing.buckets), or bucketing.distinct.steady_ref_ms / max(bucketing.lengths);
      2. the op rows: of the matmul rows (the sweep's op; every op's when no matmul was probed) the
         one with the most rows (shape[0]): steady_ms / shape[0].
    compile_ms, the first-call excess per new shape, from the first of:
      1. the bucketing sweep, where its compiles were counted (bucketing.counted: dynamo's graph
         counter, not inferred from times): the distinct run compiled once per length and the
         bucketed run once per bucket on the same requests, so (distinct.wall_ms - bucketed.wall_ms
         + per_token_ms x the bucketed run's padded tokens) / (distinct.compiles - bucketed.compiles);
         the padded tokens are each of bucketing.lengths padded to the smallest of .buckets >= it
         (0 where the report lists none);
      2. the distinct run's own calls (bucketing.distinct.first_calls_ms, one per length): every call
         after the first (the first also pays the function's first-ever call) is the first at a new
         length; the median of call - per_token_ms x length;
      3. the op rows at a new shape of an already-warm op (role new_shape): median first_ms - steady_ms.
    A source that is present but shows no excess (a median of 0 or less) passes to the next; when
    none shows one, compile_ms is 0 (new shapes cost nothing measurable: bucketing gains nothing)
    and compile_how says so. A report with none of these figures is refused with an InputError.
    """
    from ..report.probe import ProbeReport

    report = _report_of(report, ProbeReport, "costs come from a probe report (warmprof probe --json P.json)")
    if per_token_ms is not None:
        per_token_ms, per_token_how = _cost(per_token_ms, "per_token_ms"), "given"
    else:
        per_token_ms, per_token_how = _probe_per_token(report)
    if compile_ms is not None:
        compile_ms, compile_how = _cost(compile_ms, "compile_ms"), "given"
    else:
        compile_ms, compile_how = _probe_compile(report, per_token_ms)
    return ProbeCosts(compile_ms=compile_ms, per_token_ms=per_token_ms, compile_how=compile_how,
                      per_token_how=per_token_how)


@dataclass(frozen=True)
class MeasuredCosts:
    """What a watch or trace report gives plan_buckets(): the costs measured on the model, the
    lengths (a watch report's traffic; None from a trace), the compile model its compiles showed,
    and how each was found."""

    compile_ms: float
    per_token_ms: float
    compile_how: str
    per_token_how: str
    lengths: dict[int, int] | None = None
    lengths_how: str = ""
    compiles: str = STATIC
    compiles_how: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = vars(self).copy()
        if self.lengths is not None:
            out["lengths"] = {str(k): v for k, v in sorted(self.lengths.items())}
        return out


def _key_shape(key: str) -> tuple[int, ...] | None:
    """The first tensor's shape of a watch key ("1x80 int64", "1x80 int64, 1x80 int64", a keyword's
    "input_ids=1x80 int64"); None if the key names none (a key function's own string)."""
    first = key.split(",")[0].strip().split(" ")[0].split("=")[-1]
    try:
        dims = tuple(int(d) for d in first.split("x"))
    except ValueError:
        return None
    return dims if dims and all(d >= 0 for d in dims) else None


def costs_from_watch(report: Any, *, compile_ms: float | None = None, per_token_ms: float | None = None,
                     need_lengths: bool = True) -> MeasuredCosts:
    """The costs and the traffic of a watched model, from a watch report (a WatchReport, or the path
    of one saved with `warmprof watch --json` or Watcher.report().save()).

    lengths (unless need_lengths is False: the caller has its own): each key's calls, at the one
    dimension of the keys' first tensor that varies between keys (the request length); refused when
    none or several vary (a key function's own keys: give the lengths). compile_ms: the median, over
    the keys whose first call compiled, of what that call booked to the causes a new shape pays again
    (jit_compile, graph_capture, algorithm_selection: measured on the model); refused when the report
    kept no key's first call (its oldest events dropped). per_token_ms: the least-squares slope of the
    keys' median latency against their length, over keys with 3 calls or more (the median is then a
    steady call's), 0 where it falls (padding costs nothing measurable). compiles: "static" where every
    key's first call compiled; "automatic" where only the first one or two did and later keys did not
    (one dynamic graph served them: with one, the model's two compiles are an upper bound). A figure
    given is used as it is, and what it needs is not read."""
    from ..report.watch import WatchReport

    report = _report_of(report, WatchReport, "--from-watch reads a watch report (warmprof watch --json W.json)")
    lengths: dict[int, int] | None = None
    lengths_how = ""
    if need_lengths or per_token_ms is None:
        dim, known = _length_dim(report)
        keys = [k for k in report.keys if k["key"] in known]
    if need_lengths:
        lengths = {}
        for k in keys:
            n = known[k["key"]][dim]
            if n > 0:
                lengths[n] = lengths.get(n, 0) + int(k["calls"])
        skipped = len(report.keys) - len(keys)
        lengths_how = (f"{sum(lengths.values())} calls at {len(lengths)} lengths: each key's calls, its length the "
                       f"first tensor's dimension {dim} (the one that varies between keys)"
                       + (f"; {skipped} key(s) naming no shape left out" if skipped else "")
                       + (f"; {report.overflow_calls} calls at keys past the watcher's max_keys not counted"
                          if report.overflow_calls else ""))
    # each key's first call, as the report kept it (its oldest events may have been dropped)
    firsts = sorted((e for e in report.events if e.get("first")), key=lambda e: e["index"])
    order = [e["key"] for e in firsts]
    compiled = {e["key"]: ms for e in firsts
                if (ms := sum(float(c["ms"]) for c in e.get("causes", []) if c.get("cause") in COMPILE_CAUSES)) > 0}
    missing = len({k["key"] for k in report.keys} - set(order))
    lost = (f"; {missing} key(s)' first calls not kept (the report's oldest events dropped: "
            f"{report.events_dropped})" if missing else "")
    if compiled and len(compiled) == len(order) and not missing:
        model, model_how = STATIC, f"static: each of the {len(order)} keys' first calls compiled"
    elif compiled and len(order) > len(compiled) and set(compiled) <= set(order[:AUTOMATIC_COMPILES]) and not missing:
        model, model_how = AUTOMATIC, (f"automatic: only the first {len(compiled)} of {len(order)} keys' first calls "
                                       "compiled (one dynamic graph served the later lengths"
                                       + ("; with one compile only, two is an upper bound)" if len(compiled) == 1
                                          else ")"))
    else:
        model, model_how = STATIC, (f"static (assumed): {len(compiled)} of {len(order)} kept keys' first calls "
                                    f"compiled, neither every one nor only the first one or two{lost}")
    if compile_ms is not None:
        compile_ms, compile_how = _cost(compile_ms, "compile_ms"), "given"
    elif compiled:
        compile_ms = median(list(compiled.values()))
        compile_how = (f"median of what the first call of the {len(compiled)} keys that compiled booked to "
                       f"{', '.join(COMPILE_CAUSES)}: {compile_ms:.4g} ms (measured on the model){lost}")
    elif not firsts:
        raise InputError(f"the watch report kept no key's first call (events dropped: {report.events_dropped}), so "
                         "no compile cost can be read from it: give --compile-ms")
    else:
        compile_ms, compile_how = 0.0, f"none of the {len(firsts)} kept keys' first calls compiled: 0{lost}"
    if per_token_ms is not None:
        per_token_ms, per_token_how = _cost(per_token_ms, "per_token_ms"), "given"
    else:
        steady = [(known[k["key"]][dim], float(k["p50_ms"])) for k in keys if int(k["calls"]) >= 3]
        if len({n for n, _ in steady}) < 2:
            raise InputError("the watch report has fewer than two keys with 3 or more calls, so no steady latency per "
                             "length to fit a per-token cost to: give --per-token-ms")
        per_token_ms, slope = _slope(steady)
        per_token_how = (f"least-squares slope of the median latency against length over {len(steady)} keys with 3+ "
                         f"calls: {slope:.4g} ms per token" + (" (falling: 0 used)" if slope <= 0 else ""))
    return MeasuredCosts(compile_ms=compile_ms, per_token_ms=per_token_ms, compile_how=compile_how,
                         per_token_how=per_token_how, lengths=lengths, lengths_how=lengths_how, compiles=model,
                         compiles_how=model_how)


def _length_dim(report: Any) -> tuple[int, dict[str, tuple[int, ...]]]:
    """(the dimension that varies between the keys' first tensors, key -> its shape), or an InputError."""
    shapes = {k["key"]: _key_shape(str(k["key"])) for k in report.keys}
    known = {key: sh for key, sh in shapes.items() if sh is not None}
    if len(known) < 2 or len({len(sh) for sh in known.values()}) != 1:
        raise InputError("the watch report's keys do not name two or more shapes of one rank: give the lengths "
                         "(--lengths) and --per-token-ms")
    rank = len(next(iter(known.values())))
    varying = [d for d in range(rank) if len({sh[d] for sh in known.values()}) > 1]
    if len(varying) != 1:
        raise InputError(f"the watch report's keys vary in {len(varying)} dimensions ({varying}), not one: give the "
                         "lengths (--lengths) and --per-token-ms")
    return varying[0], known


def _slope(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(the slope to use: 0 if it falls, the fitted slope) of y against x by least squares."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx > 0 else 0.0
    return max(slope, 0.0), slope


COMPILE_CAUSES = ("jit_compile", "graph_capture", "algorithm_selection")


def costs_from_trace(report: Any, *, compile_ms: float | None = None, per_token_ms: float | None = None) -> MeasuredCosts:
    """The costs of a traced model, from a trace report (a Report, or the path of one saved with
    `warmprof trace --json`): compile_ms is what its first pass booked to the causes a new shape pays
    again (jit_compile, graph_capture, algorithm_selection: the model's own, its warm control's taken
    off); per_token_ms its steady median over the traced shape's last dimension (the sequence length
    of token ids shaped (batch, length)). One shape was traced: the report says nothing of the
    traffic (give the lengths) nor of automatic dynamic shapes (static is assumed)."""
    from ..report.trace import Report

    report = _report_of(report, Report, "--from-trace reads a trace report (warmprof trace --json R.json)")
    if compile_ms is not None:
        compile_ms, compile_how = _cost(compile_ms, "compile_ms"), "given"
    else:
        by = report.by_cause()
        parts = {c: by[c] for c in COMPILE_CAUSES if by.get(c, 0.0) > 0}
        compile_ms = sum(parts.values())
        compile_how = ((" + ".join(f"{c} {v:.4g} ms" for c, v in parts.items()) + " booked for the model's first pass "
                        f"at {'x'.join(str(d) for d in report.shape or [])}") if parts else
                       "the trace booked no compile, capture or algorithm selection: 0")
    if per_token_ms is not None:
        per_token_ms, per_token_how = _cost(per_token_ms, "per_token_ms"), "given"
    else:
        shape = list(report.shape or [])
        if not shape or shape[-1] <= 0:
            raise InputError("the trace report has no traced shape to divide its steady pass by: give --per-token-ms")
        per_token_ms = report.steady_median_ms / shape[-1]
        per_token_how = (f"steady median {report.steady_median_ms:.4g} ms / {shape[-1]} (the traced shape's last "
                         "dimension taken as the length): an average that includes the pass's fixed cost, so an upper "
                         "bound on a padded token's cost; --from-watch fits the marginal one")
    return MeasuredCosts(compile_ms=compile_ms, per_token_ms=per_token_ms, compile_how=compile_how,
                         per_token_how=per_token_how,
                         compiles_how="static (assumed: one shape was traced, so automatic dynamic shapes were not seen)")


def _report_of(report: Any, cls: Any, wanted: str) -> Any:
    """`report` as a `cls` report: loaded when a path (a corrupt file or another kind: ReportError,
    naming the file), refused with an InputError saying `wanted` when another object."""
    if isinstance(report, (str, os.PathLike)):
        report = cls.load(report)
    if not isinstance(report, cls):
        kind = getattr(report, "KIND", None) or type(report).__name__
        raise InputError(f"{wanted}, not a {kind!r}")
    return report


def _number(x: Any) -> float | None:
    """A finite number from a report field, else None (fields outside the schema are unchecked)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def _int_list(x: Any) -> list[int]:
    if not isinstance(x, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in x):
        return []
    return list(x)


def _probe_per_token(report: Any) -> tuple[float, str]:
    b = report.bucketing
    for run, key in (("bucketed", "buckets"), ("distinct", "lengths")):
        entry, top = b.get(run), max(_int_list(b.get(key)) or [0])
        ref = _number(entry.get("steady_ref_ms")) if isinstance(entry, dict) else None
        if ref is not None and ref > 0 and top > 0:
            return ref / top, (f"bucketing.{run}.steady_ref_ms {ref:.4g} ms (a steady call at the sweep's largest "
                               f"length) / {top} rows")
    ops = {"matmul": report.ops["matmul"]} if report.ops.get("matmul") else report.ops
    rows = [(op, r) for op, rs in ops.items() for r in rs if r.shape and r.steady_ms > 0]
    if not rows:
        raise InputError("the probe report has no steady time to estimate a per-token cost from (no steady "
                         "reference in its bucketing sweep, no op row with a steady time above 0): give per_token_ms "
                         "(--per-token-ms)")
    op, r = max(rows, key=lambda o_r: (o_r[1].shape[0], o_r[1].steady_ms))
    return r.steady_ms / r.shape[0], (f"ops.{op} {r.label}: steady_ms {r.steady_ms:.4g} ms / {r.shape[0]} rows "
                                      "(the probed row with the most rows)")


def _probe_compile(report: Any, per_token_ms: float) -> tuple[float, str]:
    tried: list[str] = []  # what each source showed, for the text when none gives a figure
    for source in (_from_counted_sweep, _from_distinct_calls, _from_new_shape_rows):
        found = source(report, per_token_ms)
        if found is None:
            continue
        value, how = found
        if value > 0:
            return value, how
        tried.append(how)
    if not tried:
        raise InputError("the probe report has no first-call figures to estimate a compile cost per new shape from "
                         "(no counted compiles in its bucketing sweep, no per-call times, no op rows at a new shape): "
                         "give compile_ms (--compile-ms)")
    return 0.0, "no first-call excess per new shape measured: " + "; ".join(tried)


def _from_counted_sweep(report: Any, per_token_ms: float) -> tuple[float, str] | None:
    b = report.bucketing
    distinct, bucketed = b.get("distinct") or {}, b.get("bucketed") or {}
    cd, cb = distinct.get("compiles"), bucketed.get("compiles")
    wd, wb = _number(distinct.get("wall_ms")), _number(bucketed.get("wall_ms"))
    if b.get("counted") is not True or cd is None or cb is None or wd is None or wb is None or cd <= cb:
        return None
    lens, tops = _int_list(b.get("lengths")), sorted(_int_list(b.get("buckets")))
    if lens and tops and max(lens) <= tops[-1]:
        padded = sum(next(t for t in tops if t >= n) - n for n in lens)
        pad_how = f"{per_token_ms * padded:.3g} ms for its {padded} padded tokens"
    else:
        padded, pad_how = 0, "no padding correction: the report lists no lengths and buckets"
    excess = wd - wb + per_token_ms * padded
    return excess / (cd - cb), (f"bucketing sweep, compiles counted: (distinct {wd:.4g} ms - bucketed {wb:.4g} ms "
                                f"wall + {pad_how}) / ({cd} - {cb}) compiles")


def _from_distinct_calls(report: Any, per_token_ms: float) -> tuple[float, str] | None:
    b = report.bucketing
    lens, calls = _int_list(b.get("lengths")), (b.get("distinct") or {}).get("first_calls_ms")
    if not isinstance(calls, list) or len(calls) != len(lens) or len(lens) < 2:
        return None
    times = [_number(c) for c in calls]
    if any(t is None for t in times):
        return None
    excess = median([t - per_token_ms * n for t, n in zip(cast("list[float]", times)[1:], lens[1:])])  # none is None
    return excess, (f"bucketing.distinct.first_calls_ms: median of call - per_token_ms x length over the "
                    f"{len(lens) - 1} calls at a new length after the first: {excess:.4g} ms")


def _from_new_shape_rows(report: Any, per_token_ms: float) -> tuple[float, str] | None:
    rows = report.rows("new_shape")
    if not rows:
        return None
    excess = median([r.first_ms - r.steady_ms for _, r in rows])
    return excess, (f"median first_ms - steady_ms of {len(rows)} op rows at a new shape of a warm op: "
                    f"{excess:.4g} ms")


# -- the dynamic programme -------------------------------------------------------------------------
def _optimal_ends(values: list[int], P: list[int], Q: list[int], compile_ms: float, per_token_ms: float,
                  max_buckets: int | None) -> list[int]:
    """The optimal buckets as the exclusive end index of each (ascending; the last is n).

    Without a cap: best[k] = the cheapest plan for the k shortest distinct lengths, over the start
    i of its last bucket (_chain). A prefix's plan is kept as (buckets, padded tokens) and its cost
    computed from those two integers, so two plans with the same figures cost exactly the same and
    the fewer buckets win a tie. With a cap the uncapped optimum exceeds: for each b up to the cap,
    the fewest padded tokens with exactly b buckets (_layers), then the b whose total costs least."""
    n = len(values)
    nb, parent = _chain(values, P, Q, compile_ms, per_token_ms)
    if max_buckets is None or nb <= max_buckets:
        return _walk(n, [parent], layered=False)
    pads, parents = _layers(values, P, Q, min(max_buckets, n))
    b = min(range(1, len(pads) + 1), key=lambda b: (compile_ms * b + per_token_ms * pads[b - 1], b))
    return _walk(n, parents[:b], layered=True)


def _padding(values: list[int], P: list[int], Q: list[int], i: int, k: int) -> int:
    """Padded tokens of one bucket holding distinct lengths i..k-1, padded to values[k - 1]."""
    return values[k - 1] * (P[k] - P[i]) - (Q[k] - Q[i])


def _chain(values: list[int], P: list[int], Q: list[int], compile_ms: float,
           per_token_ms: float) -> tuple[int, list[int]]:
    """The uncapped programme in O(n log n): (the optimum's bucket count, parent pointers).

    best[k] = min over i of best[i] + one bucket of lengths i..k-1, compared as (cost, buckets): a
    plan's cost is computed from its two integers (buckets, padded tokens), so equal figures cost
    exactly the same and the fewer buckets win a tie. A bucket's weight satisfies the quadrangle
    inequality (see _layers; a constant per bucket, which the tie-break on buckets amounts to, keeps
    it), so the best start of the last bucket never falls as k grows: the candidates are kept in a
    queue, each with the first k from which it beats the one before it (found by binary search),
    the classic 1D/1D programme with monotone decisions. (It was a scan down from each k, quadratic:
    18.5 s at 16,000 distinct lengths.)"""
    n = len(values)
    nb, pad, parent = [0] * (n + 1), [0] * (n + 1), [0] * (n + 1)
    C, T = compile_ms, per_token_ms

    def beats(a: int, b: int, k: int) -> bool:
        """Whether best[a] + a bucket a..k-1 is a better plan than best[b] + a bucket b..k-1 (each
        bucket's padding is _padding's, inlined: this is the programme's inner loop)."""
        top, pk, qk = values[k - 1], P[k], Q[k]
        na, nb_ = nb[a] + 1, nb[b] + 1
        ca = C * na + T * (pad[a] + top * (pk - P[a]) - (qk - Q[a]))
        cb = C * nb_ + T * (pad[b] + top * (pk - P[b]) - (qk - Q[b]))
        return ca < cb or (ca == cb and na < nb_)

    starts: list[int] = [0]  # the candidates (starts of the last bucket), best first
    froms: list[int] = [1]  # from which k each is the best
    head = 0
    for k in range(1, n + 1):
        while head + 1 < len(starts) and froms[head + 1] <= k:
            head += 1
        i = starts[head]
        nb[k] = nb[i] + 1
        pad[k] = pad[i] + _padding(values, P, Q, i, k)
        parent[k] = i
        if k == n:
            break
        # k as a start for the later ends: it drops every candidate it beats from where that one begins
        while len(starts) > head + 1 and froms[-1] > k and beats(k, starts[-1], froms[-1]):
            starts.pop()
            froms.pop()
        j, lo, hi = starts[-1], max(froms[-1], k + 1), n
        if not beats(k, j, n):  # once ahead it stays ahead: behind at the last end, never ahead
            continue
        while lo < hi:  # the first end at which k beats j
            mid = (lo + hi) // 2
            if beats(k, j, mid):
                hi = mid
            else:
                lo = mid + 1
        starts.append(k)
        froms.append(lo)
    return nb[n], parent


def _layers(values: list[int], P: list[int], Q: list[int], max_b: int) -> tuple[list[int], list[list[int]]]:
    """For b = 1..max_b: the fewest padded tokens covering all n lengths with exactly b buckets
    (pads[b - 1]), and each layer's parent pointers. With b fixed, the cost is compile x b plus
    per_token x padding, so each layer minimises the integer padding: exact, no float ties. A
    bucket's padding satisfies the quadrangle inequality (extending the buckets i..k and i'..k'
    (i <= i' <= k <= k') to i..k' adds (v[k'-1] - v[k-1]) x requests(i..i'-1) >= 0 beyond what
    swapping their ends saves), so the best start of the last bucket never falls as k grows, and
    each layer is filled by divide and conquer in O(n log n)."""
    n = len(values)
    prev: list[int | None] = [0] + [None] * n  # layer 0: only the empty prefix, with no buckets
    pads, parents = [], []
    for b in range(1, max_b + 1):
        cur: list[int | None] = [None] * (n + 1)
        par = [0] * (n + 1)
        todo = [(b, n, b - 1, n - 1)]  # fill k in lo..hi, the last bucket starting in olo..ohi
        while todo:
            lo, hi, olo, ohi = todo.pop()
            if lo > hi:
                continue
            mid = (lo + hi) // 2
            best = best_i = None
            for i in range(olo, min(mid - 1, ohi) + 1):
                before = prev[i]
                if before is None:
                    continue
                v = before + _padding(values, P, Q, i, mid)
                if best is None or v < best:
                    best, best_i = v, i
            assert best is not None and best_i is not None  # i = olo always extends a filled prefix
            cur[mid], par[mid] = best, best_i
            todo.append((lo, mid - 1, olo, best_i))
            todo.append((mid + 1, hi, best_i, ohi))
        pads.append(cast(int, cur[n]))  # filled: n is in b..n (max_b <= n)
        parents.append(par)
        prev = cur
    return pads, parents


def _walk(n: int, parents: list[list[int]], layered: bool) -> list[int]:
    """The bucket ends, from the parent pointers: one table (uncapped), or one per layer, the last
    layer's holding the last bucket."""
    ends, k, layer = [], n, len(parents) - 1
    while k > 0:
        ends.append(k)
        k = parents[layer][k]
        if layered:
            layer -= 1
    return ends[::-1]


def _plan_cost(compiled: int, padded: int, compile_ms: float, per_token_ms: float,
               buckets: int | None = None) -> PlanCost:
    """A plan's figures: `compiled` compiles (one per bucket, unless `buckets` says otherwise: the
    automatic model's min(buckets, 2)). cost_ms is computed as the programme computes it, so the
    plan's figure is the one it minimised."""
    return PlanCost(buckets=compiled if buckets is None else buckets, padded_tokens=padded,
                    compile_ms=compile_ms * compiled, padding_ms=per_token_ms * padded,
                    cost_ms=compile_ms * compiled + per_token_ms * padded)


# -- input checks ------------------------------------------------------------------------------------
def _histogram(lengths: Any) -> list[tuple[int, int]]:
    """(length, count) pairs, ascending, counts above 0; every bad input refused with one line."""
    if isinstance(lengths, (str, bytes, bytearray)):
        raise InputError(f"lengths must be a list of integers or a {{length: count}} mapping, got a string {lengths[:40]!r}")
    counts: dict[int, int] = {}
    if isinstance(lengths, Mapping):
        for key, count in lengths.items():
            n = check_length(key, "length")
            c = _count(count, n)
            counts[n] = counts.get(n, 0) + c
    else:
        try:
            items = iter(lengths)
        except TypeError:
            raise InputError(f"lengths must be a list of integers or a {{length: count}} mapping, got "
                             f"{type(lengths).__name__}") from None
        for i, x in enumerate(items):
            n = check_length(x, f"lengths[{i}]")
            counts[n] = counts.get(n, 0) + 1
    hist = sorted((n, c) for n, c in counts.items() if c > 0)
    if not hist:
        raise InputError("no lengths to plan for: give the observed request lengths (a list, or {length: count} "
                         "with a count above 0)")
    return hist


def _count(x: Any, length: int) -> int:
    if isinstance(x, bool):
        raise InputError(f"the count for length {length} is {x!r}, not a count")
    try:
        c = operator.index(x)
    except TypeError:
        raise InputError(f"the count for length {length} is {x!r}: counts are whole numbers of requests") from None
    if c < 0:
        raise InputError(f"the count for length {length} is {c}: counts cannot be negative")
    if c > MAX_COUNT:
        raise InputError(f"the count for length {length} is over {MAX_COUNT:,} requests: give observed counts")
    return c


def _cost(x: Any, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise InputError(f"{name} must be a number of milliseconds, got {x!r}")
    v = float(x)
    if math.isnan(v):
        raise InputError(f"{name} is NaN: give a number of milliseconds, 0 or more")
    if math.isinf(v):
        raise InputError(f"{name} is infinite: give a finite number of milliseconds")
    if v < 0:
        raise InputError(f"{name} = {v:g} is negative: a cost is 0 ms or more")
    if v > MAX_COST_MS:
        raise InputError(f"{name} = {v:g} ms is more than {MAX_COST_MS:g} ms (11 days): give the cost in milliseconds")
    return v


def _positive_int(x: Any, name: str) -> int:
    if isinstance(x, bool):
        raise InputError(f"{name} must be an integer of 1 or more, got {x!r}")
    try:
        n = operator.index(x)
    except TypeError:
        raise InputError(f"{name} must be an integer of 1 or more, got {x!r}") from None
    if n < 1:
        raise InputError(f"{name} = {n}: a plan needs at least 1 bucket")
    return n

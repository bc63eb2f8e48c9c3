"""One or two lines of advice per dominant cause (pure: report data in, lines out).

A line never nests brackets (a reader loses which one closes where), and CUDA-only advice (CUDA's
environment variables, cuDNN, CUDA graphs: causes.py's cuda_advice) is given for CUDA traces only."""

from __future__ import annotations

from typing import Any

from .. import causes, devices
from ..opspec import short_op
from ..report.trace import passes_gap_ms, unplaced_ms
from .verdict import FIRST_CALL_COST, UNSTABLE, headline_wait_ms, no_cost_bound_ms, no_cost_bound_parts

CONTENTION = "cpu_contention"  # the machine's load: never a first-call cost (causes.py)

# Lines for one source of a cause, shown instead of the cause's generic line (causes.py) when that
# source holds most of it.
_BY_SOURCE = {
    ("jit_compile", "torch.compile"): [
        "Warm every input shape you serve before taking traffic; pad to a few fixed buckets, or mark the varying "
        "dim dynamic (torch._dynamo.mark_dynamic) so one graph covers all lengths.",
        "Keep inductor's cache across restarts (TORCHINDUCTOR_CACHE_DIR on a persistent volume, or "
        "torch.compiler.save_cache_artifacts/load_cache_artifacts) so a fresh pod loads instead of compiling.",
    ],
    ("jit_compile", "onednn"): [
        "oneDNN generates a kernel per new shape: warm each served shape once at start-up (primitive cache "
        "capacity: ONEDNN_PRIMITIVE_CACHE_CAPACITY).",
    ],
    ("runtime_init", "file_pages"): [
        "The first run of torch's and the model's code pages it in from the loaded libraries (code and data "
        "pages never touched before): one pass at start-up, at any shape, moves it before traffic.",
    ],
    ("runtime_init", "warm_process"): [
        "A process pays it once whatever the input shape (the first run of the model's Python code and of torch's "
        "bindings and ops): one pass at start-up, at any shape, moves it before traffic.",
    ],
    ("runtime_init", "probe"): [
        "These ops pay it once per process (the op probes' verdict): one pass at start-up, at any shape, moves it "
        "before traffic.",
    ],
}


# What following a cause's advice means, for the test that follows each line in a fresh process
# (tests/integration/test_advice_followed.py: `warmprof trace --warm-shape` at that shape, and the
# cause must shrink): one pass at the served shape ("same"), at any shape ("any"), at the largest
# served shape ("largest"). A cause with no entry gets no warm-up advice (cpu_contention: the
# machine's load; a warm-up does not remove it).
FOLLOW = {
    causes.Name.JIT_COMPILE: "same", causes.Name.ALGORITHM_SELECTION: "same", causes.Name.GRAPH_CAPTURE: "same",
    causes.Name.ALLOCATOR_GROWTH: "largest", causes.Name.RUNTIME_INIT: "any", causes.Name.CLOCK_RAMP: "same",
    causes.Name.WAIT: "same", causes.Name.DISK_READ: "same", causes.Name.UNATTRIBUTED: "same",
    causes.Name.GARBAGE_COLLECTION: "any",  # a pass at any shape runs the collection that was due
}


def cause_of_line(line: str) -> str:
    """The cause an advice line is about ("" for a verdict or a threads line)."""
    head = line.split(" (", 1)[0].split(",", 1)[0]
    return head if head in causes.names() else ""


def _lines(cause: str, source: str, column: str | None = None) -> list[str]:
    """The cause's lines: its source's, or its generic line and the line in `column` of the cause table,
    the report's device kind's own (devices.DeviceKind.advice_column: cuda_advice on CUDA)."""
    if (cause, source) in _BY_SOURCE:
        return _BY_SOURCE[(cause, source)]
    row = causes.get(cause)
    if row is None:
        return []
    if row.advice:
        own = getattr(row, column, "") if column else ""
        return [row.advice] + ([own] if own else [])
    if row.warmup_fixes:
        return [f"{row.label} is a one-time cost: one pass per served shape at start-up moves it before traffic."]
    return [f"{row.label} is not removed by a warm-up pass: it is paid on each call like this one."]


def _unstable_line(report: Any) -> list[str]:
    """The answer one run does not settle (verdict "unstable"): the line that says so and names --repeat."""
    acc = getattr(report, "accounting", None)
    if getattr(report, "verdict", "") != UNSTABLE or not isinstance(acc, dict):
        return []
    un = float(acc["unattributed_ms"])
    if acc.get("residual_unsettled") and not abs(float(acc.get("run_to_run", {}).get("beyond_waits_ms", 0.0))) \
            > float(acc.get("tolerance_ms", 0.0)):
        what = (f"the instrumented process left {un:.2f} ms its causes do not account for" if un >= 0 else
                f"the instrumented process's causes came to {-un:.2f} ms more than its excess")
        return [f"Unstable: {what}, more than the noise of two single passes allows: either a first-call cost no "
                "instrument names, or one run's noise. Run `warmprof trace ... --repeat 5` (N fresh processes, each "
                "cause's median and range): what stays in every run is the former."]
    return [f"Unstable: the clean first pass and the instrumented one (less warmprof's own cost) differ by "
            f"{abs(passes_gap_ms(acc)):.2f} ms, more than their measured waits and the noise of two single "
            "passes explain (a compile or a busy machine varies between two fresh processes): the causes' sizes are "
            "one run's. Run `warmprof trace ... --repeat 5` (N fresh processes, each cause's median and range) before "
            "acting on them."]


def advise(report: Any, share_floor: float = 0.1, max_causes: int = 3) -> list[str]:
    """The advice lines (_advise), first of them the one an unstable answer gets (it names --repeat)."""
    return _unstable_line(report) + _advise(report, share_floor, max_causes)


def _advise(report: Any, share_floor: float = 0.1, max_causes: int = 3) -> list[str]:
    """Advice for the causes holding at least `share_floor` of the excess, largest first.

    A first pass within the steady passes' noise (or faster than them) gets the verdict instead: no
    first-call cost at this shape (with a warning when the machine was too noisy for a small cost to
    show). Never empty: a report whose excess no cause holds a share of gets the unattributed line.
    Threads that clash with the CPUs or the other work (protocol.oversubscription) get their own line."""
    crowded = _threads_line(report)
    band, excess = report.noise_band_ms, report.excess_ms
    # a generate trace's verdict is its time to first token's (generate.headline_verdict): a first-call cost
    # there is never advised as none because the whole call's excess is within its noise
    ttft_cost = bool(getattr(report, "generate", None)) and getattr(report, "verdict", "") == FIRST_CALL_COST
    if excess <= no_cost_bound_ms(report) and not ttft_cost:
        return [_no_cost_line(report)] + crowded
    waited = headline_wait_ms(report)  # the headline pass's own wait for a CPU, as the verdict reads it
    own = sum(c.ms for c in report.causes if c.cause == causes.OWN)  # reports written before own_cost
    bound = no_cost_bound_ms(report)
    if (own > 0 or waited > 0) and excess - own - waited <= bound and not ttft_cost:
        less = " and ".join(x for x in (f"the wait for a CPU ({waited:.2f} ms, measured)" if waited > 0 else "",
                                        f"warmprof's own instrument cost ({own:.2f} ms, estimated)" if own > 0 else "")
                            if x)
        spread_ms, net, pause = no_cost_bound_parts(report)
        spread = (f"the steady passes' spread{' net of their waits' if net else ''} ({spread_ms:.2f} ms)"
                  + (f" and what a warm pass after a short pause pays ({pause:.2f} ms)" if pause > 0 else ""))
        rest = excess - own - waited
        left = (f"the rest of the excess ({rest:.2f} ms) is within {spread}" if rest > 0 else
                f"nothing of the excess is left (the wait is as long as the excess or longer), so nothing is beyond "
                f"{spread}")
        return [f"No first-call cost of the model's at this shape: without {less} {left}."] + (
            [_lines(CONTENTION, "run_queue")[0]] if waited > 0 else []) + crowded
    workers = _workers_waited_ms(report)
    spread_ms, net, _ = no_cost_bound_parts(report)  # the spread the verdict judged the excess by
    if workers > 0 and excess - own - waited <= spread_ms + workers and not ttft_cost:
        return [f"Too noisy to tell: the rest of the excess ({max(0.0, excess - own - waited):.2f} ms, without "
                f"the pass thread's wait for a CPU, {waited:.2f} ms) is no more than the steady passes' spread"
                f"{' net of their waits' if net else ''} ({spread_ms:.2f} ms) and what one other thread of the process "
                f"waited for a CPU ({workers:.2f} ms), which "
                "adds to the pass whenever the pass waits for that thread, so no first-call cost of the model's can be "
                "told apart here."] + [_lines(CONTENTION, "run_queue")[0]] + crowded
    totals: dict[str, float] = {}
    sources: dict[str, dict[str, float]] = {}
    for c in report.causes:
        row = causes.get(c.cause)
        if row is None or not row.blamed_on_model:
            continue
        totals[c.cause] = totals.get(c.cause, 0.0) + c.share
        base = c.source.split(":", 1)[0].split("/", 1)[0]
        sources.setdefault(c.cause, {})
        sources[c.cause][base] = sources[c.cause].get(base, 0.0) + c.ms
    # Shares are of the excess, or of the attributed time when the causes add up to more (see build.overshoot_note).
    whole = "attributed time" if report.shares_of_attributed() else "excess"
    kind = devices.find(str(getattr(report, "device", "") or ""))  # "cuda", "cuda:1"
    column = kind.advice_column if kind is not None else None
    lines: list[str] = []
    for cause, share in sorted(totals.items(), key=lambda kv: -kv[1])[:max_causes]:
        if share < share_floor:
            continue
        top_source = max(sources[cause], key=sources[cause].__getitem__)
        said = _lines(cause, top_source, column)
        if (cause, top_source) == ("jit_compile", "torch.compile"):
            said = _compile_lines(report, said)
        for i, line in enumerate(said):
            head = f"{cause} ({share:.0%} of the {whole}, mostly {top_source})" if i == 0 else f"{cause}, also"
            lines.append(f"{head}: {line}")
    unattributed = report.unattributed_ms
    if report.excess_ms > 0 and unattributed > report.noise_band_ms and unattributed >= max(
            [c.ms for c in report.causes if c.cause != "unattributed"] + [0.0]):
        rows = sorted(getattr(report, "unattributed_where", []), key=lambda w: -unplaced_ms(w))
        rows = [w for w in rows if unplaced_ms(w) > 0]
        # No brackets inside the share's brackets: "addmm in blocks.0.mlp", not "blocks.0.mlp (addmm)".
        where = [(f"{short_op(w['op'])} in " if "op" in w else "") + w["module"] for w in rows[:2]]
        at = f", most in {' and '.join(where)}" if where else ""
        lines.append(f"unattributed ({unattributed / report.excess_ms:.0%} of the excess{at}) is the largest part: no "
                     f"instrument here names its cause. {_next_step(rows)}, or warm the served shapes with one pass "
                     "at start-up, which covers one-time costs of any cause.")
    if not lines:  # never silent: a first-call cost outside the noise that no line above names
        lines.append(f"A first-call cost of {report.excess_ms:.2f} ms beyond the steady passes' noise "
                     f"({no_cost_bound_ms(report):.2f} ms), with no single cause holding a tenth of it: one pass per served "
                     "shape at start-up moves one-time costs of any cause before traffic.")
    return lines + _threads_line(report)


def _compile_lines(report: Any, lines: list[str]) -> list[str]:
    """torch.compile's lines from what dynamo said: where a size guard recompiled per length, the
    dimension to mark dynamic leads (its tensor and index from the guard's text); after an inductor
    cache hit there is no line telling to keep the cache (it was kept)."""
    import re

    tc = getattr(report, "torch_compile", None)
    if tc is None:
        return lines
    out = list(lines)
    sized = next((g for g in tc.recompiles if "size mismatch at index" in g["reason"]), None)
    if sized is not None:
        # the name as dynamo wrote it (it may hold quotes itself: kwargs['cache_position'])
        m = re.search(r"tensor '(.+?)' size mismatch at index (\d+)", sized["example"])
        name, dim = (m.group(1), m.group(2)) if m else ("the input", "N")
        gen = getattr(report, "generate", None)
        rest = next((r for r in (gen or {}).get("phases", []) if r["phase"] == "rest"), None)
        rest_compiled = rest is not None and any(c["cause"] == "jit_compile" for c in rest["causes"])
        if gen and gen.get("kv_cache") != "static":  # a generation: each decode length is a new shape
            out[0] = (f"dynamo recompiled for new decode lengths ({len(tc.recompiles)} guard(s), e.g. {name} at "
                      f"dimension {dim}): use a static KV cache, model.generate(..., cache_implementation='static') "
                      "(--kv-cache static here), so every decode step has one shape and compiles once; or compile "
                      "with dynamic=True.")
        elif gen and not rest_compiled:  # static cache: the prompt's length and the one-token step, a graph each
            out[0] = (f"with a static KV cache the rest of the decode steps compiled nothing new; the prefill and the first "
                      f"decode step are different shapes ({name} at dimension {dim}) and compile a graph each: warm them "
                      "at start-up with one generate call at each served prompt length (or pad prompts to a few "
                      "buckets: warmprof buckets).")
        else:
            out[0] = (f"dynamo recompiled {sized['count']} time(s) for a new size of {name} at dimension {dim}: mark it "
                      f"dynamic before the first call (torch._dynamo.mark_dynamic({name}, {dim})) or compile with "
                      "dynamic=True, so one graph serves every length; or pad to a few buckets (warmprof buckets) and "
                      "warm each before taking traffic.")
    if tc.inductor_cache == "hit":
        out = [line for line in out if not line.startswith("Keep inductor's cache")]
    return out


NOISY_BAND = 0.5  # a noise band over this fraction of the steady median: the machine was too noisy to say more


def _no_cost_line(report: Any) -> str:
    """The verdict when the first pass is within the steady passes' noise: no first-call cost at this
    shape, said whatever else the report holds; on a machine so noisy that the band is wide, also
    that a smaller cost could hide in it."""
    band, excess = report.noise_band_ms, report.excess_ms
    p10, p90 = getattr(report, "steady_p10_ms", 0.0), getattr(report, "steady_p90_ms", 0.0)
    clean = "clean first pass" if getattr(report, "clean", None) else "first pass"
    spread_ms, net, pause = no_cost_bound_parts(report)  # the bound the verdict used
    own = (f"the steady passes' own spread net of their waits for a CPU ({spread_ms:.2f} ms; wall-time p10-p90 "
           f"{p10:.2f}-{p90:.2f} ms)" if net and abs(spread_ms - band) >= 0.005 else
           f"the steady passes' own spread ({band:.2f} ms, p10-p90 {p10:.2f}-{p90:.2f} ms)")
    if excess > spread_ms and pause > 0:
        line = (f"No first-call cost at this shape: the {clean} was {excess:+.2f} ms from the steady median, no more "
                f"than {own} and the least a warm pass paid after a short pause ({pause:.2f} ms, measured; any "
                "request after other work pays it), so no warm-up is needed for this shape.")
    else:
        line = (f"No first-call cost at this shape: the {clean} was {excess:+.2f} ms from the steady median, within "
                f"{own}, so no warm-up is needed for this shape.")
    steady = getattr(report, "steady_median_ms", 0.0)
    if steady > 0 and band > NOISY_BAND * steady:
        line += (f" The machine was noisy (the spread is {band / steady:.0%} of a steady pass): a smaller cost could "
                 "hide in it; trace again on a quieter machine (or with fewer threads) to see one.")
    return line


def _workers_waited_ms(report: Any) -> float:
    """The longest wait for a CPU of one other thread in the first pass (instruments/host.py), in ms;
    0 where not measured."""
    first = (getattr(report, "counters", None) or {}).get("first_pass") or {}
    got = first.get("worker_run_delay_max_ns", 0)
    return got / 1e6 if isinstance(got, (int, float)) else 0.0


def _threads_line(report: Any) -> list[str]:
    """The --threads advice when torch's threads clashed with the CPUs or other work (see the notes)."""
    note = getattr(getattr(report, "protocol", None), "oversubscription", "") or ""
    if not note:
        return []
    import re

    m = re.search(r"--threads (\d+)", note)
    hint = f"`--threads {m.group(1)}`" if m else "fewer threads"
    return [f"Other work competed for this process's CPUs (see the notes): trace again with {hint} "
            "(torch.set_num_threads), or on a quieter machine, before trusting small figures."]


def _next_step(rows: list[dict]) -> str:
    """Where to look next: the op probe on the ops the op view found (names the probe accepts), or
    the op view itself when this trace ran without it."""
    ops = [name for name in dict.fromkeys(short_op(w["op"]).split(".")[0] for w in rows
                                          if "op" in w and not w.get("inferred")) if _probe_takes(name)]
    if ops:
        return (f"Probe the ops that hold it in a fresh process with `warmprof probe --ops {','.join(ops[:4])}` "
                "(or `warmprof probe --from` this report's JSON, which replays their recorded shapes)")
    if any("op" in w and w.get("inferred") for w in rows):
        return "The op probes already explain the op rows they could; what is left is the modules' own code outside ops"
    if any("op" in w for w in rows):
        return "Probe the ops that hold it with `warmprof probe --from` this report's JSON (it replays their recorded shapes)"
    return "Find the ops that hold it with `warmprof trace --explain` (a span per aten op, then the op probes)"


def _probe_takes(name: str) -> bool:
    """Whether `warmprof probe --ops NAME` accepts the op by name (a default shape or a pointwise op)."""
    try:
        from ..probes.aten_table import call_for

        call_for(name)
    except Exception:
        return False
    return True

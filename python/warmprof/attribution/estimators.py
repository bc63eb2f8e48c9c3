"""The estimators: each a pure function (PassContext) -> parts, one per rule, run in order by
engine.attribute_pass (ESTIMATORS)."""

from __future__ import annotations

import bisect
from dataclasses import replace
from typing import Callable

from ..causes import Name
from ..timeline import (
    COUNTER,
    CUPTI_CALLBACKS,
    INVOLUNTARY_COUNTER,
    NVRTC_CACHE_FILE,
    RUN_DELAY_COUNTER,
    STRUCTURE,
    cause_name,
    source_of,
)
from .context import PassContext
from .faults import split_faults
from .off_cpu import off_cpu_time
from .parts import Part
from .reading import (
    MODULE_PREFIX,
    OP_PREFIX,
    _counter_change,
    _counter_series,
    _imports_inside_compiles,
    _module_of,
    _nested_in_compiles,
)

Estimator = Callable[[PassContext], list[Part]]


def cause_spans(ctx: PassContext) -> list[Part]:
    """Measured: each segment's time goes to its innermost cause span, per (cause, source); count
    is the number of spans that own some time. Evidence is the source's (ctx.evidence), else measured."""
    parts: dict[tuple[str, str], Part] = {}
    counted: set[int] = set()  # ids of the spans counted (the spans live as long as ctx)
    for a, b, span, _, mod, _ in ctx.segments:
        if span is None:
            continue
        src = source_of(span.name)
        key = (cause_name(span.cause), src)
        p = parts.get(key)
        if p is None:
            p = parts[key] = Part(key[0], src, ctx.evidence.get(src, "measured"))
        p.add(mod, b - a)
        if id(span) not in counted:
            counted.add(id(span))
            p.count += 1
    for key, detail in (*_loads_in_compiles(ctx).items(), *_imports_in_compiles(ctx).items()):
        if key in parts:
            parts[key].detail = detail
    return list(parts.values())


_MODULE_LOADS = ("cupti:lazy_load", "cupti:cuModuleLoad", "cupti:cuLibraryLoad", "cupti:cudaLibraryLoad")


def _loads_in_compiles(ctx: PassContext) -> dict[tuple[str, str], str]:
    """Module loads (CUPTI) nested in another source's jit_compile span, e.g. Triton loading the
    cubin it just built inside inductor's compile: the innermost span wins, so the load's time is
    the load's cause (runtime_init for a cubin), not the compile's. Said in the part's detail."""
    nested: dict[tuple[str, str], int] = {}
    for s in _nested_in_compiles(ctx.spans, _MODULE_LOADS, compiles_from_cupti=False):
        key = (cause_name(s.cause), source_of(s.name))
        nested[key] = nested.get(key, 0) + 1
    return {key: (f"{n} module load{'s' if n > 1 else ''} inside a compile span (e.g. Triton loading the "
                  f"kernel it built inside inductor's compile) counted here as {key[0]}, not as the compile's "
                  "jit_compile: the innermost span wins")
            for key, n in nested.items()}



def _imports_in_compiles(ctx: PassContext) -> dict[tuple[str, str], str]:
    """Said in the compile's part: how many Python imports ran inside its span and were counted in
    it (as torch's own compile timers count them), not as runtime_init."""
    n = len(_imports_inside_compiles(ctx.spans))
    if not n:
        return {}
    return {(Name.JIT_COMPILE, "torch.compile"): (f"includes {n} Python imports the compiler ran inside its compile "
                                               "span (counted in the compile, as torch's own timers count them)")}


def host_faults(ctx: PassContext) -> list[Part]:
    """Estimated: page faults outside every cause span (faults inside one belong to that cause, via
    ctx.fault_steps' cover), split per step by what grew (split_faults): anonymous memory ->
    allocator_growth (host_faults), file pages -> runtime_init (file_pages, lazy loading of a
    library's code and data; major faults are file pages always, and their wait for storage is
    disk_read's, off_cpu.py). Anonymous faults a steady pass also takes, and warmprof's own, are
    taken off the anonymous time in proportion; each part is placed in the modules its steps were in.
    Without memory samples (ctx.fault_bytes empty) every fault is anonymous at fault_cost_ns."""
    cal = ctx.calibration
    anon = Part(Name.ALLOCATOR_GROWTH, "host_faults", "estimated")
    files = Part(Name.RUNTIME_INIT, "file_pages", "estimated")
    anon_faults = huge_faults = 0.0
    file_faults = 0.0
    file_bytes = 0
    anon_by_module: dict[str, float] = {}
    for k, step in enumerate(ctx.fault_steps):
        if step.cause_span is not None or step.delta <= 0:
            continue
        grown = ctx.fault_bytes[k] if ctx.fault_bytes else (0, 0)
        major = ctx.fault_majors[k] if ctx.fault_majors else 0
        sp = split_faults(step.delta, grown[0], grown[1] if ctx.fault_bytes else 0, cal, major)
        anon_faults += sp.anon_faults
        huge_faults += sp.huge_faults
        anon_by_module[step.module] = anon_by_module.get(step.module, 0.0) + sp.anon_ns
        if sp.file_faults > 0 or grown[1] > 0:
            file_faults += sp.file_faults
            file_bytes += max(0, grown[1])
            files.add(step.module, sp.file_ns)
    parts = []
    extra = max(0.0, anon_faults - ctx.steady_faults - ctx.own_faults)
    priced = sum(anon_by_module.values()) > 0 or "first_touch" in cal.unusable
    if extra > 0 and priced:
        scale = extra / anon_faults
        for mod, ns in anon_by_module.items():
            anon.add(mod, ns * scale)
        anon.count = int(round(extra))
        anon.detail = _anon_detail(ctx, extra, huge_faults * scale)
        parts.append(anon)
    if file_bytes > 0 and (cal.file_ns_per_byte > 0 or "file_pages" in cal.unusable):
        files.count = int(round(file_faults))
        files.detail = (f"{file_bytes / 2**20:.1f} MiB of file-backed pages (library code and data) paged in "
                        f"outside any cause span, about {files.count} of the faults, at the cost of mapping "
                        "page-cache pages measured here; a read from disk (major fault) costs more")
        if "file_pages" in cal.unusable:
            files.detail += f"; file-page calibration not used ({cal.unusable['file_pages']}): counted without time"
        parts.append(files)
    return parts


def _anon_detail(ctx: PassContext, faults: float, huge: float) -> str:
    cal = ctx.calibration
    if not ctx.fault_bytes:
        how = "each taken as one small page (no memory samples to split faults by kind)"
    elif cal.touch_ns_per_byte or cal.huge_touch_ns_per_byte:
        how = ("split from file-backed faults by the anonymous and file bytes each step grew, and priced by "
               "the bytes touched at the first-touch cost calibrated for that size")
    else:
        how = "split by the bytes each step grew, x the calibrated cost of one small-page fault"
    out = f"{faults:.0f} anonymous first-touch faults{f' ({huge:.0f} of huge pages)' if huge >= 1 else ''} {how}"
    if "first_touch" in cal.unusable:
        out += f"; first-touch calibration not used ({cal.unusable['first_touch']}): counted without time"
    return out


def thread_starts(ctx: PassContext) -> list[Part]:
    """Estimated runtime_init: threads started outside every cause span (the runtime's pools
    starting inside the pass) x the calibrated thread start cost, in the module they started in."""
    cost = ctx.calibration.thread_start_ns
    why = ctx.calibration.unusable.get("thread_start")
    if cost <= 0 and why is None:
        return []
    p = Part(Name.RUNTIME_INIT, "thread_pool", "estimated")
    for step in ctx.thread_steps:
        if step.delta > 0 and step.cause_span is None:
            p.add(step.module, step.delta * max(cost, 0.0))
            p.count += step.delta
    if why is not None:
        p.detail = f"{p.count} thread starts counted without time: the thread-start calibration was too spread to use ({why})"
    return [p] if p.count else []


def module_hook_cost(ctx: PassContext) -> list[Part]:
    """Estimated profiler_overhead: warmprof's own module hooks, which instrumented passes pay and
    steady passes do not. Each module call (a module span on the pass thread) x the calibrated
    cost per call, in that module. Not when the instruments' cost was measured on the model
    (ctx.instrument_cost: instrument_cost books it, this figure included)."""
    cost = ctx.calibration.hook_cost_ns
    if cost <= 0 or ctx.instrument_cost is not None:
        return []
    calls: dict[str, int] = {}
    for s in ctx.spans:
        if s.name.startswith(MODULE_PREFIX):
            mod = _module_of(s)
            calls[mod] = calls.get(mod, 0) + 1
    if not calls:
        return []
    p = Part(Name.PROFILER_OVERHEAD, "module_hooks", "estimated")
    for mod, n in calls.items():
        p.add(mod, n * cost)
        p.count += n
    return [p]


def op_view_first_dispatch(ctx: PassContext) -> list[Part]:
    """Estimated profiler_overhead: the op view's own first dispatch of each distinct op in the first
    pass (torch sets an op up for a Python dispatch mode on its first call under one: tens of
    microseconds, which the warm instrumented steady passes never see). Distinct ops x the cost
    calibrated on ops the model did not run, in the module of each op's first call."""
    cost = ctx.calibration.op_view_cold_ns
    if cost <= 0 or ctx.pass_span.name != "pass:first" or not ctx.op_spans:
        return []
    p = Part(Name.PROFILER_OVERHEAD, "op_view", "estimated",
             detail="the op view's first dispatch of each distinct op, calibrated on ops the model did not run")
    seen: set[str] = set()
    for (mod, op), _ in sorted(ctx.op_sites.items(), key=lambda kv: kv[1][0]):
        if op not in seen:
            seen.add(op)
            p.add(mod, cost)
            p.count += 1
    return [p]



def cupti_callback_cost(ctx: PassContext) -> list[Part]:
    """Estimated profiler_overhead: the CUPTI callbacks taken during the pass (the counter the CUPTI
    instrument samples at the pass's start and end) x the calibrated cost of warmprof's handler per
    callback. The instrumented passes pay it, the steady passes do not. The cost is the handler's
    alone, measured on this machine; CUPTI's own dispatch per callback comes on top and is not in
    the estimate (it can only be measured with a GPU). Not placed by module (the count is per pass)."""
    cost = ctx.calibration.cupti_handler_ns
    if cost <= 0 or ctx.timeline is None or ctx.instrument_cost is not None:  # measured: instrument_cost
        return []
    n = _counter_change(ctx.timeline, CUPTI_CALLBACKS, *ctx.window)
    if n <= 0:
        return []
    detail = (f"{n} CUPTI callbacks x {cost:.0f} ns, warmprof's handler cost per callback measured here; "
              "CUPTI's own dispatch per callback is not included (measurable only on a GPU)")
    return [Part(Name.PROFILER_OVERHEAD, "cupti_callbacks", "estimated", ns=n * cost, count=n,
                 by_module={"": n * cost}, detail=detail)]


def cpu_contention(ctx: PassContext) -> list[Part]:
    """Measured cpu_contention: the time the pass's thread was ready to run and had no CPU (its
    run-queue delay, schedstat), read at the pass's boundaries and at every module boundary, so each
    wait is placed in the module it happened in. A steady pass's wait (ctx.steady_run_delay_ns, the
    median) is taken off in proportion: what is booked is what this pass waited beyond a steady one.
    A wait inside a cause span (a compile that was preempted) stays in that span's part, which measured
    wall time, and is said there (Part.waited_ns: "jit_compile 60 s, of which 18 s waiting for a CPU"),
    so the cause table, the modules, the PNG and compare give one figure per cause and nothing counts
    twice; only the waits outside cause spans are cpu_contention.

    Only the pass's thread is booked: its wait adds to the pass's wall time directly. A worker
    thread's wait adds only while the pass's thread waits for that worker, which these counters
    cannot tell from the pass thread's own work (an OpenMP pool spins before it sleeps); workers'
    waits are reported beside this figure (instruments/host.py), never added to it, and never
    summed as if they had happened one after another."""
    tl = ctx.timeline
    if tl is None:
        return []
    t0, t1 = ctx.window
    ts, vals = _counter_series(tl, RUN_DELAY_COUNTER, ctx.pass_span.thread)
    if len(ts) < 2:
        return []
    a = max(0, bisect.bisect_right(ts, t0) - 1)
    b = min(len(ts) - 1, bisect.bisect_left(ts, t1))
    free = Part(Name.CPU_CONTENTION, "run_queue", "measured")
    inside: dict[tuple[str, str], float] = {}  # (cause, source) of the cause spans the waits fell in -> ns
    total = 0.0
    for k in range(a, b):
        d = vals[k + 1] - vals[k]
        if d <= 0:
            continue
        lo, hi = max(ts[k], t0), min(ts[k + 1], t1)
        # no more than the time between the samples inside the window: a wait before the pass, or
        # one read a moment after its sample's clock, is never pushed into a span shorter than it
        d = min(d, hi - lo)
        if d <= 0:
            continue
        total += d
        for cause_span, mod, ns in ctx.spread(lo, hi, d):
            if cause_span is None:
                free.add(mod, ns)
            else:
                key = (cause_name(cause_span.cause), source_of(cause_span.name))
                inside[key] = inside.get(key, 0.0) + ns
    if total <= 0:
        return []
    switches = _counter_change(tl, INVOLUNTARY_COUNTER, t0, t1, ctx.pass_span.thread)
    free.count = switches  # the pass thread's involuntary context switches (preemptions) in the pass
    keep = max(0.0, total - ctx.steady_run_delay_ns) / total
    if keep <= 0:
        return []
    parts = []
    steady = (f"; less a steady pass's own wait ({ctx.steady_run_delay_ns / 1e6:.3f} ms, the median)"
              if ctx.steady_run_delay_ns > 0 else "")
    in_spans = sum(inside.values()) * keep
    if free.ns > 0:
        free.by_module = {m: ns * keep for m, ns in free.by_module.items()}
        free.ns *= keep
        free.detail = (f"the pass's thread was runnable with no CPU for {free.ns / 1e6:.3f} ms outside cause spans "
                       f"(schedstat run-queue delay, read at module boundaries){steady}; {switches} involuntary context "
                       "switches in the pass; not a first-call cost, and no warm-up removes it"
                       + (f"; a further {in_spans / 1e6:.3f} ms inside cause spans stays in those causes' time, said "
                          "there as their wait for a CPU" if in_spans > 0 else ""))
        parts.append(free)
    # Waits inside a cause span stay the span's: a zero-time part of its (cause, source) carries the wait,
    # merged into the span's own part (its evidence comes from the span's part, merged first)
    for (cause, source), ns in inside.items():
        parts.append(Part(cause, source, ctx.evidence.get(source, "measured"), waited_ns=ns * keep))
    return parts


def inferred_figures(ctx: PassContext) -> list[Part]:
    """Figures no span brackets (parts.Figure: a clock ramp inferred from clock samples), added as
    given; entries of the same (cause, source) add up."""
    parts: dict[tuple[str, str], Part] = {}
    for e in ctx.inferred:
        key = (e.cause, e.source)
        p = parts.get(key)
        if p is None:
            p = parts[key] = Part(e.cause, e.source, e.evidence)
        p.add(e.module, e.ms * 1e6)
        p.count += int(e.count)
        p.fills = p.fills or e.fills_unexplained
        p.detail = p.detail or e.detail
    return list(parts.values())


NVRTC_SOURCE = "torch:nvrtc"


def nvrtc_cache_compiles(ctx: PassContext) -> list[Part]:
    """jit_compile: torch's own NVRTC compiles (the jiterator), each read off a new file in its
    kernel cache during the pass (the counter NVRTC_CACHE_FILE at the file's write time). The compile
    ran on the pass's thread inside the op (or module) that called it and ended when the file was
    written: it is the free time (outside every cause span) of the innermost op or module span
    holding the write, from that span's start (in a module: from the last span that ended in it before
    the write; or the previous write in it) to the write. Evidence:
    measured when an op span (the op view) holds it, inferred when only a module span does (it holds
    the module's other work before the compile too). Capped, as an inferred figure, at what the
    pass's other parts left unexplained."""
    tl = ctx.timeline
    if tl is None or len(tl) == 0 or NVRTC_CACHE_FILE not in tl.names:
        return []
    nid = tl.names.index(NVRTC_CACHE_FILE)
    t0, t1 = ctx.window
    at = (tl.kind == COUNTER) & (tl.name == nid) & (tl.ts_ns >= t0) & (tl.ts_ns <= t1)
    writes = sorted(int(t) for t in tl.ts_ns[at].tolist())
    if not writes:
        return []
    holders = [s for s in ctx.spans if s.cause == STRUCTURE and s.name.startswith((OP_PREFIX, MODULE_PREFIX))]
    stretches: list[tuple[int, int]] = []
    kinds: set[str] = set()
    last_in: dict[int, int] = {}
    for t in writes:
        inside = [s for s in holders if s.start_ns <= t <= s.end_ns]
        span = max(inside, key=lambda s: (s.start_ns, s.depth)) if inside else None
        start = span.start_ns if span is not None else t0
        if span is None or not span.name.startswith(OP_PREFIX):
            # in a module (or the pass): from the last recorded event before the write in it (a child
            # module's or a cause span's end), not from the module's start
            ends = [s.end_ns for s in ctx.spans if s is not span and start <= s.end_ns <= t]
            start = max(ends, default=start)
        start = max(start, last_in.get(id(span), start))
        last_in[id(span)] = t
        kinds.add("op" if span is not None and span.name.startswith(OP_PREFIX) else
                  "module" if span is not None else "pass")
        if t > start:
            stretches.append((start, t))
    p = Part(Name.JIT_COMPILE, NVRTC_SOURCE, "measured" if kinds == {"op"} else "inferred", count=len(writes))
    for a, b, cause_span, _, mod, _ in ctx.segments:
        if cause_span is not None:
            continue
        ov = sum(max(0, min(b, y) - max(a, x)) for x, y in stretches)
        if ov > 0:
            p.add(mod, ov)
    if p.ns <= 0:
        return []
    where = {"op": "the op span", "module": "the module span", "pass": "the pass"}
    held = " or ".join(where[k] for k in sorted(kinds))
    p.fills = True
    p.detail = (f"{len(writes)} new file(s) in torch's NVRTC kernel cache (PYTORCH_KERNEL_CACHE_PATH) during the pass: "
                f"a jiterator kernel compiled with NVRTC (CUPTI has no NVRTC domain and sees only its in-memory cubin "
                f"load, runtime_init); timed from the start of {held} holding each write (in a module, from the last "
                "recorded event before the write) to the write, outside other causes' spans"
                + ("" if kinds == {"op"} else " (an estimate: the module's own code between them is counted too)"))
    return [p]


def instrument_cost(ctx: PassContext) -> list[Part]:
    """Estimated profiler_overhead, measured on the model: what every instrument (module hooks,
    oneDNN's verbose output, samplers, CUPTI callbacks) added to a steady pass run with all of them
    on, over a clean one (ctx.instrument_cost), booked in this instrumented pass. Never below the
    calibrated floor (module calls x hook cost, CUPTI callbacks x handler cost: what the pass is
    known to pay even when the measured difference is lost in the noise). Placed by module in
    proportion to each module's calls in the instrumented steady passes (the hooks cost per call;
    oneDNN's lines come one per primitive run, inside the modules that run them, so this placement
    spreads their part over every module called)."""
    cost = ctx.instrument_cost
    if cost is None:
        return []
    bare = replace(ctx, instrument_cost=None)
    floor = [p for est in (module_hook_cost, cupti_callback_cost) for p in est(bare)]
    floor_ns = sum(p.ns for p in floor)
    measured = cost.per_pass_ns
    n = len(cost.instrumented_ms)
    how, instrumented, clean = cost.compared
    if how == "low":
        head = (f"{n} steady passes with every instrument on (after one uncounted warm-up pass): lowest "
                f"{instrumented:.3f} ms, against the clean steady passes' time at the same quantile "
                f"{clean:.3f} ms (the least disturbed passes of each), so {measured / 1e6:.3f} ms per pass")
    else:
        head = (f"{n} steady passes with every instrument on (after one uncounted warm-up pass): median "
                f"{instrumented:.3f} ms, clean steady median {clean:.3f} ms, so {measured / 1e6:.3f} ms per pass")
    p = Part(Name.PROFILER_OVERHEAD, "instrumented_steady", "estimated", count=n)
    # Never more than this pass took over a clean steady pass: the instruments' cost is part of it (a
    # busy machine can slow the instrumented passes far more than the clean ones).
    over_clean = ctx.pass_span.dur_ns - cost.clean_median_ms * 1e6
    capped = ""
    if measured > max(over_clean, floor_ns):
        capped = (f"; capped at what this pass took over the clean steady median ({max(over_clean, floor_ns) / 1e6:.3f} ms): "
                  f"the difference measured ({measured / 1e6:.3f} ms) is more than the whole pass had to give")
        measured = max(over_clean, floor_ns)
    if measured >= floor_ns and measured > 0:
        calls = {m: c for m, c in cost.calls.items() if c > 0}
        total = sum(calls.values())
        for mod, c in (calls.items() if total else [("", 1)]):
            p.add(mod, measured * c / (total or 1))
        noise = (f"; within the noise band ({cost.noise_ns / 1e6:.3f} ms), so a rough figure"
                 if cost.within_noise else "")
        p.detail = f"{head}{noise}{capped}; placed by module in proportion to module calls"
    elif floor_ns > 0:
        for f in floor:
            for mod, ns in f.by_module.items():
                p.add(mod, ns)
        p.detail = (f"{head}, below the calibrated floor (module calls x hook cost, CUPTI callbacks x handler cost: "
                    f"{floor_ns / 1e6:.3f} ms), which stands; the difference is within the noise "
                    f"({cost.noise_ns / 1e6:.3f} ms band)")
    else:
        return []
    return [p]


# Run in this order; parts of the same (cause, source) from several estimators add up, and the
# first one's evidence stands.
ESTIMATORS: tuple[Estimator, ...] = (cause_spans, host_faults, thread_starts, module_hook_cost, cupti_callback_cost,
                                     inferred_figures, nvrtc_cache_compiles, op_view_first_dispatch, cpu_contention, off_cpu_time, instrument_cost)

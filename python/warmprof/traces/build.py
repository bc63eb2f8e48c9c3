"""From a trace's facts to the Report (data only: no timing, no instruments, no subprocesses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .. import __version__
from ..attribution import (
    PassAttribution,
    steady_stats,
    summarize,
    unattributed_sites,
    unattributed_where,
)
from ..report import CauseEntry, CounterSample, Report, Span
from ..report.settings import Settings
from ..report.trace import Protocol, RecorderStats, RunContext, TorchCompileFigures
from ..stats import median
from ..timeline import COUNTER, INSTANT, THINNED, Timeline, cause_name, source_of
from .advice import advise

MAX_SPANS = 20000
MAX_SITES = 200  # (module, op) rows kept in unattributed_where, largest first

IN_PROCESS_NOTE = ("traced in the caller's process: work done here before the trace (other models, warm-up calls, "
                   "earlier traces) may have warmed shared state (thread pools, allocator, kernel caches); "
                   "`warmprof trace` on the command line runs a fresh process")


@dataclass
class InstrumentSummary:
    """One instrument after the passes: its own figures (summary()), its notes, and why it was off."""

    name: str
    summary: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    reason: str = ""  # empty when it was on


@dataclass
class TraceFacts:
    """Everything a Report is built from, gathered by the protocol (traces/api.py)."""

    # what was traced
    model: str
    shape: list[int] | None
    dtype: str
    device: str
    compile: str | None  # compile_options.compile_label()
    input_desc: str
    # what the passes gave
    first: PassAttribution
    rerun: PassAttribution
    steady_ms: list[float]
    steady_faults: list[int]
    timeline: Timeline
    instruments: list[InstrumentSummary]
    # the process and the machine
    calibration: dict[str, Any]  # calibrate.MachineCosts.to_dict()
    warm_reasons: list[str]
    platform: dict[str, Any]  # platform.fingerprint()
    run: RunContext
    created: str
    # steady passes with every instrument on (against the clean ones: warmprof's own cost, estimated)
    instrumented_steady_ms: list[float] = field(default_factory=list)
    # each clean steady pass's wait for a CPU (ms, schedstat run-queue delay); empty: not measured
    steady_run_delay_ms: list[float] = field(default_factory=list)
    protocol_notes: list[str] = field(default_factory=list)  # what the protocol itself left out, and why
    # the op view's recorded call (pass, index) -> its opspec JSON; None when the op view was off
    op_call: Callable[[str, int], dict[str, Any] | None] | None = None
    # the op view's first pass: each op's first call index, the calls that start a new call signature
    op_firsts: tuple[dict[str, int], set[int]] | None = None
    # the fastest instrumented steady pass, attributed (op view only): the warm baseline per site
    warm_pass: PassAttribution | None = None
    oversubscription: str = ""  # platform.oversubscription() at the start of the trace
    # trace(inputs=): each argument's shape by position and keyword (api._input_shapes); None from a shape
    inputs: dict[str, Any] | None = None
    settings: Settings | None = None  # every setting that changes what is measured (traces/settings.py)
    # calls of the model per pass: 2 under cudagraph trees (the first pass is calls 1+2), else 1
    calls_per_pass: int = 1
    setup: Any = None  # report.trace.Setup: the set-up before the first pass (traces/setup_phase.py); None: not timed


def steady_fault_median(steady_faults: list[int]) -> int:
    return sorted(steady_faults)[len(steady_faults) // 2] if steady_faults else 0


def share_of(ms: float, excess_ms: float, attributed_ms: float) -> float:
    """A cause's share: of the excess, or of the attributed time when that is larger; 0 with no excess."""
    denom = max(excess_ms, attributed_ms)
    return max(0.0, ms / denom) if excess_ms > 0 and denom > 0 else 0.0


def _entries(att: PassAttribution, excess_ms: float) -> list[CauseEntry]:
    """One entry per cause part. share is the part's fraction of the excess; when the attributed
    time exceeds the excess (noise), of the attributed time, so shares never sum past 1. With no
    excess at all (the pass was no slower than steady) a share means nothing and is 0."""
    return [
        CauseEntry(cause=p.cause, ms=p.ms, share=share_of(p.ms, excess_ms, att.attributed_ms),
                   evidence=p.evidence, source=p.source, module=p.top_module, count=p.count, detail=p.detail,
                   waited_ms=min(max(0.0, p.waited_ns), max(0.0, p.ns)) / 1e6,
                   blocked_ms=min(max(0.0, p.blocked_ns), max(0.0, p.ns - max(0.0, p.waited_ns))) / 1e6)
        for p in att.parts if p.ns >= 1000  # under a microsecond: nothing to report
    ]


def with_compile_cache(entries: list[CauseEntry], text: str) -> list[CauseEntry]:
    """The pass's entries with `text` (what its compiles built from scratch and loaded from cache, the
    torch_compile instrument's cache_by_pass) added to the detail of its largest torch.compile
    jit_compile entry: said once, where a reader of the compile looks."""
    jit = [e for e in entries if e.cause == "jit_compile" and e.source.startswith("torch.compile")]
    if text and jit:
        top = max(jit, key=lambda e: e.ms)
        top.detail = f"{top.detail}; {text}" if top.detail else text
    return entries


def overshoot_note(attributed_ms: float, excess_ms: float, noise_band_ms: float) -> str:
    """When the causes add up to more than the excess, say so, and what the shares are then of."""
    over = attributed_ms - excess_ms
    if excess_ms <= 0 or over <= 0:
        return ""
    where = "outside" if over > noise_band_ms else "within"
    why = " (an estimate is high, or the steady median is)" if where == "outside" else ""
    return (f"the causes add up to {attributed_ms:.2f} ms, {over:.2f} ms more than the excess ({excess_ms:.2f} ms; "
            f"{where} the noise band): shares are fractions of the attributed time, not of the excess{why}")


def first_call_residual_note(unattributed_ms: float, rerun_residual_ms: float, noise_band_ms: float) -> str:
    """What no instrument brackets in a first call, and how large it looks: said, never booked as a cause."""
    if rerun_residual_ms < -noise_band_ms:
        rerun = (f"the seen re-run took {-rerun_residual_ms:.2f} ms less than a steady pass plus its attributed causes "
                 f"(noise band {noise_band_ms:.2f} ms): an attributed figure is high by about that much (warmprof's own "
                 "cost is measured on other passes than the re-run), so no warm-up that takes more than one call shows")
    elif abs(rerun_residual_ms) <= noise_band_ms:
        took = (f"took {rerun_residual_ms:.2f} ms over a steady pass beyond its attributed causes" if rerun_residual_ms >= 0
                else "took no more than a steady pass and its attributed causes")
        rerun = (f"the seen re-run {took}, within the noise band ({noise_band_ms:.2f} ms): no sign of warm-up that "
                 "takes more than one call")
    else:
        rerun = (f"the seen re-run still took {rerun_residual_ms:.2f} ms over a steady pass beyond its attributed causes "
                 f"(warmprof's own estimated cost included; noise band {noise_band_ms:.2f} ms): warm-up of that kind "
                 "that takes more than one call, or noise the band does not show (an inferred residual)")
    where = (f"part of the unattributed {unattributed_ms:.2f} ms, placed by module under unattributed_where"
             if unattributed_ms > 0 else
             f"not visible here: the causes already add up to {-unattributed_ms:.2f} ms more than the excess they explain")
    return ("first-call work no instrument brackets (the interpreter specialising the bytecode it runs, cold CPU "
            f"caches and branch predictors, Python-side caches filled on first use) is not measured one by one: it is "
            f"{where}; {rerun}")


_LEVELS = {1: "coarse modules only (the root and two levels below it)", 0: "no modules"}


_CALIBRATION_EFFECT = {
    "first_touch": "anonymous page faults are counted without time",
    "thread_start": "thread starts are counted without time",
    "file_pages": "file-backed page faults are counted without time",
}


def calibration_notes(calibration: dict[str, Any]) -> list[str]:
    """One note per calibration too spread to use (MachineCosts.unusable): what it measured, and
    what the attribution does without it."""
    return [f"{name.replace('_', ' ')} calibration too spread to use ({why}): "
            f"{_CALIBRATION_EFFECT.get(name, 'not used')}; a quieter machine gives a usable one"
            for name, why in sorted(calibration.get("unusable", {}).items())]


def recorder_notes(tl: Timeline, passes: dict[str, PassAttribution]) -> list[str]:
    """What the recorder thinned or lost, pass by pass: module calls are thinned first (the
    'warmprof:thinned' instants say when and to what), cause spans and pass times are kept."""
    notes = []
    ids = [i for i, n in enumerate(tl.names) if n == THINNED]
    at = (tl.kind == INSTANT) & (tl.name == ids[0]) if ids and len(tl) else np.zeros(len(tl), dtype=bool)
    marks = list(zip(tl.ts_ns[at].tolist(), tl.value[at].tolist()))
    for name, att in passes.items():
        if not att.spans:
            continue
        t0, t1 = att.spans[0].start_ns, att.spans[0].end_ns
        steps = [f"{_LEVELS.get(v, f'level {v}')} after {(t - t0) / 1e6:.1f} ms" for t, v in marks if t0 <= t <= t1]
        if steps:
            kept = "Pass times and cause spans are complete" if not tl.dropped else "Pass times are complete"
            notes.append(f"{name.replace('_', ' ')}: the recorder's module budget ran out, so module calls were "
                         f"thinned to {'; then '.join(steps)}. {kept}; page-fault and thread samples at module "
                         "boundaries went with the modules (the pass boundaries keep theirs), so placement by "
                         "module is coarser from there, and profiler_overhead counts recorded calls only")
        if att.own_faults:
            notes.append(f"{name.replace('_', ' ')}: warmprof's own buffers took {att.own_faults} page faults "
                         "(one per page first written; not charged to allocator_growth)")
    if tl.thinned:
        notes.append(f"module hooks were taken off {tl.thinned} times when the budget was spent (once per module "
                     "and pass): that module's later calls in the pass ran unhooked and are not counted")
    if tl.dropped:
        notes.append(f"{tl.dropped} records dropped (recorder buffer full even for cause spans and counters): "
                     "attributed figures may be low; pass times come from the passes' own clock reads")
    return notes


def _spans(att: PassAttribution, pass_name: str) -> list[Span]:
    if not att.spans:
        return []
    t0 = att.spans[0].start_ns
    out = []
    # Cause spans, passes and modules; other structure spans (every CUDA kernel launch) would
    # swamp the timeline and say nothing about causes.
    kept = [s for s in att.spans if s.cause != 0 or s.name.startswith(("module:", "pass:"))]
    for s in kept[:MAX_SPANS]:
        mod = s.name[len("module:"):] if s.name.startswith("module:") else ""
        out.append(Span(pass_=pass_name, name=s.name, cause=cause_name(s.cause), source=source_of(s.name),
                        module=mod, start_ms=(s.start_ns - t0) / 1e6, dur_ms=max(0, s.dur_ns) / 1e6,
                        depth=s.depth, thread=s.thread, value=s.value))
    return out


def _counter_samples(tl: Timeline, att: PassAttribution, pass_name: str) -> list[CounterSample]:
    if not att.spans or len(tl) == 0:
        return []
    t0, t1 = att.spans[0].start_ns, att.spans[0].end_ns
    out = []
    for i in range(len(tl)):
        if tl.kind[i] != COUNTER:
            continue
        t = int(tl.ts_ns[i])
        if t0 <= t <= t1:
            out.append(CounterSample(pass_=pass_name, name=tl.names[int(tl.name[i])], t_ms=(t - t0) / 1e6,
                                     value=float(tl.value[i])))
    return out[:MAX_SPANS]


def _calls_aligned(f: TraceFacts) -> bool:
    """The op view's recorded calls line up with the first pass's op spans (the k-th span is the
    k-th call): as many of each. Not so when the recorder dropped records."""
    n = f.first.op_calls
    return (f.op_call is not None and n > 0 and f.op_call("first", n - 1) is not None
            and f.op_call("first", n) is None)


def _where(f: TraceFacts) -> list[dict[str, Any]]:
    """unattributed_where: by module, or by (module, op) site with each op site's first call when the
    op view ran (its recorded calls line up with the pass's op spans unless the recorder dropped some)."""
    first, rerun = f.first, f.rerun
    if not first.op_sites:
        return [{"module": mod or "(outside modules)", "ms": ms} for mod, ms in unattributed_where(first, rerun)]
    aligned = _calls_aligned(f)
    one_time = {(mod, op): ms for mod, op, ms in unattributed_sites(first, rerun)}
    # what the re-run still paid over a warm pass, by site (warm-up that takes more than one call)
    again = {(mod, op): ms for mod, op, ms in unattributed_sites(rerun, f.warm_pass)} if f.warm_pass else {}
    rows = []
    sites = sorted(set(one_time) | set(again), key=lambda k: -(one_time.get(k, 0.0) + again.get(k, 0.0)))
    for (mod, op) in sites[:MAX_SITES]:
        row: dict[str, Any] = {"module": mod or "(outside modules)", "ms": one_time.get((mod, op), 0.0)}
        if (mod, op) in again:
            row["rerun_ms"] = again[(mod, op)]
        site = first.op_sites.get((mod, op))  # the first pass's: its index is into that pass's calls
        if op:
            row["op"] = op
            row["calls"] = site[1] if site else rerun.op_sites.get((mod, op), (0, 0))[1]
            if site:  # a site the first pass did not run has no first call to point at
                row["index"] = site[0]
                if f.op_firsts is not None and aligned:
                    first_of_op, new_signature = f.op_firsts
                    row["first_of_op"] = first_of_op.get(op) == site[0]
                    row["new_signature"] = site[0] in new_signature
            spec = f.op_call("first", site[0]) if aligned and site and f.op_call else None
            if spec is not None:
                row["call"] = spec
        rows.append(row)
    return rows


def contention_notes(host: dict[str, Any], steady_waits: list[float], first_contention_ms: float,
                     noise_band_ms: float) -> list[str]:
    """What the run-queue delays say beyond the booked cpu_contention: that they were not measured
    (no schedstat), or the other threads' waits (reported, never booked: attribution.cpu_contention)."""
    first = host.get("first", {})
    if "run_delay_ns" not in first:
        return ["cpu contention: not measured (this kernel gives no per-thread schedstat: "
                "/proc/<pid>/task/<tid>/schedstat is missing)"]
    out = []
    workers_ms = first.get("worker_run_delay_total_ns", 0) / 1e6
    if workers_ms > max(noise_band_ms, 0.01):
        out.append(
            f"cpu contention: the other {first.get('worker_threads', 0)} threads of the process waited for a CPU too, "
            f"{first.get('workers_waiting', 0)} of them, up to {first.get('worker_run_delay_max_ns', 0) / 1e6:.2f} ms "
            f"on one thread ({workers_ms:.2f} ms in all): not booked, since a worker's wait adds to the pass only "
            "while the pass's thread waits for that worker, and they wait side by side, not one after another")
    if steady_waits and first_contention_ms > 0:
        out.append(f"cpu contention: the steady passes waited {median(steady_waits):.2f} ms each for a CPU "
                   f"(median; up to {max(steady_waits):.2f} ms); the first pass's booked wait is what it waited beyond that")
    return out


def build_report(facts: TraceFacts) -> Report:
    f = facts
    first, rerun = f.first, f.rerun
    stats = steady_stats(f.steady_ms)
    summary = summarize(first.pass_ms, stats.median, stats.noise_band, first.attributed_ms)
    inst: dict[str, Any] = {i.name: i.summary for i in f.instruments}
    cache_by_pass = inst.get("torch_compile", {}).get("cache_by_pass", {})
    causes = with_compile_cache(_entries(first, summary.excess_ms), cache_by_pass.get("first", ""))
    rerun_excess = rerun.pass_ms - stats.median
    notes: list[str] = []
    for i in f.instruments:
        notes.extend(f"{i.name}: {n}" for n in i.notes)
        if i.reason:
            notes.append(f"{i.name}: off ({i.reason})")
    if f.warm_reasons:
        notes.append("runtime already warm: " + "; ".join(f.warm_reasons) + " (run in a fresh process for a true first pass)")
    notes.extend(f.protocol_notes)
    if f.oversubscription:
        notes.append(f.oversubscription)
    host = inst.get("host", {}).get("passes", {})
    if "host" in inst:
        notes.extend(contention_notes(host, f.steady_run_delay_ms, first.attributed_by_cause("cpu_contention"),
                                      stats.noise_band))
    notes.extend(recorder_notes(f.timeline, {"first_pass": first, "seen_rerun": rerun}))
    notes.extend(calibration_notes(f.calibration))
    if first.op_sites and f.op_call is not None and not _calls_aligned(f):
        notes.append(f"op view: the recorder kept {first.op_calls} op spans in the first pass, not one per recorded "
                     "call (it dropped records), so the op rows carry no recorded call (nothing for the probes)")
    if first.unmatched:
        notes.append(f"{first.unmatched} spans never closed in the first pass (closed at its end)")
    overshoot = overshoot_note(summary.attributed_ms, summary.excess_ms, stats.noise_band)
    if overshoot:
        notes.append(overshoot)
    residual = rerun.pass_ms - stats.median - rerun.attributed_ms
    notes.append(first_call_residual_note(summary.unattributed_ms, residual, stats.noise_band))
    if first.off_thread_ms > 0:
        notes.append(f"{first.off_thread_ms:.1f} ms of cause spans on other threads (overlapping the pass, not counted)")
    if not f.run.fresh_process:  # what ran in the caller's process before the trace is unknown to it
        notes.append(IN_PROCESS_NOTE)
    modules: list[dict[str, Any]] = [
        {"module": mod or "(outside modules)", "ms": sum(d.values()), "causes": d}
        for mod, d in first.by_module().items()
    ]
    modules.sort(key=lambda m: -m["ms"])
    # Only what was recorded: steady passes run uninstrumented, so they have no spans (renderers
    # draw the steady median from steady_median_ms and label it as a median).
    spans = _spans(first, "first") + _spans(rerun, "seen_rerun")
    tl = f.timeline
    net = ([t - w for t, w in zip(f.steady_ms, f.steady_run_delay_ms)]
           if f.steady_run_delay_ms and len(f.steady_run_delay_ms) == len(f.steady_ms) else [])
    report = Report(
        model=f.model, shape=f.shape, device=f.device, dtype=f.dtype, compile=f.compile, inputs=f.inputs,
        settings=f.settings,
        first_pass_ms=first.pass_ms, seen_rerun_ms=rerun.pass_ms,
        steady_median_ms=stats.median, steady_p10_ms=stats.p10, steady_p90_ms=stats.p90,
        steady_passes=stats.n, noise_band_ms=stats.noise_band,
        excess_ms=summary.excess_ms, attributed_ms=summary.attributed_ms, unattributed_ms=summary.unattributed_ms,
        causes=causes,
        seen_rerun_causes=with_compile_cache(_entries(rerun, rerun_excess), cache_by_pass.get("seen_rerun", "")),
        modules=modules,
        unattributed_where=_where(f),
        counters={
            "first_pass": host.get("first", {}),
            "seen_rerun": host.get("seen_rerun", {}),
            "steady_faults_median": steady_fault_median(f.steady_faults),
            "first_pass_faults_outside_causes": first.faults_outside_causes,
        },
        protocol=Protocol(
            input=f.input_desc, steady_ms=f.steady_ms, calibration=f.calibration,
            runtime_warm=bool(f.warm_reasons), warm_reasons=f.warm_reasons,
            unattributed_within_noise=summary.within_noise, attribution_thread_only=True,
            recorder=RecorderStats(records=len(tl), dropped=tl.dropped, thinned_modules=tl.thinned,
                                   own_faults=tl.own_faults),
            run=f.run, instrumented_steady_ms=list(f.instrumented_steady_ms), seen_rerun_residual_ms=residual,
            oversubscription=f.oversubscription,
            steady_run_delay_ms=list(f.steady_run_delay_ms),
            steady_net_median_ms=median(net) if net else None,
            calls_per_pass=f.calls_per_pass,
        ),
        setup=f.setup,
        instruments=inst,
        torch_compile=TorchCompileFigures.from_summary(inst.get("torch_compile")),
        spans=spans,
        counter_samples=_counter_samples(tl, first, "first") + _counter_samples(tl, rerun, "seen_rerun"),
        platform=f.platform,
        warmprof_version=__version__,
        created=f.created,
        notes=notes,
    )
    report.advice = advise(report)
    return report


__all__ = ["IN_PROCESS_NOTE", "InstrumentSummary", "TraceFacts", "build_report", "calibration_notes",
           "first_call_residual_note", "overshoot_note", "recorder_notes", "with_compile_cache"]

"""Folding the controls into a trace's report: the one accounting (ARCHITECTURE.md, "One accounting").

    headline excess = the model's causes + the run-to-run difference + unattributed      (exactly)

- The headline excess is the clean first pass's (the control process: no instrument but the pass timer)
  less its steady median; without a clean control, the instrumented first pass's less warmprof's own
  estimated cost in it.
- The model's causes are what the instrumented first pass booked, less what the warm control booked
  (the same instruments, fresh, on the model already run at this shape: warmprof's own first-call work),
  less the page faults the instrumented pass took beyond the clean pass's count (warmprof's own buffers),
  plus what the clean control's passes (the traced shape, then three other shapes) say the process pays
  once whatever the shape. Each is sized by its own evidence; none is sized as what the others leave.
  cpu_contention (a wait for a CPU outside cause spans) is the clean pass's, the headline's: the
  instrumented pass's wait is in that pass only (_headline_contention).
- The run-to-run difference is the clean first pass's excess against the instrumented one's less
  warmprof's own cost on a first pass (the warm control's, measured; else the estimate per pass): two fresh
  processes never pay exactly alike (a compile under load varies by seconds); each without its wait for a
  CPU outside causes (the clean one's is booked, the instrumented one's is not the headline's). It is its own row, never a
  cause, with what the two processes' waits for a CPU and off it say about it; where it is beyond them and
  the noise, the answer is `unstable` (verdict.py) and the advice names --repeat.
- Unattributed is the instrumented first pass's excess less warmprof's own cost less its own causes: what
  the process whose causes were measured paid that no instrument named.

warmprof's own cost is its own line (report.own_cost), never a cause. Data only: no process is driven here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..causes import Name
from . import controls
from .advice import advise
from .build import first_call_residual_note, share_of
from .controls import NOTE_PREFIX, Clean, WarmControl
from ..stats import median
from .verdict import (UNSTABLE, WARM_FAULTS, after_pause_ms, causes_wait_ms, new_faults, no_cost_bound_ms,
                      no_cost_bound_parts, verdict)

CLEAN_WAIT_SOURCE = "run_queue:clean_pass"  # the clean first pass's own wait for a CPU (_headline_contention)
ONCE_SOURCE = "warm_process"  # explain.WARM_SOURCE: what a process that ran another shape first did not pay again
RUN_TO_RUN_SHARE = 0.1  # a run-to-run difference within this share of the excess (or the noise) is settled


def fold_controls(report: Any) -> None:
    """fold() with this context's control: its clean pass and warm control, or the reason there is none."""
    ctl = controls.current()
    fold(report, ctl.clean if ctl else None, ctl.warm if ctl else None, controls.why_none())


def fold(report: Any, clean: Clean | None, warm: WarmControl | None, why_not: str = "") -> None:
    """The report's headline, causes, run-to-run difference and unattributed time from the controls
    (see the module's docstring). Data only."""
    instrumented_first = report.first_pass_ms
    instrumented_excess = report.excess_ms
    instrumented_band = report.noise_band_ms
    own_rows = [c for c in report.causes if c.cause == Name.PROFILER_OVERHEAD]
    own_steady_estimate = sum(c.ms for c in own_rows)  # the instruments' cost on a pass (estimated)
    op_view_firsts = sum(c.ms for c in own_rows if c.source == "op_view")  # torch's per-op set-up for the mode
    causes = [c for c in report.causes if c.cause not in (Name.PROFILER_OVERHEAD, Name.UNATTRIBUTED)]
    notes: list[str] = []
    own: dict[str, Any] = {"instrumented_first_pass_ms": instrumented_first,
                           "instrumented_excess_ms": instrumented_excess,
                           "steady_ms": own_steady_estimate - op_view_firsts,
                           **({"op_view_first_calls_ms": op_view_firsts} if op_view_firsts else {}),
                           # the estimate's entries as attribution gave them (source, detail, module)
                           "entries": [dataclasses.asdict(c) for c in own_rows],
                           "steady_how": ("each instrumented pass's cost on the model warm: the instrumented steady "
                                          "passes against the clean ones, or the calibrated hook cost times the calls "
                                          "(estimated)")}
    # warmprof's own cost on the instrumented first pass: the warm control's, measured (a figure under the
    # steady median is the machine's noise: none is taken out), else the estimate per pass
    if warm is not None:
        base = clean.steady_median_ms if clean is not None else report.steady_median_ms
        own["first_pass_ms"] = warm.first_pass_ms - base
        own["first_pass_how"] = ("the warm control: the same instrumented passes in the second process on the model "
                                 "already run at this shape, its first pass less the clean steady median (measured)")
        own["booked_in_control_ms"] = sum(x["ms"] for x in warm.causes
                                          if x["cause"] not in (Name.PROFILER_OVERHEAD, Name.UNATTRIBUTED))
        own_first = max(0.0, own["first_pass_ms"])
        extra = _faults_beyond_clean(report, clean)
        if extra is None:
            causes = _less(causes, warm.causes)
        else:  # the faults are sized by the two processes' counts: the warm control's host faults stay out of _less
            causes = _less(causes, [x for x in warm.causes if (x["cause"], x["source"]) != _HOST_FAULTS])
            taken = _take_own_faults(causes, extra)
            warm_host = sum(float(x["ms"]) for x in warm.causes if (x["cause"], x["source"]) == _HOST_FAULTS)
            own["first_pass_faults_beyond_clean"] = extra
            own["first_pass_faults_ms"] = taken
            # the warm control's first pass held its own host faults' time: warmprof's own faults in the traced pass
            # are what the counts say, more or less than that (own cost never below nothing)
            own_first = max(0.0, own_first + taken - warm_host)
        report.unattributed_where = _where_less(report.unattributed_where, warm.where)
    else:
        own_first = own_steady_estimate
        extra = _faults_beyond_clean(report, clean)
        if extra is not None:
            own["first_pass_faults_beyond_clean"] = extra
            own["first_pass_faults_ms"] = _take_own_faults(causes, extra)
            own_first += own["first_pass_faults_ms"]
    own["in_instrumented_ms"] = own_first  # what of the instrumented excess is warmprof's own (the accounting's)
    model_instrumented = instrumented_excess - own_first
    if clean is not None:
        c = clean.to_dict()
        report.first_pass_ms = c["first_pass_ms"]
        report.steady_median_ms = c["steady_median_ms"]
        report.steady_p10_ms, report.steady_p90_ms = c["steady_p10_ms"], c["steady_p90_ms"]
        report.steady_passes = c["steady_passes"]
        report.noise_band_ms = c["noise_band_ms"]
        report.excess_ms = c["excess_ms"]
        report.clean = c
        own["in_headline_ms"] = 0.0
    else:
        # Only the instrumented pass: its excess less warmprof's estimated own cost in it.
        own["in_headline_ms"] = own_first
        report.excess_ms = model_instrumented
        report.clean = None
        notes.append(NOTE_PREFIX + (why_not or "none") + ": the excess is the instrumented first pass's less "
                     f"warmprof's estimated own cost ({own_first:.2f} ms, from warm instrumented passes); "
                     "its instruments' cold paths on this first pass (their first calls, buffers and imports) are not "
                     "measured apart and may be booked as the model's causes. `warmprof trace` on the command line "
                     "measures the model's first pass clean in a second fresh process and warmprof's own first-pass "
                     "cost on the model warm")
    if clean is not None and clean.other_shape_refused:
        notes.append(NOTE_PREFIX + "no other-shape pass: the model refused its inputs one row longer in the batch "
                     f"dimension ({clean.other_shape_refused}), so what the process pays once whatever the shape is "
                     "not told apart")
    if clean is not None and clean.other_shape:
        causes = _once_per_process(report, causes, clean)
    if warm is None and clean is not None:
        notes.append(NOTE_PREFIX + "no warm control (" + (why_not or "not run") + "): the causes are the instrumented "
                     "pass's, warmprof's own first-call work included; warmprof's own cost on the first pass is the "
                     "estimate per pass")
    report.own_cost = own
    if getattr(report, "generate", None):
        from .generate import fold_controls as fold_generate

        fold_generate(report.generate, clean.generate if clean is not None else None,
                      warm.generate if warm is not None else None, _less)
    settings = getattr(report, "settings", None)
    if settings is not None:  # which controls ran: a setting that changes what is measured
        ran: list[dict[str, Any]] = [{"name": "clean_first_pass", "process": "control"}] if clean is not None else []
        if clean is not None and clean.other_shape:
            ran.append({"name": "other_shape", "shape": (clean.other_shape.get("shape") or [None])[0],
                        **({"shapes": [(o.get("shape") or [None])[0] for o in clean.other_shapes]}
                           if len(clean.other_shapes) > 1 else {})})
        if warm is not None:
            ran.append({"name": "warm_control", "process": "control"})
        settings.controls = ran
    instrumented_causes_ms = sum(c.ms for c in causes)
    instrumented_waited = causes_wait_ms(causes)
    if clean is not None:
        causes = _headline_contention(causes, clean)
    attributed = sum(c.ms for c in causes)
    report.attributed_ms = attributed
    report.unattributed_ms = model_instrumented - instrumented_causes_ms
    # what the causes and unattributed leave of the headline: the two processes' difference beyond the
    # waits for a CPU outside causes that each booked where it paid them
    run_to_run = report.excess_ms - attributed - report.unattributed_ms if clean is not None else 0.0
    report.accounting = _accounting(report, causes, attributed, run_to_run, clean, instrumented_band,
                                    model_instrumented, instrumented_waited)
    for c in causes:
        c.share = share_of(c.ms, report.excess_ms, attributed)
    report.causes = sorted(causes, key=lambda c: -c.ms)
    report.modules = modules_as_booked(report.modules, report.causes)
    settle_verdict(report)
    if report.protocol is not None:
        residual_rerun = report.protocol.seen_rerun_residual_ms
        for i, note in enumerate(report.notes):
            if note.startswith("first-call work no instrument brackets") and residual_rerun is not None:
                report.notes[i] = first_call_residual_note(report.unattributed_ms, residual_rerun, report.noise_band_ms)
    report.notes = [n for n in report.notes if not n.startswith("the causes add up to ")]  # the accounting says it
    report.notes.extend(notes)
    report.advice = advise(report)


def _waits(first: dict[str, Any], steady: dict[str, Any]) -> tuple[float, float]:
    """(for a CPU, off the CPU) a clean pass waited beyond a steady pass (ms; 0 where not read)."""
    cpu = float(first.get("run_delay_ms", 0.0)) - float(steady.get("run_delay_ms", 0.0))
    off = float(first.get("off_cpu_ms", 0.0)) - float(steady.get("off_cpu_ms", 0.0))
    return cpu, off


def _headline_contention(causes: list[Any], clean: Clean) -> list[Any]:
    """The cpu_contention row for the headline's first pass: the clean first pass's wait for a CPU beyond
    its steady passes (schedstat, read in the control) less the waits the other causes hold inside their
    own spans (waited_ms, the instrumented pass's), in place of what the instrumented pass waited outside
    cause spans. The headline is the clean pass's, so its wait is the one in the headline; the instrumented
    pass's is in that pass only, and comes out of the run-to-run difference with it. Under a hog on each
    core one of the two processes waits a scheduler slice (~4 ms) and the other none, by chance: booked
    from the instrumented process, a pre-run model's "cost" came to 200 % of the headline or 50 %
    (llama, t5 at 28ab892). Unchanged where the control read no waits (no schedstat)."""
    from ..report import CauseEntry

    if "run_delay_ms" not in clean.first:
        return causes
    clean_cpu, _ = _waits(clean.first, clean.steady)
    rows = [c for c in causes if c.cause == Name.CPU_CONTENTION and c.evidence == "measured"]
    rest = [c for c in causes if not (c.cause == Name.CPU_CONTENTION and c.evidence == "measured")]
    inside = sum(getattr(c, "waited_ms", 0.0) for c in rest if c.evidence == "measured")
    ms = max(0.0, clean_cpu - inside)
    was = sum(c.ms for c in rows)
    if ms < 1e-3:
        return rest
    detail = (f"the clean first pass (the headline's) was runnable with no CPU for {clean_cpu:.3f} ms beyond its "
              "steady passes' median (schedstat run-queue delay, read in the control process)"
              + (f", less the {inside:.3f} ms the causes above waited inside their own spans" if inside else "")
              + f"; the instrumented pass waited {was:.3f} ms outside cause spans (in the run-to-run line); not a "
              "first-call cost, a busy machine")
    # no module: the control reads its thread's wait at the pass's edges only (the instrumented pass's
    # per-module waits are another process's); modules_as_booked puts it outside modules
    return rest + [CauseEntry(cause=Name.CPU_CONTENTION, ms=ms, share=0.0, evidence="measured",
                              source=CLEAN_WAIT_SOURCE, module="", count=1, detail=detail)]


def _accounting(report: Any, causes: list[Any], attributed: float, run_to_run: float, clean: Clean | None,
                instrumented_band: float, model_instrumented: float, instrumented_waited: float) -> dict[str, Any]:
    """The one accounting, with what the two processes' waits say about their difference: the clean pass's
    waits beyond its steady passes against what the instrumented pass booked (its cpu_contention and the
    waits inside its causes; its wait and disk_read). Both the run-to-run difference left beyond those waits
    and the unattributed time are differences of single passes from two processes (the instrumented first
    pass, the warm control's first pass that sizes warmprof's own cost, the clean first pass), so their
    noise is the two processes' steady noise bands together (`noise_ms`); past that and a tenth of the
    excess (`tolerance_ms`) one run does not settle the figures: unstable, unless both processes read no
    first-call cost at all."""
    acc: dict[str, Any] = {"excess_ms": report.excess_ms, "causes_ms": attributed, "run_to_run_ms": run_to_run,
                           "unattributed_ms": report.unattributed_ms,
                           "how": "excess = causes + run_to_run + unattributed: the causes are the instrumented first "
                                  "pass's (less the warm control's), with the clean first pass's wait for a CPU outside "
                                  "causes as cpu_contention in place of the instrumented one's; run_to_run the clean "
                                  "first pass's excess against the instrumented one's less warmprof's own cost, each "
                                  "without that wait (a difference between two fresh processes, not a cause); "
                                  "unattributed the instrumented excess less warmprof's own cost less its causes"}
    if clean is None:
        acc["noise_ms"] = report.noise_band_ms + instrumented_band
        acc["tolerance_ms"] = max(acc["noise_ms"], RUN_TO_RUN_SHARE * abs(report.excess_ms))
        acc["unstable"] = False  # one process: nothing to disagree with (its residual is judged as it is)
        return acc
    clean_cpu, clean_off = _waits(clean.first, clean.steady)
    booked_cpu = causes_wait_ms(causes)  # with the headline's own wait outside causes (_headline_contention)
    # the instrumented pass's time off the CPU: its wait and disk_read entries whatever their evidence (a stretch
    # that held both is split between them by block counts, an estimate), and the time blocked inside causes
    inst_off = sum(c.ms if c.cause in (Name.WAIT, Name.DISK_READ) else getattr(c, "blocked_ms", 0.0) for c in causes)
    # the waits the run-to-run line still holds: what the clean pass waited for a CPU beyond what the causes
    # book for it (where the causes' own waits exceed it), and the two passes' time off the CPU
    by_waits = (clean_cpu - booked_cpu) + (clean_off - inst_off)
    beyond = run_to_run - by_waits
    noise = report.noise_band_ms + instrumented_band
    tolerance = max(noise, RUN_TO_RUN_SHARE * abs(report.excess_ms))
    # two processes that both read no first-call cost agree on the answer, whatever their small figures
    bound = no_cost_bound_ms(report) + instrumented_band
    both_warm = report.excess_ms - clean_cpu <= bound and model_instrumented - instrumented_waited <= bound
    acc["run_to_run"] = {
        "clean_first_pass_ms": clean.first_pass_ms, "clean_excess_ms": clean.excess_ms,
        "instrumented_excess_less_own_ms": model_instrumented,
        "clean_waited_for_cpu_ms": clean_cpu, "instrumented_waited_for_cpu_ms": instrumented_waited,
        "booked_waited_for_cpu_ms": booked_cpu,
        "clean_off_cpu_ms": clean_off, "instrumented_off_cpu_ms": inst_off,
        "explained_by_waits_ms": by_waits, "beyond_waits_ms": beyond,
        "clean_major_faults": int(clean.first.get("major_faults", 0)),
        "clean_blocks_in": int(clean.first.get("blocks_in", 0)),
    }
    # a compile compared across the two processes by torch's own timers too (the clean first pass's; the
    # traced passes', the torch_compile instrument's reading of the same timers)
    tc = getattr(report, "torch_compile", None)
    if "torch_compile_ms" in clean.first or (tc is not None and tc.torch_reported_ms > 0):
        acc["run_to_run"]["clean_torch_compile_ms"] = float(clean.first.get("torch_compile_ms", 0.0))
        acc["run_to_run"]["instrumented_torch_compile_ms"] = float(tc.torch_reported_ms) if tc is not None else 0.0
    acc["noise_ms"], acc["tolerance_ms"] = noise, tolerance
    acc["both_warm"] = both_warm
    settle_unstable(acc)
    return acc


def settle_unstable(acc: dict[str, Any]) -> None:
    """The accounting's unstable flags from its figures (again after a fold that moved time from unattributed
    to the causes, e.g. --explain's): the run-to-run difference beyond the waits, or the unattributed time,
    past the tolerance, unless both processes read no first-call cost."""
    tolerance = float(acc.get("tolerance_ms", 0.0))
    beyond = float(acc.get("run_to_run", {}).get("beyond_waits_ms", 0.0))
    acc["residual_unsettled"] = abs(float(acc["unattributed_ms"])) > tolerance
    acc["unstable"] = (abs(beyond) > tolerance or acc["residual_unsettled"]) and not acc.get("both_warm", False)


def settle_verdict(report: Any) -> None:
    """The report's verdict from its figures: verdict.py's, a generate trace's from its time to first token
    (traces/generate.headline_verdict) unless the answer is unstable. The bound it judged the excess by goes
    into the accounting (no_cost_bound: the spread, whether net of waits, the after-pause term), for the text."""
    report.verdict = verdict(report)
    acc = getattr(report, "accounting", None)
    if isinstance(acc, dict) and not getattr(report, "generate", None):  # a generate verdict is its own (below)
        spread, net, pause = no_cost_bound_parts(report)
        acc["no_cost_bound"] = {"spread_ms": spread, "net_of_waits": net, "after_pause_ms": pause, "ms": spread + pause}
    if getattr(report, "generate", None) and report.verdict != UNSTABLE:
        from .generate import headline_verdict  # a generate trace's headline is its time to first token

        report.verdict = headline_verdict(report.generate) or report.verdict
    if report.protocol is not None:
        acc = getattr(report, "accounting", None)
        limit = float(acc.get("tolerance_ms", report.noise_band_ms)) if isinstance(acc, dict) else report.noise_band_ms
        report.protocol.unattributed_within_noise = abs(report.unattributed_ms) <= limit


def modules_as_booked(modules: list[dict[str, Any]], causes: list[Any]) -> list[dict[str, Any]]:
    """The per-module rows with each cause's figures scaled to what the cause table books for it (after the
    warm control came off, warmprof's own cost left out, the once-per-process row placed), so the table and
    the modules give the same figure per cause; a cause no module row held goes to its entries' modules."""
    table: dict[str, float] = {}
    for c in causes:
        table[c.cause] = table.get(c.cause, 0.0) + c.ms
    # a cause the table books only from the clean control's pass (its wait for a CPU) has no module reading:
    # the instrumented pass's per-module figures for it are another process's, not its placement
    other_process = {c.cause for c in causes if c.source.endswith(":clean_pass")} \
        - {c.cause for c in causes if not c.source.endswith(":clean_pass")}
    modules = [{**m, "causes": {k: v for k, v in m["causes"].items() if k not in other_process}} for m in modules]
    held: dict[str, float] = {}
    for m in modules:
        for cause, ms in m["causes"].items():
            held[cause] = held.get(cause, 0.0) + max(0.0, float(ms))
    rows: dict[str, dict[str, float]] = {}
    for m in modules:
        for cause, ms in m["causes"].items():
            if table.get(cause, 0.0) > 0 and held.get(cause, 0.0) > 0 and ms > 0:
                row = rows.setdefault(m["module"], {})
                row[cause] = row.get(cause, 0.0) + float(ms) * table[cause] / held[cause]
    for c in causes:  # causes no module row held: placed where their entries say
        if held.get(c.cause, 0.0) <= 0 and c.ms > 0:
            row = rows.setdefault(c.module or "(outside modules)", {})
            row[c.cause] = row.get(c.cause, 0.0) + c.ms
    out = [{"module": mod, "ms": sum(d.values()), "causes": d} for mod, d in rows.items()]
    return sorted(out, key=lambda m: -m["ms"])


def _once_per_process(report: Any, causes: list[Any], clean: Clean) -> list[Any]:
    """What the clean first pass paid beyond the other-shape passes after it (each net of its waits, each
    at a shape new to the process): what the process pays once whatever the shape (the first run of torch's
    and the model's code, its pages, lazy set-up). Decided by evidence the machine's load does not widen:
    each other shape gives one figure, the clean first pass's excess less that shape's first-pass excess
    (an other-shape pass faster than its own steady passes paid nothing, not less than nothing), and it
    agrees where that figure is over the spread of the steady passes net of their waits (one pass's own
    noise, read without the waits load adds). Where most of them agree, the median figure is the row, less
    the runtime_init already booked from counts, as runtime_init, inferred, at its own size (never at what
    the other causes leave), placed over the modules' unattributed rows in proportion (their
    warm_process_ms). A warm model books nothing: its clean first pass pays no more than a new shape's, and
    maps no pages new to the process (no more than WARM_FAULTS page faults beyond a steady pass's, counted by
    the control); where the control counted none (an older one), no more than the steady passes' net spread
    and what a warm pass after a short pause pays net of its waits (the verdict's test, with net figures in
    place of the wall-time ones).
    Each figure is net of the anonymous page faults the first pass took beyond that shape's (counted in the
    control, priced as the trace's allocator_growth prices them): a first touch paid once per process is
    already booked as allocator_growth, and is not booked again here (a planted 64 MiB first touch was)."""
    from ..attribution import steady_stats
    from ..report import CauseEntry

    shapes: list[dict[str, Any]] = [o for o in (clean.other_shapes or [clean.other_shape or {}]) if o]
    if not shapes:
        return causes
    clean_net = clean.excess_ms - sum(_waits(clean.first, clean.steady))
    figures = [clean_net - max(0.0, _other_net(o, clean)) - _booked_faults_ms(causes, clean, o) for o in shapes]
    spread = steady_stats(clean.steady_net_ms).noise_band if len(clean.steady_net_ms) >= 3 else report.noise_band_ms
    agree = sum(1 for f in figures if f > spread)
    once = median(figures)
    n = len(figures)
    said = (f"{agree} of {n} other-shape first pass{'es' if n > 1 else ''} "
            f"({', '.join(f'{f:.2f}' for f in figures)} ms below the traced shape's, net of waits) "
            f"{'were' if agree != 1 else 'was'} over the steady passes' spread net of their waits ({spread:.2f} ms)")
    evidence = {"figures_ms": figures, "agree": agree, "of": n, "steady_net_spread_ms": spread, "median_ms": once,
                "booked_ms": 0.0}
    if isinstance(report.clean, dict):
        report.clean["once_per_process"] = evidence
    if agree * 2 <= n or clean_net <= 0:
        if agree:
            report.notes.append(NOTE_PREFIX + f"nothing booked as paid once per process: only {said}")
        return causes
    # The figures share one term, the clean first pass: a single pass over its steady passes' spread (a warm
    # model's, 3 times in 10 at a pre-run llama) makes every figure agree. Whether that pass was a warm one is
    # read first from its page faults, a count load does not change: the first run of code and data in a
    # process maps their pages (450-2471 faults beyond a steady pass's median in 179 cold traces of the four accuracy
    # models), and a warm pass maps next to none (0-41 in 122 pre-run traces). A pass that took no more than
    # WARM_FAULTS books nothing; one that took more is not a warm one, and its figures decide.
    fresh = new_faults(clean.first, clean.steady)
    if fresh is not None:
        evidence["first_pass_new_faults"] = fresh
        warm = fresh <= WARM_FAULTS and (f"took {fresh} page faults beyond the most a steady pass took, no more than "
                                          f"a warm pass takes ({WARM_FAULTS}): it ran no code and touched no data new "
                                          "to the process")
    else:
        # Without the control's fault counts (an older control): a first pass also pays for coming after other
        # work (the build), which a warm pass after a short pause pays too (after_pause, net of its waits as the
        # figures are). The verdict's test with net figures in place of the load-widened band and wall-time
        # pause: a clean pass within it is a warm one. (It also held back real rows: a cold t5's ~2 ms once per
        # process against a pause that costs it 1.4-2.7 ms, quiet or under load.)
        pause = after_pause_ms(report, net=True)  # net of its waits, as the figures are (a t5 under load: 4.5-5.7 ms wall)
        evidence["warm_bound_ms"] = spread + pause
        warm = clean_net <= spread + pause and (f"paid {clean_net:.2f} ms over its steady passes net of waits, no "
                                                f"more than their spread ({spread:.2f} ms) and what a warm pass after a "
                                                f"short pause pays ({pause:.2f} ms)")
    if warm:
        report.notes.append(NOTE_PREFIX + f"nothing booked as paid once per process: the clean first pass {warm}, "
                            f"though {said}")
        return causes
    booked = sum(e.ms for e in causes if e.cause == Name.RUNTIME_INIT)
    left = once - booked
    if left < 1e-3:
        return causes
    evidence["booked_ms"] = left
    rows = [w for w in report.unattributed_where if float(w.get("ms", 0.0)) > 0]
    weight = sum(float(w["ms"]) for w in rows)
    for w in rows:
        w["warm_process_ms"] = w.get("warm_process_ms", 0.0) + min(float(w["ms"]), left * float(w["ms"]) / weight)
    shape = "x".join(str(d) for d in (shapes[0].get("shape") or [[]])[0])
    causes.append(CauseEntry(
        cause=Name.RUNTIME_INIT, ms=left, share=0.0, evidence="inferred", source=ONCE_SOURCE,
        module=rows[0]["module"] if rows else "", count=len(rows),
        detail=f"the clean first pass paid {once:.2f} ms more over its steady passes than a first pass at "
               f"{shape or 'another shape'}{' and the other new shapes' if n > 1 else ''} right after it (the median; "
               f"each without its waits; {said}): what this process pays once whatever the shape (the first run "
               f"of torch's and the model's code and its pages, lazy set-up); {left:.2f} ms of it beyond the runtime_init "
               "booked from counts, placed over the modules' unattributed time in proportion (inferred: clean passes "
               "compared)"))
    return causes


_HOST_FAULTS = (Name.ALLOCATOR_GROWTH, "host_faults")
# Two fresh processes running the same model take nearly the same page faults; a difference this small
# (faults, or this share of the clean pass's) is run-to-run, not warmprof's.
FAULTS_NOISE = (32, 0.10)


def _faults_beyond_clean(report: Any, clean: Clean | None) -> int | None:
    """The page faults the instrumented first pass took beyond the clean one (each less its steady
    passes' median; the instrumented one less the recorder's own, which attribution already leaves
    out): warmprof's own (the op view's event buffers, the instruments' tables), in a pass where the
    clean control counted the model's own. 0 where they agree within FAULTS_NOISE; None where either
    count is missing (an older control, or no control)."""
    counters = getattr(report, "counters", None) or {}
    first = counters.get("first_pass") or {}
    if clean is None or "faults" not in clean.first or "minor_faults" not in first:
        return None
    recorder = getattr(getattr(report, "protocol", None), "recorder", None)
    instrumented = (int(first.get("minor_faults", 0)) + int(first.get("major_faults", 0))
                    - int(counters.get("steady_faults_median", 0)) - int(getattr(recorder, "own_faults", 0) or 0))
    model = int(clean.first["faults"]) - int(clean.steady.get("faults", 0))
    extra = instrumented - model
    return extra if extra > max(FAULTS_NOISE[0], FAULTS_NOISE[1] * max(0, model)) else 0


def _take_own_faults(causes: list[Any], extra: int) -> float:
    """Take `extra` faults off the instrumented pass's anonymous first-touch entries (allocator_growth,
    host_faults: warmprof's buffers are anonymous memory), each at its own price per fault, in proportion
    to their counts; the ms taken. An entry whose every fault is taken goes (no negative remainder)."""
    entries = [e for e in causes if (e.cause, e.source) == _HOST_FAULTS and e.count > 0]
    total = sum(e.count for e in entries)
    if extra <= 0 or total <= 0:
        return 0.0
    take = min(extra, total)
    taken = 0.0
    for e in entries:
        n = take * e.count / total
        whole = n >= e.count - 0.5  # all of it (a remainder under one fault is rounding)
        if whole:
            n = float(e.count)
        ms = e.ms * n / e.count
        e.scale(0.0 if whole else 1.0 - n / e.count,
                f"less {n:.0f} faults ({ms:.2f} ms) the clean first pass did not take: warmprof's own (the op view's "
                "event buffers, the instruments' tables), counted by the two processes' page faults")
        e.count = 0 if whole else max(1, int(round(e.count - n)))
        taken += ms
    causes[:] = [c for c in causes if not ((c.cause, c.source) == _HOST_FAULTS and c.ms <= 0)]
    return taken


def _other_net(other: dict[str, Any], clean: Clean) -> float:
    """An other-shape pass's excess net of waits: its first pass less what it waited (for a CPU and off it)
    against its own steady passes net of theirs, where the control read those; else against the clean steady
    passes' median waits."""
    first = other.get("first") or {}
    if "steady_net_median_ms" in other and "run_delay_ms" in first:
        return (float(other["first_pass_ms"]) - float(first["run_delay_ms"]) - float(first.get("off_cpu_ms", 0.0))
                - float(other["steady_net_median_ms"]))
    return float(other.get("excess_ms", 0.0)) - sum(_waits(first, clean.steady))


def _booked_faults_ms(causes: list[Any], clean: Clean, other: dict[str, Any]) -> float:
    """What the anonymous page faults the clean first pass took beyond an other-shape first pass cost, at the
    price per fault the trace's allocator_growth (host_faults) entries were booked at: the part of the
    difference of the two passes those entries already hold. The first pass's file-page faults (runtime_init,
    file_pages, taken off the once row as booked runtime_init) are not counted again. 0 where the control
    counted no faults (an older one) or nothing was booked from faults."""
    host = [e for e in causes if (e.cause, e.source) == _HOST_FAULTS and e.count > 0]
    ofirst = other.get("first") or {}
    if not host or "faults" not in clean.first or "faults" not in ofirst:
        return 0.0
    price = sum(e.ms for e in host) / sum(e.count for e in host)
    base = float(clean.steady.get("faults", 0.0))
    more = (float(clean.first["faults"]) - base) - max(0.0, float(ofirst["faults"]) - base)
    files = sum(e.count for e in causes if (e.cause, e.source) == (Name.RUNTIME_INIT, "file_pages"))
    # at most the faults the entries booked (faults inside cause spans are those causes', not allocator_growth's)
    return min(max(0.0, more - files), float(sum(e.count for e in host))) * price


def _less(causes: list[Any], control: list[dict[str, Any]]) -> list[Any]:
    """The trace's cause entries less what the warm control booked: by (cause, source), spread over
    the trace's entries of that key in proportion; what the control booked under a key the trace
    lacks (or beyond it) comes off the same cause's other entries. Entries left under a microsecond go."""
    booked: dict[tuple[str, str], float] = {}
    for x in control:
        if x["cause"] in (Name.PROFILER_OVERHEAD, Name.UNATTRIBUTED) or float(x["ms"]) <= 0:
            continue
        key = (x["cause"], x["source"])
        booked[key] = booked.get(key, 0.0) + float(x["ms"])
    left: dict[str, float] = {}
    for (cause, source), take in booked.items():
        take -= _cut([e for e in causes if e.cause == cause and e.source == source], take)
        if take > 0:
            left[cause] = left.get(cause, 0.0) + take
    for cause, take in left.items():
        _cut([e for e in causes if e.cause == cause], take)
    return [e for e in causes if e.ms >= 1e-3]


def _cut(entries: list[Any], take: float) -> float:
    """Take `take` ms off `entries` in proportion to their size (at most all of them); what was taken.
    An entry's wait for a CPU inside it shrinks with it, in proportion."""
    total = sum(e.ms for e in entries)
    if total <= 0 or take <= 0:
        return 0.0
    cut = min(take, total)
    for e in entries:
        part = cut * e.ms / total
        e.scale((e.ms - part) / e.ms if e.ms > 0 else 0.0,
                f"less {part:.2f} ms the warm control booked (warmprof's own first-call work)")
    return cut


def _where_less(rows: list[dict[str, Any]], control: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """unattributed_where less the warm control's rows of the same (module, op): what the model
    still paid there cold, warmprof's own first-call time at that site taken out."""
    theirs: dict[tuple[str, str], float] = {}
    for w in control:
        key = (w["module"], w.get("op", ""))
        theirs[key] = theirs.get(key, 0.0) + float(w["ms"])
    out = []
    for w in rows:
        key = (w["module"], w.get("op", ""))
        if key in theirs and theirs[key] > 0:
            w = dict(w, ms=float(w["ms"]) - theirs[key], own_ms=theirs[key])
        out.append(w)
    return sorted(out, key=lambda w: -float(w["ms"]))


__all__ = ["ONCE_SOURCE", "fold", "fold_controls", "modules_as_booked", "settle_unstable", "settle_verdict"]

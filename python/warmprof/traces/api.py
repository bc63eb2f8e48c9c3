"""warmprof.trace: the trace protocol (ARCHITECTURE.md, method).

first pass (all instruments) -> seen-shape re-run (instruments on) -> steady passes (clean, timed)
-> a few steady passes with every instrument on again (warmprof's own cost on this model)
-> calibrate (once per process) -> attribution (pure) -> Report (build.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import time
import weakref
from typing import Any

from .. import devices
from ..attribution import InstrumentCost, attribute_pass, steady_stats
from ..errors import InputError, ModelError, WarmprofError
from ..report import Report
from ..report.settings import inputs_label
from ..report.trace import RunContext
from ..stats import median, quantile
from ..system.platform import cuda_index, fingerprint, oversubscription
from ..system.process_state import ProcessState
from ..system.progress import progress_printer
from ..timeline import Recording, Timeline
from . import calibrate as calibration
from . import controls, passes
from .fold import fold_controls
from .build import InstrumentSummary, TraceFacts, build_report, steady_fault_median
from .compile_options import (
    CUDAGRAPH_NOTE,
    calls_per_pass,
    check_compile,
    compile_label,
    compile_model,
    cudagraph_skips,
    repeated,
    skips_note,
)
from .inputs import (
    cast_model,
    check_model,
    dtype_mismatch_hint,
    forget_as_made,
    input_change_note,
    make_inputs,
    parse_device,
    parse_model_dtype,
)
from .options import DEFAULTS, TraceOptions, signature_with_options
from .settings import trace_settings
from .setup_phase import SetupRun, merged, run_setup

_traced_models: "weakref.WeakSet[Any]" = weakref.WeakSet()


def _warm_reasons(model: Any, compiled: bool) -> list[str]:
    reasons = []
    target = getattr(model, "_orig_mod", model)
    try:
        if target in _traced_models:
            reasons.append("this model was already traced in this process")
    except TypeError:
        pass
    if calibration.cached() is not None and not reasons:  # set once a trace has run to its end here
        reasons.append("an earlier trace ran in this process")
    if compiled:
        try:
            from torch._dynamo.utils import counters

            if counters["stats"].get("unique_graphs", 0):
                reasons.append("dynamo already compiled graphs in this process")
        except Exception:
            pass
    return reasons


def _shape_of(x: Any) -> list[int] | None:
    """A tensor's shape as plain ints; None for anything else (a nested tensor, a symbolic size,
    an object whose .shape is not a tuple of ints), so a report never records what it cannot load."""
    try:
        shape = list(x.shape)
    except Exception:
        return None
    if all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        return [int(d) for d in shape]
    return None


def _dtype_of(args: tuple, kwargs: dict) -> str:
    """The first argument's dtype (by position, else by keyword: inputs= as a dict); "" for none."""
    first = args[0] if args else next(iter(kwargs.values()), None)
    dtype = getattr(first, "dtype", None)
    return str(dtype).removeprefix("torch.") if dtype is not None else ""


def _input_shapes(args: tuple, kwargs: dict) -> dict[str, Any]:
    """Every argument's shape, by position and by keyword (None where it is not a tensor with a plain
    shape): the report's `inputs`, so reports traced on different inputs= can be told apart."""
    import torch

    def one(x: Any) -> list[int] | None:
        return _shape_of(x) if isinstance(x, torch.Tensor) else None

    return {"args": [one(a) for a in args], "kwargs": {str(k): one(v) for k, v in kwargs.items()}}


def trace(model: Any, shape: Any = None, *, options: TraceOptions | None = None, _cold_start: Any = None,
          **keywords: Any) -> Report:
    """Trace the first pass of `model` and attribute its excess over a steady pass to causes.

    model: an nn.Module or any callable; with repeat (or alone) a model's name as `warmprof trace`
    takes it. The options are keywords (shape, inputs, dtype, model_dtype, device, steady,
    steady_budget_s, compile, progress, no_grad, label, run, op_view, explain, explain_top, repeat,
    generate, kv_cache), or the same as one value: options=warmprof.TraceOptions(...) (not both),
    whose documentation says what each one does. A wrong value is an InputError before anything runs.
    _cold_start: `warmprof trace`'s own child only (the cold start it recorded before the model
    existed: importing torch, the factory's module, the factory; a setup_phase.SetupRun).

    One trace runs at a time in a process: a second one (from another thread) is refused up front.
    """
    if options is None:
        opts = TraceOptions.from_keywords({"shape": shape, **keywords})
    elif not isinstance(options, TraceOptions):
        raise InputError(f"options must be a warmprof.TraceOptions, got {options!r}")
    elif keywords or shape is not None:
        given = ", ".join((["shape"] if shape is not None else []) + list(keywords))
        raise InputError(f"give trace()'s options either as keywords or as options=TraceOptions(...), not both: "
                         f"options= came with {given}")
    else:
        opts = options
    try:
        import torch
    except ImportError:
        raise WarmprofError("warmprof.trace needs torch: pip install 'warmprof[torch]'") from None
    named = isinstance(opts.repeat, bool) or opts.repeat != 1 or isinstance(model, str)
    if opts.generate is not None or opts.kv_cache is not None:
        from .generate import check_generate

        if named:
            raise InputError("generate= traces a model object in this process; for a named model in fresh processes "
                             "use the command line: warmprof trace MODULE:FACTORY --shape 1,L --generate N")
        opts = dataclasses.replace(opts, generate=check_generate(opts.generate, opts.kv_cache, model))
    if named:
        if not opts.no_grad or opts.steady_budget_s != DEFAULTS.steady_budget_s or opts.run is not None:
            raise InputError("a named model is traced as `warmprof trace` traces it (fresh processes, no_grad, its "
                             "steady budget): no_grad=False, steady_budget_s and run= do not go with it")
        got = _repeated(model, opts)
        if opts.label:
            got.model = opts.label
            for r in got.runs:
                r.model = opts.label
        return got.runs[0] if opts.repeat == 1 and not got.failed else got
    model_dt = parse_model_dtype(opts.model_dtype)
    if not calibration.busy.acquire(blocking=False):
        raise InputError("another warmprof trace or calibration is already running in this process (from another "
                         "thread, or this call comes from inside a trace): they share the recorder, so run them "
                         "one after another")
    try:
        before = ProcessState.take()
        report = _trace(torch, model, dataclasses.replace(
            opts, op_view=opts.op_view or opts.explain, model_dtype=model_dt,
            run=opts.run if opts.run is not None else RunContext()), _cold_start)
        report.notes.extend(before.changes_since())
        fold_controls(report)  # the headline and the model's causes, warmprof's own cost apart
        if model_dt is not None:
            report.notes.append(f"the model's floating parameters and buffers were cast to "
                                f"{str(model_dt).removeprefix('torch.')} before the trace (model_dtype=, --model-dtype); "
                                "the model stays cast")
    finally:
        calibration.busy.release()
    if opts.explain:
        from .explain import explain_report

        progress_printer(opts.progress)("probing the ops that hold the most unexplained time (fresh processes)")
        explain_report(report, top=opts.explain_top, threads=torch.get_num_threads(), device=report.device,
                       progress=opts.progress)
    return report


setattr(trace, "__signature__", signature_with_options(trace))  # help() and inspect list every option


def _repeated(model: Any, o: TraceOptions) -> Any:
    """trace(..., repeat=N): N fresh processes of `warmprof trace`, the model given by name."""
    from .repeat import check_repeat, trace_repeat

    repeat = check_repeat(o.repeat)
    if not isinstance(model, str):
        raise InputError(f"repeat={repeat} runs each trace in a fresh process, where a model object cannot follow: "
                         "name the model as `warmprof trace` takes it ('pkg.module:factory', 'path/to/file.py:factory' "
                         "or 'demo'), or call warmprof.trace() once per fresh process yourself")
    if o.explain:
        raise InputError("repeat does not go with explain: explain one run, on a run the repeats show typical")
    if o.inputs is not None and not isinstance(o.inputs, str):
        raise InputError("with repeat, inputs are named too: a FILE.pt saved with torch.save, or 'MODULE:FACTORY'")
    compile = "default" if o.compile is True else o.compile
    if compile not in (None, False) and not isinstance(compile, str):
        raise InputError("with repeat, compile is a mode name (the command line's --compile MODE), not options")
    whole = isinstance(o.steady, int) and not isinstance(o.steady, bool)
    if not whole and o.steady_range != DEFAULTS.steady_range:
        raise InputError("with repeat, steady is a whole number of passes (the command line's --steady N), or left "
                         "at its default")
    return trace_repeat(model, o.shape, repeat=repeat, progress=o.progress, inputs=o.inputs, dtype=o.dtype,
                        model_dtype=o.model_dtype, device=str(o.device), compile=compile or None, op_view=o.op_view,
                        steady=o.steady if whole else None)


def _trace(torch: Any, model: Any, o: TraceOptions, cold_start: Any = None) -> Report:
    # what the trace puts in place on the model for itself (generate's step hook, its compiled
    # forward) comes off whatever happens
    with contextlib.ExitStack() as undo:
        return _traced(torch, model, o, cold_start, undo)


def _traced(torch: Any, model: Any, o: TraceOptions, cold_start: Any, undo: contextlib.ExitStack) -> Report:
    """The protocol on `o` as trace() made it: op_view set by explain, model_dtype parsed, run given."""
    say = progress_printer(o.progress)
    started = time.monotonic()
    check_model(model)
    dev = parse_device(o.device)
    min_steady, max_steady = o.steady_range
    check_compile(o.compile)
    run = o.run if o.run is not None else RunContext()

    kind = devices.of(dev)
    say("set-up: the model to the device and its inputs (instruments on)")
    model, (args, kwargs, input_desc), setup = _setup(torch, model, kind, dev, o)
    undo.callback(forget_as_made, args, kwargs)  # the inputs' copies as made (put back after each pass) go
    input_shapes = _input_shapes(args, kwargs) if o.inputs is not None else None
    if input_shapes is not None:
        input_desc = f"{input_desc}: {inputs_label(input_shapes)}"
    compiled = o.compiled
    warm = _warm_reasons(model, compiled)
    # read before any pass: /proc and the affinity mask, nothing that warms the runtime
    crowded = oversubscription(torch.get_num_threads()) if kind.host else ""
    gen = None
    if o.generate is not None:  # the call is one generation, its steps stamped (traces/generate.py)
        from .generate import Generation

        gen = undo.enter_context(Generation(model, o.generate, o.compile, o.kv_cache))
        runner, hooked, per_pass = gen, model, 1
    else:
        runner = compile_model(model, o.compile)
        hooked = runner
        per_pass = calls_per_pass(o.compile, dev)  # cudagraph trees: a pass is calls 1+2 (warm-up, record)
    sync = kind.sync(dev)
    call = repeated(runner, per_pass)

    instruments = passes.instruments(hooked, dev, compiled, o.op_view)
    grad_ctx = torch.no_grad() if o.no_grad else contextlib.nullcontext()

    windows: dict[str, tuple[int, int]] = {}
    skips_before = cudagraph_skips() if per_pass > 1 else 0
    with grad_ctx:
        with Recording(spare_buffers=passes.SPARE_BUFFERS) as rec:
            with contextlib.ExitStack() as stack:
                for inst in instruments:
                    stack.enter_context(inst)
                say("first pass" + (" (includes torch.compile: seconds to minutes)" if compiled else ""))
                try:
                    windows["first"] = passes.guarded_pass(call, args, kwargs, "first", instruments, sync,
                                                           "on the first pass")
                except ModelError as e:  # a dtype mismatch says which way, and what to pass
                    hint = dtype_mismatch_hint(model, args, kwargs, o.dtype, o.model_dtype, e.__cause__,
                                               own_inputs=o.inputs is not None)
                    if not hint:
                        raise
                    raise ModelError(f"{e}; {hint}") from e.__cause__
                gen_first = gen.take() if gen is not None else []
                say("seen-shape re-run")
                windows["seen_rerun"] = passes.guarded_pass(call, args, kwargs, "seen_rerun", instruments, sync,
                                                            "on the second pass (seen-shape re-run)")
            timeline = rec.drain()
        skipped = cudagraph_skips() - skips_before if per_pass > 1 else 0
        if gen is not None:
            gen.take()  # the seen re-run's
        say("steady passes")
        try:
            steady_ms, steady_faults, steady_waits, steady_blocked = passes.steady(
                call, args, kwargs, sync, min_steady, max_steady, o.steady_budget_s)
        except (Exception, SystemExit) as e:  # sys.exit in the model's code is the model's error too
            raise ModelError(f"the model raised during the steady passes: {type(e).__name__}: {e}") from e
        gen_steady = gen.take() if gen is not None else []
        clean = steady_stats(steady_ms)
        # the clean passes net of their waits for a CPU: what warmprof's own cost is measured against
        steady_net = [t - w for t, w in zip(steady_ms, steady_waits)] if steady_waits else steady_ms
        clean_net = steady_stats(steady_net)
        so_far_s = time.monotonic() - started
        self_cost_passes, too_long = passes.self_cost_plan(clean.median, min_steady, max_steady, so_far_s)
        instrumented_ms: list[float]
        module_calls: dict[str, int]
        instrumented_ms, module_calls, warm_baseline = [], {}, None
        if controls.in_warm_control():  # the control process's warm control: the trace measures this
            self_cost_skipped = "warm control: warmprof's own cost per steady pass is measured by the trace itself"
        elif too_long:
            self_cost_skipped = too_long
        else:
            self_cost_skipped = ""
            say("steady passes with the instruments on (warmprof's own cost on this model)")
            try:
                instrumented_ms, module_calls, warm_tl, warm_window = passes.instrumented_steady(
                    runner, args, kwargs, dev, compiled, o.op_view, sync, self_cost_passes,
                    passes.SELF_COST_SHARE * so_far_s, call, hooked)
                warm_baseline = (warm_tl, warm_window) if o.op_view else None
            except WarmprofError:
                raise
            except (Exception, SystemExit) as e:
                raise ModelError(f"the model raised during the instrumented steady passes: {type(e).__name__}: {e}") from e

    try:
        _traced_models.add(getattr(model, "_orig_mod", model))
    except TypeError:
        pass
    # Calibration runs after the passes: it starts threads, faults fresh pages and calls a torch
    # module, any of which would warm what the first pass is there to measure cold.
    say("calibrating (timer, page-fault cost, thread start, hook cost)")
    costs = calibration.measure(touched_bytes=calibration.largest_anonymous_growth(timeline))
    cal = costs.for_attribution()
    ctl = controls.current()
    if ctl is not None and ctl.clean is not None:
        say("warm control (the second fresh process: the same instrumented passes on the model already warm)")
        ctl.run_warm(costs.to_dict(), controls.PHASE_MARGIN_S + controls.PHASE_FACTOR * (time.monotonic() - started))
    op_view_cold: dict[str, Any] = {}
    ops_inst = next((i for i in instruments if i.name == "aten_ops" and i.available), None)
    if ops_inst is not None:
        op_view_cold = ops_inst.cold_dispatch_cost({c[0] for c in ops_inst.calls.get("first", [])})
        cal = dataclasses.replace(cal, op_view_cold_ns=op_view_cold["ns"])
    say("attributing")
    clean_low = (quantile(steady_net, 1.0 / (len(instrumented_ms) + 1))
                 if steady_net and instrumented_ms else None)
    own_cost = (InstrumentCost(tuple(instrumented_ms), clean_net.median, clean_net.noise_band * 1e6, module_calls,
                               clean_low)
                if instrumented_ms else None)
    steady_wait_ns = median(steady_waits) * 1e6 if steady_waits else 0.0
    steady_off_ns = median(steady_blocked) if steady_blocked else 0.0
    first, rerun = (
        attribute_pass(timeline, name, calibration=cal,
                       steady_faults=steady_fault_median(steady_faults), steady_run_delay_ns=steady_wait_ns,
                       steady_off_cpu_ns=steady_off_ns,
                       inferred=[e for i in instruments for e in i.inferred(name)],
                       evidence={src: ev for i in instruments for src, ev in i.span_evidence.items()},
                       window=windows[name], instrument_cost=own_cost)
        for name in passes.PASSES
    )
    # `warmprof trace`'s child recorded the cold start before the model reached here (commands/trace.py)
    setup_att = merged(cold_start.attribute(cal) if cold_start is not None else None, setup.attribute(cal))
    # The op view's warm baseline: the fastest instrumented steady pass, attributed like the re-run,
    # so what the re-run still paid over a warm pass is placed by (module, op) too.
    warm_pass = (attribute_pass(warm_baseline[0], passes.INSTRUMENTED_STEADY, calibration=cal, steady_faults=0,
                                steady_run_delay_ns=steady_wait_ns, steady_off_cpu_ns=steady_off_ns,
                                window=warm_baseline[1], instrument_cost=own_cost)
                 if warm_baseline is not None else None)
    report = build_report(TraceFacts(
        model=o.label or type(getattr(model, "_orig_mod", model)).__name__,
        shape=_shape_of(args[0]) if args else None,  # also for inputs=: the first input's, when it has a plain one
        dtype=_dtype_of(args, kwargs),
        device=str(dev),
        compile=compile_label(o.compile),
        input_desc=input_desc,
        inputs=input_shapes,
        first=first,
        rerun=rerun,
        steady_ms=steady_ms,
        steady_faults=steady_faults,
        steady_run_delay_ms=steady_waits,
        instrumented_steady_ms=instrumented_ms,
        timeline=timeline,
        instruments=[InstrumentSummary(i.name, i.summary(), list(i.notes), i.reason) for i in instruments],
        calibration={**costs.to_dict(), **({"op_view_cold_dispatch": op_view_cold} if op_view_cold else {})},
        warm_reasons=warm,
        protocol_notes=([self_cost_skipped] if self_cost_skipped else [])
        + ([CUDAGRAPH_NOTE.format(mode=compile_label(o.compile), n=per_pass)] if per_pass > 1 else [])
        + ([skips_note(skipped)] if skipped > 0 else [])
        + [n for n in [input_change_note(args, kwargs)] if n],
        calls_per_pass=per_pass,
        setup=setup_att,
        platform=fingerprint(gpu_index=cuda_index(str(dev))),
        run=run,
        op_call=ops_inst.call if ops_inst is not None else None,
        op_firsts=ops_inst.firsts("first") if ops_inst is not None else None,
        warm_pass=warm_pass,
        oversubscription=crowded,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        settings=trace_settings(torch, model, device=str(dev), compile=compile_label(o.compile),
                                input_dtype=_dtype_of(args, kwargs), input_shape=_shape_of(args[0]) if args else None,
                                inputs=input_shapes, op_view=o.op_view, steady=(min_steady, max_steady),
                                steady_budget_s=o.steady_budget_s, no_grad=o.no_grad, model_cast=o.model_dtype,
                                run=run),
    ))
    if gen is not None:
        if gen_first:
            report.generate = _generate_section(gen, gen_first[0], gen_steady, timeline, cal, instruments,
                                                steady_wait_ns, steady_off_ns, args)
    return report


def _generate_section(gen: Any, first: Any, steady: list, timeline: Timeline, cal: Any, instruments: list,
                      steady_wait_ns: float, steady_off_ns: float, args: tuple) -> dict[str, Any]:
    """The report's `generate` (traces/generate.py): each phase of the first call attributed over its
    own window of the first pass's timeline, against the steady calls' same phase. A phase's share of
    the steady run delay and off-CPU time is its share of the steady call (estimated); its page faults
    are its own steady median (measured at the step hook); the instruments' inferred figures are the
    whole pass's and stay out of the phases."""
    from ..causes import Name
    from .build import _entries
    from .generate import section, steady_phase_faults, steady_phase_ms

    faults = steady_phase_faults(steady)
    call_ms = median([(c.t1 - c.t0) / 1e6 for c in steady]) if steady else 0.0
    phase_steady = {p: ms for p, (ms, _) in steady_phase_ms(steady).items()}
    evidence = {src: ev for i in instruments for src, ev in i.span_evidence.items()}

    def causes_of(phase: str, window: tuple[int, int], excess_ms: float) -> list:
        share = phase_steady.get(phase, 0.0) / call_ms if call_ms > 0 else 0.0
        att = attribute_pass(timeline, "first", calibration=cal, steady_faults=faults.get(phase, 0.0),
                             steady_run_delay_ns=steady_wait_ns * share, steady_off_cpu_ns=steady_off_ns * share,
                             evidence=evidence, window=window)
        return [e for e in _entries(att, excess_ms) if e.cause != Name.UNATTRIBUTED]

    prompt = _shape_of(args[0]) if args else None
    return section(first, steady, gen.steps, gen.kv_cache, gen.hooked, causes_of,
                   prompt[-1] if prompt else None)

def _setup(torch: Any, model: Any, kind: Any, dev: Any, o: TraceOptions) -> tuple[Any, tuple[tuple, dict, str], SetupRun]:
    """The set-up before the first pass, timed with the set-up instruments on (traces/setup_phase.py):
    the model moved to the device (not on the host: models stay put there), cast, and its inputs
    made. Returns the model, make_inputs' (args, kwargs, description) and the set-up's record."""
    got: dict[str, Any] = {"model": model}

    def to_device() -> None:
        got["model"] = got["model"].to(dev)

    def cast() -> None:
        got["model"] = cast_model(got["model"], o.model_dtype)

    def make() -> None:
        got["inputs"] = make_inputs(got["model"], o.shape, o.dtype, o.inputs, dev)

    moves = not kind.host and isinstance(model, torch.nn.Module)
    steps = (([(f"model.to({dev})", to_device)] if moves else [])
             + ([("model cast", cast)] if o.model_dtype is not None else []) + [("inputs", make)])
    record = run_setup(kind, dev, steps)
    return got["model"], got["inputs"], record


__all__ = ["trace"]

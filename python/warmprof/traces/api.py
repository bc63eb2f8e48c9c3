"""warmprof.trace: the trace protocol (ARCHITECTURE.md, method).

first pass (all instruments) -> seen-shape re-run (instruments on) -> steady passes (clean, timed)
-> a few steady passes with every instrument on again (warmprof's own cost on this model)
-> calibrate (once per process) -> attribution (pure) -> Report (build.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import math
import sys
import time
import weakref
from typing import Any

import numpy as np

from .. import _native, devices
from ..attribution import InstrumentCost, attribute_pass, steady_stats
from ..errors import InputError, ModelError, WarmprofError
from ..instruments.host import HostCounters, blocked_ns, thread_times
from ..instruments.modules import ModuleHooks
from ..instruments.python_imports import PythonImports
from ..report import Report
from ..report.trace import RunContext, inputs_label
from ..stats import median, quantile
from ..system.platform import cuda_index, fingerprint, oversubscription
from ..system.process_state import ProcessState
from ..system.progress import progress_printer
from ..timeline import (
    BEGIN,
    STRUCTURE,
    Recording,
    Timeline,
    begin,
    begin_section,
    end,
    name_id,
)
from . import calibrate as calibration
from . import controls
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
    make_inputs,
    parse_device,
    parse_model_dtype,
)
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


MAX_STEADY = 100_000  # steady passes at most (the native pass budget takes a signed 64-bit count)


def _parse_steady(steady: Any) -> tuple[int, int]:
    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if count(steady):
        pair = (steady, steady)
    elif isinstance(steady, (tuple, list)) and len(steady) == 2 and all(count(v) for v in steady):
        pair = (steady[0], steady[1])
    else:
        pair = None
    if pair is None or pair[0] < 1 or pair[1] < pair[0] or pair[1] > MAX_STEADY:
        raise InputError(f"steady must be a positive int N or a (min, max) pair of ints with 1 <= min <= max "
                         f"<= {MAX_STEADY:,}, got {steady!r}")
    return pair


def _instruments(model: Any, device, compiled: bool, op_view: bool = False) -> list:
    from ..instruments.device_set import device_instruments
    from ..instruments.torch_compile import TorchCompile

    inst = [HostCounters(), ModuleHooks(model, top_level_only=compiled), PythonImports()]
    if op_view:
        from ..instruments.aten_ops import AtenOps

        inst.append(AtenOps(compiled=compiled))
    # Also when the model compiles something inside itself (dynamo already imported).
    if compiled or "torch._dynamo" in sys.modules:
        inst.append(TorchCompile())
    kind = devices.of(device)
    options = {"device": device, "model": model, "compiled": compiled, "compile_band_ms": _metal_compile_band}
    try:
        inst.extend(device_instruments(kind, options))
    except ImportError as e:  # pragma: no cover - the kind's instruments not built in
        inst[0].notes.append(f"{kind.label} instruments unavailable: {e}")
    return inst


def _metal_compile_band() -> tuple[float, float] | None:
    """The Metal pipeline compile measured on this machine by the native reference probe (low,
    high ms), for the MPS instruments' inferred compile; None where it cannot run."""
    from ..probes.metal_ref import compile_band_ms

    return compile_band_ms()


PASSES = ("first", "seen_rerun")  # the instrumented passes, in order
SPARE_BUFFERS = 4  # recording buffers pre-faulted for threads that start recording inside a pass
# Steady passes with every instrument on, after the clean ones: the fastest of them against the clean
# passes is the instruments' cost per pass on this model (attribution.instrument_cost). At least the first
# figure, at most the second, after one more that is not counted (fresh hooks, pipe and recorder
# pages warm up on it, as the first pass's did before the seen re-run); past the minimum they stop
# once they have taken SELF_COST_SHARE of the trace's time so far.
INSTRUMENTED_STEADY = "instrumented_steady"
SELF_COST_PASSES = (3, 15)  # many on a fast model: the fastest of few is rarely undisturbed on a busy machine
SELF_COST_SHARE = 0.1
SELF_COST_FLOOR_S = 0.01  # instrumented passes of a fast model: at least as many as take this long
# The instrumented steady passes are skipped (the calibrated figures stand) when their minimum would
# add more than this share to the trace's time so far: a model whose one pass takes seconds.
SELF_COST_MAX_SHARE = 0.2
# ...but never when they would take less than this: on a busy machine a model's steady median can
# jump many times over (its threads share cores with others) while the trace so far did not.
SELF_COST_ALWAYS_S = 2.0


def _run_pass(model, args, kwargs, pass_name: str, instruments: list, sync,
              sections_left: int | None = None) -> tuple[int, int]:
    """One instrumented pass; returns its own clock reads (start_ns, end_ns), which give the pass
    time whatever the recorder kept. Each pass gets its own share of the recorder's module budget:
    1/sections_left of what is left (by default, PASSES says how many passes follow this one)."""
    nid = name_id(f"pass:{pass_name}")
    if sections_left is None:
        sections_left = len(PASSES) - PASSES.index(pass_name) if pass_name in PASSES else 1
    begin_section(sections_left)
    for i in instruments:
        i.mark_pass(pass_name)
    begin(STRUCTURE, nid)
    t0 = _native.now_ns()
    try:
        out = model(*args, **kwargs)
        for i in instruments:
            i.before_sync(pass_name)
        sync()
    finally:
        t1 = _native.now_ns()
        end(STRUCTURE, nid)
        for i in instruments:
            i.end_pass(pass_name)
    _check_output(out)
    return t0, t1


def _check_output(out: Any) -> None:
    """A forward that returns a generator or a coroutine ran nothing yet: refuse, do not time it."""
    import inspect

    lazy = inspect.isgenerator(out) or inspect.iscoroutine(out) or inspect.isasyncgen(out)
    if not lazy:
        return
    with contextlib.suppress(Exception):
        out.close()  # no "never awaited" warning; nothing of the model's runs
    kind = "a coroutine" if inspect.iscoroutine(out) else "a generator"
    raise InputError(f"the model returned {kind}: nothing ran inside the pass, so there is nothing to time. "
                     "Trace a callable that does the work, e.g. lambda x: list(model(x))")


def _run_delay_ns() -> int | None:
    """This thread's run-queue delay so far (schedstat), None where the kernel has none."""
    got = _native.thread_schedstat()
    return None if got is None else got[1]


def _waited_ms(d0: int | None, d1: int | None, wall_ns: int, cpu_ns: int) -> float | None:
    """A window's wait for a CPU (schedstat delta), at most the window's wall time less its thread's
    CPU time: the kernel adds a delay when the thread next gets a CPU, so a delta can hold one from
    before the window (on a busy machine, many ms more than the window itself)."""
    if d0 is None or d1 is None:
        return None
    return min(max(0, d1 - d0), max(0, wall_ns - cpu_ns)) / 1e6


def _steady(model, args, kwargs, sync, min_passes: int, max_passes: int,
            budget_s: float) -> tuple[list[float], list[int], list[float], list[float]]:
    """Clean steady passes: each one's time (ms), page faults, and the time its thread waited for a
    CPU (ms, schedstat run-queue delay; the list is empty where the kernel has no schedstat), and the
    ns it was blocked off the CPU (empty where that is not read)."""
    times: list[float]
    times, faults, waits, blocked = [], [], [], []
    deadline = time.monotonic() + budget_s
    while len(times) < max_passes:
        f0 = sum(_native.faults())
        d0, c0 = _run_delay_ns(), time.thread_time_ns()
        o0 = thread_times()
        t0 = _native.now_ns()
        model(*args, **kwargs)
        sync()
        t1 = _native.now_ns()
        o1 = thread_times()
        d1, c1 = _run_delay_ns(), time.thread_time_ns()
        blocked.append(blocked_ns(o0, o1))
        faults.append(sum(_native.faults()) - f0)
        times.append((t1 - t0) / 1e6)
        waited = _waited_ms(d0, d1, t1 - t0, c1 - c0)
        if waited is not None:
            waits.append(waited)
        if len(times) >= min_passes and time.monotonic() > deadline:
            break
    return times, faults, waits if len(waits) == len(times) else [], [b for b in blocked if b is not None]


def _instrumented_steady(runner, args, kwargs, dev, compiled: bool, op_view: bool, sync, passes: tuple[int, int],
                         budget_s: float, call: Any = None,
                         hooked: Any = None) -> tuple[list[float], dict[str, int], Timeline, tuple[int, int]]:
    """Steady passes with every instrument on, set up afresh exactly as for the first pass (hooks,
    oneDNN's verbose capture, samplers, imports, CUDA callbacks) in a recording of their own, so
    nothing of theirs reaches the first pass's timeline or the clean steady statistics. Returns
    each counted pass's time (ms, its own clock reads), each module's calls per pass (their mean), the
    recording and the fastest counted pass's window (the op view's warm baseline per site). Times are
    net of each pass's wait for a CPU (schedstat run-queue delay; none where the kernel has none).
    The first pass is run and not counted: it warms the fresh instruments. `call`: what one pass
    calls (runner by default; runner called twice under cudagraph trees); `hooked`: what the instruments
    hook (runner by default; the model under a generate trace's runner)."""
    call = runner if call is None else call
    least, most = passes[0] + 1, passes[1] + 1
    instruments = _instruments(runner if hooked is None else hooked, dev, compiled, op_view)
    windows: list[tuple[int, int]] = []
    waits: list[float] = []
    deadline = time.monotonic() + budget_s
    with Recording(spare_buffers=SPARE_BUFFERS) as rec:
        with contextlib.ExitStack() as stack:
            for inst in instruments:
                stack.enter_context(inst)
            while len(windows) < most:
                d0, c0 = _run_delay_ns(), time.thread_time_ns()
                windows.append(_run_pass(call, args, kwargs, INSTRUMENTED_STEADY, instruments, sync,
                                         most - len(windows)))
                d1, c1 = _run_delay_ns(), time.thread_time_ns()
                t0, t1 = windows[-1]
                waits.append(_waited_ms(d0, d1, t1 - t0, c1 - c0) or 0.0)
                if len(windows) >= least and time.monotonic() > deadline:
                    break
        timeline = rec.drain()
    counted = windows[1:]
    # Net of each pass's wait for a CPU, as the clean passes they are compared with: contention is
    # the machine's, not the instruments' cost.
    net = [(t1 - t0) / 1e6 - w for (t0, t1), w in zip(counted, waits[1:])]
    fastest = counted[min(range(len(counted)), key=lambda k: net[k])]
    return net, _module_calls(timeline, counted), timeline, fastest


def _module_calls(tl: Timeline, windows: list[tuple[int, int]]) -> dict[str, int]:
    """Each module's recorded calls per pass (mean over the windows, rounded) on the passes' thread."""
    ids = np.asarray([i for i, n in enumerate(tl.names) if n.startswith("module:")], dtype=np.int64)
    pass_ids = [i for i, n in enumerate(tl.names) if n == f"pass:{INSTRUMENTED_STEADY}"]
    if not ids.size or not windows or len(tl) == 0:
        return {}
    begins = (tl.kind == BEGIN) & np.isin(tl.name, ids)
    on_pass = (tl.kind == BEGIN) & np.isin(tl.name, pass_ids)
    if on_pass.any():  # the thread that ran the passes: other threads' module calls overlap them
        begins &= tl.thread == tl.thread[on_pass][0]
    inside = np.zeros(len(tl), dtype=bool)
    for t0, t1 in windows:
        inside |= (tl.ts_ns >= t0) & (tl.ts_ns <= t1)
    names, counts = np.unique(tl.name[begins & inside], return_counts=True)
    return {tl.names[int(n)][len("module:"):]: max(1, round(int(c) / len(windows)))
            for n, c in zip(names.tolist(), counts.tolist())}


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


def trace(
    model: Any,
    shape: Any = None,
    *,
    inputs: Any = None,
    dtype: Any = None,
    model_dtype: Any = None,
    device: Any = "cpu",
    steady: int | tuple[int, int] = (5, 50),
    steady_budget_s: float = 3.0,
    compile: Any = None,
    progress: Any = False,
    no_grad: bool = True,
    label: str | None = None,
    run: RunContext | None = None,
    op_view: bool = False,
    explain: bool = False,
    explain_top: int = 8,
    repeat: int = 1,
    generate: int | None = None,
    kv_cache: str | None = None,
    _cold_start: Any = None,
) -> Report:
    """Trace the first pass of `model` and attribute its excess over a steady pass to causes.

    model: an nn.Module or any callable. shape: a tuple for a synthetic input (token ids when the
    model starts with an embedding or dtype is an integer type, else randn); dtype: that input's
    dtype (the input only). inputs: the caller's tensors, a tuple/dict of them, or a callable that
    makes them (used as they are; their shapes are recorded in the report's `inputs`). model_dtype:
    cast the model's floating parameters and buffers first (in place, as nn.Module.to; float32,
    bfloat16, float16, float64). progress: False (default, as for probe()), True (lines on stderr)
    or a callable taking one line. compile: None, True, a mode
    ("reduce-overhead", "max-autotune") or a dict of torch.compile options. steady: the number of
    clean passes (an int, or (min, max) adaptive within steady_budget_s seconds). run: where the
    trace runs, for the report (`warmprof trace`'s fresh child passes its own); None is the
    caller's process, which the report's notes then say. op_view: a span per aten op in the first
    pass and the seen re-run (torch's profiler's op events: 1-2 us per op, measured and booked as
    profiler_overhead), so unattributed_where gives (module, op) rows with each site's first call's
    arguments, which `warmprof probe --from` replays. explain: op_view, then the explain_top ops
    holding the most unexplained time probed in fresh processes (seconds each) and their verdicts
    folded in as inferred causes with source "probe" (traces/explain.py). repeat: N > 1 runs the
    trace N times, each in a fresh process, and returns one RepeatReport (every run, and each cause's
    median and min-max over them); a first pass happens once per process, so the model must then be
    named, as `warmprof trace` takes it: "MODULE:FACTORY", "path/to/file.py:FACTORY" or "demo"
    (traces/repeat.py). A named model with repeat=1 is one trace in a fresh process (its Report).
    generate: N new tokens: the traced call is model.generate(ids, max_new_tokens=N, min_new_tokens=N,
    do_sample=False) (a callable without .generate: model(ids, N)), split by the model's forward calls
    into prefill (TTFT), first decode step and the rest, each against its steady counterpart with its own
    causes (the report's `generate`; traces/generate.py). kv_cache: "static" passes
    cache_implementation="static" to generate (one shape per decode step: no recompile per length).
    _cold_start: `warmprof trace`'s own child only (the cold start it recorded before the model
    existed: importing torch, the factory's module, the factory; a setup_phase.SetupRun).

    One trace runs at a time in a process: a second one (from another thread) is refused up front.
    """
    try:
        import torch
    except ImportError:
        raise WarmprofError("warmprof.trace needs torch: pip install 'warmprof[torch]'") from None
    _check_options(steady_budget_s, progress, no_grad, label, run)
    if generate is not None or kv_cache is not None:
        from .generate import check_generate

        if isinstance(repeat, bool) or repeat != 1 or isinstance(model, str):
            raise InputError("generate= traces a model object in this process; for a named model in fresh processes "
                             "use the command line: warmprof trace MODULE:FACTORY --shape 1,L --generate N")
        generate = check_generate(generate, kv_cache, model)
        if op_view or explain:
            raise InputError("generate does not go with op_view or explain: the op view is of one forward; trace the "
                             "model's forward at the prompt's shape for it")
    if isinstance(repeat, bool) or repeat != 1 or isinstance(model, str):
        if not no_grad or steady_budget_s != 3.0 or run is not None:
            raise InputError("a named model is traced as `warmprof trace` traces it (fresh processes, no_grad, its "
                             "steady budget): no_grad=False, steady_budget_s and run= do not go with it")
        got = _repeated(model, shape, repeat, inputs=inputs, dtype=dtype, model_dtype=model_dtype, device=device,
                        steady=steady, compile=compile, progress=progress, op_view=op_view, explain=explain)
        if label:
            got.model = label
            for r in got.runs:
                r.model = label
        return got.runs[0] if repeat == 1 and not got.failed else got
    model_dt = parse_model_dtype(model_dtype)
    if not isinstance(op_view, bool):
        raise InputError(f"op_view must be True or False, got {op_view!r}")
    if not isinstance(explain, bool):
        raise InputError(f"explain must be True or False, got {explain!r}")
    if isinstance(explain_top, bool) or not isinstance(explain_top, int) or not 1 <= explain_top <= 100:
        raise InputError(f"explain_top must be an integer from 1 to 100, got {explain_top!r}")
    if explain and compile not in (None, False):
        raise InputError("explain is for eager models: a compiled model gets no op view (its first pass is explained "
                         "by the compile's own spans); drop explain or compile")
    if not calibration.busy.acquire(blocking=False):
        raise InputError("another warmprof trace or calibration is already running in this process (from another "
                         "thread, or this call comes from inside a trace): they share the recorder, so run them "
                         "one after another")
    try:
        before = ProcessState.take()
        report = _trace(torch, model, shape, inputs=inputs, dtype=dtype, device=device, steady=steady,
                        steady_budget_s=steady_budget_s, compile=compile, progress=progress, no_grad=no_grad,
                        label=label, run=run if run is not None else RunContext(), op_view=op_view or explain,
                        model_dtype=model_dt, cold_start=_cold_start, generate=generate, kv_cache=kv_cache)
        report.notes.extend(before.changes_since())
        controls.fold_controls(report)  # the headline and the model's causes, warmprof's own cost apart
        if model_dt is not None:
            report.notes.append(f"the model's floating parameters and buffers were cast to "
                                f"{str(model_dt).removeprefix('torch.')} before the trace (model_dtype=, --model-dtype); "
                                "the model stays cast")
    finally:
        calibration.busy.release()
    if explain:
        from .explain import explain_report

        progress_printer(progress)("probing the ops that hold the most unexplained time (fresh processes)")
        explain_report(report, top=explain_top, threads=torch.get_num_threads(), device=report.device,
                       progress=progress)
    return report


def _repeated(model: Any, shape: Any, repeat: Any, *, inputs: Any, dtype: Any, model_dtype: Any, device: Any,
              steady: Any, compile: Any, progress: Any, op_view: bool, explain: bool) -> Any:
    """trace(..., repeat=N): N fresh processes of `warmprof trace`, the model given by name."""
    from .repeat import check_repeat, trace_repeat

    check_repeat(repeat)
    if not isinstance(model, str):
        raise InputError(f"repeat={repeat} runs each trace in a fresh process, where a model object cannot follow: "
                         "name the model as `warmprof trace` takes it ('pkg.module:factory', 'path/to/file.py:factory' "
                         "or 'demo'), or call warmprof.trace() once per fresh process yourself")
    if explain:
        raise InputError("repeat does not go with explain: explain one run, on a run the repeats show typical")
    if inputs is not None and not isinstance(inputs, str):
        raise InputError("with repeat, inputs are named too: a FILE.pt saved with torch.save, or 'MODULE:FACTORY'")
    if compile is True:
        compile = "default"
    if compile not in (None, False) and not isinstance(compile, str):
        raise InputError("with repeat, compile is a mode name (the command line's --compile MODE), not options")
    if not (isinstance(steady, int) and not isinstance(steady, bool)) and tuple(steady) != (5, 50):
        raise InputError("with repeat, steady is a whole number of passes (the command line's --steady N), or left "
                         "at its default")
    return trace_repeat(model, shape, repeat=repeat, progress=progress, inputs=inputs, dtype=dtype,
                        model_dtype=model_dtype, device=str(device), compile=compile or None, op_view=op_view,
                        steady=steady if isinstance(steady, int) and not isinstance(steady, bool) else None)


def _check_options(steady_budget_s: Any, progress: Any, no_grad: Any, label: Any, run: Any) -> None:
    """Refuse wrongly typed options before anything runs (not later, blamed on the model)."""
    if (isinstance(steady_budget_s, bool) or not isinstance(steady_budget_s, (int, float))
            or not math.isfinite(steady_budget_s) or steady_budget_s < 0):
        raise InputError(f"steady_budget_s must be a non-negative number of seconds, got {steady_budget_s!r}")
    if not (isinstance(progress, bool) or progress is None or callable(progress)):
        raise InputError(f"progress must be True, False or a callable taking a message, got {progress!r}")
    if not isinstance(no_grad, bool):
        raise InputError(f"no_grad must be True or False, got {no_grad!r}")
    if label is not None and (not isinstance(label, str) or not label.strip()):
        raise InputError(f"label must be a non-empty string (the model's name in the report), got {label!r}")
    if run is not None and not isinstance(run, RunContext):
        raise InputError(f"run must be a warmprof.report.trace.RunContext or None, got {run!r}")


def _trace(torch: Any, model: Any, shape: Any, *, inputs: Any, dtype: Any, device: Any, steady: Any,
           steady_budget_s: float, compile: Any, progress: Any, no_grad: bool, label: str | None,
           run: RunContext, op_view: bool = False, model_dtype: Any = None, cold_start: Any = None,
           generate: int | None = None, kv_cache: str | None = None) -> Report:
    # what the trace puts in place on the model for itself (generate's step hook, its compiled
    # forward) comes off whatever happens
    with contextlib.ExitStack() as undo:
        return _traced(torch, model, shape, inputs=inputs, dtype=dtype, device=device, steady=steady,
                       steady_budget_s=steady_budget_s, compile=compile, progress=progress, no_grad=no_grad,
                       label=label, run=run, op_view=op_view, model_dtype=model_dtype, cold_start=cold_start,
                       generate=generate, kv_cache=kv_cache, undo=undo)


def _traced(torch: Any, model: Any, shape: Any, *, inputs: Any, dtype: Any, device: Any, steady: Any,
            steady_budget_s: float, compile: Any, progress: Any, no_grad: bool, label: str | None,
            run: RunContext, op_view: bool, model_dtype: Any, cold_start: Any,
            generate: int | None, kv_cache: str | None, undo: contextlib.ExitStack) -> Report:
    say = progress_printer(progress)
    started = time.monotonic()
    check_model(model)
    dev = parse_device(device)
    min_steady, max_steady = _parse_steady(steady)
    check_compile(compile)

    kind = devices.of(dev)
    say("set-up: the model to the device and its inputs (instruments on)")
    model, (args, kwargs, input_desc), setup = _setup(torch, model, kind, dev, shape, dtype, inputs, model_dtype)
    input_shapes = _input_shapes(args, kwargs) if inputs is not None else None
    if input_shapes is not None:
        input_desc = f"{input_desc}: {inputs_label(input_shapes)}"
    compiled = compile not in (None, False)
    warm = _warm_reasons(model, compiled)
    # read before any pass: /proc and the affinity mask, nothing that warms the runtime
    crowded = oversubscription(torch.get_num_threads()) if kind.host else ""
    gen = None
    if generate is not None:  # the call is one generation, its steps stamped (traces/generate.py)
        from .generate import Generation

        gen = undo.enter_context(Generation(model, generate, compile, kv_cache))
        runner, hooked, per_pass = gen, model, 1
    else:
        runner = compile_model(model, compile)
        hooked = runner
        per_pass = calls_per_pass(compile, dev)  # cudagraph trees: a pass is calls 1+2 (warm-up, record)
    sync = kind.sync(dev)
    call = repeated(runner, per_pass)

    instruments = _instruments(hooked, dev, compiled, op_view)
    grad_ctx = torch.no_grad() if no_grad else contextlib.nullcontext()

    windows: dict[str, tuple[int, int]] = {}
    skips_before = cudagraph_skips() if per_pass > 1 else 0
    with grad_ctx:
        with Recording(spare_buffers=SPARE_BUFFERS) as rec:
            with contextlib.ExitStack() as stack:
                for inst in instruments:
                    stack.enter_context(inst)
                say("first pass" + (" (includes torch.compile: seconds to minutes)" if compiled else ""))
                try:
                    windows["first"] = _guarded_pass(call, args, kwargs, "first", instruments, sync,
                                                     "on the first pass")
                except ModelError as e:  # a dtype mismatch says which way, and what to pass
                    hint = dtype_mismatch_hint(model, args, kwargs, dtype, model_dtype, e.__cause__,
                                               own_inputs=inputs is not None)
                    if not hint:
                        raise
                    raise ModelError(f"{e}; {hint}") from e.__cause__
                gen_first = gen.take() if gen is not None else []
                say("seen-shape re-run")
                windows["seen_rerun"] = _guarded_pass(call, args, kwargs, "seen_rerun", instruments, sync,
                                                      "on the second pass (seen-shape re-run)")
            timeline = rec.drain()
        skipped = cudagraph_skips() - skips_before if per_pass > 1 else 0
        if gen is not None:
            gen.take()  # the seen re-run's
        say("steady passes")
        try:
            steady_ms, steady_faults, steady_waits, steady_blocked = _steady(call, args, kwargs, sync, min_steady,
                                                                             max_steady, steady_budget_s)
        except (Exception, SystemExit) as e:  # sys.exit in the model's code is the model's error too
            raise ModelError(f"the model raised during the steady passes: {type(e).__name__}: {e}") from e
        gen_steady = gen.take() if gen is not None else []
        clean = steady_stats(steady_ms)
        # the clean passes net of their waits for a CPU: what warmprof's own cost is measured against
        steady_net = [t - w for t, w in zip(steady_ms, steady_waits)] if steady_waits else steady_ms
        clean_net = steady_stats(steady_net)
        # at least SELF_COST_PASSES[0], and as many as fit in SELF_COST_FLOOR_S (a fast model's fastest of
        # three is rarely undisturbed on a busy machine); never more than the clean steady passes
        least = max(SELF_COST_PASSES[0], min(SELF_COST_PASSES[1], math.ceil(SELF_COST_FLOOR_S / max(clean.median / 1e3, 1e-6))))
        passes = (min(least, min_steady), min(SELF_COST_PASSES[1], max_steady))
        least_s = (passes[0] + 1) * clean.median / 1e3
        so_far_s = time.monotonic() - started
        instrumented_ms: list[float]
        module_calls: dict[str, int]
        instrumented_ms, module_calls, warm_baseline = [], {}, None
        if controls.in_warm_control():  # the control process's warm control: the trace measures this
            self_cost_skipped = "warm control: warmprof's own cost per steady pass is measured by the trace itself"
        elif least_s > max(SELF_COST_MAX_SHARE * so_far_s, SELF_COST_ALWAYS_S):
            self_cost_skipped = (f"warmprof's own cost is the calibrated figures only: measuring it on this model "
                                 f"({passes[0] + 1} instrumented steady passes, about {least_s:.1f} s) would add more than "
                                 f"{SELF_COST_MAX_SHARE:.0%} to the trace's {so_far_s:.1f} s")
        else:
            self_cost_skipped = ""
            say("steady passes with the instruments on (warmprof's own cost on this model)")
            try:
                instrumented_ms, module_calls, warm_tl, warm_window = _instrumented_steady(
                    runner, args, kwargs, dev, compiled, op_view, sync, passes, SELF_COST_SHARE * so_far_s, call,
                    hooked)
                warm_baseline = (warm_tl, warm_window) if op_view else None
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
        for name in PASSES
    )
    # `warmprof trace`'s child recorded the cold start before the model reached here (commands/trace.py)
    setup_att = merged(cold_start.attribute(cal) if cold_start is not None else None, setup.attribute(cal))
    # The op view's warm baseline: the fastest instrumented steady pass, attributed like the re-run,
    # so what the re-run still paid over a warm pass is placed by (module, op) too.
    warm_pass = (attribute_pass(warm_baseline[0], INSTRUMENTED_STEADY, calibration=cal, steady_faults=0,
                                steady_run_delay_ns=steady_wait_ns, steady_off_cpu_ns=steady_off_ns,
                                window=warm_baseline[1], instrument_cost=own_cost)
                 if warm_baseline is not None else None)
    report = build_report(TraceFacts(
        model=label or type(getattr(model, "_orig_mod", model)).__name__,
        shape=_shape_of(args[0]) if args else None,  # also for inputs=: the first input's, when it has a plain one
        dtype=_dtype_of(args, kwargs),
        device=str(dev),
        compile=compile_label(compile),
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
        + ([CUDAGRAPH_NOTE.format(mode=compile_label(compile), n=per_pass)] if per_pass > 1 else [])
        + ([skips_note(skipped)] if skipped > 0 else []),
        calls_per_pass=per_pass,
        setup=setup_att,
        platform=fingerprint(gpu_index=cuda_index(str(dev))),
        run=run,
        op_call=ops_inst.call if ops_inst is not None else None,
        op_firsts=ops_inst.firsts("first") if ops_inst is not None else None,
        warm_pass=warm_pass,
        oversubscription=crowded,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        settings=trace_settings(torch, model, device=str(dev), compile=compile_label(compile),
                                input_dtype=_dtype_of(args, kwargs), input_shape=_shape_of(args[0]) if args else None,
                                inputs=input_shapes, op_view=op_view, steady=(min_steady, max_steady),
                                steady_budget_s=steady_budget_s, no_grad=no_grad, model_cast=model_dtype, run=run),
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

def _setup(torch: Any, model: Any, kind: Any, dev: Any, shape: Any, dtype: Any, inputs: Any,
           model_dtype: Any) -> tuple[Any, tuple[tuple, dict, str], SetupRun]:
    """The set-up before the first pass, timed with the set-up instruments on (traces/setup_phase.py):
    the model moved to the device (not on the host: models stay put there), cast, and its inputs
    made. Returns the model, make_inputs' (args, kwargs, description) and the set-up's record."""
    got: dict[str, Any] = {"model": model}

    def to_device() -> None:
        got["model"] = got["model"].to(dev)

    def cast() -> None:
        got["model"] = cast_model(got["model"], model_dtype)

    def make() -> None:
        got["inputs"] = make_inputs(got["model"], shape, dtype, inputs, dev)

    moves = not kind.host and isinstance(model, torch.nn.Module)
    steps = (([(f"model.to({dev})", to_device)] if moves else []) + ([("model cast", cast)] if model_dtype is not None else [])
             + [("inputs", make)])
    record = run_setup(kind, dev, steps)
    return got["model"], got["inputs"], record


def _guarded_pass(model, args, kwargs, pass_name: str, instruments: list, sync, when: str) -> tuple[int, int]:
    try:
        return _run_pass(model, args, kwargs, pass_name, instruments, sync)
    except WarmprofError:
        raise
    except (Exception, SystemExit) as e:  # sys.exit in the model's forward: its error, not the trace's exit
        raise ModelError(f"the model raised {when}: {type(e).__name__}: {e}") from e


__all__ = ["trace"]

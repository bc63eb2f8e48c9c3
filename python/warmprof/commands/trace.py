"""warmprof trace: trace a model's first pass, by default in a fresh subprocess.

A first pass is only a first pass once per process, so the command re-runs itself in a fresh
interpreter (with empty compile caches unless --cache keep) and that child does the trace
(commands/child.py: the caches, the status file, signals).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

from ..errors import InputError, TimedOut, WarmprofError
from ..report.trace import RunContext
from ..system.launch import option, positional, with_options
from ..system.output_paths import check_output_path, save_and_print
from ..traces import child, warm_process
from ..traces.targets import call_target, caller_folder, check_inputs_spec, load_inputs, load_target

__all__ = ["HELP", "NAME", "load_target", "run", "setup"]

# With a control, the headline's steady passes are the control's clean ones; this process's own serve
# its attribution (the instrumented excess, the noise band, the instruments' steady cost), for which a
# few tenths of a second of passes (at least 5) do.
STEADY_BUDGET_WITH_CONTROL_S = 0.25

NAME = "trace"
HELP = "Trace a model's first pass and attribute its excess over a steady pass to causes."


def setup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", help="MODULE:FACTORY or path/to/file.py:FACTORY returning the model")
    parser.add_argument("--demo", action="store_true", help="trace the built-in demo LM (warmprof.traces.demo, shape 1,128)")
    parser.add_argument("--shape", action="append",
                        help="input shape, e.g. 1,128 (token ids if the model starts with an embedding); one per "
                             "trace: run one trace per shape and compare the reports")
    parser.add_argument("--inputs", action="append", metavar="FILE.pt|MODULE:FACTORY",
                        help="the model's real inputs instead of --shape: a file saved with torch.save (a tensor, a "
                             "tuple/list of tensors = positional arguments, a dict = keyword arguments; loaded with "
                             "weights_only=True), or a factory returning one of those")
    parser.add_argument("--dtype", help="dtype of the random input --shape makes (float32, bfloat16, int64, ...); "
                                        "the model is not cast: see --model-dtype")
    parser.add_argument("--model-dtype", metavar="DTYPE",
                        help="cast the model's floating parameters and buffers first (float32, bfloat16, float16, "
                             "float64)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default cpu)")
    parser.add_argument("--compile", nargs="?", const="default", default=None, metavar="MODE",
                        help="wrap the model in torch.compile (optionally a mode: reduce-overhead, max-autotune)")
    parser.add_argument("--generate", type=int, default=None, metavar="N",
                        help="trace a generation of N new tokens (model.generate, greedy; a callable without it: "
                             "model(ids, N)): time to first token, the prefill, first decode step and the rest, "
                             "each first call against steady with its causes")
    parser.add_argument("--kv-cache", choices=("static",), default=None,
                        help="with --generate: generate(..., cache_implementation='static'), one shape per decode "
                             "step, so a compiled forward does not recompile per length (default: the model's own)")
    parser.add_argument("--json", metavar="PATH", help="also save the report as JSON")
    parser.add_argument("--steady", type=int, default=None, metavar="N", help="exactly N steady passes (default adaptive)")
    parser.add_argument("--threads", type=int, default=None, metavar="N", help="torch.set_num_threads(N) first")
    parser.add_argument("--in-process", action="store_true",
                        help="trace in this process (not a fresh one); earlier work here may have warmed the runtime")
    parser.add_argument("--cache", choices=("fresh", "keep"), default="fresh",
                        help="inductor/Triton/CUDA caches and the temp folder: fresh empty dirs, removed after "
                             "(a cold pod, default), or the user's own")
    parser.add_argument("--op-view", action="store_true",
                        help="a span per aten op: unexplained time by (module, op) with each op's shapes "
                             "(torch's profiler events, 1-2 us per op: measured on the model's instrumented passes, "
                             "warmprof's own cost, not the model's)")
    parser.add_argument("--explain", action="store_true",
                        help="--op-view, then the ops holding the most unexplained time probed in fresh processes; "
                             "what they show is folded in as inferred causes (a few seconds per op; with "
                             "--no-control, one more fresh process first that ran the model at another shape)")
    parser.add_argument("--explain-top", type=int, default=8, metavar="N",
                        help="ops probed by --explain (default 8, the largest first)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run the trace N times, each in a fresh process, into one report with each cause's "
                             "median and range over the runs (a busy or noisy machine: docs/busy-machines.md)")
    parser.add_argument("--no-control", action="store_true",
                        help="skip the control process (the model's first pass clean, in a second fresh process, and "
                             "warmprof's own first-pass cost on the model warm): faster, but the excess is the "
                             "instrumented pass's less an estimate of warmprof's own cost, which may stay in the causes")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="stop the trace (and every process it and the model started) after S seconds, with "
                             "exit code 124 and what it was doing; with --repeat, the runs finished by then are "
                             "the report (default: no limit)")
    # the control process of a fresh-process trace (traces/controls.py): its two pipe descriptors
    parser.add_argument("--control-fds", help=argparse.SUPPRESS)
    parser.add_argument("--warm-shape", metavar="SHAPE",
                        help="run the model once at SHAPE before the trace (in both fresh processes), as a server "
                             "that warmed up: follow the advice and see what is left (the same shape as --shape: a "
                             "warm-up at the served shape; another: what a process pays once whatever the shape)")
    parser.add_argument("--fresh-process", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--status-file", help=argparse.SUPPRESS)  # the parent's, for the child's phase


def _child_argv(args: argparse.Namespace) -> list[str]:
    """The traced process's command line: each value as --name=value and the target last, after `--`, so
    a value or a target that starts with '-' reaches it as one (child.run_child adds its status file)."""
    argv = ["trace"]
    for flag in ("demo", "quiet", "op_view", "explain", "no_control"):
        if getattr(args, flag):
            argv.append(f"--{flag.replace('_', '-')}")
    if args.explain:
        argv.append(option("explain-top", args.explain_top))
    for opt in ("shape", "inputs", "dtype", "model_dtype", "device", "json", "steady", "threads", "warm_shape",
                "generate", "kv_cache"):
        v = getattr(args, opt)
        if v is not None:
            # a file is named from the child's folder too (a FILE.py:FACTORY resolves as the target does)
            path = opt == "json" or (opt == "inputs" and os.path.exists(v))
            argv.append(option(opt.replace("_", "-"), os.path.abspath(v) if path else v))
    if getattr(args, "traceback", False):
        argv.append("--traceback")
    if args.compile is not None:
        argv.append(option("compile", args.compile))
    argv += ["--in-process", "--fresh-process", option("cache", args.cache)]
    return positional(argv, *([args.target] if args.target else []))


def _run_child(args: argparse.Namespace) -> int:
    child.require_torch()
    return child.run_child(_child_argv(args), args.cache, args.quiet, pass_fds=child.fds_named(args.json))


def _target_taken_by_compile(args: argparse.Namespace) -> None:
    """`--compile` takes an optional mode, so `trace --compile pkg.mod:make` hands the target to it.
    A mode never contains ':', a target always does: give it back."""
    if args.target is None and args.compile and ":" in args.compile:
        args.target, args.compile = args.compile, "default"


def _one_each(args: argparse.Namespace) -> None:
    """--shape and --inputs are given once (argparse would keep the last silently), and not together.
    Leaves args.shape and args.inputs a single value or None."""
    for opt in ("shape", "inputs"):
        values = getattr(args, opt)
        if isinstance(values, list):
            if len(values) > 1:
                given = " and ".join(repr(v) for v in values)
                raise InputError(f"--{opt} given {len(values)} times ({given}): a trace measures one first pass, "
                                 f"on one input; run one `warmprof trace` per {opt.rstrip('s')} (each with its own "
                                 "--json) and put the reports side by side with `warmprof compare`")
            setattr(args, opt, values[0])
    if args.shape is not None and args.inputs is not None:
        raise InputError("give either --shape (a random input of that shape) or --inputs (your own), not both")
    if args.inputs is not None:
        if args.dtype is not None:
            raise InputError("--dtype sets the dtype of the random input --shape makes; --inputs are used as they "
                             "are: save them in the dtype you want (and cast the model with --model-dtype)")
        if args.warm_shape is not None:
            raise InputError("--warm-shape runs the model at a --shape; it does not go with --inputs")
        check_inputs_spec(args.inputs)
    if args.model_dtype is not None:
        from ..traces.inputs import MODEL_DTYPES

        if args.model_dtype.lower().removeprefix("torch.") not in MODEL_DTYPES:  # checked again by trace()
            raise InputError(f"--model-dtype {args.model_dtype!r}: give a floating dtype "
                             f"({', '.join(sorted(set(MODEL_DTYPES.values())))})")


def run(args: argparse.Namespace) -> int:
    # where a dotted MODULE:FACTORY (target or --inputs) is looked up first: the folder the command was run
    # in, taken now, before the model's code can change it (traces/targets.imported)
    args._caller_folder = caller_folder()
    _target_taken_by_compile(args)
    _one_each(args)
    if args.demo and args.target:
        raise InputError("give either --demo or a MODULE:FACTORY target, not both")
    if not args.demo and not args.target:
        raise InputError("nothing to trace: give --demo or a MODULE:FACTORY target (see warmprof trace -h)")
    if args.target and ":" not in args.target:
        raise InputError(f"target {args.target!r} must look like MODULE:FACTORY or path/to/file.py:FACTORY")
    if args.target and not args.shape and args.inputs is None:
        raise InputError("--shape (or --inputs) is required with a target, e.g. --shape 1,128")
    if args.threads is not None and args.threads < 1:
        raise InputError("--threads must be at least 1")
    if not 1 <= args.explain_top <= 100:
        raise InputError("--explain-top must be from 1 to 100")
    if args.explain and args.compile is not None:
        raise InputError("--explain is for eager models: a compiled model gets no op view (its first pass is "
                         "explained by the compile's own spans); drop --explain or --compile")
    if args.generate is not None:
        from ..traces.generate import MAX_NEW_TOKENS

        if not 2 <= args.generate <= MAX_NEW_TOKENS:
            raise InputError(f"--generate takes a number of new tokens from 2 to {MAX_NEW_TOKENS}, got {args.generate}")
        if args.op_view or args.explain or args.repeat != 1:
            raise InputError("--generate does not go with --op-view, --explain or --repeat: the op view is of one "
                             "forward (trace the model at the prompt's shape for it)")
    elif args.kv_cache is not None:
        raise InputError("--kv-cache goes with --generate N")
    if args.json is not None:
        check_output_path(args.json)
    if args.control_fds is not None or (args.in_process and args.fresh_process):
        # a process warmprof started for itself (the trace's fresh child, its control): it ends
        # with os._exit once its work is out, not after torch's teardown and the model's atexit
        from ..cli import exit_without_teardown

        exit_without_teardown()
    if args.control_fds is not None:
        return _serve_control(args)
    if args.repeat != 1:
        return _repeat(args)
    if not args.in_process:
        return _run_child(args)
    status = child.Status(args.status_file)
    try:
        code = _trace_here(args, status)
    except (WarmprofError, KeyboardInterrupt):
        status.write(child.EXPLAINED)  # cli.main prints the one line
        raise
    status.write(child.DONE)
    return code


def _repeat(args: argparse.Namespace) -> int:
    """--repeat N: N runs of this trace, each a fresh process (traces/repeat.py), in one report."""
    from ..system.supervise import Terminated, sigterm_raises
    from ..traces.repeat import check_repeat, cli_argv, run_repeats

    check_repeat(args.repeat)
    if args.in_process or args.fresh_process:
        raise InputError("--repeat runs each trace in a fresh process: it does not go with --in-process")
    if args.explain or args.warm_shape:
        raise InputError("--repeat does not go with --explain: run --explain once, on a run --repeat shows typical")
    child.require_torch()
    argv = cli_argv(args.target or "demo", shape=args.shape, dtype=args.dtype, device=args.device,
                    compile=args.compile, threads=args.threads, steady=args.steady, op_view=args.op_view,
                    cache=args.cache, inputs=args.inputs, model_dtype=args.model_dtype, no_control=args.no_control)
    if getattr(args, "traceback", False):
        argv = with_options(argv, "--traceback")
    try:
        with sigterm_raises():
            report = run_repeats(argv, args.repeat, progress=not args.quiet)
    except Terminated as t:
        print("warmprof: terminated", file=sys.stderr)
        return 128 + t.signum
    except TimedOut as e:  # --timeout: the runs that finished are saved and printed, then the error
        if e.report is not None:
            save_and_print(e.report, args.json)
            if args.json:
                e.args = (f"{e}; saved to {args.json}",)
        raise
    return save_and_print(report, args.json)


def _control_argv(args: argparse.Namespace) -> list[str]:
    """The control process's command line: the same model on the same inputs, nothing of the
    trace's own outputs (controls.ControlProcess adds its pipes); values as --name=value, the target
    last after `--` (as _child_argv)."""
    argv = ["trace"] + ([] if args.target else ["--demo"])
    for opt in ("shape", "inputs", "dtype", "model_dtype", "device", "threads", "warm_shape", "generate", "kv_cache"):
        v = getattr(args, opt)
        if v is not None:
            argv.append(option(opt.replace("_", "-"), os.path.abspath(v) if opt == "inputs" and os.path.exists(v) else v))
    if args.compile is not None:
        argv.append(option("compile", args.compile))
    if args.op_view or args.explain:
        argv.append("--op-view")
    return positional(argv + ["--in-process", "--quiet"], *([args.target] if args.target else []))


def _serve_control(args: argparse.Namespace) -> int:
    """This process is a trace's control (traces/control_serve.py): it builds the model and runs the
    phases the trace's process asks for."""
    from ..traces import control_serve

    def load():
        if args.demo:
            from ..traces.demo import demo_model

            model = demo_model()
        else:
            model = load_target(args.target, args._caller_folder)
        return model, (load_inputs(args.inputs, folder=args._caller_folder) if args.inputs is not None else None)

    shape = args.shape
    if args.demo and shape is None and args.inputs is None:
        from ..traces.demo import DEFAULT_SHAPE

        shape = DEFAULT_SHAPE
    return control_serve.serve(args.control_fds, load, device=args.device, threads=args.threads, shape=shape,
                              inputs=args.inputs, dtype=args.dtype, model_dtype=args.model_dtype,
                              compile=args.compile, op_view=args.op_view or args.explain, warm_shape=args.warm_shape,
                              generate=args.generate, kv_cache=args.kv_cache)


def _trace_here(args: argparse.Namespace, status: child.Status) -> int:
    from ..traces import controls

    control: controls.ControlProcess | str
    if not args.fresh_process:
        control = "traced with --in-process (in the caller's process): no control process"
    elif args.no_control:
        control = "--no-control"
    else:  # started first; this process waits, before it imports torch, until its clean phase is done
        control = controls.ControlProcess(_control_argv(args), env=controls.control_env(args.cache))
    try:
        if isinstance(control, controls.ControlProcess):
            status.progress(args.quiet)("clean first pass (a second fresh process: it imports torch and builds the "
                                        "model, then runs it with no instruments; this one waits its turn)")
            control.run_clean()
        with controls.attached(control):
            return _trace_with(args, status, control if isinstance(control, controls.ControlProcess) else None)
    finally:
        if isinstance(control, controls.ControlProcess):
            control.close()


# A FILE.py target is executed from its path (traces/targets.imported), not found by the import system: the
# Python-imports instrument times the modules it imports, not its own top-level code.
FILE_BODY_NOTE = ("the file's own top-level code is not a Python-imports span (it is loaded from its path): the "
                  "modules it imports are measured, its own code is in this step's unattributed time")


def _cold_start(args: argparse.Namespace, status: child.Status) -> tuple[Any, Any, Any]:
    """torch imported, then the model built by its factory, each a step of the set-up's cold start
    (traces/setup_phase.py: host counters and Python imports on): (torch, model, the recorded run).
    In an --in-process trace only the model is a step: the caller's process imported torch before."""
    from ..traces.setup_phase import cold_start_instruments, run_setup
    from ..traces.targets import factory_of, imported, split_target

    got: dict[str, Any] = {}

    def import_torch() -> None:
        status.write("importing torch")
        got["torch"] = child.import_torch()
        if args.threads is not None:
            got["torch"].set_num_threads(args.threads)

    imported_before = "torch" in sys.modules
    steps: list[tuple[str, Any]] = [] if imported_before else [("import torch", import_torch)]
    notes: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        if args.demo:
            def build_demo() -> None:
                from ..traces.demo import demo_model

                status.write("loading the model")
                got["model"] = demo_model()

            steps.append(("demo_model() (the built-in demo)", build_demo))
        else:
            where, name = split_target(args.target)

            def import_module() -> None:
                status.write("loading the model")
                got["module"] = stack.enter_context(imported(where, args._caller_folder))

            def call_factory() -> None:
                got["model"] = call_target(factory_of(got["module"], where, name), args.target)

            steps += [(f"import {where}", import_module), (f"{name}() (the factory)", call_factory)]
            if where.endswith(".py"):  # loaded from its path, past the import system's finders
                notes[f"import {where}"] = FILE_BODY_NOTE
        if imported_before:  # not a step: this process had it; its threads are set before the model is built
            import_torch()
        record = run_setup(None, None, steps, instruments=cold_start_instruments(), notes=notes)
    return got["torch"], got["model"], record


def _trace_with(args: argparse.Namespace, status: child.Status, control: Any) -> int:
    torch, model, cold_start = _cold_start(args, status)
    import warmprof

    if args.demo:
        from ..traces.demo import DEFAULT_SHAPE

        shape = args.shape or (None if args.inputs is not None else DEFAULT_SHAPE)
    else:
        shape = args.shape
    inputs = None
    if args.inputs is not None:
        status.write("loading the inputs")
        inputs = load_inputs(args.inputs, folder=args._caller_folder)
    steady = args.steady if args.steady is not None else (5, 50)
    if args.warm_shape:
        status.write("running the model once at the warm-up shape")
        warm_process.warm_run(torch, model, args.warm_shape, args.dtype, args.device, args.model_dtype)
    status.write("setting up the trace")
    import time

    started = time.monotonic()
    budget = STEADY_BUDGET_WITH_CONTROL_S if control is not None and control.clean is not None else 3.0
    report = warmprof.trace(model, shape, inputs=inputs, dtype=args.dtype, model_dtype=args.model_dtype,
                            device=args.device, compile=args.compile, steady=steady, steady_budget_s=budget,
                            progress=status.progress(args.quiet), run=_run_context(args),
                            op_view=args.op_view or args.explain, generate=args.generate, kv_cache=args.kv_cache,
                            _cold_start=cold_start)
    if args.warm_shape:
        report.notes.append(f"the model ran once at input shape {args.warm_shape} before this trace (--warm-shape): "
                            "what a process pays once whatever the shape was paid then")
    if args.explain:  # the warm processes first: the probes then fold only what those left
        from ..traces.explain import explain_report

        target_argv, option_argv = _warm_argv(args)
        warm_process.warm_processes(report, target_argv, option_argv, inputs_given=args.inputs is not None,
                                    say=status.write, trace_s=time.monotonic() - started)
        status.write("probing the ops that hold the most unexplained time (fresh processes)")
        explain_report(report, top=args.explain_top, threads=args.threads, device=report.device,
                       progress=status.progress(args.quiet))
    if args.fresh_process and args.cache == "keep" and report.protocol is not None:
        # Known only now: the first pass may have set cache variables (inductor sets
        # TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR when it first compiles).
        report.protocol.run.caches = child.caches_in_use(os.environ)
    status.write("saving and printing the report")
    return save_and_print(report, args.json)


def _run_context(args: argparse.Namespace) -> RunContext:
    """Where this trace runs. The child of a plain `warmprof trace` is a fresh process (nothing ran
    before it) and knows its caches: the user's own, or fresh folders removed after; `--in-process`
    alone is the caller's process, as for warmprof.trace() from Python."""
    if not args.fresh_process:
        return RunContext(threads=args.threads, warm_shape=args.warm_shape)
    # --cache keep: the user's own folders, read after the trace (see _trace_here)
    caches = None if args.cache == "keep" else {var: "fresh (removed after)" for var in child.CACHES}
    return RunContext(fresh_process=True, cache=args.cache, threads=args.threads, caches=caches,
                      warm_shape=args.warm_shape)


def _warm_argv(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """What --explain's warm processes are given of this command line: the target, to go last (after
    `--`, or --demo), and the options a trace of it keeps, as --name=value (traces/warm_process.py adds
    the shapes, the op view and --json)."""
    target = ["--", args.target] if args.target else ["--demo"]
    options = [option("cache", args.cache), option("device", args.device)]
    for opt in ("dtype", "model_dtype", "threads", "steady"):
        if getattr(args, opt) is not None:
            options.append(option(opt.replace("_", "-"), getattr(args, opt)))
    return target, options

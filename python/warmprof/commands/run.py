"""warmprof run -- CMD: a command's cold start and first model calls, across every Python process it starts."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError, ModelError

NAME = "run"
HELP = ("Run a command (a server, an offline script) with warmprof in every Python process of its tree: each "
        "process's phases (imports, build, weight load, compiles, an engine's own phases) with their causes, the "
        "first model calls against steady ones, and the path from start to ready and to the first response.")
MAX_CALLS = 1_000_000


def setup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--watch", action="append", default=[], metavar="CLASS",
                        help="an nn.Module class (Name or module:Name) whose forward calls are the model calls and whose "
                             "construction is the build; repeatable. vLLM's model steps are watched without it")
    parser.add_argument("--calls", type=int, default=0, metavar="N",
                        help="end the command (SIGINT) once one process has made N watched calls")
    parser.add_argument("--ready-after", default="", metavar="WHEN",
                        help="where the cold start ends when no engine says it: 'first-call' (the default: the first "
                             "watched call's start) or 'log:REGEX' (a logging record whose message matches)")
    parser.add_argument("--json", metavar="PATH", help="also save the run report as JSON")
    parser.add_argument("--sample-ms", type=float, default=20.0, metavar="MS",
                        help="how often each process's clocks and memory are sampled (default 20)")
    parser.add_argument("--no-engines", action="store_true", help="do not recognise engines (vLLM): generic phases only")
    parser.add_argument("--phase", action="append", default=[], metavar="MODULE:FUNC[=NAME]",
                        help="time a function (module:function or module:Class.method) as a phase, named NAME (default "
                             "the function's name), in every process that imports its module; repeatable")
    parser.add_argument("--no-cupti", action="store_true",
                        help="do not subscribe CUPTI in a process that imports torch.cuda (CUDA's context creation, "
                             "module loads, allocations and graph capture are then not named)")
    parser.add_argument("--no-onednn", action="store_true",
                        help="do not turn oneDNN's creation timings on in the tree (ONEDNN_VERBOSE=profile_create, its lines "
                             "taken out of each process's C stdout): its primitive creations are then not named")
    parser.add_argument("--timeout", dest="run_timeout", type=float, default=None, metavar="S",
                        help="end the command (SIGINT) after S seconds; the report covers what ran")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")


def run(args: argparse.Namespace) -> int:
    from ..runs.launch import Options, remove, run_command
    from ..system.output_paths import check_output_path, save_and_print

    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise InputError("give the command after `--`: warmprof run -- python serve.py")
    if not 0 <= args.calls <= MAX_CALLS:
        raise InputError(f"--calls must be from 0 to {MAX_CALLS}")
    if not 2.0 <= args.sample_ms <= 1000.0:
        raise InputError("--sample-ms must be from 2 to 1000")
    if args.ready_after and args.ready_after != "first-call" and not args.ready_after.startswith("log:"):
        raise InputError(f"--ready-after {args.ready_after!r}: give 'first-call' or 'log:REGEX'")
    if args.ready_after.startswith("log:"):
        import re

        try:
            re.compile(args.ready_after[4:])
        except re.error as e:
            raise InputError(f"--ready-after: not a regular expression ({e})") from None
    if args.run_timeout is not None and not 0 < args.run_timeout <= 7 * 24 * 3600:
        raise InputError("--timeout: give seconds, more than 0 and at most a week")
    for w in args.watch:
        if not w.replace(":", "").replace(".", "").replace("_", "").isalnum():
            raise InputError(f"--watch {w!r}: give a class name (Name or module:Name)")
    from ..runs.agent import parse_phase

    for ph in args.phase:
        if parse_phase(ph) is None:
            raise InputError(f"--phase {ph!r}: give module:function or module:Class.method, optionally =NAME")
    if args.json is not None:
        check_output_path(args.json)
    say = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    opts = Options(watch=list(args.watch), calls=args.calls, ready_after=args.ready_after, sample_ms=args.sample_ms,
                   engines=not args.no_engines, timeout_s=args.run_timeout, phases=list(args.phase),
                   cupti=not args.no_cupti, onednn=not args.no_onednn)
    say(f"warmprof run: {' '.join(argv)}")
    out = run_command(argv, opts, say)
    try:
        say("warmprof run: the command ended; calibrating and reading the processes' records")
        from ..runs.build import build_report
        from ..traces.calibrate import calibrate

        costs = calibrate()
        report = build_report(out, opts, costs.for_attribution(), costs.to_dict())
    finally:
        remove(out)
    code = save_and_print(report, args.json)
    failed = _failure(out)
    if failed:
        err = ModelError(failed + ("; the report above covers what was recorded" if report.processes else ""))
        print(f"warmprof: error: {err}", file=sys.stderr)
        return 130 if out.ended_by == "interrupt" else err.exit_code
    return code


def _failure(out: object) -> str:
    ended_by, rc = getattr(out, "ended_by"), getattr(out, "returncode")
    if ended_by == "interrupt":
        return "interrupted: the command was stopped before it ended by itself"
    if ended_by == "terminated":
        return "terminated: the command was stopped before it ended by itself"
    if ended_by in ("calls", "timeout"):
        return ""
    if rc is not None and rc < 0:
        import signal

        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"the command was killed by {name}"
    if rc:
        return f"the command exited with status {rc}"
    return ""

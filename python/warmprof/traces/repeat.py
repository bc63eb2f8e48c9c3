"""Repeated traces: the same trace run N times, each in a fresh process (`warmprof trace` as a
program, which gives each run fresh caches too), gathered into one RepeatReport.

A first pass happens once per process, so a repeat cannot run in the caller's process: the model
is named (MODULE:FACTORY, path/to/file.py:FACTORY, or "demo") and built afresh in each run.
"""

from __future__ import annotations

import datetime
import os
import subprocess
from typing import TYPE_CHECKING, Any, Callable, cast

from .. import errors
from ..errors import InputError, ModelError, TimedOut, WarmprofError
from ..report.base import load
from ..report.repeat import RepeatReport
from ..system.launch import option, positional, python_argv, with_options
from ..system.progress import progress_printer, say_on_stderr
from ..system.supervise import Deadline, die_with, stop, wait_output
from ..system.fileio import temp_folder
from .advice import advise

if TYPE_CHECKING:
    from ..report.trace import Report

MAX_REPEAT = 100
DEMO = "demo"


def check_repeat(repeat: Any) -> int:
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= MAX_REPEAT:
        raise InputError(f"repeat must be a whole number of runs from 1 to {MAX_REPEAT}, got {repeat!r}")
    return repeat


def cli_argv(target: str, *, shape: Any = None, dtype: str | None = None, device: str = "cpu",
             compile: str | None = None, threads: int | None = None, steady: int | None = None,
             op_view: bool = False, cache: str = "fresh", inputs: str | None = None,
             model_dtype: str | None = None, no_control: bool = False) -> list[str]:
    """`warmprof trace` arguments for one run (without --json): each value as --name=value and the
    target last, after `--`, so a value or a target that starts with '-' stays one (system/launch.py);
    add options with launch.with_options."""
    if not isinstance(target, str) or (target != DEMO and ":" not in target):
        raise InputError(f"a repeated trace names its model: MODULE:FACTORY, path/to/file.py:FACTORY or "
                         f"{DEMO!r}, got {target!r}")
    argv = ["trace", "--demo"] if target == DEMO else ["trace"]
    if shape is not None:
        argv.append(option("shape", shape if isinstance(shape, str) else ",".join(str(int(d)) for d in shape)))
    if inputs is not None:
        argv.append(option("inputs", os.path.abspath(inputs) if os.path.exists(inputs) else inputs))
    for name, value in (("dtype", dtype), ("model-dtype", model_dtype), ("device", device),
                        ("threads", threads), ("steady", steady)):
        if value is not None:
            argv.append(option(name, value))
    if compile:
        argv.append(option("compile", compile))
    if op_view:
        argv.append("--op-view")
    if no_control:  # each run holds the model once (no control process beside it)
        argv.append("--no-control")
    return positional([*argv, option("cache", cache), "--quiet"], *([] if target == DEMO else [target]))


def run_repeats(argv: list[str], repeat: int, *, progress: Any = None,
                run: Callable[[list[str]], tuple[int, str]] | None = None) -> RepeatReport:
    """`warmprof <argv> --json TMP` `repeat` times, one after another, each a fresh process; a run
    that fails is listed in the report (`failed`) with its last error line, and the rest are kept,
    except when the first run fails: then every run would (a bad option, a missing device, a model
    that raises), so its error is raised at once, as the same kind of error (exit code).
    `run` (tests) replaces the process: argv -> (exit code, stderr). Ctrl-C or SIGTERM stops the
    running process and what it started (supervise.stop); the temp folder goes with them."""
    check_repeat(repeat)
    say = progress_printer(progress)
    runs, failed = [], []
    stopped: str | None = None
    with temp_folder("warmprof-repeat-", "the runs' reports") as tmp:
        for k in range(1, repeat + 1):
            say(f"run {k}/{repeat}: a fresh process")
            out = os.path.join(tmp, f"run{k}.json")
            try:
                rc, err = (run or _run)(with_options(argv, option("json", out)))
            except Deadline as d:  # --timeout: the running one was stopped (_run); the finished ones stand
                stopped = f"{d} during run {k} of {repeat}"
                failed.append(f"run {k}: stopped by --timeout" + (f"; {_runs_after(k, repeat)} not started" if k < repeat else ""))
                break
            if rc != 0:
                last = (err.strip().splitlines() or ["no message"])[-1]
                if k == 1:
                    if "--traceback" in argv:  # the run's own traceback, as `warmprof trace --traceback` shows it
                        say_on_stderr(err.rstrip())
                    raise _error_for(rc)(f"run 1 of {repeat} failed, so the others were not started: "
                                         f"{last.removeprefix('warmprof: error: ')}")
                failed.append(f"run {k}: exit {rc}: {last}")
                say(f"run {k}/{repeat} failed: {last}")
                continue
            try:
                runs.append(cast("Report", load(out)))  # a trace run's --json: a trace report
            except (WarmprofError, OSError) as e:
                failed.append(f"run {k}: its report could not be read ({e})")
    if stopped and not runs:
        raise TimedOut(f"{stopped}; no report was written")
    if not runs:
        raise ModelError(f"none of the {repeat} runs gave a report; {failed[0] if failed else ''}")
    notes = [f"{len(runs)} runs of `warmprof {' '.join(argv)}`, each a fresh process, one after another"]
    if stopped:
        notes.append(f"{stopped}: this report holds the {len(runs)} run{'s' if len(runs) > 1 else ''} that finished")
    report = RepeatReport.of_runs(runs, failed=failed, notes=notes,
                                  created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    report.advice = advise(report.median_view())
    if stopped:
        raise TimedOut(f"{stopped}; the report holds the {len(runs)} run{'s' if len(runs) > 1 else ''} that "
                       "finished", report=report)
    return report


def _runs_after(k: int, repeat: int) -> str:
    return f"run {repeat}" if k + 1 == repeat else f"runs {k + 1}-{repeat}"


def _error_for(rc: int) -> type[WarmprofError]:
    """The WarmprofError class a `warmprof` exit code stands for (ModelError for any other code)."""
    kinds = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, WarmprofError)]
    return next((c for c in kinds if c is not WarmprofError and c.exit_code == rc),
                InputError if rc == WarmprofError.exit_code else ModelError)


def _run(argv: list[str]) -> tuple[int, str]:
    """One run: `python -m warmprof <argv>` (without the current folder on sys.path: system/launch.py),
    its stdout dropped, its stderr kept. It gets SIGTERM if
    this process dies (die_with), and is stopped with what it started if this one is interrupted."""
    parent = os.getpid()
    proc = subprocess.Popen(python_argv("warmprof", argv), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, errors="replace", preexec_fn=lambda: die_with(parent))
    try:
        return wait_output(proc)  # bounded: a helper holding its stderr does not hold this wait
    except BaseException:  # Ctrl-C, SIGTERM (supervise.Terminated), --timeout (Deadline): it must not outlive us
        stop(proc)
        raise


def trace_repeat(target: str, shape: Any = None, *, repeat: int, progress: Any = None, **options: Any) -> RepeatReport:
    """warmprof.trace(target, shape, repeat=N) with the model named: N fresh-process runs."""
    return run_repeats(cli_argv(target, shape=shape, **options), repeat, progress=progress)


__all__ = ["MAX_REPEAT", "check_repeat", "cli_argv", "run_repeats", "trace_repeat"]

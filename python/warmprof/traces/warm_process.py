"""A model run before its trace: --warm-shape's one pass in this process (warm_run), and --explain's
one more fresh process, tracing the model after one such pass at another shape (warm_processes),
folded into the report by explain.fold_warm_processes. `warmprof trace` (commands/trace.py) reads the command
line and calls these; the warm processes are that command again, in a child interpreter (started
without the current folder on sys.path: system/launch.py).
"""

from __future__ import annotations

import os
import subprocess
from typing import Any, Callable

from .. import devices
from ..errors import InputError, WarmprofError
from ..system.launch import option, python_argv
from ..system.supervise import stop, wait_output
from ..system.fileio import temp_folder

# A warm run traces the same model again (plus one pass): allowed this much over the main trace's time.
WARM_PROCESS_FACTOR, WARM_PROCESS_MARGIN_S = 3.0, 120.0


def warm_run(torch: Any, model: Any, shape: str, dtype: str | None, device: str,
             model_dtype: str | None = None) -> None:
    """One pass at `shape` before the trace (no grad), as a server that already ran other inputs."""
    from .inputs import cast_model, make_inputs, parse_device, parse_model_dtype

    dev = parse_device(device)
    kind = devices.of(dev)
    if not kind.host and isinstance(model, torch.nn.Module):
        model.to(dev)
    cast_model(model, parse_model_dtype(model_dtype))  # as the trace will (the same cast again is a no-op)
    args, kwargs, _ = make_inputs(model, shape, dtype, None, dev)
    try:
        with torch.no_grad():
            model(*args, **kwargs)
        kind.sync(dev)()  # its queued work done before the trace's first pass starts
    except Exception as e:
        raise InputError(f"the model raised when run once at the warm-up shape {shape}: {type(e).__name__}: {e}") from e


def warm_processes(report: Any, target_argv: list[str], option_argv: list[str], *, inputs_given: bool,
                   say: Callable[[str], None], trace_s: float) -> None:
    """--explain's one more fresh process: the same trace (op view on) where the model first ran once
    at another shape; what it did not pay again is paid once per process, whatever the shape (folded
    in by explain.fold_warm_processes as runtime_init, source warm_process). A run that fails is left
    out, with a note saying which. warmprof's own first-pass cost needs no run of its own here: the
    trace's control process measured it on the model warm (traces/controls.py).

    target_argv: the trace's target on the command line, put last (["--", "pkg.mod:make"] or ["--demo"]);
    option_argv: the options the warm trace keeps (--cache=..., --device=..., --dtype=..., ...)."""
    from .explain import fold_warm_processes, other_shape

    if (getattr(report, "clean", None) or {}).get("other_shape"):
        return  # the control process ran the other shape already, clean (traces/controls.py)
    if inputs_given:
        report.notes.append("--explain: no other-shape run (it runs the model at another --shape first; this trace ran "
                            "on --inputs, which have no shape to vary): what is paid once per process is not told "
                            "apart from what is paid once per shape")
        return
    if not report.shape:
        report.notes.append("--explain: no other-shape run (the input has no plain shape to give it)")
        return
    shape = ",".join(str(d) for d in report.shape)
    other = ",".join(str(d) for d in other_shape(report.shape))
    timeout_s = WARM_PROCESS_MARGIN_S + WARM_PROCESS_FACTOR * trace_s
    say(f"a fresh process: the model once at {other}, then the trace at {shape}")
    run = traced_after_warm_up(target_argv, option_argv, shape, other, report, timeout_s)
    folded = {f.cause: f.ms for f in fold_warm_processes(report, None, run)}
    if run is not None:
        report.notes.append(f"--explain: the same trace in a fresh process that ran the model once at "
                            f"{other.replace(',', 'x')} first: {folded.get('runtime_init', 0.0):.2f} ms of this trace's "
                            "rows were not paid again (runtime_init, source warm_process; inferred)")


def traced_after_warm_up(target_argv: list[str], option_argv: list[str], shape: str, warm_shape: str, report: Any,
                         timeout_s: float) -> Any | None:
    """The report of `warmprof trace` in a fresh process with --warm-shape (None, with a note, if it failed)."""
    from ..report.base import load

    with temp_folder("warmprof-warm-", "--explain's warm process") as tmp:
        out = os.path.join(tmp, "warm.json")
        # each value as --name=value, the target last (after `--`): one that starts with '-' stays a value
        argv = ["trace", option("shape", shape), option("warm-shape", warm_shape), "--op-view", option("json", out),
                "--quiet", "--no-control", *option_argv, *target_argv]
        proc = subprocess.Popen(python_argv("warmprof", argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, errors="replace")
        try:
            rc, err = wait_output(proc, timeout_s)  # bounded: a helper holding its stderr does not hold it
        except subprocess.TimeoutExpired:
            stop(proc)  # warmprof trace stops its own child and removes its folders on SIGTERM; SIGKILL after
            report.notes.append(f"--explain: the run warmed at {warm_shape} took over {timeout_s:.0f} s and was "
                                "stopped; left out")
            return None
        except BaseException:  # Ctrl-C, SIGTERM, --timeout: it must not outlive us
            stop(proc)
            raise
        if rc != 0:
            last = (err.strip().splitlines() or ["no message"])[-1]
            report.notes.append(f"--explain: the run warmed at {warm_shape} failed (exit {rc}): {last}; "
                                "left out")
            return None
        try:
            return load(out)
        except (WarmprofError, OSError) as e:
            report.notes.append(f"--explain: the report of the run warmed at {warm_shape} could not be read ({e}); "
                                "left out")
            return None


__all__ = ["WARM_PROCESS_FACTOR", "WARM_PROCESS_MARGIN_S", "traced_after_warm_up", "warm_processes", "warm_run"]

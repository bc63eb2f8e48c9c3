"""The controls a fresh-process trace measures beside its traced first pass: the model's own first
pass, clean, and warmprof's own first-pass cost, measured on the model warm.

A second fresh process (the control) builds the same model on the same inputs as the trace's own
process. The two take turns, so no pass of one runs beside the other's:

    both:     import torch, build the model, make the inputs          (side by side: not measured)
    control:  the clean first pass (no instrument but the pass timer), clean steady passes
    trace:    the instrumented first pass, seen re-run, steady passes, calibration
    control:  the warm control: the trace's instrumented passes on the model already run at this
              shape, with instruments fresh in that process, attributed at the trace's calibration

The headline is the clean first pass less its steady median (the model's own excess, what a user
without warmprof pays); the model's causes are what the instrumented cold pass booked less what
the warm control booked (warmprof's own first-call work looks like causes there: its buffers'
page faults, its code's pages, the imports its instruments make); warmprof's own cost is its own
line (the warm control's first pass over the steady median, and the instruments' cost per steady
pass), never a cause. A trace in the caller's process (warmprof.trace() from Python) has no
control: its own cost there is the estimate from warm instrumented passes, taken out of the
excess, and the notes say what it could not control (fold_without_control).

The messages are JSON lines on two pipes (the control's descriptors come on its command line as
--control-fds R,W); the control's stdout is the model's and goes nowhere, its stderr goes to a
file whose tail says why it failed. A control that fails or times out costs the trace nothing but
its figures: the trace goes on, the notes say why.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from ..causes import Name
from ..errors import InputError
from ..stats import median
from ..system.supervise import die_with, stop

# How long the control may take to import torch and build the model, and each of its phases after.
READY_TIMEOUT_S = 600.0
PHASE_FACTOR, PHASE_MARGIN_S = 4.0, 60.0  # a phase may take this many times the trace's own, plus this
CLEAN_STEADY = (10, 40)  # the control's clean steady passes: at least, at most...
CLEAN_STEADY_BUDGET_S = 0.5  # ...within this (past the minimum)
OTHER_STEADY = 5  # steady passes at the other shape (its excess is the first of them against their median)
# Warm passes at the traced inputs, each after a short sleep: the least of them over the steady median
# is what a pass pays for coming after other work (caches, branch predictors, the clock), as every first
# pass does while the steady passes come back to back.
AFTER_PAUSE_PASSES, AFTER_PAUSE_S = 3, 0.02
CONTROL_STEADY = 5  # the warm control's own steady passes (its attribution reads their faults)
NOTE_PREFIX = "controls: "
# The control a trace in this context drives, or why it has none (a sentence for the notes).
_current: contextvars.ContextVar["ControlProcess | str"] = contextvars.ContextVar(
    "warmprof_control", default="traced in the caller's process (warmprof.trace() from Python)")
_in_warm_control: contextvars.ContextVar[bool] = contextvars.ContextVar("warmprof_in_warm_control", default=False)


@dataclass
class Clean:
    """The control's clean first pass and its steady passes (ms), and what the first pass and the
    steady passes (their median) waited: for a CPU, and off the CPU (_off_cpu)."""

    first_pass_ms: float
    steady_ms: list[float]
    first: dict[str, Any] = field(default_factory=dict)  # _off_cpu() of the first pass
    steady: dict[str, Any] = field(default_factory=dict)  # the steady passes' median run delay and off-CPU time
    # the other-shape pass (_clean): first_pass_ms, steady_median_ms, excess_ms, shape; None where the
    # inputs have no batch dimension to grow (given inputs: other_inputs) or the model refused it
    other_shape: dict[str, Any] | None = None
    other_shape_refused: str = ""  # why the model ran no pass at the other shape (what it raised)
    # warm passes at the traced inputs, each after a short sleep (ms): what a pass after other work pays
    after_pause_ms: list[float] | None = None
    at_once: bool | None = None  # run right after the build (True), or when the trace's process asked (one CPU)
    generate: dict[str, Any] | None = None  # a generate trace's clean phases (traces/generate.clean_phases)

    @property
    def steady_median_ms(self) -> float:
        return median(self.steady_ms)

    @property
    def excess_ms(self) -> float:
        return self.first_pass_ms - self.steady_median_ms

    def to_dict(self) -> dict[str, Any]:
        from ..attribution import steady_stats

        stats = steady_stats(self.steady_ms)
        return {"first_pass_ms": self.first_pass_ms, "steady_median_ms": stats.median, "excess_ms": self.excess_ms,
                "steady_passes": len(self.steady_ms), "steady_p10_ms": stats.p10, "steady_p90_ms": stats.p90,
                "noise_band_ms": stats.noise_band, "first": dict(self.first), "steady": dict(self.steady),
                **({"other_shape": dict(self.other_shape)} if self.other_shape else {}),
                **({"other_shape_refused": self.other_shape_refused} if self.other_shape_refused else {}),
                **({"after_pause": {
                    "passes_ms": list(self.after_pause_ms), "pause_s": AFTER_PAUSE_S,
                    "excess_ms": min(self.after_pause_ms) - stats.median,
                    "how": f"warm passes at the traced inputs, each after a {AFTER_PAUSE_S * 1000:.0f} ms sleep, the least "
                           "of them less the steady median: what a pass pays for coming after other work (caches, branch "
                           "predictors, the clock), as a first pass does while steady passes come back to back; not a "
                           "first call (measured)"}}
                   if self.after_pause_ms else {}),
                **({"at_once": self.at_once} if self.at_once is not None else {}),
                **({"generate": dict(self.generate)} if self.generate else {}),
                "how": "the model's first pass in a second fresh process with no instrument but the pass timer, right "
                       "after its build (on one CPU: once the trace's process was ready), less the median of that "
                       "process's steady passes (measured)"}


@dataclass
class WarmControl:
    """What the trace's instrumented passes booked on the model already warm (the control's
    report of it), and that first pass's time (ms)."""

    first_pass_ms: float
    causes: list[dict[str, Any]]  # {"cause", "source", "ms", "module"} as the control's report booked them
    where: list[dict[str, Any]] = field(default_factory=list)  # its unattributed_where rows {"module", "ms"}
    generate: list[dict[str, Any]] = field(default_factory=list)  # a generate trace's phases: {"phase", "causes"}


# ---- the trace's side -----------------------------------------------------------------------------


def spin_wait_fits(threads: int) -> bool:
    """Whether the trace's process may wait for the control's clean phase on its CPU (polling): where
    the machine has a CPU for it beyond the control's `threads` (the affinity mask, capped by a cgroup
    CPU quota), so the wait takes nothing from the control's passes."""
    from ..system.platform import usable_cpus

    return usable_cpus()[0] >= threads + 1


class ControlProcess:
    """The control process, seen from the trace's process: started first (its import and model
    build run beside the trace's own), then driven phase by phase. Every wait has a time limit; a
    failure becomes `self.failed` (a sentence) and the trace goes on without the control."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.failed = ""
        self.clean: Clean | None = None
        self.warm: WarmControl | None = None
        self._proc: subprocess.Popen | None = None
        self._buf = b""
        self._err = _stderr_file()
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        me = os.getpid()
        try:
            # Started before this process imports torch (one thread: preexec_fn is safe), with a
            # parent-death signal: it never outlives the trace's process, however that one ends.
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "warmprof", *argv, "--control-fds", f"{to_child_r},{from_child_w}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._err, env=env,
                pass_fds=(to_child_r, from_child_w), preexec_fn=lambda: die_with(me))
        except OSError as e:
            self.failed = f"the control process could not start ({e})"
        finally:
            os.close(to_child_r)
            os.close(from_child_w)

    # phases
    def run_clean(self, timeout_s: float = READY_TIMEOUT_S, spin: bool = False) -> Clean | None:
        """Wait until the control has built the model, then have it run its clean first pass and
        steady passes (the trace's process waits meanwhile). spin: wait on the CPU (polling), not
        asleep: the trace's own first pass comes next, and a pass after its thread slept pays 1-3 ms
        more on a small model (the CPU went idle), which would be booked as warmprof's own cost;
        only where the control has CPUs of its own (spin_wait_fits)."""
        if self._get("ready", timeout_s, spin) is None:
            return None
        self._send({"do": "clean"})
        got = self._get("clean", timeout_s, spin)
        if got is not None:
            self.clean = Clean(float(got["first_pass_ms"]), [float(t) for t in got["steady_ms"]],
                               dict(got.get("first", {})), dict(got.get("steady", {})), got.get("other_shape"),
                               str(got.get("other_shape_refused", "")), got.get("after_pause_ms"), got.get("at_once"),
                               got.get("generate"))
        return self.clean

    def run_warm(self, calibration: dict[str, Any], timeout_s: float) -> WarmControl | None:
        """Have the control run the warm control at this calibration; its figures, or None."""
        if self.clean is None:
            return None
        self._send({"do": "warm", "calibration": calibration})
        got = self._get("warm", timeout_s)
        if got is not None:
            self.warm = WarmControl(float(got["first_pass_ms"]), list(got["causes"]), list(got.get("where", [])),
                                    list(got.get("generate", [])))
        return self.warm

    def close(self) -> None:
        """Stop the control (it exits by itself once told; a stuck one is killed)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                self._send({"do": "stop"})
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                stop(proc)  # it and what the model started in it
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._to_child = self._from_child = -1
        self._err.close()

    # messages
    def _send(self, msg: dict[str, Any]) -> None:
        if self.failed or self._to_child < 0:
            return
        try:
            os.write(self._to_child, (json.dumps(msg) + "\n").encode())
        except OSError as e:  # it died: _get says how
            self.failed = self.failed or f"the control process stopped listening ({e})"

    def _get(self, what: str, timeout_s: float, spin: bool = False) -> dict[str, Any] | None:
        if self.failed:
            return None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self._fail(f"the control process took over {timeout_s:.0f} s to send its {what} figures")
                return None
            ready, _, _ = select.select([self._from_child], [], [], 0 if spin else left)
            if not ready:
                continue
            chunk = os.read(self._from_child, 65536)
            if not chunk:
                self._fail(f"the control process ended before sending its {what} figures")
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except ValueError:
            self._fail(f"the control process sent an unreadable message instead of its {what} figures")
            return None
        if "error" in msg:
            self._fail(f"the control process failed: {msg['error']}")
            return None
        if what not in msg:
            self._fail(f"the control process sent {sorted(msg)} instead of its {what} figures")
            return None
        return msg[what]

    def _fail(self, why: str) -> None:
        tail = ""
        if self._proc is not None and self._proc.poll() is not None:
            with contextlib.suppress(OSError):
                self._err.seek(0)
                lines = self._err.read().decode(errors="replace").strip().splitlines()
                tail = f" (exit {self._proc.returncode}{': ' + lines[-1] if lines else ''})"
        self.failed = why + tail
        if self._proc is not None and self._proc.poll() is None:
            stop(self._proc)


@contextlib.contextmanager
def attached(control: "ControlProcess | str") -> Iterator[None]:
    """warmprof.trace() inside the block drives `control` (the CLI's fresh-process trace), or, given a
    sentence, runs without one and says why (--no-control)."""
    token = _current.set(control)
    try:
        yield
    finally:
        _current.reset(token)


def current() -> ControlProcess | None:
    got = _current.get()
    return got if isinstance(got, ControlProcess) else None


def why_none() -> str:
    """Why a trace in this context has no control ("" when it has one)."""
    got = _current.get()
    if isinstance(got, ControlProcess):
        return got.failed
    return got


def in_warm_control() -> bool:
    """True inside the control process's warm control: its trace measures no own steady cost."""
    return _in_warm_control.get()


def fold_controls(report: Any) -> None:
    """fold() with this context's control: its clean pass and warm control, or the reason there is none."""
    ctl = current()
    fold(report, ctl.clean if ctl else None, ctl.warm if ctl else None, why_none())


def control_env(cache: str) -> dict[str, str] | None:
    """The control's environment: with fresh caches, caches of its own (empty, under this process's
    fresh temp folder, which the parent removes), so nothing the trace compiles is found there."""
    if cache != "fresh":
        return None
    from .child import fresh_env

    from ..system.fileio import make_temp_folder

    return fresh_env(make_temp_folder("control-", "the control process's caches"))


# ---- the control's side ---------------------------------------------------------------------------


def serve(fds: str, load: Any, *, device: str, threads: int | None, shape: Any, inputs: Any, dtype: Any,
          model_dtype: Any, compile: Any, op_view: bool, warm_shape: str | None = None, generate: int | None = None,
          kv_cache: str | None = None) -> int:
    """The control process's whole life (`warmprof trace ... --control-fds R,W`): `load()` builds
    the model and its inputs spec; then the phases the trace's process asks for, one message each."""
    try:
        r, w = (int(x) for x in fds.split(","))
    except ValueError:
        raise InputError(f"--control-fds takes two descriptors, R,W: got {fds!r}") from None
    out = os.fdopen(w, "w", buffering=1)
    incoming = os.fdopen(r, "r")

    def send(msg: dict[str, Any]) -> None:
        out.write(json.dumps(msg) + "\n")

    try:
        import torch

        if threads is not None:
            torch.set_num_threads(threads)
        from . import api
        from .compile_options import calls_per_pass, compile_model, repeated
        from .inputs import cast_model, make_inputs, parse_device, parse_model_dtype
        from .. import devices

        model, spec = load()
        if warm_shape:  # as the trace's process does before its trace (--warm-shape)
            from .warm_process import warm_run

            warm_run(torch, model, warm_shape, dtype, device, model_dtype)
        dev = parse_device(device)
        kind = devices.of(dev)
        if not kind.host and isinstance(model, torch.nn.Module):
            model = model.to(dev)
        model = cast_model(model, parse_model_dtype(model_dtype))
        args, kwargs, _ = make_inputs(model, shape if spec is None else None, dtype, spec, dev)
        other = None
        if generate is not None:  # a generation has no other-shape pass: its phases are the figures
            pass
        elif spec is None and shape is not None:  # the other-shape pass: one more in the batch dimension
            from .explain import other_shape
            from .inputs import parse_shape

            other = make_inputs(model, tuple(other_shape(list(parse_shape(shape)))), dtype, None, dev)[:2]
        elif spec is not None:  # given inputs: each tensor one row longer in its batch dimension, where they share one
            other = other_inputs(torch, args, kwargs)
        # a pass is as many calls as the trace's (cudagraph trees: calls 1+2 are the cold start)
        gen = None
        if generate is not None:  # the trace's call: one generation, its steps stamped (traces/generate.py)
            from .generate import Generation, check_generate

            gen = Generation(model, check_generate(generate, kv_cache, model) or generate, compile, kv_cache)
            runner = gen
        else:
            runner = repeated(compile_model(model, compile), calls_per_pass(compile, dev))
        sync = kind.sync(dev)

        def clean_run(at_once: bool) -> dict[str, Any]:
            if gen is None:
                return dict(_clean(torch, runner, args, kwargs, sync, other), at_once=at_once)
            from .generate import clean_phases

            with gen:  # hooked (and its forward compiled) for the clean calls only: the warm control hooks afresh
                got = dict(_clean(torch, runner, args, kwargs, sync, other), at_once=at_once)
            calls = gen.take()
            got["generate"] = clean_phases(calls[0], calls[1:1 + len(got["steady_ms"])])
            return got

        send({"ready": {}})
        # With a core to itself, the clean phase runs at once, right after the build as in a plain
        # script: a pass after any pause (waiting for the trace's process) pays 1-3 ms more on a
        # small model, which would read as a first-call cost. Its own wait for a CPU is measured.
        from ..system.platform import usable_cpus

        # the affinity mask, capped by a cgroup CPU quota: a CPU for each of the pass's threads and one
        # more for the trace's process, which is importing torch and building its own model meanwhile
        # (at 2 threads on 2 CPUs the demo's clean pass waited 56 ms for a CPU, booked as the machine's load)
        at_once = usable_cpus()[0] >= torch.get_num_threads() + 1
        clean = clean_run(True) if at_once else None
        for line in incoming:
            msg = json.loads(line)
            if msg.get("do") == "clean":
                send({"clean": clean if clean is not None else clean_run(False)})
            elif msg.get("do") == "warm":
                send({"warm": _warm(api, model, args, kwargs, device, compile, op_view, msg["calibration"],
                                    generate, kv_cache)})
            else:
                break
        return 0
    except BaseException as e:  # the trace's process says why; this process just ends
        with contextlib.suppress(Exception):
            send({"error": f"{type(e).__name__}: {e}"})
        return 1


def _thread_usage() -> dict[str, float] | None:
    """This thread's CPU time (ns, CLOCK_THREAD_CPUTIME_ID: exact where rusage's lags by a tick),
    voluntary switches, major faults and block reads so far (getrusage RUSAGE_THREAD); None where
    there is no per-thread rusage (macOS)."""
    import resource

    who = getattr(resource, "RUSAGE_THREAD", None)
    if who is None:
        return None
    ru = resource.getrusage(who)
    return {"cpu_ns": time.thread_time_ns(), "voluntary": ru.ru_nvcsw, "major_faults": ru.ru_majflt,
            "blocks_in": ru.ru_inblock}


def _off_cpu(t0: int, t1: int, d0: int | None, d1: int | None, u0: dict | None, u1: dict | None) -> dict[str, Any]:
    """One pass's wall time split into its thread's CPU time, its wait for a CPU and its time off the
    CPU, with the major faults and block reads over it. schedstat's run-queue delay is added when the
    thread next gets a CPU, so a read can hold a delay from before the window or miss one from inside
    it: it is capped at the wall time less the CPU time, and off-CPU time with no voluntary switch
    (the thread never blocked) is a wait for a CPU whose accounting came late, not a wait."""
    out: dict[str, Any] = {}
    wall = t1 - t0
    delay = (d1 - d0) if d0 is not None and d1 is not None else None
    if u0 is None or u1 is None:
        if delay is not None:
            out["run_delay_ms"] = max(0, delay) / 1e6
        return out
    cpu = u1["cpu_ns"] - u0["cpu_ns"]
    idle = max(0, wall - cpu)  # neither running nor ... : waiting for a CPU or off it
    delay = min(max(0, delay), idle) if delay is not None else 0
    off = idle - delay
    blocked = u1["voluntary"] - u0["voluntary"]
    if blocked <= 0:  # never blocked: all of it waited for a CPU
        delay, off = idle, 0
    out.update(cpu_ms=cpu / 1e6, run_delay_ms=delay / 1e6, off_cpu_ms=off / 1e6, voluntary_switches=int(blocked),
               major_faults=int(u1["major_faults"] - u0["major_faults"]),
               blocks_in=int(u1["blocks_in"] - u0["blocks_in"]))
    return out


def _timed(runner: Any, args: tuple, kwargs: dict, sync: Any) -> tuple[float, dict[str, Any], Any]:
    """One pass with nothing but the pass timer: (ms, its _off_cpu split, the output). The thread's
    run-queue delay and rusage are read around the pass, outside it."""
    from .. import _native
    from .api import _run_delay_ns

    d0, u0 = _run_delay_ns(), _thread_usage()
    t0 = _native.now_ns()
    out = runner(*args, **kwargs)
    sync()
    t1 = _native.now_ns()
    d1, u1 = _run_delay_ns(), _thread_usage()
    return (t1 - t0) / 1e6, _off_cpu(t0, t1, d0, d1, u0, u1), out


def other_inputs(torch: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """Given inputs at another shape: every tensor argument (positional or keyword) one row longer in
    its first dimension (its first row repeated), where all of them have a first dimension of one
    size (a batch); anything else as it is. None where there is no such batch to grow."""
    tensors = [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)]
    if not tensors or any(t.dim() == 0 for t in tensors) or len({int(t.shape[0]) for t in tensors}) != 1:
        return None
    if int(tensors[0].shape[0]) == 0:
        return None

    def grow(v: Any) -> Any:
        return torch.cat([v, v[:1]]) if isinstance(v, torch.Tensor) else v

    return tuple(grow(v) for v in args), {k: grow(v) for k, v in kwargs.items()}


def _clean(torch: Any, runner: Any, args: tuple, kwargs: dict, sync: Any,
           other: tuple[tuple, dict] | None = None) -> dict[str, Any]:
    """The clean first pass and steady passes: the pass timer only, and around each pass (outside
    it) the thread's run-queue delay and rusage, so what the headline pass waited is known. Then,
    given `other` (the inputs at another shape), that shape's first pass and a few steady passes:
    what the model pays again at a new shape in a process that already ran it (the rest of the
    clean excess is paid once per process, whatever the shape). Last, a few warm passes at the traced
    inputs, each after a short sleep: what a pass after other work pays over back-to-back ones."""
    from .api import _check_output

    def one(a: tuple = args, kw: dict = kwargs) -> tuple[float, dict[str, Any], Any]:
        return _timed(runner, a, kw, sync)

    with torch.no_grad():
        first_ms, first_split, out = one()
        _check_output(out)
        del out
        steady_ms: list[float] = []
        splits: list[dict[str, Any]] = []
        deadline = time.monotonic() + CLEAN_STEADY_BUDGET_S
        while len(steady_ms) < CLEAN_STEADY[1]:
            ms, split, _ = one()
            steady_ms.append(ms)
            splits.append(split)
            if len(steady_ms) >= CLEAN_STEADY[0] and time.monotonic() > deadline:
                break
        again, refused = None, ""
        if other is not None:
            try:
                o_first, o_split, out = one(*other)
                del out
                o_steady = [one(*other)[0] for _ in range(OTHER_STEADY)]
            except Exception as e:  # a model that takes only its own batch size: no other-shape pass
                refused = f"{type(e).__name__}: {e}"[:300]
            else:
                again = {"first_pass_ms": o_first, "steady_median_ms": median(o_steady), "first": o_split,
                         "excess_ms": o_first - median(o_steady),
                         "shape": [list(x.shape) for x in (*other[0], *other[1].values()) if hasattr(x, "shape")][:1]}
    steady_split = {k: median([s[k] for s in splits]) for k in ("run_delay_ms", "off_cpu_ms")
                    if splits and all(k in s for s in splits)}
    out_d = {"first_pass_ms": first_ms, "steady_ms": steady_ms, "first": first_split, "steady": steady_split}
    if again is not None:
        out_d["other_shape"] = again
    if refused:
        out_d["other_shape_refused"] = refused
    paused = []
    for _ in range(AFTER_PAUSE_PASSES):  # last: warm passes at the traced inputs, each after a short sleep
        time.sleep(AFTER_PAUSE_S)
        paused.append(one()[0])
    out_d["after_pause_ms"] = paused
    return out_d


def _warm(api: Any, model: Any, args: tuple, kwargs: dict, device: str, compile: Any, op_view: bool,
          calibration: dict[str, Any], generate: int | None = None, kv_cache: str | None = None) -> dict[str, Any]:
    """The trace's protocol on the model already warm, instruments fresh, at the trace's calibration."""
    from ..instruments.torch_cuda import CudnnFind
    from . import calibrate

    calibrate.seed(calibrate.MachineCosts.from_dict(calibration))
    CudnnFind.already_called()  # the clean pass ran the model here: cuDNN's first call is behind it
    token = _in_warm_control.set(True)
    try:
        report = api.trace(model, inputs=kwargs if kwargs else args, device=device, compile=compile,
                           steady=CONTROL_STEADY, op_view=op_view, generate=generate, kv_cache=kv_cache)
    finally:
        _in_warm_control.reset(token)
    return {"first_pass_ms": report.own_cost["instrumented_first_pass_ms"],
            "causes": [{"cause": c.cause, "source": c.source, "ms": c.ms, "module": c.module} for c in report.causes],
            "where": [{"module": w["module"], "ms": w["ms"], **({"op": w["op"]} if "op" in w else {})}
                      for w in report.unattributed_where],
            "generate": [{"phase": row["phase"], "causes": [{k: c[k] for k in ("cause", "source", "ms")} for c in row["causes"]]}
                         for row in (report.generate or {}).get("phases", [])]}


# ---- folding the controls into the report ----------------------------------------------------------


def fold(report: Any, clean: Clean | None, warm: WarmControl | None, why_not: str = "") -> None:
    """The report's headline and causes from the controls (see the module's docstring); with no
    clean pass, from the instrumented pass less warmprof's estimated own cost. Data only."""
    from .advice import advise
    from .build import first_call_residual_note, share_of

    instrumented_first = report.first_pass_ms
    instrumented_excess = report.excess_ms
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
        own["in_headline_ms"] = own_steady_estimate
        report.excess_ms = instrumented_excess - own_steady_estimate
        report.clean = None
        notes.append(NOTE_PREFIX + (why_not or "none") + ": the excess is the instrumented first pass's less "
                     f"warmprof's estimated own cost ({own_steady_estimate:.2f} ms, from warm instrumented passes); "
                     "its instruments' cold paths on this first pass (their first calls, buffers and imports) are not "
                     "measured apart and may be booked as the model's causes. `warmprof trace` on the command line "
                     "measures the model's first pass clean in a second fresh process and warmprof's own first-pass "
                     "cost on the model warm")
    if warm is not None:
        base = clean.steady_median_ms if clean is not None else report.steady_median_ms
        own["first_pass_ms"] = warm.first_pass_ms - base
        own["first_pass_how"] = ("the warm control: the same instrumented passes in the second process on the model "
                                 "already run at this shape, its first pass less the clean steady median (measured)")
        own["booked_in_control_ms"] = sum(x["ms"] for x in warm.causes
                                          if x["cause"] not in (Name.PROFILER_OVERHEAD, Name.UNATTRIBUTED))
        causes = _less(causes, warm.causes)
        report.unattributed_where = _where_less(report.unattributed_where, warm.where)
    if clean is not None and clean.other_shape_refused:
        notes.append(NOTE_PREFIX + "no other-shape pass: the model refused its inputs one row longer in the batch "
                     f"dimension ({clean.other_shape_refused}), so what the process pays once whatever the shape is "
                     "not told apart")
    if clean is not None:
        causes = _as_clean_pass_waited(causes, clean)
        if clean.other_shape:
            causes = _once_per_process(report, causes, clean)
    if warm is None and clean is not None:
        notes.append(NOTE_PREFIX + "no warm control (" + (why_not or "not run") + "): the causes are the instrumented "
                     "pass's, warmprof's own first-call work included")
    report.own_cost = own
    if getattr(report, "generate", None):
        from .generate import fold_controls as fold_generate

        fold_generate(report.generate, clean.generate if clean is not None else None,
                      warm.generate if warm is not None else None, _less)
    settings = getattr(report, "settings", None)
    if settings is not None:  # which controls ran: a setting that changes what is measured
        ran = [{"name": "clean_first_pass", "process": "control"}] if clean is not None else []
        if clean is not None and clean.other_shape:
            ran.append({"name": "other_shape", "shape": (clean.other_shape.get("shape") or [None])[0]})
        if warm is not None:
            ran.append({"name": "warm_control", "process": "control"})
        settings.controls = ran
    attributed = sum(c.ms for c in causes)
    report.attributed_ms = attributed
    report.unattributed_ms = report.excess_ms - attributed
    for c in causes:
        c.share = share_of(c.ms, report.excess_ms, attributed)
    report.causes = sorted(causes, key=lambda c: -c.ms)
    report.verdict = verdict(report)
    if report.protocol is not None:
        report.protocol.unattributed_within_noise = abs(report.unattributed_ms) <= report.noise_band_ms
        residual_rerun = report.protocol.seen_rerun_residual_ms
        for i, note in enumerate(report.notes):
            if note.startswith("first-call work no instrument brackets") and residual_rerun is not None:
                report.notes[i] = first_call_residual_note(report.unattributed_ms, residual_rerun, report.noise_band_ms)
    report.notes.extend(notes)
    report.advice = advise(report)


OFF_CPU_FLOOR_MS = 0.05  # the clean pass's time off the CPU beyond its steady passes' below this is no wait


def _as_clean_pass_waited(causes: list[Any], clean: Clean) -> list[Any]:
    """The machine-level causes as the clean pass met them: the headline is that pass, so its own
    wait for a CPU is the cpu_contention (the traced pass's is the trace process's, not the
    headline's), and its own time off the CPU bounds the waits and disk reads the traced pass
    booked by module; what the clean pass waited beyond them is booked for the whole pass."""
    from ..report import CauseEntry

    first, steady = clean.first, clean.steady
    out = [e for e in causes if e.cause != Name.CPU_CONTENTION]
    if "run_delay_ms" in first:
        waited = first["run_delay_ms"] - steady.get("run_delay_ms", 0.0)
        if waited >= 1e-3:
            out.append(CauseEntry(cause=Name.CPU_CONTENTION, ms=waited, share=0.0, evidence="measured",
                                  source="run_queue:clean_pass", count=1,
                                  detail=f"the clean first pass's thread waited {first['run_delay_ms']:.2f} ms for a "
                                         f"CPU (schedstat), its steady passes {steady.get('run_delay_ms', 0.0):.2f} ms "
                                         "each (median): the machine's load, not the model's"))
    if "off_cpu_ms" not in first:
        return out
    off = max(0.0, first["off_cpu_ms"] - steady.get("off_cpu_ms", 0.0))
    booked = [e for e in out if e.cause in (Name.WAIT, Name.DISK_READ)]
    total = sum(e.ms for e in booked)
    if total > off:  # the traced pass waited more than the headline's: as much as the headline did
        for e in booked:
            e.ms *= off / total if total > 0 else 0.0
        out = [e for e in out if e.ms >= 1e-3]
    elif off - total > OFF_CPU_FLOOR_MS:
        # Only what the traced pass's causes leave of the headline excess: a compile waits off the CPU for
        # its compiler's processes (inductor's C++ builds), and that wait is already the compile's time in
        # the traced pass (a compiled Llama's 28 s of it was booked a second time as disk_read)
        room = max(0.0, clean.excess_ms - sum(e.ms for e in out if e.cause not in (Name.PROFILER_OVERHEAD,
                                                                               Name.UNATTRIBUTED)))
        if min(off - total, room) <= OFF_CPU_FLOOR_MS:
            return out
        capped = off - total > room
        reads = first.get("major_faults", 0) + first.get("blocks_in", 0)
        cause = Name.DISK_READ if reads else Name.WAIT
        what = (f"{first.get('major_faults', 0)} major faults and {first.get('blocks_in', 0)} blocks read from storage"
                if reads else "no page read from storage: a sleep, a lock, a socket or a remote store")
        said = (f"; capped at the {room:.2f} ms of the excess the other causes leave (the rest of it is inside what "
                "they booked, e.g. a compile waiting for its compiler)" if capped else "")
        out.append(CauseEntry(cause=cause, ms=min(off - total, room), share=0.0, evidence="measured",
                              source="off_cpu:clean_pass", count=reads,
                              detail=f"the clean first pass was off the CPU {first['off_cpu_ms']:.2f} ms (wall less its "
                                     f"thread's CPU time and run-queue delay; steady passes {steady.get('off_cpu_ms', 0.0):.2f} "
                                     f"ms), {off - total:.2f} ms of it beyond what the traced pass booked by module; "
                                     f"{what}{said}"))
    return out


ONCE_SOURCE = "warm_process"  # explain.WARM_SOURCE: what a process that ran another shape first did not pay again


def _waited_ms(split: dict[str, Any], steady: dict[str, Any]) -> float:
    """What a pass waited (for a CPU and off it) beyond a steady pass."""
    return (split.get("run_delay_ms", 0.0) + split.get("off_cpu_ms", 0.0)
            - steady.get("run_delay_ms", 0.0) - steady.get("off_cpu_ms", 0.0))


def _once_per_process(report: Any, causes: list[Any], clean: Clean) -> list[Any]:
    """What the clean first pass paid beyond the other-shape pass after it (both net of their waits):
    what the process pays once whatever the shape (the first run of torch's and the model's code,
    its pages, lazy set-up). The part no booked runtime_init holds, up to the unattributed time and
    only outside the noise band, is booked as runtime_init, inferred, placed over the modules'
    unattributed rows in proportion (their warm_process_ms)."""
    from ..report import CauseEntry

    other = clean.other_shape or {}
    once = ((clean.excess_ms - _waited_ms(clean.first, clean.steady))
            - (float(other.get("excess_ms", 0.0)) - _waited_ms(other.get("first", {}), clean.steady)))
    if once <= report.noise_band_ms:
        return causes
    booked = sum(e.ms for e in causes if e.cause == Name.RUNTIME_INIT)
    free = clean.excess_ms - sum(e.ms for e in causes)
    left = min(free, once - booked)
    if left < 1e-3:
        return causes
    rows = [w for w in report.unattributed_where if float(w.get("ms", 0.0)) > 0]
    weight = sum(float(w["ms"]) for w in rows)
    for w in rows:
        w["warm_process_ms"] = w.get("warm_process_ms", 0.0) + min(float(w["ms"]), left * float(w["ms"]) / weight)
    shape = "x".join(str(d) for d in (other.get("shape") or [[]])[0])
    causes.append(CauseEntry(
        cause=Name.RUNTIME_INIT, ms=left, share=0.0, evidence="inferred", source=ONCE_SOURCE,
        module=rows[0]["module"] if rows else "", count=len(rows),
        detail=f"the clean first pass paid {once:.2f} ms more over its steady passes than a first pass at {shape or 'another shape'} "
               f"right after it (both without their waits): what this process pays once whatever the shape (the first run of "
               f"torch's and the model's code and its pages, lazy set-up); {left:.2f} ms of it beyond the runtime_init booked "
               "from counts, placed over the modules' unattributed time in proportion (inferred: two clean passes compared)"))
    return causes


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
    """Take `take` ms off `entries` in proportion to their size (at most all of them); what was taken."""
    total = sum(e.ms for e in entries)
    if total <= 0 or take <= 0:
        return 0.0
    cut = min(take, total)
    for e in entries:
        part = cut * e.ms / total
        e.ms -= part
        said = f"less {part:.2f} ms the warm control booked (warmprof's own first-call work)"
        e.detail = f"{e.detail}; {said}" if e.detail else said
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


NO_COST = "no_first_call_cost"
FIRST_CALL_COST = "first_call_cost"
FASTER = "first_pass_faster"


def after_pause_ms(report: Any) -> float:
    """The least a warm pass after a short pause paid over the back-to-back steady passes
    (report.clean's after_pause, measured by the control); 0 where none was measured or it paid nothing."""
    clean = getattr(report, "clean", None)
    pause = clean.get("after_pause") if isinstance(clean, dict) else None
    try:
        return max(0.0, float(pause["excess_ms"])) if isinstance(pause, dict) else 0.0
    except (KeyError, TypeError, ValueError):
        return 0.0


def no_cost_bound_ms(report: Any) -> float:
    """The most a first pass may exceed the steady median and still show no first-call cost: the
    steady passes' noise band, plus the least a warm pass after a short pause paid (every first pass
    comes after other work; steady passes come back to back)."""
    return report.noise_band_ms + after_pause_ms(report)


def verdict(report: Any) -> str:
    """What the measured excess says: a first-call cost (beyond the steady passes' noise band and the
    least a warm pass after a pause pays, once the first pass's measured wait for a CPU is left out),
    none at this shape (within that), or a first pass faster than steady (noise too)."""
    # the first pass's measured wait for a CPU (a busy machine's, not the model's) is left out first
    waited = sum(c.ms for c in report.causes if c.cause == Name.CPU_CONTENTION and c.evidence == "measured")
    if report.excess_ms - waited > no_cost_bound_ms(report):
        return FIRST_CALL_COST
    return NO_COST if report.excess_ms >= -report.noise_band_ms else FASTER



def _stderr_file() -> Any:
    """Where the control's stderr goes, for its last line when it fails: a temporary file, or
    /dev/null where no temp folder is writable (the control then fails without its last line)."""
    try:
        return tempfile.TemporaryFile()
    except OSError:
        return open(os.devnull, "w+b")

__all__ = ["Clean", "ControlProcess", "WarmControl", "attached", "control_env", "current", "fold", "fold_controls",
           "after_pause_ms", "in_warm_control", "no_cost_bound_ms", "other_inputs", "serve", "verdict", "why_none"]

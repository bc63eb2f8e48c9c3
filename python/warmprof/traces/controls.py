"""The controls a fresh-process trace measures beside its traced first pass: the model's own first
pass, clean, and warmprof's own first-pass cost, measured on the model warm.

A second fresh process (the control) builds the same model on the same inputs as the trace's own
process. The two take turns over the whole protocol, set-up included, whatever the CPU count: one
waits (asleep, or blocked on its pipe) while the other works, so no pass and no set-up step of one
runs beside the other's work, and what a pass waited for a CPU is the machine's other work:

    control:  import torch, build the model, the clean first pass (no instrument but the pass timer),
              clean steady passes, a first pass and a few steady passes at each of OTHER_SHAPES
              other shapes, warm passes after a short pause    (the trace's process waits, before
              it imports torch)
    trace:    import torch, build the model (the set-up's steps), the instrumented first pass, seen
              re-run, steady passes, calibration               (the control waits)
    control:  the warm control: the trace's instrumented passes on the model already run at this
              shape, with instruments fresh in that process, attributed at the trace's calibration

The control keeps its copy of the model for the warm control, so a default trace holds the model twice
at once. With its clean figures the control says what it holds (control_serve.memory_held: the model's
bytes, its own resident memory), and the trace's process, before it imports torch and builds its own
copy, checks that a second copy fits in what is left (check_room): where it does not, the trace stops there
with an error that names --no-control (one copy), rather than swapping or being killed halfway
(docs/how-it-measures.md, "Two copies of the model").

The headline is the clean first pass less its steady median (the model's own excess, what a user
without warmprof pays); the model's causes are what the instrumented cold pass booked less what
the warm control booked (warmprof's own first-call work looks like causes there: its buffers'
page faults, its code's pages, the imports its instruments make); warmprof's own cost is its own
line (the warm control's first pass over the steady median, and the instruments' cost per steady
pass), never a cause. A trace in the caller's process (warmprof.trace() from Python) has no
control: its own cost there is the estimate from warm instrumented passes, taken out of the
excess, and the notes say what it could not control.

This module is the trace's side (the control process as seen from the trace, and the figures it
sends); the control's own side is control_serve.py, and folding the figures into the report, with the
one accounting, is fold.py.

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
from ..errors import InputError, WarmprofError
from ..stats import median
from ..system.launch import option, python_argv, with_options
from ..system.supervise import die_with, stop

# How long the control may take to import torch, build the model and run its clean phase (the first pass,
# steady passes, other shapes; a compile under load included), and then its warm control at most
# PHASE_FACTOR x the trace's own time plus PHASE_MARGIN_S.
READY_TIMEOUT_S = 1200.0
PHASE_FACTOR, PHASE_MARGIN_S = 4.0, 60.0  # a phase may take this many times the trace's own, plus this
CLEAN_STEADY = (10, 40)  # the control's clean steady passes: at least, at most...
CLEAN_STEADY_BUDGET_S = 0.35  # ...within this (past the minimum)
# Other shapes the control runs after its steady passes (a dimension after the batch 1, 2, ... smaller, or
# 1, 2, ... more in the batch dimension where the model refuses that: explain.control_other_shapes), each new to
# the process: a first pass and OTHER_STEADY steady passes (its excess is the first against their median).
# What the traced shape's first pass paid beyond each is paid once per process; several say how many agree.
OTHER_SHAPES = 3
OTHER_STEADY = 2
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
    # the first other-shape pass (_clean): first_pass_ms, steady_median_ms, excess_ms, shape; None where the
    # inputs have no batch dimension to grow (given inputs: other_inputs) or the model refused every other shape
    other_shape: dict[str, Any] | None = None
    other_shape_refused: str = ""  # why the model ran no pass at the other shape (what it raised)
    # warm passes at the traced inputs, each after a short sleep (ms): what a pass after other work pays
    after_pause_ms: list[float] | None = None
    generate: dict[str, Any] | None = None  # a generate trace's clean phases (traces/generate.clean_phases)
    # every other-shape pass, other_shape first (each as other_shape)
    other_shapes: list[dict[str, Any]] = field(default_factory=list)
    # each steady pass less what it waited for a CPU and off it (ms): a spread load does not widen as it widens
    # the wall times
    steady_net_ms: list[float] = field(default_factory=list)
    # the after-pause passes less what each waited for a CPU and off it (ms)
    after_pause_net_ms: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.other_shape and not self.other_shapes:
            self.other_shapes = [self.other_shape]

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
                    **({"net_excess_ms": min(self.after_pause_net_ms) - median(self.steady_net_ms)}
                       if self.after_pause_net_ms and self.steady_net_ms else {}),
                    "how": f"warm passes at the traced inputs, each after a {AFTER_PAUSE_S * 1000:.0f} ms sleep, the least "
                           "of them less the steady median: what a pass pays for coming after other work (caches, branch "
                           "predictors, the clock), as a first pass does while steady passes come back to back; not a "
                           "first call (measured)"}}
                   if self.after_pause_ms else {}),
                **({"other_shapes": [dict(o) for o in self.other_shapes]} if len(self.other_shapes) > 1 else {}),
                **({"steady_net_band_ms": steady_stats(self.steady_net_ms).noise_band} if self.steady_net_ms else {}),
                **({"generate": dict(self.generate)} if self.generate else {}),
                "how": "the model's first pass in a second fresh process with no instrument but the pass timer, right "
                       "after its build, while the trace's process waited (the two take turns), less the median of "
                       "that process's steady passes (measured)"}


@dataclass
class WarmControl:
    """What the trace's instrumented passes booked on the model already warm (the control's
    report of it), and that first pass's time (ms)."""

    first_pass_ms: float
    causes: list[dict[str, Any]]  # {"cause", "source", "ms", "module"} as the control's report booked them
    where: list[dict[str, Any]] = field(default_factory=list)  # its unattributed_where rows {"module", "ms"}
    generate: list[dict[str, Any]] = field(default_factory=list)  # a generate trace's phases: {"phase", "causes"}


# ---- the trace's side -----------------------------------------------------------------------------


class ControlProcess:
    """The control process, seen from the trace's process: started first, it imports torch, builds
    the model and runs its clean phase while the trace's process waits (run_clean), then waits itself
    until asked for the warm control. Every wait has a time limit; a
    failure becomes `self.failed` (a sentence) and the trace goes on without the control."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.failed = ""
        self.held: dict[str, Any] | None = None  # what the control holds after its clean phase (control_serve.memory_held)
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
                python_argv("warmprof", with_options(argv, option("control-fds", f"{to_child_r},{from_child_w}"))),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._err, env=env,
                pass_fds=(to_child_r, from_child_w), preexec_fn=lambda: die_with(me))
        except OSError as e:
            self.failed = f"the control process could not start ({e})"
        except BaseException:  # Ctrl-C, SIGTERM while it starts: nothing of it stays open
            for fd in (self._to_child, self._from_child):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._err.close()
            raise
        finally:
            os.close(to_child_r)
            os.close(from_child_w)

    # phases
    def run_clean(self, timeout_s: float = READY_TIMEOUT_S) -> Clean | None:
        """Wait, asleep, while the control imports torch, builds the model and runs its clean first pass,
        steady passes, other-shape passes and after-pause passes (it does all that as soon as it starts);
        its figures, or None (self.failed says why). The trace's process calls this before its own
        set-up, so the two never work side by side. Then the check that the traced process's copy of
        the model fits beside the control's (check_room: a WarmprofError naming --no-control where it
        does not), on what the control held after its clean phase (sent with the figures)."""
        got = self._get("clean", timeout_s)
        if got is not None and isinstance(got.get("held"), dict):
            self.held = dict(got["held"])
            check_room(self.held)
        if got is not None:
            self.clean = Clean(float(got["first_pass_ms"]), [float(t) for t in got["steady_ms"]],
                               dict(got.get("first", {})), dict(got.get("steady", {})), got.get("other_shape"),
                               str(got.get("other_shape_refused", "")), got.get("after_pause_ms"),
                               got.get("generate"), list(got.get("other_shapes", [])),
                               [float(t) for t in got.get("steady_net_ms", [])],
                               [float(t) for t in got.get("after_pause_net_ms", [])])
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

    def _get(self, what: str, timeout_s: float) -> dict[str, Any] | None:
        if self.failed:
            return None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self._fail(f"the control process took over {timeout_s:.0f} s to send its {what} figures")
                return None
            ready, _, _ = select.select([self._from_child], [], [], left)
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


def check_room(held: dict[str, Any], available: tuple[int, str] | None = None) -> None:
    """Before the traced process builds its copy of the model: a default trace holds it twice at once
    (the control's copy, built first and kept for the warm control, beside the traced one). Where the
    second copy does not fit (the host: the memory available now, the control's copy already in use,
    against what the control process holds of its own, at least the model's parameters and buffers;
    a CUDA device: its free memory against the model's bytes there), a WarmprofError that names
    --no-control, before the traced process builds anything. `available`: (bytes, where from), read
    here when None (system/memory.available_bytes)."""
    from ..system.memory import available_bytes, gib

    model = int(held.get("model_bytes") or 0)
    need = max(model, int(held.get("process_bytes") or 0))
    if available is None:
        available = available_bytes()
    advice = ("trace with --no-control to hold one copy (no clean control process: the excess is then the "
              "instrumented pass's less an estimate of warmprof's own cost), or free memory")
    if available is not None and need > available[0]:
        what = (f"the model's parameters and buffers {gib(model)}, that process {gib(need)} in all" if model
                else f"that process {gib(need)}")
        raise WarmprofError(f"not enough memory for a second copy of the model: a trace holds it twice at once, "
                            f"and the control process holds its copy ({what}), while {gib(available[0])} is "
                            f"available ({available[1]}); {advice}")
    free, on_device = held.get("device_free_bytes"), int(held.get("device_model_bytes") or 0)
    if free is not None and on_device > int(free):
        raise WarmprofError(f"not enough memory on {held.get('device', 'the device')} for a second copy of the "
                            f"model: a trace holds it twice at once, and the control process holds its copy there "
                            f"({gib(on_device)} of parameters and buffers), while {gib(int(free))} is free; {advice}")


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



def control_env(cache: str) -> dict[str, str] | None:
    """The control's environment: with fresh caches, caches of its own (empty, under this process's
    fresh temp folder, which the parent removes), so nothing the trace compiles is found there."""
    if cache != "fresh":
        return None
    from .child import fresh_env

    from ..system.fileio import make_temp_folder

    return fresh_env(make_temp_folder("control-", "the control process's caches"))




def _stderr_file() -> Any:
    """Where the control's stderr goes, for its last line when it fails: a temporary file, or
    /dev/null where no temp folder is writable (the control then fails without its last line)."""
    try:
        return tempfile.TemporaryFile()
    except OSError:
        return open(os.devnull, "w+b")


__all__ = ["AFTER_PAUSE_PASSES", "AFTER_PAUSE_S", "CLEAN_STEADY", "CONTROL_STEADY", "Clean", "ControlProcess",
           "check_room",
           "NOTE_PREFIX", "OTHER_SHAPES", "OTHER_STEADY", "WarmControl", "attached", "control_env", "current",
           "in_warm_control", "why_none"]

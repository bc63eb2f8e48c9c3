"""The fresh process `warmprof trace` runs its trace in, and how a command's output ends.

The parent makes one temp folder, points every cache torch, Triton and CUDA use into it (unless
--cache keep), runs `python -m warmprof trace ... --in-process` there (without the current folder on
sys.path: system/launch.py) and removes the folder afterwards, also on Ctrl-C, SIGTERM and the other
signals that would end it (supervise.ENDING). The child writes its current phase to a status file in
that folder, so a child that dies or exits without its report is an error that says where.
"""

from __future__ import annotations

import getpass
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Mapping

from ..errors import ModelError, TimedOut, WarmprofError
from ..system.fileio import classify, make_temp_folder, stream_fd
from ..system.launch import option, python_argv, with_options
from ..system.progress import say_on_stderr
from ..system.supervise import GRACE_S, STOPPING, Deadline, Terminated  # noqa: F401  (part of this module's interface)
from ..system.supervise import die_with as _die_with
from ..system.supervise import reap as _reap
from ..system.supervise import signals_held as _signals_held
from ..system.supervise import sigterm_raises as _sigterm_raises
from ..system.supervise import stop as _stop

# Every on-disk cache a first pass may find warm, by the variable that moves it: what it holds, and
# where it is when the variable is unset ({tmp}: the temp folder, {home}: ~, {xdg}: XDG_CACHE_HOME,
# {inductor}: TORCHINDUCTOR_CACHE_DIR's folder). A fresh run points each at its own empty folder in
# the parent's temp folder (TMPDIR too: inductor's default cache, precompiled headers and torch's
# on-disk caches live under it, 149 MB measured).
CACHES = {
    "TORCHINDUCTOR_CACHE_DIR": ("inductor: compiled kernels, FX graphs, autotuning, precompiled headers",
                                "{tmp}/torchinductor_{user}"),
    "TRITON_CACHE_DIR": ("Triton's compiled kernels", "{inductor}/triton/<device> (through inductor), or "
                                                      "{home}/.triton/cache"),
    "TRITON_HOME": ("Triton's home (.triton/cache, dumps, overrides)", "{home}"),
    "CUDA_CACHE_PATH": ("the CUDA driver's PTX JIT cache", "{home}/.nv/ComputeCache"),
    "TORCH_EXTENSIONS_DIR": ("torch's JIT-built C++/CUDA extensions", "{xdg}/torch_extensions"),
    "PYTORCH_KERNEL_CACHE_PATH": ("torch's NVRTC-compiled CUDA kernels (jiterator)", "{xdg}/torch/kernels"),
    "CUPY_CACHE_DIR": ("CuPy's NVRTC-compiled kernels", "{home}/.cupy/kernel_cache"),
    "XDG_CACHE_HOME": ("per-user caches (torch extensions, kernels, ...)", "{home}/.cache"),
    "TMPDIR": ("the temp folder (inductor's default cache, torch's on-disk caches)", "{tmp}"),
    "TEMP": ("the temp folder, for tools that read TEMP", "{tmp}"),
    "TMP": ("the temp folder, for tools that read TMP", "{tmp}"),
}
# Shared caches on another machine (inductor's remote caches: redis, a plugin) would turn a cold run
# warm: a fresh run switches them off ("0" is torch's "off", whatever the config says).
REMOTE_OFF = ("TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE",
              "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE")
# Downloads, not warm-up state: they follow XDG_CACHE_HOME by default, so a fresh run pins them to
# the user's folders, or a factory that fetches weights would fetch them again on every run.
DOWNLOADS = {"TORCH_HOME": "{xdg}/torch", "HF_HOME": "{xdg}/huggingface"}

STATUS_FILE = "status"
POLL_S = 0.25  # how often the parent looks at the child's status while it waits for its exit
EXIT_GRACE_S = 10.0  # the child's time to exit after it said it is done (supervise.HELPER_GRACE_S within it)
DONE = "done"  # the child saved and printed its report
EXPLAINED = "explained"  # the child stopped with its own one-line error (or "interrupted") on stderr


def require_torch() -> None:
    """Before spawning a child (no torch import here: the parent stays light)."""
    if importlib.util.find_spec("torch") is None:
        raise WarmprofError("warmprof trace needs torch: pip install torch")


def import_torch() -> Any:
    require_torch()
    try:
        import torch
    except ImportError as e:  # a broken or stub install
        raise WarmprofError(f"warmprof trace needs torch, and importing it failed ({e}): pip install torch") from e
    return torch


# ---- the child's side -----------------------------------------------------------------------


class Status:
    """The child's current phase, in the parent's temp folder (no path: an --in-process run)."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def write(self, text: str) -> None:
        if not self.path:
            return
        try:
            new = self.path + ".new"
            with open(new, "w") as f:
                f.write(text)
            os.replace(new, self.path)  # the parent never reads half a phase
        except OSError:  # the parent's folder is gone (it was killed): the trace goes on
            pass

    def progress(self, quiet: bool) -> Callable[[str], None]:
        """warmprof.trace's progress callable: records the phase, and prints it unless quiet."""

        def say(msg: str) -> None:
            self.write(phase(msg))
            if not quiet:
                say_on_stderr(f"warmprof: {msg}")

        return say


def phase(msg: str) -> str:
    """A trace progress message -> what the child was doing, for "... while <phase>"."""
    msg = msg.split(" (")[0]  # "first pass (includes torch.compile: ...)"
    if msg.startswith(("first pass", "seen-shape re-run", "steady passes")):  # "steady passes with the instruments on"
        return f"running the model's {msg}"
    if msg == "clean first pass":  # the control process's (traces/controls.py), waited for here
        return "running the model's clean first pass (in the control process)"
    return msg


def caches_in_use(env: Mapping[str, str]) -> dict[str, str]:
    """Each cache variable -> the folder a process with this environment uses."""
    home = os.path.expanduser("~")
    try:
        tmp = tempfile.gettempdir()
    except OSError:  # no usable temp folder: torch would find none either
        tmp = "(no usable temp folder)"
    xdg = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    try:
        user = getpass.getuser()
    except Exception:  # no name for this uid (a container): torch falls back the same way
        user = f"uid_{os.getuid()}"
    out: dict[str, str] = {}
    for var, (_, default) in CACHES.items():
        inductor = out.get("TORCHINDUCTOR_CACHE_DIR", "")  # listed first
        out[var] = env.get(var) or default.format(tmp=tmp, xdg=xdg, user=user, inductor=inductor, home=home)
    return out


# ---- the parent's side ----------------------------------------------------------------------


def fds_named(path: str | None) -> tuple[int, ...]:
    """The descriptor an output path like /dev/fd/3 (or a link to it) names, for the child to
    inherit: it starts with only 0, 1 and 2 open."""
    if not path:
        return ()
    kind, target = classify(path)
    fd = stream_fd(target) if kind == "stream" else None
    return (fd,) if fd is not None and fd > 2 else ()


def run_child(argv: list[str], cache: str, quiet: bool, pass_fds: tuple[int, ...] = ()) -> int:
    """Run `python -m warmprof <argv>` in a fresh process (without the current folder on sys.path:
    system/launch.py); its exit code, or a ModelError saying how it died. SIGTERM, SIGHUP or another
    signal that would end this process (supervise.ENDING: SIGQUIT, SIGUSR1, SIGALRM, ...) stops it (and
    what it started), removes the folder and ends with 128 + the signal, as Ctrl-C ends with 130; if this
    process is killed outright, the child gets SIGTERM."""
    if cache == "keep" and not quiet:
        _say_kept()
    try:
        with _sigterm_raises():
            tmp = _make_temp_folder()
            try:
                rc, status = _spawn_and_wait(argv, tmp, cache, pass_fds)
            finally:
                with _signals_held():  # a signal now must not leave half the folder behind
                    shutil.rmtree(tmp, ignore_errors=True)
    except Terminated as t:
        print("warmprof: terminated", file=sys.stderr)
        return 128 + t.signum
    return _outcome(rc, status)


def _say_kept() -> None:
    print("warmprof: --cache keep: the traced process uses your caches as they are:", file=sys.stderr)
    for var, where in caches_in_use(os.environ).items():
        default = "" if os.environ.get(var) else " (default)"
        print(f"  {var:24} {where}{default}  - {CACHES[var][0]}", file=sys.stderr)


def _make_temp_folder() -> str:
    return make_temp_folder("warmprof-", "the trace's fresh process")


def fresh_env(tmp: str) -> dict[str, str]:
    """os.environ with every cache in CACHES pointed at its own empty folder under `tmp`."""
    env = dict(os.environ)
    xdg = caches_in_use(env)["XDG_CACHE_HOME"]
    for var, default in DOWNLOADS.items():
        env.setdefault(var, default.format(xdg=xdg))
    for var in CACHES:
        env[var] = os.path.join(tmp, var.lower())
        os.mkdir(env[var])  # an absent TMPDIR would send the child back to /tmp
    for var in REMOTE_OFF:
        env[var] = "0"
    return env


def _spawn_and_wait(argv: list[str], tmp: str, cache: str, pass_fds: tuple[int, ...]) -> tuple[int, str]:
    env = fresh_env(tmp) if cache == "fresh" else dict(os.environ)
    status = os.path.join(tmp, STATUS_FILE)
    proc = None
    try:
        # In this process's group (a terminal's Ctrl-C, Ctrl-Z and reads reach it as they would
        # the parent), with a parent-death signal, so a parent killed outright (SIGKILL) does not
        # leave it running; stopping it stops what the model started too (_stop).
        parent = os.getpid()
        proc = subprocess.Popen(python_argv("warmprof", with_options(argv, option("status-file", status))), env=env,
                                pass_fds=pass_fds, preexec_fn=lambda: _die_with(parent))
        rc = _wait_for_exit(proc, status)
    except Deadline as e:  # --timeout: say where it was, and that nothing was written
        where = _read_status(status)
        if proc is not None:
            _stop(proc)
        raise TimedOut(f"{e} while {where or 'starting'}; {_written(argv)}") from None
    except BaseException:  # Ctrl-C or SIGTERM: the child must not outlive us
        if proc is not None:
            _stop(proc)
        raise
    return rc, _read_status(status)


def _wait_for_exit(proc: subprocess.Popen, status: str) -> int:
    """The child's exit code. Once it said it is done (its report out, or its error said), it gets
    EXIT_GRACE_S to exit (it stops what the model left running first, HELPER_GRACE_S at most); a
    child still there after that (a model's thread that holds the exit) is stopped, and its report
    stands: the exit code is the one it would have had (0 after DONE)."""
    said_at = None
    while True:
        if _reap(proc, POLL_S):  # not proc.wait: a Ctrl-C in it can leave Popen's lock taken (supervise.reap)
            assert proc.returncode is not None
            return proc.returncode
        if said_at is None:
            if _read_status(status) in (DONE, EXPLAINED):
                said_at = time.monotonic()
        elif time.monotonic() - said_at > EXIT_GRACE_S:
            done = _read_status(status) == DONE
            _stop(proc)
            say_on_stderr(f"warmprof: the traced process had not exited {EXIT_GRACE_S:g} s after "
                          f"{'its report' if done else 'its error'} and was stopped (the model's own code holds the exit: "
                          "a thread, a helper, a handler)")
            return 0 if done else WarmprofError.exit_code


def _read_status(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:  # it died before its first phase
        return ""


def _written(argv: list[str]) -> str:
    """What a trace stopped by --timeout leaves: nothing (its report is saved and printed at its end)."""
    return "no report was written" + (", no --json file either" if "--json" in argv else "")


def _outcome(rc: int, status: str) -> int:
    if rc >= 0 and status in (DONE, EXPLAINED):  # it finished, or already said why not
        return rc
    where = {DONE: "after writing its report", EXPLAINED: "after reporting its error"}.get(
        status, f"while {status or 'starting'}")
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        raise ModelError(f"the traced process died of {name} {where}")
    raise ModelError(f"the traced process exited (status {rc}) without writing its report, {where}")



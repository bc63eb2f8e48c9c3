"""`warmprof run -- CMD`: the command started with warmprof's start-up hook in its environment (every
Python process of its tree records itself: agent.py), watched until it ends, Ctrl-C, or --calls N
model calls, then every process of the tree ended and the records read back (assemble.py).

Signals. The command runs in a process group of its own; a SIGINT, SIGTERM or SIGHUP warmprof gets (a
terminal's Ctrl-C, a kill, a kill of warmprof's group) is passed on once to the command's whole group, as
a terminal would send it, and warmprof waits for the command to end by itself (GRACE_S), as its own
shutdown is part of what the user runs. What is still running after that, or after the command exited (a tree that outlives its
root), gets SIGTERM, then SIGKILL (system/supervise.py); warmprof is the tree's subreaper meanwhile, so a
process that detached itself is still found. The run's folder in TMPDIR is removed however it ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .. import _native
from ..errors import InputError
from ..system import supervise
from . import agent as A, onednn

BOOT = str(Path(__file__).resolve().parent / "boot")
GRACE_S = 30.0  # after Ctrl-C or --calls: the command's own shutdown (vLLM stops its engine processes)
POLL_S = 0.1
TREE_GRACE_S = 3.0  # after the command exited, what it left running ends by itself or is stopped


@dataclass
class Options:
    watch: list[str] = field(default_factory=list)
    calls: int = 0
    ready_after: str = ""  # "first-call" or "log:REGEX"
    sample_ms: float = A.SAMPLE_MS
    engines: bool = True
    timeout_s: float | None = None
    phases: list[str] = field(default_factory=list)  # "module:function" or "module:Class.method", [=NAME]
    cupti: bool = True
    onednn: bool = True  # oneDNN's creation lines on for the tree (runs/onednn.py)
    onednn_off: str = ""  # set by environment(): why they are not ("" when on)


@dataclass
class Outcome:
    """What the run saw of the command: how it ended, its tree, where the records are."""

    argv: list[str]
    out_dir: str
    origin_ns: int
    end_ns: int
    returncode: int | None
    ended_by: str  # "exit", "interrupt", "calls", "terminated", "timeout"
    seen: dict[int, dict[str, Any]]  # pid -> {"ppid", "name", "first_seen_ms"} of every process of the tree seen
    stopped: list[str]  # processes still running at the end, stopped by warmprof


def check_command(argv: list[str]) -> str:
    if not argv:
        raise InputError("give the command to run after `--`: warmprof run -- python serve.py")
    exe = argv[0]
    found = shutil.which(exe) if os.sep not in exe else (exe if os.path.isfile(exe) and os.access(exe, os.X_OK) else None)
    if found is None:
        where = "no such file, or not executable" if os.sep in exe else "not found on PATH"
        raise InputError(f"command {exe!r}: {where}")
    return found


def environment(out_dir: str, opts: Options) -> dict[str, str]:
    env = dict(os.environ)
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = BOOT + (os.pathsep + old if old else "")
    env[A.ENV_DIR] = out_dir
    env[A.ENV_SAMPLE_MS] = f"{opts.sample_ms:g}"
    if opts.watch:
        env[A.ENV_WATCH] = ",".join(opts.watch)
    if opts.calls:
        env[A.ENV_CALLS] = str(opts.calls)
    if opts.ready_after:
        env[A.ENV_READY] = opts.ready_after
    env[A.ENV_ENGINES] = "auto" if opts.engines else "none"
    if opts.phases:
        env[A.ENV_PHASES] = ";".join(opts.phases)
    env[A.ENV_CUPTI] = "auto" if opts.cupti else "off"
    opts.onednn_off = onednn.environment(env, opts.onednn)
    return env


def _child_setup(mask: Any) -> Callable[[], None]:
    def setup() -> None:
        """In the command's process before exec: a process group of its own (warmprof passes each signal
        on to the whole group, as a terminal would), the signal mask warmprof was started with (it blocks
        three to wait on them), and SIGTERM when warmprof dies."""
        os.setpgid(0, 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        supervise.die_with(os.getppid())
    return setup


def run_command(argv: list[str], opts: Options, say: Callable[[str], None]) -> Outcome:
    """Run argv under the agent; return when it and its whole tree have ended. The caller removes
    Outcome.out_dir (run() below does); on an error it is removed here."""
    exe = check_command(argv)
    out_dir = tempfile.mkdtemp(prefix="warmprof-run-")
    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    supervise.adopt_orphans()
    seen: dict[int, dict[str, Any]] = {}
    state: dict[str, Any] = {"ended_by": "exit", "asked_at": None}
    stopped: list[str] = []
    origin = _native.now_ns()
    returned = False
    try:
        try:
            proc = subprocess.Popen([exe, *argv[1:]], executable=exe, env=environment(out_dir, opts),
                                    preexec_fn=_child_setup(old_mask))
        except OSError as e:
            raise InputError(f"command {argv[0]!r} could not start: {e.strerror or e}") from None
        deadline = time.monotonic() + opts.timeout_s if opts.timeout_s else None

        def ask(why: str, sig: int, line: str) -> None:
            state["ended_by"], state["asked_at"] = why, time.monotonic()
            say(line)
            _send_group(proc.pid, sig)

        while proc.poll() is None:
            _note_tree(proc.pid, seen, origin)
            got = signal.sigtimedwait(watched, POLL_S)
            now = time.monotonic()
            if got is not None:
                if state["ended_by"] == "exit":
                    name = signal.Signals(got.si_signo).name
                    ask("interrupt" if got.si_signo == signal.SIGINT else "terminated", got.si_signo,
                        f"warmprof run: {name}: passed on to the command; waiting up to {GRACE_S:.0f} s for it to end")
                else:  # a second one: end it now
                    state["asked_at"] = now - GRACE_S
            elif opts.calls and state["ended_by"] == "exit" and _calls_done(out_dir):
                sig = _ending_signal(proc.pid)
                ask("calls", sig, f"warmprof run: {opts.calls} model calls seen: ending the command ({sig.name})")
            elif deadline is not None and now > deadline and state["ended_by"] == "exit":
                sig = _ending_signal(proc.pid)
                ask("timeout", sig, f"warmprof run: --timeout reached: ending the command ({sig.name})")
            asked_at = state["asked_at"]
            if isinstance(asked_at, float) and now - asked_at > GRACE_S:
                stopped += _stop_tree(proc)
                break
        proc.wait()
        end = _native.now_ns()
        # What the command left running gets TREE_GRACE_S to end by itself (multiprocessing's resource
        # tracker ends when its pipe closes, a moment after its parent), then is stopped and named. A
        # signal meanwhile shortens the wait (it is taken here, never left pending for later).
        wait_until = time.monotonic() + TREE_GRACE_S
        while _left_running() and time.monotonic() < wait_until:
            _note_tree(os.getpid(), seen, origin, include_root=False)
            supervise._reap()
            if signal.sigtimedwait(watched, POLL_S) is not None:
                break
        if _left_running():
            stopped += supervise.stop_descendants()
        supervise._reap()
        returned = True
        return Outcome(list(argv), out_dir, origin, end, proc.returncode, str(state["ended_by"]), seen, stopped)
    finally:
        try:
            if not returned:
                supervise.stop_descendants(grace_s=2.0)
        finally:
            if not returned:
                shutil.rmtree(out_dir, ignore_errors=True)
            while signal.sigtimedwait(watched, 0) is not None:  # taken, so none is raised once unblocked
                pass
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


def _ending_signal(pid: int) -> signal.Signals:
    """SIGINT, as Ctrl-C would end the command; SIGTERM where the command ignores SIGINT (started from a
    background job or nohup, it inherits SIGINT ignored, and Ctrl-C could never end it)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigIgn:"):
                    if int(line.split()[1], 16) >> (signal.SIGINT - 1) & 1:
                        return signal.SIGTERM
    except (OSError, ValueError, IndexError):
        pass
    return signal.SIGINT


def _left_running() -> bool:
    return any(supervise._state(p[0]) not in (None, "Z") for p in supervise._descendants(os.getpid()))


def _send_group(pid: int, sig: int) -> None:
    """sig to the command's process group (its own: _child_setup), as a terminal sends Ctrl-C to every
    process of the foreground group; to the command alone if it left its group."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _calls_done(out_dir: str) -> bool:
    try:
        return any(n.startswith("calls-") and n.endswith(".done") for n in os.listdir(out_dir))
    except OSError:
        return False


def _stop_tree(proc: subprocess.Popen) -> list[str]:
    names = [f"{supervise._name(pid)} (pid {pid})" for pid, _ in [supervise._identity(proc.pid),
                                                                   *supervise._descendants(proc.pid)]
             if supervise._state(pid) not in (None, "Z")]
    supervise.stop(proc)
    return names


def _note_tree(root: int, seen: dict[int, dict[str, Any]], origin: int, include_root: bool = True) -> None:
    """Every process of the tree, as it is seen (the report names those that left no record)."""
    for pid, _ in [*([(root, 0)] if include_root else []), *supervise._descendants(root)]:
        if pid in seen:
            continue
        fields = supervise._stat_fields(pid)
        if not fields:
            continue
        seen[pid] = {"ppid": int(fields[1]) if len(fields) > 1 else 0, "name": supervise._name(pid),
                     "first_seen_ms": (_native.now_ns() - origin) / 1e6}


def remove(out: Outcome) -> None:
    shutil.rmtree(out.out_dir, ignore_errors=True)


__all__ = ["BOOT", "Options", "Outcome", "check_command", "environment", "remove", "run_command"]

"""Child processes that never outlive their parent, and waits that end: a parent-death signal set
before exec, SIGTERM, SIGHUP and the other signals that would end the process (ENDING) raised like
Ctrl-C so cleanup runs, a stop that reaches every process the child started (SIGTERM, then SIGKILL
after GRACE_S), a command's --timeout (deadline), and, in
warmprof's own processes, the model's helpers stopped at the end (adopt_orphans, stop_descendants).
Used by `warmprof trace`'s fresh process (traces/child.py), its control (traces/controls.py),
repeated traces (traces/repeat.py) and --explain's warm process (traces/warm_process.py), each started
by system/launch.python_argv (without the current folder on sys.path)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from typing import Any, Iterable, Iterator

GRACE_S = 5.0  # a stopped child gets this long after SIGTERM before SIGKILL
HELPER_GRACE_S = 2.0  # a helper the model left running gets this long after SIGTERM at the end
KILL_WAIT_S = 10.0  # after SIGKILL: a process still there later waits where the kernel does not break in
OUTPUT_GRACE_S = 2.0  # a child's stderr pipe, after the child exited: a helper may hold it open


STOPPING = (signal.SIGTERM, signal.SIGHUP)  # each stops the child and cleans up, as Ctrl-C does
# Signals whose default action ends the process where it stands (SIGQUIT and SIGXCPU with a core), which
# would leave the trace's temp folder and its child behind: while nobody handles them (their action is
# SIG_DFL), they stop the child and clean up too, in warmprof's own command line only: in a program that
# called warmprof they are the program's (a handler installed from C reads as SIG_DFL from Python).
ENDING = tuple(getattr(signal, name) for name in ("SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM",
                                                  "SIGPROF", "SIGXCPU") if hasattr(signal, name))


class Terminated(BaseException):
    """SIGTERM, SIGHUP or another signal that would end the process (ENDING), raised like
    KeyboardInterrupt so the cleanup on the way out runs."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = int(signum)


def die_with(parent: int) -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux prctl PR_SET_PDEATHSIG); if
    the parent died before that was set, end now. The parent is single-threaded here (no torch)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the signal handlers above still cover SIGTERM/SIGHUP
        return
    if os.getppid() != parent:
        os._exit(128 + signal.SIGTERM)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the child and every process it started (the model's own subprocesses), SIGKILL
    to what is left after GRACE_S. Its descendants are found before it ends (then they are orphans).
    Never waits without end: a child SIGKILL has not ended KILL_WAIT_S later (a wait the kernel does
    not break: a disk or network file system) is named on stderr and left to the system."""
    family = [_identity(proc.pid), *_descendants(proc.pid)]
    _signal_all(family, signal.SIGTERM)
    if reap(proc, GRACE_S):
        _signal_all(family, signal.SIGKILL)  # what the child started and left (it ended by itself)
        return
    _signal_all(family + _descendants(proc.pid), signal.SIGKILL)
    if not reap(proc, KILL_WAIT_S):
        _say(f"warmprof: process {proc.pid} had not ended {KILL_WAIT_S:g} s after SIGKILL "
             f"({_describe(proc.pid)}); left to the system")


def reap(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Whether the child ended within timeout_s (its exit code then in proc.returncode). waitpid is called
    here, not through proc.wait: Popen's wait holds a lock of its own, and a Ctrl-C that lands between
    its taking and its try (CPython's Lib/subprocess.py, _wait) leaves it taken, and every later
    proc.wait() without a timeout then blocks for ever. The interrupted wait is the one Ctrl-C ends, and
    then stop() runs, so stop() must not go through that lock."""
    end = time.monotonic() + timeout_s
    delay = 0.001
    while proc.returncode is None:
        try:
            pid, status = os.waitpid(proc.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: it ended, its status lost (0, as Popen's own wait reads it)
            if proc.returncode is None:
                proc.returncode = 0
            return True
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        left = end - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.05)
    return True


def _describe(pid: int) -> str:
    """A process's state and the kernel function it waits in, from /proc (for a stop that did not end it)."""
    state = _state(pid) or "?"
    try:
        with open(f"/proc/{pid}/wchan") as f:
            wchan = f.read().strip()
    except OSError:
        wchan = ""
    return f"state {state}" + (f", waiting in {wchan}" if wchan and wchan != "0" else "")


def _say(line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode("utf-8", "replace"))


def adopt_orphans() -> None:
    """This process (one of warmprof's own: a trace's fresh child, its control) becomes a child
    subreaper (Linux prctl PR_SET_CHILD_SUBREAPER): a helper the model starts that detaches itself
    (a double fork, a daemon) stays below it, so stop_descendants finds it at the end."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # 36 = PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):  # not Linux: what stays attached is still found
        pass


def stop_descendants(grace_s: float = HELPER_GRACE_S, own: Iterable[int] = ()) -> list[str]:
    """At the end of one of warmprof's own processes: SIGTERM to every process below this one (the
    model's helpers: a tokenizer server, a log shipper), SIGKILL to any left after grace_s. `own`:
    warmprof's own helpers among them (the stdout tap's forwarder): they get the same grace to end by
    themselves once the model's are gone (their input closes), and are not named. Returns
    "name (pid N)" of each of the model's that was running, for the notice."""
    own = set(own)
    family = [p for p in _descendants(os.getpid()) if _state(p[0]) not in (None, "Z")]
    theirs = [p for p in family if p[0] not in own]
    ours = [p for p in family if p[0] in own]
    names = [f"{_name(pid)} (pid {pid})" for pid, _ in theirs]
    for group, first in ((theirs, signal.SIGTERM), (ours, None)):
        if not group:
            continue
        if first is not None:
            _signal_all(group, first)
        end = time.monotonic() + grace_s
        while time.monotonic() < end and _running(group):
            _reap()
            time.sleep(0.02)
        _signal_all(group + [p for p in _descendants(os.getpid()) if p[0] not in own], signal.SIGKILL)
        _reap()
    return names


def _running(family: list[tuple[int, int]]) -> bool:
    return any(_state(pid) not in (None, "Z") for pid, _ in family)


def _reap() -> None:
    """Collect the exit status of this process's ended children (adopted orphans among them)."""
    with contextlib.suppress(ChildProcessError, OSError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _state(pid: int) -> str | None:
    """A process's state letter (R, S, Z, ...), from /proc (None when it is gone or unreadable)."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() or "?"
    except OSError:
        return "?"


def wait_output(proc: subprocess.Popen, timeout_s: float | None = None) -> tuple[int, str]:
    """proc.wait(timeout_s), then its stderr pipe: (exit code, stderr); subprocess.TimeoutExpired
    after timeout_s. communicate() would wait for the pipe's end, which a helper that inherited it
    (and outlives the child) holds open: the pipe is read on a thread, and after the child exited it
    gets OUTPUT_GRACE_S, then what was read is what it said."""
    chunks: list[str] = []

    def read() -> None:  # to the pipe's end, then closed (a helper holding it: whenever it lets go)
        stderr = proc.stderr
        assert stderr is not None  # the callers' Popen has stderr=PIPE
        with contextlib.suppress(OSError, ValueError):
            for line in stderr:
                chunks.append(line)
        with contextlib.suppress(OSError):
            stderr.close()

    reader = threading.Thread(target=read, name="warmprof-stderr", daemon=True)
    reader.start()
    rc = proc.wait(timeout_s)
    reader.join(OUTPUT_GRACE_S)
    return rc, "".join(chunks)


class Deadline(BaseException):
    """A command's --timeout ran out: raised like KeyboardInterrupt (the model's own `except
    Exception` cannot swallow it, and every cleanup on the way out runs); the CLI says it as a
    TimedOut error (exit 124)."""


# The signal the deadline raises Deadline with: a realtime one where there is one, so a model that uses
# SIGALRM itself (signal.alarm, a handler of its own) neither loses its alarms to --timeout nor, with
# its own handler set, keeps --timeout from ending it.
DEADLINE_SIGNAL = getattr(signal, "SIGRTMIN", signal.SIGALRM) + (6 if hasattr(signal, "SIGRTMIN") else 0)


@contextlib.contextmanager
def deadline(seconds: float | None, what: str = "the command") -> Iterator[None]:
    """A command's --timeout: Deadline is raised in the main thread once `seconds` have passed (a timer
    thread sends DEADLINE_SIGNAL to it; code blocked in C sees it when it returns to Python), once
    only, so the cleanup on the way out is not cut short. No limit when seconds is None. The handler
    before comes back afterwards."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[bool] = []
    main = threading.main_thread().ident
    assert main is not None  # the main thread has started

    def handler(signum: int, frame: Any) -> None:
        if not fired:
            fired.append(True)
            raise Deadline(f"{what} ran past --timeout {seconds:g} s and was stopped")

    def ring() -> None:
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_kill(main, DEADLINE_SIGNAL)

    previous = signal.signal(DEADLINE_SIGNAL, handler)
    timer = threading.Timer(seconds, ring)
    timer.daemon = True
    timer.name = "warmprof-deadline"
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()  # a signal it sent is pending on our handler, never on the one put back
        signal.signal(DEADLINE_SIGNAL, previous if previous is not None else signal.SIG_DFL)


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first), or None when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a process, from /proc (None when it is gone or unreadable)."""
    fields = _stat_fields(pid)
    try:
        return (int(fields[1]), int(fields[19])) if fields else None
    except (ValueError, IndexError):
        return None


def _identity(pid: int) -> tuple[int, int]:
    st = _stat(pid)
    return pid, st[1] if st else -1


def _descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, start time) of the processes below `pid` (Linux /proc; none where it cannot tell). The
    start time makes sure a signal sent later reaches the same process, not a reused pid."""
    children: dict[int, list[tuple[int, int]]] = {}
    try:
        entries = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        st = _stat(entry)
        if st is not None:
            children.setdefault(st[0], []).append((entry, st[1]))
    found, todo = [], [pid]
    while todo:
        for kid in children.get(todo.pop(), []):
            found.append(kid)
            todo.append(kid[0])
    return found


def _signal_all(processes: list[tuple[int, int]], sig: int) -> None:
    for pid, started in processes:
        st = _stat(pid)
        if st is None or (started >= 0 and st[1] != started):  # gone, or the pid was reused
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Terminated while the block runs, and so does each of ENDING whose
    action is the default (it would end this process and leave its folder); once: a second signal must
    not cut the cleanup short. Each handler before comes back afterwards. Signals can only be set in
    the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # ENDING only in warmprof's own command line: in a program that called warmprof, a handler installed
    # from C (faulthandler.register(SIGUSR1), a profiler's SIGPROF) reads as SIG_DFL here, and taking it
    # over would lose it (it would come back as SIG_DFL)
    from .launch import is_command_line

    ending = ENDING if is_command_line() else ()
    taken = [*STOPPING, *(sig for sig in ending if signal.getsignal(sig) == signal.SIG_DFL)]

    def handler(signum: int, frame: Any) -> None:
        for sig in taken:
            signal.signal(sig, signal.SIG_IGN)
        raise Terminated(signum)

    previous = {sig: signal.signal(sig, handler) for sig in taken}
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, signal.SIG_DFL if before is None else before)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and the rest (STOPPING, ENDING) wait until the block is done, then act as usual."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, *STOPPING, *ENDING})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)

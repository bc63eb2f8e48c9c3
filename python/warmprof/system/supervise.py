"""Child processes that never outlive their parent: a parent-death signal set before exec, SIGTERM
and SIGHUP raised like Ctrl-C so cleanup runs, and a stop that reaches every process the child
started (SIGTERM, then SIGKILL after GRACE_S). Used by `warmprof trace`'s fresh process
(commands/child.py) and by repeated traces (traces/repeat.py)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
from typing import Any, Iterator

GRACE_S = 5.0  # a stopped child gets this long after SIGTERM before SIGKILL


STOPPING = (signal.SIGTERM, signal.SIGHUP)  # each stops the child and cleans up, as Ctrl-C does


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised like KeyboardInterrupt so the cleanup on the way out runs."""

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
    to what is left after GRACE_S. Its descendants are found before it ends (then they are orphans)."""
    family = [_identity(proc.pid), *_descendants(proc.pid)]
    _signal_all(family, signal.SIGTERM)
    try:
        proc.wait(GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_all(family + _descendants(proc.pid), signal.SIGKILL)
    proc.wait()


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a process, from /proc (None when it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, ValueError, IndexError):
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
    """SIGTERM raises Terminated while the block runs (once: a second one must not cut the cleanup
    short); the previous handler comes back afterwards. Signals can only be set in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        for sig in STOPPING:
            signal.signal(sig, signal.SIG_IGN)
        raise Terminated(signum)

    previous = {sig: signal.signal(sig, handler) for sig in STOPPING}
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, signal.SIG_DFL if before is None else before)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block is done, then act as usual."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, *STOPPING})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)

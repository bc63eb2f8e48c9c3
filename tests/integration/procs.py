"""Processes seen through /proc, for the tests that start trees of them: whether one has ended, which still
carry a marker, waiting for a state (never for a time), and killing what a failed test left."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Callable


def gone(pid: int) -> bool:
    """The process has ended: no entry in /proc, or a zombie (ended, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone, or going while read
        return True


def pids_whose(file: str, marker: str) -> list[int]:
    """The live processes whose /proc/PID/<file> ("cmdline", "environ") holds marker."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):  # ended meanwhile, or not ours to read
                with open(f"/proc/{entry}/{file}", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
    return [pid for pid in found if not gone(pid)]


def wait_for(cond: Callable[[], object], what: str, timeout: float) -> None:
    """Polls cond until it holds; a hang fails the test (after timeout s) instead of blocking the suite."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def kill_quietly(pid: int, group: bool = False) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL) if group else os.kill(pid, signal.SIGKILL)


def tree(pgid: int) -> str:
    """Each live process of a process group: pid, parent, state, the kernel function it waits in, command
    (for a test that timed out: where each process of the tree stood)."""
    lines = []
    for entry in sorted((e for e in os.listdir("/proc") if e.isdigit()), key=int):
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            with open(f"/proc/{entry}/wchan") as f:
                wchan = f.read().strip()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            lines.append(f"pid {entry} ppid {fields[1]} state {fields[0]} wchan {wchan or '-'}: {cmd[:160]}")
    return "\n".join(lines) or f"(no process left in group {pgid})"


def communicate_or_explain(proc, timeout: float) -> tuple[str, str]:
    """proc.communicate(timeout=timeout); on a hang, an AssertionError that says where the tree stood and,
    for a Python started with PYTHONFAULTHANDLER=1, where its threads were (SIGABRT makes faulthandler
    print them), with what it had written to its stderr (a PIPE) by then."""
    import subprocess

    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        where = tree(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGABRT)
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired as e:  # a process still holds the pipe: what it had until now
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise AssertionError(f"no end after {timeout:g} s; the tree then:\n{where}\nits stderr (the Python "
                             f"stacks after SIGABRT, where faulthandler is on):\n{err}") from None

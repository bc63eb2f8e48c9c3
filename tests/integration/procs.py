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

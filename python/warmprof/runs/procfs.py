"""What `warmprof run`'s agent reads of its own process from /proc (its start time, another thread's
clocks, its title) and a call's key: the standard library only (the agent is imported in every process)."""

from __future__ import annotations

import os
import sys
import time

from .. import _native


def clk_tck() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100


def process_start_ns() -> tuple[int | None, float]:
    """(this process's start on the monotonic clock, its resolution in ns): /proc/self/stat's start time
    (clock ticks since boot, CLOCK_BOOTTIME) moved onto CLOCK_MONOTONIC. None where unreadable."""
    tck = clk_tck()
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])  # field 22 of stat(5); fields here start at field 3
        boot_now = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        mono_now = _native.now_ns()
    except (OSError, ValueError, IndexError, AttributeError):
        return None, 0.0
    return int(mono_now - (boot_now - ticks * 1_000_000_000 // tck)), 1e9 / tck


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def thread_clocks(tid: int) -> dict[str, int] | None:
    """Another thread's clocks (what _native.thread_times() reads for the calling one) from its
    /proc/self/task files: CPU time and run-queue delay (schedstat), voluntary switches (status), bytes
    read from storage (io) and major faults (stat). None once the thread is gone."""
    base = f"/proc/self/task/{tid}/"
    try:
        cpu, delay = read_file(base + "schedstat").split()[:2]
        out = {"cpu_ns": int(cpu), "run_delay_ns": int(delay)}
        for line in read_file(base + "status").splitlines():
            if line.startswith(b"voluntary_ctxt_switches:"):
                out["voluntary"] = int(line.split()[1])
        try:
            for line in read_file(base + "io").splitlines():
                if line.startswith(b"read_bytes:"):
                    out["storage_read_bytes"] = int(line.split()[1])
        except OSError:  # io needs ptrace access on some kernels
            pass
        stat = read_file(base + "stat").rsplit(b")", 1)[1].split()
        out["major_faults"] = int(stat[9])  # field 12 of stat(5)
        out["asleep"] = int(stat[0] in (b"S", b"D"))  # field 3: sleeping, or in uninterruptible (disk) sleep
        return out
    except (OSError, ValueError, IndexError):
        return None


def shapes_key(args: tuple, kwargs: dict) -> str:
    """A call's key: the shapes of its tensor arguments (what decides a first call at a shape)."""
    parts = []
    for a in list(args) + list(kwargs.values()):
        shape = getattr(a, "shape", None)
        if shape is not None and not isinstance(a, type):
            try:
                parts.append("x".join(str(int(s)) for s in shape) or "scalar")
            except (TypeError, ValueError):
                continue
    return ",".join(parts) or "-"


def process_title() -> str:
    """The process's title now (setproctitle changes /proc/self/cmdline: vLLM's VLLM::EngineCore)."""
    try:
        raw = read_file("/proc/self/cmdline")
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").strip().decode("utf-8", "replace")[:300]


def comm_name() -> str:
    try:
        return read_file("/proc/self/comm").strip().decode("utf-8", "replace")
    except OSError:
        return ""


def mp_name() -> str:
    mp = sys.modules.get("multiprocessing")
    try:
        return str(mp.current_process().name) if mp is not None else ""
    except Exception:
        return ""

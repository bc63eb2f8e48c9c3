"""Host memory, threads and CPU: fault counters, RSS, thread count, run-queue delay and the thread's
CPU time, switches and storage reads sampled at pass boundaries (module boundaries sample them too:
instruments/modules.py).

The counts become time in attribution.py with the per-fault and per-thread costs calibrated on
this machine (evidence `estimated`). The run-queue delay is time already (schedstat: ns a thread
was runnable and had no CPU): the pass thread's is booked as cpu_contention (measured); every
other thread's is read here at the pass's boundaries and reported beside it (`threads_waited`),
never added to it (attribution.cpu_contention says why).
"""

from __future__ import annotations

import threading
from typing import Any

from .. import _native
from ..timeline import sample_host
from .base import Instrument


class HostCounters(Instrument):
    name = "host"

    def __init__(self) -> None:
        super().__init__()
        self.samples: dict[str, dict[str, Any]] = {}
        self._tasks: dict[str, dict[int, dict[str, Any]]] = {}  # each open pass's task_schedstats at its start

    def sample(self) -> None:
        sample_host()  # faults, RSS and threads, in one native call

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        self._tasks[name] = _native.task_schedstats()  # before the pass's own sample: outside its window
        self.sample()
        minor, major = _native.faults()
        self.samples[name] = {"minor_faults": minor, "major_faults": major, "rss_bytes": _native.rss_bytes(),
                              "threads": _native.thread_count()}

    def end_pass(self, name: str) -> None:
        self.sample()
        minor, major = _native.faults()
        start = self.samples.get(name, {})
        self.samples[name] = {
            "minor_faults": minor - start.get("minor_faults", minor),
            "major_faults": major - start.get("major_faults", major),
            "rss_growth_bytes": _native.rss_bytes() - start.get("rss_bytes", 0),
            "new_threads": _native.thread_count() - start.get("threads", 0),
            **threads_waited(self._tasks.pop(name, {}), _native.task_schedstats(), threading.get_native_id()),
        }

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out["passes"] = self.samples
        return out


def threads_waited(before: dict[int, dict[str, Any]], after: dict[int, dict[str, Any]], main_tid: int) -> dict[str, Any]:
    """What the process's threads waited for a CPU between two task_schedstats() reads: the pass
    thread's (`main_tid`) run-queue delay and involuntary switches, and the other threads' (workers)
    largest and total delay, with how many waited at all. A thread started in between counts from 0.
    {} where the kernel has no schedstat."""
    if not after or all(v.get("delay_ns") is None for v in after.values()):
        return {}

    def grew(tid: int, key: str) -> int:
        now = after[tid].get(key)
        was = before.get(tid, {}).get(key, 0) if tid in before else 0
        return max(0, int(now) - int(was or 0)) if isinstance(now, int) and now >= 0 else 0

    workers = [grew(t, "delay_ns") for t in after if t != main_tid]
    out: dict[str, Any] = {
        "run_delay_ns": grew(main_tid, "delay_ns") if main_tid in after else 0,
        "involuntary_switches": grew(main_tid, "involuntary") if main_tid in after else 0,
        "worker_threads": len(workers),
        "workers_waiting": sum(1 for w in workers if w > 0),
        "worker_run_delay_max_ns": max(workers, default=0),
        "worker_run_delay_total_ns": sum(workers),
    }
    return out


def thread_times() -> dict[str, int] | None:
    """The calling thread's clocks now (wall, CPU, run-queue delay, voluntary switches, storage reads,
    major faults): what module boundaries record, for passes no recording covers (the clean steady
    passes). None where the kernel has no schedstat or no RUSAGE_THREAD."""
    return _native.thread_times()


def blocked_ns(before: dict[str, int] | None, after: dict[str, int] | None) -> float | None:
    """ns the thread was blocked off the CPU between two thread_times() reads: wall less CPU time less
    run-queue delay, 0 where it never switched off voluntarily (then what is left is clock skew); None
    where either read is None."""
    if before is None or after is None:
        return None
    if after["voluntary"] <= before["voluntary"]:
        return 0.0
    wall = after["ns"] - before["ns"]
    return float(max(0, wall - (after["cpu_ns"] - before["cpu_ns"]) - (after["run_delay_ns"] - before["run_delay_ns"])))

"""The CPU budget: the CPUs this process may use, the other work runnable now, and their clash.

`usable_cpus` reads the affinity mask capped by a cgroup CPU quota, `runnable_others` the
running-task count of /proc/loadavg, and `oversubscription` says when torch's intra-op threads
exceed either (traces and probes both note it before anything runs).
"""

from __future__ import annotations

import os


def usable_cpus(affinity: int | None = None, quota_text: str | None = None) -> tuple[float, str]:
    """CPUs this process may run on: its affinity mask, capped by a cgroup CPU quota; and how that was read."""
    if affinity is None:
        try:
            affinity = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            affinity = os.cpu_count() or 1
    how = [f"{affinity} in its affinity mask"]
    cpus = float(affinity)
    if quota_text is None:
        quota_text = _read_text("/sys/fs/cgroup/cpu.max")
    parts = (quota_text or "").split()
    if len(parts) == 2 and parts[0] != "max":
        try:
            quota = int(parts[0]) / int(parts[1])
        except (ValueError, ZeroDivisionError):
            quota = 0.0
        if 0 < quota < cpus:
            cpus = quota
            how.append(f"a cgroup quota of {quota:g} CPUs")
    return cpus, ", ".join(how)


def runnable_others(loadavg_text: str | None = None) -> int:
    """Tasks runnable on the machine right now besides the one reading (/proc/loadavg's 4th field)."""
    text = loadavg_text if loadavg_text is not None else _read_text("/proc/loadavg")
    try:
        running = int((text or "").split()[3].split("/")[0])
    except (IndexError, ValueError):
        return 0
    return max(0, running - 1)


def oversubscription(threads: int, *, cpus: tuple[float, str] | None = None, others: int | None = None) -> str:
    """A note when torch's intra-op threads clash with the CPUs this process may use or with the other
    work runnable now (threads that take turns on a core wait for each other inside every parallel
    op, so passes inflate and spread); "" when they do not."""
    n_cpus, how = cpus if cpus is not None else usable_cpus()
    others = runnable_others() if others is None else others
    fit = max(1, int(n_cpus))
    if threads > n_cpus:
        return (f"torch runs {threads} intra-op threads but this process may use {n_cpus:g} CPU(s) ({how}): the "
                f"threads take turns, so parallel ops wait and pass times inflate and spread; --threads {fit} "
                "(torch.set_num_threads) measures without that")
    if threads > 1 and threads + others > n_cpus:
        free = max(1, fit - others)
        return (f"{others} other task(s) were runnable when the run started, on {n_cpus:g} usable CPU(s) ({how}), "
                f"beside torch's {threads} intra-op threads: parallel ops wait for descheduled threads, so pass "
                f"times inflate and spread; --threads {free} (torch.set_num_threads) measures with less of that")
    return ""


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None

"""The memory a new process could still take here: /proc/meminfo's MemAvailable, or less where this
process's cgroup has a lower memory limit (a container, a systemd slice). Linux; None elsewhere.

Used before a trace's process builds its copy of the model beside the control's (traces/controls.py)."""

from __future__ import annotations

import os

# Tests: a number of bytes to take as available instead of reading the machine (a check that must
# trigger without a model larger than the machine).
FAKE_ENV = "WARMPROF_FAKE_MEM_AVAILABLE"
NO_LIMIT = 1 << 60  # a cgroup v1 limit at or above this is "no limit" (the kernel writes 2^63 rounded to pages)


def available_bytes(meminfo: str = "/proc/meminfo", cgroup_root: str = "/sys/fs/cgroup",
                    self_cgroup: str = "/proc/self/cgroup") -> tuple[int, str] | None:
    """(bytes, where the figure comes from), the least of MemAvailable and the room under each memory
    limit of this process's cgroup and its parents; None where neither can be read."""
    fake = os.environ.get(FAKE_ENV)
    if fake:
        try:
            return max(0, int(fake)), f"{FAKE_ENV}={fake}"
        except ValueError:
            pass
    found = [x for x in (_meminfo(meminfo), _cgroup_room(cgroup_root, self_cgroup)) if x is not None]
    return min(found) if found else None


def _meminfo(path: str) -> tuple[int, str] | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room(root: str, self_cgroup: str) -> tuple[int, str] | None:
    """The least room under the memory limits of this process's cgroup and its parents: the limit less
    what is charged to it, less its file pages (the page cache, active or not: the kernel reclaims it
    before it says no; a checkpoint the control just read is charged there), less shared memory (v2's
    `file` counts it, and it is not reclaimed)."""
    try:
        with open(self_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    rooms: list[tuple[int, str]] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        reclaimable: tuple[tuple[str, int], ...]  # memory.stat's entries, each added (+1) or taken off (-1)
        if hierarchy == "0" and controllers == "":  # cgroup v2
            base, files = root, ("memory.max", "memory.current")
            reclaimable = (("file", 1), ("shmem", -1))
        elif "memory" in controllers.split(","):  # cgroup v1's memory controller
            base, files = os.path.join(root, "memory"), ("memory.limit_in_bytes", "memory.usage_in_bytes")
            reclaimable = (("total_active_file", 1), ("total_inactive_file", 1))
        else:
            continue
        for folder in _folders(base, path):
            limit = _read_int(os.path.join(folder, files[0]))
            usage = _read_int(os.path.join(folder, files[1]))
            if limit is None or usage is None or limit >= NO_LIMIT:
                continue
            stat = os.path.join(folder, "memory.stat")
            cache = max(0, sum(sign * _stat(stat, key) for key, sign in reclaimable))
            rooms.append((max(0, limit - max(0, usage - cache)), f"the memory limit of cgroup {folder}"))
    return min(rooms) if rooms else None


def _folders(base: str, path: str) -> list[str]:
    """The cgroup's folder and its parents' under the mount at `base`: from the full path where it is
    there (a host), up to the mount itself (in a container the mount is the process's own cgroup)."""
    parts = [p for p in path.split("/") if p]
    out = []
    for k in range(len(parts), -1, -1):
        folder = os.path.join(base, *parts[:k])
        if os.path.isdir(folder):
            out.append(folder)
    return out


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
        return None if text == "max" else int(text)
    except (OSError, ValueError):
        return None


def _stat(path: str, key: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def process_bytes() -> int | None:
    """This process's anonymous resident memory (RssAnon: its heap, tensors and objects, not the shared
    library pages a second process would share): what a second process like it needs of its own."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def gib(n: float) -> str:
    """A size as a person reads it: GiB from 256 MiB, else MiB, KiB or bytes."""
    for unit, shift, form in (("GiB", 30, ".2f"), ("MiB", 20, ".0f"), ("KiB", 10, ".0f")):
        if n >= (1 << 28 if unit == "GiB" else 1 << shift):
            return f"{n / (1 << shift):{form}} {unit}"
    return f"{int(n)} bytes"


__all__ = ["FAKE_ENV", "available_bytes", "gib", "process_bytes"]

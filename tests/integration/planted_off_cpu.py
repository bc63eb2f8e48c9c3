"""A small model with off-CPU costs planted in modules of their own, for `warmprof trace
path/to/planted_off_cpu.py:FACTORY` in a fresh process (the integration tests, and
bench/off_cpu_acceptance.py):

- `waits`: a Linear, then `Planted.sleeper` sleeps PLANTED_SLEEP_S (default 0.06 s) on its first
  call only (a wait: a lock, a socket, a remote store would look the same), then a Linear;
- `reads`: `Planted.reader` reads the file PLANTED_BLOB into a buffer of its own on every call, and on
  its first call drops that file from the page cache just before reading it, so every process's first
  pass reads it cold (a trace's control process runs its own first pass before the traced one: a drop
  when the model is built would leave the traced pass a warm cache) and every later read is served
  from the page cache (the first call's extra cost is the disk's);
- `both`: both planted; `neither`: the same model with neither.

With PLANTED_SELF_TIMES set to a path, each planted module's first call times itself with the thread's
own clocks (wall, CPU, run-queue delay, switches) and appends them there as a line of JSON, so a trace's
figures can be set against the very call they measured. Nothing here imports warmprof: the model is
what a user would hand the CLI."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import time

import torch

SLEEP_S = float(os.environ.get("PLANTED_SLEEP_S", "0.06"))


def _blob() -> str:
    path = os.environ.get("PLANTED_BLOB", "")
    if not path:
        raise RuntimeError("set PLANTED_BLOB to the file the reader reads")
    return path


def _clocks() -> dict:
    with open("/proc/thread-self/schedstat") as f:
        delay = int(f.read().split()[1])
    ru = resource.getrusage(resource.RUSAGE_THREAD)
    return {"ns": time.monotonic_ns(), "cpu_ns": time.thread_time_ns(), "delay_ns": delay, "voluntary": ru.ru_nvcsw,
            "involuntary": ru.ru_nivcsw, "read_bytes": ru.ru_inblock * 512}


@contextlib.contextmanager
def self_timed(what: str, first: bool):
    """Times the block with the thread's own clocks when PLANTED_SELF_TIMES names a file and `first`."""
    path = os.environ.get("PLANTED_SELF_TIMES", "")
    if not path or not first:
        yield
        return
    a = _clocks()
    yield
    b = _clocks()
    d = {k: b[k] - a[k] for k in a}
    with open(path, "a") as f:
        f.write(json.dumps({"what": what, **d}) + "\n")


def drop_from_page_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class Sleeper(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 1:
            with self_timed("sleep", True):
                time.sleep(SLEEP_S)
        return x


class Reader(torch.nn.Module):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.buf = bytearray(os.path.getsize(path))  # touched here, not in a pass
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 1:
            drop_from_page_cache(self.path)
        with self_timed("read", self.calls == 1), open(self.path, "rb", buffering=0) as f:
            f.readinto(self.buf)
        return x


class Planted(torch.nn.Module):
    def __init__(self, sleep: bool, read: bool) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(64, 64)
        self.sleeper = Sleeper() if sleep else torch.nn.Identity()
        self.reader = Reader(_blob()) if read else torch.nn.Identity()
        self.out = torch.nn.Linear(64, 64)

    def forward(self, x):
        x = torch.relu(self.inp(x))
        x = self.sleeper(x)
        x = self.reader(x)
        return self.out(x)


def waits() -> Planted:
    return Planted(sleep=True, read=False)


def reads() -> Planted:
    return Planted(sleep=False, read=True)


def both() -> Planted:
    return Planted(sleep=True, read=True)


def neither() -> Planted:
    return Planted(sleep=False, read=False)

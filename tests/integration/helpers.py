"""Shared fixtures for the integration tests: models with known first-pass behaviour, and a
check that a trace left nothing behind."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import importlib
import os
import sys
import time

import torch
from torch import nn

from warmprof import _native, timeline
from warmprof.instruments.torch_compile import registered_callbacks


def release_freed_heap() -> None:
    """Give back to the kernel the pages of memory earlier code freed into glibc's heap (malloc_trim
    madvises free chunks away). Without it a large block can be served from a free chunk that is
    still resident (glibc's mmap threshold applies only when no free chunk fits), and its "first
    touch" faults nothing: seen in CI, after 2,000 tests in one process."""
    name = ctypes.util.find_library("c")
    if not name:
        return
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None)
    if trim is not None:
        trim(0)


class FirstTouch(nn.Module):
    """Allocates and first-touches `nbytes` on its first call only, timing that itself."""

    def __init__(self, nbytes: int = 64 << 20) -> None:
        super().__init__()
        release_freed_heap()  # so the first call's block is fresh pages, whatever earlier tests freed
        self.nbytes = nbytes
        self.buf = None
        self.alloc_ms = self.alloc_cpu_ms = None
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        if self.buf is None:
            t0, c0 = _native.now_ns(), time.thread_time_ns()
            buf = torch.empty(self.nbytes, dtype=torch.uint8)
            buf.numpy()[::4096] = 1  # one byte per page: single-threaded first touch
            self.alloc_ms = (_native.now_ns() - t0) / 1e6
            # The CPU this thread spent (faults are kernel work on it): unlike the wall time, it
            # leaves out the time a busy machine kept the thread waiting for a core.
            self.alloc_cpu_ms = (time.thread_time_ns() - c0) / 1e6
            self.buf = buf
        return self.lin(x)


class Counting(nn.Module):
    """Counts its calls (a test checks that nothing ran)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        self.calls += 1
        return self.lin(x)


class RaisesOnSecond(Counting):
    def forward(self, x):
        if self.calls == 1:
            self.calls += 1
            raise RuntimeError("second call fails")
        return super().forward(x)


class RaisesOnCall(Counting):
    """Raises on its n-th call (1-based), e.g. inside the instrumented steady passes."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x):
        if self.calls + 1 == self.n:
            self.calls += 1
            raise RuntimeError(f"call {self.n} fails")
        return super().forward(x)


class FirstCallPython(nn.Module):
    """Spends `ms` of pure Python (no torch, no import, no allocation to speak of) on its first call only."""

    def __init__(self, ms: float = 50.0) -> None:
        super().__init__()
        self.ms = ms
        self.done = False

    def forward(self, x):
        if not self.done:
            self.done = True
            end, n = time.perf_counter() + self.ms / 1e3, 0
            while time.perf_counter() < end:
                n += 1
        return x + 1


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _drop_cycles(n: int) -> None:
    """Make `n` objects in reference cycles and drop them: garbage only a collection frees."""
    heap = [_Cycle() for _ in range(n)]
    del heap


class CollectsOnFirstCall(nn.Module):
    """Its first call drops `n` objects in reference cycles and runs a full collection (as a
    collection the set-up left due does on a first call); later calls return x + 1 and nothing else."""

    def __init__(self, n: int = 200_000) -> None:
        super().__init__()
        self.n = n
        self.done = False

    def forward(self, x):
        if not self.done:
            self.done = True
            _drop_cycles(self.n)
            gc.collect()
        return x + 1


def collect_alone(n: int = 200_000, rounds: int = 3) -> float:
    """The ground truth for CollectsOnFirstCall, without warmprof: ms of one full collection of the
    same garbage, the least of `rounds` (a busy machine slows a round and never speeds it up)."""
    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        _drop_cycles(n)
        t = time.perf_counter()
        gc.collect()
        best = min(best, (time.perf_counter() - t) * 1e3)
    return best


class ImportsInForward(nn.Module):
    """Imports module `name` in every forward (a lazy import: executed on the first call only)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        importlib.import_module(self.name)
        return self.lin(x)


def write_slow_modules(folder, name: str, outer_ms: int = 30, inner_ms: int = 10) -> None:
    """Two modules in `folder`: `name` sleeps outer_ms at import and imports `name`_inner, which
    sleeps inner_ms."""
    (folder / f"{name}.py").write_text(f"import time\ntime.sleep({outer_ms / 1e3})\nimport {name}_inner\n")
    (folder / f"{name}_inner.py").write_text(f"import time\ntime.sleep({inner_ms / 1e3})\n")


def hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def own_forwards(model: nn.Module) -> list:
    """Each module's own `forward` instance attribute (None where it has none): warmprof's span wrappers
    (instruments/modules.py) must leave exactly these."""
    return [m.__dict__.get("forward") for m in model.modules()]


class Leftovers:
    """Snapshot of everything a trace may touch; `check()` asserts it is as before."""

    def __init__(self, model=None) -> None:
        self.model = model
        self.hooks = hook_count(model) if isinstance(model, nn.Module) else 0
        self.forwards = own_forwards(model) if isinstance(model, nn.Module) else []
        self.callbacks = registered_callbacks()
        self.fd1 = os.fstat(1)
        self.env = os.environ.get("ONEDNN_VERBOSE_TIMESTAMP")
        self.finders = [id(f) for f in sys.meta_path]
        self.gc_callbacks = [id(c) for c in gc.callbacks]

    def check(self) -> None:
        assert not timeline.active(), "recording left on"
        if isinstance(self.model, nn.Module):
            assert hook_count(self.model) == self.hooks, "module hooks left on"
            now_forwards = own_forwards(self.model)
            assert len(now_forwards) == len(self.forwards) and all(
                a is b for a, b in zip(now_forwards, self.forwards)), "a module's forward not restored"
        assert registered_callbacks() == self.callbacks, "dynamo compile callbacks left registered"
        now = os.fstat(1)
        assert (now.st_dev, now.st_ino) == (self.fd1.st_dev, self.fd1.st_ino), "stdout (fd 1) not restored"
        assert os.environ.get("ONEDNN_VERBOSE_TIMESTAMP") == self.env, "oneDNN env flag not restored"
        # The model's own imports may add finders (inductor does); warmprof's must be gone, and
        # every finder that was there must still be there, in order.
        from warmprof.import_spans import ImportFinder

        assert not any(isinstance(f, ImportFinder) for f in sys.meta_path), "import finder left on sys.meta_path"
        kept = [id(f) for f in sys.meta_path if id(f) in set(self.finders)]
        assert kept == self.finders, "sys.meta_path's finders changed"
        assert [id(c) for c in gc.callbacks] == self.gc_callbacks, "gc.callbacks changed (a collection callback left on)"

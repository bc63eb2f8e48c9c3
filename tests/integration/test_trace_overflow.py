"""A model with far more module calls than the recorder holds still gets a true headline: pass
times from the passes' own clock reads, cause spans kept, module calls thinned and said so.
And a model that runs submodules on threads is not charged for warmprof's own buffers."""

import concurrent.futures
import time

import pytest
from torch import nn

import warmprof
from warmprof import _native, timeline

from .helpers import Leftovers

SMALL = 4096  # records per thread: a few hundred module calls


@pytest.fixture
def small_recorder():
    previous = _native._testing.capacity()
    _native._testing.set_capacity(SMALL)
    yield
    _native._testing.set_capacity(previous)


class Planted(nn.Module):
    """On its first call, a 'compile' it times itself (a span and a sleep inside it)."""

    def __init__(self) -> None:
        super().__init__()
        self.own_ms = None

    def forward(self, x):
        if self.own_ms is None:
            t0 = _native.now_ns()
            with timeline.span(timeline.JIT_COMPILE, "planted:compile"):
                time.sleep(0.03)
            self.own_ms = (_native.now_ns() - t0) / 1e6
        return x


class ManyCalls(nn.Module):
    """3,000 module calls per pass (24,000 records), the planted cause at the very end."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Identity(), nn.Identity()) for _ in range(20))
        self.planted = Planted()
        self.pass_ms: list[float] = []

    def forward(self, x):
        t0 = _native.now_ns()
        for _ in range(50):
            for b in self.blocks:
                x = b(x)
        x = self.planted(x)
        self.pass_ms.append((_native.now_ns() - t0) / 1e6)
        return x


def test_recorder_overflow_keeps_pass_times_and_causes_and_says_what_was_thinned(small_recorder):
    model = ManyCalls()
    left = Leftovers(model)
    r = warmprof.trace(model, (2, 4), steady=3)
    left.check()  # hooks taken off when thinned, put back for the re-run, all removed at the end
    own_first, own_rerun = model.pass_ms[0], model.pass_ms[1]
    # Pass times are the passes' own clock reads: never shorter than the model's own timing of itself.
    assert r.first_pass_ms >= own_first
    assert r.seen_rerun_ms >= own_rerun > 0
    planted = [c for c in r.causes if c.cause == "jit_compile" and c.source == "planted"]
    assert planted, r.causes
    # a wait for a CPU inside the planted span (a busy machine) stays in it, said as its waited_ms
    assert not any(c.source.startswith("run_queue_in") for c in r.causes)
    assert 0.0 <= planted[0].waited_ms <= planted[0].ms
    assert 0.9 <= planted[0].ms / model.planted.own_ms <= 1.0 + 1e-6
    assert r.protocol.recorder.thinned_modules > 0
    assert r.protocol.recorder.dropped == 0
    # Each pass had its own budget: the re-run was recorded again (its hooks were back on) and ran out again.
    assert any(n.startswith("first pass: the recorder's module budget ran out") for n in r.notes), r.notes
    assert any(n.startswith("seen rerun: the recorder's module budget ran out") for n in r.notes), r.notes
    assert not any("no warm-up needed" in a for a in r.advice), r.advice


class PoolModel(nn.Module):
    """Runs its submodules on a thread pool started inside the first pass."""

    def __init__(self, workers: int = 8) -> None:
        super().__init__()
        self.parts = nn.ModuleList(nn.Linear(8, 8) for _ in range(workers))
        self.workers = workers

    def forward(self, x):
        with concurrent.futures.ThreadPoolExecutor(self.workers) as pool:
            outs = list(pool.map(lambda m: m(x), self.parts))
        return sum(outs)


def test_a_thread_pool_model_is_not_charged_for_warmprof_buffers():
    r = warmprof.trace(PoolModel(8), (2, 8), steady=3)
    pages_per_buffer = _native._testing.capacity() * _native.RECORD_BYTES // _native.page_size()
    faults = r.counters["first_pass_faults_outside_causes"]
    # 8 threads each pre-faulting a buffer inside the pass was 8 x 1,536 faults; the pool's
    # own cost (stacks, thread states) is far below one buffer.
    assert faults < pages_per_buffer, faults
    growth = [c for c in r.causes if c.cause == "allocator_growth"]
    assert sum(c.count for c in growth) < pages_per_buffer

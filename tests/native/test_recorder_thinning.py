"""Module calls are the one thinnable record: when a pass's module budget is spent the recorder
steps down (all modules -> coarse modules -> none) and keeps pass boundaries, cause spans and
the exits of module calls it recorded. Buffers give their memory back when a recording ends."""

import threading

import numpy as np
import pytest

from warmprof import _native, timeline
from warmprof.attribution import build_spans
from warmprof.timeline import BEGIN, INSTANT, THINNED, Recording

SMALL = 1024


@pytest.fixture
def small_capacity(recorder_capacity):
    recorder_capacity(SMALL)
    return SMALL


def _names(tl, kind=None):
    return [tl.names[int(n)] for k, n in zip(tl.kind, tl.name) if kind is None or k == kind]


def test_module_calls_step_down_to_coarse_then_none_and_causes_are_kept(small_capacity):
    fine, coarse = timeline.name_id("module:net.a.b.c"), timeline.name_id("module:net")
    cause = timeline.name_id("test:late_cause")
    with Recording() as rec:
        _native.begin_section(1)
        for _ in range(400):  # 400 calls x 8 records of each: far past the budget
            timeline.module_enter(coarse, True)
            timeline.module_enter(fine, False)
            timeline.module_exit(fine)
            timeline.module_exit(coarse)
        timeline.begin(timeline.JIT_COMPILE, cause)
        timeline.end(timeline.JIT_COMPILE, cause)
    tl = rec.drain()
    marks = [int(v) for k, n, v in zip(tl.kind, tl.name, tl.value) if k == INSTANT and tl.names[int(n)] == THINNED]
    assert marks == [1, 0]  # coarse only, then none
    assert tl.dropped == 0 and tl.thinned > 0
    spans = build_spans(tl)
    assert all(s.closed for s in spans), "an exit was dropped for an enter that was recorded"
    by_name = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    assert len(by_name["module:net"]) > len(by_name["module:net.a.b.c"]) > 0  # coarse ones lasted longer
    assert len(by_name["test:late_cause"]) == 1  # the cause after the budget ran out is there
    assert len(tl) <= SMALL


def test_each_section_gets_its_own_budget(small_capacity):
    fine = timeline.name_id("module:net.x.y.z")
    counts = []
    with Recording() as rec:
        for sections_left in (2, 1):
            _native.begin_section(sections_left)
            for _ in range(300):
                timeline.module_enter(fine, False)
                timeline.module_exit(fine)
            timeline.instant(timeline.STRUCTURE, timeline.name_id("test:section_end"))
    tl = rec.drain()
    ends = np.flatnonzero(np.array(_names(tl)) == "test:section_end")
    begins = np.array([k == BEGIN and tl.names[int(n)] == "module:net.x.y.z" for k, n in zip(tl.kind, tl.name)])
    counts = [int(begins[: ends[0]].sum()), int(begins[ends[0]: ends[1]].sum())]
    assert counts[0] > 0 and counts[1] > 0, counts  # the second section was not starved by the first
    assert len(ends) == 2


def test_a_module_exit_without_its_enter_records_nothing(small_capacity):
    nid = timeline.name_id("module:net.orphan")
    with Recording() as rec:
        timeline.module_exit(nid)
    assert len(rec.drain()) == 0


def test_an_inner_module_that_raised_does_not_unbalance_the_outer_one(small_capacity):
    outer, inner = timeline.name_id("module:net.outer"), timeline.name_id("module:net.outer.inner")
    with Recording() as rec:
        timeline.module_enter(outer, True)
        timeline.module_enter(inner, False)  # its forward raised: no exit hook ran
        timeline.module_exit(outer)
    spans = build_spans(rec.drain())
    assert [(s.name, s.closed) for s in spans if s.name == "module:net.outer"] == [("module:net.outer", True)]


def _fill_from_threads(nid: int, threads: int, per_thread: int) -> None:
    def fill():
        for i in range(per_thread):
            timeline.instant(timeline.STRUCTURE, nid, i)

    workers = [threading.Thread(target=fill) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def test_buffers_give_their_memory_back_when_released():
    """The recorder alone (no drain: a drained copy is the caller's memory, and malloc may keep it)."""
    nid = timeline.name_id("test:memory")
    per_thread = 200_000  # 4.6 MiB of records per thread
    before = _native.rss_bytes()
    _native.start()
    try:
        _fill_from_threads(nid, 8, per_thread)
    finally:
        _native.stop()
    during = _native.rss_bytes()
    _native.release()
    after = _native.rss_bytes()
    grew = during - before
    assert grew > 8 * per_thread * _native.RECORD_BYTES // 2  # the records were resident
    assert after - before < grew * 0.3, (before, during, after)


def test_a_recording_drains_then_releases_on_exit():
    nid = timeline.name_id("test:drain_then_release")
    with Recording() as rec:
        _fill_from_threads(nid, 3, 1000)
    assert len(rec.drain()) == 3000  # drained on exit, before the release
    assert len(_native.drain()["ts_ns"]) == 0  # nothing left in the recorder's buffers


def test_threads_starting_inside_a_recording_take_prefaulted_buffers():
    nid = timeline.name_id("test:prefaulted")

    def one():
        timeline.instant(timeline.STRUCTURE, nid)

    with Recording(spare_buffers=4) as rec:
        faults0 = sum(_native.faults())
        workers = [threading.Thread(target=one) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        faults = sum(_native.faults()) - faults0
    tl = rec.drain()
    assert tl.threads == 5 and tl.own_faults == 0
    # One buffer's pages is what each thread paid when its buffer was pre-faulted on registration.
    pages_per_buffer = _native._testing.capacity() * _native.RECORD_BYTES // _native.page_size()
    assert faults < pages_per_buffer, faults


def test_pages_first_touched_while_recording_are_warmprofs_own_faults():
    """A thread with no pre-faulted buffer faults its pages in as it writes: each such page is one
    fault with the time of the first record on it, so a pass can take out exactly its own."""
    nid = timeline.name_id("test:own_faults")
    records_per_page = _native.page_size() // _native.RECORD_BYTES
    with Recording(spare_buffers=0) as rec:
        t = threading.Thread(target=lambda: [timeline.instant(timeline.STRUCTURE, nid) for _ in range(20 * records_per_page)])
        t.start()
        t.join()
    tl = rec.drain()
    assert 19 <= tl.own_faults <= 21
    mine = tl.ts_ns[tl.name == nid]
    assert mine.min() <= tl.own_fault_ns.min() and tl.own_fault_ns.max() <= mine.max()
    assert np.all(np.diff(tl.own_fault_ns) >= 0)


def test_a_fork_while_recording_leaves_the_child_not_recording():
    import os

    nid = timeline.name_id("test:fork")
    with Recording() as rec:
        timeline.instant(timeline.STRUCTURE, nid)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: no buffers of the parent's, nothing recorded, no crash
            try:
                timeline.instant(timeline.STRUCTURE, nid)
                os.write(w, b"1" if not _native.enabled() else b"0")
            finally:
                os._exit(0)
        os.close(w)
        said = os.read(r, 1)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        timeline.instant(timeline.STRUCTURE, nid)
    assert said == b"1" and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert int(np.count_nonzero(rec.drain().name == nid)) == 2  # the parent's two, none of the child's


def test_a_recursive_module_closes_every_recorded_call_when_thinned(small_capacity):
    """The same module open several times (recursion, or several threads): thinning takes its
    hooks off only once none of its recorded calls is still open."""
    torch = pytest.importorskip("torch")  # the wheel check runs these without torch
    from torch import nn

    from warmprof.instruments.modules import ModuleHooks

    class Leaf(nn.Module):
        def forward(self, x):
            return x

    class Recursive(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.leaf = Leaf()

        def forward(self, x, depth=3):
            for _ in range(200):  # past the budget even with few boundaries sampling counters
                x = self.leaf(x)
            return self(x, depth - 1) if depth else x

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Sequential(nn.Sequential(Recursive()))

        def forward(self, x):
            return self.a(x)

    model = Net()
    with Recording() as rec:
        with ModuleHooks(model) as hooks:
            _native.begin_section(1)
            hooks.mark_pass("first")
            model(torch.zeros(1))
    tl = rec.drain()
    assert tl.thinned > 0
    assert [s.name for s in build_spans(tl) if not s.closed] == []

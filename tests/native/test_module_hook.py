"""The module hooks' native side: one _native.ModuleHook per module as both its pre- and post-hook,
and the gap that keeps module boundaries from sampling the host counters at every call."""

import gc
import time
import weakref

import pytest

from warmprof import _native, timeline
from warmprof.attribution import build_spans
from warmprof.timeline import BEGIN, COUNTER, END, Recording


def _counters(tl, name="host:minor_faults"):
    return [int(t) for t, k, n in zip(tl.ts_ns, tl.kind, tl.name) if k == COUNTER and tl.names[int(n)] == name]


def test_a_hook_called_with_two_arguments_opens_a_span_and_with_three_closes_it():
    nid = timeline.name_id("module:test_hook")
    hook = _native.ModuleHook(nid, True)
    assert (hook.name, hook.coarse, hook.open, hook.thinned) == (nid, True, 0, False)
    with Recording() as rec:
        _native.begin_section(1)
        assert hook(object(), ()) is None
        assert hook.open == 1
        assert hook(object(), (), None) is None
        assert hook.open == 0
    tl = rec.drain()
    kinds = [int(k) for k, n in zip(tl.kind, tl.name) if int(n) == nid]
    assert kinds == [BEGIN, END]
    assert [s.name for s in build_spans(tl)] == ["module:test_hook"]


@pytest.mark.parametrize("args, kwargs", [((), {}), ((1,), {}), ((1, 2, 3, 4), {}), ((1, 2), {"x": 1})])
def test_a_hook_refuses_calls_torch_never_makes(args, kwargs):
    hook = _native.ModuleHook(timeline.name_id("module:test_hook_args"), False)
    with pytest.raises(TypeError, match="ModuleHook takes"):
        hook(*args, **kwargs)


def test_a_hook_refuses_an_unknown_name_and_a_callback_that_is_not_callable():
    with pytest.raises(ValueError, match="name id"):
        _native.ModuleHook(10**9, True)
    with pytest.raises(TypeError, match="on_thin must be callable"):
        _native.ModuleHook(timeline.name_id("module:test_hook_cb"), True, 3)


def test_a_call_not_recorded_thins_the_hook_and_says_so_once_nothing_is_open():
    """Outside a recording nothing is taken: the pre-hook call asks to be taken off; a post-hook call
    with no recorded call open asks again (the post-hook's turn); reset() starts over."""
    calls = []
    hook = _native.ModuleHook(timeline.name_id("module:test_thin"), True, lambda: calls.append(hook.open))
    hook(None, ())
    assert hook.thinned and calls == [0]
    hook(None, (), None)
    assert calls == [0, 0]
    hook.reset()
    assert not hook.thinned and hook.open == 0


def test_an_exception_in_the_thin_callback_reaches_the_caller():
    def boom():
        raise RuntimeError("from on_thin")

    hook = _native.ModuleHook(timeline.name_id("module:test_thin_raise"), True, boom)
    with pytest.raises(RuntimeError, match="from on_thin"):
        hook(None, ())


def test_a_hook_and_its_callback_are_collected_with_their_cycle():
    class Owner:
        pass

    owner = Owner()
    owner.hook = _native.ModuleHook(timeline.name_id("module:test_gc"), True, lambda: owner)
    ref = weakref.ref(owner)
    del owner
    gc.collect()
    assert ref() is None


def test_boundaries_closer_than_the_gap_to_the_last_sample_take_no_counters():
    """A pass boundary always samples; module boundaries right after it, quicker than the gap, take
    their spans and no counters; one after a wait longer than the gap samples again."""
    nid = timeline.name_id("module:test_gap")
    _native.set_boundary_gap_ns(-1)
    with Recording() as rec:
        _native.begin_section(1)
        timeline.sample_host()
        gap_ns = _native.boundary_gap_ns()
        for _ in range(20):
            _native.module_enter(nid, True)
            _native.module_exit(nid)
        time.sleep(max(2 * gap_ns / 1e9, 0.002))
        _native.module_enter(nid, True)
        _native.module_exit(nid)
    tl = rec.drain()
    assert gap_ns > 0  # the default: a multiple of the cheapest sample taken so far
    samples = _counters(tl)
    assert 2 <= len(samples) < 20  # the pass boundary, the boundary after the sleep, few between
    spans = [s for s in build_spans(tl) if s.name == "module:test_gap"]
    assert len(spans) == 21 and all(s.closed for s in spans)
    assert samples[-1] > spans[-2].end_ns  # the call after the sleep sampled


def test_a_gap_of_zero_samples_every_boundary(every_boundary):
    nid = timeline.name_id("module:test_no_gap")
    with Recording() as rec:
        timeline.sample_host()
        for _ in range(10):
            _native.module_enter(nid, True)
            _native.module_exit(nid)
    assert len(_counters(rec.drain())) == 21


def test_the_gap_can_be_set_and_given_back_to_the_default():
    try:
        _native.set_boundary_gap_ns(250_000)
        assert _native.boundary_gap_ns() == pytest.approx(250_000, rel=0.01)
    finally:
        _native.set_boundary_gap_ns(-1)
    assert _native.boundary_gap_ns() != pytest.approx(250_000, rel=0.01)


def test_a_root_hook_samples_at_both_boundaries_whatever_the_gap():
    """The pass's own samples lie outside its window: the traced model's module (root) samples on
    entry and exit even right after another sample, so the pass's first and last counters are inside."""
    nid = timeline.name_id("module:test_root")
    root = _native.ModuleHook(nid, True, None, True)
    assert root.root
    try:
        _native.set_boundary_gap_ns(1e9)  # a second: no other boundary here samples
        with Recording() as rec:
            _native.begin_section(1)
            timeline.sample_host()
            root(None, ())
            _native.module_enter(timeline.name_id("module:test_root.child"), False)
            _native.module_exit(timeline.name_id("module:test_root.child"))
            root(None, (), None)
        tl = rec.drain()
    finally:
        _native.set_boundary_gap_ns(-1)
    assert len(_counters(tl)) == 3  # the pass boundary, the root's entry and its exit

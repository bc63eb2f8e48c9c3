"""The module spans' default form: _native.ModuleForward set as a module's `forward` attribute
(instruments/modules.py), which keeps torch's Module.__call__ on its fast path (no hooks)."""

import inspect

import pytest

from warmprof import _native, timeline
from warmprof.attribution import build_spans
from warmprof.timeline import BEGIN, END, Recording


def _span_kinds(tl, nid):
    return [int(k) for k, n in zip(tl.kind, tl.name) if int(n) == nid and int(k) in (BEGIN, END)]


def test_a_wrapped_call_passes_its_arguments_and_result_through_inside_one_span():
    nid = timeline.name_id("module:test_forward")
    hook = _native.ModuleHook(nid, True)
    seen = []

    def forward(a, b=0, *, c=1):
        seen.append((a, b, c))
        return a + b + c

    span = _native.ModuleForward(hook, forward)
    with Recording() as rec:
        _native.begin_section(1)
        assert span(1, 2, c=3) == 6
        assert span(4) == 5
    assert seen == [(1, 2, 3), (4, 0, 1)]
    assert hook.open == 0
    tl = rec.drain()
    assert _span_kinds(tl, nid) == [BEGIN, END, BEGIN, END]
    assert [s.name for s in build_spans(tl)] == ["module:test_forward"] * 2


def test_a_forward_that_raises_closes_its_span_and_the_exception_goes_on_as_it_was():
    nid = timeline.name_id("module:test_forward_raises")
    hook = _native.ModuleHook(nid, True)
    err = ValueError("the model's own error")

    def forward():
        raise err

    span = _native.ModuleForward(hook, forward)
    with Recording() as rec:
        _native.begin_section(1)
        with pytest.raises(ValueError) as got:
            span()
    assert got.value is err
    assert hook.open == 0
    tl = rec.drain()
    assert _span_kinds(tl, nid) == [BEGIN, END]
    assert all(s.closed for s in build_spans(tl))


def test_outside_a_recording_a_wrapped_call_records_nothing_and_still_runs():
    hook = _native.ModuleHook(timeline.name_id("module:test_forward_off"), True)
    span = _native.ModuleForward(hook, lambda x: x * 2)
    assert not _native.enabled()
    assert span(21) == 42
    assert (hook.open, hook.thinned) == (0, False)


def test_a_wrapper_reads_as_the_forward_it_wraps():
    torch = pytest.importorskip("torch")  # the wheel check runs these without torch

    lin = torch.nn.Linear(2, 3)
    span = _native.ModuleForward(_native.ModuleHook(timeline.name_id("module:test_forward_attrs"), True), lin.forward)
    assert span.__wrapped__ == lin.forward
    assert span.__name__ == "forward" and span.__self__ is lin
    # inspect.signature follows __wrapped__: transformers reads forward's parameters (generate())
    assert inspect.signature(span) == inspect.signature(lin.forward)
    assert "Linear.forward" in repr(span)
    with pytest.raises(AttributeError):
        span.no_such_attribute


def test_bad_arguments_are_refused():
    hook = _native.ModuleHook(timeline.name_id("module:test_forward_bad"), True)
    with pytest.raises(TypeError):
        _native.ModuleForward(object(), lambda: None)
    with pytest.raises(TypeError, match="callable"):
        _native.ModuleForward(hook, 3)

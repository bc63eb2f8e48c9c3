"""instruments/modules.py: modules' spans as forward wrappers (torch's fast path), hooks where a
forward cannot be wrapped, and a model's forwards exactly as they were after the instrument."""

import pytest
import torch
from torch import nn

from warmprof.attribution import build_spans
from warmprof.instruments.modules import ModuleHooks
from warmprof.timeline import Recording


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(2, 2)
        self.b = nn.ReLU()

    def forward(self, x):
        return self.b(self.a(x))


def _pass(model, hooks, x):
    from warmprof import _native

    _native.begin_section(1)
    hooks.mark_pass("first")
    return model(x)


def test_modules_are_wrapped_not_hooked_and_their_spans_nest():
    model = Net()
    with Recording() as rec:
        with ModuleHooks(model) as hooks:
            assert (hooks.wrapped, hooks.installed) == (3, 0)
            assert all(len(m._forward_pre_hooks) == len(m._forward_hooks) == 0 for m in model.modules())
            _pass(model, hooks, torch.zeros(1, 2))
    spans = {s.name: s for s in build_spans(rec.drain())}
    assert {"module:Net", "module:Net.a", "module:Net.b"} <= set(spans)
    outer, inner = spans["module:Net"], spans["module:Net.a"]
    assert outer.start_ns <= inner.start_ns and inner.end_ns <= outer.end_ns
    assert hooks.summary()["wrapped"] == 3


def test_a_modules_own_forward_attribute_comes_back_and_none_is_left_where_it_had_none():
    model = Net()
    own = model.b.forward  # an instance attribute set by someone else (accelerate does this)
    model.b.forward = lambda x: own(x) + 0
    set_by_user = model.b.__dict__["forward"]
    with Recording():
        with ModuleHooks(model):
            assert model.b.__dict__["forward"] is not set_by_user
            assert model.a.forward.__wrapped__ == nn.Linear.forward.__get__(model.a)
    assert model.b.__dict__["forward"] is set_by_user
    assert "forward" not in model.a.__dict__ and "forward" not in model.__dict__


def test_forwards_are_restored_when_the_model_raises():
    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    model = nn.Sequential(nn.Linear(2, 2), Boom())
    with Recording() as rec:
        with pytest.raises(RuntimeError, match="boom"):
            with ModuleHooks(model) as hooks:
                _pass(model, hooks, torch.zeros(1, 2))
    assert all("forward" not in m.__dict__ for m in model.modules())
    assert all(s.closed for s in build_spans(rec.drain())), "a module that raised left its span open"


def test_a_forward_the_model_sets_anew_during_the_trace_stays():
    model = Net()
    replacement = []

    class Swapper(nn.Module):
        def forward(self, x):
            self.forward = lambda x: x  # the module replaces its own forward on its first call
            replacement.append(self.__dict__["forward"])
            return x

    model.s = Swapper()
    with Recording():
        with ModuleHooks(model) as hooks:
            _pass(model, hooks, torch.zeros(1, 2))
            model.s(torch.zeros(1))
    assert model.s.__dict__["forward"] is replacement[0]


def test_torchscript_modules_get_no_span_and_a_note_and_a_compiled_top_level_gets_hooks():
    scripted = torch.jit.script(nn.Linear(2, 2))
    model = nn.Sequential(scripted, nn.ReLU())
    with Recording() as rec:
        with ModuleHooks(model) as hooks:
            # torch refuses hooks and attributes on a ScriptModule: the Sequential and the ReLU wrapped
            assert (hooks.wrapped, hooks.installed, hooks.modules) == (2, 0, 2)
            _pass(model, hooks, torch.zeros(1, 2))
    assert any("TorchScript modules: 1 with no span" in n for n in hooks.notes)
    names = {s.name for s in build_spans(rec.drain())}
    assert "module:Sequential.1" in names and "module:Sequential.0" not in names
    with Recording():
        with ModuleHooks(model, top_level_only=True) as hooks:
            assert (hooks.wrapped, hooks.installed) == (0, 2)
    assert hook_free(model) and all("forward" not in m.__dict__ for m in model.modules()
                                    if not isinstance(m, torch.jit.ScriptModule))


def hook_free(model) -> bool:
    return all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules()
               if not isinstance(m, torch.jit.ScriptModule))

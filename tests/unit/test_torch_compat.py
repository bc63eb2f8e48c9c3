"""system.torch_compat: each branch of each read of a torch API that differs between releases, with
stand-ins for the torch objects (the branch for a torch that has it and the one for a torch that lacks
it), and the live branch on the torch installed here (2.13.0 in CI; 2.9.1, 2.14.1 and 2.15.0 by hand,
docs/install.md's support table)."""

from __future__ import annotations

import enum
import sys
import types
from dataclasses import dataclass

import pytest

from warmprof.system import torch_compat as tc

# -- dynamo's compile callbacks --------------------------------------------------------------------


class _Handler:
    def __init__(self, methods=("register_start_callback", "register_end_callback", "remove_start_callback",
                                "remove_end_callback")) -> None:
        self.start_callbacks: list = []
        self.end_callbacks: list = []
        for m in methods:
            which = self.start_callbacks if "start" in m else self.end_callbacks
            setattr(self, m, which.append if m.startswith("register") else which.remove)


def _fake_dynamo(monkeypatch, handler) -> None:
    """torch._dynamo in sys.modules with this callback handler (a torch package stand-in around it)."""
    dynamo = types.ModuleType("torch._dynamo")
    if handler is not None:
        dynamo.callback_handler = handler
    torch = sys.modules.get("torch") or types.ModuleType("torch")
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._dynamo", dynamo)
    monkeypatch.setattr(torch, "_dynamo", dynamo, raising=False)


def test_a_handler_with_its_four_methods_is_used(monkeypatch):
    h = _Handler()
    _fake_dynamo(monkeypatch, h)
    assert tc.dynamo_callbacks() is h
    h.register_start_callback(print)
    h.register_end_callback(print)
    assert tc.registered_callbacks() == 2
    tc.remove_callback(h.remove_start_callback, print)
    tc.remove_callback(h.remove_start_callback, print)  # removed already: no error
    assert tc.registered_callbacks() == 1


def test_a_handler_missing_a_method_is_none(monkeypatch):
    _fake_dynamo(monkeypatch, _Handler(methods=("register_start_callback", "register_end_callback")))
    assert tc.dynamo_callbacks() is None and tc.registered_callbacks() == 0


def test_a_dynamo_without_a_handler_is_none(monkeypatch):
    _fake_dynamo(monkeypatch, None)
    assert tc.dynamo_callbacks() is None and tc.registered_callbacks() == 0


def test_dynamo_not_imported_is_none_and_is_not_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch._dynamo", raising=False)
    before = set(sys.modules)
    assert tc.dynamo_callbacks() is None and tc.compilation_metrics() == []
    assert tc.compile_time_metrics(import_dynamo=False) is None
    assert "torch._dynamo" not in set(sys.modules) - before


class _Trigger(enum.Enum):
    DYNAMO = 1
    CUDAGRAPH_RECORDING = 2


@dataclass
class _CallbackArgs:
    callback_trigger: _Trigger
    compile_id: object


@pytest.mark.parametrize("args, want", [
    ((_CallbackArgs(_Trigger.CUDAGRAPH_RECORDING, "0/1"),), ("CUDAGRAPH_RECORDING", "0/1")),  # 2.6 and later
    ((_CallbackArgs(_Trigger.DYNAMO, None),), ("DYNAMO", "")),
    ((types.SimpleNamespace(callback_trigger="TRITON_AUTOTUNING", compile_id=3),), ("TRITON_AUTOTUNING", "3")),
    ((), ("DYNAMO", "")),  # before 2.6: no argument
    ((object(),), ("DYNAMO", "")),  # an argument of a shape not known: a compile, no id
])
def test_callback_fields_from_callback_args_or_nothing(args, want):
    assert tc.callback_fields(args) == want


def test_the_trigger_table_reads_through_callback_fields():
    from warmprof.attribution.compiles import TRIGGERS, trigger_source

    assert trigger_source((_CallbackArgs(_Trigger.CUDAGRAPH_RECORDING, "0/0"),)) == TRIGGERS["CUDAGRAPH_RECORDING"][0]
    assert trigger_source(()) == TRIGGERS["DYNAMO"][0]


# -- dynamo's compilation metrics ------------------------------------------------------------------


def _fake_utils(monkeypatch, **attrs) -> None:
    _fake_dynamo(monkeypatch, _Handler())
    utils = types.ModuleType("torch._dynamo.utils")
    for k, v in attrs.items():
        setattr(utils, k, v)
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", utils)
    monkeypatch.setattr(sys.modules["torch._dynamo"], "utils", utils, raising=False)


def test_compilation_metrics_and_reasons_where_torch_has_them(monkeypatch):
    recs = [types.SimpleNamespace(compile_id="0/0", recompile_reason=None),
            types.SimpleNamespace(compile_id="0/1", recompile_reason="size mismatch at index 1")]
    _fake_utils(monkeypatch, get_compilation_metrics=lambda: iter(recs), compilation_time_metrics={"a": [0.5]})
    assert tc.compilation_metrics() == recs
    assert [tc.recompile_reason(r) for r in recs] == [None, "size mismatch at index 1"]
    assert tc.recompile_reason(object()) is None  # a record without the field
    assert tc.compile_time_metrics() == {"a": [0.5]}


def test_no_compilation_metrics_where_torch_lacks_them(monkeypatch):
    _fake_utils(monkeypatch)
    assert tc.compilation_metrics() == [] and tc.compile_time_metrics() is None


def test_compilation_metrics_that_raise_are_none_read(monkeypatch):
    def broken():
        raise RuntimeError("metrics context not set")

    _fake_utils(monkeypatch, get_compilation_metrics=broken, compilation_time_metrics=[("not", "a dict")])
    assert tc.compilation_metrics() == [] and tc.compile_time_metrics() is None


# -- the profiler's C API --------------------------------------------------------------------------


class _Profiler:
    """torch._C._profiler's stand-in: an _ExperimentalConfig with or without capture_overload_names."""

    class ProfilerState:
        KINETO = "KINETO"

    def __init__(self, overload_names: bool = True, fast: bool = True) -> None:
        def experimental(**kw):
            if not overload_names and kw:
                raise TypeError("__init__(): incompatible constructor arguments")
            return ("experimental", kw)

        self._ExperimentalConfig = experimental
        self.ProfilerConfig = lambda *a: ("config", a)
        if fast:
            self._RecordFunctionFast = "fast"


def test_kineto_config_with_overload_names():
    cfg = tc.kineto_cpu_config(_Profiler())
    assert cfg == ("config", ("KINETO", True, False, False, False, False,
                              ("experimental", {"capture_overload_names": True})))


def test_kineto_config_without_overload_names_says_why():
    with pytest.raises(RuntimeError, match="records no overload names"):
        tc.kineto_cpu_config(_Profiler(overload_names=False))


def test_kineto_config_without_the_classes_says_why():
    with pytest.raises(RuntimeError, match="no _ExperimentalConfig"):
        tc.kineto_cpu_config(types.SimpleNamespace())


def test_record_function_fast_or_record_function():
    pytest.importorskip("torch")
    from torch.autograd.profiler import record_function

    assert tc.record_function_fast(_Profiler()) == "fast"
    assert tc.record_function_fast(_Profiler(fast=False)) is record_function


# -- torch.load, cudagraph trees, the allocator ----------------------------------------------------


def test_load_with_weights_only_where_load_takes_it():
    calls = []

    def load(path, map_location=None, weights_only=None):
        calls.append((path, map_location, weights_only))
        return "obj"

    assert tc.load_weights_only(types.SimpleNamespace(load=load), "f.pt") == ("obj", True)
    assert calls == [("f.pt", "cpu", True)]


def test_load_without_weights_only_says_it_was_not_safe():
    def load(path, map_location=None):
        return "obj"

    assert tc.load_weights_only(types.SimpleNamespace(load=load), "f.pt") == ("obj", False)


def test_cudagraph_step_marker_where_torch_has_it_or_not():
    mark = object()
    assert tc.cudagraph_step_marker(types.SimpleNamespace(compiler=types.SimpleNamespace(
        cudagraph_mark_step_begin=mark))) is mark
    assert tc.cudagraph_step_marker(types.SimpleNamespace(compiler=types.SimpleNamespace())) is None
    assert tc.cudagraph_step_marker(types.SimpleNamespace()) is None


def test_memory_stat_reads_the_first_name_present_or_none():
    assert tc.memory_stat({"segment.all.current": 3, "reserved_bytes.all.current": 4096}, "segments_current") == 3
    assert tc.memory_stat({}, "reserved_bytes_current") is None  # an allocator never used: {}
    assert set(tc.MEMORY_STATS_KEYS) >= {"segments", "reserved_bytes", "segments_current", "reserved_bytes_current"}


# -- the live branch, on the torch installed here --------------------------------------------------


def test_the_installed_torch_takes_the_newer_branch_of_each():
    """torch 2.9-2.15 all have each API (checked on 2.9.1, 2.13.0, 2.14.1, 2.15.0): a release that
    drops or renames one fails here first, with its name."""
    torch = pytest.importorskip("torch")
    import torch._C._profiler as profiler

    handler = tc.dynamo_callbacks(import_dynamo=True)
    assert handler is not None, f"torch {torch.__version__}: no dynamo callback handler"
    before = tc.registered_callbacks()

    def on_start(*a):
        pass

    handler.register_start_callback(on_start)
    try:
        assert tc.registered_callbacks() == before + 1
    finally:
        tc.remove_callback(handler.remove_start_callback, on_start)
    assert tc.registered_callbacks() == before
    assert isinstance(tc.compile_time_metrics(), dict), torch.__version__
    assert isinstance(tc.compilation_metrics(), list)
    tc.kineto_cpu_config()  # records overload names
    assert tc.record_function_fast() is profiler._RecordFunctionFast
    assert tc.cudagraph_step_marker(torch) is torch.compiler.cudagraph_mark_step_begin
    import inspect

    assert "weights_only" in inspect.signature(torch.load).parameters


def test_the_installed_torch_hands_a_compile_callback_its_trigger_and_id(tmp_path, monkeypatch):
    """A real compile (the eager backend: no C++ compiler) calls the start callback with a
    CallbackArgs whose trigger and compile id callback_fields reads."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    handler = tc.dynamo_callbacks(import_dynamo=True)
    seen = []

    def on_start(*a):
        seen.append(tc.callback_fields(a))

    handler.register_start_callback(on_start)
    try:
        f = torch.compile(lambda x: x * 2 + 1, backend="eager")
        f(torch.ones(3))
    finally:
        tc.remove_callback(handler.remove_start_callback, on_start)
    assert seen and seen[0][0] == "DYNAMO" and "/" in seen[0][1], seen

"""cuda_instruments(options): what a trace on device="cuda" runs, and that it cleans up after itself."""

from __future__ import annotations

import contextlib
import sys
import threading

import pytest

from warmprof import _native
from warmprof.instruments.base import Instrument
from warmprof.instruments.cuda_set import cuda_instruments
from warmprof.timeline import Recording

torch = pytest.importorskip("torch")


def names(options: dict) -> list[str]:
    return [i.name for i in cuda_instruments(options)]


def test_default_set_and_order(monkeypatch):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    assert names({}) == ["cupti", "cuda_events", "torch_cuda_allocator", "cudnn_benchmark", "torch_nvrtc_cache",
                         "clock_ramp"]


def test_options_select_instruments(monkeypatch):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    assert "cupti" not in names({"cupti": False})
    assert "inductor_cuda" in names({"compiled": True})
    assert "inductor_cuda" not in names({"compiled": False})
    assert "cudnn_benchmark" not in names({"compiled": True})  # no global module hooks under compile
    assert "cupy" not in names({})
    assert "cupy" in names({"cupy": True})
    assert "cupy" not in names({"cupy": False})


def test_every_instrument_follows_the_protocol():
    instruments = cuda_instruments({"device": "cuda:0", "compiled": True, "cupy": True})
    assert len({i.name for i in instruments}) == len(instruments)  # report["instruments"] is keyed by name
    for inst in instruments:
        assert isinstance(inst, Instrument) and inst.name and inst.name != Instrument.name
        summary = inst.summary()
        assert summary["active"] is inst.available
        assert ("reason" in summary) is bool(inst.reason)  # an off instrument always says why
        assert set(inst.span_evidence.values()) <= {"measured", "estimated", "inferred"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="covers a machine without CUDA")
def test_without_a_gpu_every_instrument_is_off_with_a_reason_and_leaves_nothing(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    m = torch.nn.modules.module
    hooks_before = len(m._global_forward_pre_hooks) + len(m._global_forward_hooks)
    threads_before = threading.active_count()
    insts = cuda_instruments({"device": "cuda", "compiled": False, "cupy": True})
    with Recording():
        with contextlib.ExitStack() as stack:
            for i in insts:
                stack.enter_context(i)
            for i in insts:
                i.mark_pass("first")
            for i in insts:
                i.end_pass("first")
    off = {i.name: i.reason for i in insts if i.reason}
    assert "no NVIDIA driver" in off["cupti"] or "built without" in off["cupti"]
    assert off["cuda_events"] and off["torch_cuda_allocator"] and off["clock_ramp"]
    for i in insts:
        summary = i.summary()
        assert summary["active"] == (not i.reason)
        if i.reason:
            assert summary["reason"] == i.reason
    assert _native.cupti_active() is False
    assert len(m._global_forward_pre_hooks) + len(m._global_forward_hooks) == hooks_before
    assert threading.active_count() == threads_before

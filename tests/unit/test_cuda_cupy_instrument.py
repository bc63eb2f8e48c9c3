"""The CuPy instrument against a fake `cupy.cuda.compiler` (CuPy is not installed on CPU machines)."""

from __future__ import annotations

import sys
import types

import pytest

from warmprof.instruments.cupy import Cupy
from warmprof.timeline import BEGIN, END, JIT_COMPILE, Recording


def fake_compiler(disk_hit: bool) -> types.SimpleNamespace:
    mod = types.SimpleNamespace(calls=[])

    def _compile_using_nvrtc(source, *args, **kwargs):
        mod.calls.append("nvrtc")
        return b"ptx"

    def compile_using_nvrtc(source, *args, **kwargs):  # the public one delegates to the private one
        return mod._compile_using_nvrtc(source, *args, **kwargs)

    def compile_using_nvcc(source, *args, **kwargs):
        mod.calls.append("nvcc")
        return b"cubin"

    def _compile_with_cache_cuda(source, options, arch, cache_dir, extra_source=None, backend="nvrtc"):
        mod.calls.append("cache")
        if disk_hit:
            return "module-from-disk"
        if backend == "nvcc":
            mod.compile_using_nvcc(source)
        else:
            mod.compile_using_nvrtc(source)
        return "module"

    mod._compile_using_nvrtc = _compile_using_nvrtc
    mod.compile_using_nvrtc = compile_using_nvrtc
    mod.compile_using_nvcc = compile_using_nvcc
    mod._compile_with_cache_cuda = _compile_with_cache_cuda
    return mod


def cupy_records(tl) -> list[tuple[int, int, str]]:
    return [(int(tl.kind[i]), int(tl.cause[i]), tl.name_of(i)) for i in range(len(tl))
            if tl.name_of(i).startswith("cupy:")]


def test_cache_miss_with_nvrtc_compile_nests_and_counts_once():
    mod = fake_compiler(disk_hit=False)
    originals = dict(vars(mod))
    with Recording() as rec:
        with Cupy(compiler_module=mod) as inst:
            inst.mark_pass("first")
            assert mod._compile_with_cache_cuda("src", (), "90", None) == "module"
    assert cupy_records(rec.drain()) == [
        (BEGIN, JIT_COMPILE, "cupy:kernel_cache"),
        (BEGIN, JIT_COMPILE, "cupy:nvrtc"),
        (END, JIT_COMPILE, "cupy:nvrtc"),
        (END, JIT_COMPILE, "cupy:kernel_cache"),
    ]
    summary = inst.summary()
    assert summary["kernel_cache_misses"] == {"first": 1}
    assert summary["compiles"] == {"first": 1}  # public -> private nvrtc counted once
    assert summary["disk_cache_hits"] == {"first": 0}
    assert {k: v for k, v in vars(mod).items() if k != "calls"} == {k: v for k, v in originals.items() if k != "calls"}


def test_disk_cache_hit_is_a_miss_without_compile():
    mod = fake_compiler(disk_hit=True)
    with Recording() as rec:
        with Cupy(compiler_module=mod) as inst:
            inst.mark_pass("first")
            mod._compile_with_cache_cuda("src", (), "90", None)
    assert [r[2] for r in cupy_records(rec.drain())] == ["cupy:kernel_cache", "cupy:kernel_cache"]
    assert inst.summary()["disk_cache_hits"] == {"first": 1}


def test_nvcc_backend_is_its_own_span():
    mod = fake_compiler(disk_hit=False)
    with Recording() as rec:
        with Cupy(compiler_module=mod):
            mod._compile_with_cache_cuda("src", (), "90", None, backend="nvcc")
    assert "cupy:nvcc" in [r[2] for r in cupy_records(rec.drain())]


def test_wrappers_are_removed_even_when_compile_raises():
    mod = fake_compiler(disk_hit=False)

    def broken(*a, **k):
        raise RuntimeError("nvrtc: error")

    mod._compile_using_nvrtc = broken
    with Recording() as rec:
        with pytest.raises(RuntimeError):
            with Cupy(compiler_module=mod):
                mod._compile_with_cache_cuda("src", (), "90", None)
    assert mod._compile_using_nvrtc is broken
    kinds = [r[0] for r in cupy_records(rec.drain())]
    assert kinds.count(BEGIN) == kinds.count(END) == 2


def test_off_when_cupy_is_not_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    inst = Cupy()
    assert inst.reason == "cupy is not imported by this process"
    with inst:
        pass
    assert inst.summary() == {"active": False, "reason": inst.reason}


def test_off_when_the_module_has_nothing_to_wrap():
    assert "none of the compile functions" in Cupy(compiler_module=types.SimpleNamespace()).reason

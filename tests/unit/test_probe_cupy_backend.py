"""The cupy backend's plumbing, run on a NumPy stand-in for CuPy (no GPU needed): a probe completes,
compiles are inferred (CuPy has no counter), the kernel-cache directory is fresh and restored."""

import os
import sys
import types

import numpy as np
import pytest

import warmprof
from warmprof.errors import DeviceError


def fake_cupy(device_count=1):
    cp = types.ModuleType("cupy")
    cp.__version__ = "0.0-fake"
    for name in ("float32", "float16", "float64", "uint8", "dtype", "exp", "ones", "zeros", "empty"):
        setattr(cp, name, getattr(np, name))
    seen_cache_dirs = []

    class Stream:
        def synchronize(self):
            seen_cache_dirs.append(os.environ.get("CUPY_CACHE_DIR"))

    class Device:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    class Pool:
        def free_all_blocks(self):
            return None

    cp.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=lambda: device_count),
        Device=Device, get_current_stream=lambda: Stream())
    cp.random = types.SimpleNamespace(standard_normal=lambda shape: np.random.standard_normal(shape))
    cp.get_default_memory_pool = lambda: Pool()
    cp.seen_cache_dirs = seen_cache_dirs
    return cp


def test_a_probe_runs_through_the_cupy_backend(monkeypatch):
    cp = fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    before = os.environ.get("CUPY_CACHE_DIR")
    r = warmprof.probe(("matmul", "softmax"), device="cuda", backend="cupy", shapes_per_op=2, steady_calls=5,
                       rerun_rounds=1, K=4, B=2, progress=False)
    assert r.backend == "cupy" and set(r.ops) == {"matmul", "softmax"}
    assert r.bucketing["counted"] is False and r.bucketing["default_dynamic"] is None
    assert "CuPy 0.0-fake" in r.protocol["what"]
    fresh = {d for d in cp.seen_cache_dirs if d}
    assert len(fresh) == 1 and not os.path.exists(fresh.pop())  # one fresh cache dir, removed afterwards
    assert os.environ.get("CUPY_CACHE_DIR") == before


def test_softmax_rows_sum_to_one_on_the_array_path():
    from warmprof.probes.ops import softmax_array

    out = softmax_array(np.random.standard_normal((3, 7)), np)
    assert np.allclose(out.sum(axis=-1), 1.0)


def test_cupy_with_no_device_or_a_missing_index_is_a_device_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(device_count=1))
    with pytest.raises(DeviceError, match="only 1 CUDA device"):
        warmprof.probe(("matmul",), device="cuda:3", backend="cupy", progress=False)

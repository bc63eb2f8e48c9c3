"""Probe backends: how to make inputs, call an op, synchronize, allocate fresh memory, count compiles.

eager (torch on cpu, cuda, mps), compile (torch.compile, static shapes, on cpu or cuda), cupy (cuda):
which runs where, how a device syncs and how its fresh allocation is timed come from the device
table (devices.py).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
from typing import Any, Callable, Iterator

from .. import _native, devices
from ..errors import DeviceError, InputError
from ..stats import median
from ..system.fileio import make_temp_folder, require_temp_folder
from . import ops as O
from .compile_env import GRAPH_COUNTER, CompileSession, unique_graphs
from .timing import stats, time_calls

BACKENDS = ("eager", "compile", "cupy")
# backend -> the device kinds it runs on: {"eager": ("cpu", "cuda", "mps"), "compile": ("cpu", "cuda"), "cupy": ("cuda",)}
BACKEND_DEVICES = {b: tuple(k.name for k in devices.KINDS.values() if b in k.probe_backends) for b in BACKENDS}
ALLOC_TRIALS = 5
STALL_FACTOR = 2.0  # N threads slower than this many times one thread: they are waiting for cores


class TorchEager:
    """torch ops called directly on cpu, cuda or mps."""

    name = "eager"
    counter: str | None = None  # no compile counter: compiles are inferred from call times
    # said before the probe's first call (bands.calibrate) when that call is a long wait: "" for none
    first_call_note = ""

    def __init__(self, device: Any, dtype: Any) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.kind = devices.of(device)
        self.dtype = dtype
        self.element_size = torch.empty((), dtype=dtype).element_size()
        self.sync = self.kind.sync(device)

    def __enter__(self) -> "TorchEager":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    # -- ops -----------------------------------------------------------------------------------
    def fn(self, op: str) -> Callable:
        table: dict[str, Callable] = {"matmul": O.matmul, "softmax": O.softmax_torch, "elementwise": O.elementwise}
        return table[op]

    def seq_fn(self, dynamic_default: bool = False) -> Callable:
        return O.seq_matmul

    def trivial(self) -> tuple[Callable, tuple]:
        one = self.torch.ones(1, device=self.device, dtype=self.dtype)
        return O.trivial_add, (one, one.clone())

    def inputs(self, op: str, shape: tuple[int, ...]) -> tuple:
        return tuple(self.randn(s) for s in O.input_shapes(op, shape))

    def randn(self, shape: tuple[int, ...]) -> Any:
        return self.torch.randn(shape, device=self.device, dtype=self.dtype)

    def pad_rows(self, x: Any, rows: int) -> Any:
        out = self.torch.zeros((rows, x.shape[1]), device=self.device, dtype=self.dtype)
        out[: x.shape[0]] = x
        return out

    def runtime_warmup(self) -> None:
        """Start what belongs to the process, not to any op: the intra-op thread pool, the allocator."""
        big = self.torch.ones(1 << 20, device=self.device, dtype=self.dtype)
        self.sync()
        (big + big).sum().item()
        self.sync()

    def thread_stall_note(self) -> str | None:
        """On a CPU whose cores are taken by other work, intra-op threads wait for each other: say so, measured."""
        n = self.torch.get_num_threads()
        if not self.kind.host or n <= 1:
            return None
        x = self.torch.ones(1 << 20, dtype=self.dtype)
        multi = stats(time_calls(O.trivial_add, (x, x), self.sync, 15)).median_ms
        self.torch.set_num_threads(1)
        try:
            single = stats(time_calls(O.trivial_add, (x, x), self.sync, 15)).median_ms
        finally:
            self.torch.set_num_threads(n)
            time_calls(O.trivial_add, (x, x), self.sync, 3)  # the pool at n threads again before any probe
        if multi <= STALL_FACTOR * single:
            return None
        return (f"a 1M-element add took {multi:.3g} ms on {n} intra-op threads vs {single:.3g} ms on one: other work "
                f"holds the cores, so parallel ops wait for descheduled threads and steady times inflate; "
                f"--threads 1 measures the ops without that")

    # -- experiments and counters --------------------------------------------------------------
    @contextlib.contextmanager
    def experiment(self, name: str, recompile_limit: int | None = None) -> Iterator[None]:
        yield  # eager has no per-experiment state to reset; never-seen shapes keep experiments apart

    def compiles(self) -> int | None:
        return None

    # -- allocation band -----------------------------------------------------------------------
    @property
    def alloc_how(self) -> str:
        return self.kind.fresh_allocation_how

    def alloc_ms(self, nbytes: int) -> float:
        return self.kind.fresh_allocation_ms(self.device, nbytes, ALLOC_TRIALS)

    def describe(self) -> str:
        return f"torch {self.torch.__version__} eager on {self.device}"

    def cache_note(self) -> str:
        return "not applicable (eager)"


class TorchCompile(TorchEager):
    """torch.compile with static shapes (dynamic=False), a reset dynamo and cold caches per experiment."""

    name = "compile"
    counter = GRAPH_COUNTER
    first_call_note = ("compiling a 1-element add (the first call under torch.compile: seconds, longer with "
                       "cold caches, while inductor loads and builds its first kernel)")

    def __init__(self, device: Any, dtype: Any, cold_cache: bool = True) -> None:
        super().__init__(device, dtype)
        self.session = CompileSession(cold_cache)
        self._compiled: dict[Any, Callable] = {}

    def __enter__(self) -> "TorchCompile":
        self.session.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._compiled.clear()
        self.session.__exit__(*exc)

    def _compile(self, fn: Callable, dynamic: bool | None) -> Callable:
        key = (fn, dynamic)
        if key not in self._compiled:
            self._compiled[key] = self.torch.compile(fn, dynamic=dynamic)
        return self._compiled[key]

    def fn(self, op: str) -> Callable:
        return self._compile(super().fn(op), False)

    def seq_fn(self, dynamic_default: bool = False) -> Callable:
        return self._compile(O.seq_matmul, None if dynamic_default else False)

    def trivial(self) -> tuple[Callable, tuple]:
        fn, args = super().trivial()
        return self._compile(fn, False), args

    @contextlib.contextmanager
    def experiment(self, name: str, recompile_limit: int | None = None) -> Iterator[None]:
        self._compiled.clear()
        with self.session.experiment(name, recompile_limit):
            yield
        self._compiled.clear()

    def compiles(self) -> int | None:
        return unique_graphs()

    def describe(self) -> str:
        return f"torch {self.torch.__version__} torch.compile (inductor, dynamic=False) on {self.device}"

    def cache_note(self) -> str:
        return self.session.cache_note()


class CupyBackend:
    """CuPy on a CUDA device: cuBLAS matmul, NVRTC-compiled elementwise and reduction kernels."""

    name = "cupy"
    counter: str | None = None

    def __init__(self, index: int, dtype_name: str, cold_cache: bool = True) -> None:
        try:
            import cupy
        except Exception as e:  # ImportError, or a CUDA library that will not load
            raise DeviceError(f"the cupy backend needs CuPy, which cannot be imported here ({type(e).__name__}: {e})") from None
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as e:
            raise DeviceError(f"the cupy backend found no usable CUDA device ({type(e).__name__}: {e})") from None
        if index >= count:
            raise DeviceError(f"device 'cuda:{index}' requested but only {count} CUDA device(s) exist")
        self.cp = cupy
        self.index = index
        self.kind = devices.KINDS["cuda"]  # CuPy runs on CUDA devices only
        self.dtype = getattr(cupy, dtype_name)
        self.element_size = cupy.dtype(self.dtype).itemsize
        self.cold_cache = cold_cache
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> "CupyBackend":
        self._stack.enter_context(self.cp.cuda.Device(self.index))
        if self.cold_cache:  # CuPy reads CUPY_CACHE_DIR when it compiles; a fresh one means cold NVRTC
            old = os.environ.get("CUPY_CACHE_DIR")
            root = make_temp_folder("warmprof-probe-cupy-", "CuPy's empty kernel cache")
            os.environ["CUPY_CACHE_DIR"] = root
            self._stack.callback(shutil.rmtree, root, True)
            self._stack.callback(_restore_env, "CUPY_CACHE_DIR", old)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    def sync(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()

    def fn(self, op: str) -> Callable:
        if op == "softmax":
            return functools.partial(O.softmax_array, xp=self.cp)
        table: dict[str, Callable] = {"matmul": O.matmul, "elementwise": O.elementwise}
        return table[op]

    def seq_fn(self, dynamic_default: bool = False) -> Callable:
        return O.seq_matmul

    def trivial(self) -> tuple[Callable, tuple]:
        one = self.cp.ones(1, dtype=self.dtype)
        return O.trivial_add, (one, one.copy())

    def inputs(self, op: str, shape: tuple[int, ...]) -> tuple:
        return tuple(self.randn(s) for s in O.input_shapes(op, shape))

    def randn(self, shape: tuple[int, ...]) -> Any:
        return self.cp.random.standard_normal(shape).astype(self.dtype)

    def pad_rows(self, x: Any, rows: int) -> Any:
        out = self.cp.zeros((rows, x.shape[1]), dtype=self.dtype)
        out[: x.shape[0]] = x
        return out

    def thread_stall_note(self) -> str | None:
        return None

    def runtime_warmup(self) -> None:
        big = self.cp.ones(1 << 20, dtype=self.dtype)
        float((big + big).sum())
        self.sync()

    @contextlib.contextmanager
    def experiment(self, name: str, recompile_limit: int | None = None) -> Iterator[None]:
        yield

    def compiles(self) -> int | None:
        return None

    alloc_how = ("cupy memory pool free_all_blocks(), then cupy.empty + fill at the size, synchronized "
                 "(a pool miss plus a first write; median of 5, best effort)")

    def alloc_ms(self, nbytes: int) -> float:
        pool = self.cp.get_default_memory_pool()
        samples = []
        for _ in range(ALLOC_TRIALS):
            pool.free_all_blocks()
            self.sync()
            t0 = _native.now_ns()
            buf = self.cp.empty(max(1, nbytes), dtype=self.cp.uint8)
            buf.fill(1)
            self.sync()
            samples.append((_native.now_ns() - t0) / 1e6)
            del buf
        pool.free_all_blocks()
        return median(samples)

    def describe(self) -> str:
        return f"CuPy {self.cp.__version__} on cuda:{self.index}"

    def cache_note(self) -> str:
        return "fresh empty CUPY_CACHE_DIR (cold NVRTC); removed afterwards" if self.cold_cache else "the caller's CuPy kernel cache"


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def open_backend(device: str, backend: str, dtype: str, cold_cache: bool = True):
    """A backend object for (device, backend), or a clear WarmprofError saying why not."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if not isinstance(device, str):
        raise DeviceError(f"device must be a string like {devices.EXAMPLES}, got {device!r}")
    kind, _, index = device.partition(":")
    if devices.find(kind) is None:
        raise DeviceError(f"unknown device {device!r}: use {devices.USE}")
    if kind not in BACKEND_DEVICES[backend]:
        raise InputError(f"the {backend} backend runs on {' or '.join(BACKEND_DEVICES[backend])}, not {kind}")
    if backend == "cupy":
        if index and not index.isdigit():
            raise DeviceError(f"unknown device {device!r}: use cuda or cuda:N")
        if dtype not in ("float32", "float16", "float64"):
            raise InputError(f"dtype {dtype!r} is not one the cupy probes run (float32, float16, float64)")
        return CupyBackend(int(index or 0), dtype, cold_cache)
    if backend == "compile":  # torch._dynamo and inductor look for their cache in the temp folder on import
        require_temp_folder("torch.compile's caches")
    try:
        import torch  # noqa: F401
    except ImportError:
        raise DeviceError(f"the {backend} backend needs torch, which is not installed (pip install warmprof[torch])") from None
    from ..traces.inputs import parse_device, parse_dtype

    dev = parse_device(device)
    tdtype = parse_dtype(dtype)
    if tdtype is None or not tdtype.is_floating_point:
        raise InputError(f"the probes need a floating dtype (float32, float16, bfloat16), got {dtype!r}")
    if backend == "compile":
        return TorchCompile(dev, tdtype, cold_cache)
    return TorchEager(dev, tdtype)

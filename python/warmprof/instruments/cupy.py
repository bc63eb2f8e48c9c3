"""CuPy: kernel-cache misses and NVRTC/NVCC compiles as `jit_compile` spans.

CuPy memoizes compiled kernels in memory; an in-memory miss calls
`cupy.cuda.compiler._compile_with_cache_cuda`, which reads the on-disk kernel cache
(~/.cupy/kernel_cache) and compiles with NVRTC (or nvcc) only when that misses too. Both are
wrapped while the instrument is on:
- "cupy:kernel_cache": the in-memory miss (disk lookup + compile on a disk miss + module load);
- "cupy:nvrtc" / "cupy:nvcc": the compile itself (outermost call only; nested helpers not
  double counted).
The module load inside appears as CUPTI runtime_init (innermost span wins). The wrappers are
module attributes looked up at call time by CuPy, and are restored on exit.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, cast

from ..timeline import JIT_COMPILE, begin, end, name_id
from .base import Instrument

CACHE_FUNCTIONS = ("_compile_with_cache_cuda",)
COMPILE_FUNCTIONS = {
    "_compile_using_nvrtc": "nvrtc",
    "compile_using_nvrtc": "nvrtc",
    "compile_using_nvcc": "nvcc",
}


class Cupy(Instrument):
    name = "cupy"

    def __init__(self, compiler_module: Any = None) -> None:
        super().__init__()
        self.cache_misses: dict[str, int] = {}
        self.compiles: dict[str, int] = {}
        self._saved: list[tuple[str, Any]] = []
        self._depth = threading.local()
        self._mod = compiler_module
        if compiler_module is None:
            if "cupy" not in sys.modules:
                self.reason = "cupy is not imported by this process"
                return
            try:
                from cupy.cuda import compiler
            except Exception as e:
                self.reason = f"cupy.cuda.compiler is not importable ({type(e).__name__}: {e})"
                return
            self._mod = compiler
        if not any(hasattr(self._mod, f) for f in CACHE_FUNCTIONS + tuple(COMPILE_FUNCTIONS)):
            self.reason = "this CuPy has none of the compile functions warmprof wraps"

    def _count(self, table: dict[str, int]) -> None:
        table[self.current_pass] = table.get(self.current_pass, 0) + 1

    def _wrap(self, fn: Callable | None, span: str, table: dict[str, int], depth_key: str) -> Callable:
        # fn None: an attribute this CuPy lacks; _patch does not install that wrapper
        nid = name_id(span)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, depth_key, 0)
            setattr(self._depth, depth_key, depth + 1)
            if depth == 0:
                self._count(table)
                begin(JIT_COMPILE, nid)
            try:
                return cast(Callable, fn)(*args, **kwargs)  # installed only where fn is not None
            finally:
                setattr(self._depth, depth_key, depth)
                if depth == 0:
                    end(JIT_COMPILE, nid)

        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        return wrapper

    def __enter__(self) -> "Cupy":
        if self.reason:
            return self
        for attr in CACHE_FUNCTIONS:
            self._patch(attr, self._wrap(getattr(self._mod, attr, None), "cupy:kernel_cache",
                                         self.cache_misses, "cache"))
        for attr, kind in COMPILE_FUNCTIONS.items():
            self._patch(attr, self._wrap(getattr(self._mod, attr, None), f"cupy:{kind}", self.compiles, "compile"))
        return self

    def _patch(self, attr: str, wrapper: Callable) -> None:
        original = getattr(self._mod, attr, None)
        if original is None:
            return
        self._saved.append((attr, original))
        setattr(self._mod, attr, wrapper)

    def __exit__(self, *exc: Any) -> None:
        while self._saved:
            attr, original = self._saved.pop()
            setattr(self._mod, attr, original)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if self.reason:
            return out
        out["kernel_cache_misses"] = dict(self.cache_misses)
        out["compiles"] = dict(self.compiles)
        out["disk_cache_hits"] = {p: max(0, n - self.compiles.get(p, 0)) for p, n in self.cache_misses.items()}
        return out


__all__ = ["Cupy", "CACHE_FUNCTIONS", "COMPILE_FUNCTIONS"]

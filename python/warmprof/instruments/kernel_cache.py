"""torch's own NVRTC compiles (the jiterator: many torch.special.* ops, complex and some pointwise
ops on CUDA), read off its on-disk kernel cache.

torch compiles a jiterator kernel with NVRTC on its first call at a new dtype/arity, writes the
result to its kernel cache (PYTORCH_KERNEL_CACHE_PATH, default $XDG_CACHE_HOME/torch/kernels) and
loads it as an in-memory cubin. CUPTI has no NVRTC domain, so it sees only that load (runtime_init)
and the compile itself is time no span brackets. The trace's child points the cache at a fresh,
empty folder (traces/child.py), so a file that appears there during a pass is a compile that ended
when the file was written: each one is put on the timeline as the counter NVRTC_CACHE_FILE at its
modification time, and attribution books the compile (jit_compile, source "torch:nvrtc") as the
time of the innermost op or module span it falls in, up to the write and outside other causes'
spans (attribution.estimators.nvrtc_cache_compiles; its detail says how). A warm cache (`--cache
keep` with the kernel already there) writes no file: nothing compiled, nothing booked.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Mapping

from ..timeline import NVRTC_CACHE_FILE, counter_at, name_id, now_ns
from .base import Instrument


def kernel_cache_dir(environ: Mapping[str, str] | None = None) -> str:
    """The folder torch's jiterator caches NVRTC kernels in (as torch's jit_utils picks it)."""
    env = os.environ if environ is None else environ
    if env.get("PYTORCH_KERNEL_CACHE_PATH"):
        return env["PYTORCH_KERNEL_CACHE_PATH"]
    xdg = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "torch", "kernels")


def listing(folder: str) -> dict[str, tuple[int, int]]:
    """name -> (mtime ns, bytes) of the folder's files ({} when it does not exist)."""
    out: dict[str, tuple[int, int]] = {}
    try:
        with os.scandir(folder) as it:
            for e in it:
                try:
                    if e.is_file(follow_symlinks=False):
                        st = e.stat(follow_symlinks=False)
                        out[e.name] = (st.st_mtime_ns, st.st_size)
                except OSError:
                    continue
    except OSError:
        return {}
    return out


def new_files(before: Mapping[str, tuple[int, int]], after: Mapping[str, tuple[int, int]]) -> list[tuple[str, int, int]]:
    """(name, mtime ns, bytes) of the files added or rewritten between two listings, by time (pure)."""
    got = [(n, m, b) for n, (m, b) in after.items() if before.get(n, (None, None))[0] != m]
    return sorted(got, key=lambda f: f[1])


class TorchKernelCache(Instrument):
    """New files in torch's NVRTC kernel cache per pass, on the timeline at their write times.

    folder / environ: where to look (tests); clock: warmprof's monotonic clock, wall: the clock
    file times are in (time.time_ns), read together at each pass end to map one onto the other."""

    name = "torch_nvrtc_cache"

    def __init__(self, folder: str | None = None, environ: Mapping[str, str] | None = None,
                 clock: Callable[[], int] = now_ns, wall: Callable[[], int] = time.time_ns) -> None:
        super().__init__()
        env = os.environ if environ is None else environ
        self.folder = folder or kernel_cache_dir(env)
        self._clock, self._wall = clock, wall
        self.passes: dict[str, dict[str, Any]] = {}
        self._before: dict[str, dict[str, tuple[int, int]]] = {}
        self._start: dict[str, int] = {}
        if env.get("USE_PYTORCH_KERNEL_CACHE", "1") == "0":
            self.reason = "USE_PYTORCH_KERNEL_CACHE=0: torch keeps no kernel cache, so its NVRTC compiles leave no file"
        elif folder is None and not env.get("PYTORCH_KERNEL_CACHE_PATH"):
            self.notes.append(f"PYTORCH_KERNEL_CACHE_PATH is not set: watching torch's default kernel cache {self.folder}, "
                              "where a kernel compiled in an earlier process is found and not compiled again "
                              "(`warmprof trace` points it at a fresh folder)")

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        if not self.reason:
            self._before[name] = listing(self.folder)
            self._start[name] = self._clock()

    def end_pass(self, name: str) -> None:
        before = self._before.pop(name, None)
        if self.reason or before is None:
            return
        t1, wall = self._clock(), self._wall()
        t0 = self._start.pop(name, t1)
        files = new_files(before, listing(self.folder))
        nid = name_id(NVRTC_CACHE_FILE)
        kept = []
        for fname, mtime, size in files:
            t = t1 - (wall - mtime)  # the write on warmprof's clock
            t = min(max(t, t0), t1)  # clock skew and coarse file times stay inside the pass
            counter_at(nid, size, t)
            kept.append({"file": fname, "bytes": size, "t_ms": (t - t0) / 1e6})
        self.passes[name] = {"new_files": len(files), "files": kept[:20]}

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if not self.reason:
            out["folder"] = self.folder
            out["passes"] = dict(self.passes)
        return out


__all__ = ["TorchKernelCache", "kernel_cache_dir", "listing", "new_files"]

"""The watch demo: a stream of requests with varying prompt lengths through the compiled demo LM.

The LM is compiled with static shapes (torch.compile(dynamic=False)), as a service that pads to
fixed lengths or captures CUDA graphs would run it: each new length compiles, each seen length does
not. Dynamo's recompile limit is raised for the stream (it would fall back to eager after 8
lengths), and put back afterwards. A quiet spell (`idle_at`) shows an after-idle call.

`warmprof watch --demo` compiles into a cache folder of its own (own_compile_cache), removed at the
end, also on Ctrl-C, SIGTERM or an error: inductor's default cache is a folder in TMPDIR that
outlives the process (about 160 MB after the demo's 12 lengths on a CPU).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import time
from typing import Any, Callable, Iterator

LENGTHS = tuple(range(16, 16 + 8 * 12, 8))  # 12 prompt lengths: 16, 24, ..., 104
SMALL = {"n_layers": 1, "d_model": 64, "n_heads": 2}  # compiles in seconds a length on a laptop CPU


def stream(requests: int = 200, lengths: tuple[int, ...] = LENGTHS, seed: int = 0) -> list[int]:
    """`requests` prompt lengths, skewed towards the short ones (as chat traffic is), every length at
    least once."""
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) for i in range(len(lengths))]
    out = list(lengths) + rng.choices(lengths, weights=weights, k=max(0, requests - len(lengths)))
    rng.shuffle(out)
    return out[:requests]


@contextlib.contextmanager
def recompile_limit(n: int) -> Iterator[None]:
    """dynamo's recompile limit raised to n for the block, through its own config.patch (which puts
    the setting back as it was, default or not)."""
    import torch._dynamo.config as cfg

    name = next(k for k in ("recompile_limit", "cache_size_limit") if hasattr(cfg, k))  # 2.9+: the first
    with cfg.patch(**{name: max(n, getattr(cfg, name))}):
        yield


# What places torch.compile's files on disk, pointed into the demo's own folder for the demo only:
# inductor's cache and Triton's kernels (where a GPU compiles) by their variables, and the temp folder
# (inductor puts its precompiled headers under tempfile.gettempdir() whatever its cache variable
# says; its compile workers are processes and read TMPDIR).
CACHE_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TMPDIR", "TEMP", "TMP")


@contextlib.contextmanager
def own_compile_cache() -> Iterator[str]:
    """torch.compile's caches and temp files in a fresh temp folder for the block (its path),
    removed afterwards however the block ends; CACHE_VARS and tempfile's folder put back as they
    were (set or not: inductor sets TORCHINDUCTOR_CACHE_DIR itself on its first compile). The
    caches warmprof or the user had are neither read nor filled: every length compiles cold, as the
    demo means it to. For a process of its own (`warmprof watch --demo`): the temp folder is the
    whole process's meanwhile."""
    import tempfile

    from ...probes.compile_env import restored_env
    from ...system.fileio import make_temp_folder

    folder = make_temp_folder("warmprof-watch-demo-", "torch.compile's caches (the demo LM is compiled)")
    tempdir_before = tempfile.tempdir
    try:
        with restored_env(CACHE_VARS):
            tmp = os.path.join(folder, "tmp")
            os.mkdir(tmp)
            os.environ.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(folder, "inductor"),
                              TRITON_CACHE_DIR=os.path.join(folder, "triton"), TMPDIR=tmp, TEMP=tmp, TMP=tmp)
            tempfile.tempdir = tmp
            _clear_inductor_caches()  # what inductor remembered of the cache folder it used before
            yield folder
    finally:
        tempfile.tempdir = tempdir_before
        _clear_inductor_caches()
        shutil.rmtree(folder, ignore_errors=True)


def _clear_inductor_caches() -> None:
    """inductor's in-memory caches keyed on its cache folder, cleared where this torch has them (and
    only where inductor is loaded already: importing it is seconds)."""
    import sys

    if "torch._inductor.utils" not in sys.modules:
        return
    with contextlib.suppress(Exception):
        from torch._inductor.utils import clear_caches

        clear_caches()


def compiled_demo() -> Any:
    import torch

    from ...traces.demo import demo_model

    return torch.compile(demo_model(**SMALL), dynamic=False)


def replay(watched: Callable, lengths: list[int], *, idle_at: int | None = None, idle_s: float = 1.5,
           before_call: Callable[[int], None] | None = None) -> None:
    """Send each request (token ids of its length) through `watched`, one after another; sleep
    `idle_s` before request `idle_at`; `before_call(i)` runs before request i (tests plant with it)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    with torch.no_grad(), recompile_limit(len(set(lengths)) + 8):
        for i, n in enumerate(lengths):
            ids = torch.randint(0, 4096, (1, n), generator=gen)
            if idle_at is not None and i == idle_at:
                time.sleep(idle_s)
            if before_call is not None:
                before_call(i)
            watched(ids)


__all__ = ["CACHE_VARS", "LENGTHS", "SMALL", "compiled_demo", "own_compile_cache", "recompile_limit", "replay",
           "stream"]

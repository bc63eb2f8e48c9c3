"""The watch demo: a stream of requests with varying prompt lengths through the compiled demo LM.

The LM is compiled with static shapes (torch.compile(dynamic=False)), as a service that pads to
fixed lengths or captures CUDA graphs would run it: each new length compiles, each seen length does
not. Dynamo's recompile limit is raised for the stream (it would fall back to eager after 8
lengths), and put back afterwards. A quiet spell (`idle_at`) shows an after-idle call.
"""

from __future__ import annotations

import contextlib
import random
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


__all__ = ["LENGTHS", "SMALL", "compiled_demo", "recompile_limit", "replay", "stream"]

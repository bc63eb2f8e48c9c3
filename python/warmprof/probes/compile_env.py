"""torch.compile state for the probes: a fresh dynamo and cold inductor/Triton caches per experiment.

Everything changed here is put back when the session ends: the cache environment variables, the
dynamo config values, and dynamo's caches (reset, since the probe's graphs are of no use to anyone).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Any, Iterator

from ..system.fileio import make_temp_folder

CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
GRAPH_COUNTER = "torch._dynamo.utils.counters['stats']['unique_graphs']"


def _clear_inductor_caches() -> None:
    """Drop inductor's in-memory code caches too, so a fresh directory really means a cold compile."""
    try:
        from torch._inductor.utils import clear_caches
    except ImportError:  # older layouts: the on-disk cache is what matters
        return
    clear_caches()


def recompile_limit_name() -> str:
    import torch._dynamo

    cfg = torch._dynamo.config
    return "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"


@contextlib.contextmanager
def config_value(obj: Any, name: str, value: Any) -> Iterator[None]:
    """Set obj.name for the block (None: leave it alone), restoring the caller's value afterwards."""
    if value is None:
        yield
        return
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextlib.contextmanager
def restored_env(names: tuple[str, ...]) -> Iterator[None]:
    saved = {n: os.environ.get(n) for n in names}
    try:
        yield
    finally:
        for n, v in saved.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v


class CompileSession:
    """Owns one probe's compile state; experiments inside it each start from a reset dynamo."""

    def __init__(self, cold_cache: bool = True) -> None:
        self.cold_cache = cold_cache
        self.root: str | None = None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> "CompileSession":
        import torch._dynamo

        self._stack.enter_context(restored_env(CACHE_ENV))
        if self.cold_cache:
            self.root = make_temp_folder("warmprof-probe-cache-", "the probe's empty compile caches")
            self._stack.callback(shutil.rmtree, self.root, True)
        self._stack.callback(torch._dynamo.reset)
        self._stack.callback(_clear_inductor_caches)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    @contextlib.contextmanager
    def experiment(self, name: str, recompile_limit: int | None = None) -> Iterator[None]:
        """A reset dynamo, fresh empty cache directories (cold), and optionally a raised recompile limit."""
        import torch._dynamo

        torch._dynamo.reset()
        if self.root is not None:
            base = os.path.join(self.root, name)
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(base, "inductor")
            os.environ["TRITON_CACHE_DIR"] = os.path.join(base, "triton")
            _clear_inductor_caches()
        with config_value(torch._dynamo.config, recompile_limit_name(), recompile_limit):
            yield

    def cache_note(self) -> str:
        if self.cold_cache:
            return "fresh empty inductor/Triton cache directory per experiment (cold, as on a new pod); removed afterwards"
        return "the caller's inductor/Triton caches (may be warm)"


def unique_graphs() -> int:
    """Dynamo's own count of graphs compiled so far in this process."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])  # a Counter: 0 before the first graph

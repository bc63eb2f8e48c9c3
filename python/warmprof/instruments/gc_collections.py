"""Python's cyclic garbage collections inside a pass or a set-up step: garbage_collection spans.

Building a model makes many Python objects (modules, parameters, their dicts), so a full collection is
often due when the first call starts, and it lands in the first call that allocates: it scans every
object the model holds (tens to hundreds of ms for a large model), which no later call pays. CPython
calls each function in `gc.callbacks` with ("start", info) right before a collection and ("stop", info)
right after; while the instrument is on, its callback opens a span `gc:gen<N>` (cause
garbage_collection, measured) at the start and closes it at the stop, on the thread that collected.
The span is the collection's own time (finalizers and weakref callbacks it runs included); what
the callback itself costs is two recorder calls.

The callback is taken out of `gc.callbacks` on exit (by identity), even when the model raised.
"""

from __future__ import annotations

import gc
from typing import Any

from .. import _native
from ..causes import GARBAGE_COLLECTION
from .base import Instrument

SOURCE = "gc"
GENERATIONS = 3  # gc.collect(generation) takes 0, 1 or 2


class GcCollections(Instrument):
    name = "gc_collections"

    def __init__(self) -> None:
        super().__init__()
        self._nids: list[int] = []
        self._open: list[int] = []  # generations of collections started and not yet stopped (one at most)
        self.collections = [0] * GENERATIONS  # by generation, while on
        self.collected = 0  # objects the collections freed
        self._callback: Any = None

    def __enter__(self) -> "GcCollections":
        if self._callback is None:
            self._nids = self._nids or [_native.intern(f"{SOURCE}:gen{g}") for g in range(GENERATIONS)]
            self._callback = self._on_gc
            gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: Any) -> None:
        callback, self._callback = self._callback, None
        if callback is None:
            return
        gc.callbacks[:] = [c for c in gc.callbacks if c is not callback]
        while self._open:  # never left open (a collection stops before Python code runs again); for safety
            _native.end(GARBAGE_COLLECTION, self._nids[self._open.pop()])

    def _on_gc(self, phase: str, info: dict) -> None:
        gen = info.get("generation", GENERATIONS - 1)
        gen = gen if 0 <= gen < GENERATIONS else GENERATIONS - 1
        if phase == "start":
            self._open.append(gen)
            _native.begin(GARBAGE_COLLECTION, self._nids[gen])
        elif self._open:
            _native.end(GARBAGE_COLLECTION, self._nids[self._open.pop()])
            self.collections[gen] += 1
            self.collected += int(info.get("collected", 0))

    @property
    def installed(self) -> bool:
        return self._callback is not None and any(c is self._callback for c in gc.callbacks)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out["collections"] = list(self.collections)  # by generation (0, 1, 2), inside and between passes
        out["collected"] = self.collected
        return out


def callbacks() -> list[int]:
    """ids of gc.callbacks' entries (tests check a trace leaves the list as it found it)."""
    return [id(c) for c in gc.callbacks]


__all__ = ["GcCollections", "SOURCE", "callbacks"]

"""Python's cyclic garbage collections as recorder spans: `gc:gen<N>`, cause garbage_collection.

CPython calls each function in `gc.callbacks` with ("start", info) right before a collection and
("stop", info) right after. While a GcSpans is installed, its callback opens a span `gc:gen<N>` at the
start and closes it at the stop, on the thread that collected: the collection's own time (the
finalizers and weakref callbacks it runs included), for two recorder calls. The trace's
gc_collections instrument installs one around its passes and set-up steps; `warmprof run`'s agent one
for a process's life. Light: the standard library and warmprof._native.
"""

from __future__ import annotations

import gc
from typing import Any

from . import _native
from .causes import GARBAGE_COLLECTION

SOURCE = "gc"
GENERATIONS = 3  # gc.collect(generation) takes 0, 1 or 2


class GcSpans:
    def __init__(self) -> None:
        self._nids: list[int] = []
        self._open: list[int] = []  # generations of collections started and not stopped yet (one at most)
        self.collections = [0] * GENERATIONS  # by generation, while installed
        self.collected = 0  # objects the collections freed
        self._callback: Any = None

    def install(self) -> "GcSpans":
        if self._callback is None:
            self._nids = self._nids or [_native.intern(f"{SOURCE}:gen{g}") for g in range(GENERATIONS)]
            self._callback = self._on_gc
            gc.callbacks.append(self._callback)
        return self

    def remove(self) -> None:
        """Take the callback out of gc.callbacks (by identity: others' callbacks stay where they are)."""
        callback, self._callback = self._callback, None
        if callback is None:
            return
        gc.callbacks[:] = [c for c in gc.callbacks if c is not callback]
        while self._open:  # never left open (a collection stops before Python code runs again); for safety
            _native.end(GARBAGE_COLLECTION, self._nids[self._open.pop()])

    @property
    def installed(self) -> bool:
        return self._callback is not None and any(c is self._callback for c in gc.callbacks)

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


def callbacks() -> list[int]:
    """ids of gc.callbacks' entries (tests check a trace leaves the list as it found it)."""
    return [id(c) for c in gc.callbacks]


__all__ = ["GENERATIONS", "GcSpans", "SOURCE", "callbacks"]

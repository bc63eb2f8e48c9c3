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
import threading
from typing import Any

from . import _native
from .causes import GARBAGE_COLLECTION

SOURCE = "gc"
PREFIX = f"{SOURCE}:"  # every collection span's name starts so (gc:gen0, gc:gen1, gc:gen2)
GENERATIONS = 3  # gc.collect(generation) takes 0, 1 or 2


class GcSpans:
    def __init__(self) -> None:
        self._nids: list[int] = []
        # the collection started and not stopped yet, by thread (its generation): CPython runs one at a
        # time, but a finalizer it runs may release the GIL while remove() is called on another thread
        self._open: dict[int, int] = {}
        self.collections = [0] * GENERATIONS  # by generation, while installed
        self.collected = 0  # objects the collections freed
        self._callback: Any = None
        # what the callback calls, held here: at interpreter shutdown a module's globals are cleared
        # while collections may still run the callback
        self._begin = _native.begin
        self._end = _native.end
        self._ident = threading.get_ident
        self._cause = GARBAGE_COLLECTION

    def install(self) -> "GcSpans":
        if self._callback is None:
            self._nids = self._nids or [_native.intern(f"{SOURCE}:gen{g}") for g in range(GENERATIONS)]
            self._callback = self._on_gc
            gc.callbacks.append(self._callback)
        return self

    def remove(self) -> None:
        """Take the callback out of gc.callbacks (by identity: others' callbacks stay where they are); a
        collection this thread left open (never: it stops before Python code runs again) is closed."""
        callback, self._callback = self._callback, None
        if callback is None:
            return
        gc.callbacks[:] = [c for c in gc.callbacks if c is not callback]
        gen = self._open.pop(self._ident(), None)
        if gen is not None:
            self._end(self._cause, self._nids[gen])

    @property
    def installed(self) -> bool:
        return self._callback is not None and any(c is self._callback for c in gc.callbacks)

    def _on_gc(self, phase: str, info: dict) -> None:
        try:
            last = len(self._nids) - 1
            gen = info.get("generation", last)
            gen = gen if 0 <= gen <= last else last
            me = self._ident()
            if phase == "start":
                self._begin(self._cause, self._nids[gen])
                self._open[me] = gen
            else:
                was = self._open.pop(me, None)
                if was is not None:
                    self._end(self._cause, self._nids[was])
                    self.collections[was] += 1
                    self.collected += int(info.get("collected", 0))
        except Exception:  # never into the collection (CPython would print it on the user's stderr)
            pass


def callbacks() -> list[int]:
    """ids of gc.callbacks' entries (tests check a trace leaves the list as it found it)."""
    return [id(c) for c in gc.callbacks]


__all__ = ["GENERATIONS", "GcSpans", "PREFIX", "SOURCE", "callbacks"]

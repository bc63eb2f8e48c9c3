"""Python's cyclic garbage collections inside a pass or a set-up step: garbage_collection spans.

Building a model makes many Python objects (modules, parameters, their dicts), so a full collection is
often due when the first call starts, and it lands in the first call that allocates: it scans every
object the model holds (tens to hundreds of ms for a large model), which no later call pays. While the
instrument is on, gc_spans.GcSpans' callback in `gc.callbacks` makes each collection a span `gc:gen<N>`
(cause garbage_collection, measured) on the thread that collected. The callback is taken out of
`gc.callbacks` on exit (by identity), even when the model raised.
"""

from __future__ import annotations

from typing import Any

from ..gc_spans import SOURCE, GcSpans, callbacks
from .base import Instrument


class GcCollections(Instrument):
    name = "gc_collections"

    def __init__(self) -> None:
        super().__init__()
        self._spans = GcSpans()

    def __enter__(self) -> "GcCollections":
        self._spans.install()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._spans.remove()

    @property
    def installed(self) -> bool:
        return self._spans.installed

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out["collections"] = list(self._spans.collections)  # by generation (0, 1, 2), inside and between passes
        out["collected"] = self._spans.collected
        return out


__all__ = ["GcCollections", "SOURCE", "callbacks"]

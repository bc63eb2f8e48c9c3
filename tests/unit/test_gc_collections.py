"""Python's garbage collections as garbage_collection spans (instruments/gc_collections.py)."""

from __future__ import annotations

import gc

import pytest

from warmprof.causes import GARBAGE_COLLECTION, Name, names
from warmprof.instruments.gc_collections import GcCollections, callbacks
from warmprof.timeline import Recording, source_of


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _gc_spans(tl) -> list[tuple[int, str, int, int]]:
    """(cause, name, kind, ts) of the recording's gc:* records, in order."""
    return [(int(tl.cause[i]), tl.name_of(i), int(tl.kind[i]), int(tl.ts_ns[i])) for i in range(len(tl))
            if tl.name_of(i).startswith("gc:")]


def test_a_collection_is_a_garbage_collection_span_of_its_generation():
    assert Name.GARBAGE_COLLECTION in names()
    before = callbacks()
    with Recording() as rec:
        with GcCollections() as inst:
            assert inst.installed
            heap = [_Cycle() for _ in range(20_000)]
            del heap
            gc.collect()  # a full collection: generation 2
            gc.collect(0)
    tl = rec.drain()
    assert callbacks() == before and not inst.installed
    spans = _gc_spans(tl)
    assert spans and {c for c, *_ in spans} == {GARBAGE_COLLECTION}
    assert source_of("gc:gen2") == "gc"
    # begins and ends alternate (a collection never nests in another) and each closes what it opened
    kinds = [k for _, _, k, _ in spans]
    assert kinds == [0, 1] * (len(spans) // 2), kinds
    names_ = [n for _, n, _, _ in spans]
    assert names_[0::2] == names_[1::2]
    assert "gc:gen2" in names_ and "gc:gen0" in names_
    summary = inst.summary()
    assert summary["collections"][2] >= 1 and summary["collections"][0] >= 1
    assert summary["collected"] >= 20_000  # the cycles were freed by the full collection


def test_the_callback_is_taken_out_when_the_body_raises():
    before = callbacks()
    with pytest.raises(RuntimeError, match="model"):
        with Recording():
            with GcCollections():
                assert len(callbacks()) == len(before) + 1
                raise RuntimeError("the model raised")
    assert callbacks() == before


def test_callbacks_put_in_after_it_stay_where_they_are():
    def other(phase, info):  # someone else's callback, added while the instrument is on
        pass

    before = callbacks()
    with Recording():
        with GcCollections():
            gc.callbacks.append(other)
    try:
        assert callbacks() == before + [id(other)]
    finally:
        gc.callbacks.remove(other)

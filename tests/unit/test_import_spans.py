"""import_spans: the one import finder the python_imports instrument and `warmprof run`'s agent share."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from warmprof import import_spans, timeline
from warmprof.timeline import Recording


@pytest.fixture
def package(tmp_path, monkeypatch):
    (tmp_path / "wp_outer.py").write_text("import wp_inner\nLOADER = __loader__\nSPEC_LOADER = __spec__.loader\n")
    (tmp_path / "wp_inner.py").write_text("X = sum(range(1000))\n")
    (tmp_path / "wp_raises.py").write_text("raise ValueError('no')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for m in ("wp_outer", "wp_inner", "wp_raises"):
        sys.modules.pop(m, None)


def test_each_executed_module_is_a_nested_span_and_sees_its_real_loader(package):
    seen = []
    finder = import_spans.ImportFinder(on_executed=lambda name, module: seen.append(name))
    sys.meta_path.insert(0, finder)
    try:
        with Recording() as rec:
            import wp_outer  # noqa: F401
        with pytest.raises(ValueError):
            import wp_raises  # noqa: F401
    finally:
        sys.meta_path.remove(finder)
    tl = rec.drain()
    outer, inner = timeline.name_id("python_import:wp_outer"), timeline.name_id("python_import:wp_inner")
    begins = {n: int(np.flatnonzero((tl.name == n) & (tl.kind == timeline.BEGIN))[0]) for n in (outer, inner)}
    ends = {n: int(np.flatnonzero((tl.name == n) & (tl.kind == timeline.END))[0]) for n in (outer, inner)}
    assert begins[outer] < begins[inner] < ends[inner] < ends[outer]  # the inner import nested in the outer
    assert set(tl.cause[list(begins.values())]) == {timeline.RUNTIME_INIT}
    # the module saw the loader it would have had without the finder
    assert not isinstance(wp_outer.LOADER, import_spans.TimedLoader)
    assert not isinstance(wp_outer.SPEC_LOADER, import_spans.TimedLoader)
    # counted when executed, and the callback told after each body ran, a raising one too
    assert finder.imports == 3 and seen == ["wp_inner", "wp_outer", "wp_raises"]


def test_a_module_already_imported_never_reaches_the_finder(package):
    import wp_inner  # noqa: F401

    finder = import_spans.ImportFinder()
    sys.meta_path.insert(0, finder)
    try:
        import wp_inner as again  # noqa: F401
    finally:
        sys.meta_path.remove(finder)
    assert finder.imports == 0


def test_an_entry_points_scan_is_a_span_of_runtime_init_and_answers_as_before():
    import importlib.metadata
    from types import SimpleNamespace

    calls = []

    def entry_points(**kw):
        calls.append(kw)
        if kw.get("group") == "bad":
            raise LookupError("no such group")
        return importlib.metadata.entry_points(**kw)

    md = SimpleNamespace(entry_points=entry_points)
    import_spans.time_metadata_scans(md)
    timed = md.entry_points
    import_spans.time_metadata_scans(md)  # hooked twice (a module imported again): wrapped once
    assert md.entry_points is timed and timed is not entry_points and timed.__name__ == "entry_points"
    with Recording() as rec:
        got = md.entry_points(group="console_scripts")
        with pytest.raises(LookupError, match="no such group"):
            md.entry_points(group="bad")
    assert got == importlib.metadata.entry_points(group="console_scripts")
    assert calls == [{"group": "console_scripts"}, {"group": "bad"}]
    tl = rec.drain()
    nid = timeline.name_id("python_metadata:entry_points")
    begins, ends = np.flatnonzero((tl.name == nid) & (tl.kind == timeline.BEGIN)), np.flatnonzero((tl.name == nid) & (tl.kind == timeline.END))
    assert len(begins) == len(ends) == 2  # the raising call's span closed too
    assert set(tl.cause[begins]) == {timeline.RUNTIME_INIT}

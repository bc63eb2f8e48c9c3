"""Python imports as spans: a finder first on sys.meta_path that times each module it finds executing.

One finder serves both users: the trace's python_imports instrument (instruments/python_imports.py: a lazy
`import` inside a pass) and `warmprof run`'s per-process agent (runs/agent.py: every import of a process's
life). Light to import (the native core and the cause table only, no numpy): the agent loads it at the
start of every Python process of a run.

The finder asks the finders after it for the spec, as the import system would, and hands back a copy of
that spec (the other finder's own object, which it may cache, is never changed) with its loader wrapped,
so the module's execution (`exec_module`: a source module's body) and, where the loader does real work
there, its creation (`create_module`: an extension's dlopen and init) are spans `python_import:<module>`
(cause runtime_init, measured), each closed inside its own call. An import inside another's execution is
its own nested span (innermost wins), so each span keeps only its module's own time. Cached imports
(already in sys.modules) never reach a finder and cost nothing here. A caller of importlib.util.find_spec
meanwhile sees the wrapper as the spec's loader: it behaves as the real one but is not an instance of its
class. Before the module's body runs, its `__loader__` and `__spec__.loader` are set back to the real
loader, so the module sees what it would have seen.
"""

from __future__ import annotations

import copy
import importlib.abc
import importlib.machinery
import sys
from typing import Any, Callable

from . import _native
from .causes import RUNTIME_INIT

SOURCE = "python_import"

# create_module implementations that do nothing (a source or bytecode module is created by the
# import system itself): no span for them. An extension's create_module (dlopen and init) is timed.
_TRIVIAL_CREATE = {getattr(importlib.abc.Loader, "create_module", None),
                   getattr(importlib.machinery.SourceFileLoader, "create_module", None)}


class TimedLoader:
    """Wraps one spec's loader for one import: `create_module` (when the loader's does real work)
    and `exec_module` are each a span, opened and closed inside their own call, so a caller that
    creates a module and runs it later (importlib.util.LazyLoader) times neither the gap nor
    anything after it."""

    def __init__(self, loader: Any, nid: int, finder: "ImportFinder", fullname: str) -> None:
        self.loader = loader
        self.nid = nid
        self.finder = finder
        self.fullname = fullname

    def __getattr__(self, attr: str) -> Any:  # anything else a loader offers (get_code, is_package, ...)
        return getattr(self.loader, attr)

    def create_module(self, spec: Any) -> Any:
        create = getattr(self.loader, "create_module", None)
        if create is None:
            return None
        if getattr(type(self.loader), "create_module", None) in _TRIVIAL_CREATE:
            return create(spec)
        _native.begin(RUNTIME_INIT, self.nid)
        try:
            return create(spec)
        finally:
            _native.end(RUNTIME_INIT, self.nid)

    def exec_module(self, module: Any) -> None:
        _unwrap(module, self)
        self.finder.imports += 1  # executed, not merely found (importlib.util.find_spec finds too)
        _native.begin(RUNTIME_INIT, self.nid)
        try:
            self.loader.exec_module(module)
        finally:
            _native.end(RUNTIME_INIT, self.nid)
            if self.finder.on_executed is not None:
                self.finder.on_executed(self.fullname, module)


def _unwrap(module: Any, wrapper: TimedLoader) -> None:
    """Give the module its real loader back wherever the wrapper may show (before its body runs)."""
    try:
        spec = getattr(module, "__spec__", None)
        if spec is not None and getattr(spec, "loader", None) is wrapper:
            spec.loader = wrapper.loader
        if getattr(module, "__loader__", None) is wrapper:
            module.__loader__ = wrapper.loader
    except (AttributeError, TypeError):  # a module object that refuses the attribute: it keeps the wrapper
        pass


class ImportFinder:
    """First on sys.meta_path while on: finds through the finders after it and wraps the spec's loader.
    `imports` counts the modules executed; on_executed(fullname, module) is called after each one's
    body ran (or raised)."""

    def __init__(self, on_executed: Callable[[str, Any], None] | None = None) -> None:
        self.imports = 0
        self.on_executed = on_executed
        self._nids: dict[str, int] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        finders = list(sys.meta_path)
        after = finders[next((i for i, f in enumerate(finders) if f is self), -1) + 1:]
        for finder in after:
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is None:
                continue
            loader = spec.loader
            # Namespace packages and loaders without exec_module (legacy) run as they are.
            if loader is not None and hasattr(loader, "exec_module") and not isinstance(loader, TimedLoader):
                nid = self._nids.get(fullname)
                if nid is None:
                    nid = self._nids[fullname] = _native.intern(f"{SOURCE}:{fullname}")
                spec = copy.copy(spec)
                spec.loader = TimedLoader(loader, nid, self, fullname)
            return spec
        return None


METADATA_SOURCE = "python_metadata"
_TIMED = "_warmprof_timed_scan"


def time_metadata_scans(module: Any) -> None:
    """importlib.metadata's entry_points() reads every installed distribution's metadata (hundreds of
    small files in a serving venv) on each call: plugin lookups do it, some on the first request (vLLM's
    logits-processor plugins). Each call becomes a span `python_metadata:entry_points` (runtime_init,
    measured); called through the module's attribute, as `from importlib.metadata import entry_points`
    inside a function does. `module` is importlib.metadata, hooked as it is first imported."""
    fn = getattr(module, "entry_points", None)
    if fn is None or getattr(fn, _TIMED, False):
        return
    nid = _native.intern(f"{METADATA_SOURCE}:entry_points")

    def entry_points(*args: Any, **kwargs: Any) -> Any:
        _native.begin(RUNTIME_INIT, nid)
        try:
            return fn(*args, **kwargs)
        finally:
            _native.end(RUNTIME_INIT, nid)

    entry_points.__wrapped__ = fn  # type: ignore[attr-defined]
    entry_points.__doc__, entry_points.__name__, entry_points.__qualname__ = fn.__doc__, fn.__name__, fn.__qualname__
    setattr(entry_points, _TIMED, True)
    module.entry_points = entry_points


__all__ = ["ImportFinder", "METADATA_SOURCE", "SOURCE", "TimedLoader", "time_metadata_scans"]

"""Python imports executed inside a pass (a lazy `import` in a forward): runtime_init spans.

Large model libraries import on first use (transformers' lazy modules, an optional kernel
package, a tokenizer's backend); the first pass pays for executing those modules, later passes
find them in sys.modules. While the instrument is on, a finder sits first on sys.meta_path: it
asks the finders after it for the spec, as the import system would, and hands back the same spec
with its loader wrapped, so the module's execution (`exec_module`: a source module's body) and, where
the loader does real work there, its creation (`create_module`: an extension's dlopen and init) are
spans `python_import:<module>` (cause runtime_init, measured), each closed inside its own call. An import inside another's execution is
its own nested span (innermost wins), so each span keeps only its module's own time. Cached
imports (already in sys.modules) never reach a finder and cost nothing here.

Nothing of the wrapper outlives the import: before the module's body runs, its `__loader__` and
`__spec__.loader` are set back to the real loader (the module sees what it would have seen), and
the finder is taken off sys.meta_path on exit, even when the model raised.
"""

from __future__ import annotations

import copy
import importlib.abc
import importlib.machinery
import sys
from typing import Any

from ..timeline import RUNTIME_INIT, begin, end, name_id
from .base import Instrument

SOURCE = "python_import"


# create_module implementations that do nothing (a source or bytecode module is created by the
# import system itself): no span for them. An extension's create_module (dlopen and init) is timed.
_TRIVIAL_CREATE = {getattr(importlib.abc.Loader, "create_module", None),
                   getattr(importlib.machinery.SourceFileLoader, "create_module", None)}


class _TimedLoader:
    """Wraps one spec's loader for one import: `create_module` (when the loader's does real work)
    and `exec_module` are each a span, opened and closed inside their own call, so a caller that
    creates a module and runs it later (importlib.util.LazyLoader) times neither the gap nor
    anything after it."""

    def __init__(self, loader: Any, nid: int, finder: "_ImportFinder") -> None:
        self.loader = loader
        self.nid = nid
        self.finder = finder

    def __getattr__(self, attr: str) -> Any:  # anything else a loader offers (get_code, is_package, ...)
        return getattr(self.loader, attr)

    def create_module(self, spec: Any) -> Any:
        create = getattr(self.loader, "create_module", None)
        if create is None:
            return None
        if getattr(type(self.loader), "create_module", None) in _TRIVIAL_CREATE:
            return create(spec)
        begin(RUNTIME_INIT, self.nid)
        try:
            return create(spec)
        finally:
            end(RUNTIME_INIT, self.nid)

    def exec_module(self, module: Any) -> None:
        _unwrap(module, self)
        self.finder.imports += 1  # executed, not merely found (importlib.util.find_spec finds too)
        begin(RUNTIME_INIT, self.nid)
        try:
            self.loader.exec_module(module)
        finally:
            end(RUNTIME_INIT, self.nid)


def _unwrap(module: Any, wrapper: _TimedLoader) -> None:
    """Give the module its real loader back wherever the wrapper may show (before its body runs)."""
    spec = getattr(module, "__spec__", None)
    if spec is not None and spec.loader is wrapper:
        spec.loader = wrapper.loader
    if getattr(module, "__loader__", None) is wrapper:
        module.__loader__ = wrapper.loader


class _ImportFinder:
    """First on sys.meta_path while on: finds through the finders after it, and hands back a copy
    of their spec with the loader wrapped (the other finder's own spec object, which it may cache,
    is never changed). A caller of importlib.util.find_spec during a pass sees the wrapper as the
    spec's loader: it behaves as the real one but is not an instance of its class."""

    def __init__(self) -> None:
        self.imports = 0

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
            if loader is not None and hasattr(loader, "exec_module") and not isinstance(loader, _TimedLoader):
                spec = copy.copy(spec)
                spec.loader = _TimedLoader(loader, name_id(f"{SOURCE}:{fullname}"), self)
            return spec
        return None


class PythonImports(Instrument):
    name = "python_imports"

    def __init__(self) -> None:
        super().__init__()
        self._finder: _ImportFinder | None = None
        self.imports = 0

    def __enter__(self) -> "PythonImports":
        self._finder = _ImportFinder()
        sys.meta_path.insert(0, self._finder)
        return self

    def __exit__(self, *exc: Any) -> None:
        finder, self._finder = self._finder, None
        if finder is None:
            return
        self.imports += finder.imports
        # By identity: something else may have put finders in front of ours meanwhile.
        sys.meta_path[:] = [f for f in sys.meta_path if f is not finder]

    @property
    def installed(self) -> bool:
        return self._finder is not None and any(f is self._finder for f in sys.meta_path)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out["imports"] = self.imports  # modules executed while on (inside and between passes)
        return out


def finders() -> list[int]:
    """ids of sys.meta_path's finders (tests check a trace leaves the list as it found it)."""
    return [id(f) for f in sys.meta_path]


__all__ = ["PythonImports", "SOURCE", "finders"]

"""Python imports executed inside a pass (a lazy `import` in a forward): runtime_init spans.

Large model libraries import on first use (transformers' lazy modules, an optional kernel
package, a tokenizer's backend); the first pass pays for executing those modules, later passes
find them in sys.modules. While the instrument is on, import_spans' finder sits first on
sys.meta_path, so each module's execution (and an extension's creation) is a span
`python_import:<module>` (cause runtime_init, measured) with its own time, nested imports apart
(the finder and its loader wrapper are described there; `warmprof run`'s agent uses the same one).

Nothing of the wrapper outlives the import: before the module's body runs, its `__loader__` and
`__spec__.loader` are set back to the real loader (the module sees what it would have seen), and
the finder is taken off sys.meta_path on exit, even when the model raised.
"""

from __future__ import annotations

import sys
from typing import Any

from ..import_spans import SOURCE, ImportFinder
from .base import Instrument

class PythonImports(Instrument):
    name = "python_imports"

    def __init__(self) -> None:
        super().__init__()
        self._finder: ImportFinder | None = None
        self.imports = 0

    def __enter__(self) -> "PythonImports":
        self._finder = ImportFinder()
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

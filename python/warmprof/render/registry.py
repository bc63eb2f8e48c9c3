"""Output formats by name: the one table of renderers, keyed by format and report kind.

Each renderer class declares its `format`, the `kinds` it renders ("trace", "probe",
"comparison"), its `extension` and whether it is `binary`, and registers itself with @register.
Everything that writes a report goes through here: `show --format` (its choices too), `show -o
NAME.png` with no --format, str() of a report or a comparison (the "text" format), and
`compare --png/--json`. Adding a format is a renderer class and a line in _MODULES; no dispatcher
changes. The renderer modules are imported on the first lookup, not by `import warmprof`.
"""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass, field
from typing import Any, cast

from ..errors import InputError, ReportError, WarmprofError
from .base import Renderer

# The modules that register the built-in renderers when imported; formats are listed in this order.
_MODULES = ("text", "probe_text", "op_probe_text", "repeat_text", "watch_text", "warmup_text", "buckets_text",
            "run_text", "compare_text", "json", "chrome", "run_chrome", "png")
_load_lock = threading.RLock()  # re-entrant: a renderer module's own import may look a format up


@dataclass
class Format:
    """One output format: what every renderer registered under its name shares."""

    name: str
    extension: str
    binary: bool
    inferred: bool  # picked by `show -o NAME<extension>` when --format is not given
    about: str
    renderers: dict[str, type[Renderer]] = field(default_factory=dict)  # kind -> class


_FORMATS: dict[str, Format] = {}
_loaded = False


def register(cls: type[Renderer], *, format: str | None = None, kinds: tuple[str, ...] | None = None) -> type[Renderer]:
    """Register a renderer class under its format for each of its kinds (a class decorator).
    `format` and `kinds` override what the class declares."""
    name = format or cls.format
    if not name or not (kinds or cls.kinds):
        raise ValueError(f"{cls.__name__} declares no format or no kinds")
    row = _FORMATS.get(name)
    if row is None:
        taken = next((f.name for f in _FORMATS.values() if f.inferred and f.extension == cls.extension), None)
        if cls.inferred and taken:
            raise ValueError(f"{cls.__name__}: files named *{cls.extension} are already {taken}")
        row = _FORMATS[name] = Format(name, cls.extension, cls.binary, cls.inferred, cls.about)
    elif (row.extension, row.binary, row.inferred) != (cls.extension, cls.binary, cls.inferred):
        raise ValueError(f"{cls.__name__}: format {name} is {row.extension} binary={row.binary} inferred={row.inferred}")
    row.about = row.about or cls.about
    for kind in kinds or cls.kinds:
        other = row.renderers.setdefault(kind, cls)
        if other is not cls:
            raise ValueError(f"format {name} already renders {kind} with {other.__name__}")
    return cls


def _load() -> None:
    global _loaded
    if _loaded:
        return
    with _load_lock:  # two threads' first str(report) must not see the table half sorted
        if _loaded:
            return
        for module in _MODULES:
            importlib.import_module(f"{__package__}.{module}")
        # Listed in _MODULES' order whichever module a caller imported first; formats added later follow.
        rows = sorted(_FORMATS.values(), key=_listing_rank)
        _FORMATS.clear()
        _FORMATS.update((row.name, row) for row in rows)
        _loaded = True


def _listing_rank(row: Format) -> int:
    modules = [cls.__module__.rpartition(".")[2] for cls in row.renderers.values()]
    return min((_MODULES.index(m) for m in modules if m in _MODULES), default=len(_MODULES))


def formats(kind: str | None = None) -> list[str]:
    """The format names, in the order they are listed; those that render `kind` when given."""
    _load()
    return [f.name for f in _FORMATS.values() if kind is None or kind in f.renderers]


def find(name: str) -> Format:
    """The format called `name`; an InputError listing the known ones if there is none."""
    _load()
    row = _FORMATS.get(name)
    if row is None:
        raise InputError(f"unknown output format {name!r} (known: {', '.join(formats())})")
    return row


def get(name: str, kind: str) -> Renderer:
    """A renderer of format `name` for a `kind` report (or "comparison")."""
    row = find(name)
    cls = row.renderers.get(kind)
    if cls is None:
        needs = " or ".join(_noun(k) for k in row.renderers)
        raise ReportError(f"the {name} format needs {needs}, not {_noun(kind)} "
                          f"({_noun(kind)} can be shown as {', '.join(formats(kind)) or 'nothing'})")
    return cls()


def from_extension(path: str | os.PathLike) -> str | None:
    """The format a file name asks for by its extension (x.png: png, x.json: json), or None."""
    _load()
    ext = os.path.splitext(os.fspath(path))[1].lower()
    return next((f.name for f in _FORMATS.values() if f.inferred and ext and f.extension == ext), None)


def kind_of(obj: Any) -> str:
    """What the registry calls obj: its class's KIND ("trace", "probe", "comparison")."""
    kind = getattr(type(obj), "KIND", None)
    if isinstance(kind, str) and formats(kind):
        return kind
    raise WarmprofError(f"nothing renders a {type(obj).__name__}: it is neither a report nor a comparison")


def render(obj: Any, name: str) -> str | bytes:
    """obj in format `name`, whole (see Renderer.output)."""
    return get(name, kind_of(obj)).output(obj)


def text_of(obj: Any) -> str:
    """str() of a report or a comparison: the "text" format (control characters made visible)."""
    kind = kind_of(obj)
    if "text" not in formats(kind):
        return repr(obj)
    return cast(str, get("text", kind).output(obj))  # the text format is not binary


def _noun(kind: str) -> str:
    return "a comparison" if kind == "comparison" else f"a {kind} report"

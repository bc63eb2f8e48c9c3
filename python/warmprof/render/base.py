"""Renderers turn a report (or a comparison) into text or a file. Each is a small class that
declares its format name, the kinds it renders, its file extension and whether it is binary;
registry.py finds them by format and kind."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, cast

from ..system.fileio import write_output
from .safe import safe_text


class Renderer:
    format: ClassVar[str] = ""  # the name `show --format` takes
    kinds: ClassVar[tuple[str, ...]] = ()  # what it renders: "trace", "probe", "comparison"
    extension: ClassVar[str] = ".txt"
    binary: ClassVar[bool] = False  # bytes (an image), never printed to standard output
    inferred: ClassVar[bool] = True  # `show -o NAME<extension>` picks this format when --format is not given
    about: ClassVar[str] = ""  # a few words for --help, where the name alone does not say it

    def render(self, report: Any) -> str | bytes:  # pragma: no cover - each renderer defines it
        raise NotImplementedError

    def output(self, report: Any) -> str | bytes:
        """The whole output as printed or written. Text ends with a newline and has its control
        characters made visible (names come from users, and text reaches terminals: render/safe.py);
        JSON escapes its own, so this changes none of it."""
        out = self.render(report)
        if self.binary != isinstance(out, bytes):
            raise TypeError(f"{type(self).__name__}.render returned {type(out).__name__} (binary={self.binary})")
        if self.binary:
            return out
        out = safe_text(cast(str, out))  # not binary: the check above made it text
        return out if out.endswith("\n") else out + "\n"

    def write(self, report: Any, path: str | os.PathLike) -> Path:
        # Rendered in full before the target is touched: a renderer that fails leaves the old file whole.
        return write_output(path, self.output(report))

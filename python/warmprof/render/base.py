"""Renderers turn a report into text or a file. Each is a small class with a file extension."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar


class Renderer:
    extension: ClassVar[str] = ".txt"
    binary: ClassVar[bool] = False

    def render(self, report: Any) -> str | bytes:  # pragma: no cover - each renderer defines it
        raise NotImplementedError

    def write(self, report: Any, path: str | os.PathLike) -> Path:
        p = Path(path)
        out = self.render(report)
        if isinstance(out, bytes):
            p.write_bytes(out)
        else:
            p.write_text(out)
        return p

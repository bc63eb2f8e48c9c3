"""Renderers turn a report into text or a file. Each is a small class with a file extension."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

from ..fileio import write_output
from ..report.base import register_text_renderer
from .safe import safe_text


class Renderer:
    extension: ClassVar[str] = ".txt"
    binary: ClassVar[bool] = False

    def render(self, report: Any) -> str | bytes:  # pragma: no cover - each renderer defines it
        raise NotImplementedError

    def write(self, report: Any, path: str | os.PathLike) -> Path:
        # Rendered in full before the target is touched: a renderer that fails leaves the old file whole.
        return write_output(path, self.render(report))


# str(report): the text renderer of each report kind, registered into the report layer (which
# must not import this layer above it). Imported on first use, so `import warmprof` stays light.
# The text goes to terminals: control characters in user-supplied names are made visible.
def _trace_text(report: Any) -> str:
    from .text import TraceTextRenderer

    return safe_text(TraceTextRenderer().render(report))


def _probe_text(report: Any) -> str:
    from .probe_text import ProbeTextRenderer

    return safe_text(ProbeTextRenderer().render(report))


register_text_renderer("trace", _trace_text)
register_text_renderer("probe", _probe_text)

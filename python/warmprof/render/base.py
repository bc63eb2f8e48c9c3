"""Renderers turn a report into text or a file. Each is a small class with a file extension."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

from ..report.base import register_text_renderer, write_error


class Renderer:
    extension: ClassVar[str] = ".txt"
    binary: ClassVar[bool] = False

    def render(self, report: Any) -> str | bytes:  # pragma: no cover - each renderer defines it
        raise NotImplementedError

    def write(self, report: Any, path: str | os.PathLike) -> Path:
        p = Path(path)
        out = self.render(report)
        try:
            if isinstance(out, bytes):
                p.write_bytes(out)
            else:
                p.write_text(out)
        except OSError as e:
            raise write_error(p, e) from e
        return p


# str(report): the text renderer of each report kind, registered into the report layer (which
# must not import this layer above it). Imported on first use, so `import warmprof` stays light.
def _trace_text(report: Any) -> str:
    from .text import TraceTextRenderer

    return TraceTextRenderer().render(report)


def _probe_text(report: Any) -> str:
    from .probe_text import ProbeTextRenderer

    return ProbeTextRenderer().render(report)


register_text_renderer("trace", _trace_text)
register_text_renderer("probe", _probe_text)

"""Progress lines on stderr for long work (trace, probe): on, off, or the caller's callable."""

from __future__ import annotations

import sys
from typing import Any, Callable


def progress_printer(progress: Any, prefix: str = "warmprof") -> Callable[[str], None]:
    if progress is True:
        return lambda msg: print(f"{prefix}: {msg}", file=sys.stderr, flush=True)
    if callable(progress):
        return progress
    return lambda msg: None

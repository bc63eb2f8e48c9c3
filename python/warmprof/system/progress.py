"""Progress lines on stderr for long work (trace, probe): on, off, or the caller's callable."""

from __future__ import annotations

import sys
from typing import Any, Callable


def progress_printer(progress: Any, prefix: str = "warmprof") -> Callable[[str], None]:
    if progress is True:
        return lambda msg: say_on_stderr(f"{prefix}: {msg}")
    if callable(progress):
        return progress
    return lambda msg: None


def say_on_stderr(line: str) -> None:
    """A progress line; a stderr that is gone (`2>&1 | head -1`, closed) never stops the work."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # BrokenPipeError, EBADF, a closed sys.stderr
        pass

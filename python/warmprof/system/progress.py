"""Progress lines on stderr for long work (trace, probe): on, off, or the caller's callable.

A closed stderr (`2>&-`) drops them: Python starts with sys.stderr None then, and print(file=None)
writes to stdout, which holds the report. The command line also fills the hole at fd 2 with
/dev/null first (stderr_or_null), or the first descriptor it opens would be 2, and whatever is
written to "stderr" (its own lines, C libraries', a child process's) would land there.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable


def progress_printer(progress: Any, prefix: str = "warmprof") -> Callable[[str], None]:
    if progress is True:
        return lambda msg: say_on_stderr(f"{prefix}: {msg}")
    if callable(progress):
        return progress
    return lambda msg: None


def say_on_stderr(line: str) -> None:
    """A progress line; a stderr that is gone (`2>&1 | head -1`, closed) never stops the work, and a
    stderr closed before Python started (sys.stderr None) drops it: it never goes to stdout."""
    err = sys.stderr
    if err is None:
        return
    try:
        print(line, file=err, flush=True)
    except (OSError, ValueError):  # BrokenPipeError, EBADF, a closed sys.stderr
        pass


def stderr_or_null() -> None:
    """For warmprof's own processes (the command line, the processes it starts), first thing: where
    fd 2 is closed, /dev/null takes its place, inherited by every process started from here, and
    sys.stderr writes there. So what goes to stderr is dropped, and no descriptor opened later (a
    dup of stdout, a pipe, a file) can become fd 2 and take stderr's writes, or hand them on to a
    child process as its stderr. Not for warmprof.trace in the caller's process: its descriptors are
    the caller's."""
    try:
        os.fstat(2)
        return
    except OSError:
        pass
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        if fd == 2:
            os.set_inheritable(2, True)
        else:
            os.dup2(fd, 2)  # inheritable
    except OSError:
        return
    finally:
        if fd != 2:
            os.close(fd)
    if sys.stderr is None:
        sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)

"""The commands' outputs: the paths every command checks before it does any work (trace, probe,
show, compare), and a report saved then printed (trace, probe).

The same classification as the writer (warmprof.system.fileio): a device, a FIFO or /dev/stdout is
written in place and accepted as it is; a directory, block device, socket or dangling symlink is
refused; a file or a new name needs a writable folder that exists.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from ..errors import InputError, WarmprofError
from .fileio import REFUSED, WRITTEN_IN_PLACE, classify, refusal, stream_fd
from .progress import say_on_stderr


def check_output_path(path: str, option: str = "--json") -> None:
    """Refuse an output file that cannot be written, before any work."""
    if not path:
        raise InputError(f"{option} needs a file path, got an empty one")
    _check_name_bytes(path, option)
    try:
        kind, target = classify(path)
    except OSError as e:  # e.g. a folder on the way that cannot be searched
        raise InputError(f"{option} {path}: cannot be used ({e.strerror or e})") from None
    if kind == "stream":
        _check_stream(path, stream_fd(target), option)
        return
    if kind in WRITTEN_IN_PLACE:
        return
    if kind == "directory" or path.endswith(os.sep):  # "out/" names a folder, even one not made yet
        raise InputError(f"{option} {path}: is a directory; give a file path inside it")
    if os.path.basename(path) == "-":
        raise InputError(f"{option} -: give a file name (or /dev/stdout for standard output)")
    if kind == "directory":
        raise InputError(f"{option} {path}: is a directory; give a file path inside it")
    if kind in REFUSED:
        raise InputError(f"{option} {path}: {refusal(kind, target)}")
    _check_file(path, Path(target), option)


def _check_name_bytes(path: str, option: str) -> None:
    """Names are limited in bytes, not characters (255 on Linux file systems): said now, not after the
    whole trace ran. A legal name of 254 UTF-8 bytes is fine (its temporary name is cut by bytes)."""
    folder = os.path.dirname(path) or "."
    try:
        most = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        most = 255
    size = len(os.fsencode(os.path.basename(path)))
    if size > most:
        raise InputError(f"{option} {path}: the file name is {size} bytes long; this file system takes at most {most}")


def _check_stream(path: str, fd: int, option: str) -> None:
    """/dev/stdout, /dev/fd/N: the descriptor must be open here (a trace's child gets it passed)."""
    try:
        os.fstat(fd)
    except OSError:
        raise InputError(f"{option} {path}: file descriptor {fd} is not open in this process") from None


def _check_file(path: str, p: Path, option: str) -> None:
    """A regular file or a new name (a symlink's target): it is replaced through its folder."""
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise InputError(f"{option} {path}: the directory {parent} does not exist")
    if not parent.is_dir():
        raise InputError(f"{option} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: the directory {parent} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise InputError(f"{option} {path}: the file exists and is not writable")


def save_and_print(report: Any, json_path: str | None) -> int:
    """The JSON first, so a stdout that breaks while the text is printed (`| head`) loses nothing;
    and the text even when the JSON cannot be written (the write's error is raised after it)."""
    try:
        path = report.save(json_path) if json_path else None
    except WarmprofError:
        _print_report(report)
        raise
    code = _print_report(report)
    if path:
        say_on_stderr(f"\nreport saved to {path}")
    return code


def _print_report(report: Any) -> int:
    try:
        print(report, end="", flush=True)
        return 0
    except BrokenPipeError:
        # The reader left: send the rest to /dev/null so Python's exit flush stays quiet, and end
        # as SIGPIPE would have ended any other writer in a pipeline.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE
    except (OSError, ValueError):  # stdout closed: the report is in the JSON, if one was asked for
        return 1

"""Output paths every command checks before it does any work (trace, probe, show, compare).

The same classification as the writer (warmprof.fileio): a device, a FIFO or /dev/stdout is
written in place and accepted as it is; a directory, block device, socket or dangling symlink is
refused; a file or a new name needs a writable folder that exists.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError
from ..fileio import REFUSED, WRITTEN_IN_PLACE, classify, refusal, stream_fd


def check_output_path(path: str, option: str = "--json") -> None:
    """Refuse an output file that cannot be written, before any work."""
    if not path:
        raise InputError(f"{option} needs a file path, got an empty one")
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

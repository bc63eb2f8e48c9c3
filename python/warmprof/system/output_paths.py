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
from typing import Any, cast

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
        _check_stream(path, cast(int, stream_fd(target)), option)  # a "stream" target names a descriptor
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
        _print_report(report, saved=False)
        raise
    code = _print_report(report, saved=bool(path))
    if path:
        say_on_stderr(f"\nreport saved to {path}")
    return code


# The stdout this command started with (hold_stdout): a model may replace sys.stdout (a StringIO,
# None) or close fd 1 while it loads, and the report must still reach the user.
_held: dict[str, Any] = {}

# What an ASCII-only stdout gets instead of the report's few non-ASCII characters (any other: "?").
_ASCII = str.maketrans({"\u00d7": "x", "\u2014": "-", "\u2013": "-", "\u00b5": "u", "\u2026": "...",
                        "\u2192": "->", "\u2190": "<-", "\u2248": "~", "\u00b1": "+/-", "\u2264": "<=",
                        "\u2265": ">=", "\u2502": "|", "\u2500": "-", "\u2588": "#", "\u2591": ".",
                        "\u2219": "*", "\u00b7": "*", "\u2022": "*"})


def hold_stdout() -> None:
    """Note the stdout a command starts with, and a duplicate of its descriptor, for the report."""
    release_stdout()
    stream = sys.stdout
    _held["stream"] = stream
    try:
        fd = stream.fileno()
        st = os.fstat(fd)
        _held["fd"], _held["fd_was"], _held["id"] = os.dup(fd), fd, (st.st_dev, st.st_ino)
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (a test's capture)
        pass


def release_stdout() -> None:
    if "fd" in _held:
        try:
            os.close(_held["fd"])
        except OSError:
            pass
    _held.clear()


def _report_stream() -> Any:
    """Where the report goes: the stdout the command started with, through the duplicate of its
    descriptor when that descriptor is now closed or names another file. None: there is none."""
    stream = _held.get("stream", sys.stdout)
    if stream is None:
        return None
    if "fd" in _held:
        try:
            st = os.fstat(_held["fd_was"])
            same = (st.st_dev, st.st_ino) == _held["id"]
        except OSError:
            same = False
        if not same:
            encoding = getattr(stream, "encoding", None) or "utf-8"
            stream = os.fdopen(os.dup(_held["fd"]), "w", encoding=encoding, errors=getattr(stream, "errors", None))
            _held["opened"] = stream
    return stream


def _print_report(report: Any, saved: bool) -> int:
    """0 once printed; where there is no stdout (the command started without one), 0 if the JSON was
    saved, else 1, and stderr says so either way."""
    stream = _report_stream()
    if stream is None:
        say_on_stderr("warmprof: there is no standard output to print the report on (this process started "
                      "without one)" + ("; it is in the JSON" if saved else ""))
        return 0 if saved else 1
    text = str(report)
    try:
        try:
            stream.write(text)
        except UnicodeEncodeError:  # an ASCII-only stdout (PYTHONIOENCODING=ascii, LANG=C on old Pythons)
            encoding = getattr(stream, "encoding", None) or "ascii"
            stream.write(text.translate(_ASCII).encode(encoding, "replace").decode(encoding))
            say_on_stderr(f"warmprof: stdout takes {encoding} only: the report's other characters were replaced")
        stream.flush()
        return 0
    except BrokenPipeError:
        # The reader left: send the rest to /dev/null so Python's exit flush stays quiet, and end
        # as SIGPIPE would have ended any other writer in a pipeline.
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass
        os.close(devnull)
        return 128 + signal.SIGPIPE
    except (OSError, ValueError) as e:  # stdout closed: the report is in the JSON, if one was asked for
        say_on_stderr(f"warmprof: the report could not be printed: {e}")
        return 1
    finally:
        opened = _held.pop("opened", None)
        if opened is not None:
            try:
                opened.close()
            except (OSError, ValueError):
                pass

"""Every output file warmprof writes (a saved report, a rendering, `show -o`) goes through write_output.

What the path names decides how it is written:
- a regular file or a new name: replaced atomically. The bytes go to a unique temporary file in the
  same folder, are flushed and fsynced, get the old file's permission bits (a new file gets
  0o666 & ~umask, as open() would give it), then os.replace puts them under the name. A failed
  write leaves the old file whole and the temporary file removed.
- a symbolic link: followed on purpose. The link stays a link; its target is replaced as above.
  A dangling link is refused (its target's name may be a typo, and writing would create it silently).
- a character device (/dev/null, a tty) or the process's own streams (/dev/stdout, /dev/stderr,
  /dev/fd/N, /proc/self/fd/N, recognised by name since they are links): written in place, never
  created, truncated or renamed over. A full device gives its ENOSPC error.
- a FIFO: opened without waiting for a reader (none: "no process is reading the FIFO"), then
  written in place.
- a directory, a block device, a socket: refused.
Every failure is one ReportError: "PATH: cannot write (reason)".
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import stat
import sys
from pathlib import Path

from ..errors import ReportError

_KINDS = {stat.S_IFREG: "file", stat.S_IFCHR: "character device", stat.S_IFIFO: "FIFO",
          stat.S_IFDIR: "directory", stat.S_IFBLK: "block device", stat.S_IFSOCK: "socket"}
WRITTEN_IN_PLACE = ("stream", "character device", "FIFO")
REFUSED = ("directory", "block device", "socket", "dangling symlink", "other")
_STREAM = re.compile(r"/dev/(?:(stdout)|(stderr)|fd/(\d+))|/proc/(?:self|thread-self)/fd/(\d+)")


def write_error(path: str | os.PathLike, e: OSError) -> ReportError:
    """The ReportError for a report or rendering that cannot be written: the path and the OS reason."""
    return ReportError(f"{os.fspath(path)}: cannot write ({e.strerror or e})")


def stream_fd(path: str) -> int | None:
    """The descriptor a path like /dev/stdout or /proc/self/fd/3 names, or None."""
    m = _STREAM.fullmatch(os.path.abspath(path)) if path else None
    if m is None:
        return None
    stdout, stderr, dev_fd, proc_fd = m.groups()
    return 1 if stdout else 2 if stderr else int(dev_fd or proc_fd)


def _stream_link(path: str) -> str | None:
    """The stream path a chain of symlinks reaches (`ln -s /dev/stdout out`), or None: followed one
    hop at a time, since resolving it whole would land on whatever stdout is redirected to."""
    for _ in range(40):
        if stream_fd(path) is not None:
            return path
        if not os.path.islink(path):
            return None
        path = os.path.join(os.path.dirname(os.path.abspath(path)), os.readlink(path))
    return None


def classify(path: str) -> tuple[str, str]:
    """(what the path names, the path to write to): 'new', 'file', 'stream', 'character device',
    'FIFO', or one of REFUSED. A symlink is followed; the second item is its target (for a stream,
    the stream path, which stream_fd reads)."""
    stream = _stream_link(path)
    if stream is not None:
        return "stream", stream
    target = path
    if os.path.islink(path):
        target = os.path.realpath(path)
        if not os.path.exists(target):
            return "dangling symlink", target
    try:
        mode = os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):  # a new name; a bad folder fails when it is written
        return "new", target
    return _KINDS.get(stat.S_IFMT(mode), "other"), target


def refusal(kind: str, target: str) -> str:
    """Why a path of a REFUSED kind is not written, in a few words."""
    if kind == "dangling symlink":
        return f"a symbolic link to {target}, which does not exist"
    return f"a {kind}, not a file" if kind != "other" else "not a file warmprof can write"


def write_output(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write `data` (str is UTF-8) to `path` by the policy above; return the path as given."""
    name = os.fspath(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        if not name:
            raise OSError(errno.ENOENT, "an empty path")
        _write(name, raw)
    except OSError as e:
        raise write_error(name, e) from e
    return Path(name)


def _write(path: str, data: bytes) -> None:
    kind, target = classify(path)
    if kind == "stream":
        _write_stream(stream_fd(target), data)
    elif kind in ("new", "file"):
        _replace(target, data)
    elif kind in ("character device", "FIFO"):
        _write_in_place(target, data, kind)
    else:
        raise OSError(errno.EINVAL, refusal(kind, target))


def _replace(target: str, data: bytes) -> None:
    folder = os.path.dirname(target) or "."
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = None  # a new file: created 0o666 less the umask, as open() would
    fd, tmp = _new_temp(folder, os.path.basename(target))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        if mode is not None:
            os.chmod(tmp, mode)  # the old file's permission bits
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _new_temp(folder: str, name: str) -> tuple[int, str]:
    """A new, uniquely named file beside the target, created 0o666 less the process's umask (the
    kernel applies it: reading the umask would mean setting it, which races other threads)."""
    for _ in range(100):  # the name is cut so that a legal 255-byte name still has a legal temp name
        tmp = os.path.join(folder, f".{name[:200]}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, f"no unused temporary name beside {name}")


def _write_stream(fd: int, data: bytes) -> None:
    # Write to the descriptor we already hold rather than reopening its /dev/fd name: a reopened
    # redirected file would start at offset 0 (over what was printed), and a socket cannot be reopened.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            if stream.fileno() == fd:
                stream.flush()  # what Python buffered comes first
    _write_all(fd, data)


def _write_in_place(target: str, data: bytes, kind: str) -> None:
    flags = os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC  # never O_CREAT or O_TRUNC: the node stays as it is
    if kind == "FIFO":
        flags |= os.O_NONBLOCK  # fail now when nobody reads, rather than wait forever
    try:
        fd = os.open(target, flags)
    except OSError as e:
        if kind == "FIFO" and e.errno == errno.ENXIO:
            raise OSError(errno.ENXIO, "no process is reading the FIFO") from None
        raise
    try:
        if _KINDS.get(stat.S_IFMT(os.fstat(fd).st_mode)) != kind:  # swapped between the stat and the open
            raise OSError(errno.EAGAIN, f"it stopped being a {kind} while being opened")
        if kind == "FIFO":  # a reader is there: block on a full pipe like any writer
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_regular(path: str | os.PathLike) -> bytes:
    """The bytes of a regular file. Anything else (a FIFO, a device, a directory) is refused at
    once: it is opened without blocking, so a FIFO with no writer cannot hang the reader."""
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ReportError(f"{name}: no such file") from None
    except OSError as e:
        raise ReportError(f"{name}: cannot read ({e.strerror or e})") from None
    kind = _KINDS.get(stat.S_IFMT(os.fstat(fd).st_mode), "special file")
    if kind != "file":
        os.close(fd)
        raise ReportError(f"{name}: not a regular file (a {kind})")
    with os.fdopen(fd, "rb") as f:
        try:
            return f.read()
        except OSError as e:
            raise ReportError(f"{name}: cannot read ({e.strerror or e})") from None

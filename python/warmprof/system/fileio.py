"""Every output file warmprof writes (a saved report, a rendering, `show -o`) goes through write_output.

What the path names decides how it is written:
- a regular file or a new name: replaced atomically. The bytes go to a unique temporary file in the
  same folder, are flushed and fsynced, get the old file's permission bits (a new file gets
  0o666 & ~umask, as open() would give it), then os.replace puts them under the name. A failed
  write leaves the old file whole and the temporary file removed.
- a symbolic link: followed on purpose. The link stays a link; its target is replaced as above.
  A dangling link is refused (its target's name may be a typo, and writing would create it silently).
  A link (the name itself, or any folder on the way) that the kernel's fs.protected_symlinks would
  refuse to follow is refused, whatever that setting is here: one in a sticky world-writable folder
  (/tmp) owned neither by this user nor by the folder's owner, i.e. another user's plant. The check is
  made hop by hop on the links themselves, and again on what is opened: the folder written through
  is held open (the temporary file is made and renamed through it) and must be the folder checked,
  and a file replaced must still be the one checked when the new bytes take its name.
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
import tempfile
from pathlib import Path
from typing import cast

from ..errors import ReportError, WarmprofError

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


def link_refusal(link: str) -> str | None:
    """Why following the symlink `link` is refused, as fs.protected_symlinks=1 refuses it: it lies in
    a sticky, world-writable folder and is owned neither by this process's user nor by the folder's
    owner. None if it may be followed."""
    folder = os.path.dirname(link) or "."
    st_dir, st_link = os.stat(folder), os.lstat(link)
    sticky_shared = st_dir.st_mode & stat.S_ISVTX and st_dir.st_mode & stat.S_IWOTH
    if not sticky_shared or st_link.st_uid in (os.geteuid(), st_dir.st_uid):
        return None
    return (f"{link} is a symbolic link in the shared sticky folder {folder}, made by another user (uid "
            f"{st_link.st_uid}): not followed (the kernel's fs.protected_symlinks refuses the same)")


def resolve_checked(path: str) -> str:
    """The path with every symlink resolved (os.path.realpath's answer), each one checked with
    link_refusal as it is met, in the folders on the way and at the end. OSError(EACCES) for a link
    that must not be followed, OSError(ELOOP) past 40 links. A name that does not exist ends the walk
    (the rest is returned as it is)."""
    parts = os.path.abspath(path).split(os.sep)[1:]
    done, hops = "/", 0
    while parts:
        part = parts.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            done = os.path.dirname(done)
            continue
        here = os.path.join(done, part)
        try:
            is_link = stat.S_ISLNK(os.lstat(here).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return os.path.join(here, *parts)
        if not is_link:
            done = here
            continue
        hops += 1
        if hops > 40:
            raise OSError(errno.ELOOP, "too many levels of symbolic links")
        why = link_refusal(here)
        if why:
            raise OSError(errno.EACCES, why)
        to = os.readlink(here)
        parts = [p for p in to.split(os.sep) if p] + parts
        if to.startswith(os.sep):
            done = "/"
    return done


def classify(path: str) -> tuple[str, str]:
    """(what the path names, the path to write to): 'new', 'file', 'stream', 'character device',
    'FIFO', or one of REFUSED. A symlink is followed (resolve_checked: OSError for another user's link
    in a shared sticky folder); the second item is its target (for a stream, the stream path, which
    stream_fd reads)."""
    stream = _stream_link(path)
    if stream is not None:
        return "stream", stream
    target = resolve_checked(path)  # absolute, with no link left in it: what is opened is what was checked
    if os.path.islink(path) and not os.path.exists(target):
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
        _write_stream(cast(int, stream_fd(target)), data)  # a "stream" target names a descriptor
    elif kind in ("new", "file"):
        _replace(target, data)
    elif kind in ("character device", "FIFO"):
        _write_in_place(target, data, kind)
    else:
        raise OSError(errno.EINVAL, refusal(kind, target))


_O_PATH = getattr(os, "O_PATH", os.O_RDONLY)


def _replace(target: str, data: bytes) -> None:
    """`target` (a path with no symlink left in it: classify resolved it) replaced atomically, through
    its folder held open: the temporary file is made and renamed in the folder that was checked, and
    the file it replaces must still be the one that was checked (a link or another file swapped in
    under the name meanwhile is refused)."""
    folder, name = os.path.dirname(target) or ".", os.path.basename(target)
    dfd = os.open(folder, _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if os.path.isdir("/proc/self/fd") and os.readlink(f"/proc/self/fd/{dfd}") != os.path.normpath(folder):
            raise OSError(errno.EAGAIN, f"the folder {folder} changed while being opened")
        try:
            old = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            old = None  # a new file: created 0o666 less the umask, as open() would
        if old is not None and not stat.S_ISREG(old.st_mode):
            raise OSError(errno.EAGAIN, f"{target} stopped being a regular file while being written")
        fd, tmp = _new_temp(dfd, name)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())  # the bytes are on disk before the name points at them
                if old is not None:
                    os.fchmod(f.fileno(), stat.S_IMODE(old.st_mode))  # the old file's permission bits
            if old is not None:
                now = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                # a freed inode number is reused at once: the change time and the kind tell a new node
                if (not stat.S_ISREG(now.st_mode)
                        or (now.st_dev, now.st_ino, now.st_ctime_ns) != (old.st_dev, old.st_ino, old.st_ctime_ns)):
                    raise OSError(errno.EAGAIN, f"{target} was replaced by something else while being written")
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)


def _new_temp(dfd: int, name: str) -> tuple[int, str]:
    """A new, uniquely named file beside the target (in the folder `dfd` holds; the name is relative
    to it), created 0o666 less the process's umask (the kernel applies it: reading the umask would
    mean setting it, which races other threads)."""
    for _ in range(100):  # the name is cut so that a legal 255-byte name still has a legal temp name
        tmp = f".{_cut_bytes(name, 200)}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666,
                           dir_fd=dfd), tmp
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, f"no unused temporary name beside {name}")


def _cut_bytes(name: str, most: int) -> str:
    """`name` cut to at most `most` bytes in the file system's encoding (a prefix of its bytes is a
    legal name, even one that ends inside a character)."""
    return os.fsdecode(os.fsencode(name)[:most])


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


def make_temp_folder(prefix: str, what: str) -> str:
    """tempfile.mkdtemp, or one WarmprofError naming what needed it: with no writable temp folder
    (TMPDIR, /tmp, /var/tmp and the current folder all refused) tempfile's FileNotFoundError was a
    traceback from --repeat, --explain and probe."""
    try:
        return tempfile.mkdtemp(prefix=prefix)
    except OSError as e:
        raise _no_temp_folder(what, e) from e


def require_temp_folder(what: str) -> str:
    """tempfile.gettempdir(), refused as make_temp_folder is (for what torch itself will look for)."""
    try:
        return tempfile.gettempdir()
    except OSError as e:
        raise _no_temp_folder(what, e) from e


def temp_folder(prefix: str, what: str) -> "tempfile.TemporaryDirectory[str]":
    """tempfile.TemporaryDirectory, refused as make_temp_folder is."""
    try:
        return tempfile.TemporaryDirectory(prefix=prefix)
    except OSError as e:
        raise _no_temp_folder(what, e) from e


def _no_temp_folder(what: str, e: OSError) -> WarmprofError:
    return WarmprofError(f"no usable temporary folder for {what} ({e.strerror or e}): set TMPDIR to a writable folder")

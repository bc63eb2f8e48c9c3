"""Dropping a file's pages from the page cache, for tests and benches that need a cold read: fsync,
posix_fadvise(POSIX_FADV_DONTNEED), then mincore to see that the pages are gone. Some filesystems
keep them whatever the advice (tmpfs holds files only in the page cache; overlayfs may not pass the
advice down): drop() says why, and the caller skips."""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
PROT_READ, MAP_SHARED = 1, 1
MAP_FAILED = ctypes.c_void_p(-1).value


def resident_pages(path: str) -> tuple[int, int]:
    """(pages of `path` in the page cache, pages in all), from mincore over a mapping of it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pages = (size + os.sysconf("SC_PAGESIZE") - 1) // os.sysconf("SC_PAGESIZE")
        if size == 0:
            return 0, 0
        addr = _libc.mmap(None, size, PROT_READ, MAP_SHARED, fd, 0)
        if addr in (None, MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
        try:
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
            return sum(v & 1 for v in vec), pages
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def _fs_type(path: str) -> str:
    best, kind = "", "unknown"
    real = os.path.realpath(path)
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 2 and (real == fields[1] or real.startswith(fields[1].rstrip("/") + "/")) \
                    and len(fields[1]) >= len(best):
                best, kind = fields[1], fields[2]
    return kind


def drop(path: str) -> str:
    """Drop `path`'s pages from the page cache: '' when mincore then finds at most 1% of them
    resident, else why they could not be dropped (the caller skips with it)."""
    if not hasattr(os, "posix_fadvise"):
        return "no posix_fadvise on this platform"
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # dirty pages are not dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    try:
        left, pages = resident_pages(path)
    except OSError as e:
        return f"cannot tell whether the page cache was dropped: {e}"
    if left > max(1, pages // 100):
        return (f"posix_fadvise(DONTNEED) left {left} of {pages} pages of {path} in the page cache (a {_fs_type(path)} "
                "filesystem: tmpfs and overlayfs keep them)")
    return ""


def make_file(path: str, nbytes: int) -> None:
    """A file of `nbytes` of random bytes (not sparse, not all zero: every page is read from storage)."""
    chunk = 1 << 20
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            f.write(os.urandom(min(chunk, left)))
            left -= chunk
        f.flush()
        os.fsync(f.fileno())

"""Tap file descriptor 1: text from a given prefix to its newline is taken, the rest goes to stdout.

Why a pipe and a native thread: C libraries (oneDNN) print to fd 1, so the only place to catch
their lines is the descriptor itself. fd 1 becomes the write end of a pipe; a reader thread in
native code (csrc/core/fd_tap.cpp) takes the tapped lines out and writes every other byte to the
real stdout as it arrives (binary, partial lines and \\r included), so nothing of the user's output
is stored and memory stays bounded. The reader must not need the GIL: the writer may hold it (a
torch op while oneDNN prints, any C extension), and a write past the pipe's capacity would then
wait forever for a reader that waits for the GIL.

Pass boundaries: mark() flushes Python's and C's stdio buffers, writes a per-instance random token
into fd 1 and waits (without the GIL) until the reader has removed it. Tapped lines come back with
the number of tokens removed before each, so each is known to come before or after each mark.

Holding bytes: at a read's end the reader holds at most a prefix's or a token's length, in case
the next read completes it. The token is one os.write, so a held piece of it is always completed;
a prefix may be cut where C stdio flushed a full buffer, so a held piece waits a few milliseconds
for the rest (kHoldMs in fd_tap.cpp) before it goes out as the user's.

The end: stop() gives fd 1 back and the pipe ends once drained, unless a process started during
the tap (a DataLoader worker, a subprocess) inherited it as its fd 1. Then, after a short grace,
the read end goes to a helper process (`cat`, in a session of its own) that forwards that
process's later output to the real stdout, after warmprof and even this process are gone.

The reader's stream logic in Python, the reference the native one is tested against, is in
tests/unit/splitter_reference.py.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import subprocess
import sys
from typing import Any, Callable, Mapping

from .. import _native

MARK_TIMEOUT_S = 60.0  # a safety net only: the reader reaches a mark as soon as stdout takes the bytes
GRACE_S = 0.5  # after fd 1 is back, the pipe ends at once unless another process still holds it
BUSY_S = 5.0  # how long stop() waits for a reader stuck on a stdout that does not take bytes
_helpers: list[subprocess.Popen] = []  # forwarders started by stop(): kept, so they are reaped, not warned about

_libc = None


def flush_stdio() -> None:
    """Push what Python's sys.stdout and C's stdio hold into fd 1 (best effort: stdout may be gone)."""
    global _libc
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except (OSError, ValueError):
        pass
    try:
        _libc = _libc or ctypes.CDLL(None)
        _libc.fflush(None)
    except Exception:
        pass


def _close(*fds: int | None) -> None:
    for fd in fds:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


class StdoutTap:
    """fd 1 -> pipe -> native reader; start() says why it could not, stop() always restores fd 1.
    on_line(line, marks) is called from the thread that calls mark() and stop(), for each tapped
    line containing `keep`, with the number of marks before it. One tap at a time per process."""

    def __init__(self, prefixes: tuple[bytes, ...], on_line: Callable[[bytes, int], None], keep: bytes = b"") -> None:
        self.notes: list[str] = []
        self.token = b"\0warmprof-mark:" + secrets.token_hex(16).encode() + b"\0"
        self._prefixes = list(prefixes)
        self._keep = keep
        self._on_line = on_line
        self._saved: int | None = None  # the real stdout, while fd 1 is the pipe
        self._pipe: int | None = None  # the pipe's inode: fd 1 is still ours only while it matches
        self._sent = 0  # marks written
        self._pid = os.getpid()  # a process forked during the tap shares the pipe: it must not mark or stop

    def start(self) -> str:
        """Redirect fd 1 through the reader; return "" or why capture is impossible here."""
        try:
            os.fstat(1)
        except OSError as e:
            return f"stdout (fd 1) is not open: {e.strerror}"
        flush_stdio()  # what was printed before goes out before the pipe takes over
        r = w = saved = out = None
        try:
            r, w = os.pipe()
            _enlarge(w)
            saved, out = os.dup(1), os.dup(1)
        except OSError as e:
            _close(r, w, saved, out)
            return f"cannot capture stdout: {e.strerror}"
        why = _native.tap_start(r, out, self._prefixes, self.token, self._keep)  # the reader owns r and out
        if why:
            _close(w, saved)
            return f"cannot capture stdout: {why}"
        try:
            os.dup2(w, 1)
        except OSError as e:
            _close(w, saved)  # no writer left: the reader ends
            _native.tap_stop(GRACE_S, BUSY_S)
            return f"cannot redirect stdout: {e.strerror}"
        self._pipe = os.fstat(w).st_ino
        os.close(w)
        self._saved = saved
        return ""

    def mark(self) -> bool:
        """Wait until the reader has taken everything printed so far (a pass boundary), and hand
        the lines tapped so far to on_line. False when no boundary could be marked."""
        if self._saved is None or os.getpid() != self._pid:
            return False
        flush_stdio()
        try:
            if os.fstat(1).st_ino != self._pipe:  # the model moved fd 1 itself: the token would show
                raise OSError(0, "fd 1 no longer goes to warmprof's pipe")
            os.write(1, self.token)  # short: one atomic write into the pipe
        except OSError as e:
            self.notes.append(f"could not mark a pass boundary in stdout: {e.strerror}")
            return False
        self._sent += 1
        if not _native.tap_wait_mark(self._sent, MARK_TIMEOUT_S):  # the GIL is released meanwhile
            self.notes.append(f"stdout reader did not reach a pass boundary within {MARK_TIMEOUT_S:.0f} s: "
                              "oneDNN lines near it may be counted in the next pass")
        self._deliver()
        return True

    def stop(self) -> None:
        """Give fd 1 back; never raises. Lines tapped to the end go to on_line."""
        saved = self._saved
        if saved is None or os.getpid() != self._pid:
            return
        try:
            self.mark()  # all our output is through: what is printed after goes straight out, in order
        finally:
            flush_stdio()
            try:
                os.dup2(saved, 1)
            except OSError as e:  # pragma: no cover - dup2 of a descriptor we hold does not fail
                self.notes.append(f"could not restore stdout: {e.strerror}")
            self._saved = None
            try:
                stopped, fd = _native.tap_stop(GRACE_S, BUSY_S)  # without the GIL
                if stopped == "handoff":
                    self._hand_off(fd, saved)
                elif stopped == "busy":
                    self.notes.append("the stdout reader was still busy when the trace ended (stdout does not take "
                                      "bytes); it goes on forwarding in the background")
            finally:
                _close(saved)
        state = self._deliver()
        if state["write_error"]:
            self.notes.append(f"stdout write failed: {state['write_error']}; "
                              "the model's output during the passes was discarded")
        if state["dropped"]:
            self.notes.append(f"{state['dropped']} tapped stdout lines past the reader's bound "
                              "(20000 lines or 16 MiB between pass boundaries) were not read")
        if state["failure"]:
            self.notes.append(f"stdout reader failed ({state['failure']}); output passed through unfiltered")

    def _hand_off(self, fd: int, saved: int) -> None:
        """A process started during the tap still holds the pipe as its stdout: a helper that
        outlives us forwards the rest (else that process would get SIGPIPE once we are gone)."""
        _helpers[:] = [h for h in _helpers if h.poll() is None]
        try:
            helper = subprocess.Popen(["cat"], stdin=fd, stdout=saved, stderr=subprocess.DEVNULL,
                                      start_new_session=True)  # a Ctrl-C or kill of our group spares it
        except Exception as e:  # no cat, no memory, no process slot: forward from here instead
            why = _forward_here(fd, saved)
            self.notes.append("a process started during the trace still holds stdout and no helper process could "
                              f"forward it ({getattr(e, 'strerror', None) or e}); "
                              + ("its output is lost" if why else "its output is forwarded until this process exits"))
            return
        _close(fd)
        _helpers.append(helper)
        self.notes.append("a process started during the trace still holds stdout: its output is forwarded by a "
                          f"helper process (pid {helper.pid})")

    def _deliver(self) -> Mapping[str, Any]:
        """Hand the stored lines to on_line; the reader's state."""
        taken = _native.tap_take()
        for line, marks in zip(taken["lines"], taken["segments"]):
            try:
                self._on_line(line, marks)
            except Exception as e:  # one bad line costs that line, not the stream
                if not any(n.startswith("a tapped line") for n in self.notes):
                    self.notes.append(f"a tapped line could not be read ({type(e).__name__}: {e}); it was skipped")
        return taken


def helper_pids() -> list[int]:
    """The forwarders this process started (_hand_off) that still run: warmprof's own, not the model's."""
    return [h.pid for h in _helpers if h.poll() is None]


def _forward_here(fd: int, saved: int) -> str:
    """Forward fd to the real stdout from a native thread of ours (until this process exits); the
    reason if even that fails (fd is closed then)."""
    try:
        out = os.dup(saved)
    except OSError as e:
        _close(fd)
        return e.strerror or str(e)
    return _native.tap_forward(fd, out)  # takes both


PIPE_BYTES = 1 << 20  # the tap's pipe, where the kernel lets us: the reader paces its reads (fd_tap.cpp)


def _enlarge(fd: int) -> None:
    """The pipe's capacity raised to PIPE_BYTES (Linux F_SETPIPE_SZ; up to the unprivileged limit in
    /proc/sys/fs/pipe-max-size): the reader reads every few ms, and a pass's writes then fit while
    it waits. Where that fails the pipe keeps its size (a full pipe only makes the writer wait)."""
    import fcntl

    setsz = getattr(fcntl, "F_SETPIPE_SZ", 1031 if sys.platform.startswith("linux") else None)
    if setsz is None:
        return
    try:
        fcntl.fcntl(fd, setsz, PIPE_BYTES)
    except OSError:
        pass


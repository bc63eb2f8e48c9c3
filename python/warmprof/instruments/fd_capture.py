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

Other threads' output stays in order and whole across the hand-back. Until fd 1 is back, their
writes go into the pipe; right after, straight to stdout. Bytes still in the pipe then (up to its
1 MiB: the reader reads every few ms) would reach stdout after later ones, a line cut where its
thread's buffer was flushed. So the hand-back runs while this thread keeps the GIL (_gil_kept): no
other Python thread can begin a write. A thread may have let go of the GIL for a write it has not
yet made (one at most each): so the pipe is drained first, fd 1 still the pipe, then fd 1 given
back, then the pipe drained again (that write, if it went in meanwhile). Each drain writes tokens
into the pipe and waits, after each, until the pipe is empty (FIONREAD on a read end of our own),
all through ctypes.PyDLL, whose calls keep the GIL: once the reader has read a token that was alone
in the pipe, it has written out everything before the token ahead of it, and nothing else was
there. So each thread's writes reach stdout in the order it made them. Threads that hold no GIL
(C threads) are ordered only as far as the kernel orders their writes; on a Python without a GIL
the drains still run, and a thread's write may then come out ahead of one still in the pipe.

The reader's stream logic in Python, the reference the native one is tested against, is in
tests/unit/splitter_reference.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import select
import subprocess
import sys
import termios
import time
from typing import Any, Callable, Iterator, Mapping

from .. import _native

MARK_TIMEOUT_S = 60.0  # a safety net only: the reader reaches a mark as soon as stdout takes the bytes
GRACE_S = 0.5  # after fd 1 is back, the pipe ends at once unless another process still holds it
BUSY_S = 5.0  # how long stop() waits for a reader stuck on a stdout that does not take bytes
# The hand-back (stop): how long this thread may keep the GIL while the pipe drains (a stdout that
# takes no bytes: past this, the order of what was left in the pipe is not kept), and the switch
# interval meanwhile, longer than that, so no waiting thread forces the GIL away.
DRAIN_S = 0.25
HELD_SWITCH_S = 1.0
DRAIN_ROUNDS = 4  # tokens at most: two suffice unless another thread's write was still under way
FIONREAD = getattr(termios, "FIONREAD", 0x541B)  # how many bytes a pipe holds
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
        self._peek: int | None = None  # a read end of the pipe: how much it holds (the hand-back's drain)
        self._wr: int | None = None  # a write end of the pipe: the hand-back's tokens
        self._pipe: int | None = None  # the pipe's inode: fd 1 is still ours only while it matches
        self._sent = 0  # marks written
        self._failed = False  # the reader failed: it passes everything through as it is, tokens too
        self._pid = os.getpid()  # a process forked during the tap shares the pipe: it must not mark or stop

    def start(self) -> str:
        """Redirect fd 1 through the reader; return "" or why capture is impossible here."""
        try:
            os.fstat(1)
        except OSError as e:
            return f"stdout (fd 1) is not open: {e.strerror}"
        flush_stdio()  # what was printed before goes out before the pipe takes over
        with _std_holes_filled():  # nothing of the tap's (the native reader's wake pipe too) becomes fd 0-2
            r = w = saved = out = peek = wr = None
            try:
                r, w = os.pipe()
                _enlarge(w)
                saved, out = _dup(1), _dup(1)
                peek, wr = _dup(r), _dup(w)  # the hand-back's: the pipe's fill, and its tokens (stop)
            except OSError as e:
                _close(r, w, saved, out, peek, wr)
                return f"cannot capture stdout: {e.strerror}"
            why = _native.tap_start(r, out, self._prefixes, self.token, self._keep)  # the reader owns r and out
        if why:
            _close(w, saved, peek, wr)
            return f"cannot capture stdout: {why}"
        try:
            os.dup2(w, 1)
        except OSError as e:
            _close(w, saved, peek, wr)  # no writer left: the reader ends
            _native.tap_stop(GRACE_S, BUSY_S)
            return f"cannot redirect stdout: {e.strerror}"
        self._pipe = os.fstat(w).st_ino
        os.close(w)
        self._saved, self._peek, self._wr = saved, peek, wr
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
            self.mark()  # what was printed so far is through, and its tapped lines handed over
        finally:
            flush_stdio()
            self._hand_back(saved)  # fd 1 back, and the pipe drained before another thread writes
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

    def _hand_back(self, saved: int) -> None:
        """fd 1 back to `saved`, with what other threads wrote into the pipe out before anything they
        write after it (the module's docstring). Never raises but KeyboardInterrupt, fd 1 restored."""
        peek, wr = self._peek, self._wr
        self._peek = self._wr = None
        libc = _held_libc()
        restored = drained = False
        try:
            # a reader that failed passes everything through, tokens too: fd 1 is simply given back
            if libc is not None and peek is not None and wr is not None and not self._failed:
                with _gil_kept():
                    deadline = time.monotonic() + DRAIN_S
                    # fd 1 still the pipe: what was written so far goes out, and a write another thread
                    # had begun before this one took the GIL goes in behind it
                    drained, tokens = _drain(libc, wr, peek, self.token, deadline)
                    self._sent += tokens
                    restored = libc.dup2(saved, 1) == 1
                    if restored:  # a write that entered the pipe since, out before another one is begun
                        after, tokens = _drain(libc, wr, peek, self.token, deadline)
                        drained, self._sent = drained and after, self._sent + tokens
                    libc.close(wr)
                    wr = None
                if restored and not drained:
                    self.notes.append(f"the stdout reader had not drained the pipe {DRAIN_S:g} s after stdout was "
                                      "given back (a stdout that takes bytes slowly): what other threads printed "
                                      "around the end of the trace may be out of order")
        finally:
            _close(wr, peek)
            if not restored:  # no PyDLL, or interrupted before its dup2
                try:
                    os.dup2(saved, 1)
                except OSError as e:  # pragma: no cover - dup2 of a descriptor we hold does not fail
                    self.notes.append(f"could not restore stdout: {e.strerror}")

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
        self._failed = self._failed or bool(taken["failure"])
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
        out = _dup(saved)
    except OSError as e:
        _close(fd)
        return e.strerror or str(e)
    return _native.tap_forward(fd, out)  # takes both


def _dup(fd: int) -> int:
    """A non-inheritable duplicate numbered 3 or more: with stdin or stderr closed (`2>&-`), os.dup
    would fill that hole, and C libraries' writes to stderr would land in our stdout."""
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


@contextlib.contextmanager
def _std_holes_filled() -> Iterator[None]:
    """Closed descriptors among 0-2 (`2>&-`) held on /dev/null for the block, closed again after: a
    descriptor opened meanwhile (a pipe, the native reader's own) cannot take their number, and with
    it what is written to stderr. The caller's table is as it was after."""
    held: list[int] = []
    try:
        while True:  # open() takes the lowest free number: the holes first
            try:
                fd = os.open(os.devnull, os.O_RDWR)
            except OSError:  # no /dev/null here: the holes stay (best effort)
                break
            if fd > 2:
                os.close(fd)
                break
            held.append(fd)
        yield
    finally:
        _close(*held)


_pylibc: Any = None


def _held_libc() -> Any:
    """libc through ctypes.PyDLL: its calls keep the GIL (CDLL's release it). None where it cannot load."""
    global _pylibc
    if _pylibc is None:
        try:
            lib = ctypes.PyDLL(None, use_errno=True)
            lib.dup2.argtypes = [ctypes.c_int, ctypes.c_int]
            lib.close.argtypes = [ctypes.c_int]
            lib.write.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
            lib.write.restype = ctypes.c_ssize_t
            lib.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
            lib.usleep.argtypes = [ctypes.c_uint]
            lib.poll.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int]
        except Exception:
            return None
        _pylibc = lib
    return _pylibc


@contextlib.contextmanager
def _gil_kept() -> Iterator[None]:
    """For the block (no call in it may release the GIL: ctypes.PyDLL's only), no other Python thread
    runs. A thread waiting for the GIL asks for it after the switch interval, and the holder gives it
    up at its next bytecode: the interval is raised past the block's length, and before the block
    the GIL is let go for longer than the old interval, so no wait timed with the old one is left.
    The caller's interval comes back after. Taking the GIL back may then wait up to HELD_SWITCH_S
    for a thread that computes without releasing it."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(max(before, HELD_SWITCH_S))
    try:
        time.sleep(before + 0.001)
        yield
    finally:
        sys.setswitchinterval(before)


class _PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


def _drain(libc: Any, wr: int, peek: int, token: bytes, deadline: float) -> tuple[bool, int]:
    """Tokens into the pipe, each waited for until the pipe is empty (the reader has read it), until
    one of them, after the first, was alone in it: the reader reads in order and writes out a read's
    bytes before its next read, so everything before the last token is then out. GIL kept
    throughout (libc is PyDLL; nothing is imported here: an import reads files), so nothing here
    may block: a token is written only where the pipe has room. Returns (drained, tokens written)."""
    held = ctypes.c_int(0)
    room = _PollFd(wr, select.POLLOUT, 0)

    def pending() -> int:
        return held.value if libc.ioctl(peek, FIONREAD, ctypes.byref(held)) == 0 else -1

    tokens = 0
    for _ in range(DRAIN_ROUNDS):
        # POLLOUT: a write of up to PIPE_BUF bytes goes in at once (a full pipe: the reader is stuck)
        if libc.poll(ctypes.byref(room), 1, 0) != 1 or not room.revents & select.POLLOUT:
            return False, tokens
        if libc.write(wr, token, len(token)) != len(token):  # under PIPE_BUF bytes: whole or none
            return False, tokens
        tokens += 1
        alone = pending() == len(token)  # 0 if the reader took it at once: not known, one more round
        while (n := pending()) != 0:
            if n < 0 or time.monotonic() > deadline:
                return False, tokens
            libc.usleep(100)
        if alone and tokens >= 2:
            return True, tokens
    return True, tokens  # a writer still under way (a blocked large write): what is out is in order


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


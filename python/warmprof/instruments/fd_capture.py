"""Tap file descriptor 1: text from a given prefix to its newline goes to a callback, the rest to stdout.

Why a pipe and a thread: C libraries (oneDNN) print to fd 1, so the only place to catch their
lines is the descriptor itself. fd 1 becomes the write end of a pipe; a daemon reader thread takes
the tapped lines out and writes every other byte to the real stdout as it arrives (binary, partial
lines and \\r included), so nothing of the user's output is stored and memory stays bounded.

Pass boundaries: mark() flushes Python's and C's stdio buffers, writes a per-instance random token
into fd 1 and waits until the reader has reached it. The reader removes the token from the stream
and counts it, so each tapped line is known to come before or after each mark.

Holding bytes: at a read's end the reader holds at most a prefix's or a token's length, in case
the next read completes it. Both are written whole by one write() of at most PIPE_BUF bytes, which
a pipe keeps together (oneDNN printf()s and fflush()es each line; the token is one os.write), so a
held piece with nothing more in the pipe behind it cannot be the start of either, and goes out.
"""

from __future__ import annotations

import ctypes
import os
import re
import secrets
import select
import sys
import threading
from typing import Callable

MAX_LINE = 64 << 10  # longer than any oneDNN line: a "line" past this is the user's, let through
MARK_TIMEOUT_S = 60.0  # a safety net only: the reader reaches a mark as soon as stdout takes the bytes
JOIN_TIMEOUT_S = 5.0  # after fd 1 is back, the pipe ends at once unless another process still holds it
_CHUNK = 64 << 10
_LINE_END = re.compile(b"[\n\0]")

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


class LineSplitter:
    """The reader's stream logic, without descriptors: feed(bytes) in order, release() when the
    pipe is empty, finish() at the end. Calls out(bytes) for passthrough, on_line(bytes, marks)
    for a tapped line (from its prefix to its newline) and on_mark() for each token.

    A prefix is looked for anywhere, not only after a newline: oneDNN's line may follow a partial
    line of the user's ("loading..."), and then it is still oneDNN's write, not the user's text.
    Memory: at most MAX_LINE plus one chunk."""

    def __init__(self, prefixes: tuple[bytes, ...], token: bytes, out: Callable[[bytes], None],
                 on_line: Callable[[bytes, int], None], on_mark: Callable[[], None]) -> None:
        self.token = token
        self.out, self.on_line, self.on_mark = out, on_line, on_mark
        self.marks = 0
        self._starts = (token, *prefixes)
        self._special = re.compile(b"|".join(re.escape(x) for x in self._starts))
        self._held = b""  # a chunk's end that may be the start of a token or a prefix
        self._line: bytearray | None = None  # a tapped line being collected

    def holding(self) -> bool:
        return bool(self._held)

    def feed(self, chunk: bytes) -> None:
        data, self._held = self._held + chunk, b""
        out: list[bytes] = []  # passthrough pieces, written together
        i = 0
        while i < len(data):
            if self._line is not None:
                i = self._collect(data, i, out)
                continue
            m = self._special.search(data, i)
            if m is None:
                keep = self._partial_start(data, i)
                out.append(data[i:keep])
                self._held = data[keep:]
                break
            out.append(data[i:m.start()])
            if m.group() == self.token:
                self._write(out)  # what came before the mark is out before the mark is seen
                self.marks += 1
                self.on_mark()
                i = m.end()
            else:
                self._line = bytearray()  # collected from its prefix on
                i = m.start()
        self._write(out)

    def release(self) -> None:
        """The pipe is empty: a held end is not a token's or a prefix's start (each is written
        whole by one write), so it is the user's."""
        held, self._held = self._held, b""
        if held:
            self.out(held)

    def finish(self) -> None:
        self.release()
        if self._line is not None:  # no newline before the end: not one of the tapped lines
            self.out(bytes(self._line))
            self._line = None

    def _write(self, out: list[bytes]) -> None:
        data = b"".join(out)
        out.clear()
        if data:
            self.out(data)

    def _partial_start(self, data: bytes, i: int) -> int:
        """Where the longest end of data[i:] that could begin a token or a prefix starts."""
        for c in range(max(i, len(data) - max(map(len, self._starts)) + 1), len(data)):
            if any(x.startswith(data[c:]) for x in self._starts):
                return c
        return len(data)

    def _collect(self, data: bytes, i: int, out: list[bytes]) -> int:
        """Add to the tapped line up to its newline. A NUL (a token's first byte: never in
        oneDNN's text) or a length past MAX_LINE says the "line" was the user's: let it through."""
        m = _LINE_END.search(data, i)
        nul = m is not None and m.group() == b"\0"
        end = len(data) if m is None else m.start() if nul else m.end()  # a NUL is looked at again
        if nul or len(self._line) + end - i > MAX_LINE:
            out.extend((bytes(self._line), data[i:end]))
            self._line = None
        else:
            self._line += data[i:end]
            if m is not None:  # the newline
                line, self._line = bytes(self._line), None
                self.on_line(line, self.marks)
        return end


class StdoutTap:
    """fd 1 -> pipe -> reader thread; start() says why it could not, stop() always restores fd 1."""

    def __init__(self, prefixes: tuple[bytes, ...], on_line: Callable[[bytes, int], None]) -> None:
        self.notes: list[str] = []
        self._write_error = ""
        self._dead = False  # the reader stopped reading marks (it failed)
        self._saved: int | None = None
        self._out: int | None = None
        self._thread: threading.Thread | None = None
        self._pipe: int | None = None  # the pipe's inode: fd 1 is still ours only while it matches
        self._sent = 0  # marks written
        self._seen = threading.Condition()
        self._on_line = on_line
        self._split = LineSplitter(prefixes, b"\0warmprof-mark:" + secrets.token_hex(16).encode() + b"\0",
                                   self._write, self._tapped, self._marked)

    def start(self) -> str:
        """Redirect fd 1 through the reader; return "" or why capture is impossible here."""
        try:
            os.fstat(1)
        except OSError as e:
            return f"stdout (fd 1) is not open: {e.strerror}"
        flush_stdio()  # what was printed before goes out before the pipe takes over
        r = w = None
        try:
            r, w = os.pipe()
            self._saved, self._out = os.dup(1), os.dup(1)
            self._thread = threading.Thread(target=self._read, args=(r,), name="warmprof-stdout-tap", daemon=True)
            self._thread.start()  # from here the thread owns r and self._out
        except (OSError, RuntimeError) as e:
            self._thread = None
            _close(r, w, self._saved, self._out)
            self._saved = self._out = None
            return f"cannot capture stdout: {getattr(e, 'strerror', None) or e}"
        try:
            os.dup2(w, 1)
        except OSError as e:
            _close(w, self._saved)  # the reader sees the end of the pipe and closes its side
            self._saved = None
            return f"cannot redirect stdout: {e.strerror}"
        self._pipe = os.fstat(w).st_ino
        os.close(w)
        return ""

    def mark(self) -> None:
        """Wait until the reader has taken everything printed so far (a pass boundary)."""
        if self._saved is None or self._dead:
            return
        flush_stdio()
        try:
            if os.fstat(1).st_ino != self._pipe:  # the model moved fd 1 itself: the token would show
                raise OSError(0, "fd 1 no longer goes to warmprof's pipe")
            os.write(1, self._split.token)  # short: one atomic write into the pipe
        except OSError as e:
            self.notes.append(f"could not mark a pass boundary in stdout: {e.strerror}")
            return
        self._sent += 1
        with self._seen:
            if not self._seen.wait_for(lambda: self._split.marks >= self._sent or self._dead, MARK_TIMEOUT_S):
                self.notes.append(f"stdout reader did not reach a pass boundary within {MARK_TIMEOUT_S:.0f} s: "
                                  "oneDNN lines near it may be counted in the next pass")

    def stop(self) -> None:
        """Give fd 1 back; never raises. The reader ends when the pipe has no writer left."""
        if self._saved is None:
            return
        try:
            self.mark()  # all our output is through: what is printed after goes straight out, in order
        finally:
            flush_stdio()
            try:
                os.dup2(self._saved, 1)
            except OSError as e:  # pragma: no cover - dup2 of a descriptor we hold does not fail
                self.notes.append(f"could not restore stdout: {e.strerror}")
            _close(self._saved)
            self._saved = None
        self._thread.join(JOIN_TIMEOUT_S)
        if self._thread.is_alive():
            self.notes.append("the stdout reader was still busy when the trace ended (stdout is slow, or another "
                              "process holds the captured pipe); it goes on forwarding in the background")
        if self._write_error:
            self.notes.append(f"stdout write failed: {self._write_error}; "
                              "the model's output during the passes was discarded")

    def _tapped(self, line: bytes, marks: int) -> None:
        try:
            self._on_line(line, marks)
        except Exception as e:  # one bad line costs that line, not the stream
            if not any(n.startswith("a tapped line") for n in self.notes):
                self.notes.append(f"a tapped line could not be read ({type(e).__name__}: {e}); it was skipped")

    def _marked(self) -> None:
        with self._seen:
            self._seen.notify_all()

    def _write(self, data: bytes) -> None:
        """Passthrough to the real stdout, all of it (os.write may take part); on failure keep
        draining the pipe (the model must never block) and drop the output."""
        view = memoryview(data)
        while view and not self._write_error:
            try:
                view = view[os.write(self._out, view):]
            except OSError as e:
                self._write_error = e.strerror or str(e)

    def _read(self, r: int) -> None:
        poll = select.poll()
        poll.register(r, select.POLLIN)
        try:
            while chunk := os.read(r, _CHUNK):
                self._split.feed(chunk)
                if self._split.holding() and not poll.poll(0):
                    self._split.release()
            self._split.finish()
        except BaseException as e:  # a bug here must not block the model: drain raw to the end
            self.notes.append(f"stdout reader failed ({type(e).__name__}: {e}); output passed through unfiltered")
            self._dead = True
            self._marked()
            try:
                while chunk := os.read(r, _CHUNK):
                    self._write(chunk.replace(self._split.token, b""))
            except OSError:
                pass
        finally:
            _close(r, self._out)

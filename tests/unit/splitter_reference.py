"""The stdout tap's stream logic in Python: the reference the native splitter (csrc/core/fd_tap.cpp)
is tested against, on every way a pipe may cut a stream (test_onednn_capture.py). Test-only."""

from __future__ import annotations

import re
from typing import Callable

MAX_LINE = 64 << 10  # kMaxLine in fd_tap.h: a "line" past this is the user's, let through
_LINE_END = re.compile(b"[\n\0]")


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

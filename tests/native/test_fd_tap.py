"""The native stdout tap (csrc/core/fd_tap.cpp) on plain pipes: the reader drains without the GIL,
bounds what it stores, survives a stdout it cannot write, and lets go of a pipe that another
process still holds. The fd 1 plumbing is in tests/unit/test_onednn_capture.py."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from warmprof import _native

PREFIXES = [b"onednn_verbose,", b"dnnl_verbose,"]
MARKER = b"\0test-mark\0"
LINE = b"onednn_verbose,v1,primitive,create:cache_miss,cpu,convolution,jit,0.5\n"


def poll_until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return result


def tap_threads() -> int:
    count = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                count += f.read().strip() == "warmprof-tap"
        except OSError:
            pass
    return count


class Tap:
    """A tap on a fresh pipe whose passthrough goes to `out` (a path or a descriptor we own)."""

    def __init__(self, out, keep: bytes = b"") -> None:
        r, self.w = os.pipe()
        out_fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if isinstance(out, (str, os.PathLike)) else out
        assert _native.tap_start(r, out_fd, PREFIXES, MARKER, keep) == ""
        self.marks = 0

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.w, view):]

    def mark(self) -> bool:
        self.write(MARKER)
        self.marks += 1
        return _native.tap_wait_mark(self.marks, 30)

    def close_writer(self) -> None:
        if self.w is not None:
            os.close(self.w)
            self.w = None


@pytest.fixture
def tap_cleanup():
    taps: list[Tap] = []
    yield taps
    for t in taps:
        t.close_writer()
    _native.tap_stop(0.5, 5)
    _native.tap_take()


def test_lines_are_stored_with_their_segment_and_the_rest_passes_through(tmp_path, tap_cleanup):
    out = tmp_path / "out"
    tap = Tap(out)
    tap_cleanup.append(tap)
    tap.write(b"user text, " + LINE + b"more")
    assert tap.mark()
    tap.write(LINE.replace(b"onednn_verbose,v1,", b"dnnl_verbose,"))
    tap.close_writer()
    assert _native.tap_stop(0.5, 5) == ("ended", -1)
    taken = _native.tap_take()
    assert taken["lines"] == [LINE, LINE.replace(b"onednn_verbose,v1,", b"dnnl_verbose,")]
    assert taken["segments"] == [0, 1]
    assert (taken["write_error"], taken["dropped"], taken["failure"]) == ("", 0, "")
    assert out.read_bytes() == b"user text, more"
    assert tap_threads() == 0


def test_keep_stores_only_matching_lines_and_takes_the_others_out(tmp_path, tap_cleanup):
    out = tmp_path / "out"
    tap = Tap(out, keep=b",create:")
    tap_cleanup.append(tap)
    exec_line = b"onednn_verbose,v1,primitive,exec,cpu,convolution,jit,0.1\n"
    tap.write(exec_line * 3 + LINE)
    assert tap.mark()
    assert _native.tap_take()["lines"] == [LINE]
    assert out.read_bytes() == b""


def test_a_writer_holding_the_gil_past_the_pipe_capacity_does_not_block(tmp_path):
    """ctypes.PyDLL keeps the GIL through libc's write(): only a reader that never takes it drains."""
    code = f"""
        import ctypes, os, sys
        from warmprof import _native
        r, w = os.pipe()
        out = os.open({str(tmp_path / "out")!r}, os.O_WRONLY | os.O_CREAT)
        assert _native.tap_start(r, out, [b"onednn_verbose,"], b"\\0m\\0", b"") == ""
        libc = ctypes.PyDLL(None)
        assert libc.write(w, b"x" * 200_000, 200_000) == 200_000
        line = {LINE!r}
        libc.write(w, line, len(line))
        os.close(w)
        print(_native.tap_stop(0.5, 5), _native.tap_take()["lines"] == [line], file=sys.stderr)
    """
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert p.stderr.decode().split() == ["('ended',", "-1)", "True"]
    assert (tmp_path / "out").read_bytes() == b"x" * 200_000


def test_the_store_is_bounded_and_counts_what_it_drops(tmp_path, tap_cleanup):
    tap = Tap(tmp_path / "out")
    tap_cleanup.append(tap)
    for _ in range(500):  # as oneDNN writes: whole lines, each write() under PIPE_BUF (atomic)
        tap.write(LINE * 50)
    assert tap.mark()
    taken = _native.tap_take()
    assert len(taken["lines"]) == 20_000 and taken["dropped"] == 5_000
    tap.write(LINE)  # taking empties the store: room again
    assert tap.mark()
    assert len(_native.tap_take()["lines"]) == 1


def test_a_stdout_that_fails_is_drained_and_its_error_kept(tap_cleanup):
    r, w = os.pipe()
    os.close(r)  # passthrough into a pipe without a reader: EPIPE (Python ignores SIGPIPE)
    tap = Tap(w)
    tap_cleanup.append(tap)
    tap.write(b"y" * (1 << 20))  # far past the pipe's capacity: the reader keeps draining
    tap.write(LINE)
    assert tap.mark()
    taken = _native.tap_take()
    assert taken["write_error"] == os.strerror(32) and taken["lines"] == [LINE]


def test_one_tap_at_a_time(tmp_path, tap_cleanup):
    tap_cleanup.append(Tap(tmp_path / "a"))
    r, w = os.pipe()
    out = os.dup(1)
    assert _native.tap_start(r, out, PREFIXES, MARKER, b"") == "another stdout tap is running"
    for fd in (r, out):  # both descriptors taken and closed
        with pytest.raises(OSError):
            os.fstat(fd)
    os.close(w)


def test_a_pipe_still_held_by_another_writer_is_handed_over_with_everything_before_it_out(tmp_path, tap_cleanup):
    out = tmp_path / "out"
    tap = Tap(out)
    tap_cleanup.append(tap)
    tap.write(b"before " + LINE + b"onednn")  # ends on a held prefix start, then the pipe is empty
    assert tap.mark()
    started = time.monotonic()
    state, fd = _native.tap_stop(0.2, 5)  # tap.w stands for a process started during the tap
    assert state == "handoff" and fd >= 0 and time.monotonic() - started < 3
    assert out.read_bytes() == b"before onednn"  # the held bytes went out before the hand-over
    assert tap_threads() == 0
    tap.write(b"_verbose,late\n")
    tap.close_writer()
    with os.fdopen(fd, "rb") as f:
        assert f.read() == b"_verbose,late\n"  # the rest is the new reader's, in order


def test_a_reader_stuck_on_stdout_is_left_forwarding_to_the_end(tmp_path, tap_cleanup):
    out_r, out_w = os.pipe()  # a stdout nobody reads yet
    tap = Tap(out_w)
    # Past the stdout pipe's 64 KiB: the reader blocks in write() with one read in hand; the tap's
    # own pipe holds the rest (160 KiB fits in the three).
    tap.write(b"z" * (160 << 10))
    tap.close_writer()
    assert _native.tap_stop(0.1, 0.3) == ("busy", -1)
    tap_cleanup.append(Tap(tmp_path / "next"))  # the detached reader does not hold the next tap back
    got = b""
    while chunk := os.read(out_r, 1 << 16):  # stdout takes bytes again: the reader finishes alone
        got += chunk
    os.close(out_r)
    assert got == b"z" * (160 << 10)


def test_forward_copies_to_the_end_on_its_own(tmp_path):
    r, w = os.pipe()
    out = tmp_path / "out"
    assert _native.tap_forward(r, os.open(out, os.O_WRONLY | os.O_CREAT)) == ""
    os.write(w, b"a\0b" + LINE)
    os.close(w)
    poll_until(lambda: out.read_bytes() == b"a\0b" + LINE, 30, "the forwarded bytes")


def test_stop_and_wait_without_a_tap():
    assert _native.tap_stop(0, 0) == ("none", -1)


def test_split_handles_pieces_cut_anywhere():
    chunks = [b"ab onednn", b"_verb", b"ose,x\n\0test", b"-mark\0c", b"dnn", b"", b"l"]
    assert _native._testing.tap_split(chunks, PREFIXES, MARKER) == (b"ab cdnnl", [b"onednn_verbose,x\n"], [0])


def test_an_empty_marker_is_refused():  # it would match everywhere
    with pytest.raises(ValueError):
        _native._testing.tap_split([b"x"], PREFIXES, b"")
    r, w = os.pipe()
    with pytest.raises(ValueError):
        _native.tap_start(r, w, PREFIXES, b"", b"")
    os.close(r)
    os.close(w)


def test_a_process_forked_during_the_tap_exits_normally():
    """The forked copy holds the reader's std::thread without the thread: its exit() must not
    destroy it (std::terminate, SIGABRT)."""
    code = """
        import os, sys
        from warmprof import _native
        r, w = os.pipe()
        assert _native.tap_start(r, os.dup(2), [b"onednn_verbose,"], b"\\\\0m\\\\0", b"") == ""
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # a normal interpreter exit: static destructors run
        _, status = os.waitpid(pid, 0)
        os.close(w)
        _native.tap_stop(0.5, 5)
        print("STATUS", status)
    """
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, timeout=120)
    assert p.returncode == 0 and p.stdout.split() == [b"STATUS", b"0"], p.stderr.decode()[-2000:]

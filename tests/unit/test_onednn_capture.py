"""The oneDNN instrument's stdout tap: oneDNN's lines are taken and parsed, the user's bytes pass
through untouched and at once, memory stays bounded, and a stdout it cannot use degrades the
instrument instead of the trace."""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from warmprof import _native
from warmprof.instruments.fd_capture import StdoutTap
from warmprof.instruments.onednn import OneDNN

from splitter_reference import MAX_LINE, LineSplitter

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN in this torch")

MISS = (b"onednn_verbose,v1,1700000000000.0,primitive,create:cache_miss,cpu,convolution,jit:avx2,forward_training,"
        b"src_f32::blocked:abcd::f0,,alg:convolution_direct,mb1_ic3oc8_ih8oh8kh3sh1dh0ph1_iw8ow8kw3sw1dw0pw1,0.5\n")
HIT = MISS.replace(b"cache_miss", b"cache_hit").replace(b",0.5\n", b",0.25\n")
DNNL_MISS = MISS.replace(b"onednn_verbose,v1,", b"dnnl_verbose,")  # older oneDNN's prefix
BINARY = b"\xff\xfe\x00 binary\r no newline"
PREFIXES = (b"onednn_verbose,", b"dnnl_verbose,")


def counts(inst: OneDNN, name: str) -> tuple[int, int]:
    p = inst.summary()["passes"].get(name, {})
    return p.get("cache_miss", 0), p.get("cache_hit", 0)


def run_child(code: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], stderr=subprocess.PIPE, timeout=timeout, **kw)


def tap_threads() -> list[str]:
    """The native reader threads alive in this process (named by fd_tap.cpp)."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return [n for n in names if n == "warmprof-tap"]


def poll_until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return result


def test_binary_output_passes_byte_for_byte_and_onednn_lines_are_taken(capfdbinary):
    inst = OneDNN()
    with inst:
        inst.mark_pass("first")
        os.write(1, BINARY)
        os.write(1, MISS)  # oneDNN's line after a partial line of the user's is still oneDNN's
        os.write(1, b"\n" + DNNL_MISS)
        os.write(1, b"progress 1%\rprogress 2%")
        inst.end_pass("first")
    assert capfdbinary.readouterr().out == BINARY + b"\nprogress 1%\rprogress 2%"
    assert counts(inst, "first") == (2, 0)
    assert inst.summary()["passes"]["first"]["create_miss_ms"] == pytest.approx(1.0)


def test_lines_go_to_the_pass_that_printed_them_and_output_is_out_by_its_end(capfdbinary):
    inst = OneDNN()
    with inst:
        inst.mark_pass("first")
        os.write(1, b"first pass says hi\n")
        os.write(1, MISS)
        os.write(1, HIT)
        os.write(1, b"on")  # the start of a line that could be oneDNN's, then the pass ends
        inst.end_pass("first")
        # The reader has taken everything printed in the pass before end_pass returns.
        assert capfdbinary.readouterr().out == b"first pass says hi\non"
        inst.mark_pass("seen_rerun")
        os.write(1, b"ly\n" + HIT)
        inst.end_pass("seen_rerun")
        assert capfdbinary.readouterr().out == b"ly\n"
        os.write(1, MISS)  # after the last pass
    assert counts(inst, "first") == (1, 1)
    assert counts(inst, "seen_rerun") == (0, 1)
    assert counts(inst, "after") == (1, 0)


def test_a_model_that_raises_mid_write_gets_everything_back(capfdbinary):
    before = os.environ.get("ONEDNN_VERBOSE_TIMESTAMP")
    inst = OneDNN()
    with pytest.raises(ValueError):
        with inst:
            inst.mark_pass("first")
            os.write(1, b"half a character: \xe2\x82")  # cut inside a UTF-8 sequence
            raise ValueError("the model raised")
    # Its bytes as written, the env var as it was, no reader left (fd 1: the autouse fixture).
    assert capfdbinary.readouterr().out == b"half a character: \xe2\x82"
    assert os.environ.get("ONEDNN_VERBOSE_TIMESTAMP") == before
    assert not tap_threads()


@pytest.mark.parametrize("breaks", ["pipe", "thread", "second tap"])
def test_no_pipe_or_no_reader_degrades_to_a_reason(monkeypatch, capfdbinary, breaks):
    outer = StdoutTap((b"x",), lambda *a: None)
    if breaks == "pipe":
        expected = "Too many open files"

        def fail(*a, **k):
            raise OSError(24, expected)

        monkeypatch.setattr(os, "pipe", fail)
    elif breaks == "thread":  # the native reader's own failure, as std::thread reports it
        expected = "cannot start the stdout reader: Resource temporarily unavailable"

        def fail(read_fd, out_fd, *a):
            os.close(read_fd)  # tap_start takes both descriptors whatever its outcome
            os.close(out_fd)
            return expected

        monkeypatch.setattr(_native, "tap_start", fail)
    else:  # a real refusal of the native side: one tap at a time
        expected = "another stdout tap is running"
        assert outer.start() == ""
    try:
        fds = set(os.listdir("/proc/self/fd"))
        inst = OneDNN()
        with inst:
            inst.mark_pass("first")
            inst.end_pass("first")
        assert set(os.listdir("/proc/self/fd")) == fds  # nothing left open
    finally:
        outer.stop()
    assert inst.reason.startswith("oneDNN times unavailable: ") and expected in inst.reason
    assert inst.summary()["active"] is False


def test_a_write_past_the_pipe_that_holds_the_gil_does_not_hang(tmp_path):
    """libc's write() called with the GIL held (as torch ops and pybind11 extensions print): a
    reader that needed the GIL would never drain the pipe, and the write would block forever."""
    out = tmp_path / "stdout.bin"
    code = f"""
        import ctypes, json, sys
        from warmprof.instruments.onednn import OneDNN
        MISS = {MISS!r}
        libc = ctypes.PyDLL(None)  # PyDLL: the GIL stays held through each call
        inst = OneDNN()
        with inst:
            inst.mark_pass("first")
            sys.stderr.write("WRITE " + str(libc.write(1, b"x" * 200_000, 200_000)) + "\\n")
            libc.write(1, MISS, len(MISS))
            inst.end_pass("first")
        sys.stderr.write("ONEDNN " + json.dumps(inst.summary()) + "\\n")
    """
    with open(out, "wb") as f:
        p = run_child(code, timeout=120, stdout=f)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert "WRITE 200000" in p.stderr.decode()
    assert out.read_bytes() == b"x" * 200_000
    s = onednn_summary(p)
    assert s["passes"]["first"]["cache_miss"] == 1, s


LATE_CHILD = """
    import json, os, subprocess, sys, time
    from warmprof.instruments.onednn import OneDNN
    inst = OneDNN()
    with inst:
        inst.mark_pass("first")
        # A process started during the pass: its fd 1 is warmprof's pipe, and it outlives us.
        subprocess.Popen(["sh", "-c", "sleep 1; echo late; touch {done}"])
        inst.end_pass("first")
        {no_helper}
        started = time.monotonic()
    stop_s = time.monotonic() - started
    sys.stderr.write("RESULT " + json.dumps({{"stop_s": stop_s, "notes": inst.notes}}) + "\\n")
    {wait}
"""


def late_child(tmp_path, no_helper: str = "", wait: str = "") -> tuple[dict, bytes]:
    out, done = tmp_path / "stdout.bin", tmp_path / "DONE"
    code = LATE_CHILD.format(done=done, no_helper=no_helper, wait=wait)
    with open(out, "wb") as f:
        p = run_child(code, timeout=120, stdout=f)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    result = json.loads(p.stderr.decode().split("RESULT ", 1)[1].splitlines()[0])
    poll_until(done.exists, 60, "the late process to finish")
    return result, poll_until(lambda: b"late" in out.read_bytes() and out.read_bytes(), 60, "its output")


def test_a_process_started_during_the_tap_is_forwarded_by_a_helper_after_we_are_gone(tmp_path):
    result, out = late_child(tmp_path)
    # Before: stop() waited 5 s for the pipe's end, then the late process got SIGPIPE.
    assert result["stop_s"] < 3.0, result
    notes = [n for n in result["notes"] if "still holds stdout" in n]
    assert len(notes) == 1 and "forwarded by a helper process (pid " in notes[0], result
    assert out == b"late\n"


def test_without_a_helper_the_process_is_forwarded_while_we_live(tmp_path):
    no_helper = "os.environ['PATH'] = '/nonexistent'  # no cat: no helper can start"
    wait = "while not os.path.exists({done!r}): time.sleep(0.05)"
    result, out = late_child(tmp_path, no_helper, wait.format(done=str(tmp_path / "DONE")))
    notes = [n for n in result["notes"] if "still holds stdout" in n]
    assert len(notes) == 1 and "forwarded until this process exits" in notes[0], result
    assert out == b"late\n"


def test_large_output_passes_through_in_bounded_memory(tmp_path):
    out = tmp_path / "stdout.bin"
    code = """
        import os, resource, sys
        from warmprof.instruments.onednn import OneDNN
        block = b"y" * ((1 << 20) - 1) + b"\\n"
        inst = OneDNN()
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with inst:
            inst.mark_pass("first")
            for _ in range(200):
                sys.stdout.buffer.write(block)  # handles partial writes into the pipe
                sys.stdout.buffer.flush()
            inst.end_pass("first")
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
        sys.stderr.write(f"GROWN_KIB {grown}\\n")
    """
    with open(out, "wb") as f:
        p = run_child(code, stdout=f)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert out.stat().st_size == 200 << 20
    grown_kib = int(p.stderr.decode().split("GROWN_KIB ")[1].split()[0])
    assert grown_kib < 32 << 10, f"peak RSS grew by {grown_kib} KiB while 200 MiB went through"


TRACE_CHILD = """
    import json, os
    import torch, warmprof

    class Printing(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if PRINT and self.calls <= 2:  # the instrumented passes; the steady ones run without the tap
                print("the model talks", flush=True)
            return self.lin(x)

    {setup}
    r = warmprof.trace(Printing(), (2, 4), steady=3)
    os.write(2, ("ONEDNN " + json.dumps(r.instruments["onednn"]) + "\\n").encode())
"""


def onednn_summary(p: subprocess.CompletedProcess) -> dict:
    err = p.stderr.decode()
    assert p.returncode == 0, err[-3000:]
    return json.loads(err.split("ONEDNN ", 1)[1].splitlines()[0])


def test_a_closed_stdout_leaves_the_trace_running_without_onednn_times():
    p = run_child(TRACE_CHILD.format(setup="PRINT = False\n    os.close(1)"))
    s = onednn_summary(p)
    assert s["active"] is False
    assert s["reason"].startswith("oneDNN times unavailable: ") and "not open" in s["reason"]


def test_a_full_stdout_device_discards_the_output_and_the_trace_goes_on(tmp_path):
    node = tmp_path / "full"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # our own /dev/full
        f = open(node, "wb")
    except PermissionError:
        pytest.skip("cannot make or open a character device here")
    with f:
        p = run_child(TRACE_CHILD.format(setup="PRINT = True"), stdout=f)
    s = onednn_summary(p)
    assert s["active"] is True
    assert any(n.startswith("stdout write failed: No space left on device") and "discarded" in n
               for n in s.get("notes", [])), s


# --- the splitter alone: every way the pipe may cut the stream gives the same result ---


def reference(writes: list[tuple[str, bytes]]) -> tuple[bytes, list[tuple[bytes, int]]]:
    """What must come out: the user's bytes as written, oneDNN's lines taken (also after a
    partial line of the user's), tokens gone."""
    out, lines, marks = b"", [], 0
    for kind, data in writes:
        if kind == "mark":
            marks += 1
        elif kind == "onednn":
            lines.append((data, marks))
        else:
            out += data
    return out, lines


def random_writes(rng: random.Random, token: bytes) -> list[tuple[str, bytes]]:
    # The user's bytes include prefix and token starts but never "_": they cannot complete a prefix.
    pieces = [b"o", b"on", b"onednn", b"dnnl", b"\n", b"\r", b"x" * 50, b"\xff\x00", token[:5], b"ok\n", b"d"]
    writes = []
    for _ in range(rng.randint(1, 30)):
        r = rng.random()
        if r < 0.25:
            writes.append(("onednn", rng.choice([MISS, HIT, DNNL_MISS])))
        elif r < 0.35:
            writes.append(("mark", token))
        else:
            writes.append(("user", b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 4)))))
    return writes


def cut(writes, rng) -> list[bytes]:
    """The stream as reads may cut it, with b"" where the pipe was empty (only between whole writes)."""
    stream = b"".join(d for _, d in writes)
    ends, pos = set(), 0
    for _, d in writes:
        pos += len(d)
        ends.add(pos)
    chunks, at = [], 0
    while at < len(stream):
        nxt = min(len(stream), at + rng.randint(1, 40))
        chunks.append(stream[at:nxt])
        at = nxt
        if at in ends and rng.random() < 0.5:
            chunks.append(b"")
    return chunks


def python_split(chunks, token) -> tuple[bytes, list[tuple[bytes, int]]]:
    out, lines = [], []
    sp = LineSplitter(PREFIXES, token, out.append, lambda line, m: lines.append((line, m)), lambda: None)
    for chunk in chunks:
        sp.feed(chunk) if chunk else sp.release()
    sp.finish()
    return b"".join(out), lines


def native_split(chunks, token) -> tuple[bytes, list[tuple[bytes, int]]]:
    out, lines, segments = _native._testing.tap_split(chunks, list(PREFIXES), token)
    return out, list(zip(lines, segments))


def test_splitter_result_does_not_depend_on_how_reads_cut_the_stream():
    """The Python reference and the native reader's splitter, on the same 400 random cut streams."""
    token = b"\0warmprof-mark:0123456789abcdef\0"
    rng = random.Random(7)
    for _ in range(400):
        writes = random_writes(rng, token)
        chunks = cut(writes, rng)
        assert python_split(chunks, token) == reference(writes), writes
        assert native_split(chunks, token) == reference(writes), (writes, chunks)


@pytest.mark.parametrize("split", [python_split, native_split])
def test_a_line_that_starts_like_onednn_but_never_ends_is_let_through(split):
    long_line = b"onednn_verbose," + b"z" * (MAX_LINE + 10)
    chunks = [long_line[:1000], long_line[1000:] + b"\nafter"]
    assert split(chunks, b"\0tok\0") == (long_line + b"\nafter", [])


def test_a_pass_boundary_that_cannot_be_marked_does_not_shift_later_passes(capfdbinary, monkeypatch):
    """One failed mark (fd 1 moved by the model, a write error) must not name every later segment
    after the pass before it: its lines go to the next boundary that is marked."""
    inst = OneDNN()
    with inst:
        inst.mark_pass("first")
        os.write(1, MISS)
        real_write = os.write
        monkeypatch.setattr(os, "write", lambda fd, data: (_ for _ in ()).throw(OSError(5, "I/O error"))
                            if data == inst._tap.token else real_write(fd, data))
        inst.end_pass("first")  # cannot be marked
        monkeypatch.setattr(os, "write", real_write)
        inst.mark_pass("seen_rerun")
        os.write(1, HIT)
        inst.end_pass("seen_rerun")
        inst.mark_pass("steady")
        os.write(1, MISS)
        inst.end_pass("steady")
    assert counts(inst, "seen_rerun") == (1, 1)  # the first pass's line, with its own
    assert counts(inst, "steady") == (1, 0)  # not shifted into the re-run's name
    assert any("could not mark a pass boundary" in n for n in inst.notes)


def test_a_process_forked_during_the_tap_does_not_mark_or_stop_the_parents():
    """A forked copy that unwinds through the instrument (sys.exit in a model) shares the pipe: it
    must not write a boundary into it, nor stop the parent's reader."""
    p = run_child("""
        import os, sys
        from warmprof.instruments.onednn import OneDNN
        MISS = %r
        inst = OneDNN()
        with inst:
            inst.mark_pass("first")
            pid = os.fork()
            if pid == 0:
                try:
                    inst.end_pass("first")
                    inst.__exit__(None, None, None)
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)
            os.write(1, MISS)
            inst.end_pass("first")
        s = inst.summary()["passes"]
        notes = inst.notes
        print("RESULT", s["first"]["cache_miss"], any("busy" in n for n in notes), file=sys.stderr)
    """ % MISS, stdout=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    assert p.stderr.decode().strip().splitlines()[-1] == "RESULT 1 False"

"""The C stdout tap (csrc/core/stdio_tap.cpp): `warmprof run`'s agent takes oneDNN's creation lines out
of a process's C stdout (printf) for the process's whole life. The filter over writes as glibc hands them
over; then a process with the tap on: what reaches fd 1 byte for byte, each creation a span on the
recorder, fork, and the stdout given back."""

import os
import subprocess
import sys
import textwrap

import pytest

from warmprof import _native

PREFIXES = ["onednn_verbose,", "dnnl_verbose,"]
MISS = b"onednn_verbose,v1,primitive,create:cache_miss,cpu,matmul,brg_matmul:avx512_core,undef,src:f32,,,16x128:128x384,2.5"
HIT = b"onednn_verbose,v1,primitive,create:cache_hit,cpu,reorder,jit:uni,undef,src:f32,,,128x384,0.001"
split = _native._testing.stdio_split

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the tap needs glibc")


def test_lines_are_taken_and_everything_else_passes_in_order():
    out, lines = split([b"hello\n", MISS + b"\n", b"world ", HIT + b"\nend\n"], PREFIXES)
    assert out == b"hello\nworld end\n"
    assert lines == [MISS, HIT]


def test_a_prefix_after_a_partial_line_of_the_users_is_found():
    out, lines = split([b"progress 50%" + MISS + b"\n"], PREFIXES)
    assert (out, lines) == (b"progress 50%", [MISS])


@pytest.mark.parametrize("cut", [6, 9, 20, len(MISS) - 3])
def test_a_line_cut_between_two_writes_is_taken_whole(cut):
    line = MISS + b"\n"
    out, lines = split([b"a\n" + line[:cut], line[cut:] + b"b\n"], PREFIXES)
    assert (out, lines) == (b"a\nb\n", [MISS])


def test_a_short_end_that_only_looks_like_a_prefix_is_not_held():
    # a progress line ending in "o" must reach the terminal now, not at the next write
    out, lines = split([b"hello"], PREFIXES[:1])
    assert (out, lines) == (b"hello", [])


def test_a_line_that_starts_like_onednn_but_never_ends_is_let_through():
    long = b"onednn_verbose," + b"x" * (70 << 10)
    out, lines = split([long[: 1 << 15], long[1 << 15:]], PREFIXES)
    assert (out, lines) == (long, [])
    out, lines = split([b"onednn_verbose,unfinished"], PREFIXES)  # at the end: given back
    assert (out, lines) == (b"onednn_verbose,unfinished", [])


@pytest.mark.parametrize("line, want", [
    (MISS.decode(), ("cache_miss", "matmul", 2.5)),
    (HIT.decode(), ("cache_hit", "reorder", 0.001)),
    ("onednn_verbose,v1,1733500000000.25,primitive,create:cache_miss,cpu,convolution,jit:avx2,fwd,,,mb1,0.75",
     ("cache_miss", "convolution", 0.75)),
    ("onednn_verbose,v1,info,oneDNN v3.13.0", ("", "", -1.0)),
    ("onednn_verbose,v1,primitive,create:cache_miss,cpu,matmul,impl,,,,nan-ish", ("cache_miss", "matmul", -1.0)),
])
def test_creation_lines_are_read_like_the_trace_reads_them(line, want):
    got = _native._testing.stdio_parse(line)
    assert (got[0], got[1]) == want[:2] and got[2] == pytest.approx(want[2])


CHILD = textwrap.dedent(r"""
    import ctypes, json, os, sys
    from warmprof import _native
    from warmprof.causes import JIT_COMPILE
    libc = ctypes.CDLL(None)
    _native.start(2)
    assert _native.stdio_tap_start(["onednn_verbose,"], JIT_COMPILE) == ""
    assert "already" in _native.stdio_tap_start(["onednn_verbose,"], JIT_COMPILE)
    libc.printf(b"c says hi\n")
    sys.stdout.write("python says hi\n"); sys.stdout.flush()
    libc.printf(MISS + b"\n"); libc.printf(HIT + b"\n")
    libc.printf(b"partial "); libc.fflush(None)
    stdout = ctypes.c_void_p.in_dll(libc, "stdout")
    same_fd = libc.fileno(stdout)
    pid = os.fork()
    if pid == 0:  # a fork child prints through its own copy of the tap
        libc.printf(b"child " + MISS + b"\n"); libc.printf(b"child done\n"); libc.fflush(None)
        os._exit(0 if _native.stdio_tap_stats()["misses"] == 2 else 3)
    _, status = os.waitpid(pid, 0)
    stats = _native.stdio_tap_stats()
    _native.stdio_tap_stop()
    libc.printf(b"after " + MISS + b"\n"); libc.fflush(None)
    d = _native.drain()
    names = list(d["names"])
    spans = [(int(d["kind"][i]), int(d["cause"][i]), int(d["ts_ns"][i])) for i in range(len(d["ts_ns"]))
             if names[int(d["name"][i])] == "onednn:matmul"]
    sys.stderr.write(json.dumps({"stats": stats, "fd": same_fd, "status": status, "spans": spans,
                                 "off": _native.stdio_tap_stats()["on"]}))
""").replace("MISS", repr(MISS)).replace("HIT", repr(HIT))


def test_a_process_with_the_tap_on(tmp_path):
    import json

    from warmprof.causes import JIT_COMPILE

    p = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    got = json.loads(p.stderr.decode().splitlines()[-1])
    # C's and Python's output reach fd 1 as printed (each C line as its newline comes), no oneDNN line
    # while the tap is on (the parent's and its fork child's), and C stdout is the real one again after stop
    out = p.stdout.decode()
    assert out.startswith("c says hi\npython says hi\npartial "), out
    assert "child done\n" in out and out.count("onednn_verbose") == 1 and out.endswith("after " + MISS.decode() + "\n"), out
    assert got["fd"] == 1 and got["status"] == 0 and got["off"] is False
    s = got["stats"]
    assert (s["on"], s["misses"], s["hits"], s["lines"], s["miss_ms"]) == (True, 1, 1, 2, 2.5), s
    # the creation: one span of jit_compile, as long as oneDNN said, ending when its line came
    (k0, c0, t0), (k1, c1, t1) = got["spans"]
    assert (k0, k1, c0, c1) == (0, 1, JIT_COMPILE, JIT_COMPILE)
    assert t1 - t0 == pytest.approx(2.5e6, abs=2e3)

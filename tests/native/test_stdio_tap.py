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


def test_a_prefix_after_a_partial_line_of_the_users_is_found_by_its_version_tag():
    out, lines = split([b"progress 50%" + MISS + b"\n"], PREFIXES)
    assert (out, lines) == (b"progress 50%", [MISS])
    # the user's own text that names the prefix mid-line is theirs (no version tag after it)
    out, lines = split([b"grep says onednn_verbose, is set\n", b"dnnl_verbose, too\n"], PREFIXES)
    assert (out, lines) == (b"grep says onednn_verbose, is set\n", [b"dnnl_verbose, too"])


@pytest.mark.parametrize("cut", [1, 3, 6, 15, 16, 20, len(MISS) - 3])
def test_a_line_cut_where_glibc_flushed_a_full_buffer_is_taken_whole(cut):
    line = MISS + b"\n"
    out, lines = split([b"a\n" + line[:cut], line[cut:] + b"b\n"], PREFIXES, [True, False])
    assert (out, lines) == (b"a\nb\n", [MISS])
    # the same cut mid-line of the user's (a full buffer of an unfinished line): the tag decides
    out, lines = split([b"user " + line[:cut], line[cut:] + b"b\n"], PREFIXES, [True, False])
    assert (out, lines) == (b"user b\n", [MISS])


def test_what_the_program_flushed_is_out_whole():
    # a write that is no full buffer (a newline, an fflush) ends where the program wanted: nothing held,
    # even an end that looks like a prefix's start (printed before a fork, it would come out twice)
    for tail in (b"hello", b"built with onednn", b"onednn_verbose", b"x onednn_verbose,v"):
        out, lines = split([tail, b""], PREFIXES)
        assert (out, lines) == (tail, []), tail


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
    # an unfinished line of 65533 bytes, then oneDNN's: glibc flushes the full 64 KiB buffer after "one"
    libc.printf(b"%s", b"u" * 65533); libc.printf(MISS + b"\n"); libc.printf(b"|\n")
    stdout = ctypes.c_void_p.in_dll(libc, "stdout")
    same_fd = libc.fileno(stdout)
    pid = os.fork()
    if pid == 0:  # a fork child prints through its own copy of the tap
        libc.printf(b"child " + MISS + b"\n"); libc.printf(b"child done\n"); libc.fflush(None)
        os._exit(0 if _native.stdio_tap_stats()["misses"] == 3 else 3)
    _, status = os.waitpid(pid, 0)
    stats = _native.stdio_tap_stats()
    stats["miss_ns"] = _native.stdio_tap_miss_ns()  # the same total, one atomic load
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
    assert out.startswith("c says hi\npython says hi\npartial " + "u" * 65533 + "|\n"), out[:200]
    assert "child done\n" in out and out.count("onednn_verbose") == 1 and out.endswith("after " + MISS.decode() + "\n"), out
    assert got["fd"] == 1 and got["status"] == 0 and got["off"] is False
    s = got["stats"]
    assert (s["on"], s["misses"], s["hits"], s["lines"], s["miss_ms"]) == (True, 2, 1, 3, 5.0), s
    assert s["miss_ns"] == 5_000_000, s
    # the creation: one span of jit_compile, as long as oneDNN said, ending when its line came
    spans = got["spans"]  # the two (made-up, 2.5 ms each) may overlap: paired in order
    assert {c for _, c, _ in spans} == {JIT_COMPILE}
    begins, ends = sorted(t for k, _, t in spans if k == 0), sorted(t for k, _, t in spans if k == 1)
    assert len(begins) == len(ends) == 2
    for t0, t1 in zip(begins, ends):
        assert t1 - t0 == pytest.approx(2.5e6, abs=2e3)

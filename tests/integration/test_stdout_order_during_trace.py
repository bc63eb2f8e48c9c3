"""Issue 40: what other threads print while warmprof taps fd 1 (oneDNN's lines, instruments/fd_capture.py)
reaches the real stdout whole, once, and in each thread's order, also across the tap's end: fd 1 used to
be given back while up to the pipe's 1 MiB written before it was still to be forwarded, so later lines
came out ahead of earlier ones and a line flushed in two writes was torn. Each run is a process of its
own with stdout to a file; every line printed is checked."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

PRINTERS = """
    import os, sys, threading
    stop = threading.Event()

    def talk(name, out):
        i = 0
        while not stop.is_set():
            print(f"{name} {i:08d} " + "x" * 40, file=out, flush=True)
            i += 1
        print(f"{name} last {i}", file=out, flush=True)

    # a: print() on sys.stdout, its text and newline two writes when another thread's flush cuts in (a
    # line torn where fd 1 changed hands shows); b: a stream of its own on fd 1, a write per line
    own = open(1, "w", buffering=1, closefd=False)
    threads = [threading.Thread(target=talk, args=("a", sys.stdout)), threading.Thread(target=talk, args=("b", own))]
    for t in threads:
        t.start()
"""
STOP = """
    stop.set()
    for t in threads:
        t.join()
"""
B_LINE = re.compile(r"b (?:\d{8} x{40}|last \d+)\n")
A_LINE = re.compile(r"a (\d{8}) x{40}|a last (\d+)")


def run(body: str, tmp_path) -> str:
    out = tmp_path / "stdout.txt"
    code = textwrap.dedent(PRINTERS) + textwrap.dedent(body) + textwrap.dedent(STOP)
    with open(out, "wb") as f:
        p = subprocess.run([sys.executable, "-c", code], stdout=f, stderr=subprocess.PIPE, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return out.read_text()


def check_in_order(name: str, lines: list[str]) -> int:
    """One thread's lines: all there, once each, whole, in the order it printed them, its last line last."""
    for k, line in enumerate(lines[:-1]):
        assert line == f"{name} {k:08d} " + "x" * 40, f"{name}'s line {k} is {line[:120]!r}"
    assert lines[-1] == f"{name} last {len(lines) - 1}", f"{name}'s last line is {lines[-1][:120]!r}"
    return len(lines) - 1


def check_every_line(text: str) -> None:
    """b's lines (a write each) come out whole wherever they fall; with them taken out, what is left is
    a's stream exactly: every line once, whole, in order."""
    b = [m.group(0)[:-1] for m in B_LINE.finditer(text)]
    a_text = B_LINE.sub("", text)
    assert a_text.endswith("\n"), a_text[-200:]
    printed = [check_in_order("a", a_text[:-1].split("\n")), check_in_order("b", b)]
    assert min(printed) > 1000  # both threads printed all through the traces


def test_lines_printed_by_other_threads_during_traces_come_out_whole_and_in_order(tmp_path):
    """warmprof.trace in the main thread (the oneDNN tap on for its passes and its instrumented steady
    passes: two hand-backs a trace), two threads printing numbered lines all the while."""
    text = run("""
        import torch, warmprof
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
        for _ in range(8):
            report = warmprof.trace(model, (4, 64), steady=3, progress=False)
            assert report.to_dict()["instruments"]["onednn"]["active"], report.to_dict()["instruments"]["onednn"]
    """, tmp_path)
    check_every_line(text)


def test_many_hand_backs_of_the_tap_keep_each_threads_order(tmp_path):
    """The tap alone, started and stopped 100 times under the printing threads (before the fix, most
    runs lost the order at several hand-backs)."""
    text = run("""
        import time
        from warmprof.instruments.fd_capture import StdoutTap
        for _ in range(100):
            tap = StdoutTap((b"onednn_verbose,",), lambda *a: None)
            assert tap.start() == ""
            time.sleep(0.01)
            tap.stop()
            assert not tap.notes, tap.notes
            time.sleep(0.005)
    """, tmp_path)
    check_every_line(text)

"""Loading a report never hangs and never prints a traceback: a FIFO, a device or a directory is
refused at once, and a JSON integer too long for Python's int is one clear line."""

from __future__ import annotations

import json
import os
import stat
import threading

import pytest

import warmprof
from factories import trace_report
from warmprof.cli import main
from warmprof.errors import ReportError
from warmprof.report.base import parse_json


def promptly(fn, unblock=None):
    """Run fn in a thread: a regression that blocks fails here instead of hanging the suite."""
    result: list = []

    def run():
        try:
            result.append(fn())
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            result.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(20)
    if t.is_alive():
        if unblock:
            unblock()
        pytest.fail("loading blocked")
    return result[0]


def open_writer(fifo):
    """Let a reader stuck in open() on the FIFO go: it reads an empty file and fails normally."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "r.json"
    os.mkfifo(path)
    return path


def test_a_fifo_report_is_refused_at_once(fifo):
    err = promptly(lambda: warmprof.load(fifo), unblock=lambda: open_writer(fifo))
    assert isinstance(err, ReportError) and str(err) == f"{fifo}: not a regular file (a FIFO)"


@pytest.mark.parametrize("argv", [["show", "{}"], ["compare", "{}", "{}"]])
def test_show_and_compare_of_a_fifo_are_one_line(fifo, capsys, argv):
    code = promptly(lambda: main([a.format(fifo) for a in argv]), unblock=lambda: open_writer(fifo))
    err = capsys.readouterr().err
    assert code == ReportError.exit_code and err == f"warmprof: error: {fifo}: not a regular file (a FIFO)\n"


def test_a_directory_or_a_device_is_not_a_report(tmp_path):
    with pytest.raises(ReportError, match="not a regular file .a directory"):
        warmprof.load(tmp_path)
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root (CAP_MKNOD)")
    with pytest.raises(ReportError, match="not a regular file .a character device"):
        warmprof.load(node)


def with_huge_integer(tmp_path, digits: int):
    data = json.loads(trace_report({"jit_compile": 3.0}).to_json())
    data["steady_passes"] = "HUGE"
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(data).replace('"HUGE"', "7" * digits))
    return path


def test_a_5000_digit_integer_is_a_report_error(tmp_path):
    path = with_huge_integer(tmp_path, 5000)
    with pytest.raises(ReportError, match="not a warmprof report .an integer of 5000 digits in the JSON"):
        warmprof.load(path)


@pytest.mark.parametrize("argv", [["show", "{}"], ["compare", "{}", "{}"], ["show", "{}", "--format", "png", "-o", "{}.png"]])
def test_show_and_compare_of_a_huge_integer_are_one_line(tmp_path, capsys, argv):
    path = with_huge_integer(tmp_path, 5000)
    assert main([a.format(path) for a in argv]) == ReportError.exit_code
    err = capsys.readouterr().err
    assert err.startswith("warmprof: error: ") and err.count("\n") == 1 and "5000 digits" in err


def test_integers_up_to_20_digits_parse_and_longer_are_refused():
    assert parse_json('{"schema_version": 1, "kind": "x", "n": -18446744073709551615}', "o")["n"] == -(2 ** 64 - 1)
    with pytest.raises(ReportError, match="an integer of 21 digits"):
        parse_json('{"schema_version": 1, "kind": "x", "n": 100000000000000000000}', "o")

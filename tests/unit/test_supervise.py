"""Waits that end: a command's --timeout (deadline), a child's stderr read without waiting for a
helper that holds it (wait_output), and what the model left running stopped at the end
(stop_descendants). Each waits for the state it checks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from warmprof.system import supervise
from warmprof.system.supervise import Deadline, deadline, wait_output

WAIT_S = 120  # a hang fails the test instead of blocking the suite


def _gone(pid: int) -> bool:
    return supervise._state(pid) in (None, "Z")


def _until(cond, what):
    end = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_deadline_raises_once_in_the_main_thread_and_puts_the_handler_back():
    before = signal.getsignal(supervise.DEADLINE_SIGNAL)
    with pytest.raises(Deadline, match="the job ran past --timeout 0.05 s"):
        with deadline(0.05, "the job"):
            _until(lambda: False, "the deadline")  # never true: only the Deadline ends it
    assert signal.getsignal(supervise.DEADLINE_SIGNAL) is before
    assert not [t for t in __import__("threading").enumerate() if t.name == "warmprof-deadline"]
    assert not isinstance(Deadline("x"), Exception)  # a model's `except Exception` cannot swallow it


def test_a_model_that_takes_sigalrm_for_itself_neither_loses_it_nor_stops_the_deadline():
    """--timeout --in-process on a model with its own SIGALRM handler: the trace ran on to its end (the
    handler replaced warmprof's); and warmprof's alarm would have taken the model's."""
    rang = []
    before = signal.signal(signal.SIGALRM, lambda *a: rang.append(True))
    try:
        with pytest.raises(Deadline):
            with deadline(0.3):
                signal.setitimer(signal.ITIMER_REAL, 0.01)  # the model's own alarm
                _until(lambda: False, "the deadline")
        assert rang  # the model's alarm reached the model's handler
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def test_no_deadline_without_a_timeout():
    before = signal.getsignal(supervise.DEADLINE_SIGNAL)
    with deadline(None):
        assert signal.getsignal(supervise.DEADLINE_SIGNAL) is before


def test_a_helper_holding_the_childs_stderr_does_not_hold_the_wait():
    """communicate() waited for the pipe's end, which a helper that inherited it held for its life."""
    proc = subprocess.Popen(["sh", "-c", "sleep 300 & echo $! >&2; echo said >&2"], stderr=subprocess.PIPE,
                            text=True)
    started = time.monotonic()
    rc, err = wait_output(proc)
    helper = int(err.split()[0])
    try:
        assert rc == 0 and err.split()[1] == "said"
        assert not _gone(helper)  # the helper still holds the pipe...
        assert time.monotonic() - started < 300  # ...and the wait did not last its life
    finally:
        os.kill(helper, signal.SIGKILL)
        _until(lambda: _gone(helper), "the helper to end")


def test_wait_output_has_a_timeout():
    proc = subprocess.Popen(["sleep", "300"], stderr=subprocess.PIPE, text=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            wait_output(proc, 0.05)
    finally:
        proc.kill()
        proc.wait()


def test_stop_descendants_stops_helpers_attached_or_detached_in_a_process_of_our_own(tmp_path):
    """In one of warmprof's own processes (a subreaper): a helper that ignores SIGTERM gets SIGKILL, one
    that detached itself (setsid, a double fork) is found too; each is named."""
    pids = tmp_path / "pids"
    code = f"""
import subprocess, sys, time
from warmprof.system import supervise
supervise.adopt_orphans()
subprocess.Popen(["sh", "-c", "trap '' TERM; echo $$ >> {pids}; exec sleep 300"])
subprocess.run(["setsid", "sh", "-c", 'sh -c "echo \\\\$\\\\$ >> {pids}; exec sleep 300" &'], check=True)
while len(open("{pids}").read().split()) < 2:
    time.sleep(0.02)
print("\\n".join(supervise.stop_descendants(grace_s=0.2)))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    found = [int(p) for p in pids.read_text().split()]
    try:
        for pid in found:
            _until(lambda: _gone(pid), f"pid {pid} to end")
            assert f"(pid {pid})" in done.stdout, done.stdout
    finally:
        for pid in found:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)



def test_stop_ends_a_child_whose_popen_lock_an_interrupted_wait_left_taken():
    """Popen.wait takes a lock of its own before its try; a Ctrl-C that lands between the two leaves it
    taken, and a proc.wait() without a timeout then blocks for ever. stop() (the path a Ctrl-C takes)
    and reap() call waitpid themselves: the child ends, stop() returns, its status is read."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        assert proc._waitpid_lock.acquire(False)  # as the interrupted wait leaves it
        assert not supervise.reap(proc, 0.05)  # still running: False after the timeout, not a hang
        stopping = threading.Thread(target=supervise.stop, args=(proc,), daemon=True)
        stopping.start()
        stopping.join(WAIT_S)  # the old stop(): proc.wait() on the taken lock, for ever
        assert not stopping.is_alive(), "stop() did not return"
        assert proc.returncode == -signal.SIGTERM
        assert supervise.reap(proc, 0)  # ended: at once
    finally:
        proc.kill()


def test_stop_kills_a_child_that_ignores_sigterm_and_never_waits_without_end(monkeypatch):
    monkeypatch.setattr(supervise, "GRACE_S", 0.2)
    ready_r, ready_w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", "import os, signal, sys, time; signal.signal(signal.SIGTERM, "
                             "signal.SIG_IGN); os.write(int(sys.argv[1]), b'.'); time.sleep(300)", str(ready_w)],
                            pass_fds=(ready_w,))
    os.close(ready_w)
    try:
        assert os.read(ready_r, 1) == b"."  # SIGTERM ignored from now on
        supervise.stop(proc)
        assert proc.returncode == -signal.SIGKILL
    finally:
        os.close(ready_r)
        proc.kill()


def test_reap_reads_the_exit_code_of_a_child_that_ended():
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"])
    assert supervise.reap(proc, WAIT_S)
    assert proc.returncode == 7 and proc.wait() == 7  # Popen agrees, and has nothing left to wait for

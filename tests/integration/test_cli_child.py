"""`warmprof trace`'s fresh child process: signals stop it and remove its folder, a child that dies
or exits without its report is a one-line error, the caches it sees are fresh and gone afterwards,
the JSON survives a broken stdout, and a missing temp folder or torch is one line, not a traceback.

Each test runs the real CLI (`python -m warmprof trace`) on a tiny model file written to tmp_path,
with TMPDIR pointed at tmp_path/"tmp" so the parent's temp folder can be found (and checked gone).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from warmprof.cli import main
from warmprof.traces import child
from .procs import communicate_or_explain, gone, kill_quietly, wait_for

TIMEOUT = 120  # generous: a hang fails the test instead of blocking the suite

MODEL = """
import json, os, pathlib, signal, tempfile, time
import torch

class M(torch.nn.Module):
    def __init__(self, action):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.action = action

    def forward(self, x):
        if self.action == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.action == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.action == "exit0":
            os._exit(0)
        if self.action == "escape":  # not an Exception: the child ends with a traceback, status 1
            class Escape(BaseException):
                pass
            raise Escape("out of forward")
        if self.action == "spawn":  # a subprocess of the model's own, which must be stopped with it
            import subprocess
            sub = subprocess.Popen(["sleep", "300"])
            pathlib.Path(os.environ["WPH_SUBFILE"]).write_text(str(sub.pid))
            self.action = "block"
        if self.action == "helper":  # a helper that inherits stdout and stderr and outlives the pass
            import subprocess
            sub = subprocess.Popen(["sleep", "300"])
            pathlib.Path(os.environ["WPH_SUBFILE"]).write_text(str(sub.pid))
            self.action = ""
        if self.action == "daemon":  # a helper that detaches itself (setsid, a double fork): an orphan
            import subprocess
            subprocess.run(["setsid", "sh", "-c", r'sh -c "echo \\$\\$ > $WPH_SUBFILE; exec sleep 300" &'], check=True)
            self.action = ""
        if self.action in ("stringio", "none", "close1"):  # the model takes stdout away while it runs
            import io, sys
            if self.action == "close1":
                os.close(1)
            else:
                sys.stdout = io.StringIO() if self.action == "stringio" else None
            self.action = ""
        if self.action == "input":  # reads the terminal once, as pdb or input() would
            self.action = ""
            print("typed:", input("ready> "), flush=True)
        if self.action == "block":  # says it is in forward, then waits to be stopped
            pathlib.Path(os.environ["WPH_PIDFILE"]).write_text(str(os.getpid()))
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                time.sleep(0.05)
        if self.action == "swallow":  # Ctrl-C lands in code that loses it and raises an error of its own
            pathlib.Path(os.environ["WPH_PIDFILE"]).write_text(str(os.getpid()))
            try:
                deadline = time.monotonic() + 300
                while time.monotonic() < deadline:
                    time.sleep(0.05)
            except BaseException:
                pass
            raise TypeError("expected a message argument")  # what CPython said inside inductor's compile
        if self.action == "atexit":  # a teardown that never returns (a log shipper's flush, say)
            import atexit, threading
            atexit.register(threading.Event().wait)
            pathlib.Path(os.environ["WPH_PIDFILE"]).write_text(str(os.getpid()))
        if self.action == "setcache":  # as inductor does on its first compile
            os.environ["TRITON_CACHE_DIR"] = os.environ["WPH_SETCACHE"]
        if self.action == "env" and not os.path.exists(os.environ["WPH_ENVFILE"]):
            from torch._inductor.runtime.cache_dir_utils import cache_dir
            seen = {var: os.environ.get(var) for var in %(caches)r}
            seen["tempfile.gettempdir()"] = tempfile.gettempdir()
            seen["inductor cache_dir()"] = cache_dir()
            with open(os.environ["WPH_ENVFILE"], "w") as f:
                json.dump(seen, f)
        return self.lin(x)

def make():
    return M(os.environ.get("WPH_ACTION", ""))
""" % {"caches": list(child.CACHES)}


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "wph_model.py"
    path.write_text(MODEL)
    (tmp_path / "tmp").mkdir()
    return path


def _env(tmp_path, **extra):
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), **extra)
    for var in ("TEMP", "TMP"):  # TMPDIR alone decides where the parent's folder goes
        env.pop(var, None)
    return env


def _argv(model, *extra):
    return [sys.executable, "-m", "warmprof", "trace", f"{model}:make", "--shape", "2,4", "--steady", "2",
            "--quiet", *extra]


def _run(model, tmp_path, action, *extra):
    return subprocess.run(_argv(model, *extra), env=_env(tmp_path, WPH_ACTION=action), capture_output=True,
                          text=True, timeout=TIMEOUT)


def _wait_for(cond, what):
    wait_for(cond, what, TIMEOUT)


@pytest.mark.parametrize("sig, to_group, code, message", [
    (signal.SIGTERM, False, 143, "warmprof: terminated"),
    (signal.SIGTERM, True, 143, "warmprof: terminated"),
    (signal.SIGHUP, False, 129, "warmprof: terminated"),  # the terminal closed
    (signal.SIGINT, True, 130, "warmprof: interrupted"),  # Ctrl-C in a terminal
])
@pytest.mark.parametrize("extra", [(), ("--repeat", "2")], ids=["one", "repeat"])
def test_a_signal_stops_the_child_and_removes_the_folder(model, tmp_path, sig, to_group, code, message, extra):
    pidfile, subfile = tmp_path / "child.pid", tmp_path / "sub.pid"
    env = _env(tmp_path, WPH_ACTION="spawn", WPH_PIDFILE=str(pidfile), WPH_SUBFILE=str(subfile),
               PYTHONFAULTHANDLER="1")  # a hang says where each process stood (communicate_or_explain)
    # Ctrl-C as a terminal's foreground job gets it: a suite started in the background by a
    # non-interactive shell inherits SIGINT ignored, and so would every process it starts.
    with subprocess.Popen(_argv(model, *extra), env=env, stderr=subprocess.PIPE, text=True,
                          start_new_session=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) as parent:
        try:
            _wait_for(lambda: pidfile.exists() and pidfile.read_text(), "the child's forward")
            child_pid, sub_pid = int(pidfile.read_text()), int(subfile.read_text())
            folders = list((tmp_path / "tmp").iterdir())
            # --repeat: its own folder for the runs' reports, and the running trace's
            assert len(folders) == 1 + bool(extra) and all(f.name.startswith("warmprof-") for f in folders)
            os.killpg(parent.pid, sig) if to_group else os.kill(parent.pid, sig)
            _, err = communicate_or_explain(parent, TIMEOUT)
        finally:  # whatever is left (the child and its group, if they outlived the parent)
            kill_quietly(parent.pid, group=True)
            if pidfile.exists() and pidfile.read_text():
                kill_quietly(int(pidfile.read_text()), group=True)
    assert parent.returncode == code, err
    assert err.strip().splitlines()[-1] == message
    _wait_for(lambda: gone(child_pid), "the child to end")
    _wait_for(lambda: gone(sub_pid), "the model's own subprocess to end")
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize("extra", [(), ("--traceback",)], ids=["plain", "traceback"])
def test_a_ctrl_c_the_model_turned_into_its_own_error_is_still_an_interrupt(model, tmp_path, extra):
    """The hogged suite: Ctrl-C during `watch --demo`'s compile came out of inductor as `InductorError:
    TypeError: expected a message argument`, the KeyboardInterrupt lost from its chain, and the command
    ended with a traceback and status 1. The SIGINT's own mark says it was an interrupt: one line, 130."""
    pidfile = tmp_path / "in.pid"
    env = _env(tmp_path, WPH_ACTION="swallow", WPH_PIDFILE=str(pidfile), PYTHONFAULTHANDLER="1")
    with subprocess.Popen(_argv(model, "--in-process", "--no-control", *extra), env=env, stderr=subprocess.PIPE, text=True,
                          start_new_session=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) as p:
        try:
            _wait_for(lambda: pidfile.exists() and pidfile.read_text(), "the model's forward")
            assert int(pidfile.read_text()) == p.pid  # the command line's own process runs the model
            os.kill(p.pid, signal.SIGINT)
            _, err = communicate_or_explain(p, TIMEOUT)
        finally:
            kill_quietly(p.pid, group=True)
    assert p.returncode == 130, err
    assert ("Traceback" in err) == bool(extra), err  # the error's own traceback only when asked for
    last = err.strip().splitlines()[-1]
    assert last.startswith("warmprof: interrupted") and "TypeError: expected a message argument" in last, err


def test_a_parent_killed_outright_takes_the_child_with_it(model, tmp_path):
    """SIGKILL cannot be handled: the child's parent-death signal ends it (the temp folder stays:
    nothing is left running to remove it)."""
    pidfile = tmp_path / "child.pid"
    env = _env(tmp_path, WPH_ACTION="block", WPH_PIDFILE=str(pidfile))
    with subprocess.Popen(_argv(model), env=env, stderr=subprocess.DEVNULL, start_new_session=True) as parent:
        try:
            _wait_for(lambda: pidfile.exists() and pidfile.read_text(), "the child's forward")
            child_pid = int(pidfile.read_text())
            os.kill(parent.pid, signal.SIGKILL)
            parent.wait(TIMEOUT)
            _wait_for(lambda: gone(child_pid), "the child to end after its parent")
        finally:
            kill_quietly(parent.pid, group=True)
            if pidfile.exists() and pidfile.read_text():
                kill_quietly(int(pidfile.read_text()), group=True)


def test_the_previous_sigterm_handler_comes_back(monkeypatch):
    during = []
    monkeypatch.setattr(child, "_spawn_and_wait",
                        lambda argv, tmp, cache, fds: during.append(signal.getsignal(signal.SIGTERM)) or (0, child.DONE))

    def mine(signum, frame):
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        assert child.run_child(["trace"], "fresh", quiet=True) == 0
        assert during[0] is not mine and signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.parametrize("action, message", [
    ("segv", "the traced process died of SIGSEGV while running the model's first pass"),
    ("sigkill", "the traced process died of SIGKILL while running the model's first pass"),
    ("exit0", "the traced process exited (status 0) without writing its report, while running the model's "
              "first pass"),
    ("escape", "the traced process exited (status 1) without writing its report, while running the model's "
               "first pass"),
])
def test_a_child_without_its_report_is_an_error(model, tmp_path, action, message):
    out = tmp_path / "r.json"
    p = _run(model, tmp_path, action, "--json", str(out))
    assert p.returncode == 4, p.stderr
    assert p.stderr.strip().splitlines()[-1] == f"warmprof: error: {message}"
    assert not out.exists() and list((tmp_path / "tmp").iterdir()) == []


def test_a_child_error_is_said_once_with_its_own_code(tmp_path):
    (tmp_path / "tmp").mkdir()
    p = subprocess.run([sys.executable, "-m", "warmprof", "trace", "--demo", "--shape", "1,0", "--quiet"],
                       env=_env(tmp_path), capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 2
    assert [line for line in p.stderr.splitlines() if line.startswith("warmprof: error:")] == [
        p.stderr.strip().splitlines()[-1]]
    assert "dimension 0" in p.stderr


def test_fresh_caches_all_sit_in_the_parents_folder_and_go_with_it(model, tmp_path):
    seen_file = tmp_path / "seen.json"
    env = _env(tmp_path, WPH_ACTION="env", WPH_ENVFILE=str(seen_file),
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "users-inductor"), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    out = tmp_path / "r.json"
    p = subprocess.run(_argv(model, "--json", str(out)), env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    seen = json.loads(seen_file.read_text())
    assert set(seen) == set(child.CACHES) | {"tempfile.gettempdir()", "inductor cache_dir()"}
    fresh = tmp_path / "tmp"
    for what, where in seen.items():  # inside the parent's one warmprof-* folder, not beside it
        assert where and Path(where).is_relative_to(fresh), (what, where)
        assert len(Path(where).relative_to(fresh).parts) >= 2, (what, where)
    assert len({Path(w).relative_to(fresh).parts[0] for w in seen.values()}) == 1
    assert list(fresh.iterdir()) == []  # removed after a normal run
    protocol = json.loads(out.read_text())["protocol"]
    assert protocol["cache"] == "fresh" and set(protocol["caches"]) == set(child.CACHES)


def test_fresh_env_keeps_download_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("TORCH_HOME", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    env = child.fresh_env(str(tmp_path))
    assert env["XDG_CACHE_HOME"] == str(tmp_path / "xdg_cache_home")
    assert env["TORCH_HOME"] == str(tmp_path / "xdg" / "torch") and env["HF_HOME"] == str(tmp_path / "hf")


def test_fresh_env_switches_inductors_remote_caches_off(tmp_path, monkeypatch):
    """A shared remote cache (redis, a plugin) would make a 'cold' run warm."""
    monkeypatch.setenv("TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "1")
    env = child.fresh_env(str(tmp_path))
    assert child.REMOTE_OFF and all(env[var] == "0" for var in child.REMOTE_OFF)


def test_cache_keep_lists_the_users_caches(model, tmp_path):
    out = tmp_path / "r.json"
    argv = [a for a in _argv(model, "--cache", "keep", "--json", str(out)) if a != "--quiet"]  # the list is not quiet
    p = subprocess.run(argv, env=_env(tmp_path, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "mine")),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert "--cache keep: the traced process uses your caches" in p.stderr
    listed = dict(line.split("  - ")[0].split(None, 1) for line in p.stderr.splitlines() if line.startswith("  "))
    assert set(listed) == set(child.CACHES)
    assert listed["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")  # the user's own
    assert listed["TMPDIR"] == str(tmp_path / "tmp") and listed["TEMP"] == f"{tmp_path / 'tmp'} (default)"
    caches = json.loads(out.read_text())["protocol"]["caches"]
    assert caches["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine") and caches["TMPDIR"] == str(tmp_path / "tmp")
    assert list((tmp_path / "tmp").iterdir()) == []  # the status folder went too


def test_cache_keep_records_the_caches_as_they_were_after_the_passes(model, tmp_path):
    """A cache variable set during the first pass (inductor sets TRITON_CACHE_DIR) is in the report."""
    out = tmp_path / "r.json"
    mine = str(tmp_path / "triton_set_by_the_model")
    p = subprocess.run(_argv(model, "--cache", "keep", "--json", str(out)),
                       env=_env(tmp_path, WPH_ACTION="setcache", WPH_SETCACHE=mine),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["protocol"]["caches"]["TRITON_CACHE_DIR"] == mine


@pytest.mark.parametrize("stdout", ["broken pipe", "closed"])
def test_json_is_saved_even_when_stdout_breaks(tmp_path, stdout):
    (tmp_path / "tmp").mkdir()
    out = tmp_path / "demo.json"
    argv = [sys.executable, "-m", "warmprof", "trace", "--demo", "--shape", "1,16", "--steady", "2", "--quiet",
            "--json", str(out)]
    if stdout == "closed":
        p = subprocess.run(argv, env=_env(tmp_path), stderr=subprocess.PIPE, text=True, timeout=TIMEOUT,
                           preexec_fn=lambda: os.close(1))
        assert p.returncode == 0, p.stderr
    else:
        r, w = os.pipe()
        os.close(r)  # every write to w fails: EPIPE
        try:
            p = subprocess.run(argv, env=_env(tmp_path), stdout=w, stderr=subprocess.PIPE, text=True,
                               timeout=TIMEOUT)
        finally:
            os.close(w)
        assert p.returncode == 128 + signal.SIGPIPE, p.stderr
    assert json.loads(out.read_text())["kind"] == "trace"
    assert "Traceback" not in p.stderr and "report saved to" in p.stderr


def test_no_usable_temp_folder_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", "/nonexistent/x")
    assert main(["trace", "--demo", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[-1]] and err[-1].startswith("warmprof: error: no usable temporary folder for the trace's fresh process ")


def test_no_torch_is_one_line_before_any_child(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    monkeypatch.setattr(child.subprocess, "Popen", None)  # no child may start
    for argv in (["trace", "--demo"], ["trace", "--demo", "--in-process"]):
        assert main(argv) == 2
        assert capsys.readouterr().err.strip() == "warmprof: error: warmprof trace needs torch: pip install torch"


def test_a_torch_that_cannot_import_is_one_line_from_the_child(tmp_path):
    (tmp_path / "fake" / "torch").mkdir(parents=True)
    (tmp_path / "fake" / "torch" / "__init__.py").write_text('raise ImportError("No module named torch")\n')
    (tmp_path / "tmp").mkdir()
    p = subprocess.run([sys.executable, "-m", "warmprof", "trace", "--demo", "--quiet"],
                       env=_env(tmp_path, PYTHONPATH=str(tmp_path / "fake")), capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "warmprof: error: warmprof trace needs torch, and importing it failed (No module named torch): "
        "pip install torch"]
    assert list((tmp_path / "tmp").iterdir()) == []


def test_probe_json_is_saved_before_a_broken_stdout(tmp_path):
    out = tmp_path / "probe.json"
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "warmprof", "probe", "--ops", "elementwise", "--shapes-per-op", "2",
                            "--steady-calls", "5", "-K", "2", "-B", "1", "--quiet", "--json", str(out)],
                           stdout=w, stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)
    finally:
        os.close(w)
    assert p.returncode == 128 + signal.SIGPIPE and "Traceback" not in p.stderr, p.stderr
    assert json.loads(out.read_text())["kind"] == "probe"


def test_a_stderr_that_breaks_loses_neither_the_trace_nor_the_json(model, tmp_path):
    """`2>&1 | head -1`: progress lines hit a closed pipe; the trace goes on and the JSON is written."""
    out = tmp_path / "r.json"
    argv = [a for a in _argv(model, "--json", str(out)) if a != "--quiet"]
    cmd = " ".join(f"'{a}'" for a in argv) + " 2>&1 | head -1"
    p = subprocess.run(["sh", "-c", cmd], env=_env(tmp_path), capture_output=True, text=True, timeout=TIMEOUT)
    assert p.stdout.startswith("warmprof: ")  # the first progress line, and nothing after it
    _wait_for(out.exists, "the JSON report")  # the trace ran on after head left
    assert json.loads(out.read_text())["kind"] == "trace"


def test_a_json_that_cannot_be_written_still_prints_the_text(model, tmp_path):
    out = tmp_path / "r.json"
    out.write_text("old")
    cmd = " ".join(f"'{a}'" for a in _argv(model, "--json", str(out)))
    p = subprocess.run(["sh", "-c", f"ulimit -f 8; {cmd}"], env=_env(tmp_path), capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert p.returncode == 5 and "cannot write" in p.stderr.strip().splitlines()[-1]
    assert "warmprof trace:" in p.stdout and "first pass" in p.stdout  # the text report is not lost
    assert out.read_text() == "old"  # and the old file is whole


def test_a_descriptor_path_reaches_the_child(model, tmp_path):
    """--json /dev/fd/3: the child starts with 0, 1 and 2 only, so the parent passes fd 3 on."""
    out = tmp_path / "r.json"
    cmd = " ".join(f"'{a}'" for a in _argv(model, "--json", "/dev/fd/3")) + f" 3>'{out}'"
    p = subprocess.run(["sh", "-c", cmd], env=_env(tmp_path), capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["kind"] == "trace"


def test_a_descriptor_that_is_not_open_is_refused_before_the_trace(model, tmp_path):
    p = _run(model, tmp_path, "", "--json", "/dev/fd/9")
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1] == "warmprof: error: --json /dev/fd/9: file descriptor 9 is not open in this process"


def test_a_child_in_a_terminal_can_read_it(model, tmp_path):
    """The child stays in the terminal's foreground group: a model that reads the terminal (input(),
    pdb) gets its line instead of being stopped by SIGTTIN (in a group of its own, it hung)."""
    import pty
    import select

    pid, master = pty.fork()
    if pid == 0:  # the child: a session with the pty as its terminal, like a user's shell
        try:
            os.execve(sys.executable, _argv(model), _env(tmp_path, WPH_ACTION="input"))
        finally:
            os._exit(127)
    seen, answered = b"", False
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the other side closed, the run is over
                    break
                if not chunk:
                    break
                seen += chunk
            if b"ready> " in seen and not answered:
                os.write(master, b"hello\n")
                answered = True
        if time.monotonic() >= deadline:  # it hung: end it so the test fails instead of blocking
            kill_quietly(pid, group=True)
        _, status = os.waitpid(pid, 0)
    finally:
        kill_quietly(pid)
        os.close(master)
    assert b"typed: hello" in seen, seen[-2000:]
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, seen[-2000:]


def test_a_model_atexit_that_never_returns_does_not_hold_the_finished_trace(model, tmp_path):
    """warmprof's own processes (the trace's child, its control) end with os._exit once the report
    is out: the model's atexit handlers are not part of its first pass, and one that never returns
    would otherwise keep `warmprof trace` waiting forever."""
    pidfile, out = tmp_path / "child.pid", tmp_path / "r.json"
    done = subprocess.run(_argv(model, "--json", str(out)), env=_env(tmp_path, WPH_ACTION="atexit",
                          WPH_PIDFILE=str(pidfile)), capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["kind"] == "trace" and "report saved to" in done.stderr
    assert pidfile.exists()  # the handler was registered in the traced process...
    assert gone(int(pidfile.read_text()))  # ...and that process has ended
    assert list((tmp_path / "tmp").iterdir()) == []


def _running(pid):
    return not gone(pid)


@pytest.mark.parametrize("action", ["helper", "daemon"])
def test_what_the_model_left_running_is_stopped_and_does_not_hold_a_pipe(model, tmp_path, action):
    """A helper the model started (a tokenizer server, a log shipper) that holds the trace's stdout
    and stderr kept `warmprof trace ... | cat` reading for the helper's whole life (300 s here);
    one that detached itself (setsid, double fork) outlived the trace for good. Both are stopped
    when the trace's process ends, and said so; the pipes close with them."""
    subfile = tmp_path / "sub.pid"
    try:
        done = subprocess.run(_argv(model), env=_env(tmp_path, WPH_ACTION=action, WPH_SUBFILE=str(subfile)),
                              capture_output=True, text=True, timeout=TIMEOUT)  # reads both pipes to their end
        assert done.returncode == 0, done.stderr
        assert "warmprof trace" in done.stdout
        _wait_for(subfile.exists, "the helper's pid")
        pid = int(subfile.read_text())
        assert "the model left running: sleep" in done.stderr and f"pid {pid}" in done.stderr, done.stderr
        assert "cat (pid" not in done.stderr  # the stdout tap's own forwarder is warmprof's, not the model's
        _wait_for(lambda: gone(pid), "the helper to end")
    finally:
        if subfile.exists():
            kill_quietly(int(subfile.read_text()))


@pytest.mark.parametrize("action", ["stringio", "none", "close1"])
def test_the_report_reaches_the_users_stdout_whatever_the_model_did_to_it(model, tmp_path, action):
    """A model that replaced sys.stdout (a StringIO, None) or closed fd 1 gave exit 0 and no report:
    the report goes to the stdout the command started with."""
    done = _run(model, tmp_path, action)
    assert done.returncode == 0, done.stderr
    assert "warmprof trace" in done.stdout and "excess" in done.stdout, (done.stdout, done.stderr)


def test_an_ascii_only_stdout_still_gets_the_report(model, tmp_path):
    """PYTHONIOENCODING=ascii: `trace` exited 1 printing nothing anywhere. The report's few non-ASCII
    characters are replaced, and stderr says so."""
    done = subprocess.run(_argv(model), env=_env(tmp_path, PYTHONIOENCODING="ascii"), capture_output=True,
                          timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert b"warmprof trace" in done.stdout and b"excess" in done.stdout
    done.stdout.decode("ascii")  # every byte ASCII
    assert b"stdout takes ascii only" in done.stderr


def test_timeout_stops_a_trace_that_hangs_says_where_and_writes_nothing(model, tmp_path):
    """--timeout S: the trace, the model's own subprocess and the folder all go, exit 124, one line
    naming the phase; no --json file. A busy machine can take the whole S to import torch and load the
    model (the line then names that phase): S doubles until the trace was in the model's forward."""
    pidfile, subfile, out = tmp_path / "child.pid", tmp_path / "sub.pid", tmp_path / "r.json"
    try:
        for timeout_s in (10, 20, 40, 80):
            done = subprocess.run(_argv(model, "--timeout", str(timeout_s), "--json", str(out), "--no-control"),
                                  env=_env(tmp_path, WPH_ACTION="spawn", WPH_PIDFILE=str(pidfile), WPH_SUBFILE=str(subfile)),
                                  capture_output=True, text=True, timeout=TIMEOUT + timeout_s)
            assert done.returncode == 124, done.stderr
            last = done.stderr.strip().splitlines()[-1]
            assert last.startswith(f"warmprof: error: warmprof trace ran past --timeout {timeout_s} s and was stopped "
                                   "while "), last
            assert "no report was written" in last, last
            assert not out.exists()
            assert list((tmp_path / "tmp").iterdir()) == []
            if pidfile.exists() and pidfile.read_text():  # it was in the model's forward
                break
        assert "while running the model's " in last, last
        _wait_for(lambda: gone(int(pidfile.read_text())) and gone(int(subfile.read_text())), "the family to end")
    finally:
        for f in (pidfile, subfile):
            if f.exists() and f.read_text():
                kill_quietly(int(f.read_text()))


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e9"])
def test_a_timeout_that_is_not_a_time_is_refused(value, capsys):
    assert main(["trace", "--demo", "--timeout", value]) == 2
    assert "--timeout" in capsys.readouterr().err


def test_a_child_that_said_done_but_does_not_exit_is_stopped_after_a_grace(tmp_path, monkeypatch):
    """Once the child said done (its report out), it gets EXIT_GRACE_S to exit; one that does not
    (the model's own code holding the exit) is stopped and the report stands (exit 0)."""
    status = tmp_path / "status"
    status.write_text(child.DONE)
    monkeypatch.setattr(child, "EXIT_GRACE_S", 0.2)
    proc = subprocess.Popen(["sleep", "300"])
    try:
        assert child._wait_for_exit(proc, str(status)) == 0
        assert proc.poll() is not None  # stopped, and waited for
    finally:
        kill_quietly(proc.pid)
        proc.wait()


@pytest.mark.parametrize("msg, said", [
    ("first pass", "running the model's first pass"),
    ("steady passes with the instruments on (warmprof's own cost on this model)",
     "running the model's steady passes with the instruments on"),
    ("clean first pass (a second fresh process, no instruments)",
     "running the model's clean first pass (in the control process)"),
    ("calibrating (timer, page-fault cost, thread start, hook cost)", "calibrating"),
])
def test_each_progress_line_reads_as_a_phase_after_while(msg, said):
    """'... stopped while clean first pass' and '... while steady passes with the instruments on'."""
    assert child.phase(msg) == said

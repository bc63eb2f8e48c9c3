"""Issue 40: the processes warmprof starts for itself, and how its command line ends.

- The caller's folder runs nothing in them: they start without the current folder on sys.path
  (system/launch.py), so a secrets.py or typing.py there is not imported; a MODULE:FACTORY target (and
  --inputs MODULE:FACTORY) in that folder is still found.
- A value or a target that starts with '-' reaches the child as a value (--name=value, the target after --).
- SIGQUIT, SIGUSR1 and SIGALRM stop a trace as SIGTERM does: the child ends, the temp folder goes, exit
  128 + the signal; the caller's own handlers come back (and one it set is left in place).
- Ctrl-C while the command line starts (its imports) ends it in one line with exit 130, no traceback.
- A default trace holds the model twice (the control's copy beside the traced one): where the second copy
  does not fit, it stops before building it, naming --no-control, with nothing left running or on disk.

Each runs the real command line from a folder of the test's own (tmp_path), TMPDIR pointed into it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from warmprof.system import launch
from .procs import gone, kill_quietly, pids_whose, wait_for

TIMEOUT = 300  # a hang fails the test instead of blocking the suite

# A module that writes a marker when imported, then puts the standard library's module of its name in its
# place (so whatever imported it goes on working, and only the marker tells).
SHADOW = """
import os, sys
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "MARK-" + __name__), "a") as f:
    f.write(f"{os.getpid()} {sys.argv[:3]}\\n")
import importlib.machinery, importlib.util
spec = importlib.machinery.PathFinder.find_spec(__name__, [os.path.dirname(os.__file__)])
mod = importlib.util.module_from_spec(spec)
sys.modules[__name__] = mod
spec.loader.exec_module(mod)
"""

MODEL = """
import os, pathlib, time
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        pidfile = os.environ.get("WP40_PIDFILE")
        if pidfile and not os.path.exists(pidfile):  # says it is in forward, then waits to be stopped
            pathlib.Path(pidfile).write_text(str(os.getpid()))
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                time.sleep(0.05)
        return self.lin(x)

def make():
    return Net()

def inputs():
    return torch.ones(2, 4)
"""


def _cli():
    """The command line as a user runs it: pip's `warmprof` script where there is one (it does not put
    the current folder on sys.path), else the same through -c."""
    script = os.path.join(os.path.dirname(sys.executable), "warmprof")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-c", "import sys; del sys.path[0]; from warmprof.cli import main; sys.exit(main())"]


@pytest.fixture
def folder(tmp_path):
    """The caller's folder: a model module, modules named like the standard library's, a temp folder."""
    (tmp_path / "wp40_model.py").write_text(MODEL)
    for name in ("secrets", "typing"):
        (tmp_path / f"{name}.py").write_text(SHADOW)
    (tmp_path / "tmp").mkdir()
    return tmp_path


def _env(folder, **extra):
    env = dict(os.environ, TMPDIR=str(folder / "tmp"), **extra)
    for var in ("TEMP", "TMP", "PYTHONSAFEPATH"):
        env.pop(var, None)
    return env


def _run(folder, *argv, env=None):
    return subprocess.run([*_cli(), *argv], cwd=folder, env=env or _env(folder), capture_output=True, text=True,
                          timeout=TIMEOUT)


def _marks(folder):
    return {p.name: p.read_text() for p in folder.glob("MARK-*")}


# ---- the caller's folder ------------------------------------------------------------------------


def test_the_shadow_modules_would_run_from_the_callers_folder(folder):
    """The fixture works: `python -m` run there imports them (what warmprof's processes used to be)."""
    p = subprocess.run([sys.executable, "-m", "warmprof", "--version"], cwd=folder, capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert "MARK-secrets" in _marks(folder)


@pytest.mark.parametrize("pythonpath", [None, ":/nonexistent", ".", "{folder}"],
                         ids=["none", "empty_entry", "dot", "the_folder"])
def test_warmprofs_own_process_imports_nothing_from_the_current_folder(folder, pythonpath):
    # `export PYTHONPATH=$PYTHONPATH:/x` with PYTHONPATH unset leaves an empty entry: the current folder,
    # put ahead of the standard library as -c's own '' is
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath.format(folder=folder)
    p = subprocess.run(launch.python_argv("warmprof", ["--version"]), cwd=folder, capture_output=True, text=True,
                       timeout=TIMEOUT, env=env)
    assert p.returncode == 0 and p.stdout.startswith("warmprof "), p.stderr
    assert _marks(folder) == {}


def test_trace_demo_runs_nothing_from_the_callers_folder(folder):
    """The trace's fresh process and its control (both used to import the folder's secrets.py and typing.py)."""
    p = _run(folder, "trace", "--demo", "--shape", "1,16", "--steady", "2", "--quiet")
    assert p.returncode == 0, p.stderr[-3000:]
    assert _marks(folder) == {}


def test_a_module_target_in_the_callers_folder_is_still_found(folder):
    """MODULE:FACTORY (and --inputs MODULE:FACTORY) next to the caller, in the traced process and the
    control; nothing else is looked up there."""
    out = folder / "r.json"
    p = _run(folder, "trace", "wp40_model:make", "--inputs", "wp40_model:inputs", "--steady", "2", "--quiet",
             "--json", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["model"] == "Net" and report["clean"], report.get("notes")  # the control found it too
    assert _marks(folder) == {}


def test_every_process_warmprof_starts_goes_through_launch(monkeypatch, tmp_path):
    """Each place that starts a Python process of warmprof's own builds its command line with
    launch.python_argv (the current folder off sys.path), none with `python -m`."""
    from warmprof.probes import aten
    from warmprof.traces import child, controls, repeat, warm_process

    started = []

    class Started(Exception):
        pass

    def popen(argv, *args, **kwargs):
        started.append(list(argv))
        raise Started

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    starts = {
        "repeat": lambda: repeat._run(["trace", "--demo"]),
        "warm process": lambda: warm_process.traced_after_warm_up(["--demo"], [], "1,4", "2,4", None, 60),
        "traced process": lambda: child.run_child(["trace", "--demo"], "fresh", quiet=True),
        "control": lambda: controls.ControlProcess(["trace", "--demo"]),
        "op probe": lambda: aten._Child(None),
    }
    for what, start in starts.items():
        with pytest.raises(Started):
            start()
        argv = started[-1]
        module = aten.CHILD if what == "op probe" else "warmprof"
        assert argv[:3] == [sys.executable, "-c", launch.boot_code(module)], (what, argv)
    assert len(started) == len(starts)


# ---- values that start with '-' ---------------------------------------------------------------------


def test_a_target_and_values_that_start_with_a_dash_reach_the_child(folder):
    (folder / "-m40.py").write_text(MODEL)
    import torch

    torch.save(torch.ones(2, 4), folder / "-in.pt")
    p = _run(folder, "trace", "--inputs=-in.pt", "--json=-r.json", "--steady=2", "--quiet", "--", "-m40.py:make")
    assert p.returncode == 0, p.stderr[-3000:]  # was: the child's usage text, exit 4
    assert "usage:" not in p.stderr
    report = json.loads((folder / "-r.json").read_text())
    assert report["model"] == "Net" and report["clean"]


def test_every_child_command_line_reads_back_as_given():
    """The traced process's, the control's, --explain's warm process's and a repeat run's command lines,
    parsed as the child parses them: the same target and values, each that starts with '-' included."""
    from warmprof.cli import build_parser
    from warmprof.commands import trace
    from warmprof.traces.repeat import cli_argv

    parser = build_parser()
    args = parser.parse_args(["trace", "--shape=-1,4", "--dtype=-d", "--warm-shape=-2,4", "--device=-x", "--threads=1",
                              "--compile=-mode", "--", "-m.py:make"])
    trace._one_each(args)  # as run() does: --shape and --inputs given once
    args.json = "-r.json"
    for argv in (trace._child_argv(args), launch.with_options(trace._control_argv(args), "--control-fds=5,6")):
        back = parser.parse_args(argv)
        assert (back.target, back.shape, back.dtype, back.warm_shape, back.device, back.compile) == (
            "-m.py:make", ["-1,4"], "-d", "-2,4", "-x", "-mode"), argv
    assert parser.parse_args(trace._child_argv(args)).json.endswith("-r.json")
    target, options = trace._warm_argv(args)
    back = parser.parse_args(["trace", "--shape=-1,4", "--op-view", *options, *target])
    assert (back.target, back.dtype, back.device) == ("-m.py:make", "-d", "-x")
    run = launch.with_options(cli_argv("-m.py:make", shape="-1,4", inputs="-in.pt", compile="-mode"), "--json=-o.json")
    back = parser.parse_args(run)
    assert (back.target, back.shape, back.inputs, back.compile, back.json) == (
        "-m.py:make", ["-1,4"], ["-in.pt"], "-mode", "-o.json")


# ---- signals ------------------------------------------------------------------------------------


def _wait_for(cond, what):
    wait_for(cond, what, TIMEOUT)


@pytest.mark.parametrize("sig, extra", [
    (signal.SIGQUIT, ("--no-control",)),
    (signal.SIGUSR1, ()),  # with the control process: it runs first, and its forward is the one that waits
    (signal.SIGALRM, ("--no-control",)),
    (signal.SIGALRM, ("--repeat", "2")),
], ids=["SIGQUIT", "SIGUSR1", "SIGALRM", "SIGALRM-repeat"])
def test_a_signal_that_would_end_the_trace_removes_its_folder(folder, sig, extra):
    pidfile = folder / "child.pid"
    env = _env(folder, WP40_PIDFILE=str(pidfile))
    argv = [*_cli(), "trace", "wp40_model:make", "--shape", "2,4", "--steady", "2", "--quiet", *extra]
    # as from a terminal's foreground: a shell starts a background job (a CI script's `cmd &`) with SIGINT and
    # SIGQUIT ignored, and a signal the caller ignores stays ignored (warmprof leaves it to the caller)
    with subprocess.Popen(argv, cwd=folder, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL)) as parent:
        try:
            _wait_for(lambda: pidfile.exists() and pidfile.read_text(), "the model's forward")
            child_pid = int(pidfile.read_text())
            assert any((folder / "tmp").iterdir())  # the trace's temp folder, there while it runs
            os.kill(parent.pid, sig)
            _, err = parent.communicate(timeout=TIMEOUT)
        finally:
            kill_quietly(parent.pid, group=True)
    assert parent.returncode == 128 + sig, err
    assert err.strip().splitlines()[-1] == "warmprof: terminated"
    _wait_for(lambda: gone(child_pid), "the process in forward to end")
    assert list((folder / "tmp").iterdir()) == []  # was: left behind (the process ended where it stood)


@pytest.mark.parametrize("command_line", [True, False], ids=["command_line", "in_a_program"])
@pytest.mark.parametrize("theirs", ["default", "handled"])
def test_the_callers_handlers_come_back_and_one_it_set_is_left_in_place(monkeypatch, theirs, command_line):
    """warmprof's own command line: a signal nobody handles stops the child and cleans up while it runs.
    In a program that called warmprof (cli.main, a fresh-process trace) the ending signals stay the
    program's (a handler installed from C reads as SIG_DFL and would be lost). One the caller handles
    stays the caller's; afterwards each is as it was."""
    from warmprof.system import launch, supervise
    from warmprof.traces import child

    during = {}

    def spawn(argv, tmp, cache, fds):
        during.update({sig: signal.getsignal(sig) for sig in (*supervise.ENDING, *supervise.STOPPING)})
        return 0, child.DONE

    monkeypatch.setattr(child, "_spawn_and_wait", spawn)
    monkeypatch.setattr(launch, "is_command_line", lambda: command_line)

    def mine(signum, frame):
        pass

    wanted = signal.SIG_DFL if theirs == "default" else mine
    before = {sig: signal.signal(sig, wanted) for sig in (signal.SIGQUIT, signal.SIGUSR1, signal.SIGALRM)}
    try:
        assert child.run_child(["trace"], "fresh", quiet=True) == 0
        assert during[signal.SIGTERM] not in (signal.SIG_DFL, mine)  # SIGTERM: always warmprof's, for the trace
        for sig in before:
            if theirs == "default" and command_line:
                assert during[sig] not in (signal.SIG_DFL, mine)  # warmprof's: it cleans up
            else:
                assert during[sig] is wanted  # the caller's, untouched
            assert signal.getsignal(sig) == wanted
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_handler_installed_from_c_survives_a_trace_called_from_a_program(tmp_path):
    """faulthandler.register(SIGUSR1) (common in services) installs its handler from C: Python reads it as
    SIG_DFL. A trace called from the program must not take it over and put SIG_DFL back."""
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import faulthandler, os, signal, sys
        from unittest import mock
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=False)
        from warmprof.traces import child
        with mock.patch.object(child, "_spawn_and_wait", lambda argv, tmp, cache, fds: (0, child.DONE)):
            assert child.run_child(["trace"], "fresh", quiet=True) == 0
        os.kill(os.getpid(), signal.SIGUSR1)  # faulthandler's: a stack dump, and the program goes on
        print("alive")
    """))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "alive" in p.stdout
    assert "Current thread" in p.stderr or "Stack" in p.stderr


# ---- Ctrl-C while the command line starts -------------------------------------------------------


def _mapped(pid, name):
    try:
        with open(f"/proc/{pid}/maps") as f:
            return name in f.read()
    except OSError:
        return False


def _script():
    script = os.path.join(os.path.dirname(sys.executable), "warmprof")
    if not (os.path.isfile(script) and os.access(script, os.X_OK)):
        pytest.skip("no `warmprof` script next to this Python (pip installs one)")
    return [script]


LAUNCHERS = {
    "python -m warmprof": lambda: [sys.executable, "-m", "warmprof"],
    "warmprof script": _script,
    "warmprof's own child": lambda: launch.python_argv("warmprof"),
}
# What the interpreter prints when Ctrl-C comes during its own start, before any of warmprof's code runs
# (importing site, or runpy for -m): out of warmprof's reach.
INTERPRETERS_OWN = ("init_import_site", "init_sys_streams", "Could not import runpy module")
# A traceback with no frame of warmprof's package in it: Ctrl-C before its first line ran (an editable
# install's finder imports importlib.util, and with it collections, when the script first imports warmprof).
WARMPROFS_OWN_CODE = re.compile(r"[/\\]warmprof[/\\][\w/\\]*\.py")


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_ctrl_c_while_the_command_starts_is_one_line_not_a_traceback(tmp_path, launcher):
    """SIGINT as soon as the process exists, then at several moments after warmprof's own code began (its
    native module mapped, which the package imports right after it takes Ctrl-C over) through the imports,
    the parser and the trace's start: never a traceback, exit 130. (As soon as the process exists, the
    signal may also end it before Python took SIGINT over, or come while the interpreter imports site or
    runpy, before any code of warmprof's: its own message then.)"""
    argv = [*LAUNCHERS[launcher](), "trace", "--demo", "--quiet"]
    env = _env(tmp_path)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    seen = []
    for delay in (None, 0.0, 0.002, 0.01, 0.03, 0.08, 0.15, 0.3):
        p = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            if delay is not None:
                _wait_for(lambda: _mapped(p.pid, "_native") or p.poll() is not None, "warmprof's code to start")
                time.sleep(delay)
            os.kill(p.pid, signal.SIGINT)
            _, err = p.communicate(timeout=TIMEOUT)
        finally:
            kill_quietly(p.pid, group=True)
        seen.append((delay, p.returncode, err))
        if delay is None:
            if any(own in err for own in INTERPRETERS_OWN) or ("Traceback" in err and "Exception ignored" not in err
                                                                and not WARMPROFS_OWN_CODE.search(err)):
                continue
            assert "Traceback" not in err, (delay, err)
            assert p.returncode in (130, -signal.SIGINT), (delay, p.returncode, err)
            assert err.strip() in ("", "warmprof: interrupted"), (delay, err)
        else:
            assert "Traceback" not in err, (delay, err)  # was: the imports' traceback, for ~0.4 s
            assert p.returncode == 130 and err.strip() == "warmprof: interrupted", (delay, p.returncode, err)
    assert list((tmp_path / "tmp").iterdir()) == [], seen


# ---- two copies of the model --------------------------------------------------------------------


def test_two_copies_that_do_not_fit_stop_the_trace_naming_no_control(folder):
    marker = f"WP40_MARK={uuid.uuid4().hex}"
    env = _env(folder, WARMPROF_FAKE_MEM_AVAILABLE="1", WP40_MARK=marker.split("=", 1)[1])
    p = _run(folder, "trace", "wp40_model:make", "--shape", "2,4", "--steady", "2", "--quiet", env=env)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 2, p.stderr[-3000:]
    assert last.startswith("warmprof: error: not enough memory for a second copy of the model"), last
    assert "--no-control" in last and "WARMPROF_FAKE_MEM_AVAILABLE" in last
    assert "Traceback" not in p.stderr
    _wait_for(lambda: not pids_whose("environ", marker), "the control process to end")
    assert list((folder / "tmp").iterdir()) == []
    # --no-control holds one copy: no check, the trace runs
    p = _run(folder, "trace", "wp40_model:make", "--shape", "2,4", "--steady", "2", "--quiet", "--no-control", env=env)
    assert p.returncode == 0, p.stderr[-3000:]

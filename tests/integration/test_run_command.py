"""warmprof run -- CMD (issue 41): every Python process of a command's tree recorded, each one's phases on
one clock with their causes, the first watched calls against steady ones, the path to ready; and bad input
(a command that does not exist, exits non-zero, is killed, outlives itself, Ctrl-C) said in one line with
the tree ended, the report kept and nothing left in TMPDIR."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from warmprof.report.run import RunReport
from .procs import pids_whose

TIMEOUT = 600

# A main process that spawns a child (multiprocessing, spawn: a fresh interpreter that imports torch
# again), then builds a watched model whose first call sleeps SLEEP_S, touches fresh memory and runs a
# full garbage collection of the cycles it dropped (timing the collection itself, printed).
TREE = textwrap.dedent("""
    import gc
    import multiprocessing as mp
    import time

    SLEEP_S = 0.2

    def child(q):
        import torch
        q.put(float(torch.ones(4).sum()))

    class Cycle:
        def __init__(self):
            self.me = self

    if __name__ == "__main__":
        import torch
        from torch import nn

        class Served(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(64, 64)
                self.buf = None

            def forward(self, x):
                if self.buf is None:
                    time.sleep(SLEEP_S)
                    self.buf = torch.ones(32 << 20, dtype=torch.uint8)
                    cycles = [Cycle() for _ in range(100_000)]
                    del cycles
                    t = time.perf_counter()
                    gc.collect()
                    print(f"collect_ms {(time.perf_counter() - t) * 1e3:.3f}", flush=True)
                return self.lin(x)

        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start()
        print("child said", q.get(), flush=True)
        p.join()
        m = Served()
        with torch.no_grad():
            for _ in range(6):
                m(torch.randn(2, 64))
        print("served", flush=True)
""")


def _env(tmp_path):
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    for var in ("TEMP", "TMP"):
        env.pop(var, None)
    return env


def _sigint_default() -> None:
    # as from a terminal: a test run from a background job (a CI script's `cmd &`) has SIGINT ignored, and the
    # command would inherit that
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _warmprof(tmp_path, *argv, **kw):
    return subprocess.run([sys.executable, "-m", "warmprof", "run", *argv], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=TIMEOUT, preexec_fn=_sigint_default, **kw)


def _nothing_left(tmp_path, marker: str) -> None:
    # the run's own folder (the command's own files there, a compile cache, are the command's business)
    assert [e for e in (tmp_path / "tmp").iterdir() if e.name.startswith("warmprof-run-")] == [], \
        "the run's folder was left in TMPDIR"
    left = pids_whose("cmdline", marker)
    assert left == [], f"processes of the tree still running: {left}"


def test_a_spawned_tree_is_recorded_with_its_phases_calls_and_the_path_to_ready(tmp_path):
    # a name of its own: the same test may run beside this one (CI's second torch), and its processes must
    # not be taken for this tree's leftovers
    marker = f"tree-{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{marker}.py").write_text(TREE)
    out = tmp_path / "run.json"
    p = _warmprof(tmp_path, "--watch", "Served", "--json", str(out), "--", sys.executable, f"{marker}.py")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "child said 4.0" in p.stdout and "served" in p.stdout  # the command's own output, as without warmprof
    r = RunReport.load(out)  # validated on load: contiguous phases, causes within each phase, paths that add up
    assert r.returncode == 0 and r.ended_by == "exit"
    main = r.root()
    assert main is not None and main["role"] == f"main: {marker}.py"
    kids = [q for q in r.processes if q.get("parent") == main["pid"] and q["role"] == "SpawnProcess-1"]
    assert len(kids) == 1, [(q["pid"], q["role"], q.get("parent")) for q in r.processes]
    for proc in (main, kids[0]):
        names = [ph["name"] for ph in proc["phases"]]
        assert names[:2] == ["interpreter start", "warmprof start-up"], names
        torch_import = [ph for ph in proc["phases"] if ph["name"] == "import torch"]
        assert torch_import, names
        # importing torch is measured, as runtime_init (python_import spans), and is most of the phase
        measured = sum(c["ms"] for c in torch_import[0]["causes"] if c["cause"] == "runtime_init")
        assert measured >= 0.5 * torch_import[0]["ms"], torch_import[0]
        assert proc["start_ms"] >= 0 and proc["end_ms"] > proc["start_ms"]
        assert abs(sum(ph["ms"] for ph in proc["phases"]) - (proc["end_ms"] - proc["start_ms"])) < 0.01
    # the child started after the main process and ended before it
    assert main["start_ms"] < kids[0]["start_ms"] < kids[0]["end_ms"] < main["end_ms"]
    # the watched model: its build and first call are phases of the main process
    assert any(ph["name"] == "build Served" for ph in main["phases"])
    (call,) = [c for c in main["calls"] if c["label"] == "Served"]
    assert call["key"] == "2x64" and call["calls"] == 6 and call["excess_ms"] > 0
    # the first call slept SLEEP_S (a wait, measured from the thread's clocks) and touched 32 MiB (estimated)
    booked = {c["cause"]: c["ms"] for c in call["causes"]}
    assert booked.get("wait", 0.0) >= 0.5 * 200, call
    assert "allocator_growth" in booked, call
    # and its collection (the agent's gc.callbacks spans): at least half of what the script timed of it
    collect_ms = float(next(ln.split()[1] for ln in p.stdout.splitlines() if ln.startswith("collect_ms")))
    assert booked.get("garbage_collection", 0.0) >= 0.5 * collect_ms, (collect_ms, call)
    # ready: the first watched call's start; the path to it crosses into the child while the main process waited
    assert r.ready is not None and r.ready["by"] == "first-call" and r.ready["pid"] == main["pid"]
    assert r.to_ready is not None and abs(r.to_ready["ms"] - r.ready["ms"]) < 1e-6
    assert str(kids[0]["pid"]) in r.to_ready["by_process"], r.to_ready["by_process"]
    assert r.to_ready["by_cause"].get("runtime_init", 0.0) > 0
    # the text and Chrome renderers
    text = str(r)
    assert text.startswith(f"warmprof run: {sys.executable} {marker}.py") and "start to ready:" in text
    chrome = json.loads(subprocess.run([sys.executable, "-m", "warmprof", "show", str(out), "--format", "chrome"],
                                       capture_output=True, text=True, timeout=TIMEOUT, check=True).stdout)
    tracks = {e["pid"] for e in chrome["traceEvents"] if e.get("ph") == "X"}
    assert {main["pid"], kids[0]["pid"]} <= tracks
    _nothing_left(tmp_path, marker)


def test_a_command_that_does_not_exist_is_one_line(tmp_path):
    p = _warmprof(tmp_path, "--", "no-such-command-warmprof-xyz", "--flag")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines()[-1] == "warmprof: error: command 'no-such-command-warmprof-xyz': not found on PATH"
    assert "Traceback" not in p.stderr
    p = _warmprof(tmp_path)
    assert p.returncode == 2 and "give the command after `--`" in p.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize("code, status, said", [
    ("import sys; sys.exit(3)", 4, "the command exited with status 3"),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 4, "the command was killed by SIGKILL"),
])
def test_a_command_that_fails_keeps_the_report_and_says_how_it_ended(tmp_path, code, status, said):
    out = tmp_path / "run.json"
    tag = f"fails-{uuid.uuid4().hex[:10]}"  # its own: the same test may run beside this one (CI's second torch)
    src = f"import json; {code}  # {tag}"
    p = _warmprof(tmp_path, "--json", str(out), "--", sys.executable, "-c", src)
    assert p.returncode == status, p.stderr[-2000:]
    assert p.stderr.strip().splitlines()[-1].startswith(f"warmprof: error: {said}"), p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    r = RunReport.load(out)
    assert r.command[-2:] == ["-c", src]
    if "SIGKILL" in said:  # killed: no record of its own, named as seen
        assert r.returncode == -signal.SIGKILL and r.processes == [] and r.unrecorded
    else:
        assert r.returncode == 3 and len(r.processes) == 1
    _nothing_left(tmp_path, tag)


OUTLIVES = textwrap.dedent("""
    import subprocess, sys
    # a detached grandchild (its own session) that would run for five minutes
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)  # outliver-marker"],
                     start_new_session=True)
    print("left one behind", flush=True)
""")


def test_a_tree_that_outlives_the_command_is_stopped_and_named(tmp_path):
    tag = f"outliver-{uuid.uuid4().hex[:10]}"  # its own: the same test may run beside this one (CI's second torch)
    (tmp_path / "outlives.py").write_text(OUTLIVES.replace("outliver-marker", tag))
    out = tmp_path / "run.json"
    p = _warmprof(tmp_path, "--json", str(out), "--", sys.executable, "outlives.py")
    assert p.returncode == 0, p.stderr[-2000:]
    r = RunReport.load(out)
    assert any("python" in s for s in r.stopped), r.stopped
    assert "stopped by warmprof at the end:" in p.stdout
    grandchild = [q for q in r.processes if tag in " ".join(q["argv"])]
    assert len(grandchild) == 1 and grandchild[0]["end"] == "SIGTERM", [(q["role"], q["end"]) for q in r.processes]
    _nothing_left(tmp_path, tag)


SLEEPER = textwrap.dedent("""
    import time
    try:
        print("serving", flush=True)
        time.sleep(300)  # sleeper-marker
    except KeyboardInterrupt:
        print("stopped by Ctrl-C", flush=True)
        raise SystemExit(0)
""")


def test_sigint_during_the_run_ends_the_command_and_keeps_the_report(tmp_path):
    tag = f"sleeper-{uuid.uuid4().hex[:10]}"  # its own: the same test may run beside this one (CI's second torch)
    (tmp_path / "sleeper.py").write_text(SLEEPER.replace("sleeper-marker", tag))
    out = tmp_path / "run.json"
    proc = subprocess.Popen([sys.executable, "-m", "warmprof", "run", "--json", str(out), "--", sys.executable, "sleeper.py"],
                            cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + TIMEOUT
        line = ""
        while "serving" not in line:  # the command is up
            assert time.monotonic() < deadline and proc.poll() is None, "the command never started"
            line = proc.stdout.readline()
        proc.send_signal(signal.SIGINT)  # to warmprof alone (as `kill -INT`): it passes it on to the command
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    assert proc.returncode == 130, stderr[-2000:]
    assert "stopped by Ctrl-C" in stdout
    assert stderr.strip().splitlines()[-1].startswith("warmprof: error: interrupted"), stderr[-2000:]
    assert "Traceback" not in stderr
    r = RunReport.load(out)
    assert r.ended_by == "interrupt" and len(r.processes) == 1
    (sleeper,) = r.processes
    assert sleeper["end"] == "exit"  # its own handler ran (SystemExit), and its record with it
    last = sleeper["phases"][-1]
    assert abs(last["start_ms"] + last["ms"] - sleeper["end_ms"]) < 0.01
    _nothing_left(tmp_path, tag)


def _script(tmp_path, name: str, body: str) -> str:
    """A script with a marker of its own in its command line (_nothing_left looks for it)."""
    marker = f"{name}-{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{marker}.py").write_text(textwrap.dedent(body))
    return marker


def test_what_the_agent_wraps_behaves_as_it_did(tmp_path):
    """A watched forward inside a fullgraph torch.compile (dynamo traces the wrapper: it must be only the
    call there), os._exit(status=N), a forked child that records itself, and the user's own sitecustomize
    (shadowed by warmprof's, still run) all work as without warmprof."""
    site = tmp_path / "usersite"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = '1'\n")
    marker = _script(tmp_path, "wraps", """
        import os, sys
        import torch
        from torch import nn

        class Served(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(8, 8)

            def forward(self, x):
                return self.lin(x).relu()

        assert os.environ.get("USER_SITECUSTOMIZE_RAN") == "1", "the user's sitecustomize did not run"
        m = Served()
        compiled = torch.compile(m, backend="eager", fullgraph=True)
        with torch.no_grad():
            for _ in range(3):
                compiled(torch.randn(2, 8))
        pid = os.fork()
        if pid == 0:
            with torch.no_grad():
                m(torch.randn(3, 8))
            os._exit(status=0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        print("all well", flush=True)
        os._exit(status=3)
    """)
    env_site = {"PYTHONPATH": str(site)}
    out = tmp_path / "run.json"
    p = subprocess.run([sys.executable, "-m", "warmprof", "run", "--watch", "Served", "--json", str(out), "--",
                        sys.executable, f"{marker}.py"], cwd=tmp_path, env={**_env(tmp_path), **env_site},
                       capture_output=True, text=True, timeout=TIMEOUT, preexec_fn=_sigint_default)
    assert "all well" in p.stdout, p.stderr[-3000:]
    assert p.returncode == 4 and "the command exited with status 3" in p.stderr, p.stderr[-2000:]
    r = RunReport.load(out)
    main = r.root()
    assert main is not None and main["end"] == "os._exit(3)"
    (forked,) = [q for q in r.processes if q["pid"] != main["pid"]]
    assert forked["parent"] == main["pid"] and forked["end"] == "os._exit(0)"
    assert forked["phases"][0]["detail"] == f"forked from pid {main['pid']}"
    # a compiled forward runs as dynamo's graph, without the wrapper (documented: watch an eager caller);
    # the forked child's eager call is watched
    assert main["calls"] == []
    assert [c["calls"] for c in forked["calls"]] == [1]
    _nothing_left(tmp_path, marker)


def test_calls_and_a_log_record_end_the_cold_start_and_the_run(tmp_path):
    """--ready-after log:REGEX marks ready where a log record matches; --calls N ends a command that
    would serve for ever once one process made N watched calls."""
    marker = _script(tmp_path, "serves", """
        import logging, time
        import torch
        from torch import nn

        class Served(nn.Module):
            def forward(self, x):
                return x * 2

        logging.basicConfig(level=logging.INFO)
        m = Served()
        logging.getLogger("app").info("model ready to serve")
        try:
            while True:  # serves for ever: --calls ends it
                m(torch.ones(2))
                time.sleep(0.01)
        except KeyboardInterrupt:
            print("stopped after calls", flush=True)
    """)
    out = tmp_path / "run.json"
    p = _warmprof(tmp_path, "--watch", "Served", "--calls", "5", "--ready-after", "log:ready to serve", "--json",
                  str(out), "--", sys.executable, f"{marker}.py")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "stopped after calls" in p.stdout and "5 model calls seen" in p.stderr
    r = RunReport.load(out)
    assert r.ended_by == "calls"
    assert r.ready is not None and r.ready["by"] == "log" and r.ready["text"] == "model ready to serve"
    main = r.root()
    (calls,) = main["calls"]
    assert calls["calls"] >= 5
    assert r.ready["ms"] < main["start_ms"] + sum(ph["ms"] for ph in main["phases"])
    _nothing_left(tmp_path, marker)


def test_calls_end_a_command_that_ignores_sigint_with_sigterm(tmp_path):
    """Started with SIGINT ignored (a background job, nohup), the command inherits it ignored: --calls ends it
    with SIGTERM instead of waiting out the grace period for a SIGINT it never sees."""
    marker = _script(tmp_path, "deaf", """
        import signal, time
        import torch
        from torch import nn

        class Served(nn.Module):
            def forward(self, x):
                return x * 2

        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        m = Served()
        while True:
            m(torch.ones(2))
            time.sleep(0.01)
    """)
    out = tmp_path / "run.json"
    started = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "warmprof", "run", "--watch", "Served", "--calls", "3", "--json", str(out),
                        "--", sys.executable, f"{marker}.py"], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                       text=True, timeout=TIMEOUT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert "3 model calls seen: ending the command (SIGTERM)" in p.stderr, p.stderr[-2000:]
    r = RunReport.load(out)
    assert r.ended_by == "calls" and r.stopped == [], r.stopped  # it ended on SIGTERM, not stopped at the grace's end
    assert r.root()["end"] == "SIGTERM"
    assert time.monotonic() - started < TIMEOUT
    _nothing_left(tmp_path, marker)


def _driver_ids() -> dict[str, int]:
    """The CUDA driver's callback ids, parsed from this machine's toolkit headers (tests/native/cupti_calls.py);
    skips where the CUPTI backend is not built."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "native"))
    try:
        import cupti_calls
    finally:
        sys.path.pop(0)
    cupti_calls.skip_without_cupti()
    return {n: cupti_calls.DRIVER[n] for n in ("cuDevicePrimaryCtxRetain", "cuModuleLoadData", "cuMemAlloc_v2")}


def test_cuda_phases_are_wired_through_the_cupti_handler(tmp_path):
    """CUDA on paper (issue 41): the driver calls CUPTI delivers land in the phase that made them with the
    trace's causes: fed here through the real handler (synthetic callbacks, each lasting as long as the work
    it stands for) inside a function timed with --phase. torch.cuda's lazy init as a phase of its own is
    test_run_assemble's (a stand-in torch.cuda): here it either is no phase (a CPU build) or a failed probe."""
    ids = _driver_ids()
    helper = f"gpustart_{uuid.uuid4().hex[:8]}"  # a module: --phase names a function by the module it is imported from
    (tmp_path / f"{helper}.py").write_text(textwrap.dedent(f"""
        import time
        from warmprof import _native

        D = 1  # CUPTI_CB_DOMAIN_DRIVER_API
        IDS = {ids!r}

        def driver_call(name, ms, value=0):
            _native._testing.cupti_inject(D, IDS[name], True, _native.now_ticks(), value)
            t = time.perf_counter() + ms / 1000.0
            while time.perf_counter() < t:
                pass
            _native._testing.cupti_inject(D, IDS[name], False, _native.now_ticks(), value)

        def start_gpu():
            driver_call("cuDevicePrimaryCtxRetain", 60)          # the context: runtime_init
            driver_call("cuModuleLoadData", 40)                  # a module image: runtime_init
            driver_call("cuMemAlloc_v2", 30, value=1 << 30)      # 1 GiB: allocator_growth
    """))
    marker = _script(tmp_path, "cudaphases", f"""
        import torch
        from {helper} import start_gpu

        try:
            torch.cuda._lazy_init()  # no GPU here: it raises
        except Exception as e:
            print("no CUDA here:", type(e).__name__, flush=True)
        start_gpu()
        print("done", flush=True)
    """)
    out = tmp_path / "run.json"
    p = _warmprof(tmp_path, "--json", str(out), "--phase", f"{helper}:start_gpu=gpu start-up", "--",
                  sys.executable, f"{marker}.py")
    assert p.returncode == 0, p.stderr[-3000:]
    r = RunReport.load(out)
    main = r.root()
    by_name = {ph["name"]: ph for ph in main["phases"]}
    gpu = by_name["gpu start-up"]
    assert gpu["source"] == "--phase" and gpu["ms"] >= 120.0
    booked: dict[tuple[str, str], float] = {}
    for c in gpu["causes"]:
        booked[(c["cause"], c["source"])] = booked.get((c["cause"], c["source"]), 0.0) + c["ms"]
    init_ms = booked.get(("runtime_init", "cupti"), 0.0)  # the context and the module load
    alloc = booked.get(("allocator_growth", "cupti"), 0.0)
    # each at least the time it was made to last (a wait for a CPU inside it is in it too), within the phase
    assert init_ms >= 100.0 and alloc >= 30.0, booked
    assert init_ms + alloc <= gpu["ms"] + 0.01, (booked, gpu["ms"])
    _nothing_left(tmp_path, marker)


def test_a_phase_option_that_names_no_function_is_one_line(tmp_path):
    p = _warmprof(tmp_path, "--phase", "not a function", "--", sys.executable, "-c", "pass")
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1].startswith("warmprof: error: --phase 'not a function'")

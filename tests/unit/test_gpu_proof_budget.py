"""bench/gpu_proof: the plan fits one device call, each phase is cut at its deadline and the rest
still run, a run cut short keeps what finished, and what comes back stays small. Fake phases
(short shell commands) stand for the GPU ones."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

PROOF = Path(__file__).resolve().parents[2] / "bench" / "gpu_proof"


@pytest.fixture(scope="module")
def prove():
    spec = importlib.util.spec_from_file_location("gpu_proof_prove", PROOF / "prove.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up while it is made
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)
        while str(PROOF) in sys.path:  # prove.py puts its folder first (facts.py, build.py: names to keep out)
            sys.path.remove(str(PROOF))


def test_the_phase_caps_and_margins_fit_one_device_call(prove):
    """Issue 25: the shared script's limits added up to 770 s against one call's 600 s."""
    caps = sum(p.cap_s for p in prove.PHASES)
    planned = prove.START_S + caps + len(prove.PHASES) * prove.MARGIN_S + prove.FINISH_S
    assert prove.planned_s(prove.PHASES) == pytest.approx(planned)
    assert planned <= prove.BUDGET_S <= 540
    # the call's timeout: above the proof's own hard limit, under the run tool's most a command
    assert prove.BUDGET_S + prove.HARD_SLACK_S < prove.RUN_TIMEOUT_S <= prove.RUN_TOOL_MAX_S == 600
    assert all(p.cap_s >= 15 for p in prove.PHASES)  # no phase planned too short to start torch
    assert "timeout_s=560" in (PROOF.parent / "gpu_proof.sh").read_text() and prove.RUN_TIMEOUT_S == 560


def test_the_phases_come_in_the_issues_order(prove):
    assert [p.name for p in prove.PHASES] == ["facts", "build", "seq", "kineto", "ab", "trace_eager",
                                              "trace_compile", "trace_ro", "gpu_check", "run_cuda"]
    assert [p.name for p in prove.PHASES if not p.needs_gpu] == ["facts"]


def test_the_deadlines_add_up_and_gpu_check_fits_its_phase(prove, tmp_path):
    ends = prove.deadlines(prove.PHASES)
    assert all(b > a for a, b in zip(ends, ends[1:]))
    assert ends[-1] + prove.FINISH_S <= prove.BUDGET_S
    gpu_check = next(p for p in prove.PHASES if p.name == "gpu_check")
    argv = gpu_check.argv(tmp_path / "gpu_check", gpu_check.cap_s)
    budget = float(argv[argv.index("--budget-s") + 1])
    assert 0 < budget < gpu_check.cap_s  # it prints its table before its phase is cut
    assert f"eager={tmp_path / 'trace_eager' / prove.RESULT}" in argv
    assert f"compiled={tmp_path / 'trace_compile' / prove.RESULT}" in argv


def fake(prove, name: str, cap: float, shell: str, needs_gpu: bool = False):
    """A phase running `shell` (it may write $RESULT) in place of a GPU script."""
    return prove.Phase(name, cap, f"fake {name}", lambda d, limit: ["bash", "-c", shell.replace("$RESULT", str(d / prove.RESULT))],
                       needs_gpu=needs_gpu)


def small_plan(prove, monkeypatch):
    monkeypatch.setattr(prove, "START_S", 0.2)
    monkeypatch.setattr(prove, "MARGIN_S", 0.3)
    monkeypatch.setattr(prove, "FINISH_S", 0.5)
    monkeypatch.setattr(prove, "MIN_PHASE_S", 0.2)


def test_a_phase_past_its_deadline_is_cut_and_the_phases_after_it_still_run(prove, monkeypatch, tmp_path):
    small_plan(prove, monkeypatch)
    phases = [fake(prove, "first", 2, "echo '{\"x\": 1}' > $RESULT"),
              fake(prove, "hangs", 1, "sleep 30 & sleep 30"),  # a child of its own too: the group goes
              fake(prove, "after", 2, "echo '{\"y\": 2}' > $RESULT; exit 5")]
    proof = prove.Proof(phases, tmp_path / "out", tmp_path / "work", budget_s=prove.planned_s(phases))
    t0 = time.monotonic()
    code = proof.run()
    took = time.monotonic() - t0
    assert [r["status"] for r in proof.records] == ["OK", "TIMED OUT", "FAILED"]
    assert code == prove.EXIT_FAILED
    assert took < prove.planned_s(phases)
    cut = proof.records[1]  # its cap and what the first phase left unused, and not a second more
    assert cut["limit_s"] >= 1 and cut["seconds"] <= cut["limit_s"] + 0.5
    assert proof.results["after"] == {"y": 2} and "exit 5" in proof.records[2]["note"]


def test_what_a_phase_leaves_unused_goes_to_the_phases_after_it(prove, monkeypatch, tmp_path):
    small_plan(prove, monkeypatch)
    phases = [fake(prove, "quick", 3, "true"), fake(prove, "slow", 1, "sleep 2")]
    proof = prove.Proof(phases, tmp_path / "out", tmp_path / "work", budget_s=prove.planned_s(phases))
    proof.run()
    assert proof.records[1]["limit_s"] > 3  # its own 1 s and most of the 3 s the first left
    assert [r["status"] for r in proof.records] == ["OK", "OK"]


def test_no_gpu_from_the_facts_phase_is_said_for_each_gpu_phase_without_running_it(prove, monkeypatch, tmp_path):
    small_plan(prove, monkeypatch)
    gate = json.dumps({"gpu": {"available": False, "reason": "torch.cuda.is_available() is False"}})
    phases = [fake(prove, "facts", 2, f"echo '{gate}' > $RESULT; exit 3"),
              fake(prove, "build", 2, "touch ran; sleep 5", needs_gpu=True),
              fake(prove, "seq", 2, "touch ran; sleep 5", needs_gpu=True)]
    proof = prove.Proof(phases, tmp_path / "out", tmp_path / "work", budget_s=prove.planned_s(phases))
    assert proof.run() == prove.EXIT_NO_GPU
    assert [r["status"] for r in proof.records] == ["NO GPU"] * 3
    assert all("is_available() is False" in r["note"] for r in proof.records)
    assert not list((tmp_path / "work").rglob("ran"))
    text = (tmp_path / "out" / "summary.txt").read_text()
    assert sum(ln.startswith("phase ") and ": NO GPU" in ln for ln in text.splitlines()) == 3
    assert "CUPTI: NO GPU" in text


CUT_RUN = r"""
import sys
sys.path.insert(0, {proof_dir!r})
import prove
prove.START_S, prove.MARGIN_S, prove.FINISH_S = 0.2, 0.3, 0.5
phases = [prove.Phase("done", 5, "ends", lambda d, l: ["bash", "-c", "echo '{{\"kept\": true}}' > " + str(d / prove.RESULT)],
                      needs_gpu=False),
          prove.Phase("cut", 30, "never ends", lambda d, l: ["bash", "-c", "echo started; sleep 8"], needs_gpu=False)]
sys.exit(prove.main(["--out", {out!r}, "--work", {work!r}, "--budget-s", "60"], phases=phases))
"""


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_a_run_cut_short_keeps_what_finished(prove, tmp_path, how):
    """The run tool kills the call at its timeout: the phases that ended are already in OUT."""
    out, work = tmp_path / "out", tmp_path / "work"
    code = CUT_RUN.format(proof_dir=str(PROOF), out=str(out), work=str(work))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until the second phase runs
            log = work / "cut" / "log.txt"
            if log.is_file() and b"started" in log.read_bytes():
                break
            time.sleep(0.1)
        else:
            pytest.fail("the second phase never started")
        p.send_signal(getattr(signal, how))
        p.wait(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    summary = json.loads((out / "summary.json").read_text())
    assert [r["status"] for r in summary["phases"]][0] == "OK"
    assert summary["phases"][1]["status"] == ("RUNNING" if how == "SIGKILL" else "TIMED OUT")
    with tarfile.open(out / "results.tgz") as tar:
        assert json.load(tar.extractfile("done.json")) == {"kept": True}
    if how == "SIGTERM":
        assert "the proof was cut" in (out / "summary.txt").read_text()
        with tarfile.open(out / "logs.tgz") as tar:
            assert "cut.log" in tar.getnames() or "done.log" in tar.getnames()


def test_the_files_that_come_back_stay_few_and_small(prove, monkeypatch, tmp_path):
    """The run tool brings back at most 8 files and drops big ones: 4 files, logs capped."""
    small_plan(prove, monkeypatch)
    noisy = "head -c 40000000 /dev/urandom | base64; echo '{\"ok\": 1}' > $RESULT"  # ~54 MB of output
    phases = [fake(prove, "noisy", 20, noisy), fake(prove, "quiet", 2, "echo hello")]
    proof = prove.Proof(phases, tmp_path / "out", tmp_path / "work", budget_s=prove.planned_s(phases))
    proof.run()
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == sorted(prove.OUT_FILES) and len(files) <= 8
    assert all(c.isalnum() or c in "._-" for name in files for c in name)
    sizes = {p.name: p.stat().st_size for p in (tmp_path / "out").iterdir()}
    assert sizes["logs.tgz"] <= prove.ARCHIVE_MAX_BYTES and sum(sizes.values()) < 6 << 20
    with tarfile.open(tmp_path / "out" / "logs.tgz") as tar:
        noisy_log = tar.extractfile("noisy.log").read()
        assert b"bytes left out" in noisy_log and tar.extractfile("quiet.log").read() == b"hello\n"


def test_a_long_log_keeps_its_head_and_its_tail(prove):
    data = b"H" * 100 + b"m" * 1000 + b"T" * 100
    capped = prove.cap_log(data, head=100, tail=100)
    assert capped.startswith(b"H" * 100) and capped.endswith(b"T" * 100) and b"1000 bytes left out" in capped
    assert prove.cap_log(b"short", head=100, tail=100) == b"short"


def test_each_phase_script_bounds_its_children_by_the_phase_deadline(monkeypatch):
    sys.path.insert(0, str(PROOF))
    try:
        import proof_common
    finally:
        sys.path.remove(str(PROOF))
    monkeypatch.delenv(proof_common.DEADLINE_VAR, raising=False)
    assert proof_common.left_s(40) == 40
    monkeypatch.setenv(proof_common.DEADLINE_VAR, f"{time.time() + 10:.1f}")
    assert 7 < proof_common.left_s(40) <= 9.1
    monkeypatch.setenv(proof_common.DEADLINE_VAR, f"{time.time() - 5:.1f}")
    assert proof_common.left_s(40) == 1.0
    for script in ("seq_probe.py", "kineto_interplay.py", "ab_first_pass.py", "build.py"):
        text = (PROOF / script).read_text()
        assert "timeout=left_s(" in text and "timeout=4" not in text and "timeout=8" not in text, script


def test_a_plan_longer_than_the_budget_is_refused(prove, tmp_path):
    with pytest.raises(SystemExit):
        prove.main(["--out", str(tmp_path), "--budget-s", "100"])
    assert not (tmp_path / "summary.txt").exists()

"""Each advice line is followed in a fresh process and must help (issue 24): a line that does not
reduce what it is about when followed is not said. The demo, traced cold from the command line; for
each cause it advises on, the trace again after the warm-up the line asks for (`--warm-shape`: the
served shape, or another one for a cost paid once whatever the shape, traces/advice.FOLLOW), and that
cause must shrink to less than half. And a model pre-run at its shape reads warm."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from warmprof.traces.advice import FOLLOW, cause_of_line

SHAPE, OTHER = "1,128", "2,128"


def _trace(tmp_path, name, *extra, target=("--demo",)):
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, "-m", "warmprof", "trace", *target, "--threads", "1", "--quiet",
                           "--json", str(out), *extra], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


def _ms(report, cause):
    return sum(c["ms"] for c in report["causes"] if c["cause"] == cause)


def test_each_advice_line_helps_when_followed(tmp_path):
    cold = _trace(tmp_path, "cold", "--shape", SHAPE)
    assert cold["advice"], "never silent"
    advised = {cause_of_line(line) for line in cold["advice"]} - {""}
    if not advised:  # the verdict alone: nothing to follow
        # no first-call cost; or, on a busy machine, too noisy to tell or unstable (--repeat); or a cost no single
        # cause holds a tenth of (mostly the two processes' run-to-run difference under load): each is a verdict
        # with no cause to follow
        verdicts = ("No first-call cost", "Too noisy to tell", "Unstable", "A first-call cost of")
        assert any(line.startswith(verdicts) for line in cold["advice"]), cold["advice"]
        return
    followed = {}
    for cause in sorted(advised):
        if cause == "cpu_contention":  # the machine's load: its line says no warm-up removes it, and none is tried
            line = next(a for a in cold["advice"] if cause_of_line(a) == cause)
            assert "no warm-up removes it" in line
            continue
        assert cause in FOLLOW, f"advice on {cause}, which no warm-up removes: {cold['advice']}"
        warm_at = OTHER if FOLLOW[cause] == "any" else SHAPE
        if warm_at not in followed:  # followed twice: a busy machine adds to a first pass, never takes away
            followed[warm_at] = [_trace(tmp_path, f"warm-{warm_at}-{i}", "--shape", SHAPE, "--warm-shape", warm_at)
                                 for i in range(2)]
        before = cold["unattributed_ms"] if cause == "unattributed" else _ms(cold, cause)
        # what recurs on every pass (the cold trace's seen re-run still paid it) no warm-up removes
        recurring = 0.0 if cause == "unattributed" else sum(
            c["ms"] for c in cold.get("seen_rerun_causes", []) if c["cause"] == cause)
        tries = [(warm["unattributed_ms"] if cause == "unattributed" else _ms(warm, cause), warm["noise_band_ms"],
                  warm.get("verdict")) for warm in followed[warm_at]]
        # shrunk to less than half of the one-time part, or to within that trace's own noise band, or the
        # followed trace's measured verdict is no first-call cost (what is left is no more than a warm pass
        # after a short pause pays: on some VMs that is milliseconds, in the unattributed residual)
        assert any(after < 0.5 * max(0.0, before - recurring) + recurring or after <= band
                   or verdict == "no_first_call_cost" for after, band, verdict in tries), (
            cause, before, recurring, tries, cold["causes"], [w["causes"] for w in followed[warm_at]])
    if SHAPE in followed:  # the served shape warmed: the whole first-call cost is gone
        assert any(warm["excess_ms"] < cold["excess_ms"] or warm["excess_ms"] <= warm["noise_band_ms"]
                   for warm in followed[SHAPE])

def test_a_model_pre_run_at_its_shape_reads_warm(tmp_path):
    model = tmp_path / "prerun.py"
    model.write_text(
        "import torch\n"
        "from warmprof.traces.demo import demo_model\n"
        "def make():\n"
        "    m = demo_model()\n"
        "    x = torch.randint(0, m.vocab, (1, 128))\n"
        "    with torch.no_grad():\n"
        "        for _ in range(20):\n"
        "            m(x)\n"
        "    return m\n")
    r = _trace(tmp_path, "prerun", "--shape", SHAPE, target=(f"{model}:make",))
    assert r["clean"] is not None and r["own_cost"]["first_pass_ms"] is not None
    blamed = sum(c["ms"] for c in r["causes"] if c["cause"] not in ("cpu_contention", "unattributed"))
    # what the trace books for the model is warmprof's own first-call work taken out: next to nothing,
    # and the advice says there is no first-call cost (net of a wait for a CPU on a busy machine)
    assert blamed <= max(0.5, 0.1 * r["steady_median_ms"]), r["causes"]
    assert r["advice"][0].startswith("No first-call cost"), r["advice"]


@pytest.mark.parametrize("extra", [(), ("--no-control",)], ids=["control", "no-control"])
def test_warmprofs_own_cost_is_its_own_line_never_a_cause(tmp_path, extra):
    r = _trace(tmp_path, "own", "--shape", SHAPE, *extra)
    assert "profiler_overhead" not in {c["cause"] for c in r["causes"]}
    assert r["own_cost"]["steady_ms"] >= 0
    if extra:
        assert r.get("clean") is None and any(n.startswith("controls: --no-control") for n in r["notes"])
        assert r["settings"]["controls"] == []
    else:
        assert r["clean"]["first_pass_ms"] == r["first_pass_ms"]
        assert r["own_cost"]["instrumented_first_pass_ms"] > 0
        assert {c["name"] for c in r["settings"]["controls"]} == {"clean_first_pass", "other_shape", "warm_control"}

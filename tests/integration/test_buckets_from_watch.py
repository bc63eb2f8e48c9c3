"""issue 27's acceptance: `warmprof buckets --from-watch` on the report of `warmprof watch --demo` gives a
plan priced from that run's compiles: the compile cost is the median of the jit_compile dynamo
bracketed in each length's first call, the lengths are the stream's, the compile model the one its
keys showed (static: every length compiled). Both commands run as a user runs them, each in a fresh
process (about a minute: 12 lengths compiled by inductor on a 2-core machine)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest

pytest.importorskip("torch")

REQUESTS = 40


def _cli(*argv: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "warmprof", *argv], capture_output=True, text=True, env=env,
                          timeout=900)


def test_buckets_from_the_watch_demo_report_is_priced_from_its_compiles(tmp_path):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    watch_json, plan_json = tmp_path / "w.json", tmp_path / "plan.json"
    got = _cli("watch", "--demo", "--requests", str(REQUESTS), "--idle-at", "-1", "--quiet", "--json", str(watch_json),
               env=env)
    assert got.returncode == 0, got.stderr[-3000:]
    report = json.loads(watch_json.read_text())
    firsts = [e for e in report["events"] if e["first"]]
    compiles = [sum(c["ms"] for c in e["causes"] if c["cause"] == "jit_compile") for e in firsts]
    assert len(firsts) == 12 and all(ms > 0 for ms in compiles), compiles  # every length compiled (static)
    got = _cli("buckets", "--from-watch", str(watch_json), "--json", str(plan_json), env=env)
    assert got.returncode == 0, got.stderr[-3000:]
    plan = json.loads(plan_json.read_text())
    assert plan["requests"] == REQUESTS and plan["distinct_lengths"] == 12
    assert plan["inputs"]["compile_ms_per_bucket"] == pytest.approx(statistics.median(compiles))
    assert plan["inputs"]["compiles"] == "static"
    assert plan["baselines"]["per_length"]["compile_ms"] == pytest.approx(12 * statistics.median(compiles))
    assert "Costs measured on the model, from" in got.stdout and "each of the 12 keys' first calls compiled" in got.stdout

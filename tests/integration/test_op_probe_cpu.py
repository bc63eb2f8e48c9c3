"""The aten op probes for real on the CPU: fresh children, structure and verdicts, never absolute ms."""

import json
import sys

import pytest
from factories import ADD_CALL, trace_report_with_ops

import warmprof
from warmprof import cli
from warmprof.probes import aten
from warmprof.report import load
from warmprof.report.op_probe import VERDICTS, OpProbeReport

FIGURES = ("first_ms", "steady_ms", "steady_p10_ms", "steady_p90_ms", "cold_excess_ms", "rerun_ms", "runtime_warmup_ms",
           "launch_hi_ms", "alloc_hi_ms")


@pytest.fixture(scope="module")
def report():
    return warmprof.probe_ops([ADD_CALL], threads=1)


def test_a_fresh_child_measures_a_cheap_op(report):
    assert isinstance(report, OpProbeReport) and len(report.ops) == 1
    r = report.ops[0]
    assert (r.op, r.short, r.label) == ("aten.add.Tensor", "add.Tensor", "f32[4,8], f32[4,8]")
    assert r.verdict in VERDICTS and r.verdict != "failed" and r.evidence and not r.error
    for name in FIGURES:
        assert getattr(r, name) is not None and getattr(r, name) >= 0, name
    assert r.first_ms > 0 and r.steady_p10_ms <= r.steady_ms <= r.steady_p90_ms
    assert r.cold_excess_ms == pytest.approx(max(0.0, r.first_ms - r.steady_ms))
    assert 2 <= len(r.variants) <= 3 and r.shape_excess_ms is not None
    assert all(v["label"] != r.label for v in r.variants)
    assert r.working_set_bytes == 3 * 4 * 8 * 4  # two inputs and the output
    assert report.protocol["threads"] == 1 and r.threads == 1


def test_the_report_round_trips_and_renders(report, tmp_path):
    back = load(report.save(tmp_path / "ops.json"))
    assert back.to_dict() == report.to_dict()
    assert "add.Tensor" in str(back)


def test_an_op_that_raises_in_the_child_is_a_clear_per_op_failure():
    bad = {"op": "aten.mm.default", "kwargs": {},
           "args": [{"tensor": [4, 8], "dtype": "float32"}, {"tensor": [4, 8], "dtype": "float32"}]}
    r = warmprof.probe_ops([bad], threads=1).ops[0]
    assert r.verdict == "failed" and r.first_ms is None
    assert r.error.startswith("the op raised on its recorded shapes: RuntimeError")


def _fake_child(tmp_path, monkeypatch, body):
    (tmp_path / "fake_child.py").write_text(body)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(aten, "CHILD", "fake_child")


def test_a_child_that_hangs_is_killed_at_the_timeout(tmp_path, monkeypatch):
    _fake_child(tmp_path, monkeypatch, "import time\ntime.sleep(60)\n")
    answer, wall_ms = aten.run_child({"call": ADD_CALL}, None, 1)
    assert answer == {"ok": False, "error": "timed out after 1 s (the child was killed)"}


def test_a_child_that_crashes_is_named(tmp_path, monkeypatch):
    _fake_child(tmp_path, monkeypatch, "import os\nos.abort()\n")
    r = warmprof.probe_ops([ADD_CALL], timeout_s=30).ops[0]
    assert r.verdict == "failed" and "killed by SIGABRT" in r.error


def test_threads_reach_the_child(tmp_path, monkeypatch):
    _fake_child(tmp_path, monkeypatch, "import json, os, sys\njob = json.load(sys.stdin)\n"
                "print(json.dumps({'ok': False, 'error': f\"{job['threads']} {os.environ['OMP_NUM_THREADS']}\"}))\n")
    assert aten.run_child({"threads": 3}, 3, 30)[0]["error"] == "3 3"


_TIMED_CHILD = """import json, os, sys, time
started = time.monotonic()
time.sleep(0.3)  # its imports
fd = os.environ.get("WARMPROF_PROBE_READY_FD")
if fd and {ready}:
    os.write(int(fd), b"1")
job = json.load(sys.stdin)
got = time.monotonic()
time.sleep(0.2)  # its measuring
print(json.dumps({{"ok": False, "error": json.dumps([started, got, time.monotonic()])}}))
"""


def _spans(report):
    return [json.loads(o.error) for o in report.ops]


def test_children_import_side_by_side_and_measure_one_at_a_time(tmp_path, monkeypatch):
    """Several ops: their children start together (the imports overlap), and each gets its job only
    once the others have said they are imported, one after another (the measuring never overlaps)."""
    monkeypatch.setattr(aten.os, "cpu_count", lambda: 2)
    _fake_child(tmp_path, monkeypatch, _TIMED_CHILD.format(ready=True))
    mul = dict(ADD_CALL, op="aten.mul.Tensor")
    r = warmprof.probe_ops([ADD_CALL, mul, dict(ADD_CALL, op="aten.sub.Tensor")], timeout_s=30)
    (s1, j1, e1), (s2, j2, e2), (s3, j3, e3) = _spans(r)
    assert s2 < j1  # the second child was started with the first: their imports overlapped
    assert j2 >= e1 - 0.05  # the second got its job once the first had answered
    assert s3 >= e2 - 0.05  # a batch of two: the third child starts after the first two are done
    assert all(o.child_wall_ms < 5000 for o in r.ops)


def test_a_child_that_never_says_it_is_ready_only_delays_its_siblings(tmp_path, monkeypatch):
    monkeypatch.setattr(aten.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(aten, "READY_WAIT_S", 0.5)
    _fake_child(tmp_path, monkeypatch, _TIMED_CHILD.format(ready=False))
    r = warmprof.probe_ops([ADD_CALL, dict(ADD_CALL, op="aten.mul.Tensor")], timeout_s=30)
    assert len(_spans(r)) == 2  # both answered


def test_probe_from_probes_a_traces_op_rows_with_its_threads(tmp_path):
    path = trace_report_with_ops(threads=1).save(tmp_path / "trace.json")
    r = warmprof.probe_from(path, top=1)
    assert [o.op for o in r.ops] == ["aten.addmm.default"]
    assert r.ops[0].source == {"module": "blocks.0.mlp", "ms": 0.9, "calls": 2}
    assert r.protocol["threads"] == 1 and r.protocol["from"] == str(path)
    assert r.ops[0].verdict in VERDICTS


def test_cli_probes_a_named_op_with_a_shape_and_saves_json(tmp_path, capsys):
    out = tmp_path / "ops.json"
    assert cli.main(["probe", "--ops", "gelu:8x16", "--threads", "1", "--quiet", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "gelu" in text and "f32[8,16]" in text
    assert json.loads(out.read_text())["ops"][0]["op"] == "aten.gelu.default"


def test_the_child_answers_on_stdout_alone():
    import subprocess

    job = {"call": ADD_CALL, "threads": 1, "steady_calls": 5, "variant_calls": 5, "rerun_rounds": 1}
    proc = subprocess.run([sys.executable, "-m", aten.CHILD], input=json.dumps(job).encode(), capture_output=True,
                          timeout=120)
    lines = proc.stdout.decode().splitlines()
    assert proc.returncode == 0 and len(lines) == 1 and json.loads(lines[0])["ok"] is True

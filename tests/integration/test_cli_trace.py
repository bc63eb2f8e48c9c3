"""The trace command: a fresh subprocess by default, JSON output, one-line errors with exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from warmprof.cli import main


def run_cli(*argv, timeout=600):
    return subprocess.run([sys.executable, "-m", "warmprof", *argv], capture_output=True, text=True, timeout=timeout)


def test_trace_demo_in_fresh_process_writes_json(tmp_path):
    out = tmp_path / "demo.json"
    p = run_cli("trace", "--demo", "--shape", "1,32", "--steady", "3", "--json", str(out), "--quiet")
    assert p.returncode == 0, p.stderr
    assert "warmprof trace: DemoLM (1, 32)" in p.stdout
    data = json.loads(out.read_text())
    assert data["kind"] == "trace" and data["protocol"]["fresh_process"] is True
    assert data["protocol"]["cache"] == "fresh"
    assert not data["protocol"]["runtime_warm"]  # the child's first and only trace
    assert not any("caller's process" in n for n in data["notes"])  # fresh: nothing ran before it
    settings = data["settings"]
    assert (settings["fresh_process"], settings["cache"], settings["steady"]) == (True, "fresh", [3, 3])
    assert settings["threads"] >= 1 and settings["threads_set"] is False and settings["op_view"] is False


def test_trace_op_view_in_a_fresh_process_gives_module_op_rows(tmp_path):
    out = tmp_path / "ops.json"
    p = run_cli("trace", "--demo", "--shape", "1,32", "--steady", "3", "--op-view", "--json", str(out), "--quiet")
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    assert data["instruments"]["aten_ops"]["active"] is True
    ops = [w for w in data["unattributed_where"] if "op" in w]
    assert ops and all(w["op"].startswith("aten.") for w in ops)
    assert "unattributed sits in (module, op)" in p.stdout or data["unattributed_ms"] <= data["noise_band_ms"]


def test_trace_explain_from_the_cli_probes_with_the_controls_figures(tmp_path):
    f = tmp_path / "mlp.py"
    f.write_text("import torch\n"
                 "def build():\n"
                 "    return torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.GELU(), torch.nn.LayerNorm(40))\n")
    out = tmp_path / "explain.json"
    p = run_cli("trace", f"{f}:build", "--shape", "3,24", "--steady", "5", "--threads", "1", "--explain",
                "--explain-top", "1", "--json", str(out), "--quiet", timeout=1200)
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    notes = " ".join(data["notes"])
    assert "--explain: 1 op(s) probed" in notes or "--explain: nothing probed" in notes
    # the control measured warmprof's own first-pass cost and ran the other shape: no warm processes
    assert data["clean"]["other_shape"]["shape"] == [[4, 24]]
    assert data["own_cost"]["first_pass_ms"] is not None and "--explain: the same trace" not in notes
    acc = data["accounting"]  # the one accounting still holds with the probes' inferred causes in it
    assert data["attributed_ms"] + acc["run_to_run_ms"] + data["unattributed_ms"] == pytest.approx(data["excess_ms"])
    assert acc["causes_ms"] == pytest.approx(data["attributed_ms"])
    for c in data["causes"]:
        if c["source"] in ("probe", "warm_process", "warm_same_shape"):
            assert c["evidence"] == "inferred"
    settings = data["settings"]
    assert (settings["explain"], settings["explain_top"], settings["op_view"]) == (True, 1, True)
    assert (settings["threads"], settings["threads_set"]) == (1, True)


def test_trace_factory_from_a_file(tmp_path):
    f = tmp_path / "mymodel.py"
    f.write_text("import torch\ndef build():\n    return torch.nn.Sequential(torch.nn.Linear(8, 4))\n")
    p = run_cli("trace", f"{f}:build", "--shape", "2,8", "--steady", "3", "--in-process", "--quiet")
    assert p.returncode == 0, p.stderr
    assert "Sequential (2, 8) float32" in p.stdout


def test_traceback_reaches_the_fresh_process_and_shows_the_models_line(tmp_path):
    f = tmp_path / "wp_raising.py"
    f.write_text("import torch\n"
                 "class Raising(torch.nn.Module):\n"
                 "    def forward(self, x):\n"
                 "        raise ValueError('boom in forward')\n"
                 "def build():\n"
                 "    return Raising()\n")
    p = run_cli("--traceback", "trace", f"{f}:build", "--shape", "2,8", "--quiet")  # the default: a fresh child
    assert p.returncode == 4
    assert f'File "{f}", line 4, in forward' in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("warmprof: error: the model raised on the first pass")
    plain = run_cli("trace", f"{f}:build", "--shape", "2,8", "--quiet")
    assert plain.returncode == 4 and "Traceback" not in plain.stderr


def test_inputs_file_in_a_fresh_process(tmp_path):
    import torch

    f = tmp_path / "wp_lin.py"
    f.write_text("import torch\ndef build():\n    return torch.nn.Linear(8, 4)\n")
    torch.save((torch.randn(7, 8),), tmp_path / "in.pt")
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "warmprof", "trace", f"{f}:build", "--inputs", "in.pt", "--steady", "2",
                        "--quiet", "--json", str(out)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    assert data["inputs"] == {"args": [[7, 8]], "kwargs": {}} and data["protocol"]["fresh_process"] is True


@pytest.mark.parametrize("argv, code, message", [
    (["trace"], 2, "nothing to trace"),
    (["trace", "nomodule"], 2, "MODULE:FACTORY"),
    (["trace", "warmprof.traces.demo:build"], 2, "--shape (or --inputs) is required"),
    (["trace", "no_such_module_xyz:build", "--shape", "1,2", "--in-process"], 2, "cannot import"),
    (["trace", "--demo", "--shape", "1,0", "--in-process", "--quiet"], 2, "dimension 0"),
    (["trace", "--demo", "--device", "tpu", "--in-process", "--quiet"], 3, "unknown device"),
    (["trace", "--demo", "--explain", "--explain-top", "0"], 2, "--explain-top must be from 1 to 100"),
    (["trace", "--demo", "--explain", "--compile"], 2, "--explain is for eager models"),
])
def test_cli_errors_are_one_line_with_exit_codes(capsys, argv, code, message):
    assert main(argv) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("warmprof: error:") and message in err[-1]


def test_python_dash_m_help():
    p = run_cli("--help")
    assert p.returncode == 0 and "trace" in p.stdout and "compare" in p.stdout


@pytest.mark.parametrize("argv, target, mode", [
    (["trace", "--compile", "pkg.models:make", "--shape", "1,8"], "pkg.models:make", "default"),
    (["trace", "pkg.models:make", "--compile", "--shape", "1,8"], "pkg.models:make", "default"),
    (["trace", "--compile", "max-autotune", "pkg.models:make"], "pkg.models:make", "max-autotune"),
    (["trace", "--demo", "--compile", "reduce-overhead"], None, "reduce-overhead"),
])
def test_compile_with_no_mode_before_the_target_leaves_the_target_alone(argv, target, mode):
    from warmprof.cli import build_parser
    from warmprof.commands.trace import _target_taken_by_compile

    args = build_parser().parse_args(argv)
    _target_taken_by_compile(args)
    assert (args.target, args.compile) == (target, mode)


def test_repeat_runs_fresh_processes_into_one_report_that_show_and_compare_read(tmp_path):
    out, one = tmp_path / "r.json", tmp_path / "one.json"
    p = run_cli("trace", "--demo", "--shape", "1,32", "--steady", "3", "--repeat", "2", "--json", str(out), timeout=1200)
    assert p.returncode == 0, p.stderr
    assert "run 1/2: a fresh process" in p.stderr and "run 2/2: a fresh process" in p.stderr
    data = json.loads(out.read_text())
    assert data["kind"] == "trace_repeat" and len(data["runs"]) == 2
    assert all(r["protocol"]["fresh_process"] for r in data["runs"])
    # each run is its own process: each paid its own first pass (no runtime left warm by the other)
    assert not any(r["protocol"]["runtime_warm"] for r in data["runs"])
    shown = run_cli("show", str(out))
    assert shown.returncode == 0, shown.stderr
    assert "2 runs (each a fresh process)" in shown.stdout and "range (min-max)" in shown.stdout
    assert run_cli("trace", "--demo", "--shape", "1,32", "--steady", "3", "--json", str(one), "--quiet").returncode == 0
    c = run_cli("compare", str(out), str(one), "--label", "two", "one")
    assert c.returncode == 0, c.stderr
    assert "two: the median of 2 runs" in c.stdout


@pytest.mark.parametrize("extra, message", [
    (["--repeat", "0"], "repeat must be a whole number of runs"),
    (["--repeat", "2", "--in-process"], "--repeat runs each trace in a fresh process"),
    (["--repeat", "2", "--explain"], "--repeat does not go with --explain"),
])
def test_bad_repeats_are_one_line_errors(extra, message, capsys):
    assert main(["trace", "--demo", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_python_repeat_needs_the_model_by_name():
    import torch

    import warmprof
    from warmprof.errors import InputError

    with pytest.raises(InputError, match="name the model as `warmprof trace` takes it"):
        warmprof.trace(torch.nn.Linear(4, 4), (1, 4), repeat=3)
    with pytest.raises(InputError, match="repeat must be a whole number"):
        warmprof.trace("demo", (1, 4), repeat=0)


def test_python_trace_of_a_named_model_runs_it_in_a_fresh_process():
    import warmprof

    r = warmprof.trace("demo", (1, 16), steady=3, label="named")
    assert r.KIND == "trace" and r.model == "named" and r.protocol.run.fresh_process

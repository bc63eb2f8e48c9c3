"""warmprof run names oneDNN's primitive creations (issue 41: the first request's excess to causes): the
launcher turns oneDNN's creation timings on for the tree, each process's agent takes the lines out of its C
stdout, and each creation is a jit_compile span inside the call that made it; the user's output, C's and
Python's, is as without warmprof. An importlib.metadata scan in a first call is runtime_init of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from warmprof.report.run import RunReport

pytestmark = [pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN in this torch"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the C stdout tap needs glibc")]

SCRIPT = textwrap.dedent("""
    import ctypes, importlib.metadata
    import torch
    from torch import nn

    torch.set_num_threads(1)

    class Served(nn.Module):  # odd channel counts and sizes: primitives new to this process's oneDNN
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(7, 19, 3), nn.ReLU(), nn.Conv2d(19, 23, 5))
            self.plugins = None

        def forward(self, x):
            if self.plugins is None:  # a plugin lookup on the first call, as vLLM's first request makes
                self.plugins = importlib.metadata.entry_points(group="warmprof.test.plugins")
            return self.body(x)

    libc = ctypes.CDLL(None)
    m = Served()
    with torch.no_grad():
        for _ in range(5):
            m(torch.randn(1, 7, 45, 45))
    libc.printf(b"c printf says hi\\n")
    libc.fflush(None)
    print("served", flush=True)
""")


def _run(tmp_path, *extra, env=None):
    (tmp_path / "conv.py").write_text(SCRIPT)
    out = tmp_path / "run.json"
    e = dict(os.environ, TMPDIR=str(tmp_path), **(env or {}))
    for var in ("ONEDNN_VERBOSE", "DNNL_VERBOSE", "MKLDNN_VERBOSE"):
        if var not in (env or {}):
            e.pop(var, None)
    p = subprocess.run([sys.executable, "-m", "warmprof", "run", "--quiet", "--watch", "Served", *extra,
                        "--json", str(out), "--", sys.executable, "conv.py"],
                       cwd=tmp_path, env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return p, RunReport.load(out)


def test_onednn_creations_are_jit_compile_in_the_first_call_and_never_reach_the_output(tmp_path):
    p, r = _run(tmp_path)
    # the user's output as without warmprof: C's printf and Python's print, and none of oneDNN's lines
    assert "c printf says hi\n" in p.stdout and "served\n" in p.stdout, p.stdout[-2000:]
    assert "onednn_verbose" not in p.stdout and "dnnl_verbose" not in p.stdout, p.stdout[-2000:]
    main = r.root()
    made = main["onednn"]
    assert made["on"] and made["creations"] >= 2 and made["creation_ms"] > 0, made
    (first,) = [c for c in main["calls"] if c["label"] == "Served"]
    assert first["calls"] == 5
    causes = first["causes"]
    onednn = [c for c in causes if c["source"] == "onednn"]
    assert onednn and all(c["cause"] == "jit_compile" and c["evidence"] == "measured" for c in onednn), causes
    # oneDNN's own times, whole: all its creations were in the first call (one shape); a wait for a CPU or a
    # disk read inside a creation is carved out into its own cause, said as in onednn's span
    ours = sum(c["ms"] for c in causes if c["source"] in ("onednn", "storage_in:onednn", "run_queue_in:onednn"))
    assert ours == pytest.approx(made["creation_ms"], rel=0.10), (ours, made, causes)
    assert sum(c["count"] for c in onednn) == made["creations"], (onednn, made)
    # the plugin lookup: one metadata scan, runtime_init, measured
    scans = [c for c in causes if c["source"] == "python_metadata"]
    assert [(c["cause"], c["evidence"], c["count"]) for c in scans] == [("runtime_init", "measured", 1)], causes


def test_a_users_own_onednn_verbosity_is_kept_and_the_report_says_creations_went_untimed(tmp_path):
    p, r = _run(tmp_path, env={"ONEDNN_VERBOSE": "profile_create"})
    assert "onednn_verbose" in p.stdout and "create:cache_miss" in p.stdout, p.stdout[-2000:]  # theirs, as asked
    assert "onednn" not in r.root()
    assert any("oneDNN's primitive creations were not timed: ONEDNN_VERBOSE=profile_create is set (yours)" in n
               for n in r.notes), r.notes
    main = r.root()
    (first,) = [c for c in main["calls"] if c["label"] == "Served"]
    assert not [c for c in first["causes"] if c["source"] == "onednn"]


def test_no_onednn_leaves_the_tree_as_it_was(tmp_path):
    p, r = _run(tmp_path, "--no-onednn")
    assert "onednn_verbose" not in p.stdout and "c printf says hi\n" in p.stdout
    assert "onednn" not in r.root() and not any("oneDNN" in n for n in r.notes), r.notes

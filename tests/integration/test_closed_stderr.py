"""Issue 40: with stderr closed (`2>&-`) nothing warmprof means for stderr lands in stdout. Python starts
with sys.stderr None then, and print(file=None) writes to stdout; and the first descriptor opened (a dup
of stdout, a pipe) becomes fd 2, so stderr's writes, and a child process's whole stderr, went there."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

MODELS = """
import torch


def make():
    return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())


class Raises(torch.nn.Module):
    def forward(self, x):
        raise RuntimeError("boom")


def bad():
    return Raises()
"""


def without_stderr(*argv: str, cwd=None, timeout: float = 600) -> subprocess.CompletedProcess:
    """argv run by sh with fd 2 closed (`2>&-`), its stdout captured."""
    return subprocess.run(["sh", "-c", '"$@" 2>&-', "sh", *argv], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True, cwd=cwd, timeout=timeout)


def test_a_trace_from_the_cli_prints_only_its_report_on_stdout(tmp_path):
    (tmp_path / "models.py").write_text(MODELS)
    out = tmp_path / "r.json"
    p = without_stderr(sys.executable, "-m", "warmprof", "trace", "models.py:make", "--shape", "2,16", "--steady", "3",
                       "--json", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:]
    # the report's text alone: no progress line ("warmprof: first pass", the child's and the control's)
    assert p.stdout.startswith("warmprof trace: Sequential (2, 16) float32 on cpu"), p.stdout[:500]
    assert not [line for line in p.stdout.splitlines() if line.startswith("warmprof:")], p.stdout[:2000]
    assert json.loads(out.read_text())["shape"] == [2, 16]


def test_an_error_from_the_cli_leaves_stdout_empty(tmp_path):
    (tmp_path / "models.py").write_text(MODELS)
    p = without_stderr(sys.executable, "-m", "warmprof", "trace", "models.py:bad", "--shape", "2,16", cwd=tmp_path)
    assert p.returncode == 4 and p.stdout == ""
    usage = without_stderr(sys.executable, "-m", "warmprof", "trace", "--no-such-option")
    assert usage.returncode == 2 and usage.stdout == ""  # argparse's usage text goes to stderr too


def test_an_in_process_trace_with_progress_keeps_stdout_and_fd_2_as_they_were(tmp_path):
    """warmprof.trace(progress=True) in a process started with stderr closed: no progress line in
    stdout, and none of the tap's descriptors takes fd 2 while the passes run (writes meant for stderr
    would land in it)."""
    code = textwrap.dedent("""
        import os, torch, warmprof
        from warmprof.instruments import onednn

        seen = []

        def fd2():
            try:
                return os.readlink("/proc/self/fd/2")
            except OSError:
                return None

        class Looks(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(8, 8)

            def forward(self, x):
                seen.append(fd2())
                return self.lin(x)

        report = warmprof.trace(Looks(), (2, 8), steady=3, progress=True)
        assert report.to_dict()["instruments"]["onednn"]["active"]
        print("fd 2 in the passes:", sorted(set(map(str, seen))), "after:", fd2())
    """)
    p = without_stderr(sys.executable, "-c", code)
    assert p.returncode == 0, p.stdout[-2000:]
    assert p.stdout == "fd 2 in the passes: ['None'] after: None\n"

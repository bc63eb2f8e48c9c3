"""Issue 40: `warmprof watch --demo` compiled into inductor's default cache, a folder in TMPDIR that outlived
it (159 MB after the demo's 12 lengths). The demo now compiles into a temp folder of its own, removed at the
end, also on Ctrl-C and SIGTERM. Each run gets a fresh TMPDIR, which must be empty afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.slow  # the demo compiles 12 prompt lengths: minutes on a small CPU


def demo(tmpdir, **popen) -> subprocess.Popen:
    env = dict(os.environ, TMPDIR=str(tmpdir))
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TEMP", "TMP"):
        env.pop(var, None)
    # SIGINT at its default, as from a terminal's foreground (a shell starts a background job with it ignored,
    # and an ignored Ctrl-C is the caller's choice)
    return subprocess.Popen([sys.executable, "-m", "warmprof", "watch", "--demo", "--requests", "12", "--idle-at",
                             "-1", "--quiet"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **popen)


def everything_under(folder) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), folder) for d, dirs, files in os.walk(folder)
                  for n in dirs + files)


def test_a_whole_demo_leaves_tmpdir_as_it_was(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    (tmpdir / "theirs.txt").write_text("the user's")
    p = demo(tmpdir)
    out, err = p.communicate(timeout=1800)
    assert p.returncode == 0, err[-2000:]
    assert out.startswith("warmprof watch: demo LM (compiled, static shapes): 12 calls at 12 keys"), out[:500]
    assert everything_under(tmpdir) == ["theirs.txt"]


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 128 + signal.SIGTERM)])
def test_a_demo_stopped_while_it_compiles_removes_its_cache(tmp_path, sig, code):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    p = demo(tmpdir)
    try:
        deadline = time.monotonic() + 600
        while True:  # until inductor has written into the demo's own cache: compiling
            now = everything_under(tmpdir)
            if any(n.startswith("warmprof-watch-demo-") and "/inductor/" in n for n in now):
                break
            assert not [n for n in now if n.startswith("torchinductor_")], f"inductor's default cache in TMPDIR: {now[:5]}"
            assert p.poll() is None, p.communicate()[1][-2000:]
            assert time.monotonic() < deadline, now
            time.sleep(0.05)
        p.send_signal(sig)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == code, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    assert everything_under(tmpdir) == []

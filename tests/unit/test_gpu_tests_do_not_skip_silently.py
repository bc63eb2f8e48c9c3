"""tests/gpu on a machine that has a GPU but whose CUPTI cannot load: they fail with the reason
instead of skipping. Played here with a stand-in torch that reports a GPU, over this machine's
real warmprof (whose backends are off for want of a driver), in a child pytest."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import warmprof

TESTS = Path(__file__).resolve().parents[1]

FAKE_TORCH = '''
"""Stand-in: reports one CUDA GPU; everything else is a no-op."""
import types

__version__ = "0.0+fake"
cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 1, current_device=lambda: 0,
                             synchronize=lambda: None)


def zeros(*args, **kwargs):
    return None
'''


@pytest.mark.skipif(bool(warmprof.backends()["cupti"].get("path")), reason="a libcupti loads here: nothing to fail")
def test_a_gpu_machine_without_cupti_fails_the_cupti_tests_with_the_reason(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(textwrap.dedent(FAKE_TORCH))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider", "-k", "subscribe_measures or segment",
                        str(TESTS / "gpu")], cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=120)
    reason = warmprof.backends()["cupti"]["reason"]
    assert "2 failed" in p.stdout, p.stdout[-3000:]
    assert f"a CUDA GPU is present but CUPTI cannot work: {reason}" in p.stdout
    assert "skipped" not in p.stdout

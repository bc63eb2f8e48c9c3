"""Shared fixtures for every test suite."""

import os

import pytest

from warmprof import timeline


def _compile_callbacks() -> int:
    import sys

    if "torch._dynamo" not in sys.modules:
        return 0
    from warmprof.instruments.torch_compile import registered_callbacks

    return registered_callbacks()


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """A test that leaves a recording on, a dynamo callback registered or stdout redirected would
    skew every test after it (pyinstrument's habit)."""
    callbacks = _compile_callbacks()
    fd1 = os.fstat(1)
    yield
    assert not timeline.active(), "a warmprof recording was left active by this test"
    assert _compile_callbacks() == callbacks, "a dynamo compile callback was left registered"
    now = os.fstat(1)
    assert (now.st_dev, now.st_ino) == (fd1.st_dev, fd1.st_ino), "file descriptor 1 was left redirected"

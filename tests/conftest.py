"""Shared fixtures for every test suite."""

import pytest

from warmprof import timeline


@pytest.fixture(autouse=True)
def no_recording_left_active():
    """A test that leaves a recording on would skew every test after it (pyinstrument's habit)."""
    yield
    assert not timeline.active(), "a warmprof recording was left active by this test"

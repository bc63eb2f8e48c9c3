"""Fixtures of the native-module tests."""

import pytest

from warmprof import _native


@pytest.fixture
def recorder_capacity():
    """set(n): records per thread for this test; the previous capacity comes back after it."""
    previous = _native._testing.capacity()
    yield _native._testing.set_capacity
    _native._testing.set_capacity(previous)

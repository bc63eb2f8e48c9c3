"""Fixtures of the native-module tests."""

import pytest

from warmprof import _native


@pytest.fixture
def recorder_capacity():
    """set(n): records per thread for this test; the previous capacity comes back after it."""
    previous = _native.capacity()
    yield _native.set_capacity
    _native.set_capacity(previous)

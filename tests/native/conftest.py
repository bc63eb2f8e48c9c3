"""Fixtures of the native-module tests."""

import pytest

from warmprof import _native


@pytest.fixture
def recorder_capacity():
    """set(n): records per thread for this test; the previous capacity comes back after it."""
    previous = _native._testing.capacity()
    yield _native._testing.set_capacity
    _native._testing.set_capacity(previous)


@pytest.fixture
def every_boundary():
    """Module boundaries take the host counters at every call for this test (no gap); the default
    (a gap of 40 times the cheapest sample) comes back after it."""
    _native.set_boundary_gap_ns(0)
    yield
    _native.set_boundary_gap_ns(-1)

"""trace(..., device="cuda") on a machine without CUDA: a clear DeviceError, and nothing left running."""

from __future__ import annotations

import pytest

import warmprof
from warmprof import _native
from warmprof.errors import DeviceError, WarmprofError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")


def test_trace_on_cuda_refuses_with_the_reason():
    from warmprof.traces.demo import demo_model

    with pytest.raises(DeviceError) as info:
        warmprof.trace(demo_model(n_layers=1), (1, 8), device="cuda")
    assert isinstance(info.value, WarmprofError)
    message = str(info.value)
    assert "cuda" in message.lower()
    reason = warmprof.backends()["cuda_events"]["reason"]
    if reason:
        assert reason in message
    assert _native.cupti_active() is False

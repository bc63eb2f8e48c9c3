"""Bad input gets a clear WarmprofError and leaves nothing behind."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import warmprof
from warmprof.errors import DeviceError, InputError, ModelError, WarmprofError

from .helpers import Leftovers, RaisesOnSecond


def lin():
    return nn.Sequential(nn.Linear(8, 8))


def test_non_callable_model():
    with pytest.raises(InputError, match="callable"):
        warmprof.trace(42, (1, 8))


def test_shape_the_model_rejects_chains_its_own_error():
    model = lin()
    left = Leftovers(model)
    with pytest.raises(ModelError, match="first pass") as info:
        warmprof.trace(model, (1, 9))
    assert isinstance(info.value.__cause__, RuntimeError)
    left.check()


@pytest.mark.parametrize("shape", [(1, 0), (0,), (1, -3), (), "1,x", (1.5, 2)])
def test_zero_negative_or_malformed_dimensions(shape):
    with pytest.raises(InputError):
        warmprof.trace(lin(), shape)


@pytest.mark.parametrize("device, err", [("tpu", DeviceError), ("gpu", DeviceError), ("banana:3", DeviceError)])
def test_unknown_device(device, err):
    with pytest.raises(err) as info:
        warmprof.trace(lin(), (1, 8), device=device)
    message = str(info.value)
    assert f"unknown device {device!r}: use cpu, cuda, cuda:N or mps" == message  # not torch's list of every type


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_cuda_is_a_clear_error(device):
    with pytest.raises(DeviceError, match=f"device '{device}' requested but torch.cuda.is_available"):
        warmprof.trace(lin(), (1, 8), device=device)


def test_model_raising_only_on_second_pass():
    model = RaisesOnSecond()
    left = Leftovers(model)
    with pytest.raises(ModelError, match="second pass") as info:
        warmprof.trace(model, (2, 4))
    assert "second call fails" in str(info.value.__cause__)
    left.check()


def test_bad_options():
    with pytest.raises(InputError):
        warmprof.trace(lin(), (1, 8), dtype="float7")
    with pytest.raises(InputError):
        warmprof.trace(lin(), (1, 8), steady=0)
    with pytest.raises(InputError):
        warmprof.trace(lin(), (1, 8), inputs=torch.randn(1, 8))
    with pytest.raises(InputError):
        warmprof.trace(lin())


def test_every_error_warmprof_defines_is_a_warmprof_error():
    import inspect

    from warmprof import errors

    defined = [c for _, c in inspect.getmembers(errors, inspect.isclass)
               if issubclass(c, BaseException) and c.__module__ == errors.__name__]
    assert {InputError, DeviceError, ModelError} <= set(defined)
    assert all(issubclass(c, WarmprofError) for c in defined), defined  # one except clause catches them all


class ExitsOnCall(nn.Module):
    """sys.exit in the model's own forward, on its n-th call."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.calls = n, 0
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        self.calls += 1
        if self.calls == self.n:
            raise SystemExit(3)
        return self.lin(x)


@pytest.mark.parametrize("n, when", [(1, "on the first pass"), (2, "second pass"), (6, "steady passes")])
def test_sys_exit_in_the_model_is_the_models_error_and_leaves_nothing(n, when):
    """It ended the trace's process with the model's exit code and no report (`warmprof trace` then
    said only 'exited (status 0) without writing its report'); now it is a ModelError like any raise."""
    model = ExitsOnCall(n)
    left = Leftovers(model)
    with pytest.raises(ModelError, match=f"{when}.*SystemExit: 3"):
        warmprof.trace(model, (2, 4), steady=10)
    left.check()


def test_sys_exit_in_a_factory_is_its_error(tmp_path):
    from warmprof.traces.targets import load_target

    path = tmp_path / "exits.py"
    path.write_text("import sys\ndef make():\n    sys.exit(0)\n")
    with pytest.raises(InputError, match="the factory .*exits.py:make raised: SystemExit: 0"):
        load_target(f"{path}:make")
    path.write_text("import sys\nsys.exit(2)\n")
    with pytest.raises(InputError, match="cannot import .*SystemExit: 2"):
        load_target(f"{path}:make")

"""Unknown op, device or backend, a device that is not here, bad counts: each a clear WarmprofError."""

import os

import pytest

import warmprof
from warmprof import cli
from warmprof.errors import DeviceError, InputError, WarmprofError
from warmprof.probes.compile_env import config_value, restored_env


def _has_cuda():
    import torch

    return torch.cuda.is_available()


def _has_mps():
    import torch

    return hasattr(torch.backends, "mps") and torch.backends.mps.is_available()


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(ops=("matmul", "conv9d")), InputError, "unknown op 'conv9d'"),
    (dict(ops=()), InputError, "no ops"),
    (dict(ops=42), InputError, "list of op names"),
    (dict(device="tpu"), DeviceError, "unknown device 'tpu'"),
    (dict(device=3), DeviceError, "must be a string"),
    (dict(backend="jax"), InputError, "unknown backend 'jax'"),
    (dict(backend="compile", device="mps"), InputError, "runs on cpu or cuda"),
    (dict(backend="cupy", device="cpu"), InputError, "runs on cuda"),
    (dict(K=1), InputError, "K must be"),
    (dict(K=10, B=11), InputError, "B must be"),
    (dict(shapes_per_op=1), InputError, "shapes_per_op"),
    (dict(steady_calls=True), InputError, "steady_calls"),
    (dict(dtype="int64"), InputError, "floating dtype"),
    (dict(dtype="float99"), InputError, "unknown dtype"),
])
def test_bad_arguments_are_refused_before_any_probe_runs(kwargs, error, message):
    ops = kwargs.pop("ops", ("matmul",))
    with pytest.raises(error, match=message):
        warmprof.probe(ops, progress=False, **kwargs)


@pytest.mark.skipif("_has_cuda()", reason="a CUDA device is present here")
def test_a_cuda_device_that_is_not_present_is_a_device_error():
    with pytest.raises(DeviceError, match="cuda"):
        warmprof.probe(("matmul",), device="cuda", progress=False)


@pytest.mark.skipif("_has_mps()", reason="an MPS device is present here")
def test_an_mps_device_that_is_not_present_is_a_device_error():
    with pytest.raises(DeviceError, match="mps"):
        warmprof.probe(("matmul",), device="mps", progress=False)


def test_cupy_without_cupy_or_a_gpu_is_a_device_error():
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is installed here")
    except ImportError:
        pass
    with pytest.raises(DeviceError, match="CuPy"):
        warmprof.probe(("matmul",), device="cuda", backend="cupy", progress=False)


@pytest.mark.parametrize("argv, code", [
    (["probe", "--backend", "jax"], InputError.exit_code),
    (["probe", "--device", "tpu"], DeviceError.exit_code),
    (["probe", "--ops", "matmul", "fft"], InputError.exit_code),
    (["probe", "-K", "4", "-B", "9"], InputError.exit_code),
])
def test_the_cli_prints_one_line_and_exits_with_the_errors_code(argv, code, capsys):
    assert cli.main(argv) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warmprof: error: ")


def test_errors_are_warmprof_errors():
    assert issubclass(DeviceError, WarmprofError) and issubclass(InputError, WarmprofError)


def test_config_and_environment_come_back_even_when_the_block_raises():
    class Cfg:
        limit = 8

    os.environ.pop("WARMPROF_TEST_ENV", None)
    with pytest.raises(RuntimeError):
        with restored_env(("WARMPROF_TEST_ENV",)), config_value(Cfg, "limit", 64):
            os.environ["WARMPROF_TEST_ENV"] = "x"
            assert Cfg.limit == 64
            raise RuntimeError("boom")
    assert Cfg.limit == 8
    assert "WARMPROF_TEST_ENV" not in os.environ


@pytest.mark.parametrize("argv", [["probe", "--quiet"], ["probe", "--ops", "gelu", "layer_norm", "--quiet"]],
                         ids=["built-in", "aten"])
def test_timeout_stops_the_probe_with_124_and_leaves_nothing(argv, capsys, tmp_path, monkeypatch):
    """--timeout S bounds the whole probe (its per-op children too: --op-timeout is each op's own):
    exit 124, one line, no JSON, the threads, the environment and the temp folder as they were."""
    import signal
    import tempfile

    import torch

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    if "--ops" not in argv:
        # The built-in probe runs in this process and can finish inside 0.3 s (torch 2.9.1 here did): its
        # runtime warm-up is made to block, so the deadline is what ends it, on any machine. (The aten
        # probe's per-op children each import torch in a fresh interpreter: past 0.3 s by far.)
        import time

        from warmprof.probes.backends import TorchEager

        monkeypatch.setattr(TorchEager, "runtime_warmup", lambda self: time.sleep(600))
    env, threads = dict(os.environ), torch.get_num_threads()
    out = tmp_path / "p.json"
    assert cli.main([*argv, "--timeout", "0.3", "--json", str(out)]) == 124
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == "warmprof: error: warmprof probe ran past --timeout 0.3 s and was stopped; no report was written"
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert dict(os.environ) == env and torch.get_num_threads() == threads
    from warmprof.system.supervise import DEADLINE_SIGNAL

    assert signal.getsignal(DEADLINE_SIGNAL) in (signal.SIG_DFL, None)

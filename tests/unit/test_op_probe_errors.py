"""Bad input to the aten op probes: each a WarmprofError with a clear message, before any child runs."""

import pytest
from factories import ADD_CALL

import warmprof
from warmprof import cli
from warmprof.errors import DeviceError, InputError, ReportError


@pytest.mark.parametrize("calls, message", [
    ("conv9d", "no aten op named 'conv9d'"),
    ("layer_norm:64xx", "bad shape '64xx'"),
    ("gelu:0x4", "bad shape"),
    ("conv2d:3x4", "4-d main input"),
    ("sum", "not a pointwise op"),
    ("a.b.c.d", "not an op name"),
    ("", "no ops to probe"),
    (42, "op call specs or op names"),
    ({"args": []}, "needs an 'op' name"),
    (dict(ADD_CALL, op="aten.nope.default"), "no aten op named 'nope'"),
    (dict(ADD_CALL, args=[{"unsupported": "Generator"}]), "cannot replay"),
])
def test_bad_op_names_and_specs_are_input_errors(calls, message):
    with pytest.raises(InputError, match=message):
        warmprof.probe_ops(calls)


def test_unknown_names_say_what_the_probe_accepts():
    with pytest.raises(InputError, match=r"conv2d.*layer_norm.*pointwise"):
        warmprof.probe_ops("conv9d")


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(device="tpu"), DeviceError, "unknown device"),
    (dict(threads=0), InputError, "threads must be"),
    (dict(timeout_s=0), InputError, "timeout_s"),
])
def test_bad_options_are_refused(kwargs, error, message):
    with pytest.raises(error, match=message):
        warmprof.probe_ops("gelu", **kwargs)


def test_a_missing_from_file_is_a_report_error(tmp_path):
    with pytest.raises(ReportError, match="no such file"):
        warmprof.probe_from(tmp_path / "nope.json")


def test_a_corrupt_from_file_is_a_report_error(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"kind": "trace", "schema_version": 2, ')
    with pytest.raises(ReportError, match="invalid JSON"):
        warmprof.probe_from(path)


def test_a_probe_report_is_not_a_trace_report(tmp_path):
    from factories import op_probe_report

    path = op_probe_report().save(tmp_path / "ops.json")
    with pytest.raises(ReportError, match="not a trace report"):
        warmprof.probe_from(path)


def test_bad_top_is_refused(tmp_path):
    with pytest.raises(InputError, match="top must be"):
        warmprof.probe_from(tmp_path / "x.json", top=0)


@pytest.mark.parametrize("argv, message", [
    (["--ops", "matmul,gelu"], "mixes the built-in probe"),
    (["--ops", "conv9d"], "no aten op named 'conv9d'"),
    (["--ops", "layer_norm:64x"], "bad shape"),
    (["--ops", "gelu", "--backend", "compile"], "probed eager"),
    (["--from", "/nonexistent/r.json"], "no such file"),
])
def test_the_cli_prints_one_line_and_exits_nonzero(argv, message, capsys):
    assert cli.main(["probe", *argv]) != 0
    err = capsys.readouterr().err
    assert message in err and err.startswith("warmprof: error:") and len(err.strip().splitlines()) == 1


def test_the_cli_refuses_from_and_ops_together(tmp_path, capsys):
    from factories import trace_report_with_ops

    path = trace_report_with_ops().save(tmp_path / "t.json")
    assert cli.main(["probe", "--from", str(path), "--ops", "gelu"]) != 0
    assert "not both" in capsys.readouterr().err


def test_hostile_call_specs_are_refused_or_labelled_never_a_traceback():
    from warmprof import opspec

    for bad in ({"op": "aten.add.Tensor", "args": 5}, {"op": "aten.add.Tensor", "args": [1, "x"]},
                {"op": "aten.add.Tensor", "kwargs": [1]}, {"op": "aten.add.Tensor", "args": [{"list": {"a": 1}}]},
                {"op": "aten.add.Tensor", "args": [{"tensor": [2, -1], "dtype": "float32"}]},
                {"op": "aten.add.Tensor", "args": [{"tensor": [2, 2], "dtype": "float32", "stride": [1]}]}, 7, None):
        assert opspec.check(bad) != ""
        assert opspec.label(bad) == "(malformed call)"
        assert opspec.replayable(bad).startswith("malformed call spec")


def test_a_replay_over_the_size_cap_is_refused_before_anything_is_allocated():
    from warmprof import opspec

    huge = {"op": "aten.add.Tensor", "args": [{"tensor": [60000, 60000], "dtype": "float32"}] * 2, "kwargs": {}}
    assert "GiB" in opspec.replayable(huge)
    with pytest.raises(InputError, match="GiB"):
        opspec.build(huge, "cpu")


def test_a_broadcast_argument_replays_as_one():
    import torch

    from warmprof import opspec

    spec = {"op": "aten.add.Tensor", "args": [{"tensor": [4, 8], "dtype": "float32", "stride": [0, 1]},
                                              {"tensor": [4, 8], "dtype": "float32"}], "kwargs": {}}
    (a, b), _ = opspec.build(spec, "cpu")
    assert a.stride() == (0, 1) and a.untyped_storage().nbytes() == 8 * 4
    assert opspec.resolve_op(spec["op"])(a, b).shape == torch.Size([4, 8])


def test_a_trace_report_with_a_malformed_call_does_not_load(tmp_path):
    import json

    from factories import trace_report

    from warmprof.errors import ReportError
    from warmprof.report.base import load

    rep = trace_report({"jit_compile": 1.0})
    data = json.loads(rep.to_json())
    data["unattributed_where"] = [{"module": "M", "ms": 0.5, "op": "aten.add.Tensor", "call": {"op": "x", "args": 5}}]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReportError, match="unattributed_where\\[0\\].call"):
        load(path)

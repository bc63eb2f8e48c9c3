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

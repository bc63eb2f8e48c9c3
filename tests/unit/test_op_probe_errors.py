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
    # attributes of torch.ops.aten that are not ops ended in an AttributeError traceback
    ("__class__", "no aten op named '__class__'"),
    ("__init__", "no aten op named '__init__'"),
    ("aten.__class__.__init__", "no aten op named '__class__'"),
    ("aten.add.__call__", "no overload '__call__'"),
    ("gelu.__class__", "no overload '__class__'"),
    # a name's own shape past the cap: refused here, not in a child started for it
    ("layer_norm:100000x100000", "37.3 GiB, over the 2 GiB"),
    (dict(ADD_CALL, op="aten.__class__.__init__"), "no aten op named '__class__'"),
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


@pytest.mark.parametrize("value", ["0.5", "nan", "1e9"])
def test_the_op_timeout_is_named_as_the_option(value, capsys):
    assert cli.main(["probe", "--ops", "gelu", "--op-timeout", value]) == 2
    assert f"--op-timeout {float(value):g}: give seconds from 1 to 86400" in capsys.readouterr().err


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


SMALL = {"tensor": [1], "dtype": "float32"}


@pytest.mark.parametrize("spec", [
    # small inputs, 37 GiB asked for through size arguments or outputs: only the inputs were capped
    {"op": "aten.new_empty.default", "args": [SMALL, {"list": [{"value": 100000}, {"value": 100000}]}], "kwargs": {}},
    {"op": "aten.repeat.default", "args": [{"tensor": [1000], "dtype": "float32"}, {"list": [{"value": 10**7}]}],
     "kwargs": {}},
    {"op": "aten.mm.default", "args": [{"tensor": [100000, 1], "dtype": "float32"},
                                       {"tensor": [1, 100000], "dtype": "float32"}], "kwargs": {}},
], ids=["new_empty", "repeat", "mm"])
def test_a_call_whose_outputs_pass_the_cap_is_refused_before_any_child(spec, monkeypatch):
    from warmprof import opspec
    from warmprof.probes import aten

    monkeypatch.setattr(aten, "_Child", lambda *a, **k: pytest.fail("a child was started"))
    assert opspec.replayable(spec) == ""  # the inputs alone are small
    assert "37.3 GiB, over the 2 GiB" in opspec.allocation(spec)
    with pytest.raises(InputError, match="37.3 GiB"):
        warmprof.probe_ops([spec])


def test_an_op_without_a_meta_kernel_is_refused_a_huge_size_argument(monkeypatch):
    from warmprof import opspec

    def no_meta(spec, device):
        raise NotImplementedError("no meta kernel")

    monkeypatch.setattr(opspec, "build", no_meta)
    spec = {"op": "aten.new_empty.default", "args": [SMALL, {"list": [{"value": 10**9}]}], "kwargs": {}}
    assert "integer argument of 1,000,000,000" in opspec.allocation(spec)
    assert opspec.allocation(dict(spec, args=[SMALL, {"list": [{"value": 64}]}])) == ""
    # each size under the cap, their product (10^10 elements, 37 GiB of float32) far past it
    huge = dict(spec, args=[SMALL, {"list": [{"value": 100000}, {"value": 100000}]}])
    assert "whose product passes 16,777,216 (a size: at least 10,000,000,000 elements)" in opspec.allocation(huge)
    nested = dict(spec, args=[SMALL, {"list": [{"list": [{"value": 8192}, {"value": 8192}]}]}])
    assert "at least 67,108,864 elements" in opspec.allocation(nested)
    assert opspec.allocation(dict(spec, args=[SMALL, {"list": [{"value": 64}, {"value": 64}]}])) == ""
    # a hand-edited list of 600 sizes at the cap: refused with a figure, never a 4,300-digit integer
    many = dict(spec, args=[SMALL, {"list": [{"value": 1 << 24}] * 600}])
    assert "at least 281,474,976,710,656 elements" in opspec.allocation(many)
    empty = dict(spec, args=[SMALL, {"list": [{"value": 0}, {"value": 10**7}, {"value": 10**7}]}])
    assert opspec.allocation(empty) == ""  # a 0 in the size: an empty tensor


def test_the_new_shapes_past_the_cap_are_skipped_by_the_child():
    """The recorded call fits (1.5 GiB of output); its new shapes 1.5x and 1.75x larger would not: the
    parent lists them, the child drops them with the reason and runs none of them."""
    import torch

    from warmprof import opspec
    from warmprof.probes.aten import too_large_variants
    from warmprof.probes.aten_child import new_shapes
    from warmprof.probes.aten_variants import new_sizes, perturbations
    from warmprof.probes.backends import TorchEager

    big = {"op": "aten.mm.default", "args": [{"tensor": [20000, 1], "dtype": "float32"},
                                             {"tensor": [1, 20000], "dtype": "float32"}], "kwargs": {}}
    assert opspec.allocation(big) == ""
    skipped = too_large_variants(big)
    assert "leading dim of arg 0 (20000) in every tensor sharing it -> 30003" in skipped
    assert not any(s.endswith("-> 25001") for s in skipped)  # 1.9 GiB: within the cap
    small = {"op": "aten.mm.default", "args": [{"tensor": [8, 4], "dtype": "float32"},
                                               {"tensor": [4, 8], "dtype": "float32"}], "kwargs": {}}
    be = TorchEager(torch.device("cpu"), torch.float32)
    what, _, size = next(perturbations(small))
    first = f"{what} -> {new_sizes(size)[0]}"
    ran, dropped = new_shapes(be, torch.ops.aten.mm.default, small, 2, too_large={first})
    assert dropped[0] == f"{first}: over the 2 GiB a replay may allocate"
    assert all(not v["what"].startswith(first.rsplit(" -> ", 1)[0]) for v in ran)


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

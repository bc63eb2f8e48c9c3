"""Reports traced on the caller's inputs record every input's shape (and compare tells them apart);
model_dtype= casts the model, and a dtype mismatch says which way (issue 14)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import warmprof
from warmprof.errors import InputError, ModelError, ReportError
from warmprof.report import load


class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x, attention_mask=None):
        y = self.lin(x)
        return y if attention_mask is None else y * attention_mask[..., :1]


def kw(n):
    return {"x": torch.randn(n, 8), "attention_mask": torch.ones(n, 8)}


# --- 3. the inputs' shapes in the report ----------------------------------------------------------

def test_keyword_inputs_record_every_shape_not_none():
    r = warmprof.trace(Masked(), inputs=kw(2), steady=2)
    assert r.shape is None  # `shape` is the first positional input's: there is none
    assert r.inputs == {"args": [], "kwargs": {"x": [2, 8], "attention_mask": [2, 8]}}
    assert r.dtype == "float32"
    assert r.protocol.input == "caller's inputs: x=[2, 8], attention_mask=[2, 8]"


def test_the_text_header_and_the_compare_legend_name_every_input_shape():
    from warmprof.render.format import subject

    r = warmprof.trace(Masked(), inputs=kw(2), steady=2)
    assert str(r).splitlines()[0].startswith("warmprof trace: Masked (x=[2, 8], attention_mask=[2, 8]) float32 on cpu")
    assert subject(r) == "Masked (x=[2, 8], attention_mask=[2, 8]) float32"


def test_positional_inputs_and_non_tensors_by_position():
    r = warmprof.trace(lambda x, scale, m: (x * scale) @ m, inputs=(torch.ones(2, 3), 2.0, torch.ones(3, 5)),
                       steady=2)
    assert r.inputs == {"args": [[2, 3], None, [3, 5]], "kwargs": {}}
    from warmprof.report.trace import inputs_label

    assert inputs_label(r.inputs) == "[2, 3], -, [3, 5]"


def test_a_trace_from_a_shape_has_no_inputs_field_in_its_json(tmp_path):
    r = warmprof.trace(nn.Linear(8, 4), (2, 8), steady=2)
    assert r.inputs is None and "inputs" not in r.to_dict()


def test_inputs_survive_save_and_load(tmp_path):
    r = warmprof.trace(Masked(), inputs=kw(3), steady=2)
    back = load(r.save(tmp_path / "r.json"))
    assert back.inputs == {"args": [], "kwargs": {"x": [3, 8], "attention_mask": [3, 8]}}


@pytest.mark.parametrize("bad, where", [
    ({"args": [[1, 2]]}, "inputs: missing key 'kwargs'"),
    ({"args": [[1, -2]], "kwargs": {}}, "inputs.args[0][1]"),
    ({"args": [], "kwargs": {"m": "1x2"}}, "inputs.kwargs['m']"),
    ("[1, 128]", "inputs: expected an object"),
])
def test_a_malformed_inputs_field_is_refused_on_load(tmp_path, bad, where):
    r = warmprof.trace(Masked(), inputs=kw(2), steady=2)
    data = r.to_dict()
    data["inputs"] = bad
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(data))
    with pytest.raises(ReportError, match=where.replace("[", r"\[").replace("]", r"\]")):
        load(f)


def test_compare_text_tells_two_keyword_input_shapes_apart():
    a = warmprof.trace(Masked(), inputs=kw(2), steady=2)
    b = warmprof.trace(Masked(), inputs=kw(6), steady=2)
    text = str(warmprof.compare(a, b, labels=["short", "long"]))
    # before: neither report had any shape (shape None), so the comparison showed none
    assert "x=[2, 8], attention_mask=[2, 8]" in text
    assert "x=[6, 8], attention_mask=[6, 8]" in text
    assert "input shapes differ" in text


def test_compare_tells_apart_inputs_whose_first_shape_is_the_same():
    def f(x, m):
        return x @ m

    a = warmprof.trace(f, inputs=(torch.ones(2, 3), torch.ones(3, 4)), steady=2)
    b = warmprof.trace(f, inputs=(torch.ones(2, 3), torch.ones(3, 9)), steady=2)
    assert a.shape == b.shape == [2, 3]
    warnings = warmprof.compare(a, b, labels=["A", "B"]).warnings
    assert any("input shapes differ (A: [2, 3], [3, 4]; B: [2, 3], [3, 9])" in w for w in warnings)


def test_compare_of_equal_inputs_has_no_input_warning():
    a = warmprof.trace(Masked(), inputs=kw(2), steady=2)
    b = warmprof.trace(Masked(), inputs=kw(2), steady=2)
    assert not [w for w in warmprof.compare(a, b).warnings if "input" in w]


# --- 4. model_dtype= and the dtype mismatch --------------------------------------------------------

def test_dtype_alone_names_the_mismatch_and_model_dtype():
    with pytest.raises(ModelError) as info:
        warmprof.trace(nn.Linear(8, 4), (2, 8), dtype="bfloat16", steady=2)
    message = str(info.value)
    # before: only torch's "mat1 and mat2 must have the same dtype ..."
    assert "the model's weights are float32 but the inputs were cast to bfloat16" in message
    assert "model_dtype=bfloat16 (--model-dtype bfloat16)" in message
    assert isinstance(info.value.__cause__, RuntimeError)


def test_model_dtype_casts_the_floating_weights_and_buffers():
    class WithBuffers(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 4)
            self.register_buffer("scale", torch.ones(4))
            self.register_buffer("steps", torch.zeros(1, dtype=torch.int64))

        def forward(self, x):
            return self.lin(x) * self.scale

    model = WithBuffers()
    r = warmprof.trace(model, (2, 8), dtype="bfloat16", model_dtype="bfloat16", steady=2)
    assert r.dtype == "bfloat16"
    assert model.lin.weight.dtype == model.scale.dtype == torch.bfloat16
    assert model.steps.dtype == torch.int64  # integer buffers are left alone
    assert any("cast to bfloat16 before the trace (model_dtype=" in n for n in r.notes)


def test_model_dtype_without_dtype_names_the_other_way():
    with pytest.raises(ModelError, match=r"the model was cast to bfloat16 \(model_dtype=, --model-dtype\) but the "
                                         r"inputs are float32: pass dtype=bfloat16"):
        warmprof.trace(nn.Linear(8, 4), (2, 8), model_dtype="bfloat16", steady=2)


def test_model_dtype_with_the_callers_inputs_says_to_give_them_in_that_dtype_not_dtype():
    with pytest.raises(ModelError, match=r"but the inputs given are float32: give the inputs as bfloat16") as e:
        warmprof.trace(nn.Linear(8, 4), inputs=(torch.randn(2, 8),), model_dtype="bfloat16", steady=2)
    assert "--dtype" not in str(e.value)  # refused with inputs: never suggested


@pytest.mark.parametrize("value", ["int8", "float7", 3, torch.int64, torch.float8_e4m3fn])
def test_a_bad_model_dtype_is_refused_before_anything_runs(value):
    model = nn.Linear(8, 4)
    with pytest.raises(InputError, match="model_dtype .* is not a dtype warmprof casts a model to: give one of "
                                         "bfloat16, float16, float32, float64"):
        warmprof.trace(model, (2, 8), model_dtype=value)
    assert model.weight.dtype == torch.float32


def test_model_dtype_of_a_plain_function_is_refused():
    with pytest.raises(InputError, match="model_dtype casts an nn.Module"):
        warmprof.trace(lambda x: x * 2, (2, 8), model_dtype="float16")


def test_model_dtype_on_the_command_line(capsys, tmp_path):
    from warmprof import cli

    f = tmp_path / "wp_lin.py"
    f.write_text("import torch\ndef build():\n    return torch.nn.Linear(8, 4)\n")
    out = tmp_path / "r.json"
    assert cli.main(["trace", f"{f}:build", "--shape", "2,8", "--dtype", "bf16", "--model-dtype", "bf16",
                     "--steady", "2", "--in-process", "--quiet", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["dtype"] == "bfloat16"
    capsys.readouterr()
    assert cli.main(["trace", f"{f}:build", "--shape", "2,8", "--dtype", "bfloat16", "--in-process", "--quiet"]) == 4
    assert "(--model-dtype bfloat16)" in capsys.readouterr().err
    assert cli.main(["trace", f"{f}:build", "--shape", "2,8", "--model-dtype", "int8", "--in-process"]) == 2
    assert "--model-dtype 'int8': give a floating dtype (bfloat16, float16, float32, float64)" in capsys.readouterr().err

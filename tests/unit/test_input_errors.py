"""Bad input to trace/probe (compile, steady, inputs, dtype, output paths, file targets): a clear
WarmprofError of the right kind, raised before any work is done, and nothing left behind."""

from __future__ import annotations

import functools
import sys

import pytest
import torch
from torch import nn

import warmprof
from warmprof import cli
from warmprof.commands.trace import load_target
from warmprof.errors import InputError, WarmprofError


def lin():
    return nn.Sequential(nn.Linear(8, 8))


def embed(vocab=1000):
    return nn.Sequential(nn.Embedding(vocab, 8), nn.Linear(8, 4))


@pytest.fixture
def no_compile(monkeypatch):
    """Fails the test if torch.compile is reached: a bad compile value is refused before it."""

    @functools.wraps(torch.compile)  # keeps torch.compile's signature, which the check reads
    def refuse(*a, **k):
        raise AssertionError("torch.compile was called for a compile value that should have been refused")

    monkeypatch.setattr(torch, "compile", refuse)


def last_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "nothing on stderr"
    return err[-1]


# --- compile ---------------------------------------------------------------------------------

@pytest.mark.parametrize("compile, message", [
    ("bogus", "unknown torch.compile mode 'bogus'"),
    ({"mode": "bogus"}, "unknown torch.compile mode 'bogus'"),
    ({"bogus_key": 1}, "unknown torch.compile option 'bogus_key'"),
    ({"max_autotune": True}, "compile={'options': {'max_autotune': True}}"),
    ({"options": {"no_such_inductor_option": True}}, "unknown inductor option 'no_such_inductor_option'"),
    ({"options": "max_autotune"}, "options must be a dict"),
    ({"mode": "max-autotune", "options": {"max_autotune": True}}, "not both"),
    (3.5, "compile must be"),
])
def test_bad_compile_is_refused_before_any_compile(no_compile, compile, message):
    with pytest.raises(InputError) as info:
        warmprof.trace(lin(), (1, 8), compile=compile)
    assert message in str(info.value)


def test_bad_compile_mode_names_the_allowed_modes(no_compile):
    with pytest.raises(InputError) as info:
        warmprof.trace(lin(), (1, 8), compile="bogus")
    for mode in torch._inductor.list_mode_options():
        assert mode in str(info.value)


def test_bad_compile_on_the_command_line(no_compile, capsys):
    assert cli.main(["trace", "--demo", "--shape", "1,8", "--compile", "bogus", "--in-process", "--quiet"]) == 2
    line = last_error_line(capsys)
    assert line.startswith("warmprof: error:") and "unknown torch.compile mode 'bogus'" in line


@pytest.mark.parametrize("compile, label", [
    (True, "default"),
    ("default", "default"),
    ("max-autotune", "max-autotune"),
    ({}, "default"),
    ({"mode": "reduce-overhead"}, "reduce-overhead"),
    ("", "default"),  # torch.compile takes an empty mode as the default
    ({"mode": "default", "options": None}, "default"),  # None is torch's own default for a key
    ({"fullgraph": True, "backend": "eager"}, "backend=eager, fullgraph=True"),
    ({"options": {"triton.cudagraphs": False, "max_autotune": True}, "dynamic": False},
     "dynamic=False, options(max_autotune=True, triton.cudagraphs=False)"),
])
def test_compile_label_is_faithful_and_sorted(compile, label):
    from warmprof.traces.compile_options import check_compile, compile_label

    check_compile(compile)  # every value here is one torch.compile accepts
    assert compile_label(compile) == label


@pytest.mark.parametrize("first", [
    pytest.param(lambda: torch.nested.nested_tensor([torch.randn(2, 4), torch.randn(3, 4)]), id="nested"),
    pytest.param(lambda: type("NoShape", (), {"shape": None})(), id="shape-None"),
    pytest.param(lambda: type("Named", (), {"shape": ("batch", "seq")})(), id="named-dims"),
])
def test_a_first_input_without_a_plain_shape_records_none(first):
    from warmprof.traces.api import _shape_of

    assert _shape_of(first()) is None
    assert _shape_of(torch.zeros(2, 3)) == [2, 3] and _shape_of(torch.tensor(1.0)) == []


def test_report_records_a_compile_options_dict():
    # backend="eager": dynamo traces, nothing is code-generated, so this stays fast.
    r = warmprof.trace(lin(), (1, 8), compile={"backend": "eager", "fullgraph": True}, steady=2)
    assert r.compile == "backend=eager, fullgraph=True"


# --- steady ----------------------------------------------------------------------------------

@pytest.mark.parametrize("steady", [(5,), (1, 2, 3), "5", "5,10", -1, 0, (0, 5), (6, 5), (1.5, 3), 2.0, True,
                                    (True, 3), None, {"min": 1}, 2**64, (1, 2**64 + 3), (1, 100_001)])
def test_malformed_steady(steady):
    with pytest.raises(InputError, match=r"steady must be a positive int N or a \(min, max\) pair") as info:
        warmprof.trace(lin(), (1, 8), steady=steady)
    assert repr(steady) in str(info.value)


def test_steady_as_a_list_pair_is_accepted():
    r = warmprof.trace(lin(), (1, 8), steady=[2, 3])
    assert 2 <= r.steady_passes <= 3


# --- inputs= callable ------------------------------------------------------------------------

def test_inputs_callable_that_raises_is_an_input_error_chained():
    def make():
        raise KeyError("no such batch")

    with pytest.raises(InputError, match="inputs= callable raised: KeyError") as info:
        warmprof.trace(lin(), inputs=make)
    assert isinstance(info.value.__cause__, KeyError)


def test_inputs_callable_raising_a_warmprof_error_passes_through():
    def make():
        raise InputError("mine")

    with pytest.raises(InputError, match="^mine$"):
        warmprof.trace(lin(), inputs=make)


# --- integer dtype too narrow for the vocabulary --------------------------------------------

@pytest.mark.parametrize("dtype, vocab", [("uint8", 1000), ("int8", 200), ("int16", 40000)])
def test_integer_dtype_too_narrow_for_the_vocab(dtype, vocab):
    with pytest.raises(InputError) as info:
        warmprof.trace(embed(vocab), (1, 4), dtype=dtype)
    msg = str(info.value)
    assert dtype in msg and str(vocab - 1) in msg and "int64" in msg


class CastsIds(nn.Module):
    """Embedding first, but takes ids of any integer dtype (casts them itself)."""

    def __init__(self, vocab):
        super().__init__()
        self.tok = nn.Embedding(vocab, 8)

    def forward(self, x):
        return self.tok(x.long())


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_narrow_integer_dtype_that_fits_the_vocab_works(dtype):
    r = warmprof.trace(CastsIds(100), (1, 4), dtype=dtype, steady=2)
    assert r.dtype == dtype


def test_uint8_demo_on_the_command_line_is_one_line(capsys):
    assert cli.main(["trace", "--demo", "--shape", "1,8", "--dtype", "uint8", "--in-process", "--quiet"]) == 2
    line = last_error_line(capsys)
    assert line.startswith("warmprof: error:") and "uint8" in line and "4095" in line


# --- output paths: checked before the trace or probe runs -----------------------------------

@pytest.fixture
def nothing_runs(monkeypatch):
    """Fails the test if a trace, a probe or a child process starts."""

    def refuse(*a, **k):
        raise AssertionError("the work started although the output path is unusable")

    import warmprof.probes
    from warmprof.commands import trace as trace_cmd

    monkeypatch.setattr(warmprof, "trace", refuse)
    monkeypatch.setattr(warmprof.probes, "probe", refuse)
    monkeypatch.setattr(trace_cmd, "_run_child", refuse)


def _bad_paths(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    return {
        "missing": (tmp_path / "no_such_dir" / "r.json", "does not exist"),
        "parent_is_file": (tmp_path / "afile" / "r.json", "is not a directory"),
        "is_dir": (tmp_path / "adir", "is a directory"),
    }


@pytest.mark.parametrize("case", ["missing", "parent_is_file", "is_dir"])
@pytest.mark.parametrize("argv", [
    ["trace", "--demo", "--in-process", "--quiet"],
    ["trace", "--demo", "--quiet"],  # fails before the child process is started
    ["probe", "--quiet"],
])
def test_unusable_json_path_fails_up_front(nothing_runs, capsys, tmp_path, argv, case):
    path, message = _bad_paths(tmp_path)[case]
    assert cli.main([*argv, "--json", str(path)]) == 2
    line = last_error_line(capsys)
    assert line.startswith("warmprof: error: --json") and message in line and str(path) in line


@pytest.mark.parametrize("argv", [
    ["trace", "--demo", "--in-process", "--quiet", "--json", ""],
    ["trace", "--demo", "--quiet", "--json", ""],
    ["probe", "--quiet", "--json", ""],
    ["show", "r.json", "-o", ""],
    ["compare", "a.json", "b.json", "--png", ""],
])
def test_an_empty_output_path_is_refused_not_skipped(nothing_runs, capsys, argv):
    assert cli.main(argv) == 2
    assert "needs a file path, got an empty one" in last_error_line(capsys)


def test_unwritable_json_dir_fails_up_front(nothing_runs, capsys, tmp_path, monkeypatch):
    import os

    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if str(p) == str(tmp_path) else real_access(p, mode, **k))
    assert cli.main(["trace", "--demo", "--in-process", "--quiet", "--json", str(tmp_path / "r.json")]) == 2
    assert "is not writable" in last_error_line(capsys)


# --- file.py:FACTORY targets ----------------------------------------------------------------

@pytest.fixture
def model_dir(tmp_path):
    """A model file importing a sibling module; the sibling is dropped from sys.modules afterwards."""
    (tmp_path / "wp_sibling_layers.py").write_text(
        "import torch\ndef head():\n    return torch.nn.Linear(8, 4)\n")
    (tmp_path / "wp_model_file.py").write_text(
        "import torch\nfrom wp_sibling_layers import head\n"
        "def build():\n    return torch.nn.Sequential(torch.nn.Linear(8, 8), head())\n"
        "def lazy():\n    from wp_sibling_layers import head as h\n    return h()\n"
        "def broken():\n    raise ValueError('factory fails')\n")
    yield tmp_path
    sys.modules.pop("wp_sibling_layers", None)


@pytest.mark.parametrize("factory", ["build", "lazy"])
def test_file_target_importing_a_sibling_works_and_restores_sys_path(model_dir, factory):
    before = list(sys.path)
    model = load_target(f"{model_dir / 'wp_model_file.py'}:{factory}")
    assert isinstance(model, nn.Module)
    assert sys.path == before


@pytest.mark.parametrize("factory, message", [("broken", "raised: ValueError"), ("nothere", "no callable")])
def test_file_target_errors_restore_sys_path(model_dir, factory, message):
    before = list(sys.path)
    with pytest.raises(InputError, match=message):
        load_target(f"{model_dir / 'wp_model_file.py'}:{factory}")
    assert sys.path == before


def test_file_target_failing_on_import_restores_sys_path(tmp_path):
    f = tmp_path / "wp_bad_import.py"
    f.write_text("import wp_no_such_module_anywhere\n")
    before = list(sys.path)
    with pytest.raises(InputError, match="cannot import") as info:
        load_target(f"{f}:build")
    assert isinstance(info.value.__cause__, ImportError)
    assert sys.path == before


def test_all_new_refusals_are_warmprof_errors():
    assert issubclass(InputError, WarmprofError)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.qint8])
def test_a_dtype_warmprof_cannot_draw_random_inputs_of_is_a_one_line_input_error(dtype):
    with pytest.raises(InputError, match="cannot make a random .* input .*pass your own tensors with inputs=") as info:
        warmprof.trace(torch.nn.Identity(), (1, 4), dtype=dtype, steady=2)
    assert "\n" not in str(info.value)


def test_complex_inputs_are_drawn_like_floats():
    r = warmprof.trace(torch.nn.Identity(), (1, 4), dtype=torch.complex64, steady=2)
    assert r.dtype == "complex64" and r.shape == [1, 4]

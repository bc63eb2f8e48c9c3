"""The trace command's inputs (issue 14): one --shape per trace, real inputs with --inputs FILE.pt or
MODULE:FACTORY, a missing factory that lists what the file defines, and --traceback."""

from __future__ import annotations

import json
import sys
import time

import pytest
import torch

from warmprof import cli
from warmprof.commands.trace import load_target
from warmprof.errors import InputError

MODEL_FILE = """\
import torch
from os.path import join  # imported: not one of the file's own callables


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x, attention_mask=None):
        y = self.lin(x)
        if attention_mask is not None:
            y = y * attention_mask[..., :1]
        return y


def build():
    return Net()


def kw_inputs():
    return {"x": torch.randn(3, 8), "attention_mask": torch.ones(3, 8)}


def no_tensor():
    return "hello"


def fails():
    raise KeyError("no batch")


class Raising(torch.nn.Module):
    def forward(self, x):
        raise ValueError("boom in forward")


def raising():
    return Raising()


_private = 3
NOT_CALLABLE = 5
"""


@pytest.fixture
def model_file(tmp_path):
    f = tmp_path / "wp_inputs_model.py"
    f.write_text(MODEL_FILE)
    return f


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fails the test if a trace or a child process starts."""
    import warmprof
    from warmprof.commands import trace as trace_cmd

    def refuse(*a, **k):
        raise AssertionError("the trace started although the command line should have been refused")

    monkeypatch.setattr(warmprof, "trace", refuse)
    monkeypatch.setattr(trace_cmd, "_run_child", refuse)


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "nothing on stderr"
    assert err[-1].startswith("warmprof: error:")
    return err[-1]


# --- 1. one --shape per trace ------------------------------------------------------------------

def test_a_second_shape_is_refused_not_silently_kept(nothing_runs, capsys):
    # before: argparse kept the last --shape and the trace ran at 1,4 only
    assert cli.main(["trace", "--demo", "--shape", "1,8", "--shape", "1,4", "--in-process", "--quiet"]) == \
        InputError.exit_code
    line = error_line(capsys)
    assert "--shape given 2 times ('1,8' and '1,4')" in line
    assert "one `warmprof trace` per shape" in line and "warmprof compare" in line


def test_a_second_inputs_is_refused(nothing_runs, capsys, model_file, tmp_path):
    a = tmp_path / "a.pt"
    torch.save(torch.randn(1, 8), a)
    assert cli.main(["trace", f"{model_file}:build", "--inputs", str(a), "--inputs", str(a), "--in-process"]) == 2
    assert "--inputs given 2 times" in error_line(capsys)


# --- 2. --inputs FILE.pt and MODULE:FACTORY ------------------------------------------------------

def _trace_json(capsys, tmp_path, *argv) -> dict:
    out = tmp_path / "r.json"
    code = cli.main(["trace", *argv, "--steady", "2", "--in-process", "--quiet", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    return json.loads(out.read_text())


def test_inputs_file_with_positional_tensors(capsys, model_file, tmp_path):
    f = tmp_path / "pos.pt"
    torch.save((torch.randn(5, 8),), f)
    data = _trace_json(capsys, tmp_path, f"{model_file}:build", "--inputs", str(f))
    assert data["shape"] == [5, 8] and data["dtype"] == "float32"
    assert data["inputs"] == {"args": [[5, 8]], "kwargs": {}}
    assert data["protocol"]["input"] == "caller's inputs: [5, 8]"


def test_inputs_file_with_keyword_tensors(capsys, model_file, tmp_path):
    f = tmp_path / "kw.pt"
    torch.save({"x": torch.randn(2, 8), "attention_mask": torch.ones(2, 8)}, f)
    data = _trace_json(capsys, tmp_path, f"{model_file}:build", "--inputs", str(f))
    assert data["inputs"] == {"args": [], "kwargs": {"x": [2, 8], "attention_mask": [2, 8]}}
    assert data["dtype"] == "float32"  # the first keyword argument's


def test_inputs_from_a_factory(capsys, model_file, tmp_path):
    before = list(sys.path)
    data = _trace_json(capsys, tmp_path, f"{model_file}:build", "--inputs", f"{model_file}:kw_inputs")
    assert data["inputs"]["kwargs"] == {"x": [3, 8], "attention_mask": [3, 8]}
    assert sys.path == before


def test_inputs_with_the_demo(capsys, tmp_path):
    f = tmp_path / "ids.pt"
    torch.save(torch.randint(0, 100, (1, 12)), f)
    data = _trace_json(capsys, tmp_path, "--demo", "--inputs", str(f))
    assert data["shape"] == [1, 12] and data["inputs"] == {"args": [[1, 12]], "kwargs": {}}


def _saved(tmp_path, name, value=None, raw=None):
    f = tmp_path / name
    if raw is not None:
        f.write_bytes(raw)
    else:
        torch.save(value, f)
    return str(f)


class Stored:  # a class torch.load(weights_only=True) will not unpickle
    pass


@pytest.mark.parametrize("make, message", [
    (lambda d: str(d / "missing.pt"), "missing.pt: no such file"),
    (lambda d: str(d), "is a directory"),
    (lambda d: _saved(d, "garbage.pt", raw=b"not a torch file at all"), "cannot read it as a torch.save file"),
    (lambda d: _saved(d, "cut.pt", raw=b"PK\x03\x04" + b"\0" * 40), "cannot read it as a torch.save file"),
    (lambda d: _saved(d, "str.pt", "hello"), "the file holds a str: give a tensor, a tuple or list"),
    (lambda d: _saved(d, "int.pt", 7), "the file holds a int"),
    (lambda d: _saved(d, "keys.pt", {1: torch.ones(2)}), "a dict with the key 1"),
    (lambda d: _saved(d, "empty.pt", [1, 2]), "a list that holds no tensor"),
    (lambda d: _saved(d, "obj.pt", Stored()), "which torch.load(weights_only=True) does not unpickle"),
], ids=["missing", "directory", "garbage", "truncated-zip", "str", "int", "int-key", "no-tensor", "object"])
def test_bad_inputs_files_are_one_line_input_errors(capsys, model_file, tmp_path, make, message):
    before = list(sys.path)
    code = cli.main(["trace", f"{model_file}:build", "--inputs", make(tmp_path), "--in-process", "--quiet"])
    assert code == InputError.exit_code
    line = error_line(capsys)
    assert message in line and "--inputs" in line
    assert sys.path == before


@pytest.mark.parametrize("factory, message", [
    ("no_tensor", "the factory returned a str"),
    ("fails", "the factory raised: KeyError"),
    ("nope", "has no callable 'nope'; the callables it defines: Net, build"),
])
def test_bad_inputs_factories(capsys, model_file, factory, message):
    before = list(sys.path)
    code = cli.main(["trace", f"{model_file}:build", "--inputs", f"{model_file}:{factory}", "--in-process", "--quiet"])
    assert code == InputError.exit_code
    assert message in error_line(capsys)
    assert sys.path == before


@pytest.mark.parametrize("extra, message", [
    (["--shape", "1,8"], "give either --shape"),
    (["--dtype", "bfloat16"], "--inputs are used as they are"),
])
def test_inputs_refuses_shape_and_dtype(nothing_runs, capsys, model_file, tmp_path, extra, message):
    f = _saved(tmp_path, "a.pt", torch.ones(1, 8))
    assert cli.main(["trace", f"{model_file}:build", "--inputs", f, *extra, "--in-process"]) == 2
    assert message in error_line(capsys)


def test_a_missing_inputs_file_is_refused_before_the_child_starts(nothing_runs, capsys, model_file):
    assert cli.main(["trace", f"{model_file}:build", "--inputs", "no_such_inputs.pt"]) == 2
    assert "no such file" in error_line(capsys)


def test_the_child_gets_the_inputs_file_by_its_absolute_path(model_file, tmp_path, monkeypatch):
    from warmprof.cli import build_parser
    from warmprof.commands.trace import _child_argv, _one_each

    torch.save(torch.ones(1, 8), tmp_path / "rel.pt")
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["trace", f"{model_file}:build", "--inputs", "rel.pt", "--model-dtype",
                                      "bfloat16", "--traceback"])
    _one_each(args)
    argv = _child_argv(args)
    assert f"--inputs={tmp_path / 'rel.pt'}" in argv
    assert "--model-dtype=bfloat16" in argv and "--traceback" in argv


def test_python_trace_refuses_dtype_with_inputs():
    import warmprof

    with pytest.raises(InputError, match="inputs= are used as they are"):
        warmprof.trace(torch.nn.Linear(8, 4), inputs=torch.ones(1, 8), dtype="bfloat16")


# --- 5. a missing factory lists what the file defines ------------------------------------------

def test_a_missing_factory_lists_the_files_callables(model_file):
    with pytest.raises(InputError) as info:
        load_target(f"{model_file}:nope")
    message = str(info.value)
    # before: "'.../wp_inputs_model.py' has no callable 'nope'" and nothing else
    assert "has no callable 'nope'; the callables it defines: Net, build, kw_inputs, no_tensor, fails, Raising, " \
           "raising" in message
    for imported_or_private in ("join", "torch", "_private", "NOT_CALLABLE"):
        assert imported_or_private not in message.split("defines:")[1]


def test_a_factory_name_that_is_not_callable_says_what_it_is(model_file):
    with pytest.raises(InputError, match="has 'NOT_CALLABLE', a int, which is not callable; the callables it "
                                         "defines: Net"):
        load_target(f"{model_file}:NOT_CALLABLE")


def test_a_missing_factory_in_a_module_lists_its_callables():
    with pytest.raises(InputError, match="'warmprof.traces.demo' has no callable 'nope'; the callables it defines: .*demo_model"):
        load_target("warmprof.traces.demo:nope")


# --- 6. --traceback -------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["--traceback", "trace", "{f}:raising", "--shape", "2,8", "--in-process", "--quiet"],
    ["trace", "{f}:raising", "--shape", "2,8", "--in-process", "--quiet", "--traceback"],
], ids=["global", "after-the-command"])
def test_traceback_shows_the_models_own_line(capsys, model_file, argv):
    code = cli.main([a.replace("{f}", str(model_file)) for a in argv])
    assert code == 4  # ModelError
    err = capsys.readouterr().err
    assert f'File "{model_file}", line' in err and 'raise ValueError("boom in forward")' in err
    assert "The above exception was the direct cause" in err
    assert err.strip().splitlines()[-1] == "warmprof: error: the model raised on the first pass: ValueError: boom in forward"


def test_without_traceback_the_error_is_one_line(capsys, model_file):
    assert cli.main(["trace", f"{model_file}:raising", "--shape", "2,8", "--in-process", "--quiet"]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["warmprof: error: the model raised on the first pass: ValueError: boom in forward"]


def test_traceback_flag_is_accepted_by_every_command():
    from warmprof.cli import COMMANDS, build_parser

    parser = build_parser()
    assert parser.parse_args(["--traceback", "show", "r.json"]).traceback is True
    for name in COMMANDS:
        assert "--traceback" in parser._subparsers._group_actions[0].choices[name].format_help()


def test_an_interrupt_inside_a_class_body_is_an_interrupt_however_it_is_wrapped():
    # Ctrl-C while inductor's compile imports a module: the KeyboardInterrupt comes out of a __set_name__ as
    # RuntimeError (Python 3.11), then inductor wraps that: the CLI says "interrupted", 130, no traceback
    from warmprof.cli import _an_interrupt

    class Raises:
        def __set_name__(self, owner, name):
            raise KeyboardInterrupt

    try:
        try:
            type("Made", (), {"attr": Raises()})
        except BaseException as inner:
            raise ValueError("InductorError: RuntimeError: Error calling __set_name__") from inner
    except ValueError as wrapped:
        assert _an_interrupt(wrapped)
    assert _an_interrupt(KeyboardInterrupt())
    plain = ValueError("a model that raises")
    plain.__context__ = RuntimeError("inside")
    assert not _an_interrupt(plain)


def test_an_error_after_a_sigint_is_an_interrupt_even_with_the_interrupt_lost(monkeypatch):
    import signal

    from warmprof.cli import _an_interrupt
    from warmprof.system import launch

    monkeypatch.setattr(launch, "_sigint_seen", False)
    lost = TypeError("expected a message argument")  # no KeyboardInterrupt in its chain
    assert not _an_interrupt(lost)
    with pytest.raises(KeyboardInterrupt):  # the handler the command line runs with: Python's own interrupt...
        launch._raise_interrupt(signal.SIGINT, None)
    assert launch.interrupt_seen() and _an_interrupt(lost)  # ...and its mark


def test_a_ctrl_c_lost_in_a_callback_is_raised_again_in_the_main_thread(monkeypatch):
    """Ctrl-C inside the weakref callback importlib's module locks run: Python prints "Exception ignored" and
    loses it. The command line's unraisablehook prints nothing and raises it again, in the main thread, once
    the hook has returned; any other unraisable error goes to the hook that was there before."""
    import signal
    import types

    from warmprof.system import launch

    seen = []
    monkeypatch.setattr(launch, "_unraisable_before", seen.append)
    monkeypatch.setattr(launch, "_sigint_seen", False)
    other = types.SimpleNamespace(exc_type=ValueError, exc_value=ValueError("x"), exc_traceback=None, object=None)
    launch._unraisable(other)
    assert seen == [other] and not launch.interrupt_seen()
    lost = types.SimpleNamespace(exc_type=KeyboardInterrupt, exc_value=KeyboardInterrupt(), exc_traceback=None,
                                 object=None)
    before = signal.signal(signal.SIGINT, launch._raise_interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            launch._unraisable(lost)  # returns: the interrupt comes after it, from another thread
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        signal.signal(signal.SIGINT, before)
    assert seen == [other] and launch.interrupt_seen()

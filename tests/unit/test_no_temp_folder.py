"""No writable temp folder anywhere (TMPDIR, /tmp, /var/tmp and the current folder all refused):
every command that needs one says so in one line, naming what needed it. --repeat, --explain,
`probe --ops`, `probe --backend compile`, `trace --compile` and `watch --demo` ended in tempfile's
FileNotFoundError traceback."""

from __future__ import annotations

import tempfile

import pytest

from warmprof import cli

ONE_LINE = "warmprof: error: no usable temporary folder for "


@pytest.fixture
def no_temp_folder(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "_candidate_tempdir_list", lambda: [str(tmp_path / "missing")])
    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(FileNotFoundError):
        tempfile.gettempdir()  # the state the tests need: tempfile finds nothing
    yield
    monkeypatch.setattr(tempfile, "tempdir", None)


@pytest.mark.parametrize("argv, what", [
    (["trace", "--demo", "--repeat", "2", "--quiet"], "the runs' reports"),
    (["trace", "--demo", "--quiet"], "the trace's fresh process"),
    (["trace", "--demo", "--compile", "--in-process", "--quiet", "--cache", "keep"], "torch.compile's caches"),
    (["probe", "--ops", "gelu", "--quiet"], "the op's fresh process"),
    (["probe", "--backend", "compile", "--ops", "matmul", "--quiet"], "torch.compile's caches"),
    (["watch", "--demo", "--quiet"], "torch.compile's caches"),
])
def test_each_command_says_it_in_one_line(no_temp_folder, capsys, argv, what):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(ONE_LINE + what), err
    assert "set TMPDIR to a writable folder" in err[0]


def test_explains_warm_process_says_it_as_an_error(no_temp_folder):
    from warmprof.errors import WarmprofError
    from warmprof.traces.warm_process import traced_after_warm_up

    with pytest.raises(WarmprofError, match="no usable temporary folder for --explain's warm process"):
        traced_after_warm_up(["--demo"], [], "1,16", "1,24", report=None, timeout_s=60)


def test_cache_keep_lists_the_caches_without_a_temp_folder(no_temp_folder):
    from warmprof.traces.child import caches_in_use

    assert caches_in_use({})["TMPDIR"] == "(no usable temp folder)"

"""trace() and probe() show progress alike; the compile probe says what its first long call is before
it starts; a probe's header and platform line give one thread count (issue 14)."""

from __future__ import annotations

import contextlib
import inspect

import pytest
import torch

import warmprof
from warmprof import cli


def test_python_progress_defaults_agree():
    defaults = {name: inspect.signature(getattr(warmprof, name)).parameters["progress"].default
                for name in ("trace", "probe", "probe_ops", "probe_from")}
    # before: probe() printed by default (True) while trace(), probe_ops() and probe_from() did not
    assert set(defaults.values()) == {False}, defaults


def test_the_command_line_shows_progress_for_both_unless_quiet():
    parser = cli.build_parser()
    for argv in (["trace", "--demo"], ["probe"]):
        assert parser.parse_args(argv).quiet is False
        assert parser.parse_args(argv + ["--quiet"]).quiet is True


SMALL = dict(ops=("matmul",), shapes_per_op=2, steady_calls=5, rerun_rounds=1, K=2, B=1)


def test_probe_progress_is_off_by_default_and_on_when_asked(capfd):
    warmprof.probe(**SMALL)
    assert "warmprof probe:" not in capfd.readouterr().err
    lines = []
    warmprof.probe(progress=lines.append, **SMALL)
    assert lines and lines[0].startswith("probing ")


def test_probe_command_still_shows_progress(capsys):
    assert cli.main(["probe", "--ops", "matmul", "--shapes-per-op", "2", "--steady-calls", "5", "-K", "2",
                     "-B", "1"]) == 0
    assert "warmprof probe: probing" in capsys.readouterr().err


class FakeCompileBackend:
    """Enough of a probe backend for bands.calibrate, recording what happens in order."""

    name = "compile"
    alloc_how = "fake"

    def __init__(self, events):
        from warmprof.probes.backends import TorchCompile

        self.events = events
        self.first_call_note = TorchCompile.first_call_note  # the real backend's line

    def runtime_warmup(self):
        self.events.append("warmup")

    @contextlib.contextmanager
    def experiment(self, name, recompile_limit=None):
        yield

    def trivial(self):
        def add(a, b):
            if "first call" not in self.events:
                self.events.append("first call")
            return a + b

        return add, (1, 2)

    def sync(self):
        pass

    def alloc_ms(self, nbytes):
        return 0.01


def test_the_compile_probe_says_what_its_first_call_is_before_it_runs():
    from warmprof.probes import bands

    events = []
    bands.calibrate(FakeCompileBackend(events), [1024], lambda line: events.append(f"say: {line}"))
    said = [i for i, e in enumerate(events) if e.startswith("say: compiling")]
    # before: the first line came after the compile ("launch band: trivial op first call 12.3 s")
    assert said and said[0] < events.index("first call")
    assert "first call under torch.compile: seconds" in events[said[0]]


def test_only_the_compile_backend_announces_its_first_call():
    from warmprof.probes.backends import TorchCompile, TorchEager

    assert TorchEager.first_call_note == ""
    assert TorchCompile.first_call_note.startswith("compiling")


@pytest.fixture
def two_threads():
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(old)


def test_probe_header_and_platform_agree_on_the_threads(two_threads):
    r = warmprof.probe(threads=1, **SMALL)
    # before: the platform was read after the probe's threads were restored (2), the header said 1
    assert r.protocol["threads"] == r.platform["torch_threads"] == 1
    text = str(r)
    assert "torch_threads 1" in text
    if r.protocol.get("load_average", {}).get("before"):
        assert "  threads 1," in text
    assert torch.get_num_threads() == 2  # restored after

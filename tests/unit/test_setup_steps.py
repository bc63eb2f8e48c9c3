"""Issue 38: set-up causes sit in their own step and never exceed it. Each step of the set-up (import
torch, the factory's module, the factory, model.to, cast, inputs) is attributed over its own window:
a cause is inside one step, and a step's causes add up to at most its time (what is left is its
unattributed). Before, the set-up was attributed as one pass and each (cause, source) labelled with
the step holding most of it: two import steps' runtime_init all sat in the larger one, larger than it."""

from __future__ import annotations

import json
import sys
import textwrap
import time

import pytest

from warmprof.errors import ReportError
from warmprof.instruments.host import HostCounters
from warmprof.instruments.python_imports import PythonImports
from warmprof.report import CauseEntry
from warmprof.report.trace import Setup
from warmprof.traces.setup_phase import merged, run_setup, step_entry


def _module(tmp_path, name: str, spin_ms: float) -> None:
    """A module whose body keeps the CPU busy for spin_ms (an import's own work, a runtime_init span)."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(f"""
        import time
        t0 = time.thread_time_ns()
        while time.thread_time_ns() - t0 < {int(spin_ms * 1e6)}:
            pass
    """))


def _spin(ms: float) -> None:
    t0 = time.thread_time_ns()
    while time.thread_time_ns() - t0 < ms * 1e6:
        pass


@pytest.fixture
def two_imports(tmp_path, monkeypatch):
    """Two steps that import a module each, the first's import smaller than the second's, then a step
    with no import (its time is its own unattributed)."""
    names = [f"_wp_setup_small_{id(tmp_path)}", f"_wp_setup_large_{id(tmp_path)}"]
    _module(tmp_path, names[0], 30)
    _module(tmp_path, names[1], 80)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield names
    for n in names:
        sys.modules.pop(n, None)


def test_each_steps_imports_are_its_own_causes_and_never_exceed_it(two_imports):
    small, large = two_imports
    steps = [("import small", lambda: __import__(small)), ("import large", lambda: __import__(large)),
             ("work", lambda: _spin(20))]
    setup = run_setup(None, None, steps, instruments=[HostCounters(), PythonImports()]).attribute()
    assert setup is not None and setup.has_step_causes()
    by = {st["name"]: st for st in setup.steps}
    for st in setup.steps:
        own = setup.own_causes(st)
        assert all(c.module == st["name"] for c in own)
        assert sum(c.ms for c in own) <= st["ms"] + Setup.SLACK_MS, st
        assert st["unattributed_ms"] == pytest.approx(st["ms"] - sum(c.ms for c in own), abs=1e-9)

    def imports(step):
        return sum(c.ms for c in setup.own_causes(by[step]) if c.cause == "runtime_init")

    # each import in its own step (on a busy machine part of it may be the step's cpu_contention instead)
    assert imports("import small") > 10 and imports("import large") > 30
    assert imports("import small") <= by["import small"]["ms"] and imports("import large") <= by["import large"]["ms"]
    assert imports("work") == 0
    # the steps tile the set-up, and the set-up-wide causes are the steps' one after the other
    assert sum(st["ms"] for st in setup.steps) == pytest.approx(setup.ms, rel=1e-9)
    steps_causes = sum(c.ms for st in setup.steps for c in setup.own_causes(st))
    assert sum(c.ms for c in setup.causes) == pytest.approx(steps_causes)
    assert setup.unattributed_ms == pytest.approx(setup.ms - sum(c.ms for c in setup.causes))
    setup.validate()
    back = Setup.from_dict(json.loads(json.dumps(setup.to_dict())))
    assert back.steps == setup.steps and back.causes == setup.causes


def test_a_step_whose_causes_exceed_its_time_is_refused_on_load():
    cause = {"cause": "runtime_init", "ms": 12.0, "share": 1.2, "evidence": "measured", "source": "python_import",
             "module": "import torch", "count": 1, "detail": ""}
    bad = Setup(ms=10.0, steps=[{"name": "import torch", "ms": 10.0, "causes": [cause], "unattributed_ms": -2.0}],
                causes=[CauseEntry(**dict(cause, share=0.0))], unattributed_ms=-2.0)
    with pytest.raises(ReportError, match="'import torch': its causes add up to 12.000 ms, more than the step's 10.000"):
        bad.validate()
    within = dict(cause, ms=10.005)  # rounding: within 0.01 ms
    Setup(ms=10.0, steps=[{"name": "import torch", "ms": 10.0, "causes": [within], "unattributed_ms": -0.005}],
          causes=[CauseEntry(**within)], unattributed_ms=-0.005).validate()


def test_a_file_before_steps_had_causes_loads_and_prints_as_it_did():
    old = Setup(ms=2700.0, steps=[{"name": "import torch", "ms": 2200.0}, {"name": "factory()", "ms": 450.0}],
                causes=[CauseEntry("runtime_init", 2500.0, 0.9, "measured", "python_import", module="factory()")],
                unattributed_ms=200.0)
    old.validate()  # its causes were not told apart by step: nothing to check them against
    assert not old.has_step_causes() and old.own_causes(old.steps[0]) == []


def test_estimates_past_a_steps_time_are_scaled_to_fit_it_and_say_so():
    causes = [CauseEntry("disk_read", 6.0, 0.0, "estimated", "storage", module="inputs"),
              CauseEntry("cpu_contention", 2.0, 0.0, "measured", "run_queue", module="inputs")]
    step = step_entry("inputs", 4.0, causes)
    got = {c["cause"]: c for c in step["causes"]}
    assert got["disk_read"]["ms"] == pytest.approx(3.0) and got["cpu_contention"]["ms"] == pytest.approx(1.0)
    assert "scaled to 50.0%" in got["disk_read"]["detail"]
    assert step["unattributed_ms"] == pytest.approx(0.0, abs=1e-12)
    fits = step_entry("inputs", 10.0, [CauseEntry("disk_read", 6.0, 0.0, "estimated", "storage", module="inputs")])
    assert fits["causes"][0]["ms"] == 6.0 and fits["causes"][0]["share"] == pytest.approx(0.6)
    assert fits["unattributed_ms"] == pytest.approx(4.0) and "scaled" not in fits["causes"][0]["detail"]


def test_the_cold_start_and_the_set_up_merge_step_by_step():
    a = Setup.of_steps(10.0, [step_entry("import torch", 10.0, [CauseEntry("runtime_init", 8.0, 0, "measured",
                                                                           "python_import", module="import torch")])])
    b = Setup.of_steps(5.0, [step_entry("inputs", 5.0, [CauseEntry("allocator_growth", 1.0, 0, "estimated",
                                                                   "host_faults", module="inputs")])], how="then")
    m = merged(a, b)
    assert m is not None and [st["name"] for st in m.steps] == ["import torch", "inputs"]
    assert m.ms == 15.0 and [c.ms for c in m.causes] == [8.0, 1.0]
    assert [c.share for c in m.causes] == pytest.approx([8 / 15, 1 / 15])
    assert m.unattributed_ms == pytest.approx(6.0)
    assert [st["unattributed_ms"] for st in m.steps] == pytest.approx([2.0, 4.0])
    m.validate()


def _text(setup):
    from factories import trace_report

    r = trace_report({"jit_compile": 10.0})
    r.setup = setup
    return str(r)


def test_the_text_shows_each_step_with_its_own_largest_causes_and_no_negative_unattributed():
    steps = [step_entry("import torch", 9100.0, [
                 CauseEntry("runtime_init", 7000.0, 0, "measured", "python_import", module="import torch"),
                 CauseEntry("cpu_contention", 1500.0, 0, "measured", "run_queue_in:python_import", module="import torch")]),
             step_entry("import lms.py", 15800.0, [
                 CauseEntry("runtime_init", 12000.0, 0, "measured", "python_import", module="import lms.py"),
                 CauseEntry("cpu_contention", 3800.0, 0, "measured", "run_queue_in:python_import", module="import lms.py")])]
    steps[1]["unattributed_ms"] = -0.004  # rounding: never a negative amount printed as a cost
    text = _text(Setup.of_steps(24900.0, steps))
    lines = text.splitlines()
    torch_line = next(line for line in lines if line.strip().startswith("import torch 9"))
    lms_line = next(line for line in lines if line.strip().startswith("import lms.py"))
    assert "runtime_init 7000 ms" in torch_line and "cpu_contention 1500 ms" in torch_line
    assert "unattributed 600.0 ms" in torch_line
    assert "runtime_init 12.0 s" in lms_line and "unattributed none" in lms_line and "-" not in lms_line.split(":", 1)[1]
    assert "set-up causes:" not in text


def test_an_import_step_says_so_when_the_python_imports_instrument_was_off(two_imports):
    from warmprof.instruments.base import Instrument

    class ImportsOff(Instrument):  # what an instrument that is not available here is: named, with its reason
        name = "python_imports"

        def __init__(self) -> None:
            super().__init__()
            self.reason = "not available here (a test)"

    small, _ = two_imports
    off = ImportsOff()
    run = run_setup(None, None, [("import small", lambda: __import__(small)), ("work", lambda: _spin(1))],
                    instruments=[HostCounters(), off], notes={"work": "a note of the caller's"})
    setup = run.attribute()
    assert setup is not None
    step, work = setup.steps
    assert "Python-imports instrument was off: not available here (a test)" in step["note"]
    assert not [c for c in setup.own_causes(step) if c.cause == "runtime_init"]  # not measured: its unattributed
    assert step["unattributed_ms"] > 10
    assert work["note"] == "a note of the caller's"
    assert "(the Python-imports instrument was off" in _text(setup)


def test_scaling_a_step_to_fit_shrinks_the_waits_inside_its_causes_too():
    """A cause scaled down to fit its step keeps its wait for a CPU inside it (never more than the cause), so
    the report it goes into loads again (review of issue 38: waited_ms 7 ms was left in a 5 ms cause)."""
    causes = [CauseEntry("runtime_init", 8.0, 0.0, "measured", "python_import", module="s", waited_ms=7.0, blocked_ms=0.5),
              CauseEntry("allocator_growth", 8.0, 0.0, "estimated", "host_faults", module="s")]
    step = step_entry("s", 10.0, causes)
    (ri,) = [c for c in step["causes"] if c["cause"] == "runtime_init"]
    assert ri["ms"] == pytest.approx(5.0) and ri["waited_ms"] == pytest.approx(7.0 * 10 / 16)
    assert ri["blocked_ms"] == pytest.approx(0.5 * 10 / 16)
    setup = Setup.of_steps(10.0, [step])
    setup.validate()  # would raise: waited_ms more than its ms
    Setup.from_dict(json.loads(json.dumps(setup.to_dict()))).validate()

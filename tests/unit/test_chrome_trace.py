"""The Chrome trace export: well-formed trace events (ph, ts, dur in us, pid/tid, strict nesting)."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from factories import ORIN, probe_report, trace_report
from warmprof.cli import main
from warmprof.errors import ReportError
from warmprof.render.chrome import ChromeTraceRenderer

PIDS = {"first": 1, "seen_rerun": 2, "steady": 3}


def check_trace_events(doc: dict) -> list[dict]:
    """The trace-event format's rules that Perfetto and chrome://tracing rely on."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    events = doc["traceEvents"]
    for e in events:
        assert e["ph"] in ("X", "C", "M"), e
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
            assert isinstance(e.get("cat", ""), str)
        elif e["ph"] == "C":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values())
        else:
            assert e["name"] in ("process_name", "process_sort_index", "thread_name") and "args" in e
    by_thread = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by_thread[(e["pid"], e["tid"])].append(e)
    for group in by_thread.values():  # complete events on one thread nest or follow, never overlap
        stack: list[float] = []
        for e in sorted(group, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1] <= e["ts"] + 1e-9:
                stack.pop()
            end = e["ts"] + e["dur"]
            assert not stack or end <= stack[-1] + 1e-9, f"{e['name']} overlaps its parent"
            stack.append(end)
    return events


def render(report) -> dict:
    return json.loads(ChromeTraceRenderer().render(report))


def test_events_are_well_formed_and_nested():
    r = trace_report({"jit_compile": 10.0, "runtime_init": 50.0, "allocator_growth": 5.0})
    events = check_trace_events(render(r))
    xs = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in xs} == {1, 2, 3}
    first = [e for e in xs if e["pid"] == PIDS["first"]]
    assert len(first) == len([s for s in r.spans if s.pass_ == "first"])
    assert {e["tid"] for e in first} == {0, 1}


def test_times_are_microseconds_from_each_pass_start():
    r = trace_report({"runtime_init": 50.0})
    xs = {(e["pid"], e["name"]): e for e in render(r)["traceEvents"] if e["ph"] == "X"}
    first_pass = xs[(1, "pass:first")]
    assert first_pass["ts"] == 0 and first_pass["dur"] == pytest.approx(r.first_pass_ms * 1000)
    init = xs[(1, "src_runtime_init:runtime_init")]
    span = next(s for s in r.spans if s.name == "src_runtime_init:runtime_init")
    assert init["ts"] == pytest.approx(span.start_ms * 1000) and init["dur"] == pytest.approx(span.dur_ms * 1000)
    assert xs[(2, "pass:seen_rerun")]["dur"] == pytest.approx(r.seen_rerun_ms * 1000)


def test_spans_are_categorized_by_cause_and_module():
    r = trace_report({"jit_compile": 10.0, "allocator_growth": 5.0})
    xs = [e for e in render(r)["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
    cats = {e["name"]: e["cat"] for e in xs}
    assert cats["src_jit_compile:jit_compile"] == "jit_compile"
    assert cats["src_allocator_growth:allocator_growth"] == "allocator_growth"
    assert cats["module:blocks.0"] == "module" and cats["pass:first"] == "pass"
    compile_span = next(e for e in xs if e["name"] == "src_jit_compile:jit_compile")
    assert compile_span["args"]["module"] == "blocks.0" and compile_span["args"]["value"] == 7
    assert compile_span["cname"] == "terrible"


def test_a_child_overrunning_its_parent_by_rounding_is_clipped():
    r = trace_report({"jit_compile": 1.0})
    xs = {e["name"]: e for e in render(r)["traceEvents"] if e["ph"] == "X" and e["pid"] == 1 and e["tid"] == 0}
    parent, child = xs["module:blocks.0"], xs["module:blocks.0.mlp"]
    assert child["ts"] + child["dur"] <= parent["ts"] + parent["dur"]


def test_counters_are_counter_events_with_faults_from_the_pass_start():
    r = trace_report({"allocator_growth": 5.0})
    cs = [e for e in render(r)["traceEvents"] if e["ph"] == "C"]
    faults = [e for e in cs if e["pid"] == 1 and e["name"] == "host:minor_faults"]
    assert [e["args"]["minor_faults"] for e in faults] == [0, 600, 1100]
    assert [e["ts"] for e in faults] == sorted(e["ts"] for e in faults)
    rss = [e for e in cs if e["name"] == "host:rss_bytes"]
    assert rss[-1]["args"]["rss_bytes"] == 2.5e8  # a level, not rebased
    assert any(e["pid"] == 2 for e in cs)


def test_processes_are_named_and_ordered():
    r = trace_report({"jit_compile": 1.0})
    meta = [e for e in render(r)["traceEvents"] if e["ph"] == "M"]
    names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert names[1].startswith("first pass (") and names[2].startswith("seen-shape re-run") and names[3].startswith("steady pass")
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert threads[(1, 0)] == "main thread" and threads[(1, 1)] == "thread 1"


def test_steady_pass_without_spans_shows_the_median():
    r = trace_report({"jit_compile": 1.0}, steady=4.0)
    steady = [e for e in render(r)["traceEvents"] if e["ph"] == "X" and e["pid"] == 3]
    assert len(steady) == 1 and steady[0]["dur"] == pytest.approx(4000) and "median of 20" in steady[0]["name"]


def test_one_steady_pass_is_kept_when_several_were_recorded():
    r = trace_report({"jit_compile": 1.0}, steady=4.0, steady_spans=5)
    doc = render(r)
    check_trace_events(doc)
    steady = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 3]
    passes = [e for e in steady if e["name"] == "pass:steady"]
    assert len(passes) == 1 and passes[0]["ts"] == 0
    assert passes[0]["dur"] == pytest.approx((4.0 + 0.2) * 1000)  # the median of 4.0 .. 4.4
    assert len(steady) == 2


def test_other_data_names_the_device_and_causes():
    r = trace_report({"jit_compile": 2.0}, platform=ORIN, device="cuda")
    other = render(r)["otherData"]
    assert "Jetson AGX Orin" in other["device"] and other["causes_ms"]["jit_compile"] == 2.0


def test_probe_reports_have_no_timeline():
    with pytest.raises(ReportError, match="needs a trace report"):
        ChromeTraceRenderer().render(probe_report())


def test_cli_show_chrome_writes_a_loadable_trace(tmp_path, capsys):
    src = trace_report({"jit_compile": 3.0, "runtime_init": 9.0}).save(tmp_path / "r.json")
    out = tmp_path / "first_pass.json"
    assert main(["show", str(src), "--format", "chrome", "-o", str(out)]) == 0
    check_trace_events(json.loads(out.read_text()))
    assert main(["show", str(src), "--format", "chrome"]) == 0
    check_trace_events(json.loads(capsys.readouterr().out))


def test_real_trace_report_exports_well_formed_events(tmp_path):
    pytest.importorskip("torch", reason="a real trace needs torch")
    import warmprof
    from warmprof.traces.demo import demo_model

    report = warmprof.trace(demo_model(), (1, 16), steady=5)
    saved = report.save(tmp_path / "real.json")
    doc = json.loads(ChromeTraceRenderer().render(type(report).load(saved)))
    events = check_trace_events(doc)
    first = [e for e in events if e["ph"] == "X" and e["pid"] == 1]
    assert first and max(e["ts"] + e["dur"] for e in first) <= report.first_pass_ms * 1000 * 1.5 + 1000


def test_the_set_up_steps_are_a_track_of_their_own_end_to_end():
    from warmprof.report import CauseEntry
    from warmprof.report.trace import Setup
    from warmprof.render.chrome import SETUP_PID

    r = trace_report({"jit_compile": 10.0})
    r.setup = Setup(ms=2650.0, steps=[{"name": "import torch", "ms": 2200.0}, {"name": "factory()", "ms": 450.0}],
                    causes=[CauseEntry("disk_read", 300.0, 0.11, "measured", "storage", module="factory()")])
    doc = json.loads(ChromeTraceRenderer().render(r))
    events = check_trace_events(doc)
    steps = [e for e in events if e["ph"] == "X" and e["pid"] == SETUP_PID]
    assert [(e["name"], e["ts"], e["dur"]) for e in steps] == [("import torch", 0.0, 2.2e6), ("factory()", 2.2e6, 4.5e5)]
    assert steps[1]["args"]["causes_ms"] == {"disk_read/storage": 300.0} and steps[0]["args"]["causes_ms"] == {}
    name = next(e for e in events if e["ph"] == "M" and e["pid"] == SETUP_PID and e["name"] == "process_name")
    assert "2650.00 ms" in name["args"]["name"]
    r.setup = None
    assert not [e for e in json.loads(ChromeTraceRenderer().render(r))["traceEvents"] if e["pid"] == SETUP_PID]

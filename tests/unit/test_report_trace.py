"""The trace Report: JSON round trip, public field names, validation of corrupt/foreign files."""

import json
from pathlib import Path

import pytest

from warmprof.errors import ReportError
from warmprof.report import CauseEntry, Report, Span, load


def make_report(**over):
    kw = dict(
        model="M", shape=[1, 8], device="cpu", first_pass_ms=100.0, seen_rerun_ms=11.0, steady_median_ms=10.0,
        noise_band_ms=1.0, excess_ms=90.0, unattributed_ms=10.0,
        causes=[CauseEntry("jit_compile", 70.0, 70 / 90, "measured", "torch.compile", "M"),
                CauseEntry("allocator_growth", 10.0, 10 / 90, "estimated", "host_faults", "M.a", count=12)],
        spans=[Span("first", "pass:first", "", "pass", "", 0.0, 100.0, 0)],
    )
    kw.update(over)
    return Report(**kw)


def test_round_trip_keeps_every_public_field(tmp_path):
    r = make_report()
    p = r.save(tmp_path / "r.json")
    data = json.loads(p.read_text())
    for key in ("schema_version", "kind", "platform", "model", "shape", "first_pass_ms", "seen_rerun_ms",
                "steady_median_ms", "noise_band_ms", "excess_ms", "unattributed_ms", "causes"):
        assert key in data
    assert data["kind"] == "trace"
    assert set(data["causes"][0]) >= {"cause", "ms", "share", "evidence", "source", "module"}
    back = load(p)
    assert isinstance(back, Report)
    assert back.to_dict() == r.to_dict()


@pytest.mark.parametrize("text, message", [
    ("{not json", "invalid JSON"),
    ('{"hello": 1}', "not a warmprof report"),
    ('{"schema_version": 99, "kind": "trace"}', "newer"),
    ('{"schema_version": 1, "kind": "pizza"}', "unknown report kind"),
    ('{"schema_version": 1, "kind": "trace", "model": "M"}', "missing field"),
])
def test_corrupt_or_foreign_files_are_refused_clearly(tmp_path, text, message):
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(ReportError, match=message):
        load(p)


def test_invariants_checked_on_load(tmp_path):
    bad_cause = make_report().to_dict()
    bad_cause["causes"][0]["cause"] = "gremlins"
    bad_share = make_report().to_dict()
    bad_share["causes"][0]["share"] = 0.9
    bad_share["causes"][1]["share"] = 0.9
    negative = make_report().to_dict()
    negative["causes"][0]["ms"] = -5.0
    excess = make_report().to_dict()
    excess["excess_ms"] = 12.0
    for data, msg in ((bad_cause, "unknown cause"), (bad_share, "sum to"), (negative, "negative"),
                      (excess, "excess_ms")):
        p = tmp_path / "x.json"
        p.write_text(json.dumps(data))
        with pytest.raises(ReportError, match=msg):
            load(p)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ReportError, match="no such file"):
        load(tmp_path / "nope.json")


def test_text_rendering_names_causes_evidence_and_advice():
    r = make_report()
    from warmprof.traces.advice import advise

    r.advice = advise(r)
    text = str(r)
    assert "jit_compile" in text and "measured" in text and "estimated" in text
    assert "unattributed" in text and "advice" in text
    assert any("torch.compile" in a for a in r.advice)


def test_text_table_shows_long_sources_whole_and_tiny_causes_as_below_resolution():
    long_source = "torch.compile/codegen_and_cxx_compile"
    r = make_report(causes=[
        CauseEntry("jit_compile", 79.997, 79.997 / 90, "measured", long_source, "M"),
        CauseEntry("jit_compile", 0.003, 0.003 / 90, "measured", "torch.compile/dynamo", "M"),
    ])
    lines = str(r).splitlines()
    row = next(line for line in lines if long_source in line)
    assert row.split()[-1] == "M"  # the module column is not swallowed by the source
    tiny = next(line for line in lines if "torch.compile/dynamo" in line)
    assert "<0.01" in tiny and "0.00 " not in tiny
    header = next(line for line in lines if line.strip().startswith("cause"))
    assert header.index("where") == row.index(" M") + 1  # columns line up


def test_advice_for_one_cause_names_its_share_once():
    from warmprof.traces.advice import advise

    lines = advise(make_report())
    compile_lines = [a for a in lines if a.startswith("jit_compile")]
    assert len(compile_lines) == 2
    assert "of the excess" in compile_lines[0] and "of the excess" not in compile_lines[1]


def test_a_first_pass_within_noise_reads_no_first_call_cost_at_this_shape():
    """Within the steady passes' noise band the advice is the measured verdict (issue 24: never
    silent, never a cause's advice); on a machine so noisy the band is wide, it also says a smaller
    cost could hide in it."""
    from warmprof.traces.advice import advise

    r = make_report(first_pass_ms=10.2, excess_ms=0.2, noise_band_ms=1.0, unattributed_ms=0.1,
                    causes=[CauseEntry("allocator_growth", 0.1, 0.5, "estimated", "host_faults", "M", count=3)])
    lines = advise(r)
    assert len(lines) == 1 and lines[0].startswith("No first-call cost at this shape:")
    assert "+0.20 ms from the steady median" in lines[0] and "(1.00 ms, p10-p90" in lines[0]
    assert "noisy" not in lines[0]
    # a first pass faster than the steady median: the same, said with its sign; the text shows no shares
    fast = make_report(first_pass_ms=254.0, steady_median_ms=425.0, excess_ms=-171.0, noise_band_ms=385.0,
                       unattributed_ms=-171.0, causes=[])
    (line,) = advise(fast)
    assert line.startswith("No first-call cost at this shape: the first pass was -171.00 ms from the steady median")
    assert "The machine was noisy (the spread is 91% of a steady pass)" in line
    text = str(fast)
    assert "excess: none measurable (the first pass was no slower than the steady median" in text
    assert "-171" not in text.split("advice:")[0]  # no negative figure printed as an amount above the advice
    assert "%" not in text.split("unattributed")[1].splitlines()[0]  # no share on the residual row


def test_threads_that_clash_with_the_cpus_get_a_note_and_threads_advice():
    from warmprof.system.platform import oversubscription
    from warmprof.report.trace import Protocol
    from warmprof.traces.advice import advise

    assert oversubscription(1, cpus=(2.0, "2 in its affinity mask"), others=5) == ""  # one thread: nothing to clash
    over = oversubscription(4, cpus=(2.0, "2 in its affinity mask"), others=0)
    assert "4 intra-op threads" in over and "--threads 2" in over
    busy = oversubscription(2, cpus=(2.0, "2 in its affinity mask"), others=1)
    assert "1 other task(s)" in busy and "--threads 1" in busy
    assert oversubscription(2, cpus=(4.0, "4 in its affinity mask"), others=1) == ""
    r = make_report(first_pass_ms=20.0, excess_ms=10.0, noise_band_ms=1.0, unattributed_ms=10.0, causes=[])
    r.protocol = Protocol(oversubscription=busy)
    assert any("`--threads 1`" in a for a in advise(r))


def test_the_cpu_budget_reads_affinity_and_the_cgroup_quota():
    from warmprof.system.platform import runnable_others, usable_cpus

    assert usable_cpus(affinity=8, quota_text="150000 100000\n") == (1.5, "8 in its affinity mask, a cgroup quota of 1.5 CPUs")
    assert usable_cpus(affinity=2, quota_text="max 100000\n") == (2.0, "2 in its affinity mask")
    assert usable_cpus(affinity=2, quota_text="garbage") == (2.0, "2 in its affinity mask")
    assert runnable_others("2.38 2.65 2.17 3/80 15707\n") == 2
    assert runnable_others("") == 0


def test_an_excess_that_is_warmprofs_own_cost_is_said_so():
    """A model with very many module calls: the hooks' estimated cost is the excess, not a cause."""
    from warmprof.traces.advice import advise

    r = make_report(first_pass_ms=70.0, excess_ms=60.0, noise_band_ms=2.0, unattributed_ms=0.6,
                    causes=[CauseEntry("profiler_overhead", 59.4, 0.99, "estimated", "module_hooks", "M", count=14336)])
    lines = advise(r)
    assert len(lines) == 1 and lines[0].startswith("No first-call cost of the model's at this shape: without warmprof's "
                                                   "own instrument cost (59.40 ms, estimated)")
    worse = make_report(first_pass_ms=70.0, excess_ms=60.0, noise_band_ms=2.0, unattributed_ms=30.6,
                        causes=[CauseEntry("profiler_overhead", 29.4, 0.49, "estimated", "module_hooks", "M")])
    assert not any("Without warmprof" in a for a in advise(worse))


def test_tiny_figures_are_printed_in_microseconds_not_as_zero():
    r = make_report(first_pass_ms=0.5, seen_rerun_ms=0.031, steady_median_ms=0.03, noise_band_ms=0.004,
                    steady_p10_ms=0.029, steady_p90_ms=0.033, steady_passes=50,
                    excess_ms=0.47, unattributed_ms=0.07,
                    causes=[CauseEntry("jit_compile", 0.4, 0.4 / 0.47, "measured", "onednn", "M")])
    header = str(r).splitlines()[2]
    assert "steady median 30.0 µs" in header and "0.00 ms" not in str(r)
    assert "noise band 4.0 µs" in str(r)


def _load_edited(tmp_path, edit):
    data = make_report().to_dict()
    edit(data)
    p = tmp_path / "edited.json"
    p.write_text(json.dumps(data))
    return load(p)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(modules=[{}]), r"modules\[0\]: missing key 'module'"),
    (lambda d: d.update(modules=[{"module": "M", "ms": "5", "causes": {}}]), r"modules\[0\]\.ms: expected a finite number"),
    (lambda d: d.update(instruments={"torch_compile": "on"}), r"instruments\.torch_compile: expected an object, got 'on'"),
    (lambda d: d.update(shape=5), r"shape: expected a list or null, got 5"),
    (lambda d: d.update(shape=[1, "8"]), r"shape\[1\]: expected a non-negative integer"),
    (lambda d: d.update(advice=5), r"advice: expected a list, got 5"),
    (lambda d: d["spans"][0].update(start_ms="0"), r"spans\[0\]\.start_ms: expected a finite number within ±1e15, got .0."),
    (lambda d: d["spans"][0].pop("depth"), r"spans\[0\]: missing key 'depth'"),
    (lambda d: d["causes"][0].update(share=None), r"causes\[0\]\.share: expected a finite number within ±1e15, got null"),
    (lambda d: d.update(counter_samples=[5]), r"counter_samples\[0\]: expected an object, got 5"),
    (lambda d: d.update(platform={"jetson": 1}), r"platform\.jetson: expected a string, got 1"),
    (lambda d: d.update(device="tpu"), "unknown device 'tpu'"),
    (lambda d: d.update(device="cuda:x"), "unknown device 'cuda:x'"),
    (lambda d: d.update(first_pass_ms=True), r"first_pass_ms: expected a finite number within ±1e15, got true"),
    (lambda d: d["spans"][0].update(start_ms=1e308), r"spans\[0\]\.start_ms: expected a finite number within ±1e15, got 1e\+308"),
])
def test_a_bad_field_is_refused_at_load_naming_the_field(tmp_path, edit, message):
    with pytest.raises(ReportError, match=message):
        _load_edited(tmp_path, edit)


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:0", "cuda:1", "mps", "mps:0"])
def test_devices_with_an_index_load(tmp_path, device):
    r = make_report(device=device)
    assert load(r.save(tmp_path / "r.json")).device == device


def test_an_unexpected_error_while_building_is_still_a_report_error(tmp_path, monkeypatch):
    def broken(data):
        raise AttributeError("something the schema missed")

    monkeypatch.setattr(Report, "from_dict", broken)
    with pytest.raises(ReportError, match="malformed trace report .AttributeError"):
        load(make_report().save(tmp_path / "r.json"))


@pytest.mark.parametrize("where", ["missing_dir/r.json", "a_file/r.json", "."])
def test_saving_where_no_file_can_be_written_is_a_report_error(tmp_path, where):
    (tmp_path / "a_file").write_text("")
    target = tmp_path / where
    with pytest.raises(ReportError, match="cannot write") as info:
        make_report().save(target)
    assert str(target) in str(info.value)
    assert isinstance(info.value.__cause__, OSError)  # the OS reason, chained
    assert not list(tmp_path.glob("**/*.tmp"))  # no temporary file left behind


@pytest.mark.parametrize("renderer", ["text", "json", "chrome"])
def test_writing_a_rendering_where_no_file_can_be_written_is_a_report_error(tmp_path, renderer):
    from warmprof.render.chrome import ChromeTraceRenderer
    from warmprof.render.json import JsonRenderer
    from warmprof.render.text import TraceTextRenderer

    r = {"text": TraceTextRenderer, "json": JsonRenderer, "chrome": ChromeTraceRenderer}[renderer]()
    target = tmp_path / "missing_dir" / "out"
    with pytest.raises(ReportError, match="cannot write .No such file or directory") as info:
        r.write(make_report(), target)
    assert str(target) in str(info.value) and isinstance(info.value.__cause__, FileNotFoundError)


def test_str_of_a_loaded_report_works_after_importing_only_warmprof_report(tmp_path):
    import subprocess
    import sys

    p = make_report().save(tmp_path / "r.json")
    code = f"import warmprof.report as r; print(str(r.load({str(p)!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.startswith("warmprof trace: M (1, 8) on cpu") and "jit_compile" in out


def test_text_says_where_unattributed_time_sits_when_it_is_outside_the_noise():
    r = make_report(unattributed_where=[{"module": "M.attn", "ms": 6.0}, {"module": "(outside modules)", "ms": 2.5}])
    lines = str(r).splitlines()
    at = next(i for i, ln in enumerate(lines) if "unattributed sits in" in ln)
    assert lines[at + 1].split() == ["M.attn", "6.00", "ms"]
    assert lines[at + 2].split() == ["(outside", "modules)", "2.50", "ms"]
    quiet = make_report(unattributed_ms=0.5, noise_band_ms=1.0, excess_ms=70.5,
                        unattributed_where=[{"module": "M.attn", "ms": 0.4}])
    assert "unattributed sits in" not in str(quiet)


def test_advice_names_a_dominant_unattributed_part_and_where_it_sits():
    from warmprof.traces.advice import advise

    r = make_report(first_pass_ms=100.0, excess_ms=90.0, unattributed_ms=70.0, noise_band_ms=1.0,
                    causes=[CauseEntry("allocator_growth", 20.0, 20 / 90, "estimated", "host_faults", "M", count=9)],
                    unattributed_where=[{"module": "M.attn", "ms": 50.0}, {"module": "M", "ms": 10.0}])
    (line,) = [a for a in advise(r) if a.startswith("unattributed")]
    assert "78% of the excess" in line and "most in M.attn and M" in line
    small = make_report()  # unattributed 10 ms under a 70 ms compile: no such line
    assert not [a for a in advise(small) if a.startswith("unattributed")]


V1 = Path(__file__).parent.parent / "fixtures" / "reports_v1"


@pytest.mark.parametrize("name", ["trace_cli_fresh_process.json", "trace_compiled_in_process.json",
                                  "trace_synthetic.json"])
def test_a_version_1_report_loads_and_saves_in_this_version(tmp_path, name):
    """Version 1 files (written by warmprof before the torch_compile field) load; saved again, they
    are the same JSON with this schema_version and the torch_compile figures taken from the instrument."""
    from warmprof.report import SCHEMA_VERSION

    v1 = json.loads((V1 / name).read_text())
    assert v1["schema_version"] == 1
    r = load(V1 / name)
    assert r.schema_version == SCHEMA_VERSION == 6 and r.settings is None  # no record: it had none
    again = json.loads(r.save(tmp_path / "again.json").read_text())
    figures = again.pop("torch_compile")
    assert again == dict(v1, schema_version=SCHEMA_VERSION)
    assert list(again["protocol"]) == list(v1["protocol"])  # the protocol is the same object, key for key
    if name == "trace_compiled_in_process.json":
        assert figures == {"torch_reported_ms": v1["instruments"]["torch_compile"]["torch_reported_compile_ms"],
                           "compiles": 1, "inductor_cache": "miss"}
        assert "torch reports 2321 ms of compile time; 1 compile(s); inductor cache: miss" in str(r)
    else:
        assert figures is None and "torch reports" not in str(r)
    assert load(tmp_path / "again.json").to_dict() == r.to_dict()


def test_a_version_1_protocol_becomes_typed():
    fresh = load(V1 / "trace_cli_fresh_process.json").protocol
    assert fresh.run.fresh_process and fresh.run.cache == "fresh" and "TMPDIR" in fresh.run.caches
    assert fresh.recorder.dropped == 0 and fresh.calibration["hook_cost_ns"] > 0 and fresh.steady_ms
    caller = load(V1 / "trace_compiled_in_process.json").protocol
    assert not caller.run.fresh_process and caller.run.cache == "in-process (caller's)" and caller.run.caches is None
    assert load(V1 / "trace_synthetic.json").protocol is None  # {}: nothing recorded


@pytest.mark.parametrize("protocol, message", [
    ({"fresh_process": "yes"}, r"protocol.fresh_process: expected"),
    ({"recorder": {"dropped": -1}}, r"protocol.recorder.dropped"),
    ({"caches": {"TMPDIR": 5}}, r"protocol.caches"),
])
def test_a_protocol_of_the_wrong_types_is_refused(tmp_path, protocol, message):
    data = make_report().to_dict()
    data["protocol"] = protocol
    p = tmp_path / "r.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ReportError, match=message):
        load(p)


def test_a_protocol_round_trips_as_it_was_partial_or_with_keys_of_a_newer_writer(tmp_path):
    """Loading then saving keeps unknown protocol keys and does not invent the ones a file lacked."""
    data = make_report().to_dict()
    data["protocol"] = {"steady_ms": [4.0, 4.1], "custom": {"x": 1}}
    path = tmp_path / "partial.json"
    path.write_text(json.dumps(data))
    loaded = load(path)
    assert loaded.protocol.steady_ms == [4.0, 4.1]
    again = json.loads(loaded.save(tmp_path / "again.json").read_text())
    assert again["protocol"] == {"steady_ms": [4.0, 4.1], "custom": {"x": 1}}


def test_a_plain_dict_protocol_is_taken_as_the_typed_one():
    r = make_report(protocol={"input": "caller's inputs", "fresh_process": True, "cache": "fresh"})
    assert r.protocol.input == "caller's inputs" and r.protocol.run.fresh_process
    assert r.to_dict()["protocol"] == {"input": "caller's inputs", "fresh_process": True, "cache": "fresh"}


LONG_MODULE = ".".join(f"encoder{i}" for i in range(15))[:120]  # a 120-character module path


def _block(text: str, title: str) -> list[str]:
    """The rows (indented four) under the line starting with `title`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(title))
    rows = []
    for line in lines[start + 1:]:
        if not line.startswith("    "):
            break
        rows.append(line)
    return rows


def test_a_120_character_module_name_keeps_the_text_columns_aligned():
    assert len(LONG_MODULE) == 120
    r = make_report(
        unattributed_ms=10.0, noise_band_ms=1.0,
        modules=[{"module": LONG_MODULE, "causes": {"jit_compile": 50.0}}, {"module": "M.a", "causes": {"jit_compile": 20.0}}],
        unattributed_where=[{"module": LONG_MODULE, "ms": 6.0}, {"module": "M.a", "ms": 3.0}])
    text = str(r)
    top = _block(text, "top modules")
    assert len(top) == 2 and len({row.index("  jit_compile") for row in top}) == 1  # the figures' column lines up
    where = _block(text, "unattributed sits in")
    assert len(where) == 2 and len({len(row) for row in where}) == 1  # right-aligned ms: every row ends in one column
    for row in (top[0], where[0]):
        assert LONG_MODULE not in row and "…" in row  # cut in the middle: its root and its leaf are kept
        assert LONG_MODULE[:20] in row and LONG_MODULE[-20:] in row
        assert len(row) < 100
    # the op view: ms, module, op, shapes
    r.unattributed_where = [{"module": LONG_MODULE, "ms": 6.0, "op": "aten.native_layer_norm.default"},
                            {"module": "M.a", "ms": 3.0, "op": "aten.add.Tensor"}]
    ops = _block(str(r), "unattributed sits in (module, op)")
    assert len(ops) == 2
    assert ops[0].index("native_layer_norm") == ops[1].index("add.Tensor")


def test_an_eager_trace_never_reports_zero_compile_time():
    from warmprof.report.trace import TorchCompileFigures

    # The torch_compile instrument is on whenever dynamo is imported: an eager trace can carry its empty figures.
    eager = make_report(compile=None, torch_compile=TorchCompileFigures(0.0, 0, "n/a"))
    assert "eager" in str(eager).splitlines()[0]
    assert "compile time" not in str(eager) and "torch reports" not in str(eager)
    compiled = make_report(compile="default", torch_compile=TorchCompileFigures(0.0, 0, "hit"))
    assert "torch reports 0.00 ms of compile time; 0 compile(s); inductor cache: hit" in str(compiled)
    # an eager model that compiles a part of itself: what torch reports is said
    inner = make_report(compile=None, torch_compile=TorchCompileFigures(120.0, 1, "miss"))
    assert "torch reports 120.0 ms of compile time; 1 compile(s)" in str(inner)

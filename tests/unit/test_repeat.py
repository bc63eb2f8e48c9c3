"""Repeated traces: every run kept, per-cause median / min-max / runs-present, JSON, text, PNG and
compare read it; the runner keeps going past a failed run and says which."""

import json

import pytest

import warmprof
from warmprof.errors import InputError, ModelError, ReportError
from warmprof.report import RepeatReport, load
from warmprof.traces.repeat import check_repeat, cli_argv, run_repeats

from factories import trace_report


def _runs():
    # allocator_growth appears in 2 of 3 runs; jit_compile in all
    return [trace_report({"jit_compile": 5.0, "allocator_growth": a}, unattributed=u)
            for a, u in ((2.0, 1.0), (0.0, 1.5), (3.0, 0.5))]


def test_per_cause_median_range_and_runs_present_count_an_absent_run_as_zero():
    r = RepeatReport.of_runs(_runs())
    by = {c.cause: c for c in r.causes}
    assert (by["jit_compile"].median_ms, by["jit_compile"].runs, by["jit_compile"].of) == (5.0, 3, 3)
    alloc = by["allocator_growth"]
    assert (alloc.median_ms, alloc.min_ms, alloc.max_ms, alloc.runs, alloc.ms) == (2.0, 0.0, 3.0, 2, [2.0, 0.0, 3.0])
    assert r.figures["excess_ms"] == {"median": 8.0, "min": 6.5, "max": 8.5}
    assert [c.cause for c in r.causes] == ["jit_compile", "allocator_growth"]  # largest median first


def test_the_median_view_is_a_consistent_trace_report():
    view = RepeatReport.of_runs(_runs()).median_view()
    assert view.excess_ms == pytest.approx(view.first_pass_ms - view.steady_median_ms)
    assert view.cause_ms("allocator_growth") == 2.0 and view.unattributed_ms == pytest.approx(8.0 - 7.0)
    view.validate()


def test_json_round_trip_keeps_every_run(tmp_path):
    r = RepeatReport.of_runs(_runs(), failed=["run 4: exit 3: boom"])
    path = r.save(tmp_path / "r.json")
    back = load(path)
    assert isinstance(back, RepeatReport) and len(back.runs) == 3 and back.failed == ["run 4: exit 3: boom"]
    assert [run.first_pass_ms for run in back.runs] == [run.first_pass_ms for run in r.runs]
    assert back.to_dict() == r.to_dict()


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["figures"]["excess_ms"].update(median=99.0), "outside its range"),
    (lambda d: d["causes"][0].update(of=7), "in 3 of 7 runs"),
    (lambda d: d["runs"][0].update(first_pass_ms="fast"), "runs"),
    (lambda d: d.update(runs=[]), "at least one run"),
    (lambda d: d["causes"][0].update(cause="nonsense"), "unknown cause 'nonsense'"),
    (lambda d: d["causes"][0].update(evidence="guessed"), "unknown evidence 'guessed'"),
    (lambda d: d["causes"][1].update(ms=[1.0, 2.0]), "per-run ms do not give its median and range"),
    (lambda d: d["runs"][1].update(model="other"), "a repeated trace is of one model and input"),
    (lambda d: d["runs"][0].update(kind="probe"), "not a trace report"),
])
def test_a_corrupt_or_edited_repeat_file_is_refused_with_the_field(tmp_path, edit, message):
    d = RepeatReport.of_runs(_runs()).to_dict()
    edit(d)
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(ReportError, match=message):
        load(tmp_path / "bad.json")


def test_a_newer_writers_extra_key_in_a_cause_is_left_out(tmp_path):
    d = RepeatReport.of_runs(_runs()).to_dict()
    d["causes"][0]["p90_ms"] = 5.0
    (tmp_path / "newer.json").write_text(json.dumps(d))
    assert load(tmp_path / "newer.json").causes[0].median_ms == 5.0


def test_a_cause_known_several_ways_compares_and_saves_with_its_weakest_evidence(tmp_path):
    runs = _runs()
    runs[1].causes[0].evidence = "estimated"  # jit_compile measured in two runs, estimated in one
    r = RepeatReport.of_runs(runs)
    assert next(c for c in r.causes if c.cause == "jit_compile").evidence == "estimated+measured"
    view = r.median_view()
    entry = next(c for c in view.causes if c.cause == "jit_compile")
    assert entry.evidence == "estimated" and "known as estimated+measured" in entry.detail
    view.validate()
    c = warmprof.compare(r.save(tmp_path / "mixed.json"), _runs()[0])
    assert next(row for row in c.rows if row.key == "jit_compile").cells[0].evidence == "estimated"
    assert isinstance(load(view.save(tmp_path / "view.json")).causes, list)


def test_runs_of_different_models_or_inputs_are_refused():
    other = trace_report({"jit_compile": 1.0}, shape=(1, 32))
    with pytest.raises(ReportError, match="a repeated trace is of one model and input"):
        RepeatReport.of_runs([_runs()[0], other])
    with pytest.raises(ReportError, match="at least one run"):
        RepeatReport.of_runs([])


def test_text_gives_each_causes_median_range_and_runs():
    text = str(RepeatReport.of_runs(_runs()))
    assert "3 runs (each a fresh process)" in text
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("allocator_growth"))
    assert "2.00 ms" in line and "0.00 ms-3.00 ms" in line and "2/3" in line
    assert "excess 8.00 ms (6.50 ms-8.50 ms)" in text


def test_png_draws_the_medians_with_plain_labels():
    pytest.importorskip("matplotlib")
    from warmprof.render import png

    fig = png.figure(RepeatReport.of_runs(_runs()), draw=True)
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert ticks == ["JIT compile", "allocator growth", "unattributed"]
    labels = [t.get_text() for t in ax.texts]
    assert any("2.00 ms (in 2/3 runs)" in t for t in labels)
    assert not any("$" in t or "e+" in t for t in labels + [t.get_text() for t in ax.get_xticklabels()])


def test_compare_reads_a_repeat_report_by_its_medians(tmp_path):
    path = RepeatReport.of_runs(_runs()).save(tmp_path / "five.json")
    c = warmprof.compare(path, _runs()[1])
    row = next(r for r in c.rows if r.key == "allocator_growth")
    assert [cell.ms for cell in row.cells] == [2.0, 0.0] or [cell.ms for cell in row.cells] == [2.0, None]
    assert any("the median of 3 runs" in w for w in c.warnings)


def _json_of(argv):
    """A run's --json path (given as --json=PATH: a path that starts with '-' stays a value)."""
    return next(a for a in argv if a.startswith("--json=")).removeprefix("--json=")


def test_the_runner_keeps_going_past_a_failed_run_and_lists_it(tmp_path):
    runs = iter(_runs())
    calls = []

    def fake(argv):
        calls.append(argv)
        if len(calls) == 2:
            return 3, "Traceback...\nwarmprof: error: the model raised on the first pass: boom\n"
        next(runs).save(_json_of(argv))
        return 0, ""

    r = run_repeats(["trace", "--demo", "--quiet"], 3, run=fake)
    assert len(r.runs) == 2 and r.failed == ["run 2: exit 3: warmprof: error: the model raised on the first pass: boom"]
    assert len({_json_of(a) for a in calls}) == 3  # each run its own file
    assert r.advice  # advice on the medians

    # the first run failing means every run would: its error at once, as the same kind (exit code)
    calls.clear()

    def bad_input(argv):
        calls.append(argv)
        return 2, "warmprof: error: --shape 'abc': not a shape\n"

    with pytest.raises(InputError, match="run 1 of 3 failed, so the others were not started: --shape 'abc'"):
        run_repeats(["trace", "--demo"], 3, run=bad_input)
    assert len(calls) == 1
    with pytest.raises(ModelError, match="run 1 of 2 failed"):
        run_repeats(["trace", "--demo"], 2, run=lambda argv: (4, "warmprof: error: the model raised"))


@pytest.mark.parametrize("bad", [0, -1, 101, 2.5, True, "5"])
def test_repeat_must_be_a_whole_number_of_runs(bad):
    with pytest.raises(InputError, match="repeat must be a whole number of runs"):
        check_repeat(bad)


def test_a_repeat_names_its_model_and_passes_the_options_on():
    assert cli_argv("demo", shape=(1, 64), threads=1, compile="default") == [
        "trace", "--demo", "--shape=1,64", "--device=cpu", "--threads=1", "--compile=default",
        "--cache=fresh", "--quiet"]
    # a target goes last, after `--`: one (or a value) that starts with '-' is not read as an option
    assert cli_argv("-m.py:make", shape="-1,4")[-3:] == ["--quiet", "--", "-m.py:make"]
    # --repeat --no-control: each run holds the model once (it was dropped: every run had its control)
    assert "--no-control" in cli_argv("demo", no_control=True) and "--no-control" not in cli_argv("demo")
    with pytest.raises(InputError, match="names its model"):
        cli_argv("resnet")


def test_one_run_and_negative_figures_read_plainly():
    runs = [trace_report({"jit_compile": 1.0}, unattributed=-3.0)]
    text = str(RepeatReport.of_runs(runs))
    assert "1 run (a fresh process)" in text and "1 runs" not in text
    two = RepeatReport.of_runs([trace_report({"jit_compile": 1.0}, unattributed=u) for u in (-3.0, -1.5)])
    line = next(ln for ln in str(two).splitlines() if ln.strip().startswith("unattributed"))
    assert "-3.00 ms to -1.50 ms" in line and "--" not in line


def test_repeat_true_is_refused_not_taken_as_one():
    import torch

    with pytest.raises(InputError, match="repeat must be a whole number of runs"):
        warmprof.trace(torch.nn.Linear(2, 2), (1, 2), repeat=True)
    with pytest.raises(InputError, match="do not go with it"):
        warmprof.trace("demo", (1, 8), repeat=2, no_grad=False)
    with pytest.raises(InputError, match="steady is a whole number of passes"):
        warmprof.trace("demo", (1, 8), repeat=2, steady=(3, 9))


def test_a_timeout_keeps_the_runs_that_finished_and_says_so():
    """--timeout during run 3 of 4: the two finished runs are the report (TimedOut carries it, the CLI
    saves and prints it, then exits 124); with none finished, no report and the same error."""
    from warmprof.errors import TimedOut
    from warmprof.system.supervise import Deadline

    runs = iter(_runs())

    def fake(argv):
        if fake.calls == 2:
            raise Deadline("warmprof trace ran past --timeout 9 s and was stopped")
        fake.calls += 1
        next(runs).save(_json_of(argv))
        return 0, ""

    fake.calls = 0
    with pytest.raises(TimedOut, match="during run 3 of 4; the report holds the 2 runs that finished") as e:
        run_repeats(["trace", "--demo", "--quiet"], 4, run=fake)
    assert e.value.exit_code == 124
    report = e.value.report
    assert len(report.runs) == 2 and report.failed == ["run 3: stopped by --timeout; run 4 not started"]
    assert any("this report holds the 2 runs that finished" in n for n in report.notes)

    def never(argv):
        raise Deadline("warmprof trace ran past --timeout 1 s and was stopped")

    with pytest.raises(TimedOut, match="during run 1 of 2; no report was written") as e:
        run_repeats(["trace", "--demo"], 2, run=never)
    assert e.value.report is None


def test_the_median_view_keeps_the_runs_run_to_run_difference_apart_from_unattributed():
    """Each run's accounting (issue 38) carries a run-to-run difference: the view's median of it is its own
    term, never folded into the unattributed time, and the view's own accounting holds exactly."""
    runs = _runs()
    for r, r2r in zip(runs, (2.0, -1.0, 4.0)):
        r.accounting = {"excess_ms": r.excess_ms, "causes_ms": r.causes_ms(),
                        "run_to_run_ms": r2r, "unattributed_ms": r.unattributed_ms - r2r}
        r.unattributed_ms -= r2r
    rep = RepeatReport.of_runs(runs)
    assert rep.figures["run_to_run_ms"] == {"median": 2.0, "min": -1.0, "max": 4.0}
    view = rep.median_view()
    assert view.accounting["run_to_run_ms"] == 2.0
    assert view.unattributed_ms == pytest.approx(8.0 - 7.0 - 2.0)
    view.validate()  # the view's accounting holds
    assert "run-to-run" in str(rep)
    back = load_json_round_trip(rep)
    assert back.figures["run_to_run_ms"]["median"] == 2.0


def load_json_round_trip(rep):
    data = json.loads(json.dumps(rep.to_dict()))
    return RepeatReport.from_dict(data)

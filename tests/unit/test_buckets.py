"""warmprof.serving.buckets (plan_buckets, costs_from_probe) and `warmprof buckets`: the plan is the exact
optimum (checked against every subset of boundaries), its figures add up, and bad input is refused."""

from __future__ import annotations

import bisect
import itertools
import json
import math
import random

import pytest
from factories import probe_report

from warmprof import cli
from warmprof.serving.buckets import BucketPlan, costs_from_probe, plan_buckets
from warmprof.errors import InputError, ReportError


# -- an independent reference: the cost of given boundaries, and the best over all of them ----------
def cost_of(boundaries, lengths, compile_ms, per_token_ms):
    """compile_ms per bucket that a request uses + per_token_ms per padded token, request by request."""
    ordered = sorted(boundaries)
    used, padded = set(), 0
    for n in lengths:
        b = ordered[bisect.bisect_left(ordered, n)]  # the smallest boundary >= n
        used.add(b)
        padded += b - n
    return compile_ms * len(used) + per_token_ms * padded


def brute_force(lengths, compile_ms, per_token_ms, max_buckets=None):
    """The cheapest cost over every set of boundaries drawn from 1..max(lengths) that covers the
    longest length (not only the observed lengths: the plan's claim that those suffice is tested too)."""
    top = max(lengths)
    best = math.inf
    for r in range(top):
        if max_buckets is not None and r + 1 > max_buckets:
            break
        for lower in itertools.combinations(range(1, top), r):
            best = min(best, cost_of((*lower, top), lengths, compile_ms, per_token_ms))
    return best


def random_case(rng):
    lengths = [rng.randint(1, 9) for _ in range(rng.randint(1, 9))]
    compile_ms = rng.choice([0.0, 1.0, rng.uniform(0, 20), rng.uniform(0, 200)])
    per_token_ms = rng.choice([0.0, 1.0, rng.uniform(0, 5)])
    return lengths, compile_ms, per_token_ms


@pytest.mark.parametrize("max_buckets", [None, 1, 2, 3])
def test_matches_brute_force_on_random_small_cases(max_buckets):
    rng = random.Random(1500 + (max_buckets or 0))
    for _ in range(150):
        lengths, compile_ms, per_token_ms = random_case(rng)
        plan = plan_buckets(lengths, compile_ms=compile_ms, per_token_ms=per_token_ms, max_buckets=max_buckets)
        expected = brute_force(lengths, compile_ms, per_token_ms, max_buckets)
        case = (lengths, compile_ms, per_token_ms, max_buckets, plan.boundaries)
        assert plan.cost_ms == pytest.approx(expected, rel=1e-9, abs=1e-9), case
        # the figures it reports are those of its own boundaries
        assert plan.cost_ms == pytest.approx(cost_of(plan.boundaries, lengths, compile_ms, per_token_ms), abs=1e-9), case
        assert plan.boundaries[-1] == max(lengths) and list(plan.boundaries) == sorted(set(plan.boundaries))
        assert set(plan.boundaries) <= set(lengths)  # every bucket is used: each boundary is an observed length
        assert max_buckets is None or len(plan.boundaries) <= max_buckets


def test_matches_brute_force_with_a_cap_the_uncapped_plan_exceeds():
    """Cheap compiles, so the uncapped plan wants many buckets and the capped programme (its own
    code path) has to choose; more distinct lengths than the small cases, brute force over them."""
    rng = random.Random(15)
    layered = 0
    for _ in range(40):
        lengths = [rng.randint(1, 40) for _ in range(rng.randint(6, 24))]
        compile_ms, per_token_ms = rng.uniform(0, 3), rng.uniform(0.5, 2)
        uncapped = plan_buckets(lengths, compile_ms=compile_ms, per_token_ms=per_token_ms)
        cap = rng.randint(1, min(5, max(1, len(uncapped.boundaries) - 1)))
        plan = plan_buckets(lengths, compile_ms=compile_ms, per_token_ms=per_token_ms, max_buckets=cap)
        values = sorted(set(lengths))
        best = min(cost_of((*lower, values[-1]), lengths, compile_ms, per_token_ms)
                   for r in range(cap) for lower in itertools.combinations(values[:-1], r))
        layered += cap < len(uncapped.boundaries)
        assert len(plan.boundaries) <= cap
        assert plan.cost_ms == pytest.approx(best, rel=1e-9), (lengths, compile_ms, per_token_ms, cap)
        assert plan.cost_ms >= uncapped.cost_ms - 1e-9
    assert layered >= 30  # the cap bit in most cases


def test_exact_arithmetic_on_a_known_case():
    # 17 x 6, 29 x 3, 64 x 1: buckets {29, 64} pad 6 x 12 = 72 tokens; {17, 29, 64} pad none; {64} pads 6x47+3x35.
    lengths = [17] * 6 + [29] * 3 + [64]
    plan = plan_buckets(lengths, compile_ms=50.0, per_token_ms=1.0)
    assert plan.boundaries == (17, 29, 64)  # 150 < 100 + 72 < 50 + 387
    assert (plan.cost_ms, plan.compile_ms, plan.padding_ms, plan.padded_tokens) == (150.0, 150.0, 0.0, 0)
    plan = plan_buckets(lengths, compile_ms=100.0, per_token_ms=1.0)
    assert plan.boundaries == (29, 64) and plan.padded_tokens == 72 and plan.cost_ms == 272.0
    assert [(b.upper, b.lower, b.lengths, b.requests, b.padded_tokens) for b in plan.buckets] == [(29, 17, 2, 9, 72),
                                                                                               (64, 64, 1, 1, 0)]
    assert plan.per_length.cost_ms == 300.0 and plan.one_bucket.padded_tokens == 6 * 47 + 3 * 35
    assert plan.one_bucket.cost_ms == 100.0 + 387.0
    assert plan.requests == 10 and plan.distinct_lengths == 3
    assert plan.bucket_for(18) == 29 and plan.bucket_for(29) == 29 and plan.bucket_for(30) == 64
    with pytest.raises(InputError, match="longer than"):
        plan.bucket_for(65)


def test_skewed_lengths_plan_costs_less_than_both_baselines():
    """Many short requests, a few long ones: one bucket pads every short one to the longest, one
    per length compiles for every rare length; the plan beats both, strictly."""
    rng = random.Random(7)
    lengths = [rng.randint(8, 64) for _ in range(900)] + [rng.randint(65, 2048) for _ in range(40)]
    plan = plan_buckets(lengths, compile_ms=800.0, per_token_ms=0.01)
    assert plan.cost_ms < plan.per_length.cost_ms and plan.cost_ms < plan.one_bucket.cost_ms
    assert plan.vs_per_length > 1.5 and plan.vs_one_bucket > 1.5  # not a rounding-error win
    assert 1 < len(plan.boundaries) < plan.distinct_lengths
    assert plan.per_length.buckets == plan.distinct_lengths and plan.per_length.padded_tokens == 0
    assert plan.one_bucket.buckets == 1 and plan.one_bucket.compile_ms == 800.0


def test_a_mapping_is_the_same_distribution_as_a_list():
    as_list = plan_buckets([5, 5, 5, 9, 30, 30], compile_ms=4.0, per_token_ms=0.5)
    as_map = plan_buckets({30: 2, 9: 1, 5: 3, 12: 0}, compile_ms=4.0, per_token_ms=0.5)
    assert as_list == as_map  # a zero count is no request


@pytest.mark.parametrize("lengths", [[42], [42] * 50, {42: 7}])
def test_one_distinct_length_is_one_bucket_with_no_padding(lengths):
    plan = plan_buckets(lengths, compile_ms=10.0, per_token_ms=1.0)
    assert plan.boundaries == (42,) and plan.padded_tokens == 0 and plan.cost_ms == 10.0
    assert plan.per_length == plan.one_bucket and plan.vs_per_length == plan.vs_one_bucket == 1.0


def test_the_largest_figures_accepted_stay_finite():
    plan = plan_buckets({1 << 40: 10**15, 1: 10**15}, compile_ms=1e9, per_token_ms=1e9)
    for figure in (plan.cost_ms, plan.one_bucket.cost_ms, plan.per_length.cost_ms):
        assert math.isfinite(figure)


def test_huge_compile_cost_gives_one_bucket():
    lengths = [3, 7, 7, 100, 250, 251]
    plan = plan_buckets(lengths, compile_ms=1e9, per_token_ms=1.0)
    assert plan.boundaries == (251,) and plan.cost_ms == plan.one_bucket.cost_ms


def test_zero_compile_cost_gives_one_bucket_per_length():
    lengths = [3, 7, 7, 100, 250, 251]
    plan = plan_buckets(lengths, compile_ms=0.0, per_token_ms=1.0)
    assert plan.boundaries == (3, 7, 100, 250, 251) and plan.cost_ms == 0.0
    assert plan.vs_one_bucket is None  # the plan costs nothing: no ratio to give


def test_free_padding_and_free_compiles_picks_the_fewest_buckets():
    plan = plan_buckets([3, 7, 100], compile_ms=0.0, per_token_ms=0.0)
    assert plan.boundaries == (100,) and plan.cost_ms == 0.0 and plan.vs_per_length == 1.0


def test_equal_costs_tie_to_fewer_buckets():
    # {4, 8}: 2 compiles, no padding = 2.0; {8}: 1 compile + 4 tokens x 0.25 = 2.0
    plan = plan_buckets([4, 8], compile_ms=1.0, per_token_ms=0.25)
    assert plan.boundaries == (8,) and plan.cost_ms == 2.0


def test_a_cap_of_one_is_one_bucket():
    plan = plan_buckets([1, 2, 3, 50], compile_ms=0.0, per_token_ms=1.0, max_buckets=1)
    assert plan.boundaries == (50,) and plan.padded_tokens == 49 + 48 + 47


def test_large_inputs_stay_exact_in_integers():
    """Huge counts and lengths: padded tokens are exact integers, whatever the float costs."""
    lengths = {10**9: 3, 10**9 + 1: 10**12, 7: 5}
    plan = plan_buckets(lengths, compile_ms=1.0, per_token_ms=1e-12, max_buckets=1)
    assert plan.padded_tokens == 3 * 1 + 5 * (10**9 + 1 - 7)
    assert plan.padding_ms == pytest.approx(plan.padded_tokens * 1e-12)


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(lengths=[]), "no lengths"),
    (dict(lengths={5: 0}), "no lengths"),
    (dict(lengths=[5, 0]), r"lengths\[1\] = 0"),
    (dict(lengths=[5, -3]), r"lengths\[1\] = -3"),
    (dict(lengths=[5, 7.5]), "not an integer"),
    (dict(lengths=[5.0]), "not an integer"),
    (dict(lengths=[5, float("nan")]), "NaN"),
    (dict(lengths=[True]), "not a length"),
    (dict(lengths="17,29"), "string"),
    (dict(lengths=17), "list of integers"),
    (dict(lengths={17: -1}), "negative"),
    (dict(lengths={17: 1.5}), "whole numbers"),
    (dict(lengths={"17": 1}), "not an integer"),
    (dict(compile_ms=-1.0), "compile_ms = -1 is negative"),
    (dict(per_token_ms=-0.5), "per_token_ms = -0.5 is negative"),
    (dict(compile_ms=float("nan")), "compile_ms is NaN"),
    (dict(per_token_ms=float("nan")), "per_token_ms is NaN"),
    (dict(per_token_ms=float("inf")), "infinite"),
    (dict(compile_ms="900"), "number of milliseconds"),
    (dict(compile_ms=None), "number of milliseconds"),
    (dict(max_buckets=0), "at least 1 bucket"),
    (dict(max_buckets=-2), "at least 1 bucket"),
    (dict(max_buckets=2.0), "integer of 1 or more"),
    (dict(max_buckets=True), "integer of 1 or more"),
    # figures that overflowed a float in the planner (OverflowError traceback) or printed inf/nan
    (dict(lengths=[5, 10**400]), r"lengths\[1\] = an integer of about 401 digits: longer than any context"),
    (dict(lengths=[(1 << 40) + 1]), "longer than any context"),
    (dict(lengths={5: 10**400}), "over 1,000,000,000,000,000 requests"),
    (dict(compile_ms=1e308), "compile_ms = 1e[+]308 ms is more than"),
    (dict(per_token_ms=1e300), "per_token_ms = 1e[+]300 ms is more than"),
])
def test_bad_input_is_refused_with_an_input_error(kwargs, match):
    args = dict(lengths=[5, 9, 9], compile_ms=10.0, per_token_ms=1.0) | kwargs
    lengths = args.pop("lengths")
    with pytest.raises(InputError, match=match):
        plan_buckets(lengths, **args)


def test_the_costs_are_keyword_only_and_required():
    with pytest.raises(TypeError):
        plan_buckets([5, 9], 10.0, 1.0)  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan_buckets([5, 9], compile_ms=10.0)  # type: ignore[call-arg]


def test_the_plan_is_a_frozen_value_with_a_table_and_json():
    plan = plan_buckets([17] * 6 + [29] * 3 + [64], compile_ms=100.0, per_token_ms=1.0)
    assert isinstance(plan, BucketPlan)
    with pytest.raises(AttributeError):
        plan.boundaries = (64,)  # type: ignore[misc]
    text = str(plan)
    assert "10 requests at 3 distinct lengths (17-64)" in text
    table = text[text.index("bucket <="):text.index("Cost over")]
    assert [line.split() for line in table.splitlines()[2:4]] == [["29", "17-29", "2", "9", "72"], ["64", "64", "1", "1", "0"]]
    assert "one per length" in text and "one bucket" in text and "1.10x" in text and "1.79x" in text
    data = json.loads(json.dumps(plan.to_dict(), allow_nan=False))
    assert data["boundaries"] == [29, 64] and data["cost_ms"] == 272.0
    assert data["baselines"]["one_bucket"]["cost_ms"] == 487.0 and data["baselines"]["per_length"]["buckets"] == 3
    assert data["ratios"]["one_bucket_over_plan"] == pytest.approx(487 / 272)


# -- the command -------------------------------------------------------------------------------------
def test_cli_prints_the_plan_and_writes_json(tmp_path, capsys):
    out = tmp_path / "plan.json"
    code = cli.main(["buckets", "--lengths", "17,17,17,17,17,17", "29,29,29", "--lengths", "64", "--compile-ms", "100",
                     "--per-token-ms", "1", "--json", str(out)])
    assert code == 0
    captured = capsys.readouterr()
    assert "Plan: 2 buckets" in captured.out and "one per length" in captured.out
    assert "wrote" in captured.err and str(out) in captured.err
    data = json.loads(out.read_text())
    assert data["boundaries"] == [29, 64] and data["costs_from"] == "given"
    assert data["inputs"] == {"compile_ms_per_bucket": 100.0, "per_token_ms": 1.0, "max_buckets": None,
                              "compiles": "static"}


@pytest.mark.parametrize("content", ["17\n17\n# a comment\n\n29,64\n", "[17, 17, 29, 64]", '{"17": 2, "29": 1, "64": 1}'])
def test_cli_reads_a_lengths_file(tmp_path, capsys, content):
    f = tmp_path / "lengths.txt"
    f.write_text(content)
    assert cli.main(["buckets", "--lengths-file", str(f), "--compile-ms", "1", "--per-token-ms", "1", "--max-buckets", "2",
                     "--json", str(tmp_path / "p.json")]) == 0
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["requests"] == 4 and data["distinct_lengths"] == 3 and len(data["boundaries"]) <= 2
    assert data["inputs"]["max_buckets"] == 2
    capsys.readouterr()


@pytest.mark.parametrize(("argv", "match"), [
    (["--lengths", "17,x", "--compile-ms", "1", "--per-token-ms", "1"], "'x' is not an integer"),
    (["--lengths", "17,0", "--compile-ms", "1", "--per-token-ms", "1"], "lengths"),
    (["--lengths", "17,29"], "give --compile-ms and --per-token-ms, or --from-probe"),
    (["--lengths", "17,29", "--compile-ms", "1"], "give --per-token-ms, or --from-probe"),
    (["--compile-ms", "1", "--per-token-ms", "1"], "give the request lengths"),
    (["--lengths", "17", "--compile-ms", "-1", "--per-token-ms", "1"], "negative"),
    (["--lengths", "17", "--compile-ms", "nan", "--per-token-ms", "1"], "NaN"),
    (["--lengths", "17," + "9" * 400, "--compile-ms", "1", "--per-token-ms", "1"], "longer than any context"),
    (["--lengths", "17", "--compile-ms", "1e308", "--per-token-ms", "1e308"], "is more than"),
    (["--lengths", "17", "--compile-ms", "1", "--per-token-ms", "1", "--max-buckets", "0"], "at least 1 bucket"),
    (["--lengths-file", "/nonexistent/lengths.txt", "--compile-ms", "1", "--per-token-ms", "1"], "no such file"),
])
def test_cli_refuses_bad_input_with_exit_code_2(capsys, argv, match):
    assert cli.main(["buckets", *argv]) == InputError.exit_code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warmprof: error: ")
    assert match in lines[0]


def test_cli_refuses_both_length_sources_and_a_bad_json_path(tmp_path, capsys):
    f = tmp_path / "l.txt"
    f.write_text("17\n")
    assert cli.main(["buckets", "--lengths", "17", "--lengths-file", str(f), "--compile-ms", "1", "--per-token-ms", "1"]) == 2
    assert cli.main(["buckets", "--lengths", "17", "--compile-ms", "1", "--per-token-ms", "1", "--json", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_cli_bad_lengths_file_json(tmp_path, capsys):
    f = tmp_path / "l.json"
    for content, match in (("[17, 2.5]", "not an integer"), ('{"a": 1}', "'a' is not an integer"), ("[17,", "invalid JSON")):
        f.write_text(content)
        assert cli.main(["buckets", "--lengths-file", str(f), "--compile-ms", "1", "--per-token-ms", "1"]) == 2
        assert match in capsys.readouterr().err


# -- costs from a probe report -------------------------------------------------------------------------
def counted_sweep_report():
    """A compile probe whose sweep counted its compiles: 8 lengths, 2 buckets."""
    r = probe_report()
    r.bucketing.update(counted=True, lengths=[17, 29, 41, 53, 65, 77, 89, 101], buckets=[56, 104])
    return r


def test_costs_from_a_counted_sweep():
    r = counted_sweep_report()
    costs = costs_from_probe(r)
    # per token: no steady reference in a counted sweep -> the matmul row with the most rows, 96x64x32 at 0.04 ms
    assert costs.per_token_ms == pytest.approx(0.04 / 96)
    padded = (56 - 17) + (56 - 29) + (56 - 41) + (56 - 53) + (104 - 65) + (104 - 77) + (104 - 89) + (104 - 101)
    assert padded == 168
    assert costs.compile_ms == pytest.approx((120.0 - 31.0 + 0.04 / 96 * padded) / (8 - 2))
    assert "compiles counted" in costs.compile_how and "168 padded tokens" in costs.compile_how
    assert "96x64x32" in costs.per_token_how


def test_costs_from_the_sweeps_steady_reference_and_per_call_times():
    """An eager sweep: compiles inferred (not trusted), a steady reference call, each call's time."""
    r = probe_report(backend="eager")
    lens = [17, 29, 41, 53]
    r.bucketing.update(counted=False, lengths=lens, buckets=[56])
    r.bucketing["bucketed"]["steady_ref_ms"] = 0.56
    # first call pays the function's first-ever call; the others 2, 3, 5 ms above their steady time
    r.bucketing["distinct"]["first_calls_ms"] = [40.0, 2.0 + 0.29, 3.0 + 0.41, 5.0 + 0.53]
    costs = costs_from_probe(r)
    assert costs.per_token_ms == pytest.approx(0.01)  # 0.56 ms / 56 rows
    assert costs.compile_ms == pytest.approx(3.0)  # median of 2, 3, 5: the 40 ms first call left out
    assert "first_calls_ms" in costs.compile_how and "steady_ref_ms" in costs.per_token_how


def test_costs_from_new_shape_rows_when_the_sweep_has_nothing():
    r = probe_report()  # the factory's sweep: compiles not marked counted, no per-call times
    costs = costs_from_probe(r)
    # new_shape rows: matmul 25 - 0.04, softmax 0.03 - 0.02 -> median of the two
    assert costs.compile_ms == pytest.approx(((25.0 - 0.04) + (0.03 - 0.02)) / 2)
    assert "new shape" in costs.compile_how


def test_costs_from_a_saved_probe_report_path(tmp_path):
    path = tmp_path / "p.json"
    counted_sweep_report().save(path)
    assert costs_from_probe(str(path)) == costs_from_probe(counted_sweep_report())


def test_given_figures_are_used_as_they_are():
    costs = costs_from_probe(counted_sweep_report(), per_token_ms=0.0, compile_ms=None)
    assert costs.per_token_ms == 0.0 and costs.per_token_how == "given"
    assert costs.compile_ms == pytest.approx(89.0 / 6)  # no padding correction at 0 ms per token
    both = costs_from_probe(counted_sweep_report(), compile_ms=7.0, per_token_ms=0.5)
    assert (both.compile_ms, both.per_token_ms, both.compile_how) == (7.0, 0.5, "given")


def test_a_probe_with_no_excess_gives_zero_compile_cost_and_says_so():
    r = probe_report()
    for rows in r.ops.values():
        for row in rows:
            if row.role == "new_shape":
                row.first_ms = row.steady_ms  # new shapes cost nothing over steady
    costs = costs_from_probe(r)
    assert costs.compile_ms == 0.0 and "no first-call excess" in costs.compile_how


def test_a_probe_lacking_the_figures_is_refused():
    r = probe_report()
    r.ops = {op: [row for row in rows if row.role != "new_shape"] for op, rows in r.ops.items()}
    with pytest.raises(InputError, match="no first-call figures.*--compile-ms"):
        costs_from_probe(r)
    assert costs_from_probe(r, compile_ms=5.0).compile_ms == 5.0  # the missing one given: fine
    r = probe_report()
    for rows in r.ops.values():
        for row in rows:
            row.steady_ms = 0.0
    with pytest.raises(InputError, match="no steady time.*--per-token-ms"):
        costs_from_probe(r)


def test_a_report_of_another_kind_is_refused(tmp_path):
    from factories import trace_report

    with pytest.raises(InputError, match="probe report"):
        costs_from_probe(trace_report({"jit_compile": 2.0}))
    path = tmp_path / "t.json"
    trace_report({"jit_compile": 2.0}).save(path)
    with pytest.raises(ReportError, match="not a 'probe' report"):
        costs_from_probe(path)


def test_cli_from_probe(tmp_path, capsys):
    path = tmp_path / "p.json"
    counted_sweep_report().save(path)
    out = tmp_path / "plan.json"
    lengths = ",".join(["20"] * 50 + ["40"] * 30 + ["2000"])
    assert cli.main(["buckets", "--lengths", lengths, "--from-probe", str(path), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Costs estimated from" in text and "compiles counted" in text
    data = json.loads(out.read_text())
    expected = costs_from_probe(counted_sweep_report())
    assert data["inputs"]["compile_ms_per_bucket"] == pytest.approx(expected.compile_ms)
    assert data["costs_from"]["probe"] == str(path) and data["costs_from"]["compile_how"] == expected.compile_how
    # --per-token-ms beside --from-probe is used, the compile cost still estimated
    assert cli.main(["buckets", "--lengths", lengths, "--from-probe", str(path), "--per-token-ms", "0",
                     "--json", str(out)]) == 0
    capsys.readouterr()
    data = json.loads(out.read_text())
    assert data["inputs"]["per_token_ms"] == 0.0 and data["boundaries"] == [2000]
    assert data["costs_from"]["per_token_how"] == "given"


def test_cli_from_probe_of_another_kind_exits_5(tmp_path, capsys):
    from factories import trace_report

    path = tmp_path / "t.json"
    trace_report({"jit_compile": 2.0}).save(path)
    assert cli.main(["buckets", "--lengths", "17", "--from-probe", str(path)]) == ReportError.exit_code
    assert "not a 'probe' report" in capsys.readouterr().err

"""issue 27: bucket plans from what really happened. The automatic-dynamic compile model (two compiles
at most, whatever the buckets) against a brute force; the costs and lengths a watch report gives (its
keys' calls, its first calls' measured compiles, its keys' latency per length) and the compile model
its keys showed; the costs a trace report gives; the CLI's --from-watch / --from-trace / --compiles,
and their refusals."""

from __future__ import annotations

import bisect
import itertools
import json
import math
import random

import pytest
from factories import trace_report

from warmprof import cli
from warmprof.errors import InputError
from warmprof.report.watch import WatchReport
from warmprof.serving.buckets import costs_from_trace, costs_from_watch, plan_buckets


def auto_cost(boundaries, lengths, compile_ms, per_token_ms):
    """Request by request: min(buckets used, 2) compiles (automatic dynamic shapes) + the padding."""
    ordered = sorted(boundaries)
    used, padded = set(), 0
    for n in lengths:
        b = ordered[bisect.bisect_left(ordered, n)]
        used.add(b)
        padded += b - n
    return compile_ms * min(len(used), 2) + per_token_ms * padded


def auto_brute_force(lengths, compile_ms, per_token_ms, max_buckets=None):
    top, best = max(lengths), math.inf
    for r in range(top):
        if max_buckets is not None and r + 1 > max_buckets:
            break
        for lower in itertools.combinations(range(1, top), r):
            best = min(best, auto_cost((*lower, top), lengths, compile_ms, per_token_ms))
    return best


@pytest.mark.parametrize("max_buckets", [None, 1, 2, 3])
def test_the_automatic_model_matches_a_brute_force(max_buckets):
    rng = random.Random(2700 + (max_buckets or 0))
    for _ in range(120):
        lengths = [rng.randint(1, 9) for _ in range(rng.randint(1, 9))]
        compile_ms = rng.choice([0.0, 1.0, rng.uniform(0, 20), rng.uniform(0, 200)])
        per_token_ms = rng.choice([0.0, 1.0, rng.uniform(0, 5)])
        plan = plan_buckets(lengths, compile_ms=compile_ms, per_token_ms=per_token_ms, max_buckets=max_buckets,
                            compiles="automatic")
        plan.validate()
        case = (lengths, compile_ms, per_token_ms, max_buckets, plan.boundaries)
        assert plan.cost_ms == pytest.approx(auto_brute_force(lengths, compile_ms, per_token_ms, max_buckets),
                                             rel=1e-9, abs=1e-9), case
        assert plan.cost_ms == pytest.approx(auto_cost(plan.boundaries, lengths, compile_ms, per_token_ms), abs=1e-9)
        assert plan.per_length.compile_ms == pytest.approx(compile_ms * min(len(set(lengths)), 2))
        assert max_buckets is None or len(plan.boundaries) <= max_buckets


def test_under_automatic_dynamic_shapes_padding_past_two_buckets_buys_nothing():
    lengths = [16, 24, 32, 40, 48, 56] * 10
    static = plan_buckets(lengths, compile_ms=3000.0, per_token_ms=0.01)
    auto = plan_buckets(lengths, compile_ms=3000.0, per_token_ms=0.01, compiles="automatic")
    assert static.boundaries == (56,)  # a compile per bucket: one bucket wins
    assert auto.boundaries == (56,) and auto.compiles == "automatic"  # 3000 + padding beats 2 x 3000
    cheap = plan_buckets(lengths, compile_ms=1.0, per_token_ms=1.0, compiles="automatic")
    assert cheap.boundaries == tuple(sorted(set(lengths))) and cheap.compile_ms == 2.0 and cheap.padded_tokens == 0
    assert "two at most, whatever the buckets" in str(cheap)
    back = type(cheap).from_dict(json.loads(json.dumps(cheap.to_dict())))
    assert back.compiles == "automatic"
    with pytest.raises(InputError, match="compiles must be one of static, automatic"):
        plan_buckets(lengths, compile_ms=1.0, per_token_ms=1.0, compiles="dynamic")


# -- a watch report's costs, lengths and compile model ---------------------------------------------


def _watch(compiled_keys: int | None = None, *, keys=(16, 24, 32, 40), calls=(6, 4, 3, 5), compile_ms=(900.0, 1100.0,
           1000.0, 1200.0), p50=None) -> WatchReport:
    """A watch report of token ids (1, n): each key's calls and median (0.5 ms + 0.01 ms a token unless
    given), its first call an event booking the compile (the first `compiled_keys` keys only: None, all)."""
    p50 = p50 or [0.5 + 0.01 * n for n in keys]
    rows, events = [], []
    for i, (n, c, m) in enumerate(zip(keys, calls, p50)):
        compiled = compiled_keys is None or i < compiled_keys
        first = (compile_ms[i] + m) if compiled else m * 3
        rows.append({"key": f"1x{n} int64", "calls": c, "first_ms": first, "p50_ms": m, "p90_ms": max(m, first),
                     "p99_ms": max(m, first), "max_ms": max(m, first), "events": 1})
        events.append({"index": i, "key": f"1x{n} int64", "t_s": float(i), "ms": first, "gap_s": 0.0, "first": True,
                       "outlier": False, "causes": [{"cause": "jit_compile", "ms": compile_ms[i], "evidence": "measured",
                                                     "source": "dynamo"}] if compiled else []})
    r = WatchReport(model="m", calls=sum(calls), keys=rows, events=events)
    r.validate()
    return r


def test_a_watch_report_gives_the_lengths_the_measured_compile_and_the_per_token_cost():
    c = costs_from_watch(_watch())
    assert c.lengths == {16: 6, 24: 4, 32: 3, 40: 5}
    assert c.compile_ms == pytest.approx(1050.0)  # the median of the four first calls' compiles
    assert c.per_token_ms == pytest.approx(0.01)  # the slope of the medians against the length
    assert c.compiles == "static" and "each of the 4 keys' first calls compiled" in c.compiles_how
    assert "dimension 1" in c.lengths_how and "measured on the model" in c.compile_how


def test_a_watch_report_whose_later_lengths_did_not_compile_reads_as_automatic():
    c = costs_from_watch(_watch(compiled_keys=2))
    assert c.compiles == "automatic" and "only the first 2 of 4" in c.compiles_how
    assert c.compile_ms == pytest.approx(1000.0)  # of the two that compiled


def test_given_figures_are_used_as_they_are_and_a_falling_latency_costs_no_padding():
    c = costs_from_watch(_watch(p50=[0.9, 0.8, 0.7, 0.6]), compile_ms=5.0)
    assert c.compile_ms == 5.0 and c.compile_how == "given"
    assert c.per_token_ms == 0.0 and "falling: 0 used" in c.per_token_how


@pytest.mark.parametrize("keys, match", [
    (["1x16 int64", "2x24 int64"], "vary in 2 dimensions"),
    (["short", "long"], "do not name two or more shapes"),
])
def test_a_watch_report_whose_keys_name_no_one_length_is_refused(keys, match):
    r = _watch()
    r.keys = [dict(k, key=name) for k, name in zip(r.keys, keys)]
    with pytest.raises(InputError, match=match):
        costs_from_watch(r)


def test_too_few_steady_keys_for_a_per_token_cost_is_refused_unless_given():
    r = _watch(calls=(6, 2, 2, 2))
    with pytest.raises(InputError, match="fewer than two keys with 3 or more calls"):
        costs_from_watch(r)
    assert costs_from_watch(r, per_token_ms=0.02).per_token_ms == 0.02


def test_a_trace_report_gives_its_compile_causes_and_steady_per_token():
    r = trace_report({"jit_compile": 900.0, "graph_capture": 40.0, "allocator_growth": 5.0}, steady=6.4, shape=(1, 64))
    c = costs_from_trace(r)
    assert c.compile_ms == pytest.approx(940.0) and c.per_token_ms == pytest.approx(0.1)
    assert c.lengths is None and c.compiles == "static" and "assumed" in c.compiles_how
    eager = costs_from_trace(trace_report({"allocator_growth": 5.0}))
    assert eager.compile_ms == 0.0 and "booked no compile" in eager.compile_how


# -- the command line -------------------------------------------------------------------------------


def test_cli_from_watch_plans_the_watched_traffic(tmp_path, capsys):
    path = _watch().save(tmp_path / "w.json")
    out = tmp_path / "plan.json"
    assert cli.main(["buckets", "--from-watch", str(path), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "18 requests at 4 distinct lengths (16-40)" in text
    assert "Costs measured on the model, from" in text and "compiles: static: each of the 4 keys" in text
    data = json.loads(out.read_text())
    assert data["costs_from"]["watch"] == str(path) and data["costs_from"]["compile_ms"] == pytest.approx(1050.0)
    assert data["inputs"]["compiles"] == "static"
    assert cli.main(["buckets", "--from-watch", str(path), "--compiles", "automatic", "--lengths", "16,40"]) == 0
    text = capsys.readouterr().out
    assert "2 requests at 2 distinct lengths" in text and "compiles: given (--compiles)" in text


def test_cli_from_trace_needs_the_lengths_and_one_source(tmp_path, capsys):
    path = trace_report({"jit_compile": 900.0}, steady=6.4).save(tmp_path / "r.json")
    assert cli.main(["buckets", "--from-trace", str(path)]) == 2
    assert "give the request lengths" in capsys.readouterr().err
    assert cli.main(["buckets", "--from-trace", str(path), "--lengths", "8,16,64"]) == 0
    assert "jit_compile 900 ms booked" in capsys.readouterr().out
    watch = _watch().save(tmp_path / "w.json")
    assert cli.main(["buckets", "--from-trace", str(path), "--from-watch", str(watch), "--lengths", "8"]) == 2
    assert "give one source of costs, not --from-watch and --from-trace" in capsys.readouterr().err
    assert cli.main(["buckets", "--from-watch", str(path)]) != 0  # a trace report is no watch report
    assert "watch" in capsys.readouterr().err


def test_keys_that_name_no_one_length_serve_when_the_lengths_and_per_token_are_given(tmp_path, capsys):
    r = _watch()
    r.keys = [dict(k, key=name) for k, name in zip(r.keys, ["1x16 int64", "2x24 int64", "3x32 int64", "4x40 int64"])]
    r.events = [dict(e, key=name) for e, name in zip(r.events, ["1x16 int64", "2x24 int64", "3x32 int64", "4x40 int64"])]
    c = costs_from_watch(r, per_token_ms=0.02, need_lengths=False)
    assert c.lengths is None and c.compile_ms == pytest.approx(1050.0) and c.compiles == "static"
    path = r.save(tmp_path / "w.json")
    assert cli.main(["buckets", "--from-watch", str(path), "--lengths", "16,40", "--per-token-ms", "0.02",
                     "--json", str(tmp_path / "p.json")]) == 0
    assert "lengths" not in json.loads((tmp_path / "p.json").read_text())["costs_from"]  # the caller's, not the report's


def test_keyword_keys_name_their_shape():
    r = _watch()
    names = [f"input_ids={k['key']}" for k in r.keys]
    r.keys = [dict(k, key=n) for k, n in zip(r.keys, names)]
    r.events = [dict(e, key=n) for e, n in zip(r.events, names)]
    assert costs_from_watch(r).lengths == {16: 6, 24: 4, 32: 3, 40: 5}


def test_a_report_that_kept_no_first_call_is_refused_unless_the_compile_is_given():
    r = _watch()
    r.events, r.events_dropped = [], 4
    with pytest.raises(InputError, match="kept no key's first call"):
        costs_from_watch(r)
    assert costs_from_watch(r, compile_ms=7.0).compile_ms == 7.0


def test_one_compile_for_every_length_reads_as_automatic_with_two_as_an_upper_bound():
    c = costs_from_watch(_watch(compiled_keys=1))
    assert c.compiles == "automatic" and "two is an upper bound" in c.compiles_how


def test_a_capture_counts_as_a_compile_of_a_new_shape():
    r = _watch()
    r.events = [dict(e, causes=[dict(c, cause="graph_capture") for c in e["causes"]]) for e in r.events]
    c = costs_from_watch(r)
    assert c.compile_ms == pytest.approx(1050.0) and c.compiles == "static"

"""The bucket plan report kind (report/buckets.py): plan_buckets()'s BucketPlan is data, saved and
loaded like every kind (a bad field is a ReportError naming it); str() is the registry's text format
(render/buckets_text.py), as `warmprof buckets` prints it."""

from __future__ import annotations

import json

import pytest

import warmprof
from warmprof import render
from warmprof.cli import main
from warmprof.errors import ReportError
from warmprof.render.buckets_text import BucketsTextRenderer
from warmprof.report.buckets import BucketPlan
from warmprof.serving.buckets import plan_buckets

TEXT = """\
warmprof buckets: 10 requests at 3 distinct lengths (17-64)
  costs: 100.0 ms per bucket compiled, 1 ms per padded token
  compiles: one per bucket (static shapes: torch.compile(dynamic=False), CUDA graphs, an engine per shape)

Plan: 2 buckets
  bucket <=  lengths  distinct  requests  padded tokens
  ---------  -------  --------  --------  -------------
         29  17-29           2         9             72
         64  64              1         1              0

Cost over the observed requests (ms)
                  buckets  compile  padding   total  vs plan
  --------------  -------  -------  -------  ------  -------
  plan                  2   200.00    72.00  272.00
  one per length        3   300.00     0.00  300.00    1.10x
  one bucket            1   100.00   387.00  487.00    1.79x
"""


def plan(**kwargs) -> BucketPlan:
    return plan_buckets([17] * 6 + [29] * 3 + [64], **({"compile_ms": 100.0, "per_token_ms": 1.0} | kwargs))


def test_the_text_is_the_registered_renderers():
    p = plan()
    assert str(p) == TEXT == BucketsTextRenderer().render(p) == render.render(p, "text")


def test_str_goes_through_the_registered_text_renderer(monkeypatch):
    monkeypatch.setattr(BucketsTextRenderer, "render", lambda self, p: f"{len(p.boundaries)} buckets\n")
    assert str(plan()) == "2 buckets\n"


def test_a_cap_and_a_plan_that_costs_nothing_are_said():
    text = str(plan(compile_ms=0.0, per_token_ms=0.0, max_buckets=1))
    assert "at most 1 buckets" in text and text.count("1.00x") == 2  # everything free: as good as the plan
    text = str(plan(compile_ms=0.0))  # compiles free: one bucket per length, no padding
    assert "Plan: 3 buckets" in text and "plan costs 0" in text


@pytest.mark.parametrize("kwargs", [{}, {"max_buckets": 1}, {"compile_ms": 0.0, "per_token_ms": 0.0}])
def test_a_plan_round_trips_through_dict_and_json(tmp_path, kwargs):
    p = plan(**kwargs)
    data = p.to_dict()
    assert data["schema_version"] == warmprof.report.SCHEMA_VERSION and data["kind"] == "buckets"
    assert BucketPlan.from_dict(data) == p
    back = warmprof.load(p.save(tmp_path / "p.json"))
    assert isinstance(back, BucketPlan) and back == p and str(back) == str(p)
    assert back.bucket_for(20) == p.bucket_for(20)


def test_a_plan_the_cli_wrote_shows_again(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["buckets", "--lengths", "17,17,17,17,17,17,29,29,29,64", "--compile-ms", "100", "--per-token-ms", "1",
                 "--json", str(out)]) == 0
    assert capsys.readouterr().out == TEXT
    assert main(["show", str(out)]) == 0
    assert capsys.readouterr().out == TEXT
    assert main(["show", str(out), "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == plan().to_dict()  # the command's own costs_from is not part of the plan
    assert render.formats("buckets") == ["text", "json"]


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.pop("boundaries"), r"missing field 'boundaries'"),
    (lambda d: d.update(boundaries=[29, "64"]), r"boundaries\[1\]: expected a positive integer"),
    (lambda d: d.update(boundaries=[29, 65]), r"boundaries: \[29, 65\] are not the buckets' upper ends \[29, 64\]"),
    (lambda d: d.update(cost_ms=float("nan")), r"cost_ms: expected a finite number"),
    (lambda d: d.update(cost_ms=-1.0), r"cost_ms is negative"),
    (lambda d: d.update(requests=11), r"requests: 11, but the buckets hold 10"),
    (lambda d: d.update(padded_tokens=70), r"padded_tokens: 70, but the buckets hold 72"),
    (lambda d: d.update(distinct_lengths=0), r"distinct_lengths: expected a positive integer"),
    (lambda d: d["inputs"].pop("per_token_ms"), r"inputs: missing key 'per_token_ms'"),
    (lambda d: d["inputs"].update(per_token_ms=-0.5), r"inputs\.per_token_ms is negative"),
    (lambda d: d["inputs"].update(max_buckets=1), r"buckets: 2 buckets, over inputs\.max_buckets 1"),
    (lambda d: d["inputs"].update(max_buckets=0), r"inputs\.max_buckets: expected a positive integer or null"),
    (lambda d: d["buckets"][1].update(lower=20), r"buckets\[1\]: lengths 20-64 do not follow the bucket below"),
    (lambda d: d["buckets"][0].update(extra=1), r"buckets\[0\]: unexpected key 'extra'"),
    (lambda d: d["baselines"]["one_bucket"].update(cost_ms=1.0), r"baselines\.one_bucket\.cost_ms: 1\.0 is not"),
    (lambda d: d["baselines"].pop("per_length"), r"baselines: missing key 'per_length'"),
    (lambda d: d["ratios"].update(one_bucket_over_plan="big"), r"ratios\.one_bucket_over_plan: expected a finite"),
])
def test_a_bad_field_is_refused_naming_it(change, message, tmp_path):
    data = plan().to_dict()
    change(data)
    with pytest.raises(ReportError, match=message):
        BucketPlan.from_dict(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReportError, match=str(path)):
        warmprof.load(path)

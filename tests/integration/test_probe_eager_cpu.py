"""A reduced eager probe on the CPU: structure, round trip, CLI; ratios and structure, never absolute ms."""

import json

import pytest

import warmprof
from warmprof import cli
from warmprof.report import load
from warmprof.report.probe import VERDICTS, ProbeReport


@pytest.fixture(scope="module")
def report():
    return warmprof.probe(device="cpu", backend="eager", shapes_per_op=2, steady_calls=8, rerun_rounds=2, K=6, B=2,
                          progress=False)


def test_every_op_and_shape_has_a_row_with_a_verdict_and_evidence(report):
    assert isinstance(report, ProbeReport)
    assert set(report.ops) == {"matmul", "softmax", "elementwise"}
    for op, rows in report.ops.items():
        assert [r.role for r in rows] == ["op_first", "new_shape", "pair_a", "pair_b"]
        for r in rows:
            assert r.verdict in VERDICTS and r.evidence
            assert r.first_ms > 0 and r.steady_p10_ms <= r.steady_ms <= r.steady_p90_ms
            assert r.ratio == pytest.approx(r.first_ms / r.steady_ms)
            assert r.seen_rerun_ms is not None


def test_bands_are_ordered_and_sized_per_output(report):
    b = report.bands
    assert 0 == b["launch"]["lo_ms"] < b["launch"]["hi_ms"] == b["allocation"]["lo_ms"] < b["allocation"]["hi_ms"]
    sizes = {int(k): v for k, v in b["allocation"]["by_bytes"].items()}
    assert set(sizes) == {r.alloc_bytes for _, r in report.rows()}
    small, large = min(sizes), max(sizes)
    assert sizes[large]["alloc_ms"] > sizes[small]["alloc_ms"]  # more pages to touch


def test_matched_pairs_have_equal_output_size(report):
    assert len(report.shape_vs_size) == 3
    for pair in report.shape_vs_size:
        a, b = [r for r in report.ops[pair["op"]] if r.role in ("pair_a", "pair_b")]
        assert a.output_bytes == b.output_bytes and a.label != b.label


def test_eager_has_no_compile_counter_so_bucketing_is_inferred(report):
    b = report.bucketing
    assert (b["K"], b["B"], b["counted"]) == (6, 2, False)
    assert b["default_dynamic"] is None
    assert 0 <= b["bucketed"]["compiles"] <= 6 and 0 <= b["distinct"]["compiles"] <= 6
    assert [p.id for p in report.predictions] == ["P1", "P2", "P3", "P4"]


def test_report_round_trips_and_renders(report, tmp_path):
    back = load(report.save(tmp_path / "eager.json"))
    assert back.to_dict() == report.to_dict()
    assert "Predictions" in str(back)


def test_cli_probe_writes_json(tmp_path, capsys):
    path = tmp_path / "cli.json"
    code = cli.main(["probe", "--ops", "softmax", "--shapes-per-op", "2", "--steady-calls", "5", "-K", "4", "-B", "2",
                     "--json", str(path), "--quiet"])
    assert code == 0
    out = capsys.readouterr().out
    assert "First call vs steady" in out and "softmax" in out
    data = json.loads(path.read_text())
    assert data["kind"] == "probe" and list(data["ops"]) == ["softmax"]

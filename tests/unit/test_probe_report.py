"""The probe report: JSON round trip, public field names, load-time validation, text rendering."""

import json

import pytest

from warmprof.errors import ReportError
from warmprof.report import load
from warmprof.report.probe import Prediction, ProbeReport, ShapeRow


def row(label="96x160x224", role="op_first", first=70.0, steady=0.1, rerun=0.15, verdict="compile", keyed="shape"):
    shape = [int(d) for d in label.split("x")]
    return ShapeRow(shape=shape, label=label, role=role, output_bytes=4096, first_ms=first, steady_ms=steady,
                    steady_p10_ms=steady * 0.9, steady_p90_ms=steady * 1.1, ratio=first / steady, seen_rerun_ms=rerun,
                    alloc_hi_ms=0.5, keyed=keyed, verdict=verdict, evidence=["first 70 ms vs steady 0.1 ms"])


def make_report(**over):
    kw = dict(
        device="cpu", backend="compile", platform={"os": "Linux", "torch": "2.13.0"},
        bands={"launch": {"lo_ms": 0.0, "hi_ms": 0.04, "how": "2 x a 1-element add", "trivial_first_ms": 9000.0},
               "allocation": {"lo_ms": 0.04, "hi_ms": 0.8, "how": "fresh mmap + touch",
                              "by_bytes": {"4096": {"alloc_ms": 0.01, "hi_ms": 0.06}}},
               "compile": {"lo_ms": 0.06, "hi_ms": None, "how": "above the allocation band"}},
        ops={"matmul": [row(), row("200x136x168", "new_shape", first=65.0),
                        row("512x512x512", "pair_a", first=90.0, steady=1.0),
                        row("256x512x1024", "pair_b", first=95.0, steady=1.0)],
             "softmax": [row("192x320", first=1100.0, steady=0.06, rerun=0.07),
                         row("264x712", "new_shape", first=0.2, steady=0.1, rerun=0.1, verdict="none", keyed="none")]},
        shape_vs_size=[{"op": "matmul", "output_elems": 262144, "shape_a": "512x512x512", "shape_b": "256x512x1024",
                        "a_ratio": 90.0, "b_ratio": 95.0, "a_pays": True, "b_pays": True, "keyed": "shape"}],
        bucketing={"op": "[seq, 128] @ [128, 128] matmul", "K": 20, "B": 4, "lengths": list(range(17, 257, 12)),
                   "buckets": [72, 128, 192, 248], "counter": "dynamo unique_graphs", "counted": True,
                   "distinct": {"compiles": 20, "wall_ms": 1500.0}, "bucketed": {"compiles": 4, "wall_ms": 310.0},
                   "default_dynamic": {"compiles": 2, "wall_ms": 400.0}},
        predictions=[Prediction("P1", "first >> steady", True, "matmul 700x"),
                     Prediction("P2", "cached", True, "0.002x"),
                     Prediction("P3", "shape not size", True, "90x / 95x"),
                     Prediction("P4", "about B compiles", True, "20 -> 4")],
        op_summary={"matmul": {"median_ratio": 675.0, "min_ratio": 650.0, "max_ratio": 700.0, "first_median_ms": 67.5,
                               "steady_median_ms": 0.1, "rerun_share_median": 0.002, "keyed": "shape",
                               "verdicts": {"compile": 4}}},
        protocol={"steady_calls": 20, "rerun_rounds": 3, "threads": 2,
                  "load_average": {"before": [0.5, 0.4, 0.3], "after": [1.1, 0.5, 0.3], "cpus": 2}},
        notes=["a note"],
    )
    kw.update(over)
    return ProbeReport(**kw)


def test_round_trip_keeps_every_public_field(tmp_path):
    r = make_report()
    p = r.save(tmp_path / "probe.json")
    data = json.loads(p.read_text())
    for key in ("schema_version", "kind", "platform", "device", "backend", "bands", "ops", "shape_vs_size",
                "bucketing", "predictions"):
        assert key in data
    assert data["kind"] == "probe"
    assert set(data["ops"]["matmul"][0]) >= {"first_ms", "steady_ms", "ratio", "seen_rerun_ms", "verdict"}
    assert {"K", "B", "distinct", "bucketed"} <= set(data["bucketing"])
    assert set(data["predictions"][0]) == {"id", "claim", "holds", "figure"}
    back = load(p)
    assert isinstance(back, ProbeReport)
    assert back.to_dict() == r.to_dict()


def test_text_rendering_shows_every_table():
    text = str(make_report())
    for heading in ("Bands", "First call vs steady", "Per op", "Shape vs size", "Bucketing", "Predictions", "Evidence"):
        assert heading in text
    assert "P4  holds" in text
    assert "dynamo defaults" in text  # the default-dynamic row
    assert "512x512x512" in text and "compile" in text


def test_a_failed_prediction_is_shown_plainly():
    r = make_report(predictions=[Prediction("P1", "first >> steady", False, "matmul 1.2x")])
    assert "P1  does not hold" in str(r)


def _edited(tmp_path, edit):
    data = make_report().to_dict()
    edit(data)
    p = tmp_path / "edited.json"
    p.write_text(json.dumps(data))
    return p


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("bucketing"), "missing field 'bucketing'"),
    (lambda d: d.update(device="tpu"), "unknown device"),
    (lambda d: d.update(backend="jax"), "unknown backend"),
    (lambda d: d["ops"]["matmul"][0].update(verdict="magic"), "unknown verdict"),
    (lambda d: d["ops"]["matmul"][0].update(first_ms=-1.0), "negative"),
    (lambda d: d["ops"]["matmul"][0].update(ratio=3.0), "ratio"),
    (lambda d: d["ops"]["matmul"][0].update(steady_p10_ms=5.0), "outside p10-p90"),
    (lambda d: d["ops"]["matmul"][0].update(banana=1), r"ops\[.matmul.\]\[0\]: unexpected key .banana."),
    (lambda d: d["bands"].pop("compile"), "compile"),
    (lambda d: d["bucketing"].update(B=30), "exceed"),
    (lambda d: d["bucketing"].update(K=0), "positive integer"),
    (lambda d: d["bucketing"]["distinct"].update(compiles=-2), "non-negative integer"),
    (lambda d: d["predictions"][0].update(id="P9"), "unknown prediction id"),
    (lambda d: d["predictions"][0].update(holds="yes"), "true or false"),
    (lambda d: d["ops"].clear(), "no ops"),
    (lambda d: d["shape_vs_size"].append(5), r"shape_vs_size\[1\]: expected an object, got 5"),
    (lambda d: d["shape_vs_size"][0].pop("shape_a"), r"shape_vs_size\[0\]: missing key 'shape_a'"),
    (lambda d: d["ops"].update(matmul=[5]), r"ops\['matmul'\]\[0\]: expected an object, got 5"),
    (lambda d: d["ops"]["matmul"][0].update(label=96), r"ops\['matmul'\]\[0\]\.label: expected a string"),
    (lambda d: d["bands"]["allocation"].update(by_bytes={"4096": 0.06}), r"bands\.allocation\.by_bytes\['4096'\]"),
    (lambda d: d["bucketing"].update(lengths=[]), "lengths are missing or empty"),
    (lambda d: d["op_summary"]["matmul"].pop("median_ratio"), r"op_summary\['matmul'\]: missing key 'median_ratio'"),
    (lambda d: d["protocol"].update(load_average={"before": 0.5}), r"protocol\.load_average\.before: expected a list"),
    (lambda d: d.update(wall_s="12"), "wall_s: expected a finite number within ±1e15"),
    (lambda d: d.update(device="cuda:x"), "unknown device 'cuda:x'"),
])
def test_corrupt_or_edited_files_are_refused(tmp_path, edit, message):
    with pytest.raises(ReportError, match=message):
        load(_edited(tmp_path, edit))


@pytest.mark.parametrize("device", ["cuda:1", "cpu:0", "cuda", "mps"])
def test_a_device_with_an_index_round_trips(tmp_path, device):
    r = make_report(device=device)
    back = load(r.save(tmp_path / "probe.json"))
    assert back.device == device and back.to_dict() == r.to_dict()
    assert f"on {device}" in str(back)


@pytest.mark.parametrize("given, stored", [("cpu", "cpu"), ("cuda", "cuda"), ("cuda:1", "cuda:1"), ("cpu:0", "cpu:0"),
                                           ("cuda:01", "cuda:1")])
def test_the_probe_stores_the_device_as_kind_and_index(given, stored):
    from warmprof.probes.api import _device_name

    assert _device_name(given) == stored


def test_a_trace_file_is_not_a_probe_report(tmp_path):
    p = tmp_path / "trace.json"
    p.write_text(json.dumps({"schema_version": 1, "kind": "trace"}))
    with pytest.raises(ReportError, match="not a 'probe' report"):
        ProbeReport.load(p)


def test_data_access():
    r = make_report()
    assert r.prediction("P4").holds
    assert len(r.rows("pair_a", "pair_b")) == 2
    assert r.verdicts() == {"compile": 5, "none": 1}


def test_a_version_1_probe_report_still_loads_and_saves_as_the_current_version(tmp_path):
    """Written by warmprof before schema_version 2 (the bump came from the trace report's fields)."""
    from pathlib import Path

    from warmprof.report import SCHEMA_VERSION

    v1_path = Path(__file__).parent.parent / "fixtures" / "reports_v1" / "probe_synthetic.json"
    v1 = json.loads(v1_path.read_text())
    assert v1["schema_version"] == 1
    r = load(v1_path)
    assert isinstance(r, ProbeReport) and set(r.ops) == set(v1["ops"])
    again = json.loads(r.save(tmp_path / "again.json").read_text())
    assert again["schema_version"] == SCHEMA_VERSION
    assert {k: v for k, v in again.items() if k != "schema_version"} == {k: v for k, v in v1.items() if k != "schema_version"}

"""Load-time validation against every renderer: corrupt each field of a real-shaped report in a few
ways; load() must either refuse the file with a ReportError or every renderer must draw it."""

import copy
import importlib.util
import json

import pytest

from warmprof.errors import ReportError
from warmprof.render.chrome import ChromeTraceRenderer
from warmprof.render.json import JsonRenderer
from warmprof.report import CauseEntry, CounterSample, Report, Span, load
from warmprof.report.probe import Prediction, ProbeReport, ShapeRow
from warmprof.report.trace import Protocol, RunContext, TorchCompileFigures

HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
PLATFORM = {"os": "Linux", "machine": "aarch64", "cpu": "ARMv8 Processor rev 1 (v8l)", "cpu_count": 12,
            "jetson": "NVIDIA Jetson AGX Orin Developer Kit", "power_mode": "MAXN", "gpu": "Orin", "torch": "2.3.0"}


def trace_report() -> Report:
    """A trace report with every field filled the way a real trace fills it."""
    causes = [CauseEntry("jit_compile", 70.0, 70 / 90, "measured", "torch.compile", "M", count=2, detail="2 graphs"),
              CauseEntry("allocator_growth", 10.0, 10 / 90, "estimated", "host_faults", "M.a", count=12)]
    spans = [Span("first", "pass:first", "", "pass", "", 0.0, 100.0, 0),
             Span("first", "M", "", "module", "M", 1.0, 98.0, 1),
             Span("first", "compile", "jit_compile", "torch.compile", "M", 2.0, 70.0, 2, thread=0, value=1),
             Span("first", "worker", "runtime_init", "host", "", 5.0, 3.0, 0, thread=7),
             Span("seen_rerun", "pass:seen_rerun", "", "pass", "", 0.0, 11.0, 0)]
    return Report(
        model="M", shape=[1, 8], device="cuda:0", first_pass_ms=100.0, seen_rerun_ms=11.0, steady_median_ms=10.0,
        noise_band_ms=1.0, excess_ms=90.0, unattributed_ms=10.0, causes=causes, platform=dict(PLATFORM),
        dtype="float32", compile="default", steady_passes=20, steady_p10_ms=9.5, steady_p90_ms=10.5, attributed_ms=80.0,
        seen_rerun_causes=[CauseEntry("allocator_growth", 0.5, 0.5, "estimated", "host_faults", "M.a")],
        modules=[{"module": "M", "ms": 80.0, "causes": {"jit_compile": 70.0, "allocator_growth": 10.0}},
                 {"module": "(outside modules)", "ms": 0.0, "causes": {}}],
        unattributed_where=[{"module": "M.attn", "ms": 6.0}, {"module": "(outside modules)", "ms": 2.5}],
        counters={"first_pass": {"minor_faults": 1200}, "steady_faults_median": 3},
        protocol=Protocol(input="randint (1, 8)", steady_ms=[9.5, 10.0, 10.5], runtime_warm=False,
                          run=RunContext(fresh_process=True, cache="fresh", threads=2, caches={"TMPDIR": "fresh"})),
        instruments={"torch_compile": {"active": True, "compiles": [{"frame": "forward", "ms": 70.0}],
                                       "torch_reported_compile_ms": 68.0, "inductor_cache": "miss"},
                     "host": {"active": True}},
        torch_compile=TorchCompileFigures(torch_reported_ms=68.0, compiles=1, inductor_cache="miss"),
        spans=spans,
        counter_samples=[CounterSample("first", "host:minor_faults", 0.5, 100.0),
                         CounterSample("first", "host:minor_faults", 50.0, 1300.0),
                         CounterSample("first", "gpu:sm_clock_mhz", 10.0, 1300.0)],
        advice=["jit_compile: warm up with the shapes you serve"], notes=["a note"],
        warmprof_version="0.1.0", created="2025-01-01T00:00:00+00:00",
    )


def _row(label, role="op_first", first=70.0, steady=0.1, rerun=0.15, verdict="compile", keyed="shape"):
    return ShapeRow(shape=[int(d) for d in label.split("x")], label=label, role=role, output_bytes=4096, first_ms=first,
                    steady_ms=steady, steady_p10_ms=steady * 0.9, steady_p90_ms=steady * 1.1, ratio=first / steady,
                    seen_rerun_ms=rerun, alloc_hi_ms=0.5, keyed=keyed, verdict=verdict,
                    evidence=["first 70 ms vs steady 0.1 ms"], alloc_bytes=12288)


def probe_report() -> ProbeReport:
    """A probe report with every field filled the way a real probe fills it."""
    return ProbeReport(
        device="cuda:1", backend="compile", platform=dict(PLATFORM), dtype="float32",
        bands={"launch": {"lo_ms": 0.0, "hi_ms": 0.04, "how": "2 x a 1-element add", "trivial_first_ms": 9000.0},
               "allocation": {"lo_ms": 0.04, "hi_ms": 0.8, "how": "fresh mmap + touch",
                              "by_bytes": {"4096": {"alloc_ms": 0.01, "hi_ms": 0.06},
                                           "1048576": {"alloc_ms": 0.3, "hi_ms": 0.8}}},
               "compile": {"lo_ms": 0.8, "hi_ms": None, "how": "above the allocation band"}},
        ops={"matmul": [_row("96x160x224"), _row("200x136x168", "new_shape", first=65.0),
                        _row("512x512x512", "pair_a", first=90.0, steady=1.0),
                        _row("256x512x1024", "pair_b", first=95.0, steady=1.0)],
             "softmax": [_row("264x712", "new_shape", first=0.2, steady=0.1, rerun=None, verdict="none", keyed="none")]},
        shape_vs_size=[{"op": "matmul", "output_elems": 262144, "shape_a": "512x512x512", "shape_b": "256x512x1024",
                        "a_first_ms": 90.0, "b_first_ms": 95.0, "a_ratio": 90.0, "b_ratio": 95.0,
                        "a_pays": True, "b_pays": True, "keyed": "shape"}],
        bucketing={"op": "[seq, 128] @ [128, 128] matmul", "d": 128, "K": 20, "B": 4,
                   "lengths": list(range(17, 257, 12)), "buckets": [72, 128, 192, 248], "counter": "dynamo unique_graphs",
                   "counted": True, "distinct": {"compiles": 20, "wall_ms": 1500.0, "calls": 20},
                   "bucketed": {"compiles": 4, "wall_ms": 310.0}, "default_dynamic": {"compiles": 2, "wall_ms": 400.0}},
        predictions=[Prediction("P1", "first >> steady", True, "matmul 700x"),
                     Prediction("P2", "cached", False, "0.002x"),
                     Prediction("P3", "shape not size", True, "90x / 95x"),
                     Prediction("P4", "about B compiles", True, "20 -> 4")],
        op_summary={"matmul": {"description": "a @ b", "median_ratio": 675.0, "min_ratio": 650.0, "max_ratio": 700.0,
                               "first_median_ms": 67.5, "steady_median_ms": 0.1, "rerun_share_median": 0.002,
                               "keyed": "shape", "verdicts": {"compile": 4}},
                    "softmax": {"median_ratio": 2.0, "min_ratio": 2.0, "max_ratio": 2.0, "first_median_ms": 0.2,
                                "steady_median_ms": 0.1, "rerun_share_median": None, "keyed": "none",
                                "verdicts": {"none": 1}}},
        protocol={"what": "torch 2.3 torch.compile on cuda:1", "steady_calls": 20, "rerun_rounds": 3, "threads": 2,
                  "compile_cache": "fresh", "load_average": {"before": [0.5, 0.4, 0.3], "after": [1.1, 0.5, 0.3],
                                                             "cpus": 2}},
        notes=["a note"], wall_s=12.5, warmprof_version="0.1.0", created="2025-01-01T00:00:00+00:00",
    )


BASES = {"trace": trace_report, "probe": probe_report}
# Values of the wrong type for nearly any field (and the right type for some, which must then render).
REPLACEMENTS = (None, True, 0, -3, 2.5, "x", [], ["x"], [{}], {}, {"x": {}})


def _paths(value, path=()):
    """Every path into a JSON value (dict keys, list indexes), the value's own path first."""
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value[:2]):  # the first items of a list stand for the rest
            yield from _paths(v, path + (i,))


def _get(data, path):
    for k in path:
        data = data[k]
    return data


def _corruptions(data, path):
    """(what, corrupted copy): each wrong-type replacement at path, and each key of an object there removed."""
    value = _get(data, path)
    for new in REPLACEMENTS:
        if new != value or type(new) is not type(value):
            d = copy.deepcopy(data)
            _get(d, path[:-1])[path[-1]] = new
            yield f"{'.'.join(map(str, path))} = {json.dumps(new)}", d
    if isinstance(value, dict):
        for key in value:
            d = copy.deepcopy(data)
            del _get(d, path)[key]
            yield f"{'.'.join(map(str, path))}: without {key!r}", d


def _fields_read(render, report) -> set[str]:
    """The attributes `render` reads from `report` (in its methods too). A renderer that never reads
    a field draws the same whatever that field holds, so corrupting that field cannot break it."""
    seen: set[str] = set()
    cls = type(report)

    class Recording(cls):
        def __getattribute__(self, name):
            seen.add(name)
            return super().__getattribute__(name)

    report.__class__ = Recording
    try:
        render(report)
    finally:
        report.__class__ = cls
    return seen


def _render_all(report, png=HAVE_MATPLOTLIB):
    """Every renderer over a loaded report; a renderer may refuse a kind it does not draw, clearly."""
    assert str(report)
    assert json.loads(JsonRenderer().render(report))
    if report.KIND == "trace":
        assert json.loads(ChromeTraceRenderer().render(report))["traceEvents"]
    else:
        with pytest.raises(ReportError, match="needs a trace report"):
            ChromeTraceRenderer().render(report)
    if png:
        from warmprof.render.png import PngRenderer

        assert PngRenderer().render(report)[:4] == b"\x89PNG"


def _fields(kind):
    return [(kind, key) for key in BASES[kind]().to_dict() if key not in ("schema_version", "kind")]


@pytest.mark.parametrize("kind", sorted(BASES))
def test_the_base_reports_load_and_render(tmp_path, kind):
    p = BASES[kind]().save(tmp_path / "base.json")
    _render_all(load(p))


def _figure_only(fig, buf, **kwargs):
    """Figure.savefig without the raster pass (0.2 s a report): the PNG renderer still builds the whole
    figure from the report, where a bad value would raise; the base reports are drawn for real above."""
    buf.write(b"\x89PNG")


@pytest.mark.parametrize("kind, field", _fields("trace") + _fields("probe"))
def test_a_corrupted_field_is_refused_at_load_or_renders(tmp_path, monkeypatch, kind, field):
    png = HAVE_MATPLOTLIB
    if png:
        from matplotlib.figure import Figure

        from warmprof.render.png import PngRenderer

        monkeypatch.setattr(Figure, "savefig", _figure_only)
        png = field in _fields_read(PngRenderer().render, BASES[kind]())  # the PNG costs 20 ms a case
    base = BASES[kind]().to_dict()
    p = tmp_path / "corrupt.json"
    cases = [(f"without field {field!r}", {k: v for k, v in base.items() if k != field})]
    for path in _paths(base[field], (field,)):
        cases += list(_corruptions(base, path))
    refused = 0
    for what, data in cases:
        p.write_text(json.dumps(data))
        try:
            report = load(p)
        except ReportError as e:
            assert str(p) in str(e)
            refused += 1
            continue
        try:
            _render_all(report, png)
        except Exception as e:  # noqa: BLE001 - the point: name the case that got through
            pytest.fail(f"{kind} report with {what}: load() accepted it, then rendering raised "
                        f"{type(e).__name__}: {e}")
    if field not in ("notes", "warmprof_version", "created", "counters", "protocol", "advice"):
        assert refused, f"no corruption of {field} was refused"  # the check is really there


def test_non_finite_numbers_are_refused(tmp_path):
    p = tmp_path / "nan.json"
    text = trace_report().to_json()
    for bad in ("NaN", "Infinity", "-Infinity", "1e999"):
        p.write_text(text.replace('"first_pass_ms": 100.0', f'"first_pass_ms": {bad}'))
        with pytest.raises(ReportError, match="non-finite number"):
            load(p)


@pytest.mark.parametrize("text, message", [
    ('{"schema_version": 1, "kind": ["trace"]}', "bad report kind"),
    ('{"schema_version": true, "kind": "trace"}', "bad schema_version"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply|not a warmprof report"),
])
def test_odd_headers_are_refused_clearly(tmp_path, text, message):
    p = tmp_path / "odd.json"
    p.write_text(text)
    with pytest.raises(ReportError, match=message):
        load(p)

"""PNG export: a stacked bar per trace report, grouped bars per comparison, first vs steady per probe."""

from __future__ import annotations

import io
import re
import sys

import pytest

from factories import ORIN, probe_report, trace_report
from warmprof.cli import main
from warmprof.report.comparison import compare
from warmprof.errors import InputError, WarmprofError

matplotlib = pytest.importorskip("matplotlib", reason="PNG export needs the plot extra (matplotlib)")

from matplotlib.figure import Figure  # noqa: E402
from matplotlib.image import imread  # noqa: E402

from warmprof.render import png

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def decoded(data: bytes):
    assert data.startswith(PNG_MAGIC)
    image = imread(io.BytesIO(data), format="png")
    assert image.shape[0] >= 400 and image.shape[1] >= 800  # large enough to read
    return image


def texts(fig) -> str:
    ax = fig.axes[0]
    legend = ax.get_legend()
    parts = [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()] + [t.get_text() for t in ax.get_yticklabels() + ax.get_xticklabels()]
    return "\n".join(parts + ([t.get_text() for t in legend.get_texts()] if legend else []))


def test_trace_report_is_a_stacked_bar_of_its_causes():
    r = trace_report({"jit_compile": 10.0, "runtime_init": 50.0}, platform=ORIN, device="cuda")
    decoded(png.PngRenderer().render(r))
    fig = png._trace_figure(Figure, r)
    words = texts(fig)
    assert "Jetson AGX Orin (MAXN)" in words  # the title names the device
    assert "time (ms)" in words and "first pass" in words and "steady (median)" in words
    assert "JIT compile: 10.00 ms (16%, measured)" in words and "runtime init: 50.00 ms (81%, measured)" in words  # of 61.5 ms excess
    first_bar = [p for p in fig.axes[0].patches if abs(p.get_y() + p.get_height() / 2) < 1e-9]
    assert sum(p.get_width() for p in first_bar) == pytest.approx(r.first_pass_ms)


def test_comparison_is_grouped_bars_one_per_report():
    a = trace_report({"jit_compile": 10.0, "runtime_init": 50.0}, platform=ORIN, device="cuda")
    b = trace_report({"jit_compile": 2.0, "runtime_init": 45.0}, device="cuda")
    c = compare(a, b, labels=["orin", "4090"])
    decoded(png.PngRenderer().render(c))
    fig = png._comparison_figure(Figure, c)
    words = texts(fig)
    assert "orin on Jetson AGX Orin (MAXN)" in words and "4090 on NVIDIA GeForce RTX 4090" in words
    assert "JIT compile" in words and "ms of the first-pass excess" in words
    widths = sorted(round(p.get_width(), 6) for p in fig.axes[0].patches)
    assert widths == sorted(round(cell.ms, 6) for row in c.rows for cell in row.cells)


def test_comparison_spanning_orders_of_magnitude_uses_a_log_axis():
    c = compare(trace_report({"jit_compile": 0.1}), trace_report({"jit_compile": 20000.0}))
    fig = png._comparison_figure(Figure, c)
    assert fig.axes[0].get_xscale() == "log" and "log scale" in fig.axes[0].get_xlabel()
    same = png._comparison_figure(Figure, compare(trace_report({"jit_compile": 10.0}), trace_report({"jit_compile": 12.0})))
    assert same.axes[0].get_xscale() == "linear"


def test_probe_report_is_first_vs_steady_per_op():
    r = probe_report(platform=ORIN)
    decoded(png.PngRenderer().render(r))
    fig = png._probe_figure(Figure, r)
    words = texts(fig)
    assert "Jetson AGX Orin (MAXN)" in words and "matmul 64x64x64" in words and "log scale" in words
    assert len(fig.axes[0].patches) == 2 * len(r.rows())
    decoded(png.PngRenderer().render(compare(probe_report(), probe_report(scale=4.0))))


def test_missing_matplotlib_is_a_clear_error(monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(WarmprofError, match=r"pip install 'warmprof\[plot\]'"):
        png.PngRenderer().render(trace_report({"jit_compile": 1.0}))


def test_cli_png_exports(tmp_path, capsys):
    a = trace_report({"jit_compile": 3.0}).save(tmp_path / "a.json")
    b = trace_report({"jit_compile": 9.0}).save(tmp_path / "b.json")
    out = tmp_path / "a.png"
    assert main(["show", str(a), "--format", "png", "-o", str(out)]) == 0
    decoded(out.read_bytes())
    cmp_png = tmp_path / "cmp.png"
    assert main(["compare", str(a), str(b), "--png", str(cmp_png)]) == 0
    decoded(cmp_png.read_bytes())
    capsys.readouterr()
    assert main(["show", str(a), "--format", "png"]) == InputError.exit_code
    assert "-o FILE.png" in capsys.readouterr().err


def test_causes_overshooting_the_first_pass_are_labelled_and_kept_in_view():
    r = trace_report({"jit_compile": 10.0}, unattributed=-1.0)  # causes 10 ms, excess 9 ms
    fig = png._trace_figure(Figure, r)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.texts]
    assert any(f"{r.first_pass_ms:.2f} ms (causes overshoot by 1.00 ms)" in t for t in labels)
    first_bar = [p for p in ax.patches if abs(p.get_y() + p.get_height() / 2) < 1e-9]
    assert ax.get_xlim()[1] > sum(p.get_width() for p in first_bar)


def test_names_with_math_markup_are_drawn_as_given():
    r = trace_report({"jit_compile": 3.0}, model=r"net$\frac{$")
    decoded(png.PngRenderer().render(r))  # mathtext would raise a ValueError on the unbalanced markup


SCIENTIFIC = re.compile(r"\d[eE][+-]?\d")  # 2.49e+03, 1e-2


def _tick_texts(fig) -> list[str]:
    out = []
    for ax in fig.axes:
        for minor in (False, True):
            out += [t.get_text() for t in ax.get_xticklabels(minor=minor) + ax.get_yticklabels(minor=minor)]
    return [t for t in out if t]


@pytest.mark.parametrize("what", ["trace comparison (log axis)", "probe", "probe comparison", "trace"])
def test_tick_labels_and_bar_labels_are_plain_text(what):
    """Names are drawn with mathtext off (a model called "net$_2$" is drawn as given), so no label may
    rely on mathtext: a log axis reads 0.01 / 1 / 100, never $\\mathdefault{10^{-2}}$; a bar reads
    2490 ms, never 2.49e+03."""
    obj = {"trace comparison (log axis)": compare(trace_report({"jit_compile": 0.1}), trace_report({"jit_compile": 2490.0})),
           "probe": probe_report(scale=83.0),  # matmul's first call: 2490 ms
           "probe comparison": compare(probe_report(), probe_report(scale=83.0)),
           "trace": trace_report({"jit_compile": 2490.0}, model="net$_2$")}[what]
    fig = png.figure(obj, draw=True)
    ax = fig.axes[0]
    ticks = _tick_texts(fig)
    assert ticks
    for text in ticks:
        assert "$" not in text and "mathdefault" not in text and not SCIENTIFIC.search(text), text
    log_axes = [axis for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())) if scale == "log"]
    assert bool(log_axes) == (what != "trace")
    for axis in log_axes:  # every label of a log axis is a plain number
        labels = [t.get_text() for t in axis.get_ticklabels() + axis.get_ticklabels(minor=True) if t.get_text()]
        assert len(labels) >= 3
        assert all(re.fullmatch(r"\d+(\.\d+)?", t) for t in labels), labels
    bars = [t.get_text() for t in ax.texts]
    assert any(re.search(r"\b249\d(\.\d+)? ms", t) for t in bars), bars  # 2490 ms (2495.50 ms: the trace's first pass)
    assert not [t for t in bars if SCIENTIFIC.search(t) or "$" in t]
    if what == "trace":  # a name stays literal: not parsed as math, drawn as given
        assert "net$_2$" in ax.get_title() and not ax.title.get_parse_math()
    assert png.PngRenderer().render(obj).startswith(PNG_MAGIC)


def _with_setup(r):
    from warmprof.report import CauseEntry
    from warmprof.report.trace import Setup

    r.setup = Setup(ms=2700.0, steps=[{"name": "import torch", "ms": 2200.0}, {"name": "factory()", "ms": 450.0},
                                      {"name": "inputs", "ms": 50.0}],
                    causes=[CauseEntry("runtime_init", 1900.0, 0.7, "measured", "python_imports", module="import torch"),
                            CauseEntry("disk_read", 300.0, 0.11, "measured", "storage", module="factory()")])
    return r


def test_a_trace_with_set_up_steps_draws_them_on_an_axis_of_their_own():
    r = _with_setup(trace_report({"jit_compile": 10.0}))
    decoded(png.PngRenderer().render(r))
    fig = png._trace_figure(Figure, r)
    assert len(fig.axes) == 2
    setup_ax = fig.axes[1]
    widths = [p.get_width() for p in setup_ax.patches]
    assert widths == pytest.approx([2200.0, 450.0, 50.0])  # the steps end to end, in order
    lefts = [p.get_x() for p in setup_ax.patches]
    assert lefts == pytest.approx([0.0, 2200.0, 2650.0])
    legend = [t.get_text() for t in setup_ax.get_legend().get_texts()]
    assert legend[0].startswith("import torch: 2200") and "runtime init" in legend[0], legend
    assert "disk read" in legend[1] and "not in the excess" in setup_ax.get_title()
    assert len(png._trace_figure(Figure, trace_report({"jit_compile": 10.0})).axes) == 1  # none: one axis

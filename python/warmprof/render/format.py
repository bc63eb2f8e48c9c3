"""How the renderers write figures and names: milliseconds, what a report measured and on what
device, and aligned tables. One place, so a text report, a comparison and a PNG say a thing the
same way.

The millisecond formatters differ on purpose: a figure in a sentence carries its unit and scales
to µs; a table column has its unit in the header and keeps a fixed number of decimals. All of them
write a duration of 10 s or more in seconds, with the unit ('12.3 s'), never as '12345.6 ms'.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from ..system.platform import describe_device
from .safe import one_line

# -- milliseconds --------------------------------------------------------------------------------
SECONDS_FROM_MS = 10_000.0  # every formatter writes a duration of 10 s or more in seconds: "12.3 s"


def _seconds(v: float) -> str:
    return f"{v / 1000:.1f} s"


def ms(v: float) -> str:
    """A duration in a sentence, with its unit: '12.3 s', '2490 ms', '12.3 ms', '0.50 ms', '30.0 µs'."""
    if abs(v) >= SECONDS_FROM_MS:
        return _seconds(v)
    if abs(v) >= 1000:
        return f"{v:.0f} ms"
    if abs(v) >= 10:
        return f"{v:.1f} ms"
    if abs(v) >= 0.1 or v == 0:
        return f"{v:.2f} ms"
    return f"{v * 1000:.1f} µs"  # a tiny model's steady pass and noise band: 0.03 ms would hide the figure


def cause_ms(v: float) -> str:
    """A cause's ms in a table column: two decimals, and a visible '<0.01' rather than a misleading
    0.00; seconds, with their unit, from 10 s."""
    if abs(v) >= SECONDS_FROM_MS:
        return _seconds(v)
    if 0 < abs(v) < 0.005:
        return "<0.01" if v > 0 else ">-0.01"
    return f"{v:.2f}"


def table_unit(values: list[float]) -> str:
    """One unit for a whole table's column: "s" where its largest figure is 10 s or more, else "ms"."""
    return "s" if any(abs(v) >= SECONDS_FROM_MS for v in values) else "ms"


def in_unit(v: float, unit: str) -> str:
    """A figure (ms) in a table column of one unit (table_unit): two decimals, '<0.01' rather than 0.00."""
    x = v / 1000 if unit == "s" else v
    if 0 < abs(x) < 0.005:
        return "<0.01" if x > 0 else ">-0.01"
    return f"{x:.2f}"


def ms_cell(v: float | None) -> str:
    """A comparison's ms cell: two decimals, or three significant digits below 1 ms (probe steady
    times are microseconds); seconds, with their unit, from 10 s; '-' where the row is absent."""
    if v is None:
        return "-"
    if abs(v) >= SECONDS_FROM_MS:
        return _seconds(v)
    return f"{v:.2f}" if v == 0 or abs(v) >= 1 else f"{v:.3g}"


def ms_decimals(v: float | None) -> str:
    """A probe table's ms column: decimals by magnitude (one from 10 ms, three from 0.1 ms, else
    four), seconds, with their unit, from 10 s; '-' where there is no figure."""
    if v is None:
        return "-"
    if abs(v) >= SECONDS_FROM_MS:
        return _seconds(v)
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) >= 0.1:
        return f"{v:.3f}"
    return f"{v:.4f}"


def duration(v: float) -> str:
    """A longer wait in a sentence: '12.3 s' from 10 s, whole ms from 1 s, else three significant digits of ms."""
    if v >= SECONDS_FROM_MS:
        return _seconds(v)
    return f"{v:.0f} ms" if v >= 1000 else f"{v:.3g} ms"


def middle(text: str, width: int) -> str:
    """`text` cut to `width` characters by replacing its middle with '…': a module path keeps its
    root and its leaf ('encoder.layers.0…attention.out_proj')."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head = width // 2
    tail = width - 1 - head
    return text[:head] + "…" + (text[-tail:] if tail else "")


# -- what a report measured, and where -----------------------------------------------------------
def subject(report: Any, with_compile: bool = True) -> str:
    """What a report measured: 'DemoLM (1, 128) int64, compile=default', or 'op probes (eager,
    float32)'; '' for no report. One line whatever the names hold."""
    kind = getattr(report, "KIND", None)
    if kind == "probe":
        return f"op probes ({report.backend}, {report.dtype})"
    if kind not in ("trace", "trace_repeat"):
        return ""
    inputs = getattr(report, "inputs", None)
    if report.shape:
        shape = f" ({', '.join(str(d) for d in report.shape)})"
    elif inputs:  # a trace of the caller's inputs with no plain first shape: every input's
        from ..report.trace import inputs_label

        shape = f" ({inputs_label(inputs)})"
    else:
        shape = ""
    dtype = f" {report.dtype}" if report.dtype else ""
    comp = f", compile={report.compile}" if report.compile and with_compile else ""
    return one_line(f"{report.model}{shape}{dtype}{comp}")


def device(report: Any) -> str:
    """The device a report ran on, by name: the GPU, the Jetson board and power mode, or the CPU."""
    return describe_device(report.platform or {}, report.device)


def setting_line(row: Any) -> str:
    """A compared setting as one line, every report's value in order: 'threads: 1 vs 2', 'op view: on vs
    off'; '?' for a report that cannot tell (written before reports recorded their settings)."""
    return one_line(f"{row.name}: " + " vs ".join("?" if v is None else v for v in row.values))


# -- tables --------------------------------------------------------------------------------------
def table(header: list[str], rows: list[list[str]], right: Container[int] = (), rule: bool = False) -> list[str]:
    """Aligned columns, two spaces apart, each line indented two; the columns in `right` are
    right-aligned, the others left-aligned. `rule` puts a line of dashes under the header."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  " + "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(header)] + ([line(["-" * w for w in widths])] if rule else []) + [line(r) for r in rows]

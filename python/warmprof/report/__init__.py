"""Reports are data: versioned JSON with load-time validation; renderers live in warmprof.render."""

from .base import SCHEMA_VERSION, ReportBase, load
from .op_probe import OpProbeReport
from .probe import ProbeReport
from .trace import CauseEntry, CounterSample, Report, Span

__all__ = ["SCHEMA_VERSION", "CauseEntry", "CounterSample", "OpProbeReport", "ProbeReport", "Report", "ReportBase", "Span", "load"]

"""Reports are data: versioned JSON with load-time validation; renderers live in warmprof.render."""

from .base import SCHEMA_VERSION, ReportBase, load
from .probe import ProbeReport
from .trace import CAUSES, EVIDENCE, CauseEntry, CounterSample, Report, Span

__all__ = ["CAUSES", "EVIDENCE", "SCHEMA_VERSION", "CauseEntry", "CounterSample", "ProbeReport", "Report", "ReportBase", "Span", "load"]

"""Reports are data: versioned JSON with load-time validation; renderers live in warmprof.render."""

from .base import SCHEMA_VERSION, ReportBase, load
from .buckets import BucketPlan
from .op_probe import OpProbeReport
from .probe import ProbeReport
from .repeat import RepeatReport
from .run import RunReport
from .trace import CauseEntry, CounterSample, Report, Span
from .warmup import WarmRow, WarmupResult
from .watch import WatchReport

__all__ = ["SCHEMA_VERSION", "BucketPlan", "CauseEntry", "CounterSample", "OpProbeReport", "ProbeReport", "RepeatReport", "Report", "RunReport", "ReportBase", "WatchReport", "Span", "WarmRow", "WarmupResult", "load"]

"""watch's figures where services already look: Prometheus metrics and OpenTelemetry span events.
Neither package is a dependency: each path is taken only when its package is installed.

Prometheus: a collector read at scrape time (no cost per call), registered with
`prometheus_metrics(watcher)`: calls, events and outliers by key, events and seconds by cause, the
outliers' unattributed seconds and the first call's latency by key, and a latency histogram per key
built from the watcher's sketch (boundaries one per octave, 64 ns to 275 s).

OpenTelemetry: while a span is recording on the calling thread (the request's own), each event is
added to it as a span event `warmprof.event`, with its key, duration, why it was kept and its causes,
so an outlier shows its cause on the request's trace in the tracing backend. On by default when
opentelemetry is installed (watch(..., otel=False) turns it off).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from ...errors import InputError

OCTAVE_BUCKETS = 4  # the sketch's buckets per octave (csrc/core/watch.h)


def _require_prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise InputError("Prometheus export needs prometheus_client: pip install prometheus_client") from None
    return prometheus_client


OTHER = "(other keys)"


def _upper_edge_s(bucket: int) -> float:
    """The upper edge of a sketch bucket in seconds (the next bucket's lower edge; csrc/core/watch.cpp)."""
    b = bucket + 1
    return (2.0 ** (b // OCTAVE_BUCKETS + 6)) * (1 + (b % OCTAVE_BUCKETS) / OCTAVE_BUCKETS) / 1e9


def _cumulative(buckets: list[int]) -> list[tuple[str, int]]:
    """Cumulative counts at each octave's upper edge (every OCTAVE_BUCKETS buckets), then +Inf."""
    cum, out = 0, []
    for b, count in enumerate(buckets):
        cum += count
        if (b + 1) % OCTAVE_BUCKETS == 0 and b + 1 < len(buckets):
            out.append((f"{_upper_edge_s(b):.6g}", cum))
    out.append(("+Inf", cum))
    return out


class WatchCollector:
    """A prometheus_client collector over one Watcher, read at each scrape. Per-key series for the
    `top_keys` most called keys; the rest (and calls past max_keys) in one "(other keys)" series."""

    def __init__(self, watcher: Any, prefix: str = "warmprof_watch", top_keys: int = 50) -> None:
        self.watcher, self.prefix, self.top_keys = watcher, prefix, top_keys
        self.model = str(watcher.label)  # the series' model label (prometheus_metrics makes it unique)

    def describe(self) -> list:
        return []  # unchecked collector: the families are built at collect time

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        w, p = self.watcher, self.prefix
        stats = w.stats()
        model = self.model
        calls = CounterMetricFamily(f"{p}_calls", "Calls through the watched model, by key", labels=["model", "key"])
        kept = CounterMetricFamily(f"{p}_events", "Calls kept as events (first at a key, outliers, after idle, "
                                                  "compiles), by key", labels=["model", "key"])
        outliers = CounterMetricFamily(f"{p}_outliers", "Outliers against their key's median, by key",
                                       labels=["model", "key"])
        by_cause = CounterMetricFamily(f"{p}_cause_events", "Events naming each cause, by key",
                                       labels=["model", "key", "cause"])
        cause_s = CounterMetricFamily(f"{p}_cause_seconds", "Time the events' causes took, by key",
                                      labels=["model", "key", "cause"])
        unattributed = CounterMetricFamily(f"{p}_unattributed_seconds", "The outliers' excess over their key's median "
                                           "that no cause explains, by key", labels=["model", "key"])
        first = GaugeMetricFamily(f"{p}_first_call_seconds", "The first call's latency at each key (its one-time "
                                  "costs included)", labels=["model", "key"])
        hist = HistogramMetricFamily(f"{p}_latency_seconds", "Call latency by key (from a sketch: within 12%)",
                                     labels=["model", "key"])
        rows = sorted((w._core_stats() or {"keys": []})["keys"], key=lambda r: -r[2])
        names = dict(w._names)
        other_calls, other_events, other_ns = stats["overflow_calls"], 0, 0
        other_buckets = [0] * len(rows[0][7]) if rows else []
        for rank, (key, _, n, first_ns, _, total_ns, events, buckets) in enumerate(rows):
            if rank >= self.top_keys:  # series per key for the most called keys only: the rest in one
                other_calls += n
                other_events += events
                other_ns += total_ns
                other_buckets = [a + b for a, b in zip(other_buckets, buckets)]
                continue
            name = names.get(key, f"#{key & 0xffffffff:08x}")
            calls.add_metric([model, name], n)
            kept.add_metric([model, name], events)
            first.add_metric([model, name], first_ns / 1e9)
            hist.add_metric([model, name], _cumulative(buckets), total_ns / 1e9)
        if other_calls:
            calls.add_metric([model, OTHER], other_calls)
            kept.add_metric([model, OTHER], other_events)
        if any(other_buckets):
            hist.add_metric([model, OTHER], _cumulative(other_buckets), other_ns / 1e9)
        with w._lock:
            counts = dict(w._cause_counts)
            out_counts = dict(w._outlier_counts)
            residual = dict(w._unattributed_ms)
        for (name, cause), (n, ms) in counts.items():
            by_cause.add_metric([model, name, cause], n)
            cause_s.add_metric([model, name, cause], ms / 1e3)
        for name, n in out_counts.items():
            outliers.add_metric([model, name], n)
        for name, ms in residual.items():
            unattributed.add_metric([model, name], ms / 1e3)
        yield from (calls, kept, outliers, by_cause, cause_s, unattributed, first, hist)


def prometheus_metrics(watcher: Any, registry: Any = None) -> WatchCollector:
    """Register the watcher's metrics with `registry` (prometheus_client's default registry when
    None); the collector is returned (registry.unregister(it) takes it off)."""
    pc = _require_prometheus()
    registry = registry if registry is not None else pc.REGISTRY
    collector = WatchCollector(watcher)
    # Two watchers of one class in one registry would export the same series twice (an invalid
    # scrape): the second one's model label gets " #2", and so on, and the label is said on the collector.
    with _taken_lock:
        taken = _taken.setdefault(registry, weakref.WeakSet())
        labels = {c.model for c in taken}
        base, n = str(watcher.label), 1
        collector.model = base
        while collector.model in labels:
            n += 1
            collector.model = f"{base} #{n}"
        registry.register(collector)
        taken.add(collector)
    return collector


_taken: "weakref.WeakKeyDictionary[Any, weakref.WeakSet]" = weakref.WeakKeyDictionary()  # registry -> collectors
_taken_lock = threading.Lock()


def otel_available() -> bool:
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


def otel_event(event: dict[str, Any]) -> bool:
    """Add `event` to the span recording on this thread, if any; whether it was added."""
    try:
        from opentelemetry import trace
    except ImportError:
        return False
    span = trace.get_current_span()
    if span is None or not span.is_recording():
        return False
    why = "first" if event["first"] else "outlier" if event["outlier"] else "after_idle" if event.get("after_idle") \
        else "compiled"
    attrs: dict[str, Any] = {"warmprof.key": event["key"], "warmprof.ms": float(event["ms"]), "warmprof.why": why,
                             "warmprof.causes": [c["cause"] for c in event["causes"]],
                             "warmprof.cause_ms": [float(c["ms"]) for c in event["causes"]],
                             "warmprof.evidence": [c["evidence"] for c in event["causes"]]}
    if event.get("excess_ms") is not None:
        attrs["warmprof.excess_ms"] = float(event["excess_ms"])
    if event.get("recompile_reasons"):
        attrs["warmprof.recompile_reason"] = str(event["recompile_reasons"][0])
    span.add_event("warmprof.event", attributes=attrs)
    return True


__all__ = ["WatchCollector", "otel_available", "otel_event", "prometheus_metrics"]

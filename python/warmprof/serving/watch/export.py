"""watch's figures where services already look: Prometheus metrics and OpenTelemetry span events.
Neither package is a dependency: each path is taken only when its package is installed.

Prometheus: a collector read at scrape time (no cost per call), registered with
`prometheus_metrics(watcher)`: calls, events and outliers by key, events and seconds by cause, the
outliers' unattributed seconds and the first call's latency by key, and a latency histogram per key
built from the watcher's sketch (boundaries one per octave, 64 ns to 275 s). At most `top_keys` (50)
keys have series of their own, fixed for the watcher's life (_Shown); the rest are summed in one
"(other keys)" series, so that every counter only grows from one scrape to the next (docs/watch.md).

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


class _Shown:
    """Which keys of one watcher have series of their own (at one `top_keys` bound), for the life of the
    watcher: the first `limit` keys scrapes see, most called first among those one scrape sees first.
    The set only grows; once it is full every other key (and every key after it) is in "(other keys)"
    for good, so no count ever moves from one series to another and every counter only grows (a key
    moving between the two would take its counts out of one series: a counter reset to Prometheus)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.keys: dict[int, None] = {}  # key hashes with series of their own, in the order they got them
        self.barred: set[int] = set()  # keys already counted in "(other keys)" while the set had room

    def update(self, rows: list) -> None:
        """Take in the keys of this scrape's rows (the core's: (key, order, calls, ...)) while there is room."""
        room = self.limit - len(self.keys)
        if room <= 0:
            return
        new = [r for r in rows if r[0] not in self.keys and r[0] not in self.barred]
        new.sort(key=lambda r: (-r[2], r[1]))  # most called first; among equals, the first seen
        for r in new[:room]:
            self.keys[r[0]] = None
        if len(self.keys) >= self.limit:
            self.barred.clear()  # full: nothing more gets in, so nothing needs barring

    def bar(self, key: int | None) -> None:
        """`key`'s counts went into "(other keys)" while there was room: it never gets series of its own."""
        if key is not None and len(self.keys) < self.limit:
            self.barred.add(key)


def _shown(watcher: Any, limit: int) -> _Shown:
    with _taken_lock:
        by_limit = _shown_by_watcher.setdefault(watcher, {})
        return by_limit.setdefault(limit, _Shown(limit))


class WatchCollector:
    """A prometheus_client collector over one Watcher, read at each scrape. Per-key series for at most
    `top_keys` keys, the most called ones when first scraped, kept for the watcher's life; the rest
    (and calls past max_keys) in one "(other keys)" series, for good (_Shown: counters only grow)."""

    def __init__(self, watcher: Any, prefix: str = "warmprof_watch", top_keys: int = 50) -> None:
        self.watcher, self.prefix, self.top_keys = watcher, prefix, top_keys
        self.model = str(watcher.label)  # the series' model label (prometheus_metrics makes it unique)

    def describe(self) -> list:
        return []  # unchecked collector: the families are built at collect time

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        w, p = self.watcher, self.prefix
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
        shown = _shown(w, self.top_keys)
        # The events' counts (by key name) are read before the core's rows: a key an event named is in the
        # rows then (the core adds a call to its key before the event is made), unless it is past max_keys.
        with w._lock:
            names = dict(w._names)
            counts = dict(w._cause_counts)
            out_counts = dict(w._outlier_counts)
            residual = dict(w._unattributed_ms)
        core = w._core_stats() or {"keys": [], "overflow_calls": 0}
        rows = core["keys"]
        hash_of = {name: key for key, name in names.items()}
        with w._lock:  # one scrape at a time decides (two registries, two scrape threads)
            shown.update(rows)
            own = dict(shown.keys)
            admitted = {r[0] for r in rows}
            for name in list(counts) + list(out_counts) + list(residual):
                key = hash_of.get(name[0] if isinstance(name, tuple) else name)
                if key not in own and key not in admitted:
                    shown.bar(key)  # a key past max_keys (its compiles): in "(other keys)"

        def label(key: int | None) -> str:
            if key is None or key not in own:
                return OTHER
            return names.get(key, f"#{key & 0xffffffff:08x}")  # its event not made yet: named at the next scrape

        other_calls, other_events, other_ns = core["overflow_calls"], 0, 0
        other_buckets = [0] * len(rows[0][7]) if rows else []
        for key, order, n, first_ns, _, total_ns, events, buckets in sorted(rows, key=lambda r: (-r[2], r[1])):
            if key not in own:
                other_calls += n
                other_events += events
                other_ns += total_ns
                other_buckets = [a + b for a, b in zip(other_buckets, buckets)]
                continue
            name = label(key)
            calls.add_metric([model, name], n)
            kept.add_metric([model, name], events)
            first.add_metric([model, name], first_ns / 1e9)
            hist.add_metric([model, name], _cumulative(buckets), total_ns / 1e9)
        if other_calls:
            calls.add_metric([model, OTHER], other_calls)
            kept.add_metric([model, OTHER], other_events)
        if any(other_buckets):
            hist.add_metric([model, OTHER], _cumulative(other_buckets), other_ns / 1e9)
        # By key and cause, outliers, unattributed: summed by label (every key outside the set into one)
        cause_rows: dict[tuple[str, str], list] = {}
        for (name, cause), (n, ms) in counts.items():
            row = cause_rows.setdefault((label(hash_of.get(name)), cause), [0, 0.0])
            row[0] += n
            row[1] += ms
        for (name, cause), (n, ms) in sorted(cause_rows.items()):
            by_cause.add_metric([model, name, cause], n)
            cause_s.add_metric([model, name, cause], ms / 1e3)
        for family, by_name, scale in ((outliers, out_counts, 1), (unattributed, residual, 1e3)):
            summed: dict[str, float] = {}
            for name, v in by_name.items():
                shown_as = label(hash_of.get(name))
                summed[shown_as] = summed.get(shown_as, 0) + v
            for name, v in sorted(summed.items()):
                family.add_metric([model, name], v / scale)
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
_taken_lock = threading.Lock()  # also guards _shown_by_watcher
# watcher -> {top_keys: the keys with series of their own}: for the watcher's life, whatever collectors come and go
_shown_by_watcher: "weakref.WeakKeyDictionary[Any, dict[int, _Shown]]" = weakref.WeakKeyDictionary()


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

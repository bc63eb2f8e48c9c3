"""watch's Prometheus export, key by key (issue 40): at most 50 keys get label sets of their own, in
every per-key series (cause series included), the rest summed under "(other keys)"; and the keys that
have their own keep them for the watcher's life, so no counter series ever goes down between scrapes
(a key moving into the top 50 took its counts out of "(other keys)": a counter reset to Prometheus).

Driven as a user would: `w = warmprof.watch(fn)`, `w(x)` with tensors of many shapes (each new shape a
first call: an event, its sleep a wait cause), and the registry's exposition text read back with
prometheus_client's own parser."""

from __future__ import annotations

import time

import pytest
import torch

import warmprof

prometheus_client = pytest.importorskip("prometheus_client", reason="prometheus_client is not installed")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

OTHER = "(other keys)"
TOP = 50
PER_KEY = ("warmprof_watch_calls", "warmprof_watch_events", "warmprof_watch_outliers",
           "warmprof_watch_cause_events", "warmprof_watch_cause_seconds", "warmprof_watch_unattributed_seconds",
           "warmprof_watch_first_call_seconds", "warmprof_watch_latency_seconds")


def _served(sleep_s: float = 0.0002):
    """A served function whose calls with `slow` set sleep: a wait, off the CPU (a cause); an outlier
    once the key has its median."""
    state = {"slow": True}

    def serve(x):
        if state["slow"]:
            time.sleep(sleep_s)
        return x

    return serve, state


def _scrape(registry) -> dict[str, list]:
    """family name -> its samples, from the exposition text as Prometheus reads it."""
    text = prometheus_client.generate_latest(registry).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _keys(samples) -> set[str]:
    return {s.labels["key"] for s in samples}


def test_a_watcher_fed_3000_keys_exports_at_most_50_keys_and_other_keys_per_series():
    serve, _ = _served()
    w = warmprof.watch(serve, idle_s=3600.0, label="many", max_events=5000)  # every event kept: summed below
    registry = prometheus_client.CollectorRegistry()
    w.prometheus(registry)
    for n in range(1, 3001):
        w(torch.empty(n))  # each a new shape: a first call, an event with its wait
    families = _scrape(registry)
    w.close()
    assert len(w.stats()["keys"]) == 3000
    causes = families["warmprof_watch_cause_events"]
    assert causes, "no cause series: the sleeps were not a cause"
    for name in PER_KEY:
        keys = _keys(families[name])
        assert len(keys - {OTHER}) <= TOP, f"{name}: {len(keys)} label sets"
    assert OTHER in _keys(causes) and 0 < len(_keys(causes) - {OTHER}) <= TOP
    # nothing lost: the by-cause sums over all label sets are the watcher's own
    own: dict[str, int] = {}
    for e in w.events():
        for c in e["causes"]:
            own[c["cause"]] = own.get(c["cause"], 0) + 1
    summed: dict[str, float] = {}
    for s in causes:
        if s.name.endswith("_total"):
            summed[s.labels["cause"]] = summed.get(s.labels["cause"], 0) + s.value
    assert w.stats()["events_dropped"] == 0 and summed == own
    calls = sum(s.value for s in families["warmprof_watch_calls"] if s.name.endswith("_total"))
    assert calls == 3000


def _counters(families) -> dict[tuple, float]:
    """Every counter sample (calls, events, outliers, causes, unattributed, the histogram's buckets,
    count and sum), by (sample name, labels)."""
    out = {}
    for name in PER_KEY:
        if name == "warmprof_watch_first_call_seconds":
            continue  # a gauge
        for s in families.get(name, []):
            if s.name.endswith("_created"):
                continue
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_counters_never_go_down_between_scrapes_as_keys_change_rank():
    """Scrapes while keys rise past one another: every counter series (the (other keys) ones included)
    only grows; at most 50 keys and (other keys) in each, the set of keys with their own only grows."""
    serve, state = _served(0.002)
    w = warmprof.watch(serve, idle_s=3600.0, label="ranks", min_calls=3, floor_ms=0.5)
    registry = prometheus_client.CollectorRegistry()
    w.prometheus(registry)
    scrapes = []
    own_keys: list[set[str]] = []

    def scrape() -> None:
        families = _scrape(registry)
        for name in PER_KEY:
            assert len(_keys(families.get(name, [])) - {OTHER}) <= TOP, name
        scrapes.append(_counters(families))
        own_keys.append(_keys(families["warmprof_watch_calls"]) - {OTHER})

    # 10 keys, scraped: all have their own; then 50 more, called twice fast, and 5 slow ones called once
    state["slow"] = False
    for n in range(1, 11):
        w(torch.empty(n))
    scrape()
    for n in range(11, 61):
        w(torch.empty(n))
        w(torch.empty(n))
    state["slow"] = True
    for n in range(61, 66):
        w(torch.empty(n))  # a wait each: cause series, and slow calls in the latency sum
    scrape()
    # the slow keys rise past the fast ones, one at a time, with outliers (slow calls after fast ones)
    for n in range(61, 66):
        state["slow"] = False
        for _ in range(4):
            w(torch.empty(n))
        state["slow"] = True
        w(torch.empty(n))
        scrape()
    # and fresh keys, each called more than any before
    state["slow"] = False
    for n in range(66, 70):
        for _ in range(12):
            w(torch.empty(n))
        scrape()
    w.close()

    down = [f"{series}: {value} -> {after[series]}" for before, after in zip(scrapes, scrapes[1:])
            for series, value in before.items() if series in after and after[series] < value]
    assert not down, down
    for before, after in zip(scrapes, scrapes[1:]):
        assert set(before) <= set(after), f"series gone: {sorted(set(before) - set(after))[:3]}"
    for before, after in zip(own_keys, own_keys[1:]):
        assert before <= after
    assert len(own_keys[-1]) == TOP
    # the (other keys) series exist and count the rest: the slow keys' calls, waits and outliers among them
    last = scrapes[-1]
    other_calls = last[("warmprof_watch_calls_total", (("key", OTHER), ("model", "ranks")))]
    assert other_calls == w.stats()["calls"] - sum(
        v for (name, labels), v in last.items() if name == "warmprof_watch_calls_total" and ("key", OTHER) not in labels)
    assert any(name == "warmprof_watch_cause_events_total" and ("key", OTHER) in labels for name, labels in last)


def test_the_keys_shown_are_the_most_called_when_first_scraped_and_stay_for_the_watchers_life():
    serve, state = _served()
    state["slow"] = False
    w = warmprof.watch(serve, idle_s=3600.0, label="kept")
    reg_a = prometheus_client.CollectorRegistry()
    w.prometheus(reg_a)
    for n in range(1, 61):
        for _ in range(1 + (n % 7 == 0) * 5):  # every 7th length called 6 times
            w(torch.empty(n))
    first = _keys(_scrape(reg_a)["warmprof_watch_calls"]) - {OTHER}
    sevens = {f"{n} float32" for n in range(7, 61, 7)}
    assert sevens <= first and len(first) == TOP
    # a key outside rises to the most called: it stays in (other keys), in this registry and a new one
    outside = next(n for n in range(60, 0, -1) if f"{n} float32" not in first)
    for _ in range(50):
        w(torch.empty(outside))
    reg_b = prometheus_client.CollectorRegistry()
    w.prometheus(reg_b)
    for reg in (reg_a, reg_b):
        assert _keys(_scrape(reg)["warmprof_watch_calls"]) - {OTHER} == first
    w.close()

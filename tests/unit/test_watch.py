"""warmprof.watch: the native hot path's keys, sketch and outlier rule; events and their causes;
idle gaps with a fake clock; bounded memory; threads; closing; the report."""

import gc
import json
import os
import threading
import time

import pytest
import torch

import warmprof
from warmprof import _native
from warmprof.errors import InputError, ReportError
from warmprof.instruments.torch_compile import registered_callbacks
from warmprof.serving.watch import Watcher, watch
from warmprof.report import WatchReport, load


def _slow_server():
    """A callable that sleeps 20 ms a call once slow["on"] is set: the same key, slow or not (a
    closure, not an argument, decides)."""
    slow = {"on": False}

    def serve(x):
        if slow["on"]:
            time.sleep(0.02)
        return x

    return serve, slow


def _after_idle_event(w, slow, idle_for: float):
    """Ten quick calls, a quiet spell of `idle_for` s, then one slow call (an outlier): that call's event."""
    for _ in range(10):
        w(1)
    time.sleep(idle_for)
    slow["on"] = True
    w(1)
    w.close()
    (e,) = [e for e in w.events() if e["after_idle"]]
    return e


def _mids():
    return _native.watch_sketch_midpoints()


def test_sketch_quantiles_are_within_ten_percent():
    import random

    from warmprof.serving.watch.core import _quantile

    rng = random.Random(1)
    w = Watcher(lambda d: None, key=lambda d: 0, min_calls=10**9)  # never an outlier: only the sketch
    values = []
    for _ in range(3000):
        ns = int(rng.lognormvariate(11, 1.0))  # ~60 us, wide
        values.append(ns)
    # feed the sketch through its own bucket rule (no real durations): check the quantile walk
    buckets = [0] * len(_mids())
    import bisect
    edges = _mids()
    for v in values:
        buckets[max(0, min(len(edges) - 1, bisect.bisect_left(edges, v) - 1))] += 1
    values.sort()
    for q in (0.5, 0.9, 0.99):
        exact = values[int(q * len(values)) - 1]
        assert abs(_quantile(buckets, edges, q) / exact - 1) < 0.25
    w.close()
    # midpoints rise, about 19% apart (4 a octave)
    assert all(b > a for a, b in zip(edges, edges[1:]))
    assert 1.15 < edges[41] / edges[40] < 1.25


def test_the_first_call_at_each_key_is_an_event_and_keys_are_shapes_and_dtypes():
    seen = []
    w = watch(lambda x, scale=1: x, on_event=seen.append)
    for shape in ((1, 8), (1, 8), (2, 8), (1, 8)):
        w(torch.zeros(shape))
    w(torch.zeros((1, 8), dtype=torch.float16))
    w(torch.zeros((1, 8)), scale=3)  # a keyword changes the key; its value (an int) does not
    w(torch.zeros((1, 8)), scale=4)
    w.close()
    assert [e["key"] for e in seen] == ["1x8 float32", "2x8 float32", "1x8 float16", "1x8 float32, scale=int"]
    assert all(e["first"] and not e["outlier"] for e in seen)
    stats = w.stats()
    assert stats["calls"] == 7 and sorted(k["calls"] for k in stats["keys"]) == [1, 1, 2, 3]


def test_a_slow_call_at_a_seen_key_is_an_outlier_with_its_excess_over_the_median():
    plant = {"at": 12}
    calls = {"n": 0}

    def serve(x):
        calls["n"] += 1
        if calls["n"] == plant["at"]:
            time.sleep(0.03)  # 30 ms: far over 3x a microsecond median whatever the machine's load
        return x

    w = watch(serve, floor_ms=1.0)
    for _ in range(20):
        w(torch.zeros(4))
    w.close()
    outliers = [e for e in w.events() if e["outlier"]]
    assert len(outliers) == 1 and outliers[0]["calls_before"] == plant["at"] - 1
    e = outliers[0]
    assert e["ms"] >= 30 and e["excess_ms"] == pytest.approx(e["ms"] - e["median_ms"])
    assert e["unattributed_ms"] == pytest.approx(e["excess_ms"] - sum(c["ms"] for c in e["causes"]))
    assert not any(c["cause"] == "jit_compile" for c in e["causes"])
    # the sleep is time off the CPU: a wait (or, were the thread preempted too, whose wait for a CPU an
    # outlier not known before it ran does not read, contention), booked at least to within a scheduler
    # tick (the call's CPU time starts on getrusage's figure)
    off_cpu = sum(c["ms"] for c in e["causes"] if c["cause"] in ("wait", "cpu_contention"))
    assert off_cpu >= 15 and e["unattributed_ms"] <= e["excess_ms"] - 15


def test_a_call_after_an_idle_gap_reads_the_clock_first_and_a_low_clock_is_clock_ramp():
    readings = []

    def clock():  # a fake device clock: 500 of 1500 MHz
        readings.append(time.monotonic())
        return (500.0, 1500.0)

    serve, slow = _slow_server()

    w = watch(serve, clock_source=clock, idle_s=0.2, floor_ms=1.0)
    for _ in range(10):
        w(1)
    assert readings == []  # no idle gap yet: the clock is never read on the hot path
    time.sleep(0.3)
    slow["on"] = True
    w(1)
    w.close()
    assert len(readings) == 1
    (e,) = [e for e in w.events() if e["after_idle"]]
    assert e["gap_s"] >= 0.3 and e["outlier"] and e["clock_mhz"] == [500.0, 1500.0]
    (ramp,) = [c for c in e["causes"] if c["cause"] == "clock_ramp"]
    assert ramp["evidence"] == "inferred" and "500 of 1500 MHz" in ramp["detail"] and ramp["ms"] > 0


def test_after_idle_with_the_clock_at_its_maximum_is_not_clock_ramp():
    serve, slow = _slow_server()

    w = watch(serve, clock_source=lambda: (1500.0, 1500.0), idle_s=0.2, floor_ms=1.0)
    e = _after_idle_event(w, slow, 0.3)
    assert not any(c["cause"] == "clock_ramp" for c in e["causes"])
    (wait,) = [c for c in e["causes"] if c["cause"] == "wait"]  # its 20 ms sleep
    assert wait["ms"] == pytest.approx(20, rel=0.15) and wait["evidence"] == "measured"


def _spinning_server():
    """A callable that spins 20 ms of its thread's CPU time a call once spin["on"] is set: slow on the
    CPU, whatever the machine's load (a preempted spin only takes longer)."""
    spin = {"on": False}

    def serve(x):
        if spin["on"]:
            end = time.thread_time_ns() + 20_000_000
            while time.thread_time_ns() < end:
                pass
        return x

    return serve, spin


def test_without_a_clock_reading_an_after_idle_outlier_is_not_clock_ramp():
    """An idle gap alone is not a clock: a call slow on its CPU after a quiet spell stays unexplained."""
    serve, spin = _spinning_server()

    w = watch(serve, idle_s=0.2, floor_ms=1.0)
    e = _after_idle_event(w, spin, 0.3)
    assert e["after_idle"] and not any(c["cause"] == "clock_ramp" for c in e["causes"])
    # A pure-Python spin hands the GIL over at each switch interval (5 ms) when another thread of the
    # process wants it: real waits of 0.06-1.7 ms were measured in 4 of 18 such calls here, never the
    # spin's own 20 ms of CPU.
    assert not any(c["cause"] == "wait" and c["ms"] > 5.0 for c in e["causes"]), e["causes"]
    assert e["unattributed_ms"] > 15  # the planted slowness stays unexplained, and is exported as such
    fam = {f.name: f for f in _families(w)}
    (residual,) = [x for x in fam["warmprof_watch_unattributed_seconds"].samples if x.name.endswith("_total")]
    assert residual.value == pytest.approx(e["unattributed_ms"] / 1e3)


def _sleeps_after_idle(sleep_s: float):
    """A watcher over a callable that does a little work a call and sleeps `sleep_s` on the first call
    after a quiet spell, with no clock source (none on this CPU); ten usual calls, the quiet spell,
    that call: (watcher, its event)."""
    state = {"sleep": False}

    def serve(x):
        y = x * 2
        if state["sleep"]:
            time.sleep(sleep_s)
        return y

    w = watch(serve, idle_s=0.2)
    for _ in range(10):
        w(torch.zeros(8))
    time.sleep(0.3)
    state["sleep"] = True
    w(torch.zeros(8))
    w.close()
    (e,) = [e for e in w.events() if e["after_idle"]]
    return w, e


def test_the_same_sleep_after_an_idle_gap_is_a_wait_not_clock_ramp():
    """Issue 24: an off-CPU stall reads as a wait. The 60 ms sleep is booked as wait to within 15% (its
    wait for a CPU once it woke, on a busy machine, is contention, read from schedstat, not wait);
    nothing is clock_ramp; the wait has its Prometheus series beside the unattributed one."""
    w, e = _sleeps_after_idle(0.06)
    assert e["outlier"] and e["after_idle"] and e["clock_mhz"] is None
    assert not any(c["cause"] == "clock_ramp" for c in e["causes"])
    (wait,) = [c for c in e["causes"] if c["cause"] == "wait"]
    assert wait["ms"] == pytest.approx(60, rel=0.15)
    assert wait["evidence"] == "measured" and wait["source"] == "thread_blocked" and "off its CPU" in wait["detail"]
    assert e["unattributed_ms"] == pytest.approx(e["excess_ms"] - sum(c["ms"] for c in e["causes"]))
    assert abs(e["unattributed_ms"]) < 0.15 * 60  # the wait explains the excess
    # every event's waits (the key's first call may have waited too: a busy machine's first op)
    waits = [c["ms"] for ev in w.events() for c in ev["causes"] if c["cause"] == "wait"]
    fam = {f.name: f for f in _families(w)}
    seconds = {x.labels["cause"]: x.value for x in fam["warmprof_watch_cause_seconds"].samples
               if x.name.endswith("_total")}
    assert seconds["wait"] == pytest.approx(sum(waits) / 1e3) and sum(waits) >= wait["ms"]
    events = {x.labels["cause"]: x.value for x in fam["warmprof_watch_cause_events"].samples if x.name.endswith("_total")}
    assert events["wait"] == len(waits)
    assert "warmprof_watch_unattributed_seconds" in fam
    assert w.report().by_cause["wait"]["ms"] == pytest.approx(sum(waits))


def test_no_quantile_is_above_the_keys_max_and_the_first_call_is_exported():
    w = watch(lambda x: x)
    for _ in range(5):
        w(torch.zeros(2))
    (k,) = w.stats()["keys"]
    assert k["p50_ms"] <= k["p90_ms"] <= k["p99_ms"] <= k["max_ms"]
    fam = {f.name: f for f in _families(w)}
    (first,) = fam["warmprof_watch_first_call_seconds"].samples
    assert first.value == pytest.approx(k["first_ms"] / 1e3) and first.labels["key"] == k["key"]
    w.close()


def _families(w):
    """What a Prometheus scrape of this watcher reads (a registry of its own)."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    w.prometheus(registry)
    return list(registry.collect())


def test_memory_stays_bounded_with_100000_distinct_keys():
    gc.collect()
    rss0 = _native.rss_bytes()
    w = watch(lambda i: i, key=lambda i: i, max_keys=10000, max_events=1000)
    for i in range(100000):
        w(i)
    stats = w.stats()
    w.close()
    assert stats["calls"] == 100000 and len(stats["keys"]) == 10000
    assert stats["overflow_calls"] == 90000
    assert len(w.events()) == 1000 and stats["events"] == 10000 and stats["events_dropped"] == 9000
    # 10,000 keys x a 512-byte sketch, their names and 1,000 events: a few MB, not 100,000 of anything
    assert _native.rss_bytes() - rss0 < 64 << 20
    assert any("past the first 10000" in n for n in w.report().notes)


def test_one_watcher_called_from_several_threads_counts_every_call():
    w = watch(lambda x: x)

    def work(n):
        for _ in range(2000):
            w(torch.zeros(n))

    threads = [threading.Thread(target=work, args=(n,)) for n in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    stats = w.stats()
    assert stats["calls"] == 8000 and sorted(k["calls"] for k in stats["keys"]) == [2000] * 4


def test_errors_propagate_and_are_counted_not_kept():
    def boom(x):
        raise ValueError("the model's own error")

    w = watch(boom)
    with pytest.raises(ValueError, match="the model's own error"):
        w(1)
    w.close()
    assert w.stats()["errors"] == 1 and w.events() == []
    w2 = watch(lambda x: x, key=lambda x: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        w2(1)
    w2.close()


def test_close_unwraps_and_releases_dynamos_callbacks():
    import torch._dynamo  # noqa: F401  (watch taps dynamo's callbacks once it is imported, never imports it)

    before = registered_callbacks()
    w = watch(lambda x: x)
    assert registered_callbacks() == before + 2
    w2 = watch(lambda x: x)  # one pair for the process, however many watchers
    assert registered_callbacks() == before + 2
    w(1)
    w.close()
    w(2)  # closed: straight through, unrecorded
    assert w.stats()["calls"] == 1 and registered_callbacks() == before + 2
    w2.close()
    assert registered_callbacks() == before
    with watch(lambda x: x) as w3:
        assert w3(5) == 5
    assert w3.closed and registered_callbacks() == before


def test_decorator_forms_keep_the_function():
    @warmprof.watch
    def f(x):
        """doc"""
        return x + 1

    @warmprof.watch(key=lambda x: "all")
    def g(x):
        return x * 2

    assert f(1) == 2 and g(3) == 6 and f.__name__ == "f" and f.__doc__ == "doc" and f.__wrapped__(1) == 2
    assert [k["key"] for k in g.stats()["keys"]] == ["'all'"]
    f.close()
    g.close()


@pytest.mark.parametrize("kwargs, message", [
    ({"model": 3}, "takes a model or function"),
    ({"model": len, "key": 5}, "key must be callable"),
    ({"model": len, "max_keys": 0}, "max_keys must be a whole number"),
    ({"model": len, "factor": 1.0}, "factor must be above 1"),
    ({"model": len, "idle_s": -1}, "idle_s must be above 0"),
    ({"model": len, "idle_s": 0}, "idle_s must be above 0"),
])
def test_bad_options_are_clear_errors(kwargs, message):
    before = registered_callbacks()
    with pytest.raises(InputError, match=message):
        watch(**kwargs)
    assert registered_callbacks() == before  # nothing left registered


def test_the_report_round_trips_and_renders(tmp_path):
    serve, slow = _slow_server()

    w = watch(serve, floor_ms=1.0, label="svc")
    for _ in range(10):
        w(torch.zeros(2))
    slow["on"] = True
    w(torch.zeros(2))
    w.close()
    r = w.report()
    path = r.save(tmp_path / "w.json")
    back = load(path)
    assert isinstance(back, WatchReport) and back.to_dict() == r.to_dict()
    text = str(back)
    assert "warmprof watch: svc: 11 calls at 1 keys" in text and "[outlier]" in text
    d = json.loads(path.read_text())
    d["events"][0]["causes"] = [{"cause": "gremlins", "ms": 1.0, "evidence": "measured", "source": "x"}]
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(ReportError, match="unknown cause 'gremlins'"):
        load(tmp_path / "bad.json")
    d = json.loads(path.read_text())
    d["keys"][0]["p50_ms"] = 99.0
    (tmp_path / "bad2.json").write_text(json.dumps(d))
    with pytest.raises(ReportError, match="quantiles out of order"):
        load(tmp_path / "bad2.json")


def test_the_watch_command_needs_the_demo(capsys):
    from warmprof.cli import main

    assert main(["watch"]) == 2
    assert "replays the demo stream (--demo)" in capsys.readouterr().err
    assert main(["watch", "--demo", "--requests", "5"]) == 2


def test_prometheus_text_parses_with_prometheus_clients_own_parser():
    prometheus_client = pytest.importorskip("prometheus_client", reason="prometheus_client is not installed")
    from prometheus_client.parser import text_string_to_metric_families

    serve, slow = _slow_server()

    registry = prometheus_client.CollectorRegistry()
    w = watch(serve, floor_ms=1.0, label="svc")
    w.prometheus(registry)
    for _ in range(10):
        w(torch.zeros(3))
    slow["on"] = True
    w(torch.zeros(3))
    w.close()
    text = prometheus_client.generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    calls = {s.labels["key"]: s.value for s in families["warmprof_watch_calls"].samples if s.name.endswith("_total")}
    assert calls == {"3 float32": 11.0}
    outliers = [s.value for s in families["warmprof_watch_outliers"].samples if s.name.endswith("_total")]
    assert outliers == [1.0]
    hist = families["warmprof_watch_latency_seconds"].samples
    count = [s.value for s in hist if s.name.endswith("_count")]
    assert count == [11.0]
    buckets = [s for s in hist if s.name.endswith("_bucket")]
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == 11.0
    assert all(a.value <= b.value for a, b in zip(buckets, buckets[1:]))  # cumulative


def test_an_event_is_added_to_the_requests_open_telemetry_span():
    pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is not installed")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    w = watch(lambda x: x)
    from opentelemetry import context, trace

    with tracer.start_as_current_span("request 1"):
        w(torch.zeros(2, 5))  # the first call at its key: an event
    with tracer.start_as_current_span("request 2"):
        w(torch.zeros(2, 5))  # nothing fires: no span event
    w.close()
    first, second = exporter.get_finished_spans()
    (ev,) = first.events
    assert ev.name == "warmprof.event" and ev.attributes["warmprof.key"] == "2x5 float32"
    assert ev.attributes["warmprof.why"] == "first" and second.events == ()
    assert trace.get_current_span(context.get_current()) is not None


def test_show_png_and_compare_read_watch_reports(tmp_path):
    serve, slow = _slow_server()

    paths = []
    for name in ("a", "b"):
        slow["on"] = False
        w = watch(serve, floor_ms=1.0, label="svc")
        for _ in range(10):
            w(torch.zeros(2))
        slow["on"] = True
        w(torch.zeros(2))
        w.close()
        paths.append(w.report().save(tmp_path / f"{name}.json"))
    c = warmprof.compare(*paths)
    assert c.kind == "watch" and [r.key for r in c.summary][0] == "p50 (median over keys)"
    assert "unattributed" in [r.key for r in c.rows]
    text = str(c)
    assert "warmprof compare: 2 watch reports" in text and "p99 (largest key)" in text
    pytest.importorskip("matplotlib")
    from warmprof.render import png

    fig = png.figure(load(paths[0]), draw=True)
    labels = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]
    assert "2 float32" in labels and "unattributed" in labels


def test_the_cuda_allocators_growth_is_said_in_the_allocator_cause():
    from factories import call_costs, watch_call
    from warmprof.serving.watch.events import build

    info = watch_call(1, None, (), None, False, True, 10**9, 5 * 10**6, 0, None, 5 * 10**6, 500, 0, 0, 0, 0, 9, 10**6)
    price = call_costs(1000.0)
    e = build(info, index=0, key="k", start_ns=0, idle_ns=10**9, dynamo=None, costs=price,
              reserved=((2 << 20, 1), (66 << 20, 3)))
    (alloc,) = [c for c in e["causes"] if c["cause"] == "allocator_growth"]
    assert alloc["ms"] == pytest.approx(0.5) and "grew 64.0 MiB in 2 new segments" in alloc["detail"]
    assert e["excess_ms"] == pytest.approx(4.0) and e["unattributed_ms"] == pytest.approx(3.5)


def test_a_watcher_is_initialised_once():
    w = watch(lambda x: x)
    with pytest.raises(RuntimeError, match="initialised once"):
        w.__init__(lambda x: x)
    w(1)
    assert w.stats()["calls"] == 1
    w.close()


def test_a_compile_on_another_thread_is_not_booked_to_this_threads_call():
    go, done = threading.Event(), threading.Event()

    def serve(x):
        go.set()
        done.wait(5)  # the call is running while another thread "compiles"
        return x

    w = watch(serve)
    w(0)  # the first call at the key: an event, with or without a compile
    go.clear()
    done.clear()
    t = threading.Thread(target=lambda: (go.wait(5), _native.watch_note_compile(2_000_000_000), done.set()))
    t.start()
    w(1)  # same key: only a compile on its own thread would make it an event
    t.join()
    w.close()
    assert len(w.events()) == 1 and not any(c["cause"] == "jit_compile" for e in w.events() for c in e["causes"])


def test_no_idle_gap_while_another_call_is_running():
    readings, started, release = [], threading.Event(), threading.Event()

    def serve(x):
        if x == "long":
            started.set()
            release.wait(5)
        return x

    w = watch(serve, clock_source=lambda: readings.append(1) or (1.0, 1.0), idle_s=0.1)
    w("x")
    t = threading.Thread(target=w, args=("long",))
    t.start()
    started.wait(5)
    time.sleep(0.3)  # longer than idle_s since the last call ended, but a call is running
    w("x")
    release.set()
    t.join()
    w.close()
    assert readings == [] and not any(e["after_idle"] for e in w.events())


def test_stats_with_many_keys_while_another_thread_serves_do_not_deadlock():
    w = watch(lambda i: i, key=lambda i: i % 3000)
    for i in range(3000):
        w(i)
    stop = threading.Event()

    def serve():
        i = 0
        while not stop.is_set():
            w(i)
            i += 1

    class Slow:  # garbage whose finalizer lets go of the GIL, as closing a file or socket does
        def __del__(self):
            time.sleep(0.001)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    junk = [Slow() for _ in range(200)]
    for _ in range(3):
        junk = [Slow() for _ in range(200)] + [[j] for j in junk]  # cycles for the collector
        assert len(w.stats()["keys"]) == 3000
    stop.set()
    t.join(10)
    assert not t.is_alive()
    w.close()


def test_estimates_fit_in_an_outliers_excess_and_a_compiles_faults_are_its_own():
    from factories import call_costs, watch_call
    from warmprof.serving.watch.events import build

    price = call_costs(1000.0)
    # a 30 ms outlier over a 5 ms median: 6,000 faults (6 ms) and 25 ms off its CPU with one preemption
    info = watch_call(1, None, (), None, False, True, 10**9, 30 * 10**6, 0, None, 5 * 10**6, 6000, 0, 1, 0, 0, 9, 5 * 10**6)
    e = build(info, index=0, key="k", start_ns=0, idle_ns=10**9, dynamo=None, costs=price, reserved=(None, None))
    assert sum(c["ms"] for c in e["causes"]) <= e["excess_ms"] + 1e-9 and e["unattributed_ms"] >= -1e-9
    # a call that compiled for 20 ms of its 30: its faults are the compile's, not allocator growth
    info = watch_call(1, None, (), None, True, False, 10**9, 30 * 10**6, 0, None, 30 * 10**6, 10000, 0, 0, 1, 20 * 10**6, 0, 0)
    e = build(info, index=0, key="k", start_ns=0, idle_ns=10**9, dynamo=None, costs=price, reserved=(None, None))
    assert [c["cause"] for c in e["causes"]] == ["jit_compile"]


def test_a_bad_clock_reading_is_left_out_and_the_report_still_loads(tmp_path):
    serve, slow = _slow_server()

    w = watch(serve, clock_source=lambda: ("n/a", float("nan")), idle_s=0.1, floor_ms=1.0)
    e = _after_idle_event(w, slow, 0.2)
    assert e["clock_mhz"] is None
    assert isinstance(load(w.report().save(tmp_path / "w.json")), WatchReport)


def test_a_compile_at_a_key_past_max_keys_is_still_an_event():
    w = watch(lambda x: x, key=lambda x: x, max_keys=1)
    w(1)
    w(2)  # past max_keys, nothing fired: counted only

    def compiling(x):
        _native.watch_note_compile(3_000_000)  # as dynamo's callback does on the calling thread
        return x

    w2 = watch(compiling, key=lambda x: x, max_keys=1)
    w2(1)
    w2(2)
    w.close()
    w2.close()
    assert len(w.events()) == 1
    assert [e["key"] for e in w2.events()] == ["1", "2"]
    assert all(any(c["cause"] == "jit_compile" for c in e["causes"]) for e in w2.events())


def test_default_keys_read_dicts_and_ignore_keyword_order():
    seen = []
    w = watch(lambda *a, **k: None, on_event=seen.append)
    w({"input_ids": torch.zeros(1, 8)})
    w({"input_ids": torch.zeros(1, 16)})
    w(a=torch.zeros(2), b=torch.zeros(3))
    w(b=torch.zeros(3), a=torch.zeros(2))
    w.close()
    assert [e["key"] for e in seen] == ["{input_ids: 1x8 float32}", "{input_ids: 1x16 float32}",
                                        "a=2 float32, b=3 float32"]


def test_prometheus_histogram_bounds_are_the_sketchs_bucket_edges():
    from warmprof.serving.watch.export import _upper_edge_s

    assert _upper_edge_s(3) == pytest.approx(128e-9)  # 4 buckets an octave from 64 ns: 64..128 ns
    assert _upper_edge_s(7) == pytest.approx(256e-9)


def _records_a_cuda_graph(sleep_s: float = 0.0):
    """A served function that, called with "record", brackets a CUDA graph recording with dynamo's callbacks
    (as dynamo's cudagraph trees do on a shape's second call), sleeping `sleep_s` inside it."""
    from torch._dynamo.callback import CallbackArgs, CallbackTrigger

    from warmprof.serving.watch import sources

    def serve(x):
        if x == "record":
            args = CallbackArgs(CallbackTrigger.CUDAGRAPH_RECORDING, "0/0")
            sources._on_start(args)
            if sleep_s:
                time.sleep(sleep_s)
            sources._on_end(args)
        return x

    return serve


def test_a_cuda_graph_recording_bracketed_by_dynamos_callbacks_is_graph_capture_not_a_compile():
    w = watch(_records_a_cuda_graph(0.01), key=lambda x: "one")
    w("plain")
    w("record")  # the key's second call: kept because something fired during it
    w.close()
    (e,) = [e for e in w.events() if not e["first"]]
    # a busy machine may preempt the call outside the recording: that is cpu_contention, the machine's
    own = [c for c in e["causes"] if c["cause"] != "cpu_contention"]
    assert [c["cause"] for c in own] == ["graph_capture"]
    (g,) = own
    assert g["evidence"] == "measured" and g["source"] == "cudagraphs:record" and g["ms"] >= 10
    assert sum(c["ms"] for c in e["causes"]) <= e["ms"] + 1e-9


def test_a_recordings_end_is_stamped_on_the_calls_clock_not_clock_monotonic(monkeypatch):
    """After minutes of serving CLOCK_MONOTONIC and the tick clock a call is timed on drift apart by
    milliseconds (a few ppm): a recording's end read on the first fell outside its call's window on the
    second, and its time was booked a compile (seen on torch 2.14.1, 7 minutes into the suite). Here
    CLOCK_MONOTONIC is put a second off: the recording must still be its call's."""
    real = _native.now_ns
    monkeypatch.setattr(_native, "now_ns", lambda: real() + 1_000_000_000)

    w = watch(_records_a_cuda_graph(), key=lambda x: "one")
    w("plain")
    w("record")
    w.close()
    (e,) = [e for e in w.events() if not e["first"]]
    assert "graph_capture" in [c["cause"] for c in e["causes"]]
    assert "jit_compile" not in [c["cause"] for c in e["causes"]]
    assert 0 <= e["t_s"] < 60  # on the calls' clock too


def test_a_recording_inside_a_call_is_its_call_s_when_the_call_started_late():
    """Between a call's arrival and its start warmprof reads the clock source (after an idle gap), admits the
    key and reads getrusage; a preemption there (a loaded machine: CI saw it) put the call's window that much
    early, so a CUDA graph recording that ended inside the call fell past the window's end and was booked a
    compile. Here the clock source takes 50 ms, as a long preemption would: the recording is still the call's."""

    def slow_clock():
        time.sleep(0.05)
        return (1.0, 1.0)

    w = watch(_records_a_cuda_graph(), key=lambda x: "one", clock_source=slow_clock, idle_s=0.1)
    w("plain")
    time.sleep(0.15)  # an idle gap: the next call reads the clock source before it starts
    w("record")
    w.close()
    (e,) = [e for e in w.events() if not e["first"]]
    assert "graph_capture" in [c["cause"] for c in e["causes"]], e["causes"]
    assert "jit_compile" not in [c["cause"] for c in e["causes"]]
    assert e["ms"] < 50  # the clock source's 50 ms are not the call's


@pytest.mark.parametrize("option, value", [("max_keys", 2**64 + 3), ("max_events", 2**63), ("min_calls", 2**64),
                                           ("max_keys", 10_000_001), ("floor_ms", 1e300), ("idle_s", 2.0**64),
                                           ("factor", 1e308)])
def test_an_option_past_what_the_native_side_holds_is_refused_not_wrapped(option, value):
    """Issue 26: max_keys=2**64+3 kept 3 keys (the count wrapped in C)."""
    with pytest.raises(InputError, match=f"{option} must be a (whole )?number from"):
        watch(lambda x: x, **{option: value})


def test_the_largest_accepted_bounds_still_watch():
    w = watch(lambda x: x, max_keys=10_000_000, max_events=10_000_000, min_calls=10**12)
    assert w(3) == 3
    w.close()


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_ctrl_c_or_exit_raised_while_an_event_is_handled_goes_on_up(exc):
    """Issue 26: a KeyboardInterrupt or SystemExit raised in on_event was swallowed (written as
    unraisable, the call went on). An Exception there is still never the call's error."""
    def on_event(event):
        raise exc("from the handler")

    w = watch(lambda x: x + 1, on_event=on_event)
    with pytest.raises(exc, match="from the handler"):
        w(1)  # the first call is an event
    w.close()


def test_an_error_in_on_event_is_not_the_calls_error(recwarn):
    def on_event(event):
        raise ValueError("handler bug")

    w = watch(lambda x: x + 1, on_event=on_event)
    assert w(1) == 2
    w.close()


def test_watching_a_plain_function_does_not_import_dynamo(tmp_path):
    """Issue 26: watch() imported torch._dynamo (1-2 s) for a plain function and left an inductor folder
    in the temp folder. In a fresh process with its own temp folder: neither."""
    import subprocess
    import sys

    code = ("import sys, torch, warmprof\n"
            "w = warmprof.watch(lambda x: x + 1)\n"
            "[w(torch.zeros(2)) for _ in range(5)]\n"
            "w.close()\n"
            "print('torch._dynamo' in sys.modules)\n")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "False" and list(tmp_path.iterdir()) == []



def test_a_model_compiled_after_watch_began_is_tapped_from_then_on():
    """dynamo imported after watch() began (a function that compiles on its first call): its compiles
    are counted from the event that saw dynamo come in. A fresh process, where dynamo is not imported."""
    import subprocess
    import sys

    code = ("import json, torch, warmprof\n"
            "state = {}\n"
            "def fn(x):\n"
            "    if 'c' not in state:\n"
            "        state['c'] = torch.compile(lambda t: t * 2, backend='eager', dynamic=False)\n"
            "    return state['c'](x)\n"
            "w = warmprof.watch(fn)\n"
            "w(torch.zeros(2)); w(torch.zeros(2)); w(torch.zeros(3))\n"
            "w.close()\n"
            "print(json.dumps([[e['key'], sum(c.get('count') or 0 for c in e['causes'] if c['cause'] == 'jit_compile')]\n"
            "                  for e in w.events()]))\n")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    events = json.loads(got.stdout.strip().splitlines()[-1])
    assert [k for k, _ in events] == ["2 float32", "3 float32"]  # each shape's first call
    assert events[1][1] >= 1  # the second shape's recompile, booked as a compile once the tap was on


# ---- issue 26: watch gives the right data on hostile arguments --------------------------------------

def test_numpy_string_and_structured_arrays_of_one_shape_are_one_key():
    """dtypes were hashed by address: numpy makes a new dtype object per string or structured array."""
    import numpy as np

    w = watch(lambda x: x)
    for _ in range(5):
        w(np.array(["abcde", "x"]))
        w(np.zeros(3, dtype=[("a", "i4"), ("b", "f8")]))
    assert len(w.stats()["keys"]) == 2
    w.close()


def test_an_argument_whose_shape_raises_is_watched_as_the_plain_call_runs():
    class Lazy:
        @property
        def shape(self):
            raise RuntimeError("not loaded")

    w = watch(lambda x: "ran")
    assert w(Lazy()) == "ran" and w(Lazy()) == "ran"
    assert len(w.stats()["keys"]) == 1 and "Lazy" in w.stats()["keys"][0]["key"]
    w.close()


def test_watch_on_a_method_keeps_self():
    class Server:
        def __init__(self, k):
            self.k = k

        @warmprof.watch
        def handle(self, x):
            return self.k + x

    a, b = Server(1), Server(10)
    assert a.handle(2) == 3 and b.handle(2) == 12
    assert Server.handle.stats()["calls"] == 2
    Server.handle.close()


@pytest.mark.parametrize("kind", ["async", "generator", "async generator"])
def test_an_async_function_or_a_generator_is_refused_with_what_to_do(kind):
    async def coro(x):
        return x

    def gen(x):
        yield x

    async def agen(x):
        yield x

    fn = {"async": coro, "generator": gen, "async generator": agen}[kind]
    with pytest.raises(InputError, match=f"is an? {kind}.*function.*Watch the synchronous function"):
        watch(fn)


def test_a_dict_argument_of_thousands_of_fields_gets_a_short_key_name():
    w = watch(lambda d: d)
    w({f"field{i}": i for i in range(3000)})
    (k,) = w.stats()["keys"]
    assert len(k["key"]) <= 200 and k["key"].startswith("{field0: int, field1: int") and k["key"].endswith("…")
    w.close()


def test_a_lone_surrogate_in_a_key_never_breaks_a_prometheus_scrape():
    """One request whose JSON body held the key "\\udcff" made every later scrape fail (500)."""
    from prometheus_client import CollectorRegistry, generate_latest

    w = watch(lambda d: d)
    w({"\udcff": 1})
    w(torch.zeros(2))
    registry = CollectorRegistry()
    w.prometheus(registry)
    text = generate_latest(registry).decode("utf-8")
    assert "\\udcff" in text
    w.close()


def test_two_watched_models_of_one_class_export_series_of_their_own():
    """Issue 26: two watchers of one class exported the same Prometheus series twice (an invalid scrape)."""
    from prometheus_client import CollectorRegistry, generate_latest

    a, b = watch(torch.nn.Linear(2, 2)), watch(torch.nn.Linear(2, 2))
    registry = CollectorRegistry()
    ca, cb = a.prometheus(registry), b.prometheus(registry)
    with torch.no_grad():
        a(torch.zeros(1, 2))
        b(torch.zeros(1, 2))
    assert (ca.model, cb.model) == ("Linear", "Linear #2")
    lines = [ln for ln in generate_latest(registry).decode().splitlines() if ln and not ln.startswith("#")]
    assert len(lines) == len(set(lines))
    assert any('model="Linear #2"' in ln for ln in lines) and any('model="Linear"' in ln for ln in lines)
    a.close()
    b.close()

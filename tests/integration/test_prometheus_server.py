"""warmprof.watch's Prometheus export, scraped by a real Prometheus server (issue 28).

A serving process (prometheus_child.py) runs a small torch model under warmprof.watch, with its
metrics on a registry of its own served by prometheus_client's start_http_server on 127.0.0.1, and
writes what the watcher itself says to a JSON file. The `prometheus` binary then runs on 127.0.0.1 with
a port, storage directory and scrape config (every 1 s) of the test's own. Once Prometheus's
/api/v1/targets shows the child up and its samples can be queried, /api/v1/query must read back the
watcher's own figures: calls, events and first-call latency per key, events and seconds per key and
cause (the planted first-call sleeps are each key's wait), outliers and unattributed seconds per key,
the latency histogram's count and sum, and the report's by_cause totals through PromQL's sum by.

Every wait is for a state (the child's figures written, Prometheus ready, the target up, the series
there) under a bounded deadline, never for a time. Queries use last_over_time over a window, so a
scrape that timed out on a loaded machine (whose staleness markers hide a plain selector's series)
cannot hide what the earlier scrapes stored.

Skipped where the prometheus binary (Debian: apt-get install prometheus) or prometheus_client is
missing, unless WARMPROF_REQUIRE_PROMETHEUS=1 (CI sets it once it has installed them): then that is a
failure. Both processes are stopped and the temporary directory removed whatever happens."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from warmprof import _native

CHILD = Path(__file__).with_name("prometheus_child.py")
REQUIRE = "WARMPROF_REQUIRE_PROMETHEUS"
JOB = "warmprof"
READY_DEADLINE_S = 90.0  # the child: torch's import and its calls, on a loaded 2-core machine
SCRAPE_DEADLINE_S = 90.0  # Prometheus: start, scrape the child up, its samples queryable
POLL_S = 0.2
WINDOW = "10m"  # last_over_time's window: longer than the whole test
REL = 1e-9  # Prometheus keeps float64 and both text formats round-trip it: only the ms -> s division differs

# The child's plan (prometheus_child.py): key -> calls, and the sleep its first call makes
KEYS = {"1x4x16 float32": 5, "1x9x16 float32": 3, "1x17x16 float32": 11}
FIRST_SLEEP_S = {"1x4x16 float32": 0.01, "1x9x16 float32": 0.02, "1x17x16 float32": 0.03}
SPIN_KEY = "1x17x16 float32"

# No request to 127.0.0.1 through an http_proxy the environment may name
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not Linux
    _LIBC = None


def _die_with_parent() -> None:
    """In the started process (preexec_fn): SIGTERM when the test process dies, even by SIGKILL."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _prometheus_binary() -> str | None:
    for candidate in (os.environ.get("PROMETHEUS"), shutil.which("prometheus"), "/usr/bin/prometheus"):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _require() -> str:
    """The prometheus binary's path; skipped (failed under WARMPROF_REQUIRE_PROMETHEUS=1) when it or
    prometheus_client is missing."""
    missing = []
    binary = _prometheus_binary()
    if binary is None:
        missing.append("the prometheus binary (Debian: apt-get install prometheus; or PROMETHEUS=/path)")
    if importlib.util.find_spec("prometheus_client") is None:
        missing.append("prometheus_client (pip install prometheus_client)")
    if missing:
        reason = "the Prometheus server test needs " + " and ".join(missing)
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{reason} ({REQUIRE}=1)")
        pytest.skip(reason)
    return binary


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(none)"


class _Run:
    """The processes and files of one test: started here, stopped and removed by the fixture."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[tuple[subprocess.Popen, list]] = []  # each with the files it writes to
        self.child: subprocess.Popen | None = None
        self.prom: subprocess.Popen | None = None
        self.prom_port: int | None = None
        self.figures_path = root / "figures.json"

    def diag(self) -> str:
        return (f"\n--- child stderr ---\n{_tail(self.root / 'child.err')}"
                f"\n--- prometheus log ---\n{_tail(self.root / 'prometheus.log')}")

    def _start(self, args: list[str], out: str, err: str, **kw) -> subprocess.Popen:
        files = [open(self.root / out, "wb")]
        if err != out:
            files.append(open(self.root / err, "wb"))
        try:
            p = subprocess.Popen(args, stdout=files[0], stderr=files[-1], cwd=self.root,
                                 preexec_fn=_die_with_parent, **kw)
        except BaseException:
            for f in files:
                f.close()
            raise
        self.procs.append((p, files))
        return p

    # -- the serving child ---------------------------------------------------------------------
    def start_child(self) -> dict:
        """Start the child; its figures, once it has written them (it is serving by then)."""
        self.child = self._start([sys.executable, str(CHILD), str(self.figures_path)], "child.out", "child.err",
                                 stdin=subprocess.PIPE)
        deadline = time.monotonic() + READY_DEADLINE_S
        while not self.figures_path.exists():
            if self.child.poll() is not None:
                pytest.fail(f"the serving child exited ({self.child.returncode}) before it was ready" + self.diag())
            if time.monotonic() > deadline:
                pytest.fail(f"the serving child wrote no figures within {READY_DEADLINE_S:.0f} s" + self.diag())
            time.sleep(POLL_S)
        return json.loads(self.figures_path.read_text())

    # -- Prometheus ----------------------------------------------------------------------------
    def start_prometheus(self, binary: str, target_port: int) -> None:
        """Prometheus on a free port of its own, scraping the child every second, ready to answer. A
        port taken between choosing and binding it (another process's) is chosen again."""
        config = self.root / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            f"scrape_configs:\n  - job_name: {JOB}\n    scrape_interval: 1s\n    scrape_timeout: 1s\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n")
        deadline = time.monotonic() + SCRAPE_DEADLINE_S
        for attempt in range(3):
            port = _free_port()
            storage = self.root / f"tsdb{attempt}"
            self.prom = self._start(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={storage}",
                 f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h",
                 "--log.level=info"], "prometheus.log", "prometheus.log")
            self.prom_port = port
            while True:
                if self.prom.poll() is not None:
                    if "address already in use" in _tail(self.root / "prometheus.log"):
                        break  # chosen again
                    pytest.fail(f"prometheus exited ({self.prom.returncode}) before it was ready" + self.diag())
                if time.monotonic() > deadline:
                    pytest.fail(f"prometheus was not ready within {SCRAPE_DEADLINE_S:.0f} s" + self.diag())
                if _http_status(port, "/-/ready") == 200:
                    return
                time.sleep(POLL_S)
        pytest.fail("prometheus found its port taken three times" + self.diag())

    def get(self, path: str, **params: str) -> dict:
        """A Prometheus API call's data (its status must be success)."""
        url = f"http://127.0.0.1:{self.prom_port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with _OPENER.open(url, timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def vector(self, query: str, labels: tuple[str, ...]) -> dict:
        """An instant query's samples: label values (one, or a tuple) -> value."""
        data = self.get("/api/v1/query", query=query)
        assert data["resultType"] == "vector", data
        out: dict = {}
        for r in data["result"]:
            k = tuple(r["metric"].get(name) for name in labels)
            k = k[0] if len(k) == 1 else k
            assert k not in out, f"{query}: two series for {k}: {data['result']}"
            out[k] = float(r["value"][1])
        return out

    def wait_scraped(self, child_port: int, keys: int) -> dict:
        """The child's target once /api/v1/targets shows it up and its calls series (one per key) can
        be queried."""
        deadline = time.monotonic() + SCRAPE_DEADLINE_S
        last = None
        while time.monotonic() < deadline:
            if self.prom.poll() is not None:
                pytest.fail(f"prometheus exited ({self.prom.returncode})" + self.diag())
            try:
                targets = [t for t in self.get("/api/v1/targets")["activeTargets"] if t["labels"].get("job") == JOB]
                last = targets
                if targets and targets[0]["health"] == "up":
                    calls = self.vector(_last("warmprof_watch_calls_total"), ("key",))
                    if len(calls) == keys:
                        return targets[0]
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(POLL_S)
        pytest.fail(f"prometheus did not scrape 127.0.0.1:{child_port} up within {SCRAPE_DEADLINE_S:.0f} s "
                    f"(targets: {last})" + self.diag())

    def close(self) -> None:
        """Stop every process (the child by closing its stdin first, then SIGTERM, then SIGKILL)."""
        for p, files in reversed(self.procs):
            try:
                if p.stdin is not None:
                    try:
                        p.stdin.close()
                    except OSError:
                        pass
                    try:
                        p.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        pass
                if p.poll() is None:
                    p.terminate()
                    try:
                        p.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait(timeout=15)
            finally:
                for f in files:
                    f.close()


def _http_status(port: int, path: str) -> int | None:
    try:
        with _OPENER.open(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        e.close()
        return e.code
    except (urllib.error.URLError, OSError):
        return None


def _last(metric: str, extra: str = "") -> str:
    """The last value Prometheus stored of each of the child's series of `metric` (within WINDOW)."""
    return f'last_over_time({metric}{{job="{JOB}",model="prom_it"{extra}}}[{WINDOW}])'


@pytest.fixture
def run():
    root = Path(tempfile.mkdtemp(prefix="warmprof-prometheus-"))
    r = _Run(root)
    try:
        yield r
    finally:
        try:
            r.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
    assert not root.exists()


def _approx(d: dict) -> dict:
    return {k: pytest.approx(v, rel=REL, abs=1e-12) for k, v in d.items()}


def test_a_real_prometheus_scrapes_what_the_watcher_reports(run):
    binary = _require()
    fig = run.start_child()
    keys = {k["key"]: k for k in fig["stats"]["keys"]}
    # The child did what it was asked: three keys, their calls, each first call slept (a wait where the
    # thread's off-CPU time is read), the spin an outlier that no cause explains; nothing dropped.
    assert {k: v["calls"] for k, v in keys.items()} == KEYS, fig["summary"]
    assert fig["stats"]["calls"] == sum(KEYS.values()) and fig["events_dropped"] == 0
    assert fig["outliers"].get(SPIN_KEY, 0) >= 1 and fig["unattributed_ms"].get(SPIN_KEY, 0) > 0, fig["summary"]
    if _native.thread_times() is not None:  # each first call blocked: a wait (with a disk_read where it also faulted)
        assert all({"wait", "disk_read"} & set(fig["causes"].get(k, {})) for k in KEYS), fig["causes"]
    assert fig["causes"], "no cause series to compare"

    run.start_prometheus(binary, fig["port"])
    target = run.wait_scraped(fig["port"], len(KEYS))
    assert target["scrapeUrl"] == f"http://127.0.0.1:{fig['port']}/metrics" and target["lastError"] == ""
    assert run.vector(f'max_over_time(up{{job="{JOB}"}}[{WINDOW}])', ("instance",)) == \
        {f"127.0.0.1:{fig['port']}": 1.0}
    # the series carry the watcher's label, no other model's and no "(other keys)"
    assert run.vector(f'count by (model) ({{__name__=~"warmprof_watch_.*",job="{JOB}"}})', ("model",)).keys() == \
        {fig["label"]}

    # per key: calls, events, first call's latency (its planted sleep in it)
    assert run.vector(_last("warmprof_watch_calls_total"), ("key",)) == {k: float(v) for k, v in KEYS.items()}
    assert run.vector(_last("warmprof_watch_events_total"), ("key",)) == \
        {k: float(v["events"]) for k, v in keys.items()}
    first = run.vector(_last("warmprof_watch_first_call_seconds"), ("key",))
    assert first == _approx({k: v["first_ms"] / 1e3 for k, v in keys.items()})
    assert all(first[k] >= s for k, s in FIRST_SLEEP_S.items()), first

    # per key and cause: events and seconds, as the watcher's events add them up
    want_n = {(k, c): float(row["events"]) for k, cs in fig["causes"].items() for c, row in cs.items()}
    want_s = {(k, c): row["ms"] / 1e3 for k, cs in fig["causes"].items() for c, row in cs.items()}
    assert run.vector(_last("warmprof_watch_cause_events_total"), ("key", "cause")) == want_n
    cause_s = run.vector(_last("warmprof_watch_cause_seconds_total"), ("key", "cause"))
    assert cause_s == _approx(want_s)
    if _native.thread_times() is not None:  # each first call's blocked time is at least most of its sleep
        blocked = {k: cause_s.get((k, "wait"), 0.0) + cause_s.get((k, "disk_read"), 0.0) for k in KEYS}
        assert all(blocked[k] >= 0.9 * s for k, s in FIRST_SLEEP_S.items()), cause_s

    # outliers and the seconds no cause explains, per key
    assert run.vector(_last("warmprof_watch_outliers_total"), ("key",)) == \
        {k: float(n) for k, n in fig["outliers"].items()}
    assert run.vector(_last("warmprof_watch_unattributed_seconds_total"), ("key",)) == \
        _approx({k: ms / 1e3 for k, ms in fig["unattributed_ms"].items()})

    # the report's totals by cause, summed over keys by Prometheus
    by_cause = {c: row["ms"] / 1e3 for c, row in fig["by_cause"].items() if c != "unattributed"}
    assert run.vector(f'sum by (cause) ({_last("warmprof_watch_cause_seconds_total")})', ("cause",)) == \
        _approx(by_cause)
    assert run.vector(f'sum({_last("warmprof_watch_unattributed_seconds_total")})', ()) == \
        {(): pytest.approx(fig["by_cause"]["unattributed"]["ms"] / 1e3, rel=REL)}

    # the latency histogram: every call counted, the sum the watcher's total, +Inf holds them all
    assert run.vector(_last("warmprof_watch_latency_seconds_count"), ("key",)) == {k: float(v) for k, v in KEYS.items()}
    assert run.vector(_last("warmprof_watch_latency_seconds_sum"), ("key",)) == \
        _approx({k: v["mean_ms"] * v["calls"] / 1e3 for k, v in keys.items()})
    assert run.vector(_last("warmprof_watch_latency_seconds_bucket", ',le="+Inf"'), ("key",)) == \
        {k: float(v) for k, v in KEYS.items()}

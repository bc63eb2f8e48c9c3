"""The serving process for test_prometheus_server.py: a small torch model under warmprof.watch, its
metrics on a registry of its own served by prometheus_client's start_http_server on 127.0.0.1 (a port
the kernel picks), and calls at three input lengths. Each length's first call sleeps (a wait, off the
CPU: a cause series per key), and one call at a seen length spins on the CPU (an outlier no cause
explains: an unattributed series). Once the calls are done it writes what the watcher itself says
(its port, stats, events' causes, report) to the JSON file named by argv[1] (atomically), prints
"READY <port>" and serves until its stdin closes or it is killed.

Run: python prometheus_child.py OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import time

LABEL = "prom_it"
# (input length, calls at it): distinct counts, so a key's series cannot pass for another's
PLAN = ((4, 5), (9, 3), (17, 10))
SPIN_AT = 17  # one more call at this length, after its 10: an outlier against its median
SPIN_S = 0.03  # CPU time the outlier spins for, at least (5x its key's median wall time where load makes that more)
FIRST_SLEEP_S = 0.01  # the n-th new length's first call sleeps n times this


def _model():
    import torch
    from torch import nn

    class Served(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
            self.seen: set[int] = set()
            self.spin = 0.0

        def forward(self, x):
            n = int(x.shape[1])
            if n not in self.seen:  # a one-time cost at each new length, off the CPU: a wait
                self.seen.add(n)
                time.sleep(FIRST_SLEEP_S * len(self.seen))
            if self.spin:  # on the CPU, nothing to show for it: unattributed
                t0 = time.thread_time()
                while time.thread_time() - t0 < self.spin:
                    pass
            return self.net(x)

    torch.manual_seed(0)
    return Served(), torch


def _figures(w, port: int) -> dict:
    """What the watcher itself says, per key: calls, events, first call, the latency sum; by key and
    cause, from its events: events and ms; outliers and unattributed ms; and its report's by_cause."""
    stats = w.stats()
    causes: dict[str, dict[str, dict]] = {}
    outliers: dict[str, int] = {}
    unattributed: dict[str, float] = {}
    for e in w.events():
        for c in e["causes"]:
            row = causes.setdefault(e["key"], {}).setdefault(c["cause"], {"events": 0, "ms": 0.0})
            row["events"] += 1
            row["ms"] += c["ms"]
        if e["outlier"]:
            outliers[e["key"]] = outliers.get(e["key"], 0) + 1
        if e["unattributed_ms"] is not None and e["unattributed_ms"] > 0:
            unattributed[e["key"]] = unattributed.get(e["key"], 0.0) + e["unattributed_ms"]
    report = w.report()
    return {"port": port, "pid": os.getpid(), "label": LABEL, "stats": stats, "causes": causes,
            "outliers": outliers, "unattributed_ms": unattributed, "by_cause": report.by_cause,
            "events_dropped": stats["events_dropped"], "summary": w.summary()}


def main(out: str) -> int:
    from prometheus_client import CollectorRegistry, start_http_server

    import warmprof
    from warmprof.serving.watch.export import prometheus_metrics

    model, torch = _model()
    # The layers run once before the watch (not through forward: no length is seen): a fresh process's
    # first pass reads torch's kernels' code from disk on a cold page cache, and the first key's wait
    # would share its call with those reads (split by block counts: mostly disk_read). This test is of
    # the export; the split has its own tests (tests/unit/test_watch_waits.py).
    with torch.no_grad():
        model.net(torch.randn(1, PLAN[0][0], 16))
    # idle_s: no call after a gap of a busy machine's making is an event; the events are the plan's
    w = warmprof.watch(model, label=LABEL, idle_s=3600.0)
    registry = CollectorRegistry()
    collector = prometheus_metrics(w, registry)
    assert collector.model == LABEL, collector.model
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    port = int(server.server_port)
    walls: list[float] = []  # the spin's key's calls, by the wall clock
    with torch.no_grad():
        for n, calls in PLAN:
            x = torch.randn(1, n, 16)
            for _ in range(calls):
                t0 = time.perf_counter()
                w(x)
                if n == SPIN_AT:
                    walls.append(time.perf_counter() - t0)
        # an outlier however slow load makes this key's calls: CPU time of 5x their median wall time at least
        # (a busy CI machine took the median to 18.8 ms, and a fixed 30 ms spin came to 2.96x it, not 3x)
        model.spin = max(SPIN_S, 5.0 * sorted(walls)[len(walls) // 2])
        w(torch.randn(1, SPIN_AT, 16))
        model.spin = 0.0
    # No call after this: every scrape from now on reads these figures.
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(_figures(w, port), f)
    os.replace(tmp, out)
    print(f"READY {port}", flush=True)
    try:
        sys.stdin.read()  # until the test closes our stdin (or it dies): then leave
    except KeyboardInterrupt:
        pass
    server.shutdown()
    server.server_close()
    thread.join(5)
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""issue 27: warmprof.watch in a real service. examples/fastapi_watch/app.py (FastAPI under uvicorn,
the compiled demo LM) is started on 127.0.0.1; a bounded set of requests at three prompt lengths is
sent; each length's first call must come back from the service's /warmprof/events as a first-call
event with jit_compile booked (dynamic=False: each new length compiles), no later call at a seen length
an event for a compile, and Prometheus's /metrics must carry the first-call latency of each length.

Skipped where fastapi or uvicorn is missing (`pip install fastapi uvicorn`; the test extra has them).
Every wait is for a state (the port answering, a response) under a bounded deadline; the server is
stopped and its folder removed whatever happens."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")
pytest.importorskip("torch")

APP = Path(__file__).resolve().parents[2] / "examples" / "fastapi_watch" / "app.py"
LENGTHS = {5: 3, 9: 2, 13: 4}  # prompt length -> requests at it
START_DEADLINE_S = 120.0  # torch's import and the app's build on a loaded 2-core machine
REQUEST_TIMEOUT_S = 300.0  # a first call at a new length compiles (inductor: seconds on 2 cores)
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int, path: str, data: dict | None = None, timeout: float = 30.0):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=json.dumps(data).encode() if data is not None else None,
                                 headers={"content-type": "application/json"} if data is not None else {})
    with _OPENER.open(req, timeout=timeout) as r:
        body = r.read().decode()
        return json.loads(body) if r.headers.get_content_type() == "application/json" else body


@pytest.fixture
def server(tmp_path):
    port = _free_port()
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), PYTHONUNBUFFERED="1")
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, str(APP), "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            cwd=tmp_path, env=env)
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the app exited ({proc.returncode}): {(tmp_path / 'server.log').read_text()[-3000:]}")
            try:
                _get(port, "/warmprof/summary", timeout=5)
                break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    pytest.fail(f"the app did not answer within {START_DEADLINE_S:.0f} s")
                time.sleep(0.2)
        yield port
    finally:
        proc.send_signal(signal.SIGINT)  # uvicorn's graceful stop: the lifespan closes the watcher
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()


def test_each_length_first_call_comes_back_with_its_compile(server):
    port = server
    for n, calls in LENGTHS.items():
        for _ in range(calls):
            got = _get(port, "/generate", {"ids": list(range(1, n + 1))}, timeout=REQUEST_TIMEOUT_S)
            assert got["tokens"] == n and 0 <= got["next_id"] < 4096
    with pytest.raises(urllib.error.HTTPError) as refused:  # bad input: a clear 422, the service stays up
        _get(port, "/generate", {"ids": []})
    assert refused.value.code == 422
    refused.value.close()
    events = _get(port, "/warmprof/events")
    firsts = {e["key"]: e for e in events if e["first"]}
    keys = {n: f"1x{n} int64" for n in LENGTHS}
    assert set(firsts) == set(keys.values()), [e["key"] for e in events]
    for n, key in keys.items():
        causes = {c["cause"]: c for c in firsts[key]["causes"]}
        assert "jit_compile" in causes and causes["jit_compile"]["ms"] > 0, firsts[key]
    # a seen length compiled nothing more: no later event books a compile
    later = [e for e in events if not e["first"] and any(c["cause"] == "jit_compile" for c in e["causes"])]
    assert not later, later
    metrics = _get(port, "/metrics/")
    for key in keys.values():
        assert f'warmprof_watch_first_call_seconds{{key="{key}",model="fastapi_demo"}}' in metrics, metrics[:2000]
    summary = _get(port, "/warmprof/summary")["summary"]
    assert f"{sum(LENGTHS.values())} calls at {len(LENGTHS)} keys" in summary, summary

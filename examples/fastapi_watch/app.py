"""A FastAPI service under warmprof.watch: the demo LM, compiled with static shapes, served on
/generate, each call through the watcher; Prometheus's endpoint on /metrics; what the watcher saw on
/warmprof/events (every kept call: first calls per length, outliers, their causes) and
/warmprof/summary (its text).

Run it (after `pip install warmprof fastapi uvicorn prometheus_client`, torch first):

    python examples/fastapi_watch/app.py --port 8000
    curl -s -X POST localhost:8000/generate -H 'content-type: application/json' -d '{"ids": [1, 2, 3, 4]}'
    curl -s localhost:8000/warmprof/summary
    curl -s localhost:8000/metrics/ | grep warmprof_watch_first_call_seconds

Each new prompt length compiles (dynamic=False, as a service that pads to buckets or captures CUDA
graphs runs): its first call is an event with jit_compile booked, and every later call at that
length is a plain call. In your own service the same three lines do it: watch the model, register
its metrics, serve through what watch returned. tests/integration/test_fastapi_example.py starts
this file on 127.0.0.1 and reads each length's first call back with its cause.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
from typing import Any, AsyncIterator

import torch
import uvicorn
from fastapi import FastAPI, HTTPException
from prometheus_client import CollectorRegistry, make_asgi_app
from pydantic import BaseModel

import warmprof
from warmprof.serving.watch.demo import compiled_demo, recompile_limit
from warmprof.serving.watch.export import prometheus_metrics

MAX_TOKENS = 512
VOCAB = 4096  # the demo LM's vocabulary


class Prompt(BaseModel):
    ids: list[int]


def make_app(label: str = "fastapi_demo") -> FastAPI:
    model = compiled_demo()
    watched = warmprof.watch(model, label=label)
    registry = CollectorRegistry()
    prometheus_metrics(watched, registry)
    lock = threading.Lock()  # one forward at a time: the model is one module shared by the request threads
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        watched.close()  # the watcher's hooks and compile tap off when the server stops

    app = FastAPI(title="warmprof.watch example", lifespan=lifespan)
    app.mount("/metrics", make_asgi_app(registry=registry))
    app.state.watched = watched

    @app.post("/generate")
    def generate(prompt: Prompt) -> dict[str, Any]:
        if not 1 <= len(prompt.ids) <= MAX_TOKENS or not all(0 <= i < VOCAB for i in prompt.ids):
            raise HTTPException(422, f"ids: 1 to {MAX_TOKENS} token ids in [0, {VOCAB})")
        ids = torch.tensor([prompt.ids], dtype=torch.long)
        with lock, torch.no_grad(), recompile_limit(64):
            logits = watched(ids)
        return {"tokens": len(prompt.ids), "next_id": int(logits[0, -1].argmax())}

    @app.get("/warmprof/events")
    def events() -> list[dict[str, Any]]:
        return watched.events()

    @app.get("/warmprof/summary")
    def summary() -> dict[str, str]:
        return {"summary": watched.summary()}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(make_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

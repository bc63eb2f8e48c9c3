"""Synthetic CUPTI callbacks for the native tests: the toolkit's own callback ids, a synthetic clock,
and helpers that inject calls through the real handler (`_native._testing.cupti_inject`) and read
the cupti records back from a drained Recording.

The ids are parsed from this machine's toolkit headers (cupti_driver_cbid.h, cupti_runtime_cbid.h,
cupti_callbacks.h), so the tests check the decoder against the real ids, not against copies.
"""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

import pytest
import warmprof
from warmprof import _native, timeline
from warmprof.timeline import BEGIN, END, Recording

CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
DRIVER_HEADER = CUDA_INCLUDE / "cupti_driver_cbid.h"
RUNTIME_HEADER = CUDA_INCLUDE / "cupti_runtime_cbid.h"
CALLBACKS_HEADER = CUDA_INCLUDE / "cupti_callbacks.h"


def skip_without_cupti() -> None:
    """Module-level skip when the backend is a stub or the headers are missing."""
    entry = warmprof.backends()["cupti"]
    if not entry["compiled"]:
        pytest.skip("the CUPTI backend is not compiled into this build: " + entry["reason"], allow_module_level=True)
    for header in (DRIVER_HEADER, RUNTIME_HEADER, CALLBACKS_HEADER):
        if not header.exists():
            pytest.skip(f"CUPTI headers not found under {CUDA_INCLUDE} (set CUDA_HOME)", allow_module_level=True)


def _parse(path: Path, prefix: str) -> dict[str, int]:
    if not path.exists():
        return {}
    pattern = re.compile(rf"\b{prefix}(\w+)\s*=\s*(\d+)")
    return {m.group(1): int(m.group(2)) for m in pattern.finditer(path.read_text())}


DRIVER = _parse(DRIVER_HEADER, "CUPTI_DRIVER_TRACE_CBID_")
RUNTIME = _parse(RUNTIME_HEADER, "CUPTI_RUNTIME_TRACE_CBID_")  # full names: "cudaMalloc_v3020"
RESOURCE = _parse(CALLBACKS_HEADER, "CUPTI_CBID_RESOURCE_")
DOMAIN = _parse(CALLBACKS_HEADER, "CUPTI_CB_DOMAIN_")
D, RT, R = DOMAIN.get("DRIVER_API", 1), DOMAIN.get("RUNTIME_API", 2), DOMAIN.get("RESOURCE", 3)


def runtime_id(name: str) -> int:
    """The runtime id of `name` ("cudaMalloc" or "cudaMalloc_v3020"); the newest version when bare."""
    if name in RUNTIME:
        return RUNTIME[name]
    versions = sorted((int(k.rsplit("_v", 1)[1]), v) for k, v in RUNTIME.items() if k.rsplit("_v", 1)[0] == name)
    assert versions, f"{name} missing from {RUNTIME_HEADER}"
    return versions[-1][1]


_tick = itertools.count(1)
kernel_ids = itertools.count(10_000)


class Clock:
    """Strictly increasing synthetic ticks, well apart (ties would make the drained order ambiguous)."""

    def __init__(self) -> None:
        self.t = _native.now_ticks()

    def __call__(self) -> int:
        self.t += 1000 + next(_tick)
        return self.t


def inject_call(clock: Clock, name: str, value: int = 0, body=None, failed: bool = False, domain: int = D) -> None:
    """A driver call (or a runtime one with domain=RT) from enter to exit, `body` run in between."""
    cbid = DRIVER[name] if domain == D else runtime_id(name)
    _native._testing.cupti_inject(domain, cbid, True, clock(), value)
    if body:
        body()
    _native._testing.cupti_inject(domain, cbid, False, clock(), value, failed)


def inject_runtime_call(clock: Clock, name: str, value: int = 0, body=None, failed: bool = False) -> None:
    inject_call(clock, name, value, body, failed, domain=RT)


def inject_resource(clock: Clock, name: str, value: int = 0) -> None:
    _native._testing.cupti_inject(R, RESOURCE[name], True, clock(), value)


def records(tl: timeline.Timeline) -> list[tuple[int, int, str, int]]:
    """(kind, cause, name, value) of the cupti records, in drained order."""
    return [(int(tl.kind[i]), int(tl.cause[i]), tl.name_of(i), int(tl.value[i]))
            for i in range(len(tl)) if tl.name_of(i).startswith("cupti:")]


def drained(body) -> timeline.Timeline:
    with Recording() as rec:
        body(Clock())
    return rec.drain()


def span(cause: int, name: str, value: int = 0) -> list[tuple[int, int, str, int]]:
    return [(BEGIN, cause, name, value), (END, cause, name, value)]


def stats_delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in after if isinstance(after[k], int)}

"""CUPTI in a process under `warmprof run` (the agent, at torch.cuda's lazy init): subscribed through the
native handler a trace's CUPTI instrument uses, so CUDA's context creation, lazy module loads, allocations
and graph capture become spans with causes in whichever phase made them; light to import (the native core
and the cause table only). The subscription and its callbacks are warmprof's own: the subscribe is a
profiler_overhead span, and the callback count a counter sample at the start and the end."""

from __future__ import annotations

from typing import Any

from .. import _native
from ..causes import PROFILER_OVERHEAD

CUPTI_CALLBACKS = "cupti:callbacks"  # timeline.py's counter of CUPTI's callbacks (a unit test checks they agree)
_BEGIN, _END = 0, 1  # timeline.py's record kinds


def _span(cause: int, nid: int, start_ns: int, end_ns: int) -> None:
    _native.record_at(_BEGIN, cause, nid, 0, _native.ns_to_ticks(start_ns))
    _native.record_at(_END, cause, nid, 0, _native.ns_to_ticks(end_ns))


def subscribe(wanted: bool) -> dict[str, Any]:
    """Subscribe CUPTI now: {"on": True, "subscribe_ms", "callbacks_at_start"} or {"on": False, "reason"}."""
    if not wanted:
        return {"on": False, "reason": "--no-cupti"}
    from ..system import cuda_paths

    cuda_paths.install()
    entry: dict[str, Any] = dict(_native.backends().get("cupti", {}))
    if not entry.get("compiled") or (not entry.get("available") and not entry.get("path")):
        return {"on": False, "reason": str(entry.get("reason", "not built"))}
    why = _native.cupti_start()
    if why:
        return {"on": False, "reason": why}
    stats = _native.cupti_stats()
    t1 = _native.now_ns()
    sub = int(stats["subscribe_ns"])
    _span(PROFILER_OVERHEAD, _native.intern("cupti:subscribe"), t1 - sub, t1)
    _native.counter(_native.intern(CUPTI_CALLBACKS), int(stats["callbacks"]))
    return {"on": True, "subscribe_ms": sub / 1e6, "callbacks_at_start": int(stats["callbacks"])}


def end(state: dict[str, Any]) -> None:
    """At the record's end (once): CUPTI's OVERHEAD records (the driver's own times of lazy loads and PTX
    compiles) of this thread as spans, the callback count as a counter sample, and the subscription released;
    `state` says how many callbacks came and that it stopped ("on" stays: CUPTI was on while the process ran)."""
    if not state.get("on") or state.get("stopped"):
        return
    try:
        got = _native.cupti_overheads()
        for r in got["records"]:
            if r["this_thread"] and int(r["end_ns"]) >= int(r["start_ns"]) > 0:
                nid = _native.intern(f"cupti:overhead:{r['kind']}")
                _span(int(r["cause"]), nid, int(r["start_ns"]), int(r["end_ns"]))
        stats = _native.cupti_stats()
        _native.counter(_native.intern(CUPTI_CALLBACKS), int(stats["callbacks"]))
        state["callbacks"] = int(stats["callbacks"]) - int(state.get("callbacks_at_start", 0))
    finally:
        why = _native.cupti_stop()
        state["stopped"] = True
        if why:
            state["stop"] = why

"""Dispatcher ops watched in a `warmprof run` process: an op's first call at each key against its later
calls at that key, for a cost the op pays inside itself the first time it meets a shape.

vLLM's CPU linear layers call its oneDNN matmul (torch.ops._C.onednn_mm). Its handler sets a new shape up
inside the call, once per (N, K, M) in the process: a primitive descriptor (oneDNN chooses its kernel for
the shape), a scratchpad, then the primitive (JIT code; oneDNN times that creation itself and it is a
jit_compile span of its own, onednn.py). No clock outside the op sees the set-up, and oneDNN times only
the primitive. So the op is watched:
- `watch`: the op's packet and its overloads get a subclass of their own class whose call, for the first
  LATER + 1 calls at a key (each tensor argument's shape and strides, whether each other argument is
  None), reads the thread's CPU clock and oneDNN's creation total (the C stdout tap's) around the op; a
  later call pays its key and a dict lookup. The objects stay what they were for torch (isinstance holds,
  the dispatcher and compilers see the same op); a call with a fake, functional or other subclass tensor
  (torch compiling), with keyword arguments, or inside a timed call of the op (torch's own re-dispatch) is
  only the call.
- `figures` (in the `warmprof run` process): each key's first call less the median of its later ones,
  on the CPU clock (a wait for a CPU or a block is not the op's work), less what oneDNN timed of its
  creations inside the first call: the op's first-call cost at that shape, an inferred figure (keyed on
  shape, from the calls' own clocks, not bracketed by a hook of the library's), booked to the op's cause
  in the watched call (execute_model) that holds it.
Light: the standard library and warmprof._native (the agent loads it in every process of the tree).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any, Callable

from .. import _native

LATER = 3  # later calls timed at each key: the median of these is the op's steady figure there
MAX_KEYS = 512  # keys timed per op and process (a server meets a new batch size per prompt length): then none
OPS: dict[str, dict[str, Any]] = {}  # "ns::name" -> {"cause", "detail", "calls": [...]} (this process's)
MARK = "_warmprof_op"


def watch(qualname: str, cause: str, detail: str) -> str:
    """Watch the dispatcher op "ns::name" (torch must be loaded, the op registered): '' once it is
    watched (or already was), else why not."""
    import sys

    torch = sys.modules.get("torch")
    ns, _, name = qualname.partition("::")
    if torch is None or not ns or not name:
        return f"{qualname}: not an op torch has loaded"
    if qualname in OPS:
        return ""
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        overloads = [getattr(packet, o) for o in packet.overloads()]
    except (AttributeError, RuntimeError) as e:
        return f"{qualname}: not registered ({e})"
    entry: dict[str, Any] = {"cause": cause, "detail": detail, "calls": []}
    call = _timed(torch.Tensor, entry["calls"])
    try:
        for obj in (packet, *overloads):
            _retype(obj, qualname, call)
    except TypeError as e:  # a torch whose op objects cannot change class
        return f"{qualname}: cannot be watched ({e})"
    OPS[qualname] = entry
    return ""


def _retype(obj: Any, qualname: str, call: Callable[[Any, tuple], Any]) -> None:
    base = type(obj)
    if getattr(base, MARK, None):
        return

    def __call__(self: Any, /, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            return self._op(*args, **kwargs)
        return call(self._op, args)

    obj.__class__ = type(base.__name__, (base,), {"__call__": __call__, MARK: qualname, "__module__": base.__module__,
                                                  "__qualname__": base.__qualname__})


def _timed(tensor: Any, calls: list[dict[str, Any]]) -> Callable[[Any, tuple], Any]:
    counts: dict[tuple, int] = {}
    miss_ns = _native.stdio_tap_miss_ns
    inside = threading.local()  # a call of the op inside a timed one (torch's own re-dispatch) is part of it

    def call(op: Any, args: tuple) -> Any:
        if getattr(inside, "on", False):
            return op(*args)
        key: list[Any] = []
        try:
            for a in args:
                if type(a) is tensor:
                    key.append((a.shape, a.stride()))
                elif isinstance(a, tensor):  # a fake or functional tensor: torch is compiling, not running it
                    return op(*args)
                else:
                    key.append(a is None)
        except RuntimeError:  # a tensor without sizes or strides (nested): no key, only the call
            return op(*args)
        k = tuple(key)
        n = counts.get(k, 0)
        if n > LATER or (n == 0 and len(counts) >= MAX_KEYS):
            return op(*args)
        counts[k] = n + 1
        made = miss_ns()
        c0 = time.thread_time_ns()
        t0 = _native.now_ns()
        inside.on = True
        try:
            return op(*args)
        finally:
            inside.on = False
            t1 = _native.now_ns()
            c1 = time.thread_time_ns()
            calls.append({"key": k, "n": n, "start_ns": t0, "end_ns": t1, "cpu_ns": c1 - c0,
                          "tid": threading.get_native_id(),
                          "created_ms": (miss_ns() - made) / 1e6})

    return call


def show_key(k: tuple) -> str:
    """A key as text: each tensor argument's shape (and strides where not contiguous), '-' for None."""
    out = []
    for x in k:
        if isinstance(x, tuple):
            shape, stride = list(x[0]), list(x[1])
            contiguous, step = True, 1
            for d, s in zip(reversed(shape), reversed(stride)):
                if d != 1 and s != step:
                    contiguous = False
                step *= d
            out.append(f"{shape}" if contiguous else f"{shape}/{stride}")
        else:
            out.append("-" if x else "x")
    return " ".join(out)


def records() -> dict[str, dict[str, Any]]:
    """This process's watched ops and their timed calls (the record's "ops"; keys as text, made here, not
    in the op's call)."""
    return {q: {**e, "calls": [{**c, "key": show_key(c["key"])} for c in list(e["calls"])]} for q, e in OPS.items()}


def _after_fork() -> None:  # a forked child's record starts at the fork (its keys are warm: inherited)
    for e in OPS.values():
        e["calls"].clear()


os.register_at_fork(after_in_child=_after_fork)


# ---- in the `warmprof run` process ---------------------------------------------------------------------
def figures(ops: dict[str, dict[str, Any]], tid: int, window: tuple[int, int]) -> list[Any]:
    """The watched ops' first-call costs inside window on thread tid, one Figure per op: each key whose
    first call lies there, its CPU time less the median of its later calls' less oneDNN's creations timed
    inside it (their own spans), where that is above 0. Keys with no later call give none."""
    from ..attribution.parts import Figure

    out = []
    for qual, op in sorted(ops.items()):
        by: dict[str, list[dict[str, Any]]] = {}
        for c in op.get("calls", []):
            by.setdefault(c["key"], []).append(c)
        total, keys, made = 0.0, 0, 0.0
        for cs in by.values():
            first = next((c for c in cs if c["n"] == 0), None)
            later = [c["cpu_ns"] - c.get("created_ms", 0.0) * 1e6 for c in cs if c["n"] > 0]
            if first is None or not later or first["tid"] != tid:
                continue
            if not (window[0] <= first["start_ns"] and first["end_ns"] <= window[1]):
                continue
            extra = (first["cpu_ns"] - statistics.median(later)) / 1e6 - first.get("created_ms", 0.0)
            made += first.get("created_ms", 0.0)
            if extra > 0:
                total += extra
                keys += 1
        if keys:
            out.append(Figure(op["cause"], f"op:{qual}", total, "inferred", count=keys,
                              detail=(f"{qual}'s first call at {keys} new shape(s), on the thread's CPU clock, less "
                                      f"its later calls' median at each shape and less the {made:.3f} ms oneDNN timed "
                                      f"of its creations inside (their own spans): {op['detail']}")))
    return out

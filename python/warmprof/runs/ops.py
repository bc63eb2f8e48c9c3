"""Dispatcher ops watched in a `warmprof run` process: an op's first call at each key against its later
calls at that key, for a cost the op pays inside itself the first time it meets a shape.

vLLM's CPU linear layers call its oneDNN matmul (torch.ops._C.onednn_mm). Its handler sets a new shape up
inside the call, once per (N, K, M) in the process: a primitive descriptor (oneDNN chooses its kernel for
the shape), a scratchpad, then the primitive (JIT code; oneDNN times that creation itself and it is a
jit_compile span of its own, onednn.py). No clock outside the op sees the set-up, and oneDNN times only
the primitive. So the op is watched:
- `watch`: the op's packet and its overloads get a subclass of their own class whose call (through the
  class's own) reads, for the first LATER + 1 calls at a key (each tensor argument's shape and strides,
  whether each other argument is None), the thread's CPU clock, its page faults and oneDNN's creation
  total on the thread (the C stdout tap's) around the op; a later call pays its key and a dict lookup.
  The objects stay what they were for torch (isinstance holds, the dispatcher and compilers see the same
  op). Only the call: a call with a tensor of another type than Tensor or Parameter (torch compiling:
  fake, functional), with keyword arguments, inside a timed call of the op (torch's own re-dispatch), with
  a tensor without strides (nested), at a new key past MAX_KEYS; a call that raised is not counted.
- `figures` (in the `warmprof run` process): each key's first call less the median of its later ones,
  on the CPU clock (a wait for a CPU or a block is not the op's work), less its extra page faults at the
  calibrated cost (the engine books them itself) and less what oneDNN timed of its creations inside the
  first call: the op's first-call cost at that shape, an inferred figure (keyed on shape, from the calls'
  own clocks, not bracketed by a hook of the library's), booked to the op's cause in the watched call
  (execute_model) that holds it.
Light: the standard library and warmprof._native (the agent loads it in every process of the tree).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any, Callable

from .. import _native
from ..causes import PROFILER_OVERHEAD

try:
    import resource

    RUSAGE_THREAD: int | None = getattr(resource, "RUSAGE_THREAD", None)  # Linux: this thread's own counts
except ImportError:  # pragma: no cover - Windows
    RUSAGE_THREAD = None

LATER = 3  # later calls timed at each key: the median of these is the op's steady figure there
MAX_KEYS = 512  # keys timed per op and process (a server meets a new batch size per prompt length): then none
OPS: dict[str, dict[str, Any]] = {}  # "ns::name" -> {"cause", "detail", "calls": [...]} (this process's)
MARK = "_warmprof_op"
OWN_SPAN = "warmprof:agent"  # warmprof's own time in a process of the tree (the agent's name for it too)


def watch(qualname: str, cause: str, detail: str) -> str:
    """Watch the dispatcher op "ns::name" (torch must be loaded, the op registered): '' once it is
    watched (or already was), else why not (also kept in REFUSED, for the record)."""
    import sys

    torch = sys.modules.get("torch")
    ns, _, name = qualname.partition("::")
    if torch is None or not ns or not name:
        return _refused(qualname, "not an op torch has loaded")
    if qualname in OPS:
        return ""
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        overloads = [getattr(packet, o) for o in packet.overloads()]
    except (AttributeError, RuntimeError) as e:
        return _refused(qualname, f"not registered ({e})")
    entry: dict[str, Any] = {"cause": cause, "detail": detail, "calls": []}
    call = _timed((torch.Tensor, torch.nn.Parameter), entry["calls"])
    done: list[tuple[Any, type]] = []
    try:
        for obj in (packet, *overloads):
            base = type(obj)
            if not getattr(base, MARK, None):
                obj.__class__ = _subclass(base, qualname, call)
                done.append((obj, base))
    except TypeError as e:  # a torch whose op objects cannot change class: all of them back as they were
        for obj, base in done:
            obj.__class__ = base
        return _refused(qualname, f"cannot be watched ({e})")
    OPS[qualname] = entry
    return ""


REFUSED: dict[str, str] = {}  # "ns::name" -> why it is not watched in this process


def _refused(qualname: str, why: str) -> str:
    REFUSED[qualname] = why
    return f"{qualname}: {why}"


def _subclass(base: type, qualname: str, call: Callable[[Any, Any, tuple], Any]) -> type:
    """base with a call that times (through base's own __call__, whatever torch does there)."""
    base_call = base.__call__

    def __call__(self: Any, /, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            return base_call(self, *args, **kwargs)
        return call(base_call, self, args)

    return type(base.__name__, (base,), {"__call__": __call__, MARK: qualname, "__module__": base.__module__,
                                         "__qualname__": base.__qualname__})


def _timed(plain: tuple[type, ...], calls: list[dict[str, Any]]) -> Callable[[Any, Any, tuple], Any]:
    """The watched call: plain, the tensor types that are a running call's (torch.Tensor, nn.Parameter:
    a layer's bias); any other tensor type is torch compiling (fake, functional)."""
    counts: dict[tuple, int] = {}
    miss_ns = _native.stdio_tap_miss_ns
    begin, end, own = _native.begin, _native.end, _native.intern(OWN_SPAN)
    tensor = plain[0]
    inside = threading.local()  # a call of the op inside a timed one (torch's own re-dispatch) is part of it

    def call(run: Any, obj: Any, args: tuple) -> Any:
        if getattr(inside, "on", False):
            return run(obj, *args)
        key: list[Any] = []
        try:
            for a in args:
                if type(a) in plain:
                    key.append((a.shape, a.stride()))
                elif isinstance(a, tensor):  # a fake or functional tensor: torch is compiling, not running it
                    return run(obj, *args)
                else:
                    key.append(a is None)
        except RuntimeError:  # a tensor without sizes or strides (nested): no key, only the call
            return run(obj, *args)
        k = tuple(key)
        n = counts.get(k, 0)
        if n > LATER or (n == 0 and len(counts) >= MAX_KEYS):
            return run(obj, *args)
        # a timed call's reads and record are warmprof's own time (spans of their own, booked as such where
        # they fall in a first request); the key above is every call's, first or later alike
        begin(PROFILER_OVERHEAD, own)
        made = miss_ns()
        f0 = _thread_faults()
        c0 = time.thread_time_ns()
        end(PROFILER_OVERHEAD, own)
        t0 = _native.now_ns()
        inside.on = True
        try:
            out = run(obj, *args)
        finally:
            inside.on = False
        t1 = _native.now_ns()
        c1 = time.thread_time_ns()
        begin(PROFILER_OVERHEAD, own)
        # a call that raised is not counted: the next one at its key does the set-up
        counts[k] = n + 1
        calls.append({"key": k, "n": n, "start_ns": t0, "end_ns": t1, "cpu_ns": c1 - c0,
                      "tid": threading.get_native_id(), "created_ms": (miss_ns() - made) / 1e6,
                      "faults": _thread_faults() - f0})
        end(PROFILER_OVERHEAD, own)
        return out

    return call


def _thread_faults() -> int:
    """This thread's page faults so far (minor and major), -1 where the platform does not say."""
    if RUSAGE_THREAD is None:
        return -1
    try:
        r = resource.getrusage(RUSAGE_THREAD)
    except (OSError, ValueError):
        return -1
    return int(r.ru_minflt + r.ru_majflt)


def show_key(k: tuple) -> str:
    """A key as text: each tensor argument's shape, with its strides where they are not the contiguous
    ones, '-' for None, 'x' for another argument."""
    out = []
    for x in k:
        if isinstance(x, tuple):
            shape, stride = list(x[0]), list(x[1])
            contiguous, step = [], 1
            for d in reversed(shape):
                contiguous.append(step)
                step *= d
            out.append(f"{shape}" if stride == contiguous[::-1] else f"{shape}/{stride}")
        else:
            out.append("-" if x else "x")
    return " ".join(out)


def records() -> dict[str, dict[str, Any]]:
    """This process's watched ops and their timed calls (the record's "ops"; keys as text, made here, not
    in the op's call; whether oneDNN's creations were timed here), and the ops it could not watch, why."""
    timed = bool(_native.stdio_tap_stats().get("on", False))
    out: dict[str, dict[str, Any]] = {q: {"why": why} for q, why in REFUSED.items()}
    for q, e in OPS.items():
        out[q] = {**e, "creations_timed": timed, "calls": [{**c, "key": show_key(c["key"])} for c in list(e["calls"])]}
    return out


def _after_fork() -> None:  # a forked child's record starts at the fork (its keys are warm: inherited)
    for e in OPS.values():
        e["calls"].clear()


os.register_at_fork(after_in_child=_after_fork)


# ---- in the `warmprof run` process ---------------------------------------------------------------------
def figures(ops: dict[str, dict[str, Any]], tid: int, window: tuple[int, int], fault_ns: float = 0.0) -> list[Any]:
    """The watched ops' first-call costs inside window on thread tid, one Figure per op: each key whose
    first call lies there, its CPU time less the median of its later calls', less its extra page faults at
    fault_ns each (the engine books a call's faults itself) and less oneDNN's creations timed inside it
    (their own spans), where that is above 0. Keys with no later call give none."""
    from ..attribution.parts import Figure

    out = []
    for qual, op in sorted(ops.items()):
        by: dict[str, list[dict[str, Any]]] = {}
        for c in op.get("calls", []):
            by.setdefault(c["key"], []).append(c)
        total, keys, made, faults = 0.0, 0, 0.0, 0.0
        for cs in by.values():
            first = next((c for c in cs if c["n"] == 0), None)
            later = [c for c in cs if c["n"] > 0]
            if first is None or not later or first["tid"] != tid:
                continue
            if not (window[0] <= first["start_ns"] and first["end_ns"] <= window[1]):
                continue
            cpu = statistics.median(c["cpu_ns"] - c.get("created_ms", 0.0) * 1e6 for c in later)
            extra_faults = 0.0
            if first.get("faults", -1) >= 0 and all(c.get("faults", -1) >= 0 for c in later):
                extra_faults = max(0.0, first["faults"] - statistics.median(c["faults"] for c in later))
            extra = ((first["cpu_ns"] - cpu - extra_faults * fault_ns) / 1e6 - first.get("created_ms", 0.0))
            if extra > 0:
                total += extra
                keys += 1
                made += first.get("created_ms", 0.0)
                faults += extra_faults
        if keys:
            creations = (f"less the {made:.3f} ms oneDNN timed of its creations inside (their own spans)"
                         if op.get("creations_timed", True) else
                         "with oneDNN's creations inside it (not timed in this process: ONEDNN_VERBOSE was yours, "
                         "or --no-onednn)")
            out.append(Figure(op["cause"], f"op:{qual}", total, "inferred", count=keys,
                              detail=(f"{qual}'s first call at {keys} new shape(s), on the thread's CPU clock, less "
                                      f"its later calls' median at each shape, less its {faults:.0f} extra page "
                                      f"fault(s) (booked by their own estimate), {creations}: {op['detail']}")))
    return out

"""The trace protocol's passes: the instruments a pass runs under, one instrumented pass, the clean
steady passes and the steady passes with every instrument on (warmprof's own cost on the model).

What api.py (the protocol's driver) and the control processes (control_serve) run; nothing here
imports the driver.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from typing import Any

import numpy as np

from .. import _native, devices
from ..errors import InputError, ModelError, WarmprofError
from ..instruments.host import HostCounters, blocked_ns, thread_times
from ..instruments.modules import ModuleHooks
from ..instruments.gc_collections import GcCollections
from ..instruments.python_imports import PythonImports
from ..timeline import BEGIN, STRUCTURE, Recording, Timeline, begin, begin_section, end, name_id
from .inputs import put_back

PASSES = ("first", "seen_rerun")  # the instrumented passes, in order
SPARE_BUFFERS = 4  # recording buffers pre-faulted for threads that start recording inside a pass
# Steady passes with every instrument on, after the clean ones: the fastest of them against the clean
# passes is the instruments' cost per pass on this model (attribution.instrument_cost). At least the first
# figure, at most the second, after one more that is not counted (fresh hooks, pipe and recorder
# pages warm up on it, as the first pass's did before the seen re-run); past the minimum they stop
# once they have taken SELF_COST_SHARE of the trace's time so far.
INSTRUMENTED_STEADY = "instrumented_steady"
SELF_COST_PASSES = (3, 15)  # many on a fast model: the fastest of few is rarely undisturbed on a busy machine
SELF_COST_SHARE = 0.1
SELF_COST_FLOOR_S = 0.01  # instrumented passes of a fast model: at least as many as take this long
# The instrumented steady passes are skipped (the calibrated figures stand) when their minimum would
# add more than this share to the trace's time so far: a model whose one pass takes seconds.
SELF_COST_MAX_SHARE = 0.2
# ...but never when they would take less than this: on a busy machine a model's steady median can
# jump many times over (its threads share cores with others) while the trace so far did not.
SELF_COST_ALWAYS_S = 2.0


def instruments(model: Any, device: Any, compiled: bool, op_view: bool = False) -> list:
    """Every instrument of a pass on `model` at `device`, fresh (not entered)."""
    from ..instruments.device_set import device_instruments
    from ..instruments.torch_compile import TorchCompile

    inst: list = [HostCounters(), ModuleHooks(model, top_level_only=compiled), PythonImports(), GcCollections()]
    if op_view:
        from ..instruments.aten_ops import AtenOps

        inst.append(AtenOps(compiled=compiled))
    # Also when the model compiles something inside itself (dynamo already imported).
    if compiled or "torch._dynamo" in sys.modules:
        inst.append(TorchCompile())
    kind = devices.of(device)
    options = {"device": device, "model": model, "compiled": compiled, "compile_band_ms": _metal_compile_band}
    try:
        inst.extend(device_instruments(kind, options))
    except ImportError as e:  # pragma: no cover - the kind's instruments not built in
        inst[0].notes.append(f"{kind.label} instruments unavailable: {e}")
    return inst


def _metal_compile_band() -> tuple[float, float] | None:
    """The Metal pipeline compile measured on this machine by the native reference probe (low,
    high ms), for the MPS instruments' inferred compile; None where it cannot run."""
    from ..probes.metal_ref import compile_band_ms

    return compile_band_ms()


def run_pass(model: Any, args: tuple, kwargs: dict, pass_name: str, instruments: list, sync: Any,
             sections_left: int | None = None) -> tuple[int, int]:
    """One instrumented pass; returns its own clock reads (start_ns, end_ns), which give the pass
    time whatever the recorder kept. Each pass gets its own share of the recorder's module budget:
    1/sections_left of what is left (by default, PASSES says how many passes follow this one)."""
    nid = name_id(f"pass:{pass_name}")
    if sections_left is None:
        sections_left = len(PASSES) - PASSES.index(pass_name) if pass_name in PASSES else 1
    begin_section(sections_left)
    for i in instruments:
        i.mark_pass(pass_name)
    begin(STRUCTURE, nid)
    t0 = _native.now_ns()
    try:
        out = model(*args, **kwargs)
        for i in instruments:
            i.before_sync(pass_name)
        sync()
    finally:
        t1 = _native.now_ns()
        end(STRUCTURE, nid)
        for i in instruments:
            i.end_pass(pass_name)
        put_back(args, kwargs)  # an input the pass changed in place, as made again for the next (inputs.py)
    check_output(out)
    return t0, t1


def guarded_pass(model: Any, args: tuple, kwargs: dict, pass_name: str, instruments: list, sync: Any,
                 when: str) -> tuple[int, int]:
    """run_pass, whatever the model raises a ModelError saying `when` (warmprof's own errors pass)."""
    try:
        return run_pass(model, args, kwargs, pass_name, instruments, sync)
    except WarmprofError:
        raise
    except (Exception, SystemExit) as e:  # sys.exit in the model's forward: its error, not the trace's exit
        raise ModelError(f"the model raised {when}: {type(e).__name__}: {e}") from e


def check_output(out: Any) -> None:
    """A forward that returns a generator or a coroutine ran nothing yet: refuse, do not time it."""
    import inspect

    lazy = inspect.isgenerator(out) or inspect.iscoroutine(out) or inspect.isasyncgen(out)
    if not lazy:
        return
    with contextlib.suppress(Exception):
        out.close()  # no "never awaited" warning; nothing of the model's runs
    kind = "a coroutine" if inspect.iscoroutine(out) else "a generator"
    raise InputError(f"the model returned {kind}: nothing ran inside the pass, so there is nothing to time. "
                     "Trace a callable that does the work, e.g. lambda x: list(model(x))")


def run_delay_ns() -> int | None:
    """This thread's run-queue delay so far (schedstat), None where the kernel has none."""
    got = _native.thread_schedstat()
    return None if got is None else got[1]


def _waited_ms(d0: int | None, d1: int | None, wall_ns: int, cpu_ns: int) -> float | None:
    """A window's wait for a CPU (schedstat delta), at most the window's wall time less its thread's
    CPU time: the kernel adds a delay when the thread next gets a CPU, so a delta can hold one from
    before the window (on a busy machine, many ms more than the window itself)."""
    if d0 is None or d1 is None:
        return None
    return min(max(0, d1 - d0), max(0, wall_ns - cpu_ns)) / 1e6


def steady(model: Any, args: tuple, kwargs: dict, sync: Any, min_passes: int, max_passes: int,
           budget_s: float) -> tuple[list[float], list[int], list[float], list[float]]:
    """Clean steady passes: each one's time (ms), page faults, and the time its thread waited for a
    CPU (ms, schedstat run-queue delay; the list is empty where the kernel has no schedstat), and the
    ns it was blocked off the CPU (empty where that is not read)."""
    times: list[float]
    times, faults, waits, blocked = [], [], [], []
    deadline = time.monotonic() + budget_s
    while len(times) < max_passes:
        f0 = sum(_native.faults())
        d0, c0 = run_delay_ns(), time.thread_time_ns()
        o0 = thread_times()
        t0 = _native.now_ns()
        model(*args, **kwargs)
        sync()
        t1 = _native.now_ns()
        o1 = thread_times()
        d1, c1 = run_delay_ns(), time.thread_time_ns()
        blocked.append(blocked_ns(o0, o1))
        faults.append(sum(_native.faults()) - f0)
        times.append((t1 - t0) / 1e6)
        waited = _waited_ms(d0, d1, t1 - t0, c1 - c0)
        if waited is not None:
            waits.append(waited)
        put_back(args, kwargs)
        if len(times) >= min_passes and time.monotonic() > deadline:
            break
    return times, faults, waits if len(waits) == len(times) else [], [b for b in blocked if b is not None]


def self_cost_plan(clean_median_ms: float, min_steady: int, max_steady: int,
                   so_far_s: float) -> tuple[tuple[int, int], str]:
    """How many instrumented steady passes measure warmprof's own cost on the model (at least, at
    most), and why none run ("" when they do): at least SELF_COST_PASSES[0], and as many as fit in
    SELF_COST_FLOOR_S (a fast model's fastest of three is rarely undisturbed on a busy machine); never
    more than the clean steady passes; none where their minimum would add more than
    SELF_COST_MAX_SHARE to the trace's time so far (and more than SELF_COST_ALWAYS_S)."""
    least = max(SELF_COST_PASSES[0],
                min(SELF_COST_PASSES[1], math.ceil(SELF_COST_FLOOR_S / max(clean_median_ms / 1e3, 1e-6))))
    passes = (min(least, min_steady), min(SELF_COST_PASSES[1], max_steady))
    least_s = (passes[0] + 1) * clean_median_ms / 1e3
    if least_s > max(SELF_COST_MAX_SHARE * so_far_s, SELF_COST_ALWAYS_S):
        return passes, (f"warmprof's own cost is the calibrated figures only: measuring it on this model "
                        f"({passes[0] + 1} instrumented steady passes, about {least_s:.1f} s) would add more than "
                        f"{SELF_COST_MAX_SHARE:.0%} to the trace's {so_far_s:.1f} s")
    return passes, ""


def instrumented_steady(runner: Any, args: tuple, kwargs: dict, dev: Any, compiled: bool, op_view: bool, sync: Any,
                        passes: tuple[int, int], budget_s: float, call: Any = None,
                        hooked: Any = None) -> tuple[list[float], dict[str, int], Timeline, tuple[int, int]]:
    """Steady passes with every instrument on, set up afresh exactly as for the first pass (hooks,
    oneDNN's verbose capture, samplers, imports, CUDA callbacks) in a recording of their own, so
    nothing of theirs reaches the first pass's timeline or the clean steady statistics. Returns
    each counted pass's time (ms, its own clock reads), each module's calls per pass (their mean), the
    recording and the fastest counted pass's window (the op view's warm baseline per site). Times are
    net of each pass's wait for a CPU (schedstat run-queue delay; none where the kernel has none).
    The first pass is run and not counted: it warms the fresh instruments. `call`: what one pass
    calls (runner by default; runner called twice under cudagraph trees); `hooked`: what the instruments
    hook (runner by default; the model under a generate trace's runner)."""
    call = runner if call is None else call
    least, most = passes[0] + 1, passes[1] + 1
    insts = instruments(runner if hooked is None else hooked, dev, compiled, op_view)
    windows: list[tuple[int, int]] = []
    waits: list[float] = []
    deadline = time.monotonic() + budget_s
    with Recording(spare_buffers=SPARE_BUFFERS) as rec:
        with contextlib.ExitStack() as stack:
            for inst in insts:
                stack.enter_context(inst)
            while len(windows) < most:
                d0, c0 = run_delay_ns(), time.thread_time_ns()
                windows.append(run_pass(call, args, kwargs, INSTRUMENTED_STEADY, insts, sync, most - len(windows)))
                d1, c1 = run_delay_ns(), time.thread_time_ns()
                t0, t1 = windows[-1]
                waits.append(_waited_ms(d0, d1, t1 - t0, c1 - c0) or 0.0)
                if len(windows) >= least and time.monotonic() > deadline:
                    break
        timeline = rec.drain()
    counted = windows[1:]
    # Net of each pass's wait for a CPU, as the clean passes they are compared with: contention is
    # the machine's, not the instruments' cost.
    net = [(t1 - t0) / 1e6 - w for (t0, t1), w in zip(counted, waits[1:])]
    fastest = counted[min(range(len(counted)), key=lambda k: net[k])]
    return net, _module_calls(timeline, counted), timeline, fastest


def _module_calls(tl: Timeline, windows: list[tuple[int, int]]) -> dict[str, int]:
    """Each module's recorded calls per pass (mean over the windows, rounded) on the passes' thread."""
    ids = np.asarray([i for i, n in enumerate(tl.names) if n.startswith("module:")], dtype=np.int64)
    pass_ids = [i for i, n in enumerate(tl.names) if n == f"pass:{INSTRUMENTED_STEADY}"]
    if not ids.size or not windows or len(tl) == 0:
        return {}
    begins = (tl.kind == BEGIN) & np.isin(tl.name, ids)
    on_pass = (tl.kind == BEGIN) & np.isin(tl.name, pass_ids)
    if on_pass.any():  # the thread that ran the passes: other threads' module calls overlap them
        begins &= tl.thread == tl.thread[on_pass][0]
    inside = np.zeros(len(tl), dtype=bool)
    for t0, t1 in windows:
        inside |= (tl.ts_ns >= t0) & (tl.ts_ns <= t1)
    names, counts = np.unique(tl.name[begins & inside], return_counts=True)
    return {tl.names[int(n)][len("module:"):]: max(1, round(int(c) / len(windows)))
            for n, c in zip(names.tolist(), counts.tolist())}


__all__ = ["INSTRUMENTED_STEADY", "PASSES", "SELF_COST_ALWAYS_S", "SELF_COST_FLOOR_S", "SELF_COST_MAX_SHARE",
           "SELF_COST_PASSES", "SELF_COST_SHARE", "SPARE_BUFFERS", "check_output", "guarded_pass", "instruments",
           "instrumented_steady", "run_delay_ns", "run_pass", "self_cost_plan", "steady"]

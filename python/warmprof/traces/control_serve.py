"""The control process's side of a fresh-process trace (`warmprof trace ... --control-fds R,W`): it
builds the same model as the trace's process, then runs what the trace's process asks for, one JSON
message each: the clean first pass and steady passes (no instrument but the pass timer; with them, what
its copy of the model holds, memory_held, for the trace's process to check its own fits), the other-shape
pass, warm passes after a short pause, and the warm control (the trace's own protocol on the model
already warm). The trace's side is controls.py; folding the figures into the report is fold.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

from ..errors import InputError
from ..stats import median
from .controls import (
    AFTER_PAUSE_PASSES,
    AFTER_PAUSE_S,
    CLEAN_STEADY,
    CLEAN_STEADY_BUDGET_S,
    CONTROL_STEADY,
    OTHER_SHAPES,
    OTHER_STEADY,
    _in_warm_control,
)

def serve(fds: str, load: Any, *, device: str, threads: int | None, shape: Any, inputs: Any, dtype: Any,
          model_dtype: Any, compile: Any, op_view: bool, warm_shape: str | None = None, generate: int | None = None,
          kv_cache: str | None = None) -> int:
    """The control process's whole life (`warmprof trace ... --control-fds R,W`): `load()` builds
    the model and its inputs spec; then the phases the trace's process asks for, one message each."""
    try:
        r, w = (int(x) for x in fds.split(","))
    except ValueError:
        raise InputError(f"--control-fds takes two descriptors, R,W: got {fds!r}") from None
    out = os.fdopen(w, "w", buffering=1)
    incoming = os.fdopen(r, "r")

    def send(msg: dict[str, Any]) -> None:
        out.write(json.dumps(msg) + "\n")

    try:
        import torch

        if threads is not None:
            torch.set_num_threads(threads)
        from . import api
        from .compile_options import calls_per_pass, compile_model, repeated
        from .inputs import cast_model, make_inputs, parse_device, parse_model_dtype
        from .. import devices

        model, spec = load()
        if warm_shape:  # as the trace's process does before its trace (--warm-shape)
            from .warm_process import warm_run

            warm_run(torch, model, warm_shape, dtype, device, model_dtype)
        dev = parse_device(device)
        kind = devices.of(dev)
        if not kind.host and isinstance(model, torch.nn.Module):
            model = model.to(dev)
        model = cast_model(model, parse_model_dtype(model_dtype))
        args, kwargs, _ = make_inputs(model, shape if spec is None else None, dtype, spec, dev)
        def others() -> list[Any]:
            """The inputs at the other shapes, as sets to try in order (_other_passes), each input made when its
            pass comes, after the clean first pass and steady passes (their tensors would change the heap the
            first pass grows, and its page faults, which are compared)."""
            if generate is not None:  # a generation has no other-shape pass: its phases are the figures
                return []
            if spec is None and shape is not None:  # a dimension k smaller, or k more in the batch dimension
                from .explain import control_other_shapes
                from .inputs import parse_shape

                # Off the host the batch grows, as it always did: the control counts no device memory per pass,
                # so a smaller shape's clean difference would hold the device allocator's growth, which the
                # trace books as allocator_growth too.
                return [(make_inputs(model, tuple(s), dtype, None, dev)[:2] for s in shapes)
                        for shapes in control_other_shapes(list(parse_shape(shape)), OTHER_SHAPES, shrink=kind.host)]
            if spec is not None:  # given inputs: each tensor k rows longer in its batch dimension, where they share one
                grown = [other_inputs(torch, args, kwargs, k) for k in range(1, OTHER_SHAPES + 1)]
                return [[g for g in grown if g is not None]]
            return []
        # a pass is as many calls as the trace's (cudagraph trees: calls 1+2 are the cold start)
        gen = None
        if generate is not None:  # the trace's call: one generation, its steps stamped (traces/generate.py)
            from .generate import Generation, check_generate

            gen = Generation(model, check_generate(generate, kv_cache, model) or generate, compile, kv_cache)
            runner = gen
        else:
            runner = repeated(compile_model(model, compile), calls_per_pass(compile, dev))
        sync = kind.sync(dev)

        def clean_run() -> dict[str, Any]:
            if gen is None:
                return _clean(torch, runner, args, kwargs, sync, others)
            from .generate import clean_phases

            with gen:  # hooked (and its forward compiled) for the clean calls only: the warm control hooks afresh
                got = _clean(torch, runner, args, kwargs, sync, others)
            calls = gen.take()
            got["generate"] = clean_phases(calls[0], calls[1:1 + len(got["steady_ms"])])
            return got

        # The two processes take turns: the trace's process started this one and waits, asleep and before
        # it imports torch, until these clean figures come; then this one waits, blocked on its pipe, while
        # the trace's process builds its model and runs its instrumented passes. So the clean phase runs
        # right after the build, as in a plain script (a pass after a pause pays 1-3 ms more on a small
        # model), and no pass of either process runs beside the other's work: what a pass waited for a CPU
        # (measured) is the machine's other work, not warmprof's.
        # What this process holds once its clean phase is done (the model, its inputs, what its passes left
        # allocated) goes with the clean figures: the trace's process checks that its own copy fits beside it
        # (controls.check_room) before it builds it. Taken after the clean phase, not before: nothing but
        # the build comes before the clean first pass, and the trace's process waits for these figures anyway.
        clean = clean_run()
        send({"clean": {**clean, "held": memory_held(torch, model, dev)}})
        for line in incoming:
            msg = json.loads(line)
            if msg.get("do") == "warm":
                send({"warm": _warm(api, model, args, kwargs, device, compile, op_view, msg["calibration"],
                                    generate, kv_cache)})
            else:
                break
        return 0
    except BaseException as e:  # the trace's process says why; this process just ends
        with contextlib.suppress(Exception):
            send({"error": f"{type(e).__name__}: {e}"})
        return 1


def memory_held(torch: Any, model: Any, dev: Any) -> dict[str, Any]:
    """What this process holds with the model built and run: its parameters and buffers (bytes, a tensor
    shared by several counted once; those on a device other than the host too), this process's own
    resident memory (RssAnon), and the device's free memory with this process's share in use (where the
    device table reads it: CUDA)."""
    from .. import devices
    from ..system.memory import process_bytes

    seen: set[tuple[str, int]] = set()
    total = on_device = 0
    if isinstance(model, torch.nn.Module):
        for t in (*model.parameters(), *model.buffers()):
            if t.is_meta:  # no storage
                continue
            key = (str(t.device), t.data_ptr())
            if key in seen:
                continue
            seen.add(key)
            n = t.numel() * t.element_size()
            total += n
            kind = devices.find(t.device)
            if kind is None or not kind.host:
                on_device += n
    out: dict[str, Any] = {"model_bytes": total, "process_bytes": process_bytes()}
    kind = devices.find(dev)
    if on_device and kind is not None and kind.free_bytes is not None:
        with contextlib.suppress(Exception):
            free = kind.free_bytes(dev)
            if free is not None:
                out.update(device=str(dev), device_model_bytes=on_device, device_free_bytes=int(free))
    return out


def _thread_usage() -> dict[str, float] | None:
    """This thread's CPU time (ns, CLOCK_THREAD_CPUTIME_ID: exact where rusage's lags by a tick),
    voluntary switches, major faults and block reads so far (getrusage RUSAGE_THREAD); None where
    there is no per-thread rusage (macOS)."""
    import resource

    who = getattr(resource, "RUSAGE_THREAD", None)
    if who is None:
        return None
    ru = resource.getrusage(who)
    return {"cpu_ns": time.thread_time_ns(), "voluntary": ru.ru_nvcsw, "major_faults": ru.ru_majflt,
            "blocks_in": ru.ru_inblock}


def _off_cpu(t0: int, t1: int, d0: int | None, d1: int | None, u0: dict | None, u1: dict | None) -> dict[str, Any]:
    """One pass's wall time split into its thread's CPU time, its wait for a CPU and its time off the
    CPU, with the major faults and block reads over it. schedstat's run-queue delay is added when the
    thread next gets a CPU, so a read can hold a delay from before the window or miss one from inside
    it: it is capped at the wall time less the CPU time, and off-CPU time with no voluntary switch
    (the thread never blocked) is a wait for a CPU whose accounting came late, not a wait."""
    out: dict[str, Any] = {}
    wall = t1 - t0
    delay = (d1 - d0) if d0 is not None and d1 is not None else None
    if u0 is None or u1 is None:
        if delay is not None:
            out["run_delay_ms"] = max(0, delay) / 1e6
        return out
    cpu = u1["cpu_ns"] - u0["cpu_ns"]
    idle = max(0, wall - cpu)  # neither running nor ... : waiting for a CPU or off it
    delay = min(max(0, delay), idle) if delay is not None else 0
    off = idle - delay
    blocked = u1["voluntary"] - u0["voluntary"]
    if blocked <= 0:  # never blocked: all of it waited for a CPU
        delay, off = idle, 0
    out.update(cpu_ms=cpu / 1e6, run_delay_ms=delay / 1e6, off_cpu_ms=off / 1e6, voluntary_switches=int(blocked),
               major_faults=int(u1["major_faults"] - u0["major_faults"]),
               blocks_in=int(u1["blocks_in"] - u0["blocks_in"]))
    return out


def _timed(runner: Any, args: tuple, kwargs: dict, sync: Any) -> tuple[float, dict[str, Any], Any]:
    """One pass with nothing but the pass timer: (ms, its _off_cpu split, the output). The thread's
    run-queue delay and rusage are read around the pass, outside it."""
    from .. import _native
    from .inputs import put_back
    from .passes import run_delay_ns

    f0 = sum(_native.faults())
    d0, u0 = run_delay_ns(), _thread_usage()
    t0 = _native.now_ns()
    out = runner(*args, **kwargs)
    sync()
    t1 = _native.now_ns()
    d1, u1 = run_delay_ns(), _thread_usage()
    faults = sum(_native.faults()) - f0  # the process's page faults over the pass, as the trace's recorder counts them
    put_back(args, kwargs)  # an input the pass changed in place, as made again (inputs.py)
    return (t1 - t0) / 1e6, dict(_off_cpu(t0, t1, d0, d1, u0, u1), faults=faults), out


def other_inputs(torch: Any, args: tuple, kwargs: dict, rows: int = 1) -> tuple[tuple, dict] | None:
    """Given inputs at another shape: every tensor argument (positional or keyword) `rows` rows longer in
    its first dimension (its first row repeated), where all of them have a first dimension of one
    size (a batch); anything else as it is. None where there is no such batch to grow."""
    tensors = [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)]
    if not tensors or any(t.dim() == 0 for t in tensors) or len({int(t.shape[0]) for t in tensors}) != 1:
        return None
    if int(tensors[0].shape[0]) == 0:
        return None

    def grow(v: Any) -> Any:
        return torch.cat([v, *([v[:1]] * rows)]) if isinstance(v, torch.Tensor) else v

    return tuple(grow(v) for v in args), {k: grow(v) for k, v in kwargs.items()}


def _other_passes(others: Any, done: list[dict[str, Any]]) -> Any:
    """Each other-shape input to run, set by set (explain.control_other_shapes): a set whose first shape the
    model refused (nothing in `done` after it) gives way to the next; the first set that ran is the last."""
    for group in (others() if callable(others) else others or []):
        for other in group:
            yield other
            if not done:
                break
        if done:
            return


def _net(passes: list[tuple[float, dict[str, Any]]]) -> list[float] | None:
    """Each pass's time less what it waited for a CPU and off it (ms), or None where a pass's waits were not
    read: a spread the machine's load does not widen the way it widens the wall times."""
    if not passes or not all("run_delay_ms" in split for _, split in passes):
        return None
    return [ms - split["run_delay_ms"] - split.get("off_cpu_ms", 0.0) for ms, split in passes]


def _clean(torch: Any, runner: Any, args: tuple, kwargs: dict, sync: Any,
           others: Any = None) -> dict[str, Any]:
    """The clean first pass and steady passes: the pass timer only, and around each pass (outside
    it) the thread's run-queue delay and rusage, so what each pass waited is known. Then, for each of
    `others` (the inputs at other shapes, each new to the process), that shape's first pass and a few
    steady passes: what the model pays again at a new shape in a process that already ran it; the rest
    of the clean excess is paid once per process, whatever the shape, and the several shapes say how
    many agree (fold._once_per_process). `others` is a function that makes them, called only then, as sets
    to try in order (_other_passes). Last, a few warm passes at the traced inputs, each after a short sleep:
    what a pass after other work pays over back-to-back ones."""
    from ..instruments.torch_compile import compile_timer_marks, compile_timer_ms_since
    from .passes import check_output

    def one(a: tuple = args, kw: dict = kwargs) -> tuple[float, dict[str, Any], Any]:
        return _timed(runner, a, kw, sync)

    shapes: list[dict[str, Any]] = []
    refused = ""
    with torch.no_grad():
        marks = compile_timer_marks()
        first_ms, first_split, out = one()
        compiled_ms = compile_timer_ms_since(marks)  # torch's own compile timers over the clean first pass
        if compiled_ms:
            first_split["torch_compile_ms"] = compiled_ms
        check_output(out)
        del out
        steady_ms: list[float] = []
        splits: list[dict[str, Any]] = []
        deadline = time.monotonic() + CLEAN_STEADY_BUDGET_S
        while len(steady_ms) < CLEAN_STEADY[1]:
            ms, split, _ = one()
            steady_ms.append(ms)
            splits.append(split)
            if len(steady_ms) >= CLEAN_STEADY[0] and time.monotonic() > deadline:
                break
        for other in _other_passes(others, shapes):
            try:
                o_first, o_split, out = one(*other)
                del out
                o_steady = [one(*other)[:2] for _ in range(OTHER_STEADY)]
            except Exception as e:  # a model that takes only its own batch size: no other-shape pass
                refused = f"{type(e).__name__}: {e}"[:300]
                with contextlib.suppress(Exception):  # what the refused forward queued on a device, not the next pass's
                    sync()
                if shapes:
                    break
                continue  # the set's first shape refused: the next set
            o_ms = [t for t, _ in o_steady]
            got = {"first_pass_ms": o_first, "steady_median_ms": median(o_ms), "first": o_split,
                   "excess_ms": o_first - median(o_ms),
                   "shape": [list(x.shape) for x in (*other[0], *other[1].values()) if hasattr(x, "shape")][:1]}
            o_net = _net(o_steady)  # its steady passes net of their waits, as the first
            if o_net is not None:
                got["steady_net_median_ms"] = median(o_net)
            shapes.append(got)
    steady_split = {k: median([s[k] for s in splits]) for k in ("run_delay_ms", "off_cpu_ms", "faults")
                    if splits and all(k in s for s in splits)}
    if "faults" in steady_split:  # the most any steady pass took: a warm first pass takes no more (verdict.py)
        steady_split["faults_max"] = max(s["faults"] for s in splits)
    out_d = {"first_pass_ms": first_ms, "steady_ms": steady_ms, "first": first_split, "steady": steady_split}
    steady_net = _net(list(zip(steady_ms, splits)))  # fold._once_per_process reads it
    if steady_net is not None:
        out_d["steady_net_ms"] = steady_net
    if shapes:
        out_d["other_shape"] = shapes[0]
        out_d["other_shapes"] = shapes
    if refused and not shapes:
        out_d["other_shape_refused"] = refused
    paused = []
    for _ in range(AFTER_PAUSE_PASSES):  # last: warm passes at the traced inputs, each after a short sleep
        time.sleep(AFTER_PAUSE_S)
        paused.append(one()[:2])
    out_d["after_pause_ms"] = [ms for ms, _ in paused]
    # a pass woken from a sleep on a busy machine first waits for a CPU, which the wall time would count as what
    # coming after other work costs (fold reads the net figure)
    paused_net = _net(paused)
    if paused_net is not None:
        out_d["after_pause_net_ms"] = paused_net
    return out_d


def _warm(api: Any, model: Any, args: tuple, kwargs: dict, device: str, compile: Any, op_view: bool,
          calibration: dict[str, Any], generate: int | None = None, kv_cache: str | None = None) -> dict[str, Any]:
    """The trace's protocol on the model already warm, instruments fresh, at the trace's calibration. It
    starts from a collected heap: the earlier phases' garbage (the clean and other-shape passes, the model's
    build) can leave Python's full collection due, and one inside the warm control's first pass (170 ms on a
    T5 from a small config, its build's many objects) would be sized as warmprof's own first-pass cost."""
    import gc

    from ..instruments.torch_cuda import CudnnFind
    from . import calibrate

    gc.collect()
    calibrate.seed(calibrate.MachineCosts.from_dict(calibration))
    CudnnFind.already_called()  # the clean pass ran the model here: cuDNN's first call is behind it
    token = _in_warm_control.set(True)
    try:
        report = api.trace(model, inputs=kwargs if kwargs else args, device=device, compile=compile,
                           steady=CONTROL_STEADY, op_view=op_view, generate=generate, kv_cache=kv_cache)
    finally:
        _in_warm_control.reset(token)
    return {"first_pass_ms": report.own_cost["instrumented_first_pass_ms"],
            "causes": [{"cause": c.cause, "source": c.source, "ms": c.ms, "module": c.module} for c in report.causes],
            "where": [{"module": w["module"], "ms": w["ms"], **({"op": w["op"]} if "op" in w else {})}
                      for w in report.unattributed_where],
            "generate": [{"phase": row["phase"], "causes": [{k: c[k] for k in ("cause", "source", "ms")} for c in row["causes"]]}
                         for row in (report.generate or {}).get("phases", [])]}




__all__ = ["memory_held", "other_inputs", "serve"]

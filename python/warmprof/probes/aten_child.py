"""The fresh process one aten op is probed in: `python -m warmprof.probes.aten_child`, the job as JSON
on stdin, the measurements as one JSON object on stdout.

Job: {"call": SPEC, "device": "cpu", "threads": N | null, "steady_calls": 20, "variant_calls": 10,
"rerun_rounds": 3}. Answer: {"ok": true, <figures>} or {"ok": false, "error": "<one line>"}.

The child imports torch first and says so on the pipe named by WARMPROF_PROBE_READY_FD (when set),
then reads its job: a parent may spawn several children ahead and hand each its job in turn.

Order (a first call is only a first call once per process): the runtime warm-up (a 1M-element add,
then a 1-element add, each first call vs its steady), the op's first call at the recorded shapes,
its steady calls, new shapes of the now-warm op (first call, then steady, each), seen-shape re-runs
of the recorded shape, and last the allocation band at the op's working set (inputs + output).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import AbstractSet, Any, Callable

from ..stats import median
from .aten_variants import new_sizes, perturbations, variant
from .bands import ALLOC_MARGIN, LAUNCH_MARGIN
from .timing import Stats, burst, quiet_gc, time_call

MAX_VARIANTS = 3
MAX_PERTURBATIONS = 8  # perturbation patterns tried before the shape question is given up
WARMUP_CALLS = 20


READY_FD_ENV = "WARMPROF_PROBE_READY_FD"  # a pipe the parent reads: written once the imports are done


def main() -> int:
    real_stdout = os.dup(1)
    os.dup2(2, 1)  # whatever torch or the op prints goes to stderr; stdout carries the answer alone
    try:
        _import_then_say_ready()
        answer = measure(json.loads(sys.stdin.read()))
    except Exception as e:  # the op, the spec, the device: any refusal is this op's failure, in one line
        answer = {"ok": False, "error": one_line(e)}
    with os.fdopen(real_stdout, "w") as out:
        out.write(json.dumps(answer, allow_nan=False) + "\n")
    return 0


def _import_then_say_ready() -> None:
    """Import what measure() needs (torch: seconds), then tell the parent, which may have spawned this
    child ahead of its turn: it sends the job once no other child is importing, so this child measures
    on a machine its siblings leave alone. The imports are those of any fresh process, done before the
    job is read instead of after: nothing runs an op before measure()."""
    import torch  # noqa: F401

    from .. import opspec  # noqa: F401
    from ..timeline import Recording  # noqa: F401
    from .backends import TorchEager  # noqa: F401

    fd = os.environ.pop(READY_FD_ENV, "")
    if fd.isdigit():
        try:
            os.write(int(fd), b"1")
            os.close(int(fd))
        except OSError:
            pass


def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:400]


def measure(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    from .. import opspec
    from ..instruments.device_set import resolve
    from ..timeline import Recording
    from ..traces.inputs import parse_device
    from .backends import TorchEager

    if job.get("threads"):
        torch.set_num_threads(int(job["threads"]))
    device = parse_device(job.get("device", "cpu"))
    be = TorchEager(device, torch.float32)
    # oneDNN's creation lines, read as the trace reads them (on before oneDNN reads its settings):
    # the first call's primitive creation is what a trace books as measured jit_compile.
    onednn = resolve(be.kind.op_probe_instrument)() if be.kind.op_probe_instrument else None  # cpu: OneDNN
    with Recording(), (onednn if onednn is not None else contextlib.nullcontext()):
        warmup_ms, trivial = runtime_warmup(be)
        if onednn is not None:
            onednn.end_pass("warmup")
        spec = job["call"]
        op = opspec.resolve_op(spec["op"])
        args, kwargs = opspec.build(spec, device)
        fn = _bound(op, kwargs)
        mark = (lambda name: onednn.end_pass(name)) if onednn is not None else (lambda name: None)
        try:
            first_ms, steady, host = first_and_steady(fn, tuple(args), be.sync, int(job.get("steady_calls", 20)),
                                                      lambda: mark("first"))
        except Exception as e:
            return {"ok": False, "error": f"the op raised on its recorded shapes: {one_line(e)}"}
        variants, dropped = new_shapes(be, op, spec, int(job.get("variant_calls", 10)), mark,
                                       set(job.get("too_large") or ()))
    if onednn is not None:  # its passes are read on exit: the first call's and each new shape's creations
        for name, counters in (("first", host), *((f"variant{i}", v["first_call"]) for i, v in enumerate(variants))):
            counters["onednn_create_ms"] = onednn.by_pass.get(name, {}).get("create_miss_ms", 0.0)
            counters["onednn"] = "" if onednn.available else onednn.reason
    with quiet_gc():
        reruns = [time_call(fn, tuple(args), be.sync) for _ in range(int(job.get("rerun_rounds", 3)))]
    working_set = opspec.tensor_bytes([args, kwargs, fn(*args)])
    alloc_ms = be.alloc_ms(working_set)
    launch_hi = LAUNCH_MARGIN * trivial.median_ms
    shape_set = max([v["working_set_bytes"] for v in variants], default=working_set)  # new shapes are larger
    return {
        "ok": True, "op": spec["op"], "first_ms": first_ms, "steady": _stats(steady), "rerun_ms": median(reruns),
        "reruns_ms": reruns, "runtime_warmup_ms": warmup_ms, "launch_hi_ms": launch_hi, "alloc_ms": alloc_ms,
        "alloc_hi_ms": launch_hi + ALLOC_MARGIN * alloc_ms, "alloc_how": be.alloc_how, "working_set_bytes": working_set,
        "shape_alloc_hi_ms": launch_hi + ALLOC_MARGIN * be.alloc_ms(shape_set), "variants": variants, "dropped_variants": dropped, "threads": torch.get_num_threads(),
        "torch": torch.__version__, "device": str(device), "first_call": host,
        **({"library": resolve(be.kind.library_settings)(torch)} if be.kind.library_settings else {}),
    }


def first_and_steady(fn: Callable, args: tuple, sync: Callable[[], None], steady_calls: int,
                     after_first: Callable[[], None] = lambda: None,
                     warm_calls: int = 2) -> tuple[float, Stats, dict[str, Any]]:
    """burst(), with the host counters read around the first call alone: its page faults and the
    growth of file-backed memory (a library's code paged in), which a trace books as estimates."""
    from .. import _native
    from .timing import stats, time_calls

    with quiet_gc():
        faults0, file0 = sum(_native.faults()), _native.file_bytes()
        first = time_call(fn, args, sync)
        host = {"faults": sum(_native.faults()) - faults0, "file_bytes": max(0, _native.file_bytes() - file0)}
        after_first()
        for _ in range(warm_calls):
            time_call(fn, args, sync)
        return first, stats(time_calls(fn, args, sync, steady_calls)), host


def runtime_warmup(be: Any) -> tuple[float, Stats]:
    """What the process pays once, before any op: the warm-up's own first calls over their steady."""
    import torch

    from .ops import trivial_add

    big = torch.ones(1 << 20, device=be.device, dtype=be.dtype)
    big_first, big_steady = burst(trivial_add, (big, big), be.sync, WARMUP_CALLS)
    one_fn, one_args = be.trivial()
    one_first, one_steady = burst(one_fn, one_args, be.sync, WARMUP_CALLS * 2)
    excess = max(0.0, big_first - big_steady.median_ms) + max(0.0, one_first - one_steady.median_ms)
    return excess, one_steady


def new_shapes(be: Any, op: Any, spec: dict[str, Any], calls: int,
               mark: Callable[[str], None] = lambda name: None,
               too_large: AbstractSet[str] = frozenset()) -> tuple[list[dict[str, Any]], list[str]]:
    """Up to MAX_VARIANTS new shapes of the warm op: first call and steady each. A perturbation the op
    refuses (it raises at the first new size), or one the parent found past the replay cap
    (`too_large`, aten.too_large_variants), is dropped with its reason."""
    from .. import opspec

    out: list[dict[str, Any]] = []
    dropped: list[str] = []
    for i, (what, targets, size) in enumerate(perturbations(spec)):
        if len(out) >= MAX_VARIANTS or i >= MAX_PERTURBATIONS:
            break
        for n in new_sizes(size):
            if len(out) >= MAX_VARIANTS:
                break
            vspec = variant(spec, targets, n)
            if f"{what} -> {n}" in too_large:
                dropped.append(f"{what} -> {n}: over the {opspec.MAX_REPLAY_BYTES / 2**30:.0f} GiB a replay may allocate")
                break
            try:
                args, kwargs = opspec.build(vspec, be.device)
                fn = _bound(op, kwargs)
                first_ms, steady, host = first_and_steady(fn, tuple(args), be.sync, calls,
                                                          lambda: mark(f"variant{len(out)}"), warm_calls=1)
                nbytes = opspec.tensor_bytes([args, kwargs, fn(*args)])
            except Exception as e:
                dropped.append(f"{what} -> {n}: {one_line(e)}")
                break
            out.append({"what": f"{what} -> {n}", "label": opspec.label(vspec), "first_ms": first_ms,
                        "working_set_bytes": nbytes, "first_call": host, **_stats(steady)})
    return out, dropped


def _bound(op: Any, kwargs: dict[str, Any]) -> Callable:
    return lambda *a: op(*a, **kwargs)


def _stats(s: Stats) -> dict[str, Any]:
    return {"steady_ms": s.median_ms, "steady_p10_ms": s.p10_ms, "steady_p90_ms": s.p90_ms, "n": s.n}



if __name__ == "__main__":
    sys.exit(main())

"""warmprof.probe: calibrate bands, run the op experiments and the bucketing sweep, judge, report."""

from __future__ import annotations

import contextlib
import datetime
import os
from typing import Any, Callable, Iterator

from .. import _native
from ..errors import InputError, WarmprofError
from ..report.probe import ProbeReport
from ..system.platform import cuda_index, fingerprint, oversubscription
from ..system.progress import progress_printer
from . import bands as bands_mod
from . import bucketing, experiments
from . import ops as O
from .backends import open_backend
from .judge import judge
from .predictions import predictions


def probe(
    ops: Any = O.OPS,
    *,
    device: str = "cpu",
    backend: str = "eager",
    K: int = 20,
    B: int = 4,
    shapes_per_op: int = 4,
    steady_calls: int = 20,
    rerun_rounds: int = 3,
    dtype: str = "float32",
    threads: int | None = None,
    cold_cache: bool = True,
    progress: Any = False,
) -> ProbeReport:
    """Probe a backend's first-call behaviour at never-seen shapes; returns a ProbeReport.

    device: cpu, cuda, cuda:N or mps. backend: eager (torch), compile (torch.compile with static
    shapes, cpu or cuda) or cupy (cuda). K distinct lengths are bucketed into B buckets.
    threads: torch.set_num_threads for the probe (restored after). cold_cache: fresh, empty compile
    caches (inductor/Triton or CuPy) for every experiment. progress: False (the default, as for
    trace(); `warmprof probe` turns it on unless --quiet), True (lines on stderr) or a callable taking
    one line. The compile backend resets dynamo before each experiment and at the end, so compiled
    functions of the calling process recompile on their next call.
    """
    names = O.parse_ops(ops)
    _check_int("shapes_per_op", shapes_per_op, 2, O.MAX_SHAPES_PER_OP)
    _check_int("steady_calls", steady_calls, 5, 10_000)
    _check_int("rerun_rounds", rerun_rounds, 1, 100)
    _check_int("K", K, 2, 1_000)
    _check_int("B", B, 1, K)
    if threads is not None:
        _check_int("threads", threads, 1, 4096)
    say = progress_printer(progress, "warmprof probe")
    start_ns = _native.now_ns()
    load_before = _loadavg()
    be = open_backend(device, backend, dtype, cold_cache)
    say(f"probing {be.describe()}: {', '.join(names)}; K={K}, B={B}")
    with be, _threads(threads):
        # the same check as a trace's (platform.oversubscription), before anything runs
        crowded = oversubscription(_torch_threads() or 1) if be.kind.host else ""
        raw = experiments.plan(names, shapes_per_op, be.element_size)
        bands = bands_mod.calibrate(be, [r.alloc_bytes for r in raw], say)
        stall = be.thread_stall_note()
        experiments.run(be, raw, steady_calls, rerun_rounds, say)
        sweep = bucketing.run(be, K, B, say)
        # the kind's reference experiment, after the probes (mps: the native Metal compile probe)
        reference = REFERENCES[be.kind.probe_reference](say) if be.kind.probe_reference else None
        cache = be.cache_note()
        # Read while the probe's threads are still set: the header's threads and the platform line's
        # torch_threads are one figure (the platform's, when torch is loaded).
        platform = fingerprint(gpu_index=cuda_index(_device_name(device)))
        threads_used = platform["torch_threads"] if "torch_threads" in platform else _torch_threads()
    rows, pairs, summary = judge(raw, {b: bands.for_row(b) for b in bands.alloc_ms_by_bytes}, _device_notes(be, backend, names))
    bands_report = bands.to_report()
    if reference is not None:
        bands_report["compile"]["metal_reference"] = reference
    wall_s = (_native.now_ns() - start_ns) / 1e9
    load = {"before": load_before, "after": _loadavg(), "cpus": os.cpu_count() or 0}
    return ProbeReport(
        device=_device_name(device), backend=backend, dtype=dtype, platform=platform, bands=bands_report, ops=rows,
        shape_vs_size=pairs, bucketing=sweep, predictions=predictions(rows, pairs, sweep), op_summary=summary,
        protocol={
            "what": be.describe(), "steady_calls": steady_calls, "warm_calls": 2, "rerun_rounds": rerun_rounds,
            "shapes_per_op": shapes_per_op, "timer": "native CLOCK_MONOTONIC (warmprof._native.now_ns)",
            "sync": _sync_note(be), "compile_cache": cache, "threads": threads_used, "load_average": load,
            "runtime_warmup": "a 1M-element add and the 1-element add of the launch band ran before any probe",
        },
        notes=_notes(be, load) + ([stall] if stall else []) + ([crowded] if crowded else []), wall_s=wall_s, warmprof_version=_native.__version__,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )


def _device_notes(be: Any, backend: str, names: tuple[str, ...]) -> dict[str, str]:
    """op -> what a per-shape verdict means there: on CUDA eager a lazily loaded kernel, not a compile
    (verdict.cuda_eager_note); nothing elsewhere (a compile backend compiles, CuPy compiles with NVRTC)."""
    kind = be.kind
    if backend != "eager" or not kind.eager_shape_note:
        return {}
    from ..instruments.device_set import resolve

    library = resolve(kind.library_settings)() if kind.library_settings else None
    note = resolve(kind.eager_shape_note)
    return {op: note(op, library) for op in names}


def _metal_reference(say: Callable[[str], None]) -> dict[str, Any]:
    """On mps, after the probes (it compiles its own kernel, nothing torch's pipelines use): the
    native Metal reference probe's measured compile of a new shape, beside the compile band."""
    from .metal_ref import metal_reference

    say("Metal reference probe: a small MSL kernel compiled at run time, one pipeline per length")
    try:
        ref = metal_reference()
    except WarmprofError as e:
        return {"error": str(e)}
    band = ref.compile_band_ms
    return {"library_ms": ref.library_ms, "pipeline_lo_ms": band[0] if band else None,
            "pipeline_hi_ms": band[1] if band else None, "lengths": [s.length for s in ref.shapes],
            "how": "newLibraryWithSource once, then per length a function-constant specialisation and "
                   "newComputePipelineStateWithFunction, timed natively (warmprof.probes.metal_ref)",
            "notes": list(ref.notes)}


# The reference experiments a device kind names (devices.DeviceKind.probe_reference), run after the probes.
REFERENCES: dict[str, Callable[[Callable[[str], None]], dict[str, Any]]] = {"metal": _metal_reference}


def _device_name(device: str) -> str:
    """The device as the report stores it, kind[:index] ('cpu', 'cuda:1'), whatever spelling of the
    index the backend accepted ('cuda:01')."""
    kind, _, index = device.partition(":")
    return f"{kind}:{int(index)}" if index.isascii() and index.isdigit() else device


def _check_int(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InputError(f"{name} must be an integer from {lo} to {hi}, got {value!r}")


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    if n is None:
        yield
        return
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _torch_threads() -> int | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.get_num_threads()


def _loadavg() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def _sync_note(be: Any) -> str:
    return be.kind.sync_how


def _notes(be: Any, load: dict[str, Any]) -> list[str]:
    notes = []
    cpus = load["cpus"] or 1
    busiest = max((load["before"] or [0.0])[0], (load["after"] or [0.0])[0])
    if busiest > cpus:
        notes.append(f"load average {busiest:.1f} on {cpus} CPUs: other work competed for the cores, so single "
                     "calls may carry scheduling stalls; rows whose steady spread is too wide say so")
    if be.name == "compile":
        notes.append("compile counts are dynamo's own (unique_graphs); each experiment starts from "
                     "torch._dynamo.reset() and " + be.cache_note())
    return notes

"""The device kinds, one table: per kind, how it is parsed and checked, synchronised, which
instruments a trace runs on it and which probe backends run there, how a fresh allocation is
timed, and the few facts the report's words depend on. Every other module asks this table;
adding a kind (XPU, say) is one entry here and its instruments.

This is the ground floor (ARCHITECTURE.md, layers): it imports torch and warmprof's native
module lazily, nothing above it. So what lives higher up is named here by data, a dotted
"module:attribute" string, resolved by the layer that uses it (instruments/device_set.resolve):
a kind's instrument set (`instruments`, a function of an options dict returning instruments),
the op probe's per-call instrument and the probe's reference experiment. Names, not a registry
the instruments fill, because a registry is only full once every instrument module is imported,
and importing a kind's instruments loads its runtime (CUPTI, Metal): a trace on the CPU must not
pay for CUDA's. A string costs nothing until its kind is used, and a test checks each resolves.

Sync (`DeviceKind.sync(device)`) always waits for the given device: torch.cuda.synchronize(device)
for cuda and cuda:N (a bare "cuda" is torch's current device, as torch reads it), MPS's one device
for mps, nothing for the CPU, whose ops return when done.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, cast

from .causes import Name
from .errors import DeviceError
from .stats import median


@dataclass(frozen=True)
class DeviceKind:
    name: str  # torch.device.type, and the kind in a report's device string ("cuda:1")
    label: str  # in messages: "CUDA instruments unavailable: ..."
    spellings: tuple[str, ...]  # how a user names it, joined into DeviceError's "use cpu, cuda, cuda:N or mps"
    check: Callable[[Any, Any, Any], None]  # (torch, device, as given): DeviceError when not usable here
    sync: Callable[[Any], Callable[[], None]]  # device -> a function waiting for that device's queued work
    sync_how: str  # the probe report's protocol.sync
    host: bool  # the host CPU itself: ops run on the intra-op pool (its crowding is measured); models stay put
    instruments: str  # "module:function", options dict -> a trace's instruments for this kind
    probe_backends: tuple[str, ...]  # the probe backends that run here (probes/backends.BACKENDS)
    fresh_allocation_ms: Callable[[Any, int, int], float]  # (device, bytes, trials) -> ms, median of the trials
    fresh_allocation_how: str  # said in the probe report's allocation band
    reserved_bytes: Callable[[Any], "int | None"]  # a caching allocator's reserved bytes; None where none is read
    library_shape_cause: str  # the cause of a per-shape cost in a matmul/conv library op (probes/aten_verdict)
    library_build: str  # what a per-shape jit_compile in such an op is, in the op probe's evidence
    title: Callable[[dict, str, str], str]  # (fingerprint, Jetson board, power mode) -> the device's name in titles
    op_probe_instrument: str | None = None  # "module:Class" the op probe's child runs around its calls
    probe_reference: str | None = None  # a reference experiment the probes run after theirs (probes/api.REFERENCES)
    fold_op_probes: bool = False  # --explain folds op-probe verdicts in (the probe reads what the trace books)
    advice_column: str | None = None  # a causes-table column of advice given only on this kind
    gpu_index: bool = False  # kind:N names the GPU the platform fingerprint describes
    # "module:function", options dict -> the device's instruments for the set-up before the first pass
    # (moving the model, making the inputs); None: the common host ones only
    setup_instruments: str | None = None
    # torch.compile's CUDA graphs (cudagraph trees: record on a function's 2nd call) run on this kind
    cuda_graphs: bool = False
    # "module:function", (torch) -> {"tunableop": bool, "cudnn_benchmark": bool}: whether the kind's
    # matmul/conv libraries benchmark kernels per shape here (a per-shape cost is then algorithm_selection)
    library_settings: str | None = None
    # "module:function", (op, library settings) -> what a per-shape probe verdict means on this kind's
    # eager backend (CUDA: a lazily loaded kernel, not a compile); None: nothing to add
    eager_shape_note: str | None = None
    # device -> the device's free memory in bytes (every process's use taken off), None where none is read:
    # the room for a second copy of a model (traces/controls.check_room)
    free_bytes: Callable[[Any], "int | None"] | None = None


# -- the kinds' functions (each kind's in one place, named by kind) ---------------------------------

def _cpu_check(torch: Any, dev: Any, given: Any) -> None:
    return None


def _cuda_check(torch: Any, dev: Any, given: Any) -> None:
    if not torch.cuda.is_available():
        from . import _native
        from .system import cuda_paths

        cuda_paths.install()  # as warmprof.backends(): the reason names the libcupti looked for
        # the {} typed: mypy takes a bare {} default for dict[Never, Never]
        why = _native.backends().get("cuda_events", cast("dict[str, Any]", {})).get("reason", "")
        raise DeviceError(f"device {str(dev)!r} requested but torch.cuda.is_available() is False"
                          + (f" ({why})" if why else ""))
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise DeviceError(f"device {given!r} requested but only {torch.cuda.device_count()} CUDA device(s) exist")


def _mps_check(torch: Any, dev: Any, given: Any) -> None:
    if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise DeviceError(f"device {str(dev)!r} requested but torch.backends.mps.is_available() is False")


def _no_sync() -> None:
    return None


def _cpu_sync(device: Any) -> Callable[[], None]:
    return _no_sync


def _cuda_sync(device: Any) -> Callable[[], None]:
    import torch

    return functools.partial(torch.cuda.synchronize, device)


def _mps_sync(device: Any) -> Callable[[], None]:
    import torch

    return torch.mps.synchronize


def fresh_allocation_ms(torch: Any, device: Any, nbytes: int, trials: int, *, empty_cache: Callable[[], None],
                        sync: Callable[[], None]) -> float:
    """ms of one fresh allocation of `nbytes` on `device` and its first write (median of `trials`):
    the caching allocator emptied, then torch.empty + fill_, synchronized; the cache is emptied
    before each trial and after the last, so the memory goes back. The probes' allocation band on
    cuda and mps and the MPS allocator instrument's cost per byte both read it."""
    from . import _native

    samples = []
    for _ in range(trials):
        empty_cache()
        sync()
        t0 = _native.now_ns()
        buf = torch.empty(max(1, nbytes), dtype=torch.uint8, device=device)
        buf.fill_(1)
        sync()
        samples.append((_native.now_ns() - t0) / 1e6)
        del buf
    empty_cache()
    return median(samples)


def _cpu_alloc(device: Any, nbytes: int, trials: int) -> float:
    from . import _native

    return _native.fresh_allocation_ns(max(1, nbytes), trials) / 1e6


def _cuda_alloc(device: Any, nbytes: int, trials: int) -> float:
    import torch

    return fresh_allocation_ms(torch, device, nbytes, trials, empty_cache=torch.cuda.empty_cache,
                               sync=_cuda_sync(device))


def _mps_alloc(device: Any, nbytes: int, trials: int) -> float:
    import torch

    return fresh_allocation_ms(torch, device, nbytes, trials, empty_cache=torch.mps.empty_cache,
                               sync=_mps_sync(device))


def _none_reserved(device: Any) -> int | None:
    return None


def _cuda_reserved(device: Any) -> int | None:
    import torch

    return int(torch.cuda.memory_reserved(device))


def _cuda_free(device: Any) -> int | None:
    import torch

    return int(torch.cuda.mem_get_info(device)[0])


def _cpu_title(fp: dict, board: str, mode: str) -> str:
    cores = f"{fp['cpu_count']} cores" if fp.get("cpu_count") else ""
    detail = ", ".join(x for x in (fp.get("apple_chip") or fp.get("cpu"), cores) if x)
    if board:
        return f"{board}{mode} CPU" + (f" ({detail})" if detail else "")
    return detail or str(fp.get("machine") or "CPU")


def _cuda_title(fp: dict, board: str, mode: str) -> str:
    return f"{board}{mode}" if board else str(fp.get("gpu") or "CUDA GPU")


def _mps_title(fp: dict, board: str, mode: str) -> str:
    cores = f" ({fp['gpu_cores']}-core GPU)" if fp.get("gpu_cores") else ""
    return str(fp.get("apple_chip") or "Apple GPU (MPS)") + cores


_SELECTION = Name.ALGORITHM_SELECTION  # MPS choosing a kernel per shape (CUDA: see its library_shape_cause)

KINDS: dict[str, DeviceKind] = {k.name: k for k in (
    DeviceKind(
        name="cpu", label="CPU", spellings=("cpu",), check=_cpu_check, sync=_cpu_sync,
        sync_how="none needed (cpu)", host=True,
        instruments="warmprof.instruments.cpu_set:cpu_instruments", probe_backends=("eager", "compile"),
        fresh_allocation_ms=_cpu_alloc,
        fresh_allocation_how="native mmap of fresh pages + first touch of every page (median of 5)",
        reserved_bytes=_none_reserved,
        library_shape_cause=Name.JIT_COMPILE, library_build="a per-shape kernel build (oneDNN primitive creation on cpu)",
        op_probe_instrument="warmprof.instruments.onednn:OneDNN", fold_op_probes=True, title=_cpu_title),
    DeviceKind(
        name="cuda", label="CUDA", spellings=("cuda", "cuda:N"), check=_cuda_check, sync=_cuda_sync,
        sync_how="device synchronize around every timed call", host=False,
        instruments="warmprof.instruments.cuda_set:cuda_instruments", probe_backends=("eager", "compile", "cupy"),
        fresh_allocation_ms=_cuda_alloc,
        fresh_allocation_how=("torch.cuda.empty_cache(), then torch.empty + fill_ at the size, synchronized "
                              "(a caching-allocator miss plus a first write; median of 5, best effort)"),
        reserved_bytes=_cuda_reserved, library_shape_cause=Name.RUNTIME_INIT,
        library_build=("a lazily loaded kernel per shape (cuBLAS/cuBLASLt and cuDNN pick a kernel by heuristics, "
                       "benchmarking nothing unless TunableOp or cudnn.benchmark is on; CUDA_MODULE_LOADING=LAZY loads "
                       "each kernel on its first launch)"),
        advice_column="cuda_advice", gpu_index=True, title=_cuda_title,
        setup_instruments="warmprof.instruments.cuda_set:cuda_setup_instruments", cuda_graphs=True,
        library_settings="warmprof.instruments.torch_cuda:library_settings",
        eager_shape_note="warmprof.probes.verdict:cuda_eager_note", free_bytes=_cuda_free),
    DeviceKind(
        name="mps", label="MPS", spellings=("mps",), check=_mps_check, sync=_mps_sync,
        sync_how="torch.mps.synchronize() around every timed call", host=False,
        instruments="warmprof.instruments.mps:mps_instruments", probe_backends=("eager",),
        fresh_allocation_ms=_mps_alloc,
        fresh_allocation_how=("torch.mps.empty_cache(), then torch.empty + fill_ at the size, synchronized "
                              "(median of 5, best effort)"),
        reserved_bytes=_none_reserved, library_shape_cause=_SELECTION, library_build="a per-shape compile",
        probe_reference="metal", title=_mps_title),
)}

NAMES = tuple(KINDS)  # ("cpu", "cuda", "mps"): the report schema's device kinds
HOST = KINDS["cpu"]


def either(words: list[str]) -> str:
    """"a, b or c": the table's words joined as the messages say them."""
    return ", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else "".join(words)


SPELLINGS = [s for k in KINDS.values() for s in k.spellings]
USE = either(SPELLINGS)  # "cpu, cuda, cuda:N or mps"
EXAMPLES = either([repr(s.replace(":N", ":1")) for s in SPELLINGS])  # "'cpu', 'cuda', 'cuda:1' or 'mps'"


def find(device: Any) -> DeviceKind | None:
    """The kind of a torch.device or of a device string ("cuda:1", as reports store it); None if unknown."""
    name = device if isinstance(device, str) else getattr(device, "type", None)
    return KINDS.get(name.partition(":")[0]) if isinstance(name, str) else None


def of(device: Any) -> DeviceKind:
    """The kind of a torch.device or device string; DeviceError for a kind not in the table."""
    kind = find(device)
    if kind is None:
        raise DeviceError(f"unknown device {device!r}: use {USE}")
    return kind


def parse(device: Any):
    """A torch.device that exists here, or a DeviceError saying why not."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):  # torch's message lists every device type it knows: not useful here
        raise DeviceError(f"unknown device {device!r}: use {USE}") from None
    kind = KINDS.get(dev.type)
    if kind is None:
        raise DeviceError(f"device type {dev.type!r} is not supported: use {USE}")
    kind.check(torch, dev, device)
    return dev


def sync(device: Any) -> Callable[[], None]:
    """A function that waits for `device`'s queued work (the given device, see the module docstring)."""
    return of(device).sync(device)


__all__ = ["DeviceKind", "EXAMPLES", "HOST", "KINDS", "NAMES", "USE", "either", "find", "fresh_allocation_ms", "of", "parse",
           "sync"]

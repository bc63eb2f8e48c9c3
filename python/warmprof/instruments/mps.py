"""Apple GPUs through PyTorch's MPS backend: what a trace on device="mps" reads.

- `MpsEvents`: the GPU time of each instrumented pass, from `torch.mps.event.Event(enable_timing=True)`
  recorded at the pass's start and when its work is queued (before the sync), and the pass's host
  time bracketed by `torch.mps.synchronize()`. Metal compiles a compute pipeline the first time a
  kernel runs at a shape (the MPS backend caches pipelines keyed on the shape), on the host, while
  the GPU waits: the first pass's host time over its GPU time, less the same figure for the seen-shape
  re-run (cached by then), is that compile. torch has no hook into it, so the figure is inferred
  (`jit_compile`, source `mps:pipeline`), booked only out of what the pass's other causes left
  unexplained, and compared with the compile band: a Metal pipeline compile measured on this machine
  by the native reference probe (`warmprof.probes.metal_ref`) when it has run, else none.
- `MpsAllocator`: `torch.mps.current_allocated_memory()` (tensors) and `driver_allocated_memory()`
  (what the Metal driver holds for the process: the allocator's heaps) read at every module's entry
  and exit (global forward hooks, removed at exit) as timeline counters, and their growth per pass
  and per module. The time a heap's growth took is not measured by torch: it is estimated as the
  growth x the cost of a fresh allocation of that size measured here after the passes
  (empty_cache, torch.empty + fill_, synchronized), labelled estimated.
- `MpsShaderCompile`: `torch.mps.compile_shader` (torch >= 2.7), the one place torch exposes a Metal
  shader compile, wrapped during the passes: each call is a measured `jit_compile` span
  "mps:compile_shader". The original is put back at exit.

Every piece takes the `torch.mps` module as an argument (tests pass a fake one). Nothing here has
run on Apple hardware yet.
"""

from __future__ import annotations

from typing import Any, Callable

from ..attribution.parts import Figure
from ..causes import Name
from ..timeline import JIT_COMPILE, begin, counter, end, name_id, now_ns
from .base import Instrument
from .device_memory import fresh_allocation_ms

PIPELINE_SOURCE = "mps:pipeline"
ALLOC_SOURCE = "mps:driver_allocated"
ALLOC_TRIALS = 3
# A first pass's host-over-GPU excess below this is noise, not a compile (the seen re-run's own
# variation on a Mac is tens of us).
PIPELINE_FLOOR_MS = 0.2


def _torch_mps() -> Any:
    import torch

    return torch.mps


def mps_reason(mps: Any) -> str:
    """Why the MPS instruments cannot run here ("" when they can)."""
    try:
        import torch

        if mps is _torch_mps() and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            return "torch.backends.mps.is_available() is False (not an Apple GPU with a Metal-enabled torch)"
    except Exception as e:  # pragma: no cover - torch without mps
        return f"torch.mps unavailable ({type(e).__name__}: {e})"
    return ""


class MpsEvents(Instrument):
    """GPU time (MPS events) and host time (synchronize-bracketed) of each instrumented pass."""

    name = "mps_events"

    def __init__(self, mps: Any = None, clock: Callable[[], int] = now_ns,
                 compile_band_ms: tuple[float, float] | Callable[[], tuple[float, float] | None] | None = None) -> None:
        super().__init__()
        self._mps = mps if mps is not None else _torch_mps()
        self.reason = mps_reason(self._mps)
        self._clock = clock
        self.compile_band_ms = compile_band_ms
        self.gpu_ms: dict[str, float] = {}
        self.host_ms: dict[str, float] = {}
        self._start: dict[str, tuple[Any, int]] = {}
        self._end: dict[str, Any] = {}
        if not self.reason and not hasattr(getattr(self._mps, "event", None), "Event"):
            self.reason = "torch.mps.event.Event is missing (torch too old for MPS events)"

    def __enter__(self) -> "MpsEvents":
        if not self.reason:
            try:  # one event made and dropped before the passes: its first use is not the model's
                self._mps.event.Event(enable_timing=True).record()
                self._mps.synchronize()
            except Exception as e:
                self.reason = f"MPS events could not be recorded ({type(e).__name__}: {e})"
        return self

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        if self.reason:
            return
        try:
            self._mps.synchronize()  # the pass starts on an idle GPU: its host time is its own
            ev = self._mps.event.Event(enable_timing=True)
            t0 = self._clock()
            ev.record()
        except Exception as e:
            self.notes.append(f"MPS start event of pass {name!r} not recorded ({type(e).__name__}: {e})")
            return
        self._start[name] = (ev, t0)

    def before_sync(self, name: str) -> None:
        if name not in self._start:
            return
        try:
            ev = self._mps.event.Event(enable_timing=True)
            ev.record()
            self._end[name] = ev
        except Exception as e:
            self.notes.append(f"MPS end event of pass {name!r} not recorded ({type(e).__name__}: {e})")

    def end_pass(self, name: str) -> None:
        start = self._start.pop(name, None)
        stop = self._end.pop(name, None)
        if start is None:
            return
        try:
            self._mps.synchronize()
            t1 = self._clock()
        except Exception as e:
            self.notes.append(f"pass {name!r}: torch.mps.synchronize() failed ({type(e).__name__}: {e})")
            return
        self.host_ms[name] = (t1 - start[1]) / 1e6
        if stop is None:
            return
        try:
            gpu = float(start[0].elapsed_time(stop))
        except Exception as e:
            self.notes.append(f"GPU time of pass {name!r} unavailable ({type(e).__name__}: {e})")
            return
        if not gpu >= 0 or gpu != gpu or gpu == float("inf"):
            self.notes.append(f"GPU time of pass {name!r} left out: MPS events gave {gpu!r} ms")
            return
        self.gpu_ms[name] = gpu

    def host_over_gpu_ms(self, name: str) -> float | None:
        if name not in self.gpu_ms or name not in self.host_ms:
            return None
        return self.host_ms[name] - self.gpu_ms[name]

    def pipeline_compile_ms(self) -> float | None:
        """The first pass's host-over-GPU time less the seen re-run's: the pipeline compiles' share
        (None when either pass lacks a GPU time)."""
        first, rerun = self.host_over_gpu_ms("first"), self.host_over_gpu_ms("seen_rerun")
        if first is None or rerun is None:
            return None
        return max(0.0, first - rerun)

    def inferred(self, pass_name: str) -> list[Figure]:
        if self.reason or pass_name != "first":
            return []
        ms = self.pipeline_compile_ms()
        if ms is None or ms < PIPELINE_FLOOR_MS:
            return []
        detail = (f"the first pass's host time over its GPU time ({self.host_over_gpu_ms('first'):.3f} ms) less the "
                  f"seen-shape re-run's ({self.host_over_gpu_ms('seen_rerun'):.3f} ms): Metal compiles a compute pipeline "
                  "per kernel and shape on first use, on the host, and the MPS backend caches it; booked only out of "
                  "what the pass's other causes left unexplained")
        band = self._band()
        if band:
            where = "within" if band[0] <= ms <= band[1] * 4 else ("below" if ms < band[0] else "above")
            detail += (f"; {where} the Metal pipeline compile measured here by the reference probe "
                       f"({band[0]:.2f}-{band[1]:.2f} ms per pipeline)")
        return [Figure(Name.JIT_COMPILE, PIPELINE_SOURCE, ms, fills_unexplained=True, detail=detail)]

    def _band(self) -> tuple[float, float] | None:
        """The compile band, read once: a callable (the Metal reference probe, run after the passes
        so it warms nothing they measure) is called on first use."""
        if callable(self.compile_band_ms):
            try:
                self.compile_band_ms = self.compile_band_ms()
            except Exception as e:
                self.notes.append(f"no Metal compile band: {type(e).__name__}: {e}")
                self.compile_band_ms = None
        return self.compile_band_ms

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if self.reason:
            return out
        out["gpu_ms"] = dict(self.gpu_ms)
        out["host_ms"] = dict(self.host_ms)
        ms = self.pipeline_compile_ms()
        if ms is not None:
            out["pipeline_compile_inferred_ms"] = ms
        band = self._band() if ms is not None else None
        if band:
            out["compile_band_ms"] = list(band)
        return out


class MpsAllocator(Instrument):
    """MPS allocator memory at module boundaries (counters) and its growth per pass and module."""

    name = "mps_allocator"

    def __init__(self, mps: Any = None, hooks: Any = None, per_module: bool = True) -> None:
        super().__init__()
        self._mps = mps if mps is not None else _torch_mps()
        # per_module=False (a compiled model: global hooks would be traced into its graph): the
        # pass's growth only
        self._per_module = per_module
        self.reason = mps_reason(self._mps)
        self._hooks_api = hooks  # (register_pre, register_post) for tests; torch's global hooks otherwise
        self._handles: list[Any] = []
        self._ids = {"allocated": name_id("mps:current_allocated"), "driver": name_id("mps:driver_allocated")}
        self._stack: list[tuple[str, int]] = []
        self._names: dict[int, str] = {}
        self.passes: dict[str, dict[str, Any]] = {}
        self._open: dict[str, tuple[int, int]] = {}
        self.alloc_cost: dict[str, float] = {}
        for fn in ("current_allocated_memory", "driver_allocated_memory"):
            if not self.reason and not callable(getattr(self._mps, fn, None)):
                self.reason = f"torch.mps.{fn} is missing (torch too old)"

    def _read(self) -> tuple[int, int]:
        a, d = int(self._mps.current_allocated_memory()), int(self._mps.driver_allocated_memory())
        counter(self._ids["allocated"], a)
        counter(self._ids["driver"], d)
        return a, d

    def _pre(self, module: Any, _args: Any) -> None:
        if not self.current_pass:
            return
        self._stack.append((self._label(module), self._read()[1]))

    def _post(self, module: Any, _args: Any, _out: Any) -> None:
        if not self.current_pass or not self._stack:
            return
        label, before = self._stack.pop()
        grown = self._read()[1] - before
        if grown > 0 and not self._stack:  # outermost module only: a parent's growth holds its children's
            by = self.passes.setdefault(self.current_pass, {}).setdefault("by_module", {})
            by[label] = by.get(label, 0) + grown

    def _label(self, module: Any) -> str:
        got = self._names.get(id(module))
        return got if got is not None else type(module).__name__

    def label_modules(self, model: Any) -> None:
        """Names modules by their path in `model` (type names otherwise)."""
        try:
            for path, m in model.named_modules():
                self._names[id(m)] = path or type(m).__name__
        except Exception:
            pass

    def __enter__(self) -> "MpsAllocator":
        if self.reason or not self._per_module:
            return self
        try:
            if self._hooks_api is None:
                from torch.nn.modules.module import (
                    register_module_forward_hook,
                    register_module_forward_pre_hook,
                )

                self._hooks_api = (register_module_forward_pre_hook, register_module_forward_hook)
            pre, post = self._hooks_api
            self._handles = [pre(self._pre), post(self._post)]
        except Exception as e:
            self._remove()
            self.reason = f"module hooks for MPS memory could not be set ({type(e).__name__}: {e})"
        return self

    def _remove(self) -> None:
        for h in self._handles:
            try:
                h.remove()
            except Exception:
                pass
        self._handles = []

    def __exit__(self, *exc: Any) -> None:
        self._remove()
        self.current_pass = ""
        self._stack.clear()
        if self.reason:
            return
        grown = max((p.get("driver_grown", 0) for p in self.passes.values()), default=0)
        if grown > 0 and exc[0] is None:
            self.alloc_cost = self._measure_alloc(grown)

    def _measure_alloc(self, nbytes: int) -> dict[str, float]:
        """ms of a fresh allocation of `nbytes` here (median of ALLOC_TRIALS): empty_cache, then
        torch.empty + fill_, synchronized. After the passes: it warms nothing they measure."""
        try:
            import torch

            ms = fresh_allocation_ms(torch, "mps", nbytes, ALLOC_TRIALS, empty_cache=self._mps.empty_cache,
                                     sync=self._mps.synchronize)
            return {"bytes": float(nbytes), "ms": ms}
        except Exception as e:
            self.notes.append(f"the fresh-allocation cost on mps could not be measured ({type(e).__name__}: {e})")
            return {}

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        if not self.reason:
            self._open[name] = self._read()

    def end_pass(self, name: str) -> None:
        before = self._open.pop(name, None)
        if self.reason or before is None:
            return
        after = self._read()
        p = self.passes.setdefault(name, {})
        p["allocated_grown"] = after[0] - before[0]
        p["driver_grown"] = after[1] - before[1]
        self.current_pass = ""

    def inferred(self, pass_name: str) -> list[Figure]:
        p = self.passes.get(pass_name, {})
        grown = int(p.get("driver_grown", 0))
        cost = self.alloc_cost
        if self.reason or grown <= 0 or not cost.get("bytes") or not cost.get("ms", 0) > 0:
            return []
        per_byte = cost["ms"] / cost["bytes"]
        out = []
        by = p.get("by_module") or {"": grown}
        for mod, b in by.items():
            out.append(Figure(Name.ALLOCATOR_GROWTH, ALLOC_SOURCE, b * per_byte, evidence="estimated", module=mod,
                              fills_unexplained=True,
                              detail=f"the Metal driver's memory for this process grew {grown / 2**20:.1f} MiB in the "
                                     f"pass x the cost of a fresh {cost['bytes'] / 2**20:.1f} MiB allocation measured here "
                                     f"after the passes ({cost['ms']:.3f} ms)"))
        return out

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if not self.reason:
            out["passes"] = {k: dict(v) for k, v in self.passes.items()}
            if self.alloc_cost:
                out["fresh_allocation"] = dict(self.alloc_cost)
        return out


class MpsShaderCompile(Instrument):
    """torch.mps.compile_shader, wrapped during the passes: each call a measured jit_compile span."""

    name = "mps_compile_shader"

    def __init__(self, mps: Any = None) -> None:
        super().__init__()
        self._mps = mps if mps is not None else _torch_mps()
        self.reason = mps_reason(self._mps)
        self._original: Any = None
        self.calls: dict[str, int] = {}
        if not self.reason and not callable(getattr(self._mps, "compile_shader", None)):
            self.reason = "torch.mps.compile_shader is missing (torch < 2.7): no measured Metal compile from torch"

    def __enter__(self) -> "MpsShaderCompile":
        if self.reason:
            return self
        original = self._mps.compile_shader
        nid = name_id("mps:compile_shader")
        owner = self

        def compile_shader(*args: Any, **kwargs: Any) -> Any:
            begin(JIT_COMPILE, nid)
            try:
                return original(*args, **kwargs)
            finally:
                end(JIT_COMPILE, nid)
                if owner.current_pass:
                    owner.calls[owner.current_pass] = owner.calls.get(owner.current_pass, 0) + 1

        compile_shader.__wrapped__ = original  # type: ignore[attr-defined]
        self._original = original
        self._mps.compile_shader = compile_shader
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._original is not None:
            self._mps.compile_shader = self._original
            self._original = None

    def end_pass(self, name: str) -> None:
        self.current_pass = ""

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if not self.reason:
            out["calls"] = dict(self.calls)
        return out


def mps_instruments(options: dict) -> list[Instrument]:
    """The instruments a trace on device="mps" runs. Options: "mps" (a torch.mps stand-in for
    tests), "model" (to name modules in the memory figures), "compiled" (no per-module hooks:
    they would be traced into the graph), "compile_band_ms" (the Metal pipeline compile measured
    here, (low, high) ms)."""
    mps = options.get("mps")
    alloc = MpsAllocator(mps=mps, per_module=not options.get("compiled"))
    if options.get("model") is not None:
        alloc.label_modules(options["model"])
    return [MpsEvents(mps=mps, compile_band_ms=options.get("compile_band_ms")), alloc, MpsShaderCompile(mps=mps)]


__all__ = ["MpsAllocator", "MpsEvents", "MpsShaderCompile", "mps_instruments", "mps_reason"]

"""Per-module forward hooks: structure spans that place every cause in the innermost module.

The hooks are native (_native.ModuleHook: no Python frame per module call). A boundary also samples
the host counters (faults, threads, run-queue delay) unless the last sample on its thread is less than
a gap ago (bindings.cpp boundary_counters: the syscalls of a sample cost 3.5-7 us on a VM, more than
everything else a hooked call adds), so counter deltas land in the module that held most of their
interval (attribution/reading.py) and sampling takes a bounded share of the pass. Module calls are the one kind of record the recorder
may thin: when a pass's share of a buffer is spent it records only coarse modules (the root and
two levels below it), then none, and never drops a cause span or a pass boundary for them. The
hooks' own cost per module call is calibrated (traces/calibrate.py): the floor of the estimated
profiler_overhead, which the trace measures on the model itself (instrumented steady passes,
attribution.instrument_cost). Hooks are removed on exit, even if the model raised.
"""

from __future__ import annotations

import weakref
from typing import Any

from .. import _native
from ..timeline import name_id

COARSE_DEPTH = 2  # modules at most this many levels below the root stay when calls are thinned
from .base import Instrument


class ModuleHooks(Instrument):
    name = "modules"

    def __init__(self, model: Any, *, top_level_only: bool = False) -> None:
        super().__init__()
        self.model = model
        self.top_level_only = top_level_only
        self._hooked: list[_Hooked] = []
        self.modules = 0
        try:
            from torch import nn
        except ImportError:
            self.reason = "torch is not installed"
            return
        if not isinstance(model, nn.Module):
            self.reason = "the model is not a torch.nn.Module: no per-module placement"
        if top_level_only:
            self.notes.append("compiled model: only the top-level module is hooked (hooks inside a "
                              "compiled region would change what dynamo compiles)")

    def _targets(self):
        root_name = type(getattr(self.model, "_orig_mod", self.model)).__name__
        if self.top_level_only:
            return [(root_name, self.model, True, True)]
        return [(root_name if not q else f"{root_name}.{q}", m, not q or q.count(".") < COARSE_DEPTH, not q)
                for q, m in self.model.named_modules()]

    def __enter__(self) -> "ModuleHooks":
        if self.reason:
            return self
        try:
            for qual, mod, coarse, root in self._targets():
                hooked = _Hooked(mod, name_id(f"module:{qual}"), coarse, root)
                self._hooked.append(hooked)
                hooked.install()
                self.modules += 1
        except BaseException:
            self._remove()
            raise
        return self

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        # Each pass has its own module budget: hooks taken off when the last one ran out go back on.
        for h in self._hooked:
            if h.pre is None:
                h.install()

    @staticmethod
    def calibrate_cost(calls: int = 200, batches: int = 21) -> float:
        """ns these hooks add to one module call on this machine: a trivial module (a child of the hooked
        model) called `calls` times without and with them (inside a recording, so every record is written), in `batches`
        alternating pairs, the fastest batch of each kind (a busy machine slows batches and never
        speeds them up: short batches, alternated, and their low figure keep a scheduler tick or
        another process out of the figure). Run before the trace's own recording."""
        import time

        import torch

        from ..timeline import Recording

        # A child of the hooked model, as almost every module call is: the root's own boundaries always
        # take the host counters, a child's only when the gap since the last sample has passed.
        module, x = torch.nn.Identity(), torch.zeros(1)
        root = torch.nn.Sequential(module)

        def batch() -> float:
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                module(x)
            return (time.perf_counter_ns() - t0) / calls

        plain, hooked = [], []
        with Recording():
            for _ in range(batches):
                plain.append(batch())
                with ModuleHooks(root):
                    hooked.append(batch())
        return max(0.0, min(hooked) - min(plain))

    def _remove(self) -> None:
        for h in self._hooked:
            h.remove()
        self._hooked.clear()

    def __exit__(self, *exc: Any) -> None:
        self._remove()

    @property
    def installed(self) -> int:
        return sum((h.pre is not None) + (h.post is not None) for h in self._hooked)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out["modules"] = self.modules
        return out


class _Hooked:
    """One module's hooks: one native object (_native.ModuleHook) registered as both its forward
    pre-hook and its forward hook, so no Python frame runs per module call. Each call is one native
    call at each end: the span's begin (end) and, at most once a gap, the host counters (faults,
    threads, run-queue delay; RSS where faults moved: bindings.cpp boundary_counters). A call the
    recorder does not take (this pass's module budget is spent, recorder.h) takes the module's
    pre-hook off for the rest of the pass, and its post-hook once no recorded call of it is still
    open (a recursive module, or one running on several threads, still closes what it opened), so
    thinned calls cost nothing; mark_pass puts them back. The root module's hook samples the counters
    at both its boundaries whatever the gap: the pass's own samples lie outside its window."""

    __slots__ = ("module", "hook", "pre", "post", "__weakref__")

    def __init__(self, module: Any, nid: int, coarse: bool, root: bool = False) -> None:
        self.module = module
        self.pre = self.post = None
        # on_thin holds this object only weakly: the hook lives in the module's hook dicts, and a
        # strong reference back would keep the module alive through its own hook.
        ref = weakref.ref(self)
        self.hook = _native.ModuleHook(nid, coarse, lambda: _thin(ref), root)

    def install(self) -> None:
        self.remove()
        self.hook.reset()
        self.pre = self.module.register_forward_pre_hook(self.hook)
        self.post = self.module.register_forward_hook(self.hook)

    def remove(self) -> None:
        for handle in (self.pre, self.post):
            if handle is not None:
                handle.remove()
        self.pre = self.post = None

    def thin(self) -> None:
        """Called by the native hook: take off what a thinned module no longer needs (torch iterates
        over a copy of its hook dicts: safe inside a hook)."""
        if self.pre is not None:
            self.pre.remove()
            self.pre = None
        if self.hook.open <= 0 and self.post is not None:
            self.post.remove()
            self.post = None


def _thin(ref: "weakref.ref[_Hooked]") -> None:
    hooked = ref()
    if hooked is not None:
        hooked.thin()

"""Per-module forward hooks: structure spans that place every cause in the innermost module.

Each boundary also samples the host counters (faults, threads), so counter deltas land in
the right module and cause (attribution.py). Module calls are the one kind of record the recorder
may thin: when a pass's share of a buffer is spent it records only coarse modules (the root and
two levels below it), then none, and never drops a cause span or a pass boundary for them. The hooks' own cost is calibrated per module call and
reported as an estimated profiler_overhead (trace_api, attribution). Hooks are removed on exit, even if the model raised.
"""

from __future__ import annotations

from typing import Any

from ..timeline import module_enter, module_exit, name_id

COARSE_DEPTH = 2  # modules at most this many levels below the root stay when calls are thinned
from .base import Instrument


class ModuleHooks(Instrument):
    name = "modules"

    def __init__(self, model: Any, *, top_level_only: bool = False) -> None:
        super().__init__()
        self.model = model
        self.top_level_only = top_level_only
        self._handles: list[Any] = []
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
            return [(root_name, self.model, True)]
        return [(root_name if not q else f"{root_name}.{q}", m, not q or q.count(".") < COARSE_DEPTH)
                for q, m in self.model.named_modules()]

    def __enter__(self) -> "ModuleHooks":
        if self.reason:
            return self
        try:
            for qual, mod, coarse in self._targets():
                nid = name_id(f"module:{qual}")

                # One native call each: faults, threads and the span's begin (end); RSS only at
                # pass boundaries.
                def pre(_m, _args, _nid=nid, _coarse=coarse):
                    module_enter(_nid, _coarse)

                def post(_m, _args, _out, _nid=nid):
                    module_exit(_nid)

                self._handles.append(mod.register_forward_pre_hook(pre))
                self._handles.append(mod.register_forward_hook(post))
                self.modules += 1
        except BaseException:
            self._remove()
            raise
        return self

    @staticmethod
    def calibrate_cost(calls: int = 2000, batches: int = 7) -> float:
        """ns these hooks add to one module call on this machine: a trivial module called `calls`
        times with and without them (inside a recording, so every record is written), median of
        `batches`. Run before the trace's own recording (a recording starts empty)."""
        import time

        import torch

        from ..timeline import Recording

        module, x = torch.nn.Identity(), torch.zeros(1)

        def batch() -> float:
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                module(x)
            return (time.perf_counter_ns() - t0) / calls

        with Recording():
            plain = sorted(batch() for _ in range(batches))[batches // 2]
            with ModuleHooks(module):
                hooked = sorted(batch() for _ in range(batches))[batches // 2]
        return max(0.0, hooked - plain)

    def _remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __exit__(self, *exc: Any) -> None:
        self._remove()

    @property
    def installed(self) -> int:
        return len(self._handles)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out["modules"] = self.modules
        return out

"""Per-module spans: structure spans that place every cause in the innermost module.

Each module's forward is wrapped in one native call (_native.ModuleForward, set as the module
instance's `forward` attribute; the class's forward is untouched): torch's Module.__call__ then keeps
its fast path. Forward hooks (_native.ModuleHook registered as pre- and post-hook) send every call
down torch's slow path, which cost more than everything warmprof records (bench/hook_first_call.py:
about 4 us a module call on a 2-core VM against 1.5 us for the spans): a trace's own cost on the
model. Hooks remain where a forward cannot be wrapped: a compiled model's top level (a wrapper inside
a compiled region would change what dynamo compiles), a TorchScript module, a module whose `forward`
cannot be set. The span starts after the module's own forward pre-hooks and ends before its forward
hooks (a wrapped forward), or around them (hooks). No Python frame runs per module call either way.
A boundary also samples
the host counters (faults, threads, run-queue delay) unless the last sample on its thread is less than
a gap ago (bindings.cpp boundary_counters: the syscalls of a sample cost 3.5-7 us on a VM, more than
everything else a hooked call adds), so counter deltas land in the module that held most of their
interval (attribution/reading.py) and sampling takes a bounded share of the pass. Module calls are the one kind of record the recorder
may thin: when a pass's share of a buffer is spent it records only coarse modules (the root and
two levels below it), then none, and never drops a cause span or a pass boundary for them. The
spans' own cost per module call is calibrated (traces/calibrate.py): the floor of the estimated
profiler_overhead, which the trace measures on the model itself (instrumented steady passes,
attribution.instrument_cost). Wrappers and hooks are removed on exit, even if the model raised: a
module's forward is what it was before (its own instance attribute, if it had one, or none).
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
        self.wrapped_modules = 0  # of them, wrapped (the rest hooked)
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
            scripted = 0
            for qual, mod, coarse, root in self._targets():
                if _scripted(mod):  # neither hooks nor a forward attribute: torch refuses both
                    scripted += 1
                    continue
                hooked = _Hooked(mod, name_id(f"module:{qual}"), coarse, root, hooks=self.top_level_only)
                self._hooked.append(hooked)
                hooked.install()
                self.modules += 1
            self.wrapped_modules = self.wrapped
            if scripted and not any(n.startswith("TorchScript") for n in self.notes):
                self.notes.append(f"TorchScript modules: {scripted} with no span of their own (torch takes neither "
                                  "hooks nor a wrapped forward on them): their time is their parent module's")
            _prime()
        except BaseException:
            self._remove()
            raise
        return self

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        # Each pass has its own module budget: hooks taken off when the last one ran out go back on.
        for h in self._hooked:
            h.reset()

    @staticmethod
    def calibrate_cost(calls: int = 200, batches: int = 21) -> float:
        """ns these spans add to one module call on this machine: a trivial module (a child of the hooked
        model) called `calls` times without and with them (inside a recording with a pass's module
        budget, so every record is written), in `batches`
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
                with ModuleHooks(root) as hooks:
                    _native.begin_section(1)  # a pass's module budget, as the trace's passes get
                    hooks.mark_pass("calibrate")
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
        """Hooks registered now (a wrapped module has none)."""
        return sum((h.pre is not None) + (h.post is not None) for h in self._hooked)

    @property
    def wrapped(self) -> int:
        """Modules whose forward is wrapped now."""
        return sum(h.wrapped for h in self._hooked)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out["modules"] = self.modules
        out["wrapped"] = self.wrapped_modules
        return out


class _Hooked:
    """One module's span. Wrapped (the default): the module's `forward` attribute is set to a native
    _native.ModuleForward around the forward it had, which records the span's begin and end (and, at
    most once a gap, the host counters: faults, threads, run-queue delay; RSS where faults moved:
    bindings.cpp boundary_counters) around each call, also when the forward raised. A call the
    recorder does not take (this pass's module budget is spent, recorder.h) is passed through: one
    native call, nothing recorded. Hooked (where a forward cannot be wrapped: `hooks=True`): one
    native object (_native.ModuleHook) as both its forward pre-hook and forward hook; a call the
    recorder does not take takes the pre-hook off for the rest of the pass, and the post-hook once no
    recorded call of it is still open (a recursive module, or one running on several threads, still
    closes what it opened), so thinned calls cost nothing; mark_pass puts them back. The root
    module's span samples the counters at both its boundaries whatever the gap: the pass's own
    samples lie outside its window."""

    __slots__ = ("module", "hook", "pre", "post", "wrapper", "had_own", "own", "use_hooks", "__weakref__")
    wrapper: _native.ModuleForward | None  # declared for the type checker only: the slot holds it

    def __init__(self, module: Any, nid: int, coarse: bool, root: bool = False, hooks: bool = False) -> None:
        self.module = module
        self.pre = self.post = self.wrapper = None
        self.had_own, self.own = False, None
        self.use_hooks = hooks or not _wrappable(module)
        # on_thin holds this object only weakly: the hook lives in the module's hook dicts, and a
        # strong reference back would keep the module alive through its own hook.
        ref = weakref.ref(self)
        self.hook = _native.ModuleHook(nid, coarse, lambda: _thin(ref), root)

    def install(self) -> None:
        self.remove()
        self.hook.reset()
        if not self.use_hooks:
            d = self.module.__dict__
            self.had_own, self.own = "forward" in d, d.get("forward")
            try:
                wrapper = _native.ModuleForward(self.hook, self.module.forward)
                d["forward"] = wrapper
            except Exception:  # a forward that cannot be read or set: hooks instead
                self.had_own, self.own = False, None
                self.use_hooks = True
            else:
                self.wrapper = wrapper
                return
        self.pre = self.module.register_forward_pre_hook(self.hook)
        self.post = self.module.register_forward_hook(self.hook)

    @property
    def wrapped(self) -> bool:
        return self.wrapper is not None

    def reset(self) -> None:
        """For the next pass: a wrapped span only clears its thinned mark; hooks taken off go back on."""
        if self.wrapper is not None:
            self.hook.reset()
        elif self.pre is None:
            self.install()

    def remove(self) -> None:
        for handle in (self.pre, self.post):
            if handle is not None:
                handle.remove()
        self.pre = self.post = None
        if self.wrapper is not None:
            d = self.module.__dict__
            # Put back what the module had, unless its forward was set anew meanwhile (by the model
            # itself: that one stays, and our wrapper inside it only passes calls through from now on).
            if d.get("forward") is self.wrapper:
                if self.had_own:
                    d["forward"] = self.own
                else:
                    del d["forward"]
            self.wrapper, self.had_own, self.own = None, False, None

    def thin(self) -> None:
        """Called by the native hook: take off what a thinned module no longer needs (torch iterates
        over a copy of its hook dicts: safe inside a hook)."""
        if self.pre is not None:
            self.pre.remove()
            self.pre = None
        if self.hook.open <= 0 and self.post is not None:
            self.post.remove()
            self.post = None


def _wrappable(module: Any) -> bool:
    """Whether the module's forward can be wrapped as an instance attribute. A class that overrides
    __call__ (transformers' checkpointing layers) is wrapped too: torch reads the instance's forward
    in Module.__call__, which such a class calls, as it must for hooks to run at all."""
    return hasattr(module, "__dict__") and not _scripted(module)


def _scripted(module: Any) -> bool:
    """A TorchScript module: its forward is a compiled method and torch refuses hooks on it."""
    try:
        import torch
    except ImportError:  # pragma: no cover - ModuleHooks has no torch then
        return False
    return isinstance(module, torch.jit.ScriptModule)


PRIME_CALLS = 8  # calls of each kind (root, child) through a throwaway span before the first pass


def _prime() -> None:
    """warmprof's own cold paths taken before the first pass, not in it: a span's native enter and
    exit, the host-counter samples of a root boundary (every counter read: faults, RSS, threads,
    schedstat, rusage, CPU time) and a child's, run a few times through a throwaway wrapped callable
    that is no module (nothing of torch runs, so nothing of the model warms). Their first use pays
    page faults on warmprof's code and the kernel's first paths for those reads: warmprof's cost,
    which in the pass would be booked on the model (bench/observer.py). Inside the recording (the
    paths only run while it is on): their records lie before any pass's window."""
    if not _native.enabled():
        return
    for root in (True, False):
        span = _native.ModuleForward(_native.ModuleHook(name_id("warmprof:prime"), True, None, root), _noop)
        for _ in range(PRIME_CALLS):
            span()


def _noop() -> None:
    return None


def _thin(ref: "weakref.ref[_Hooked]") -> None:
    hooked = ref()
    if hooked is not None:
        hooked.thin()

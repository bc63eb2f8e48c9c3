"""The op view: a span per aten op (`op:aten.addmm.default`), nested in its module, with its arguments.

A TorchDispatchMode on the tracing thread sees every aten op the model's forward dispatches (after
CompositeImplicit ops decompose: F.linear arrives as aten.t and aten.addmm), records a structure
span around it and writes the call's arguments down (shapes, dtypes, strides, scalars: opspec.raw)
in call order, one list per pass. Attribution places each unexplained nanosecond in a (module, op)
site; the report keeps the first call's arguments of each site, so the probes can replay the op
(`warmprof probe --from`).

It is not free: a Python dispatch mode costs about 10-15 us per op on this class of machine, which is
why the default trace leaves it off and `--explain` turns it on. Its cost on the model is measured
like every instrument's (the instrumented steady passes, booked as profiler_overhead), and it cancels
in the (module, op) residuals, which compare the first pass with the seen re-run under the same
instruments. Ops run on other threads and inside a compiled region are not seen (a compiled model
gets no op view: the mode would change what dynamo traces).
"""

from __future__ import annotations

from typing import Any

from ..opspec import UNSUPPORTED as _UNREADABLE
from ..opspec import call_spec, raw
from ..timeline import STRUCTURE, begin, end, name_id
from .base import Instrument

PREFIX = "op:"
# Cheap unary ops a model rarely runs: the op view's own first-dispatch cost is calibrated on them.
COLD_PROBE_OPS = ("sinh", "cosh", "expm1", "log1p", "erfc", "asinh", "frac", "trunc", "sgn", "rad2deg", "deg2rad",
                  "erfinv", "lgamma", "digamma", "sinc", "logit", "exp2", "i0", "atanh", "acosh")


class AtenOps(Instrument):
    name = "aten_ops"

    def __init__(self, *, compiled: bool = False) -> None:
        super().__init__()
        self._mode: Any = None
        self._entered = False
        self.calls: dict[str, list[tuple[str, tuple, dict]]] = {}  # pass -> [(op, raw args, raw kwargs)]
        if compiled:
            self.reason = "compiled model: a dispatch mode would change what dynamo traces (compile causes are measured)"
            return
        try:
            import torch  # noqa: F401
            from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401
        except ImportError as e:
            self.reason = f"torch's dispatch modes are unavailable: {e}"

    def __enter__(self) -> "AtenOps":
        if self.reason:
            return self
        import sys

        had_dynamo = "torch._dynamo" in sys.modules
        _materialise_aten_ops()
        self._mode = _make_mode(self)
        self._mode.__enter__()
        self._entered = True
        try:
            _first_dispatch()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        if not had_dynamo and "torch._dynamo" in sys.modules:
            self.notes.append("torch's dispatch modes import torch._dynamo: done before the passes, so an import of "
                              "it in the model's own first pass is not seen under the op view")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._entered:
            self._entered = False
            self._mode.__exit__(None, None, None)
        self._mode = None

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        self.calls[name] = []  # a pass run again (the instrumented steady passes) starts its own list

    def call(self, pass_name: str, index: int) -> dict[str, Any] | None:
        """The JSON spec of the pass's index-th recorded op call (None: no such call)."""
        calls = self.calls.get(pass_name, [])
        if not 0 <= index < len(calls):
            return None
        op, args, kwargs = calls[index]
        return call_spec(op, args, kwargs)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out["ops_first_pass"] = len(self.calls.get("first", []))
        out["distinct_ops_first_pass"] = len({c[0] for c in self.calls.get("first", [])})
        return out

    def firsts(self, pass_name: str) -> tuple[dict[str, int], set[int]]:
        """In the pass's calls: each op's first call index, and the indices of the calls that start a
        call signature (op, shapes, dtypes, strides, scalars) not seen earlier in the pass."""
        first_of_op: dict[str, int] = {}
        new_signature: set[int] = set()
        seen: set[Any] = set()
        for k, (op, args, kwargs) in enumerate(self.calls.get(pass_name, [])):
            first_of_op.setdefault(op, k)
            key: Any = (op, args, tuple(sorted(kwargs.items())))
            try:
                hash(key)
            except TypeError:
                key = repr(key)
            if key not in seen:
                seen.add(key)
                new_signature.add(k)
        return first_of_op, new_signature

    def cold_dispatch_cost(self, exclude: set[str], ops: int = 9) -> dict[str, Any]:
        """ns the op view adds to an op's first dispatch under it, beyond a later one: on cheap
        unary ops the model did not run (`exclude`: op names), each warmed outside the mode first
        (so its kernel is not what is timed), then called twice under the mode; the median of
        (first - second). Run after the passes, outside any recording."""
        import torch

        from .. import _native

        x = torch.full((4,), 0.5)
        samples: list[float] = []
        self.current_pass = ""  # nothing of this is recorded as a pass's call
        mode = _make_mode(self)
        for name in COLD_PROBE_OPS:
            if len(samples) >= ops:
                break
            op = getattr(getattr(torch.ops.aten, name, None), "default", None)
            if op is None or str(op) in exclude:
                continue
            try:
                for _ in range(3):
                    op(x)
                with mode:
                    t0 = _native.now_ns()
                    op(x)
                    t1 = _native.now_ns()
                    op(x)
                    t2 = _native.now_ns()
            except RuntimeError:
                continue
            samples.append(max(0.0, (t1 - t0) - (t2 - t1)))
        if not samples:
            return {"ns": 0.0, "n": 0}
        samples.sort()
        return {"ns": samples[len(samples) // 2], "low": samples[0], "high": samples[-1], "n": len(samples)}


def _materialise_aten_ops() -> None:
    """Create torch's Python object of every aten op overload before the passes (about 0.1 s).

    Under a dispatch mode the dispatcher hands each op to Python as its OpOverload object, which
    torch creates on the op's first such call (a schema parse and a few Python objects: tens of
    microseconds each). That is the op view's own first-call cost, not the model's, and the
    instrumented steady passes never see it; made up front, it stays out of the first pass. A model
    that calls torch.ops.aten.<op> itself would have created the same objects: the only work moved."""
    import torch

    aten = torch.ops.aten
    for full in torch._C._dispatch_get_all_op_names():
        ns, _, rest = full.partition("::")
        if ns != "aten":
            continue
        name, _, overload = rest.partition(".")
        try:
            getattr(getattr(aten, name), overload or "default")
        except (AttributeError, RuntimeError):
            continue


def _first_dispatch() -> None:
    """One op through the mode before the passes: torch's first dispatch to a Python mode imports
    torch._dynamo (about 800 modules, most of a second here), which is the op view's cost, not the
    model's. A model that would import torch._dynamo in its own first pass does not pay that under
    the op view (the report's op rows come from a trace that says so in its notes)."""
    import torch

    torch.ops.aten.alias.default(torch.empty(0))  # no pass marked yet: not recorded as a call


def _make_mode(owner: AtenOps) -> Any:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    tensor_type, dtype_type, strided = torch.Tensor, torch.dtype, torch.strided

    def record(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        try:
            return (tuple(raw(a, tensor_type, dtype_type, strided) for a in args),
                    {k: raw(v, tensor_type, dtype_type, strided) for k, v in kwargs.items()})
        except Exception as e:  # recording never breaks the model: the call is kept as not replayable
            return ((_UNREADABLE, type(e).__name__, None),), {}
    ids: dict[Any, tuple[int, str]] = {}

    class _OpView(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            known = ids.get(func)
            if known is None:
                name = str(func)
                known = ids[func] = (name_id(PREFIX + name), name)
            nid, name = known
            kwargs = kwargs or {}
            calls = owner.calls.get(owner.current_pass)
            if calls is not None:
                calls.append((name, *record(args, kwargs)))
            begin(STRUCTURE, nid)
            try:
                return func(*args, **kwargs)
            finally:
                end(STRUCTURE, nid)

    return _OpView()

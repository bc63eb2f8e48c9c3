"""torch's profiler as the op view's observer (instruments/aten_ops.py): a session, the clock anchors
that map its times onto warmprof's, and its events turned into the calls a dispatch mode would see.

    Session.start() ... session.stop() -> Events (the profiler's result, read lazily)
    Anchors.take()      a group of anchor events, each between two native clock reads
    visible_ops(events, thread, lo, hi) -> [OpCall]  in call order

Which events are the model's ops: the events of the pass's thread, from the top, where a
CompositeImplicitAutograd op (aten::linear, aten::matmul, aten::contiguous) and anything that is not an
op (a record_function annotation) are looked through to the events inside them, and an op with a
kernel of its own is one call, whose own inner events (what its kernel calls) are not the model's.
That is what a TorchDispatchMode saw: it sat below autograd, where composite ops have decomposed.

Arguments come from the profiler's record of each input (shapes, strides and dtypes of tensors; the
values of scalars and of short scalar lists), read against the op's schema: a ScalarType is a dtype,
a Layout or MemoryFormat is kept as the mode kept it (dropped on replay), a Device is that of the
call's first tensor (the probes build on their own device anyway),
a str is not recorded by the profiler and is written down as its schema default.
"""

from __future__ import annotations

import bisect
from typing import Any, Callable, Iterator, NamedTuple

from .. import _native
from ..opspec import UNSUPPORTED
from ..system.torch_compat import kineto_cpu_config, record_function_fast

ANCHOR = "warmprof:anchor"
ANCHOR_TRIES = 12  # per anchor: the tightest pair of clock reads around one anchor event is kept
_T, _V, _L, _D, _X = 0, 1, 2, 3, UNSUPPORTED  # opspec's raw record kinds

# c10::ScalarType's numbering (serialized by TorchScript, so fixed): what the profiler records for a
# ScalarType argument. Names torch does not have here are skipped.
_SCALAR_TYPE_NAMES = ("uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex32",
                      "complex64", "complex128", "bool", "qint8", "quint8", "qint32", "bfloat16", "quint4x2",
                      "quint2x4", "bits1x8", "bits2x4", "bits4x2", "bits8", "bits16", "float8_e5m2", "float8_e4m3fn",
                      "float8_e5m2fnuz", "float8_e4m3fnuz", "uint16", "uint32", "uint64")


def scalar_types() -> dict[int, Any]:
    import torch

    out = {}
    for k, name in enumerate(_SCALAR_TYPE_NAMES):
        dt = getattr(torch, name, None)
        if isinstance(dt, torch.dtype):
            out[k] = dt
    return out


class OpCall(NamedTuple):
    name: str  # "aten.addmm.default", as torch names an OpOverload
    start_ns: int  # the profiler's clock
    end_ns: int
    args: tuple  # opspec raw records
    kwargs: dict


class Events:
    """A stopped session's result: its event tree, and (built on first need) each event's recorded
    inputs by correlation id, for what the tree does not carry (scalar lists)."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.roots = sorted(result.experimental_event_tree(), key=lambda e: e.start_time_ns)
        self._by_id: dict[int, Any] | None = None

    def __len__(self) -> int:
        n, stack = 0, list(self.roots)
        while stack:
            e = stack.pop()
            n += 1
            stack.extend(e.children)
        return n

    def recorded(self, correlation_id: int) -> Any:
        if self._by_id is None:
            self._by_id = {e.correlation_id(): e for e in self.result.events()}
        return self._by_id.get(correlation_id)


class Session:
    """torch's CPU profiler, on: input shapes and overload names recorded, nothing else."""

    def __init__(self) -> None:
        self.on = True

    @classmethod
    def start(cls) -> "Session":
        import torch._C._autograd as autograd
        from torch._C._profiler import ProfilerActivity

        config = kineto_cpu_config()  # RuntimeError, with the reason, where it records no overload names
        activities = {ProfilerActivity.CPU}
        autograd._prepare_profiler(config, activities)
        autograd._enable_profiler(config, activities)
        return cls()

    def stop(self, read: bool = True) -> Events | None:
        import torch._C._autograd as autograd

        if not self.on:
            return None
        self.on = False
        result = autograd._disable_profiler()
        return Events(result) if read else None


class Anchors:
    """Groups of anchor events: each try is a RecordFunction of warmprof's own between two reads of the
    native clock; the tightest try of a group ties the profiler's clock to warmprof's there."""

    def __init__(self) -> None:
        self.groups: list[list[tuple[int, int]]] = []
        self._events: list[Any] = []  # the anchor events, once read back, in the order they were taken

    def take(self) -> int:
        """One group of anchors now; its index."""
        record = record_function_fast()
        ticks = _native.now_ticks
        tries = []
        for _ in range(ANCHOR_TRIES):
            a = ticks()
            with record(ANCHOR):
                pass
            b = ticks()
            tries.append((a, b))
        self.groups.append(tries)
        return len(self.groups) - 1

    def mapping(self, events: Events) -> tuple[Callable[[int], int] | None, int | None, Events]:
        """(profiler ns -> warmprof ns, the anchors' thread id in the profiler's numbering, events):
        piecewise linear through each group's tightest anchor; (None, None, events) when the anchors
        are not all there."""
        found = [e for e in events.roots if e.name == ANCHOR]
        if len(found) != sum(len(g) for g in self.groups) or not found:
            return None, None, events
        self._events = found
        points: list[tuple[float, float]] = []  # (profiler ns, warmprof ns)
        k = 0
        for tries in self.groups:
            best = min(range(len(tries)), key=lambda i: tries[i][1] - tries[i][0])
            a, b = tries[best]
            ev = found[k + best]
            points.append(((ev.start_time_ns + ev.end_time_ns) / 2, (_native.ticks_to_ns(a) + _native.ticks_to_ns(b)) / 2))
            k += len(tries)
        points.sort()
        return _piecewise(points), found[0].start_tid, events

    def kineto_window(self, start_group: int, end_group: int) -> tuple[int, int]:
        """The profiler-clock window between the end of one group's anchors and the start of another's."""
        first_of = [sum(len(g) for g in self.groups[:i]) for i in range(len(self.groups))]
        lo = self._events[first_of[start_group] + len(self.groups[start_group]) - 1].end_time_ns
        hi = self._events[first_of[end_group]].start_time_ns
        return lo, hi


def _piecewise(points: list[tuple[float, float]]) -> Callable[[int], int]:
    xs = [p[0] for p in points]
    if len(points) == 1:
        off = points[0][1] - points[0][0]
        return lambda t: int(round(t + off))

    def to_ns(t: int) -> int:
        i = min(max(bisect.bisect_right(xs, t) - 1, 0), len(points) - 2)
        (x0, y0), (x1, y1) = points[i], points[i + 1]
        slope = (y1 - y0) / (x1 - x0) if x1 != x0 else 1.0
        return int(round(y0 + (t - x0) * slope))

    return to_ns


# -- which events are ops, and their arguments --

_kinds: dict[tuple[str, str], Any] = {}  # (qualified name, overload) -> None (look through) or _Schema


class _Arg(NamedTuple):
    name: str
    kind: str  # tensor | tensors | scalars | dtype | layout | memory_format | device | str | scalar | none
    kwarg_only: bool
    optional: bool
    default: Any
    has_default: bool


def _arg_kind(type_str: str) -> tuple[str, bool]:
    optional = type_str.startswith("Optional[")
    base = type_str[len("Optional["):-1] if optional else type_str
    if base == "Tensor":
        return "tensor", optional
    if base.startswith("List["):
        element = base[len("List["):-1]
        return ("tensors" if element in ("Tensor", "Optional[Tensor]") else "scalars"), optional
    named = {"ScalarType": "dtype", "Layout": "layout", "MemoryFormat": "memory_format", "Device": "device",
             "str": "str", "Generator": "none"}
    return named.get(base, "scalar"), optional


def _schema(qualified: str, overload: str) -> Any:
    """The op's arguments, or None for an event to look through (not an op, or a composite one)."""
    key = (qualified, overload)
    if key in _kinds:
        return _kinds[key]
    import torch

    got: Any = None
    try:
        schema = torch._C._get_schema(qualified, overload)
        full = f"{qualified}.{overload}" if overload else qualified
        if not torch._C._dispatch_has_kernel_for_dispatch_key(full, "CompositeImplicitAutograd"):
            got = []
            for a in schema.arguments:
                kind, optional = _arg_kind(str(getattr(a, "real_type", a.type)))
                has_default = a.has_default_value()
                got.append(_Arg(a.name, kind, a.kwarg_only, optional, a.default_value if has_default else None,
                                has_default))
    except (RuntimeError, AttributeError, TypeError):
        got = None
    _kinds[key] = got
    return got


def visible_ops(events: Events, thread: int | None, lo: int, hi: int) -> list[OpCall]:
    """The calls a dispatch mode would have seen on `thread` in [lo, hi] (profiler ns), in order."""
    dtypes = scalar_types()
    out: list[OpCall] = []
    for root in events.roots:
        if root.start_time_ns < lo or root.end_time_ns > hi or root.start_tid != thread or root.name == ANCHOR:
            continue
        for ev in _walk(root):
            out.append(_call(ev, _kinds[_key(ev)], events, dtypes))
    return out


def _key(ev: Any) -> tuple[str, str]:
    return ev.name, getattr(ev, "overload_name", "") or ""


def _walk(ev: Any) -> Iterator[Any]:
    args = _schema(*_key(ev)) if "::" in ev.name else None
    if args is not None:
        yield ev
        return
    for child in sorted(ev.children, key=lambda e: e.start_time_ns):
        yield from _walk(child)


def _op_name(ev: Any) -> str:
    ns, _, op = ev.name.partition("::")
    return f"{ns}.{op}.{getattr(ev, 'overload_name', '') or 'default'}"


def _call(ev: Any, schema: list[_Arg], events: Events, dtypes: dict[int, Any]) -> OpCall:
    name = _op_name(ev)
    try:
        inputs = list(ev.extra_fields.inputs)
        if len(inputs) != len(schema):
            raise ValueError(f"{len(inputs)} inputs recorded for {len(schema)} arguments")
        recorded = None
        device = next((str(v.device) for v in inputs if hasattr(v, "sizes") and hasattr(v, "device")), "cpu")
        if any(a.kind == "scalars" for a in schema):
            recorded = events.recorded(ev.correlation_id)
        args, kwargs = [], {}
        for i, (a, v) in enumerate(zip(schema, inputs)):
            r = _raw(a, v, i, recorded, dtypes, device)
            if a.kwarg_only:
                kwargs[a.name] = r
            else:
                args.append(r)
        return OpCall(name, ev.start_time_ns, ev.end_time_ns, tuple(args), kwargs)
    except Exception as e:  # reading never breaks the trace: the call is kept as not replayable
        return OpCall(name, ev.start_time_ns, ev.end_time_ns, ((_X, type(e).__name__, None),), {})


def _raw(a: _Arg, v: Any, i: int, recorded: Any, dtypes: dict[int, Any], device: str) -> Any:
    if a.kind == "tensor":
        return (_V, None) if v is None else _tensor(v)
    if a.kind == "tensors":
        if not isinstance(v, list):
            return (_X, "Tensor[]", None)
        return (_L, tuple((_V, None) if t is None else _tensor(t) for t in v))
    if a.kind == "scalars":
        got = recorded.concrete_inputs()[i] if recorded is not None else None
        if isinstance(got, list):
            return (_L, tuple(_scalar(x) for x in got))
        if recorded is not None and recorded.dtypes()[i] == "" and a.optional:
            return (_V, None)
        return (_X, "scalar list (not recorded by torch's profiler)", None)
    if a.kind == "dtype":
        if v is None:
            return (_V, None)
        return (_D, dtypes[v]) if isinstance(v, int) and v in dtypes else (_X, "ScalarType", None)
    if a.kind in ("layout", "memory_format"):
        return (_V, None) if v is None else (_X, a.kind, v)
    if a.kind == "device":
        return (_X, "device", device)
    if a.kind == "str":
        return (_V, a.default) if a.has_default else (_X, "str (not recorded by torch's profiler)", None)
    if a.kind == "none":
        return (_V, None)
    return _scalar(v)


def _scalar(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return (_V, v)
    return (_X, type(v).__name__, None)


def _tensor(meta: Any) -> Any:
    import torch

    layout = getattr(meta, "layout", torch.strided)
    if layout is not torch.strided:
        return (_X, f"{layout} Tensor", None)
    sizes, strides = tuple(int(d) for d in meta.sizes), tuple(int(s) for s in meta.strides)
    return (_T, sizes, meta.dtype, None if _contiguous(sizes, strides) else strides)


def _contiguous(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """As torch's is_contiguous: row-major strides, size-1 dimensions and empty tensors free."""
    if len(strides) != len(sizes):
        return False
    if 0 in sizes:
        return True
    expected = 1
    for d, s in zip(reversed(sizes), reversed(strides)):
        if d == 1:
            continue
        if s != expected:
            return False
        expected *= d
    return True

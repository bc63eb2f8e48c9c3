"""One aten op call written down as data, and built again from it (the op view -> the op probes).

The op view (instruments/aten_ops.py) records each op's arguments in the cheap raw form of `raw`
while the pass runs; `spec` turns that into plain JSON once the pass is over; the probes
(probes/aten.py) `build` fresh arguments of the same shapes, dtypes and strides from the JSON and
call the op again in another process. Values are never recorded: float tensors are rebuilt with
random values, integer tensors with zeros (valid indices), bool tensors with True.

A spec: {"op": "aten.addmm.default", "args": [ARG...], "kwargs": {name: ARG}} where ARG is one of
  {"tensor": [shape], "dtype": "float32", "stride": [..]}   (stride only when not contiguous)
  {"value": int | float | bool | str | None}
  {"list": [ARG...]}
  {"dtype": "float32"} | {"device": "cpu"}
  {"unsupported": "TypeName"}                               (the op cannot be replayed)
"""

from __future__ import annotations

import math
from typing import Any

from .errors import InputError

# Raw records (built inside the pass, so cheap: tuples, no strings beyond the dtype's own repr).
_T, _V, _L, _D, _X = 0, 1, 2, 3, 4
UNSUPPORTED = _X


def raw(value: Any, tensor_type: type[Any], dtype_type: type, strided: Any = None) -> Any:
    """The cheap in-pass record of one argument (see spec_of for the JSON form). strided: torch.strided;
    a tensor of any other layout (sparse, CSR) or a nested one is recorded as unsupported, never asked
    for sizes or strides it does not have."""
    if isinstance(value, tensor_type):
        if strided is None:  # callers outside the hot path
            import torch

            strided = torch.strided
        if value.layout is not strided or value.is_nested:
            return (_X, "nested Tensor" if value.is_nested else f"{value.layout} Tensor", None)
        contiguous = value.is_contiguous()
        return (_T, tuple(value.shape), value.dtype, None if contiguous else tuple(value.stride()))
    if value is None or isinstance(value, (bool, int, float, str)):
        return (_V, value)
    if isinstance(value, (list, tuple)):
        return (_L, tuple(raw(v, tensor_type, dtype_type, strided) for v in value))
    if isinstance(value, dtype_type):
        return (_D, value)
    kind = type(value).__name__
    return (_X, kind, str(value) if kind in ("device", "layout", "memory_format") else None)


def spec_of(r: Any) -> dict[str, Any]:
    """JSON form of one raw argument record."""
    kind = r[0]
    if kind == _T:
        out: dict[str, Any] = {"tensor": [int(d) for d in r[1]], "dtype": dtype_name(r[2])}
        if r[3] is not None:
            out["stride"] = [int(s) for s in r[3]]
        return out
    if kind == _V:
        v = r[1]
        if isinstance(v, float) and not math.isfinite(v):
            return {"value": repr(v), "float": True}
        return {"value": v}
    if kind == _L:
        return {"list": [spec_of(x) for x in r[1]]}
    if kind == _D:
        return {"dtype": dtype_name(r[1])}
    if r[1] == "device":
        return {"device": str(r[2])}
    if r[1] in ("layout", "memory_format"):
        return {"value": None, "dropped": f"{r[1]} {r[2]}"}
    return {"unsupported": r[1]}


def call_spec(op: str, raw_args: tuple, raw_kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"op": op, "args": [spec_of(a) for a in raw_args], "kwargs": {k: spec_of(v) for k, v in raw_kwargs.items()}}


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def short_op(op: str) -> str:
    """aten.addmm.default -> addmm; aten.add.Tensor -> add.Tensor (the overload only when it says something)."""
    parts = op.split(".")
    if len(parts) >= 3 and parts[0] == "aten":
        return parts[1] if parts[2] == "default" else f"{parts[1]}.{parts[2]}"
    return op


def label(spec: Any) -> str:
    """A short human form of a call's tensor arguments: 'f32[64,128], f32[128,128]*' (* not contiguous);
    '(malformed call)' for a spec that is not one (a hand-edited or hostile report)."""
    if check(spec):
        return "(malformed call)"
    parts = []
    for a in spec.get("args", []):
        parts.extend(_labels(a))
    return ", ".join(parts)


_SHORT_DTYPE = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int64": "i64",
                "int32": "i32", "bool": "b8", "uint8": "u8", "int8": "i8"}


def _labels(a: dict[str, Any]) -> list[str]:
    if "tensor" in a:
        dims = ",".join(str(d) for d in a["tensor"])
        return [f"{_SHORT_DTYPE.get(a['dtype'], a['dtype'])}[{dims}]" + ("*" if "stride" in a else "")]
    if "list" in a:
        return [x for item in a["list"] for x in _labels(item)]
    return []


def check(spec: Any) -> str:
    """'' when `spec` has the form of a call spec (see the module doc), else what is wrong with it."""
    if not isinstance(spec, dict) or not isinstance(spec.get("op"), str):
        return "not a call spec (an object with an 'op' name)"
    args, kwargs = spec.get("args", []), spec.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return "'args' must be a list and 'kwargs' an object"
    for a in [*args, *kwargs.values()]:
        why = _check_arg(a, 0)
        if why:
            return why
    return ""


def _check_arg(a: Any, depth: int) -> str:
    if depth > 8 or not isinstance(a, dict):
        return f"an argument must be an object like {{'tensor': [..], 'dtype': ..}}, got {a!r:.60}"
    if "tensor" in a:
        shape, stride = a["tensor"], a.get("stride")
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
            return f"a tensor's shape must be a list of sizes, got {shape!r:.60}"
        if stride is not None and not (isinstance(stride, list) and len(stride) == len(shape)
                                       and all(type(d) is int and d >= 0 for d in stride)):
            return f"a tensor's stride must be a list of as many non-negative ints as its shape, got {stride!r:.60}"
        return "" if isinstance(a.get("dtype"), str) else "a tensor needs a dtype name"
    if "list" in a:
        if not isinstance(a["list"], list):
            return "a 'list' argument must hold a list"
        return next((w for w in (_check_arg(x, depth + 1) for x in a["list"]) if w), "")
    if "value" in a or "unsupported" in a or "device" in a:
        return ""
    if "dtype" in a:
        return "" if isinstance(a["dtype"], str) else "a dtype argument must name a dtype"
    return f"unknown argument form {sorted(a)!r:.60}"


MAX_REPLAY_BYTES = 2 << 30  # a replayed call's tensors, all together (a probe's new shapes are up to 2x larger)


def storage_bytes(spec: dict[str, Any]) -> int:
    """Bytes the rebuilt tensors of a well-formed call spec take (each its strided storage)."""
    def one(a: dict[str, Any]) -> int:
        if "tensor" in a:
            shape = a["tensor"]
            stride = a.get("stride") or _contiguous(shape)
            elems = 0 if 0 in shape else 1 + sum((d - 1) * st for d, st in zip(shape, stride))
            return elems * _ITEM_BYTES.get(a.get("dtype"), 8)
        return sum(one(x) for x in a.get("list", []))

    return sum(one(a) for a in [*spec.get("args", []), *spec.get("kwargs", {}).values()])


# Keyed by str, looked up by a spec's dtype, which may be absent (None: the default)
_ITEM_BYTES: dict[str | None, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
    "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16}


def _contiguous(shape: list[int]) -> list[int]:
    stride, acc = [], 1
    for d in reversed(shape):
        stride.append(acc)
        acc *= max(d, 1)
    return stride[::-1]


MAX_SIZE_ARGUMENT = 1 << 24  # an int argument of an op without a meta kernel (sizes, repeats): larger is refused


def allocation(spec: dict[str, Any]) -> str:
    """'' when a replay of this (replayable) call stays within MAX_REPLAY_BYTES, inputs and outputs
    together, else why not. A hand-edited report's call can ask an op for 40 GB through its size
    arguments (new_empty, expand then a copy, repeat) with small inputs: the outputs are found by
    running the call on torch's meta device (shapes only, no memory, nothing of the real device
    warmed); an op without a meta kernel is refused an int argument past MAX_SIZE_ARGUMENT."""
    import torch

    inputs = storage_bytes(spec)
    try:
        op = resolve_op(spec["op"])
        args, kwargs = build(spec, torch.device("meta"))
        outputs: int | None = tensor_bytes(op(*args, **kwargs))
    except InputError:
        raise
    except Exception:  # no meta kernel, or the op refuses these arguments (the child will say so)
        outputs = None
    if outputs is None:
        big = max(_ints(spec), default=0)
        if big > MAX_SIZE_ARGUMENT:
            return (f"it takes an integer argument of {big:,} and its output size cannot be checked (no meta kernel): "
                    f"over the {MAX_SIZE_ARGUMENT:,} a replay takes unchecked")
        # a size list of small integers can still ask for a huge tensor (new_empty [100000, 100000])
        product = max(_int_list_products(spec), default=0)
        if product > MAX_SIZE_ARGUMENT:
            return (f"it takes a list of integers whose product passes {MAX_SIZE_ARGUMENT:,} (a size: at least "
                    f"{product:,} elements) and its output size cannot be checked (no meta kernel): over what a replay "
                    "takes unchecked")
        return ""
    if inputs + outputs > MAX_REPLAY_BYTES:
        return (f"its inputs and outputs take {(inputs + outputs) / 2**30:.1f} GiB, over the "
                f"{MAX_REPLAY_BYTES / 2**30:.0f} GiB a replay may allocate")
    return ""


def tensor_bytes(x: Any) -> int:
    """Bytes of the tensors in x (a tensor, or lists, tuples and dicts of them), by their sizes."""
    import torch

    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(tensor_bytes(v) for v in x)
    if isinstance(x, dict):
        return sum(tensor_bytes(v) for v in x.values())
    return 0


def _ints(spec: dict[str, Any]) -> list[int]:
    found: list[int] = []

    def walk(a: Any) -> None:
        if isinstance(a, dict):
            v = a.get("value")
            if type(v) is int:
                found.append(abs(v))
            for x in a.get("list", []) if isinstance(a.get("list"), list) else []:
                walk(x)

    for a in [*spec.get("args", []), *spec.get("kwargs", {}).values()]:
        walk(a)
    return found


def _int_list_products(spec: dict[str, Any]) -> list[int]:
    """The product of each list argument made only of integers (a size, a repeat count per dimension),
    nested lists included."""
    found: list[int] = []

    def walk(a: Any) -> None:
        if not isinstance(a, dict):
            return
        items = a.get("list")
        if not isinstance(items, list):
            return
        values = [x.get("value") if isinstance(x, dict) else None for x in items]
        ints = [v for v in values if type(v) is int]
        if items and len(ints) == len(values):
            product = 1
            for v in ints:
                product *= abs(v)  # a 0 in a size: an empty tensor, nothing to allocate
                if product > MAX_SIZE_ARGUMENT:  # past the cap: the figure says so without growing huge
                    break
            found.append(product)
        for x in items:
            walk(x)

    for a in [*spec.get("args", []), *spec.get("kwargs", {}).values()]:
        walk(a)
    return found


def replayable(spec: dict[str, Any]) -> str:
    """'' when build() can rebuild the call, else why not."""
    malformed = check(spec)
    if malformed:
        return f"malformed call spec: {malformed}"
    nbytes = storage_bytes(spec)
    if nbytes > MAX_REPLAY_BYTES:
        return f"its tensors take {nbytes / 2**30:.1f} GiB, over the {MAX_REPLAY_BYTES / 2**30:.0f} GiB a replay may allocate"
    def why(a: dict[str, Any]) -> str:
        if "unsupported" in a:
            return f"an argument of type {a['unsupported']} cannot be rebuilt"
        if "list" in a:
            return next((w for w in map(why, a["list"]) if w), "")
        return ""

    for a in [*spec.get("args", []), *spec.get("kwargs", {}).values()]:
        w = why(a)
        if w:
            return w
    return ""


def resolve_op(name: str) -> Any:
    """torch.ops.aten.<name>.<overload> from 'aten.addmm.default', 'addmm.default' or 'addmm'."""
    import torch

    parts = name.split(".")
    if parts and parts[0] == "aten":
        parts = parts[1:]
    if not parts or len(parts) > 2 or not all(p.isidentifier() for p in parts):
        raise InputError(f"{name!r} is not an aten op name (e.g. aten.addmm.default, layer_norm)")
    packet = aten_packet(parts[0])
    overload = parts[1] if len(parts) == 2 else "default"
    if overload.startswith("__") or overload not in _overloads(packet):
        have = ", ".join(_overloads(packet))
        raise InputError(f"aten.{parts[0]} has no overload {overload!r} (it has: {have})")
    op = getattr(packet, overload, None)
    if not isinstance(op, torch._ops.OpOverload):
        raise InputError(f"aten.{parts[0]}.{overload} is not an op overload")
    return op


def aten_packet(name: str) -> Any:
    """torch.ops.aten.<name>, only when it is an op (its overload packet): not any attribute of the
    namespace (`__class__`, `__init__` ended in an AttributeError traceback, and a report's op name
    must never reach more than torch's ops)."""
    import torch

    if not name.isidentifier() or name.startswith("__"):
        raise InputError(f"torch has no aten op named {name!r}")
    try:
        packet = getattr(torch.ops.aten, name)
    except (AttributeError, RuntimeError):
        packet = None
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        raise InputError(f"torch has no aten op named {name!r}")
    return packet


def _overloads(packet: Any) -> list[str]:
    try:
        return list(packet.overloads())
    except (AttributeError, RuntimeError, TypeError):
        return []


def build(spec: dict[str, Any], device: Any) -> tuple[list[Any], dict[str, Any]]:
    """Fresh arguments for the call `spec` on `device`: same shapes, dtypes and strides, new values."""
    why = replayable(spec)
    if why:
        raise InputError(f"cannot replay {spec.get('op', '?')}: {why}")
    try:
        args = [_build(a, device) for a in spec.get("args", [])]
        kwargs = {k: _build(v, device) for k, v in spec.get("kwargs", {}).items()}
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"malformed op spec for {spec.get('op', '?')}: {type(e).__name__}: {e}") from None
    return args, kwargs


def _build(a: dict[str, Any], device: Any) -> Any:
    import torch

    if "tensor" in a:
        shape = [int(d) for d in a["tensor"]]
        dtype = _dtype(a["dtype"])
        stride = [int(s) for s in a.get("stride") or _contiguous(shape)]
        # The storage the strides reach, filled, then viewed with the recorded strides: a broadcast
        # (stride 0) or transposed argument is rebuilt as one, without a second full-size copy.
        elems = 0 if 0 in shape else 1 + sum((d - 1) * st for d, st in zip(shape, stride))
        base = torch.empty(elems, dtype=dtype, device=device)
        if dtype.is_floating_point or dtype.is_complex:
            base.normal_()
        elif dtype == torch.bool:
            base.fill_(True)
        else:
            base.zero_()
        return base.as_strided(shape, stride)
    if "list" in a:
        return [_build(x, device) for x in a["list"]]
    if "dtype" in a and len(a) == 1:
        return _dtype(a["dtype"])
    if "device" in a:
        return torch.device(device)
    if a.get("float"):
        return float(a["value"])
    return a["value"]


def _dtype(name: str) -> Any:
    import torch

    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype):
        raise InputError(f"unknown dtype {name!r} in an op spec")
    return dt

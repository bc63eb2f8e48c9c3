"""Op names (with an optional shape) -> opspec call specs: `layer_norm`, `conv2d:8x3x64x64`, `aten.gelu`.

A small table of common ops, each building a consistent call from its main input's shape (the
other tensors derived from it), plus any unary or binary pointwise op (torch's `pointwise` tag):
every tensor argument takes the given shape. Anything else is an InputError naming what is accepted.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from ..errors import InputError

DEFAULT_POINTWISE_SHAPE = (64, 128)


def _t(shape: list[int], dtype: str) -> dict[str, Any]:
    return {"tensor": [int(d) for d in shape], "dtype": dtype}


def _v(value: Any) -> dict[str, Any]:
    return {"value": value}


def _ints(values: list[int]) -> dict[str, Any]:
    return {"list": [_v(v) for v in values]}


def _conv(nd: int) -> Callable[[list[int], str], list]:
    def build(s: list[int], dt: str) -> list:
        out = s[1] * 2
        return [_t(s, dt), _t([out, s[1]] + [3] * nd, dt), _t([out], dt), _ints([1] * nd), _ints([1] * nd),
                _ints([1] * nd), _v(1)]
    return build


def _norm(s: list[int], dt: str) -> list:
    return [_t(s, dt), _ints([s[-1]]), _t([s[-1]], dt), _t([s[-1]], dt), _v(1e-5)]


def _batch_norm(s: list[int], dt: str) -> list:
    c = [s[1]]
    return [_t(s, dt), _t(c, dt), _t(c, dt), _t(c, dt), _t(c, dt), _v(False), _v(0.1), _v(1e-5), _v(True)]


def _embedding(s: list[int], dt: str) -> list:
    return [_t([4096, 256], dt), _t(s, "int64")]


# short name -> (overload, main-input rank (None: any >= 1), default main shape, what the shape is, builder)
TABLE: dict[str, tuple[str, int | None, tuple[int, ...], str, Callable[[list[int], str], list]]] = {
    "conv1d": ("default", 3, (8, 32, 256), "N x C x L", _conv(1)),
    "conv2d": ("default", 4, (8, 32, 28, 28), "N x C x H x W", _conv(2)),
    "conv3d": ("default", 5, (2, 8, 8, 16, 16), "N x C x D x H x W", _conv(3)),
    "linear": ("default", None, (64, 128), "... x in", lambda s, dt: [_t(s, dt), _t([s[-1], s[-1]], dt), _t([s[-1]], dt)]),
    "addmm": ("default", 2, (64, 128), "m x k (bias [k], mat2 [k, k])",
              lambda s, dt: [_t([s[1]], dt), _t(s, dt), _t([s[1], s[1]], dt)]),
    "mm": ("default", 2, (64, 128), "m x k (mat2 [k, k])", lambda s, dt: [_t(s, dt), _t([s[1], s[1]], dt)]),
    "matmul": ("default", None, (64, 128), "... x k (other [k, k])", lambda s, dt: [_t(s, dt), _t([s[-1], s[-1]], dt)]),
    "bmm": ("default", 3, (8, 64, 128), "b x m x k (mat2 [b, k, k])",
            lambda s, dt: [_t(s, dt), _t([s[0], s[2], s[2]], dt)]),
    "baddbmm": ("default", 3, (8, 64, 128), "b x m x k (self [b, m, k], batch2 [b, k, k])",
                lambda s, dt: [_t(s, dt), _t(s, dt), _t([s[0], s[2], s[2]], dt)]),
    "layer_norm": ("default", None, (64, 128), "... x C (normalized over C)", _norm),
    "native_layer_norm": ("default", None, (64, 128), "... x C (normalized over C)",
                          lambda s, dt: _norm(s, dt)[:4] + [_v(1e-5)]),
    "batch_norm": ("default", 4, (8, 32, 28, 28), "N x C x H x W (inference)", _batch_norm),
    "embedding": ("default", None, (8, 128), "indices (weight [4096, 256])", _embedding),
    "softmax": ("int", None, (64, 128), "... (over the last dim)", lambda s, dt: [_t(s, dt), _v(-1)]),
    "_softmax": ("default", None, (64, 128), "... (over the last dim)", lambda s, dt: [_t(s, dt), _v(-1), _v(False)]),
    "log_softmax": ("int", None, (64, 128), "... (over the last dim)", lambda s, dt: [_t(s, dt), _v(-1)]),
    "_log_softmax": ("default", None, (64, 128), "... (over the last dim)",
                     lambda s, dt: [_t(s, dt), _v(-1), _v(False)]),
    "scaled_dot_product_attention": ("default", 4, (2, 8, 128, 64), "B x H x L x D (q, k and v alike)",
                                     lambda s, dt: [_t(s, dt), _t(s, dt), _t(s, dt)]),
}
_SHAPE = re.compile(r"[1-9][0-9]{0,8}(x[1-9][0-9]{0,8}){0,7}")


def split_names(ops: Any) -> list[str]:
    """'conv2d,layer_norm gelu' or ['conv2d', 'layer_norm:64x128'] -> the names, in order."""
    if isinstance(ops, str):
        ops = [ops]
    try:
        items = list(ops)
    except TypeError:
        raise InputError(f"ops must be op names or call specs, got {ops!r}") from None
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise InputError(f"an op must be a name like 'layer_norm' or 'conv2d:8x3x64x64', got {item!r}")
        out += [p for p in re.split(r"[,\s]+", item) if p]
    return out


def accepted() -> str:
    """What --ops takes, for error messages."""
    return (f"aten ops with a default shape ({', '.join(sorted(TABLE))}), any unary or binary pointwise aten op "
            "(gelu, relu, silu, add, mul, ...), each optionally with a shape (layer_norm:64x128)")


def parse_shape(name: str, text: str) -> list[int]:
    if not _SHAPE.fullmatch(text):
        raise InputError(f"{name}: bad shape {text!r}: give sizes joined by x, like 64x128 or 8x3x224x224")
    return [int(d) for d in text.split("x")]


def call_for(name: str, dtype: str = "float32") -> dict[str, Any]:
    """The call spec for 'op' or 'op:SHAPE' (SHAPE = the main input's sizes, 64x128)."""
    from .. import opspec

    op_name, sep, shape_text = name.partition(":")
    shape = parse_shape(name, shape_text) if sep else None
    parts = op_name.split(".")
    if parts and parts[0] == "aten":
        parts = parts[1:]
    if not parts or len(parts) > 2 or not all(p.isidentifier() for p in parts):
        raise InputError(f"{name!r} is not an op name: give {accepted()}")
    entry = TABLE.get(parts[0])
    if entry is not None and (len(parts) == 1 or parts[1] == entry[0]):
        overload, rank, default, what, build = entry
        shape = shape or list(default)
        if (rank is not None and len(shape) != rank) or (rank is None and len(shape) < 1):
            raise InputError(f"{name}: {parts[0]} takes a {rank}-d main input ({what}), got {len(shape)}-d")
        op = f"aten.{parts[0]}.{overload}"
        opspec.resolve_op(op)  # an op this torch does not have is refused here, not in the child
        return {"op": op, "args": build(shape, dtype), "kwargs": {}}
    overload = parts[1] if len(parts) == 2 else _default_overload(parts[0])
    op = opspec.resolve_op(f"aten.{parts[0]}.{overload}")
    return _pointwise(op, f"aten.{parts[0]}.{overload}", shape or list(DEFAULT_POINTWISE_SHAPE), dtype)


def _default_overload(name: str) -> str:
    from .. import opspec

    try:
        have = opspec.aten_packet(name).overloads()
    except InputError:
        raise InputError(f"torch has no aten op named {name!r}: the probe takes {accepted()}") from None
    return next((o for o in ("Tensor", "default", "self", "Tensor_Scalar") if o in have), "default")


def _pointwise(op: Any, name: str, shape: list[int], dtype: str) -> dict[str, Any]:
    """Every tensor argument at `shape`; required scalars 1 (a bool condition tensor is all True)."""
    import torch

    if torch.Tag.pointwise not in op.tags:
        raise InputError(f"{name} has no default shapes and is not a pointwise op: the probe takes {accepted()}; "
                         "or probe the model's own calls with `warmprof probe --from REPORT.json`")
    args, tensors = [], 0
    for a in op._schema.arguments:
        if a.kwarg_only or a.has_default_value():
            continue
        kind = str(a.type)
        if kind == "Tensor":
            args.append(_t(shape, "bool" if a.name == "condition" else dtype))
            tensors += 1
        elif kind == "Scalar" or kind == "float":
            args.append(_v(1.0))
        elif kind == "int":
            args.append(_v(1))
        else:
            raise InputError(f"{name}: cannot make a default call (argument {a.name} of type {kind}): the probe takes "
                             f"{accepted()}")
    if not 1 <= tensors <= 3:
        raise InputError(f"{name} is not a unary or binary pointwise op on tensors: the probe takes {accepted()}")
    return {"op": name, "args": args, "kwargs": {}}

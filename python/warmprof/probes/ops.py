"""The probed ops, their never-seen shapes, and the matched-output-size pairs (after the MPS study).

Shapes are odd sizes nothing else in a process is likely to have run; each op's first listed shape
is its op-cold call, the rest are new shapes of an op already warmed at another shape.
"""

from __future__ import annotations

import math

from ..errors import InputError

OPS = ("matmul", "softmax", "elementwise")

# matmul: (m, k, n) for [m, k] @ [k, n]; softmax and elementwise: (rows, cols), softmax over cols.
NEW_SHAPES: dict[str, list[tuple[int, ...]]] = {
    "matmul": [(96, 160, 224), (200, 136, 168), (328, 296, 264), (456, 392, 440), (152, 248, 344), (392, 184, 120)],
    "softmax": [(192, 320), (264, 712), (520, 392), (136, 1160), (408, 248), (312, 584)],
    "elementwise": [(176, 336), (248, 728), (504, 408), (152, 1144), (424, 264), (296, 568)],
}
# Equal output element count (262144), different shape: both paying means keyed on shape, not size.
MATCHED_PAIRS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "matmul": ((512, 512, 512), (256, 512, 1024)),
    "softmax": ((512, 512), (256, 1024)),
    "elementwise": ((512, 512), (256, 1024)),
}
DESCRIPTION = {
    "matmul": "[m, k] @ [k, n]",
    "softmax": "softmax over the last dim of [rows, cols]",
    "elementwise": "x * 2 + 1 on [rows, cols] (two pointwise ops eager, one fused kernel compiled)",
}
MAX_SHAPES_PER_OP = min(len(v) for v in NEW_SHAPES.values())


def parse_ops(ops) -> tuple[str, ...]:
    if isinstance(ops, str):
        ops = (ops,)
    try:
        names = tuple(dict.fromkeys(ops))  # keep order, drop repeats
    except TypeError:
        raise InputError(f"ops must be a list of op names ({', '.join(OPS)}), got {ops!r}") from None
    if not names:
        raise InputError(f"no ops to probe: give one or more of {', '.join(OPS)}")
    for name in names:
        if name not in OPS:
            raise InputError(f"unknown op {name!r}: the probes know {', '.join(OPS)}")
    return names


def input_shapes(op: str, shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    if op == "matmul":
        m, k, n = shape
        return [(m, k), (k, n)]
    return [tuple(shape)]


def output_elems(op: str, shape: tuple[int, ...]) -> int:
    if op == "matmul":
        return shape[0] * shape[2]
    return math.prod(shape)


def working_set_elems(op: str, shape: tuple[int, ...]) -> int:
    """Inputs plus output: the most a first call could need fresh (packing buffers, temporaries, output)."""
    return sum(math.prod(s) for s in input_shapes(op, shape)) + output_elems(op, shape)


def label(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape)


# The op bodies, written once for torch and once for array modules (CuPy). Module-level functions:
# torch.compile caches on their code objects.
def matmul(a, b):
    return a @ b


def softmax_torch(x):
    import torch

    return torch.softmax(x, dim=-1)


def softmax_array(x, xp):
    shifted = x - x.max(axis=-1, keepdims=True)
    e = xp.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


def elementwise(x):
    return x * 2.0 + 1.0


def trivial_add(a, b):
    return a + b


def seq_matmul(x, w):
    """The bucketing sweep's [seq, d] @ [d, d]: its own code object, so its graphs are counted alone."""
    return x @ w

"""New shapes of a recorded op call: the same call with its tensors' sizes changed consistently.

Pure functions over opspec call specs (no torch). A perturbation picks one tensor argument (the
largest rank first, in argument order) and one of its dims, and changes that dim in every tensor
that has the same size there (the leading batch of q, k and v together), or in that tensor alone.
The op decides which perturbations it accepts: the child tries them in order and drops those
that raise (see aten_child.py).
"""

from __future__ import annotations

import copy
import math
from typing import Any, Iterator

GROWTH = (1.25, 1.5, 1.75)  # new sizes: never-seen, near the recorded one, distinct from each other
ODD = (1, 3, 5)  # an odd offset keeps the new sizes off any power of two a model already ran


def new_sizes(size: int) -> list[int]:
    """Three sizes a little above `size`, distinct and never equal to it (1 -> 3, 5, 7)."""
    out: list[int] = []
    for g, odd in zip(GROWTH, ODD):
        n = int(math.ceil(size * g)) + odd
        while n in out or n == size:
            n += 2
        out.append(n)
    return out


def tensors(spec: dict[str, Any]) -> list[tuple[tuple, dict[str, Any]]]:
    """(path, tensor ARG) for every tensor in the call's args and kwargs, in order, lists included."""
    found: list[tuple[tuple, dict[str, Any]]] = []

    def walk(a: Any, path: tuple) -> None:
        if isinstance(a, dict) and "tensor" in a:
            found.append((path, a))
        elif isinstance(a, dict) and "list" in a:
            for i, x in enumerate(a["list"]):
                walk(x, path + ("list", i))

    for i, a in enumerate(spec.get("args", [])):
        walk(a, ("args", i))
    for k, a in spec.get("kwargs", {}).items():
        walk(a, ("kwargs", k))
    return found


def perturbations(spec: dict[str, Any]) -> Iterator[tuple[str, list[tuple[tuple, int]], int]]:
    """(what, [(tensor path, dim)], the size there now) in the order to try: for each tensor of rank >= 1 (largest rank
    first), its leading dim shared, alone, then its last dim shared, alone; repeats dropped."""
    ts = [(p, a) for p, a in tensors(spec) if a["tensor"]]
    order = sorted(range(len(ts)), key=lambda i: -len(ts[i][1]["tensor"]))
    seen: set[tuple] = set()
    for i in order:
        path, a = ts[i]
        rank = len(a["tensor"])
        for dim, where in ((0, "leading"), (rank - 1, "last")):
            size = a["tensor"][dim]
            shared = [(p, d) for p, b in ts for d in ([0] if where == "leading" else [len(b["tensor"]) - 1])
                      if b["tensor"] and b["tensor"][d] == size]
            for targets, how in ((shared, "every tensor sharing it"), ([(path, dim)], "this tensor only")):
                key = tuple(sorted(targets))
                if key in seen:
                    continue
                seen.add(key)
                yield f"{where} dim of arg {_name(path)} ({size}) in {how}", targets, size


def variant(spec: dict[str, Any], targets: list[tuple[tuple, int]], size: int) -> dict[str, Any]:
    """A copy of `spec` with dim `d` of each target tensor set to `size` (strides kept in their order)."""
    out = copy.deepcopy(spec)
    for path, dim in targets:
        a = _at(out, path)
        shape = list(a["tensor"])
        shape[dim] = size
        if "stride" in a:
            a["stride"] = dense_strides(shape, a["stride"])
        a["tensor"] = shape
    return out


def dense_strides(shape: list[int], old_stride: list[int]) -> list[int]:
    """Dense strides for `shape` laid out in the order `old_stride` gives its dims (a transposed
    weight stays transposed)."""
    order = sorted(range(len(shape)), key=lambda d: (old_stride[d], d))  # innermost first
    stride = [0] * len(shape)
    step = 1
    for d in order:
        stride[d] = step
        step *= max(1, shape[d])
    return stride


def _at(spec: dict[str, Any], path: tuple) -> dict[str, Any]:
    node: Any = spec
    for key in path:
        node = node[key]
    return node


def _name(path: tuple) -> str:
    return ".".join(str(p) for p in path[1:] if p != "list") if path[0] == "args" else str(path[1])

"""Turning (shape, dtype, inputs) into the model's arguments, and refusing bad ones clearly."""

from __future__ import annotations

from typing import Any, Callable

from .. import devices
from ..errors import InputError, WarmprofError

_DTYPES = {
    "float32": "float32", "float": "float32", "fp32": "float32", "float16": "float16", "half": "float16",
    "fp16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16", "float64": "float64", "double": "float64",
    "int64": "int64", "long": "int64", "int32": "int32", "int": "int32", "int16": "int16", "int8": "int8",
    "uint8": "uint8", "bool": "bool",
}


def parse_dtype(dtype: Any):
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str):
        key = dtype.lower().removeprefix("torch.")
        if key in _DTYPES:
            return getattr(torch, _DTYPES[key])
        if isinstance(getattr(torch, key, None), torch.dtype):  # real, but not one warmprof draws inputs of
            raise InputError(f"dtype {dtype!r} is not one warmprof makes random inputs of "
                             f"({', '.join(sorted(_DTYPES))}); pass your own tensors with inputs=")
    raise InputError(f"unknown dtype {dtype!r} (try float32, bfloat16, float16, int64)")


# What model_dtype= casts a model's floating parameters and buffers to (names as parse_dtype reads them).
MODEL_DTYPES = {k: v for k, v in _DTYPES.items() if v in ("float32", "float16", "bfloat16", "float64")}


def parse_model_dtype(dtype: Any):
    """None, or a floating torch.dtype for model_dtype= (--model-dtype); anything else is an InputError."""
    import torch

    if dtype is None:
        return None
    choices = ", ".join(sorted(set(MODEL_DTYPES.values())))
    if isinstance(dtype, torch.dtype):
        if dtype.is_floating_point and str(dtype).removeprefix("torch.") in MODEL_DTYPES.values():
            return dtype
    elif isinstance(dtype, str) and dtype.lower().removeprefix("torch.") in MODEL_DTYPES:
        return getattr(torch, MODEL_DTYPES[dtype.lower().removeprefix("torch.")])
    raise InputError(f"model_dtype {dtype!r} is not a dtype warmprof casts a model to: give one of {choices} "
                     "(the model's floating parameters and buffers are cast; integer ones are left alone)")


def cast_model(model: Any, dtype: Any) -> Any:
    """The model with its floating parameters and buffers cast to `dtype` (in place, as nn.Module.to
    does; integer buffers are left alone). None: the model as it is."""
    if dtype is None:
        return model
    from torch import nn

    if not isinstance(model, nn.Module):
        raise InputError(f"model_dtype casts an nn.Module's parameters and buffers; the model is a "
                         f"{type(model).__name__}: cast what it uses yourself, or leave model_dtype out")
    return model.to(dtype)


def _float_dtypes(tensors: Any) -> set:
    return {t.dtype for t in tensors if t.is_floating_point()}


def _tensors(x: Any, depth: int = 0) -> list:
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if depth > 4:
        return []
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _tensors(v, depth + 1)]
    return []


_MISMATCH_WORDS = ("dtype", "scalar type", "same type", "type (", "BFloat16", "Half", "Float", "Double", "Long")


def dtype_mismatch_hint(model: Any, args: tuple, kwargs: dict, dtype: Any, model_dtype: Any,
                        error: BaseException | None, own_inputs: bool = False) -> str:
    """When the model raised what reads as a dtype mismatch and its floating weights and the inputs
    differ in dtype: a sentence saying which way, and what to pass. "" otherwise. `own_inputs`: the
    caller gave the inputs (inputs=, --inputs), which dtype= does not cast."""
    try:
        from torch import nn
    except ImportError:  # pragma: no cover
        return ""
    if error is None or not any(w in str(error) for w in _MISMATCH_WORDS) or not isinstance(model, nn.Module):
        return ""
    target = getattr(model, "_orig_mod", model)
    weights = _float_dtypes([*target.parameters(), *target.buffers()])
    given = _tensors((args, kwargs))
    inputs = _float_dtypes(given)
    if not weights or len(weights) > 1:
        return ""
    (w,) = weights
    wname = str(w).removeprefix("torch.")
    if inputs and w not in inputs:
        iname = "/".join(sorted(str(d).removeprefix("torch.") for d in inputs))
        if model_dtype is not None and own_inputs:
            return (f"the model was cast to {wname} (model_dtype=, --model-dtype) but the inputs given are {iname}: "
                    f"give the inputs as {wname} (tensor.to(torch.{wname}) before torch.save, or in the factory)")
        if model_dtype is not None:
            return (f"the model was cast to {wname} (model_dtype=, --model-dtype) but the inputs are {iname}: pass "
                    f"dtype={wname} (--dtype {wname}) as well, or give inputs of that dtype")
        if dtype is not None:
            return (f"the model's weights are {wname} but the inputs were cast to {iname} (dtype=, --dtype): cast the "
                    f"model, or pass model_dtype={iname} (--model-dtype {iname})")
        return (f"the model's weights are {wname} but the inputs are {iname}: cast the model, or pass "
                f"model_dtype={iname} (--model-dtype {iname})")
    if dtype is not None and not inputs and given:
        iname = "/".join(sorted({str(t.dtype).removeprefix("torch.") for t in given}))
        return (f"the model's weights are {wname} but the inputs were made {iname} (dtype=, --dtype): a model that "
                "does not start with an embedding takes floating inputs; give a floating dtype or leave dtype out")
    return ""


def parse_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, str):
        try:
            shape = tuple(int(s) for s in shape.split(","))
        except ValueError:
            raise InputError(f"cannot read shape {shape!r}: use comma-separated integers like 1,128") from None
    if isinstance(shape, int):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise InputError(f"shape must be a tuple of positive integers, got {shape!r}") from None
    if not dims:
        raise InputError("shape is empty: give at least one dimension, e.g. (1, 128)")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise InputError(f"shape {dims!r} holds {d!r}: dimensions must be integers")
        if d <= 0:
            raise InputError(f"shape {dims!r} has a dimension {d} <= 0: every dimension must be positive")
    return dims


def parse_device(device: Any):
    """A torch.device that exists here, or a DeviceError saying why not (the device table's parse)."""
    return devices.parse(device)


def _embedding_vocab(model: Any) -> int | None:
    """num_embeddings of the model's first leaf module, if that leaf is an nn.Embedding."""
    try:
        from torch import nn
    except ImportError:
        return None
    if not isinstance(model, nn.Module):
        return None
    for m in model.modules():
        if len(list(m.children())) == 0:
            return m.num_embeddings if isinstance(m, nn.Embedding) else None
    return None


def make_inputs(model: Any, shape: Any, dtype: Any, inputs: Any, device) -> tuple[tuple, dict, str]:
    """(args, kwargs, description) for the model. `inputs` wins over `shape`."""
    import torch

    if inputs is not None:
        if shape is not None:
            raise InputError("give either shape or inputs, not both")
        if dtype is not None:
            raise InputError("dtype= sets the dtype of the random input made from shape; inputs= are used as they "
                             "are: cast them yourself (and the model with model_dtype=)")
        if callable(inputs) and not isinstance(inputs, torch.Tensor):
            try:
                made = inputs()
            except WarmprofError:
                raise
            except Exception as e:
                raise InputError(f"the inputs= callable raised: {type(e).__name__}: {e}") from e
        else:
            made = inputs
        args, kwargs = _as_call(made)
        _check_call(model, made, args, kwargs)
        return _to(args, device), {k: _to(v, device) for k, v in kwargs.items()}, "caller's inputs"
    if shape is None:
        raise InputError("give a shape, e.g. trace(model, (1, 128)), or inputs=...")
    dims = parse_shape(shape)
    dt = parse_dtype(dtype)
    vocab = _embedding_vocab(model)
    if dt is None:
        dt = torch.int64 if vocab is not None else torch.float32
    name = str(dt).removeprefix("torch.")
    if dt.is_floating_point or dt.is_complex:
        try:
            x = torch.randn(dims, dtype=dt, device=device)
        except (RuntimeError, NotImplementedError, TypeError) as e:  # float8 types: no randn kernel
            raise InputError(f"warmprof cannot make a random {name} input ({type(e).__name__}: "
                             f"{str(e).splitlines()[0]}); pass your own tensors with inputs=") from e
        desc = f"randn{list(dims)} {name}"
    elif dt == torch.bool:
        x = torch.zeros(dims, dtype=dt, device=device)
        desc = f"zeros{list(dims)} bool"
    else:
        high = vocab if vocab is not None else 100
        try:
            top = torch.iinfo(dt).max
        except TypeError:  # not an integer type either (quantized, bits types)
            raise InputError(f"warmprof cannot make a random {name} input; pass your own tensors with inputs=") from None
        if high - 1 > top:
            raise InputError(f"dtype {name} cannot hold token ids up to {high - 1} (the model's embedding has {high} "
                             f"rows; {name} holds at most {top}): use int64 or int32")
        try:
            x = torch.randint(0, high, dims, dtype=dt, device=device)
        except (RuntimeError, NotImplementedError, TypeError) as e:  # quantized types: no random kernel
            raise InputError(f"warmprof cannot make a random {name} input ({type(e).__name__}: "
                             f"{str(e).splitlines()[0]}); pass your own tensors with inputs=") from e
        desc = f"token ids {list(dims)} in [0, {high})"
    return (x,), {}, desc


def _as_call(made: Any) -> tuple[tuple, dict]:
    if isinstance(made, dict):
        return (), dict(made)
    if isinstance(made, (tuple, list)):
        return tuple(made), {}
    return (made,), {}


def _holds_tensor(x: Any, depth: int = 0) -> bool:
    import torch

    if isinstance(x, torch.Tensor):
        return True
    if depth > 4:
        return False
    if isinstance(x, dict):
        return any(_holds_tensor(v, depth + 1) for v in x.values())
    if isinstance(x, (tuple, list)):
        return any(_holds_tensor(v, depth + 1) for v in x)
    return False


def _check_call(model: Any, made: Any, args: tuple, kwargs: dict) -> None:
    """Refuse inputs that cannot be a call of the model, so the model is not blamed for them: keyword
    names must be strings, and an nn.Module (which computes on tensors) must get at least one."""
    bad = [k for k in kwargs if not isinstance(k, str)]
    if bad:
        raise InputError(f"inputs= gave a dict with the key {bad[0]!r}: a dict's keys are the model's keyword "
                         "argument names and must be strings (a tuple passes positional arguments)")
    try:
        from torch import nn
    except ImportError:  # pragma: no cover - make_inputs imported torch already
        return
    if isinstance(model, nn.Module) and not _holds_tensor((args, kwargs)):
        shown = repr(made)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise InputError(f"inputs= gave {shown} ({type(made).__name__}), which holds no tensor: an nn.Module "
                         "computes on tensors; give a tensor, a tuple of arguments or a dict of keyword arguments "
                         "holding them (or a callable returning one)")


def _to(x: Any, device) -> Any:
    import torch

    if isinstance(x, torch.Tensor) and x.device != device:
        return x.to(device)
    return x


def check_model(model: Any) -> Callable:
    if not callable(model):
        raise InputError(f"the model must be callable (an nn.Module or a function), got {type(model).__name__}")
    return model

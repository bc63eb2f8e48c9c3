"""Turning (shape, dtype, inputs) into the model's arguments, and refusing bad ones clearly; and
putting them back as they were made when a pass changed them in place (put_back)."""

from __future__ import annotations

from typing import Any, Callable, Iterator

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
        args, kwargs = _to(args, device), {k: _to(v, device) for k, v in kwargs.items()}
        keep_as_made(args, kwargs)
        return args, kwargs, "caller's inputs"
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
    keep_as_made((x,), {})
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


# ---- inputs a pass changed in place -------------------------------------------------------------
#
# A model may change its input in place (x.unsqueeze_(0), x.resize_(...), x.add_(1) in forward). A
# service gives each request a fresh tensor; a trace that handed the same tensor to every pass would
# time its passes over different shapes (or values), and its header would show the last pass's shape.
# So each input tensor is kept once more as it was made (make_inputs, in the set-up step), and after
# every pass (passes.py, the control process's passes) one whose version counter moved is put back
# in place: the same tensor object, its shape, strides and values as made. Every pass then runs on
# the inputs asked for, the report says the model changed them (input_change_note), and the caller's
# own tensors (inputs=) end the trace as they were given. The cost: the inputs' memory once more, and
# a look at each input's version counter between passes (outside the timed windows).


class _AsMade:
    """One input tensor's copy as made, the tensor's version when it last matched it, and what the
    passes did to it."""

    __slots__ = ("copy", "version", "changes", "what", "failed")

    def __init__(self, copy: Any, version: int) -> None:
        self.copy = copy
        self.version = version
        self.changes = 0  # passes after which it was put back
        self.what = ""  # the first change, in words
        self.failed = ""  # why it could not be put back (then it is left as the model made it)


_as_made_by_id: Any = None  # tensor -> _AsMade, by identity, each entry going with its tensor (_kept())


def _kept() -> Any:
    """The kept copies: torch's WeakIdKeyDictionary (a WeakKeyDictionary would compare tensors with ==,
    element by element, on a hash collision)."""
    global _as_made_by_id
    if _as_made_by_id is None:
        from torch.utils.weak import WeakIdKeyDictionary

        _as_made_by_id = WeakIdKeyDictionary()
    return _as_made_by_id


def _labelled(args: tuple, kwargs: dict) -> Iterator[tuple[str, Any]]:
    """(where, tensor) for each tensor in the arguments, nested ones too (as _tensors finds them)."""
    import torch

    def walk(label: str, x: Any, depth: int) -> Iterator[tuple[str, Any]]:
        if isinstance(x, torch.Tensor):
            yield label, x
        elif depth <= 4 and isinstance(x, dict):
            for k, v in x.items():
                yield from walk(f"{label}[{k!r}]", v, depth + 1)
        elif depth <= 4 and isinstance(x, (tuple, list)):
            for i, v in enumerate(x):
                yield from walk(f"{label}[{i}]", v, depth + 1)

    for i, a in enumerate(args):
        yield from walk(f"argument {i}", a, 1)
    for k, v in kwargs.items():
        yield from walk(f"{k}=", v, 1)


def keep_as_made(args: tuple, kwargs: dict) -> None:
    """Keep a copy of each input tensor as it is now, for put_back (a tensor kept already keeps its
    first copy: the warm control traces the same tensors again). One that cannot be copied (a
    subclass without clone) is not kept, and not put back."""
    import torch

    kept = _kept()
    for _, t in _labelled(args, kwargs):
        try:
            if t in kept:
                continue
            with torch.no_grad():
                # on the host, whatever the input's device: no device memory taken (the caching allocator's
                # reserve before the first pass would be warmprof's, not the model's), none held twice there
                copy = t.detach().to("cpu", copy=True)
            kept[t] = _AsMade(copy, t._version)
        except Exception:
            continue


def put_back(args: tuple, kwargs: dict) -> None:
    """After a pass: each input tensor the pass changed in place (its version counter moved) is put
    back as it was made, in place. Never raises: one that cannot be put back is left, and said."""
    if _as_made_by_id is None:
        return
    for label, t in _labelled(args, kwargs):
        kept = _as_made_by_id.get(t)
        if kept is None or kept.failed or t._version == kept.version:
            continue
        kept.what = kept.what or f"{label}: {_change(t, kept.copy)}"
        try:
            _restore(t, kept.copy)
        except Exception as e:
            kept.failed = f"{type(e).__name__}: {str(e).splitlines()[0]}" if str(e) else type(e).__name__
            continue
        kept.version = t._version
        kept.changes += 1


def _change(t: Any, copy: Any) -> str:
    """What became of t, in words."""
    try:
        return _changed(t, copy)
    except Exception:
        return "changed"


def _changed(t: Any, copy: Any) -> str:
    if tuple(t.shape) != tuple(copy.shape):
        return f"shape {list(copy.shape)} became {list(t.shape)}"
    if t.dtype != copy.dtype:
        return f"dtype {str(copy.dtype).removeprefix('torch.')} became {str(t.dtype).removeprefix('torch.')}"
    if t.stride() != copy.stride():
        return f"strides {list(copy.stride())} became {list(t.stride())}"
    return "its values changed"


def _restore(t: Any, copy: Any) -> None:
    """t as copy again, the same tensor object: values copied where its layout is the copy's, else a
    fresh copy's storage set in (resize_, unsqueeze_, t_ changed its shape or strides)."""
    import torch

    with torch.no_grad():
        if tuple(t.shape) == tuple(copy.shape) and t.stride() == copy.stride() and t.dtype == copy.dtype:
            t.copy_(copy)
        else:
            t.set_(copy.to(t.device, copy=True))
    from .. import devices

    kind = devices.find(t.device)
    if kind is not None and not kind.host:  # the copy's device time done now, not inside the next pass
        kind.sync(t.device)()


def forget_as_made(args: tuple, kwargs: dict) -> None:
    """The trace is over: the copies go (a caller's tensor given as inputs= would keep its copy alive)."""
    if _as_made_by_id is None:
        return
    for _, t in _labelled(args, kwargs):
        _as_made_by_id.pop(t, None)


def input_change_note(args: tuple, kwargs: dict) -> str:
    """The report's note when passes changed the inputs in place ("" when none did)."""
    if _as_made_by_id is None:
        return ""
    kept = [k for _, t in _labelled(args, kwargs)
            if (k := _as_made_by_id.get(t)) is not None and (k.changes or k.failed)]
    if not kept:
        return ""
    what = "; ".join(k.what for k in kept)
    failed = [k for k in kept if k.failed]
    if failed:
        return (f"the model changed its inputs in place ({what}) and warmprof could not put them back "
                f"({failed[0].failed}): the passes after the first ran on the changed inputs, so the figures mix "
                "inputs; give the model a copy (inputs=lambda: x.clone()) or keep the forward from changing its input")
    passes = max(k.changes for k in kept)
    return (f"the model changed its inputs in place ({what}; in {passes} pass{'es' if passes > 1 else ''}): "
            "warmprof put them back as they were made after each pass, so every pass ran on the inputs asked "
            "for, as each request of a service brings a fresh tensor")


def check_model(model: Any) -> Callable:
    if not callable(model):
        raise InputError(f"the model must be callable (an nn.Module or a function), got {type(model).__name__}")
    return model

"""The `compile=` option of trace(): checked before anything is built, labelled for the report, and
applied (torch.compile only wraps the model; nothing compiles until the first pass)."""

from __future__ import annotations

from typing import Any

from ..errors import InputError


def _modes() -> list[str]:
    """The modes torch.compile (inductor) accepts in this torch: default, reduce-overhead, max-autotune..."""
    from torch._inductor import list_mode_options

    return list(list_mode_options())


def _check_mode(mode: Any) -> None:
    modes = _modes()
    if mode == "":  # torch.compile takes an empty mode as the default one
        return
    if not isinstance(mode, str) or mode not in modes:
        raise InputError(f"unknown torch.compile mode {mode!r}: use one of {', '.join(modes)} (or compile=True)")


def check_compile(compile: Any) -> None:
    """Refuse a compile value torch.compile would refuse, before anything is built or compiled."""
    if compile in (None, False) or compile is True:
        return
    if isinstance(compile, str):
        _check_mode(compile)
        return
    if not isinstance(compile, dict):
        raise InputError(
            f"compile must be None, True, a mode string or a dict of torch.compile options, got {compile!r}")
    import inspect

    import torch
    from torch._inductor import config

    params = inspect.signature(torch.compile).parameters
    accepted = [p for p in params if p != "model"]
    any_key = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    inductor_settings = config.get_config_copy()
    for key, value in compile.items():
        if key not in accepted and not any_key:
            hint = (f"; {key!r} is an inductor setting: pass it as compile={{'options': {{{key!r}: {value!r}}}}}"
                    if isinstance(key, str) and key.replace("-", "_") in inductor_settings else "")
            raise InputError(f"unknown torch.compile option {key!r} in compile: the dict's keys are torch.compile's "
                             f"arguments ({', '.join(accepted)}){hint}")
    inductor = compile.get("backend") in (None, "inductor")
    mode, options = compile.get("mode"), compile.get("options")
    if mode is not None and options is not None:
        raise InputError("compile gives both 'mode' and 'options': torch.compile takes one or the other, not both")
    if mode is not None and inductor:
        _check_mode(mode)
    if options is not None:
        if not isinstance(options, dict):
            raise InputError(f"compile's options must be a dict of inductor settings, got {options!r}")
        if inductor:
            for key in options:
                if not isinstance(key, str) or key.replace("-", "_") not in inductor_settings:
                    raise InputError(f"unknown inductor option {key!r} in compile's options "
                                     "(torch._inductor.list_options() lists them)")


def _value(v: Any) -> str:
    if isinstance(v, str):
        return v
    if callable(v):
        return getattr(v, "__name__", type(v).__name__)
    return repr(v)


def compile_label(compile: Any) -> str | None:
    """What the report records: None (eager), a mode, or the options dict as sorted 'key=value' pairs."""
    if compile in (None, False):
        return None
    if compile is True:
        return "default"
    if isinstance(compile, str):
        return compile or "default"
    compile = {k: v for k, v in compile.items() if v is not None}  # None is torch.compile's own default
    if not compile or set(compile) == {"mode"}:
        return compile.get("mode") or "default"
    parts = []
    for key, value in sorted(compile.items()):
        if key == "options" and isinstance(value, dict):
            inner = ", ".join(f"{k}={_value(v)}" for k, v in sorted(value.items()))
            parts.append(f"options({inner})")
        else:
            parts.append(f"{key}={_value(value)}")
    return ", ".join(parts)


def compile_model(model: Any, compile: Any) -> Any:
    """The model as the passes call it: itself (eager) or wrapped in torch.compile."""
    if compile in (None, False):
        return model
    import torch

    try:
        if compile is True or compile == "default":
            return torch.compile(model)
        if isinstance(compile, str):
            return torch.compile(model, mode=compile)
        if isinstance(compile, dict):
            return torch.compile(model, **compile)
    except (RuntimeError, TypeError, ValueError) as e:
        # torch.compile() only wraps the model (nothing compiles yet): this is a refused option.
        raise InputError(f"torch.compile refused compile={compile!r}: {type(e).__name__}: {e}") from e
    raise InputError(f"compile must be None, True, a mode string or a dict of torch.compile options, got {compile!r}")


__all__ = ["check_compile", "compile_label", "compile_model"]

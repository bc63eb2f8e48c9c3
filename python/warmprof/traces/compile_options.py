"""The `compile=` option of trace(): checked before anything is built, labelled for the report, and
applied (torch.compile only wraps the model; nothing compiles until the first pass)."""

from __future__ import annotations

from typing import Any

from ..errors import InputError
from ..system.torch_compat import cudagraph_step_marker


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
    if compile in (None, False):
        return
    from ..system.fileio import require_temp_folder

    require_temp_folder("torch.compile's caches")  # inductor's default cache is there: its traceback otherwise
    if compile is True:
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


# cudagraph trees warm a function up eagerly on its first call, record its graph on the second and
# replay from the third: a cold start is the first two calls.
CUDAGRAPH_CALLS = 2
CUDAGRAPH_NOTE = ("CUDA graphs (cudagraph trees, compile={mode}) warm up eagerly on the first call, record on the "
                  "second and replay from the third: every pass here is {n} calls of the model, so the first pass is the "
                  "cold start of calls 1-{n} (the capture, its pool's segments and CUDAGraphNode.record included), the "
                  "seen-shape re-run is the first replays, and every pass time, steady ones too, is {n} calls")


def _mode_cudagraphs(mode: Any) -> bool:
    """Whether a torch.compile mode turns CUDA graphs on (reduce-overhead, max-autotune in torch 2.9+)."""
    if not isinstance(mode, str) or not mode:
        return False
    try:
        from torch._inductor import list_mode_options

        return bool(list_mode_options(mode).get("triton.cudagraphs", False))
    except Exception:  # a torch without the table: the modes documented to use CUDA graphs
        return mode in ("reduce-overhead", "max-autotune")


def uses_cudagraphs(compile: Any) -> bool:
    """Whether `compile` (trace()'s compile=) runs the model through inductor's CUDA graphs: a mode
    that turns them on, options with triton.cudagraphs, or inductor's global setting."""
    if compile in (None, False):
        return False
    if isinstance(compile, str):
        on = _mode_cudagraphs(compile)
    elif isinstance(compile, dict):
        if compile.get("backend") not in (None, "inductor"):
            return False
        options = compile.get("options") or {}
        on = _mode_cudagraphs(compile.get("mode")) or bool(
            isinstance(options, dict) and (options.get("triton.cudagraphs") or options.get("triton_cudagraphs")))
    else:
        on = False
    if not on:
        try:
            from torch._inductor import config

            on = bool(config.triton.cudagraphs)
        except Exception:
            pass
    return on


def calls_per_pass(compile: Any, device: Any) -> int:
    """How many calls of the model one pass is: CUDAGRAPH_CALLS when CUDA graphs record on a later
    call than the first (on a device kind they run on: devices.DeviceKind.cuda_graphs), else 1."""
    from .. import devices

    kind = devices.find(device)
    return CUDAGRAPH_CALLS if kind is not None and kind.cuda_graphs and uses_cudagraphs(compile) else 1


def cudagraph_skips() -> int:
    """Graphs cudagraph trees declined to record so far in this process (torch's own counter: a CPU
    tensor, a mutated input, dynamic shapes...); 0 where torch has no such counter."""
    import sys

    if "torch._dynamo" not in sys.modules:  # nothing compiled: nothing skipped (and no import to pay)
        return 0
    try:
        from torch._dynamo.utils import counters

        return int(counters["inductor"].get("cudagraph_skips", 0))
    except Exception:
        return 0


def skips_note(skipped: int) -> str:
    """What a trace says when cudagraph trees skipped graphs during its passes ("" for none)."""
    if skipped <= 0:
        return ""
    return (f"cudagraph trees skipped {skipped} graph(s) during the instrumented passes (torch's cudagraph_skips: a CPU "
            "tensor, a mutated input, dynamic shapes...): those run without a CUDA graph, so the two-call passes hold "
            "no capture for them and the tree never replays them")


def repeated(runner: Any, calls: int) -> Any:
    """`runner` as one pass calls it: `calls` calls in a row (the last one's output), each a new step
    of cudagraph trees (torch.compiler.cudagraph_mark_step_begin where torch has it); `runner` itself
    when calls is 1."""
    if calls <= 1:
        return runner
    try:
        import torch

        mark = cudagraph_step_marker(torch)
    except Exception:  # pragma: no cover - torch is a dependency of every caller
        mark = None

    def run(*args: Any, **kwargs: Any) -> Any:
        out = None
        for _ in range(calls):
            if mark is not None:
                mark()
            out = runner(*args, **kwargs)
        return out

    return run


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


__all__ = ["CUDAGRAPH_CALLS", "CUDAGRAPH_NOTE", "calls_per_pass", "check_compile", "compile_label", "compile_model",
           "cudagraph_skips", "repeated", "skips_note", "uses_cudagraphs"]

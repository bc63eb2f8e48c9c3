"""The trace's settings record (report/settings.py) from trace()'s arguments and what it measured.

Read when the report is built, after the passes: nothing here runs the model or warms anything (the
model's parameters are only looked at, torch is asked for its thread count and version).
"""

from __future__ import annotations

import itertools
from typing import Any

from ..errors import InputError
from ..report.settings import Settings
from ..report.trace import RunContext
from .inputs import parse_shape


def model_dtypes(torch: Any, model: Any) -> str:
    """The dtypes of a module's floating parameters and buffers, joined ("float32", "bfloat16+float32");
    "" for a model with none, or one that is not a module (a function: its tensors are its own)."""
    target = getattr(model, "_orig_mod", model)  # torch.compile's wrapper: the module it wraps
    if not isinstance(target, torch.nn.Module):
        return ""
    tensors = itertools.chain(target.parameters(), target.buffers())
    return "+".join(sorted({str(t.dtype).removeprefix("torch.") for t in tensors if t.is_floating_point()}))


def trace_settings(torch: Any, model: Any, *, device: str, compile: str | None, input_dtype: str,
                   input_shape: list[int] | None, inputs: dict[str, Any] | None, op_view: bool,
                   steady: tuple[int, int], steady_budget_s: float, no_grad: bool, model_cast: Any,
                   run: RunContext) -> Settings:
    """The record for one trace. explain is set by traces/explain.py when it folds its probes in (it
    runs after the report is built, in trace() and in `warmprof trace --explain` alike); controls by
    whoever runs control processes."""
    warm = None
    if run.warm_shape:
        try:
            warm = list(parse_shape(run.warm_shape))
        except InputError:  # the command line ran the model at it, so it reads; a caller's odd one is left out
            warm = None
    return Settings(
        device=device, compile=compile, model_dtype=model_dtypes(torch, model),
        model_cast=str(model_cast).removeprefix("torch.") if model_cast is not None else None,
        input_dtype=input_dtype, input_shape=input_shape, inputs=inputs, op_view=bool(op_view),
        threads=int(torch.get_num_threads()), threads_set=run.threads is not None, cache=run.cache,
        fresh_process=run.fresh_process, steady=[int(steady[0]), int(steady[1])],
        steady_budget_s=float(steady_budget_s), no_grad=bool(no_grad), warm_shape=warm,
        torch_version=str(getattr(torch, "__version__", "")),
    )


def mark_explained(report: Any, top: int) -> None:
    """The report's settings say explain ran, and how many ops it probed (no record: a report from
    before the settings record, left as it is)."""
    settings = getattr(report, "settings", None)
    if settings is not None:
        settings.explain, settings.explain_top = True, int(top)


__all__ = ["mark_explained", "model_dtypes", "trace_settings"]

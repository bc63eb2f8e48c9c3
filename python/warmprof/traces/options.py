"""warmprof.trace's options as one typed, validated value (TraceOptions): every keyword of trace()
is a field, and a wrong value is an InputError when the options are made, before anything runs.

What needs the model, torch or the machine is checked by trace() itself: the device, the compile
option (torch.compile's own signature), model_dtype, a generation's model, a named model's options.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..errors import InputError
from ..report.trace import RunContext

MAX_STEADY = 100_000  # steady passes at most (the native pass budget takes a signed 64-bit count)
MAX_EXPLAIN_TOP = 100


@dataclass(frozen=True)
class TraceOptions:
    """The options of one warmprof.trace (its keywords, as one value): warmprof.trace(model,
    options=TraceOptions(...)) is warmprof.trace(model, **the same keywords). Validated when made.

    shape: a tuple for a synthetic input (token ids when the model starts with an embedding or dtype
    is an integer type, else randn); dtype: that input's dtype (the input only). inputs: the caller's
    tensors, a tuple/dict of them, or a callable that makes them (used as they are; their shapes are
    recorded in the report's `inputs`). model_dtype: cast the model's floating parameters and buffers
    first (in place, as nn.Module.to; float32, bfloat16, float16, float64). device: "cpu", "cuda",
    "cuda:1", "mps". steady: the number of clean passes (an int, or (min, max) adaptive within
    steady_budget_s seconds). compile: None, True, a mode ("reduce-overhead", "max-autotune") or a
    dict of torch.compile options. progress: False (default, as for probe()), True (lines on stderr)
    or a callable taking one line. no_grad: run the passes under torch.no_grad(). label: the model's
    name in the report (default: its class name). run: where the trace runs, for the report
    (`warmprof trace`'s fresh child passes its own); None is the caller's process, which the report's
    notes then say. op_view: a span per aten op in the first pass and the seen re-run (torch's
    profiler's op events: 1-2 us per op, measured and booked as profiler_overhead), so
    unattributed_where gives (module, op) rows with each site's first call's arguments, which
    `warmprof probe --from` replays. explain: op_view, then the explain_top ops holding the most
    unexplained time probed in fresh processes (seconds each) and their verdicts folded in as inferred
    causes with source "probe" (traces/explain.py). repeat: N > 1 runs the trace N times, each in a
    fresh process, and returns one RepeatReport (every run, and each cause's median and min-max over
    them); a first pass happens once per process, so the model must then be named, as `warmprof trace`
    takes it: "MODULE:FACTORY", "path/to/file.py:FACTORY" or "demo" (traces/repeat.py). A named model
    with repeat=1 is one trace in a fresh process (its Report). generate: N new tokens: the traced call
    is model.generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False) (a callable without
    .generate: model(ids, N)), split by the model's forward calls into prefill (TTFT), first decode
    step and the rest, each against its steady counterpart with its own causes (the report's
    `generate`; traces/generate.py). kv_cache: "static" passes cache_implementation="static" to
    generate (one shape per decode step: no recompile per length).
    """

    shape: Any = None
    inputs: Any = None
    dtype: Any = None
    model_dtype: Any = None
    device: Any = "cpu"
    steady: int | tuple[int, int] = (5, 50)
    steady_budget_s: float = 3.0
    compile: Any = None
    progress: bool | Callable[[str], Any] | None = False
    no_grad: bool = True
    label: str | None = None
    run: RunContext | None = None
    op_view: bool = False
    explain: bool = False
    explain_top: int = 8
    repeat: int = 1
    generate: int | None = None
    kv_cache: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse a wrongly typed or out-of-range option (an InputError naming it), before anything
        runs: not later, blamed on the model."""
        budget = self.steady_budget_s
        if (isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget)
                or budget < 0):
            raise InputError(f"steady_budget_s must be a non-negative number of seconds, got {budget!r}")
        if not (isinstance(self.progress, bool) or self.progress is None or callable(self.progress)):
            raise InputError(f"progress must be True, False or a callable taking a message, got {self.progress!r}")
        if not isinstance(self.no_grad, bool):
            raise InputError(f"no_grad must be True or False, got {self.no_grad!r}")
        if self.label is not None and (not isinstance(self.label, str) or not self.label.strip()):
            raise InputError(f"label must be a non-empty string (the model's name in the report), got {self.label!r}")
        if self.run is not None and not isinstance(self.run, RunContext):
            raise InputError(f"run must be a warmprof.report.trace.RunContext or None, got {self.run!r}")
        if self.generate is not None or self.kv_cache is not None:
            from .generate import check_generate

            # the model's own checks (has it a .generate) come in trace(), with the model
            if check_generate(self.generate, self.kv_cache, _CanGenerate()) is not None and (self.op_view or self.explain):
                raise InputError("generate does not go with op_view or explain: the op view is of one forward; trace "
                                 "the model's forward at the prompt's shape for it")
        if not isinstance(self.op_view, bool):
            raise InputError(f"op_view must be True or False, got {self.op_view!r}")
        if not isinstance(self.explain, bool):
            raise InputError(f"explain must be True or False, got {self.explain!r}")
        top = self.explain_top
        if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= MAX_EXPLAIN_TOP:
            raise InputError(f"explain_top must be an integer from 1 to {MAX_EXPLAIN_TOP}, got {top!r}")
        if self.explain and self.compile not in (None, False):
            raise InputError("explain is for eager models: a compiled model gets no op view (its first pass is "
                             "explained by the compile's own spans); drop explain or compile")
        parse_steady(self.steady)

    @property
    def steady_range(self) -> tuple[int, int]:
        """steady as (min, max) passes."""
        return parse_steady(self.steady)

    @property
    def compiled(self) -> bool:
        return self.compile not in (None, False)

    @classmethod
    def from_keywords(cls, keywords: Mapping[str, Any], caller: str = "trace") -> TraceOptions:
        """The options from trace()'s keywords; a name that is none of them is the TypeError Python
        raises for an unknown keyword of `caller`."""
        unknown = [k for k in keywords if k not in NAMES]
        if unknown:
            raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
        return cls(**keywords)


class _CanGenerate:
    """Stands in for the model in the generate checks that do not need it."""

    def generate(self, *args: Any, **kwargs: Any) -> None:  # pragma: no cover - never called
        return None


def parse_steady(steady: Any) -> tuple[int, int]:
    """steady= as (min, max) passes; an InputError for anything but a positive int N or a (min, max) pair."""

    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if count(steady):
        pair = (steady, steady)
    elif isinstance(steady, (tuple, list)) and len(steady) == 2 and all(count(v) for v in steady):
        pair = (steady[0], steady[1])
    else:
        pair = None
    if pair is None or pair[0] < 1 or pair[1] < pair[0] or pair[1] > MAX_STEADY:
        raise InputError(f"steady must be a positive int N or a (min, max) pair of ints with 1 <= min <= max "
                         f"<= {MAX_STEADY:,}, got {steady!r}")
    return pair


NAMES = tuple(f.name for f in dataclasses.fields(TraceOptions))
DEFAULTS = TraceOptions()


def signature_with_options(fn: Callable[..., Any], positional: tuple[str, ...] = ("shape",)) -> inspect.Signature:
    """fn's signature with its **keywords spelled out as TraceOptions' fields (keyword-only, with
    their defaults), for help() and inspect; the fields fn takes by position are left as they are."""
    sig = inspect.signature(fn)
    before = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD and p.kind is not p.KEYWORD_ONLY]
    after = [p for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY]
    spelled = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=getattr(DEFAULTS, f.name),
                                 annotation=f.type)
               for f in dataclasses.fields(TraceOptions) if f.name not in positional]
    return sig.replace(parameters=[*before, *spelled, *after])


__all__ = ["MAX_STEADY", "NAMES", "TraceOptions", "parse_steady", "signature_with_options"]

"""Compile trigger -> cause: the one table. dynamo's compile start/end callbacks bracket more than
compiles; the CallbackTrigger they carry (torch >= 2.6) says what: a dynamo compile or a lazily
compiled backward is code generation (jit_compile), a cudagraph trees recording is graph_capture, a
Triton autotuning run is algorithm_selection. Each bracketed stretch is named by its source
("torch.compile:compile", ...): the trace's spans carry it, warmup's compiles and watch's side work too,
and each reads its cause here."""

from __future__ import annotations

from typing import Any

from ..causes import Name

# dynamo's CallbackTrigger name -> (source, cause); a callback with no trigger (older torch) is a compile
from ..system.torch_compat import callback_fields

TRIGGERS: dict[str, tuple[str, str]] = {
    "DYNAMO": ("torch.compile:compile", Name.JIT_COMPILE),
    "LAZY_BACKWARD": ("torch.compile:lazy_backward", Name.JIT_COMPILE),
    "CUDAGRAPH_RECORDING": ("cudagraphs:record", Name.GRAPH_CAPTURE),
    "TRITON_AUTOTUNING": ("triton:autotune", Name.ALGORITHM_SELECTION),
}
_BY_SOURCE = {source: cause for source, cause in TRIGGERS.values()}
COMPILE_SOURCE = TRIGGERS["DYNAMO"][0]


def trigger_source(args: tuple) -> str:
    """The source of a stretch from the arguments dynamo's callback got (a CallbackArgs, or none)."""
    return TRIGGERS.get(callback_fields(args)[0], TRIGGERS["DYNAMO"])[0]


def cause_of(source: Any) -> str:
    """The cause of a bracketed stretch named by its source; an unknown one is a compile."""
    return _BY_SOURCE.get(str(source or ""), Name.JIT_COMPILE)


def is_compile(source: Any) -> bool:
    return cause_of(source) == Name.JIT_COMPILE


__all__ = ["COMPILE_SOURCE", "TRIGGERS", "cause_of", "is_compile", "trigger_source"]

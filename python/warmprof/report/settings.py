"""What a trace was run with: every setting that changes what is measured, in one record of the report
(`settings`), so `compare` can name each one that differs instead of calling two runs identical.

The trace protocol fills it from trace()'s arguments and what it measured (traces/settings.py); a
command that runs control processes adds them to `controls`. Reports written before schema version 4
have no record: `values_of()` then reads what their other fields tell (the device, the input, how the
process ran, torch's version and threads from the platform) and leaves the rest unknown (None), so a
comparison says which settings it cannot tell.

COMPARED is the one table of compared settings: the record's field, its name for people, how its value
reads. The record holds a few facts beside them (threads_set, model_cast, explain_top) that say how a
compared one came about.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from . import schema as S

IN_CALLERS_PROCESS = "in-process (caller's)"  # the cache of a trace in the caller's process


@dataclass
class Settings:
    device: str = "cpu"
    compile: str | None = None  # traces.compile_options.compile_label(): None is eager
    # the model's floating parameters' and buffers' dtypes as traced ("float32", "bfloat16+float32"; "" when
    # it has none, or is not a module), and what it was cast to first (model_dtype=, --model-dtype)
    model_dtype: str = ""
    model_cast: str | None = None
    input_dtype: str = ""  # the first input's dtype
    input_shape: list[int] | None = None  # the first input's shape (a trace from a shape: the shape)
    inputs: dict[str, Any] | None = None  # trace(inputs=): every argument's shape (report.trace._INPUTS)
    op_view: bool = False
    explain: bool = False
    explain_top: int | None = None  # ops probed, when explain is on
    threads: int | None = None  # torch.get_num_threads() as the trace measured it
    threads_set: bool = False  # set for the trace (--threads), not left at torch's own choice
    cache: str = IN_CALLERS_PROCESS  # "fresh" | "keep" (the command line's --cache) | IN_CALLERS_PROCESS
    fresh_process: bool = False
    steady: list[int] = field(default_factory=lambda: [5, 50])  # clean steady passes, [min, max]
    steady_budget_s: float = 3.0  # the adaptive steady passes' time budget
    no_grad: bool = True
    warm_shape: list[int] | None = None  # the model ran once at this input shape first (--warm-shape)
    torch_version: str = ""
    # the control runs the trace made, each a name or an object naming it (filled by whoever ran them)
    controls: list[Any] = field(default_factory=list)
    # keys a newer writer added, kept so a loaded record is saved back as it was
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        d.update((k, v) for k, v in self.extra.items() if k not in d)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Settings":
        """From the JSON object (checked by SCHEMA first); keys it does not name go to `extra`."""
        named = {f.name for f in dataclasses.fields(cls) if f.name != "extra"}
        return cls(**{k: v for k, v in d.items() if k in named}, extra={k: v for k, v in d.items() if k not in named})


_SHAPE = S.ListOf(S.NON_NEGATIVE_INT)
SCHEMA = S.Obj(optional={
    "device": S.DEVICE, "compile": S.Nullable(S.STR), "model_dtype": S.STR, "model_cast": S.Nullable(S.STR),
    "input_dtype": S.STR, "input_shape": S.Nullable(_SHAPE),
    "inputs": S.Nullable(S.Obj({"args": S.ListOf(S.Nullable(_SHAPE)), "kwargs": S.MapOf(S.Nullable(_SHAPE))})),
    "op_view": S.BOOL, "explain": S.BOOL, "explain_top": S.Nullable(S.POSITIVE_INT),
    "threads": S.Nullable(S.POSITIVE_INT), "threads_set": S.BOOL, "cache": S.STR, "fresh_process": S.BOOL,
    "steady": S.ListOf(S.POSITIVE_INT), "steady_budget_s": S.NUM, "no_grad": S.BOOL,
    "warm_shape": S.Nullable(_SHAPE), "torch_version": S.STR, "controls": S.ListOf(S.ANY),
})


# -- how each compared setting reads --------------------------------------------------------------
def _dims(shape: Any) -> str:
    return ",".join(str(d) for d in shape)


def inputs_label(inputs: Mapping[str, Any] | None) -> str:
    """A report's `inputs` as one line: '[1, 128], attention_mask=[1, 128]' ('-' for an argument that
    is not a tensor with a plain shape); '' for None (a trace from a shape)."""
    if not inputs:
        return ""

    def one(shape: Any) -> str:
        return "-" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"

    parts = [one(a) for a in inputs.get("args") or []]
    parts += [f"{k}={one(v)}" for k, v in (inputs.get("kwargs") or {}).items()]
    return ", ".join(parts) or "no arguments"


def _input(s: Settings) -> str:
    if s.inputs:
        return inputs_label(s.inputs)
    return f"shape {_dims(s.input_shape)}" if s.input_shape else "-"


def _steady(s: Settings) -> str:
    least, most = (list(s.steady) + [0, 0])[:2]
    return str(least) if least == most else f"{least}-{most} (adaptive)"


def _control(c: Any) -> str:
    if isinstance(c, dict):
        return str(c.get("name") or c.get("kind") or ", ".join(f"{k}={v}" for k, v in sorted(c.items())))
    return str(c)


def _on(flag: bool) -> str:
    return "on" if flag else "off"


# (field, name, reads): each setting compare compares, in the order it lists them
COMPARED: tuple[tuple[str, str, Callable[[Settings], str]], ...] = (
    ("device", "device", lambda s: s.device),
    ("compile", "compile", lambda s: s.compile or "off (eager)"),
    ("model_dtype", "model dtype", lambda s: s.model_dtype or "-"),
    ("input_dtype", "input dtype", lambda s: s.input_dtype or "-"),
    ("input", "input", _input),
    ("op_view", "op view", lambda s: _on(s.op_view)),
    ("explain", "explain", lambda s: f"on (top {s.explain_top})" if s.explain and s.explain_top else _on(s.explain)),
    ("threads", "threads", lambda s: str(s.threads) if s.threads else "-"),
    ("cache", "cache", lambda s: s.cache),
    ("fresh_process", "process", lambda s: "fresh" if s.fresh_process else "in-process"),
    ("steady", "steady passes", _steady),
    ("steady_budget_s", "steady budget", lambda s: f"{s.steady_budget_s:g} s"),
    ("no_grad", "grad", lambda s: "off (no_grad)" if s.no_grad else "on"),
    ("warm_shape", "warm-up shape", lambda s: _dims(s.warm_shape) if s.warm_shape else "none"),
    ("torch_version", "torch", lambda s: s.torch_version or "-"),
    ("controls", "controls", lambda s: ", ".join(_control(c) for c in s.controls) or "none"),
)
NAMES = {key: name for key, name, _ in COMPARED}


def values_of(report: Any) -> dict[str, str | None]:
    """Each compared setting of a trace report as it reads (by COMPARED's field); None where the report
    cannot tell: one written before the settings record, for what its other fields do not say."""
    s = getattr(report, "settings", None)
    if s is not None:
        return {key: reads(s) for key, _, reads in COMPARED}
    return _from_older_fields(report)


def _from_older_fields(r: Any) -> dict[str, str | None]:
    """What a report without a settings record says of its settings elsewhere: the device, compile,
    input and its dtype are its own fields; how its process ran is the protocol's (when recorded);
    torch's version and threads are in the platform fingerprint (taken at the trace's end). The op view
    and explain are told only when the report shows their rows; the rest is unknown."""
    got = Settings(device=r.device, compile=r.compile, input_dtype=r.dtype or "", input_shape=r.shape,
                   inputs=getattr(r, "inputs", None))
    known = {"device", "compile", "input"} | ({"input_dtype"} if r.dtype else set())
    protocol = r.protocol.to_dict() if r.protocol is not None else {}
    if "fresh_process" in protocol:
        got.fresh_process = bool(protocol["fresh_process"])
        known.add("fresh_process")
    if "cache" in protocol:
        got.cache = str(protocol["cache"])
        known.add("cache")
    platform = r.platform or {}
    threads = platform.get("torch_threads") or protocol.get("threads")
    if isinstance(threads, int) and not isinstance(threads, bool):
        got.threads = threads
        known.add("threads")
    if platform.get("torch"):
        got.torch_version = str(platform["torch"])
        known.add("torch_version")
    rows = r.unattributed_where or []
    if any("op" in row for row in rows):  # op rows: the op view ran (no op rows proves nothing)
        got.op_view = True
        known.add("op_view")
    if any("inferred" in row for row in rows) or any(c.source == "probe" for c in r.causes):
        got.explain = True
        known.add("explain")
    return {key: reads(got) if key in known else None for key, _, reads in COMPARED}


__all__ = ["COMPARED", "IN_CALLERS_PROCESS", "NAMES", "SCHEMA", "Settings", "inputs_label", "values_of"]

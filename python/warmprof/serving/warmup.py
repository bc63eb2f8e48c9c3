"""warmprof.warmup and warmprof.assert_warm: pay a model's one-time costs at each served shape before
traffic, say what each shape paid and why, and prove (in CI) that a further call pays none.

Both call the model at each shape (no_grad), with only cheap, always-available sources on, read as
deltas around each call (no recorder, no module hooks, no CUPTI):

- dynamo's compile start/end callbacks (instruments/torch_compile.CompileEvents): each compile's
  time (measured), dynamo's recompile reason (the guard that failed, from dynamo's own compilation
  metrics), and what was compiled from scratch or loaded from inductor's / AOT autograd's cache
  (dynamo's counters). CUDA-graph recording (cudagraph trees) comes through the same callbacks.
- page faults, anonymous and file-backed resident memory of the process, outside the compiles.
- on CUDA, the caching allocator's reserved bytes (torch.cuda.memory_reserved).

Each call's deltas are booked by attribution's rules for one call (attribution/calls.py, the same
rules watch books a live call by): a compile (a callback, or dynamo's unique_graphs counter moved) is
jit_compile, a CUDA-graph recording graph_capture, Triton autotuning algorithm_selection; faults
outside the compiles are allocator_growth (anonymous) or runtime_init (file-backed) above one noise
floor (attribution/faults.py: 8 faults and 1 MiB), priced at the calibrated cost of one first-touch
fault and capped at the call's time outside its compiles; on CUDA, more caching-allocator reserve
is allocator_growth too.

How many calls. Some one-time costs take two calls at a new shape: glibc serves a large block with
mmap the first time, raises its mmap threshold when it is freed, and serves the same size from its
heap on the second call, which then grows (the full-size compiled demo's second call at length 256:
+4 MiB, 1,031 faults, quiet from the third); cudagraph trees record a shape's CUDA graph on its
second call. So warmup by default calls each shape until a call pays nothing, at most
WARMUP_MAX_CALLS times (passes= fixes the count). assert_warm makes one call per shape. A compile,
a recording or autotuning fails it at once (they are events, not measurements). A memory cause
(allocator_growth, runtime_init) is checked with one more call at that shape, and fails only
when that call fires it too. A warm process's heap sometimes shrinks and regrows by about one large
block (the demo: +1-2 MiB, ~500 faults, on one call in a few), and a single call cannot tell that
from a last one-time growth. A memory cause seen on the check call alone is a note in the result.

Figures: a compile's ms is measured (its callbacks' span); allocator_growth's ms is estimated; the
others have evidence but no ms.
"""

from __future__ import annotations

import contextlib
import sys
from typing import AbstractSet, Any, Iterable

from .. import _native
from .. import causes as causes_table
from ..attribution.calls import (
    SOURCES,
    Bracketed,
    CallFacts,
    CallPart,
    attribute_call,
    outside_bracketed,
)
from ..attribution.compiles import is_compile
from ..attribution.faults import NOISE_BYTES, NOISE_FAULTS
from ..causes import Name
from ..errors import InputError, ModelError, NotWarmError, WarmprofError
from ..instruments.torch_compile import (
    CacheOutcome,
    CompileEvent,
    CompileEvents,
    cache_outcome,
    compile_counters,
    counters_since,
)
from ..report.warmup import WARMUP_MAX_CALLS, WarmRow, WarmupResult
from ..report.warmup import shape_label as _label
from ..traces import calibrate
from ..traces.inputs import (
    check_model,
    dtype_mismatch_hint,
    make_inputs,
    parse_device,
    parse_dtype,
    parse_shape,
)

ALLOC_MIN_BYTES = NOISE_BYTES  # anonymous growth below 1 MiB in a call is noise (Python arenas, churn)
ALLOC_MIN_FAULTS = NOISE_FAULTS  # ...and growth with fewer faults is not the call's own (khugepaged collapses)
FILE_MIN_BYTES = NOISE_BYTES  # file-backed pages paged in: a library's code and data first used
MEMORY_CAUSES = (Name.ALLOCATOR_GROWTH, Name.RUNTIME_INIT)  # fail it when a confirming call fires them too


def _mib(n: int) -> str:
    return f"{n / 2**20:+.1f} MiB"


# -- The calls: what to run at each shape ---------------------------------------------------------

def _calls(shapes: Any, inputs: Any, dtype: Any) -> list[tuple[tuple[int, ...] | None, Any]]:
    """[(shape, inputs item)], every shape parsed first: a bad one is refused before anything runs."""
    if inputs is not None:
        if shapes is not None:
            raise InputError("give either shapes or inputs=, not both")
        if dtype is not None:
            raise InputError("dtype= sets the dtype of the random inputs made from shapes; inputs= are used as they "
                             "are: cast them yourself")
        if not isinstance(inputs, list) or not inputs:
            raise InputError(f"inputs= takes a non-empty list, one entry per call (a tensor, a tuple of arguments, a "
                             f"dict of keyword arguments, or a callable returning one), got {type(inputs).__name__}")
        return [(None, item) for item in inputs]
    if shapes is None:
        raise InputError("give the shapes to warm, e.g. warmup(model, [(1, 128), (1, 256)]), or inputs=[...]")
    if isinstance(shapes, (str, bytes)) or not isinstance(shapes, (list, tuple)):
        raise InputError(f"shapes is a list of shapes, e.g. [(1, 128), (1, 256)], got {shapes!r}")
    if not shapes:
        raise InputError("shapes is empty: give at least one shape, e.g. [(1, 128)]")
    if all(isinstance(s, int) and not isinstance(s, bool) for s in shapes):
        raise InputError(f"shapes is a list of shapes; {tuple(shapes)!r} reads as one shape: write [{tuple(shapes)!r}] "
                         "(a list of lengths needs the full shapes, e.g. [(1, 128), (1, 256)])")
    parsed = [parse_shape(s) for s in shapes]
    parse_dtype(dtype)
    return [(s, None) for s in parsed]


def _arg_label(args: tuple, kwargs: dict) -> str:
    import torch

    def one(x: Any) -> str:
        return str(list(x.shape)) if isinstance(x, torch.Tensor) else "-"

    return ", ".join([one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()])


def _sync(dev):
    from .. import devices

    return devices.sync(dev)


def _host() -> tuple[int, int, int]:
    return _native.faults()[0], _native.rss_bytes(), _native.file_bytes()


class _Sources:
    """The cheap sources, open for the whole run (dynamo's callbacks registered once, always removed)."""

    def __init__(self, dev) -> None:
        self.dev = dev
        self.events: CompileEvents | None = None
        self.stack = contextlib.ExitStack()
        self.notes: list[str] = []

    def __enter__(self) -> "_Sources":
        self._open_events()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stack.close()

    def _open_events(self) -> None:
        # Only once dynamo is imported (importing it costs most of a second, and an eager model
        # compiles nothing); a model that imports it on its first call is seen by its counters.
        if self.events is None and "torch._dynamo" in sys.modules:
            events = CompileEvents()
            if not events.reason:
                self.stack.enter_context(events)
                self.events = events

    def _reserved(self) -> int | None:
        from .. import devices

        return devices.of(self.dev).reserved_bytes(self.dev)  # cuda's caching allocator; None elsewhere

    def call(self, model: Any, args: tuple, kwargs: dict, sync, shape: tuple[int, ...] | str) -> WarmRow:
        """One call, and what it paid."""
        import torch

        self._open_events()
        events = self.events
        dynamo_before = "torch._dynamo" in sys.modules
        i0 = len(events.compiles) if events is not None else 0
        counters0 = compile_counters()
        reserved0 = self._reserved()
        f0, rss0, file0 = _host()
        t0 = _native.now_ns()
        with torch.no_grad():
            model(*args, **kwargs)
            sync()
        t1 = _native.now_ns()
        f1, rss1, file1 = _host()
        reserved1 = self._reserved()
        compiles: list[CompileEvent] = []
        if events is not None:
            events.collect_reasons()
            compiles = events.compiles[i0:]
        outcome = cache_outcome(counters_since(counters0))
        if not dynamo_before and "torch._dynamo" in sys.modules:
            self.notes.append(f"torch._dynamo was first imported during the call at {_label(shape)}: that call's compiles "
                              "were seen by dynamo's counters only, so their time and memory are not told apart")
        row = WarmRow(shape=shape, ms=0.0)
        _book(row, t1 - t0, compiles, outcome, f1 - f0, (rss1 - file1) - (rss0 - file0), file1 - file0,
              None if reserved0 is None or reserved1 is None else reserved1 - reserved0)
        return row


def call_facts(ns: int, compiles: list[CompileEvent], outcome: CacheOutcome, faults: int, anon: int, files: int,
               reserved: int | None) -> CallFacts:
    """One call's deltas as attribution reads them: each stretch dynamo bracketed (CompileEvents' events,
    their own faults and memory), the process's faults and resident growth, the CUDA reserve's growth."""
    bracketed = tuple(Bracketed(c.source, c.span_ms * 1e6, compile_id=c.compile_id,
                                recompile_reason=c.recompile_reason or "", faults=c.faults,
                                anon_bytes=c.rss_bytes - c.file_bytes, file_bytes=c.file_bytes)
                      for c in compiles)
    return CallFacts(ns=ns, bracketed=bracketed, faults=faults, anon_bytes=anon, file_bytes=files,
                     cuda_reserved_bytes=reserved, compiled_graphs=outcome.graphs)


def _book(row: WarmRow, ns: int, compiles: list[CompileEvent], outcome: CacheOutcome, faults: int,
          anon: int, files: int, reserved: int | None) -> None:
    """One call's deltas, booked in `row` by attribution's rules for one call (attribution/calls.py;
    a fresh row per call, added to the shape's by _merge; pure but for the one-time fault calibration)."""
    facts = call_facts(ns, compiles, outcome, faults, anon, files, reserved)
    got = attribute_call(facts, calibrate.call_costs)
    row.calls += 1
    row.ms += ns / 1e6
    out_faults, out_anon, out_files = outside_bracketed(facts) or (faults, anon, files)
    row.faults += faults
    row.anon_bytes += out_anon or 0
    row.file_bytes += out_files or 0
    if reserved is not None:
        row.cuda_reserved_bytes = (row.cuda_reserved_bytes or 0) + reserved
    jit = [b for b in facts.bracketed if is_compile(b.source)]
    reasons = [b.recompile_reason for b in jit if b.recompile_reason]
    if got.part(Name.JIT_COMPILE) is not None:
        row.compiles += len(jit)
        row.recompile_reasons.extend(reasons)
    for part in sorted(got.parts, key=lambda p: p.cause != Name.JIT_COMPILE):  # the compiles first
        _add(row, part.cause, part.ms, _evidence(part, jit, reasons, outcome))
    if row.cache or outcome.counter or outcome.graphs:
        merged = (CacheOutcome(**row.cache) if row.cache else CacheOutcome()) + outcome
        row.cache = merged.to_dict()


def _evidence(part: CallPart, jit: list[Bracketed], reasons: list[str], outcome: CacheOutcome) -> str:
    """What a warm-up row says of one part."""
    f = part.figures
    if part.cause == Name.JIT_COMPILE:
        if jit:
            ids = ", ".join(b.compile_id for b in jit)
            text = f"{len(jit)} dynamo compile{'s' if len(jit) != 1 else ''} ({ids})"
        else:
            text = f"dynamo's unique_graphs counter moved by {outcome.graphs} (no compile callback seen)"
        if reasons:
            text += "; recompile reason: " + " | ".join(reasons)
        if outcome.text():
            text += "; " + outcome.text()
        return text
    if part.source == SOURCES["faults"]:
        text = (f"{_mib(int(f['anon_bytes']))} anonymous resident memory outside compiles, {int(f['faults'])} page faults "
                f"(estimated: {f['anon_faults']:.0f} anonymous faults x {f['fault_cost_ns']:.0f} ns)")
        if "capped_from_ns" in f:
            text += f"; capped at the call's time outside its compiles (the faults priced {f['capped_from_ns'] / 1e6:.1f} ms)"
        return text
    if part.source == SOURCES["cuda_reserved"]:
        return f"CUDA caching allocator reserved {_mib(int(f['bytes']))} (new segments)"
    if part.source == SOURCES["files"]:
        return f"{_mib(int(f['file_bytes']))} of file-backed pages (library code and data) paged in outside compiles"
    what = "CUDA graph recording" if part.cause == Name.GRAPH_CAPTURE else "Triton autotuning"
    ms = part.ms or 0.0
    return f"{part.count} {what} callback{'s' if part.count != 1 else ''} of dynamo, {ms:.1f} ms"


def _merge(total: WarmRow, one: WarmRow) -> None:
    """Add one call's row to the shape's; a later call's evidence is prefixed with its number."""
    n = total.calls + 1
    total.calls = n
    total.ms += one.ms
    for cause, text in one.evidence.items():
        _add(total, cause, one.causes.get(cause), text if n == 1 else f"call {n}: {text}")
    total.compiles += one.compiles
    total.recompile_reasons.extend(one.recompile_reasons)
    if one.cache:
        total.cache = ((CacheOutcome(**total.cache) if total.cache else CacheOutcome()) + CacheOutcome(**one.cache)).to_dict()
    total.faults += one.faults
    total.anon_bytes += one.anon_bytes
    total.file_bytes += one.file_bytes
    if one.cuda_reserved_bytes is not None:
        total.cuda_reserved_bytes = (total.cuda_reserved_bytes or 0) + one.cuda_reserved_bytes
    total.per_call.append({"ms": one.ms, "fired": one.fired})


def _add(row: WarmRow, cause: str, ms: float | None, text: str) -> None:
    if ms is not None:
        row.causes[cause] = row.causes.get(cause, 0.0) + ms
    row.evidence[cause] = f"{row.evidence[cause]}; {text}" if cause in row.evidence else text


def _model_name(model: Any) -> str:
    target = getattr(model, "_orig_mod", model)
    return getattr(target, "__name__", None) or type(target).__name__


class _Checker:
    """Runs the calls at one shape: how many, and, for assert_warm, which causes fail the check."""

    def __init__(self, kind: str, passes: int | None, ignored: set[str]) -> None:
        self.kind, self.passes, self.ignored = kind, passes, ignored
        self.notes: list[str] = []

    def run(self, call, row: WarmRow) -> None:
        """`call()` makes one call and returns its row."""
        if self.kind == "warmup":
            for _ in range(self.passes or WARMUP_MAX_CALLS):
                one = call()
                _merge(row, one)
                if self.passes is None and not one.fired:
                    break  # a call that paid nothing: this shape is warm
            return
        check = call()
        _merge(row, check)
        fired = [c for c in check.fired if c not in self.ignored]
        row.not_warm = [c for c in fired if c not in MEMORY_CAUSES]
        memory = [c for c in fired if c in MEMORY_CAUSES]
        if not memory:
            return
        confirm = call()  # memory figures are noisy on one call: does the next call pay it too?
        _merge(row, confirm)
        again = [c for c in memory if c in confirm.fired]
        row.not_warm += again
        once = [c for c in memory if c not in again]
        if once:
            self.notes.append(f"{row.label}: {', '.join(once)} on the check call ({'; '.join(check.evidence[c] for c in once)}) "
                              "but not on the call after it: a last one-time growth or the allocator's own churn; not "
                              "failed")


def _run(kind: str, model: Any, shapes: Any, *, dtype: Any, device: Any, inputs: Any, passes: int | None,
         ignored: AbstractSet[str] = frozenset()) -> WarmupResult:
    check_model(model)
    if passes is not None and (isinstance(passes, bool) or not isinstance(passes, int) or passes < 1):
        raise InputError(f"passes must be a positive int (or None: until a call pays nothing, at most "
                         f"{WARMUP_MAX_CALLS}), got {passes!r}")
    dev = parse_device(device)
    calls = _calls(shapes, inputs, dtype)
    sync = _sync(dev)
    checker = _Checker(kind, passes, set(ignored))
    rows: list[WarmRow] = []
    with _Sources(dev) as sources:
        for shape, item in calls:
            args, kwargs, _ = make_inputs(model, shape, dtype, item, dev)
            row = WarmRow(shape=shape if shape is not None else _arg_label(args, kwargs), ms=0.0)

            def call() -> WarmRow:
                try:
                    return sources.call(model, args, kwargs, sync, row.shape)
                except WarmprofError:
                    raise
                except Exception as e:
                    hint = dtype_mismatch_hint(model, args, kwargs, dtype, None, e, own_inputs=item is not None)
                    said = str(e).strip().splitlines()[0] if str(e).strip() else "(no message)"
                    raise ModelError(f"the model raised at {_label(row.shape)} during {kind}: {type(e).__name__}: "
                                     f"{said}" + (f" ({hint})" if hint else "")) from e

            checker.run(call, row)
            rows.append(row)
    notes = list(sources.notes) + checker.notes
    if "torch._dynamo" not in sys.modules:
        notes.append("torch._dynamo was never imported: nothing compiled, and compiles were not watched")
    return WarmupResult(kind, _model_name(model), str(dev), rows, notes)


def warmup(model: Any, shapes: Any = None, *, dtype: Any = None, device: Any = "cpu", inputs: Any = None,
           passes: int | None = None) -> WarmupResult:
    """Call `model` at each shape (no_grad) so its one-time costs are paid before traffic, and say
    what each shape paid, by cause.

    shapes: a list of shapes (or buckets) such as [(1, 128), (1, 256)]; a random input of each is
    made on `device` (token ids when the model starts with an nn.Embedding, else randn; `dtype` sets
    its dtype). inputs=: instead, a list of calls, each a tensor, a tuple of positional arguments, a
    dict of keyword arguments, or a callable returning one. passes: calls per shape; None (the
    default) calls until a call pays nothing, at most WARMUP_MAX_CALLS (3). A shape's second call
    can still pay: glibc's heap takes over a large block from mmap, and cudagraph trees record then.

    Returns a WarmupResult: one row per shape with its ms, the causes paid (cause -> ms), their
    evidence (compiles with dynamo's recompile reason and what came from inductor's cache, memory
    growth), each call's ms and causes (per_call), and str() as a table. A bad argument raises
    InputError/DeviceError before the model runs; the model raising raises ModelError (its
    exception chained); dynamo's callbacks are removed whatever happens.
    """
    return _run("warmup", model, shapes, dtype=dtype, device=device, inputs=inputs, passes=passes)


def assert_warm(model: Any, shapes: Any = None, *, dtype: Any = None, device: Any = "cpu", inputs: Any = None,
                ignore: Iterable[str] = ()) -> WarmupResult:
    """One more call per shape with the same cheap sources on; raises NotWarmError naming each shape
    and the cause that still fired, or returns the check's WarmupResult when none did.

    Fails on a compile (jit_compile, with dynamo's recompile reason), a CUDA graph recording
    (graph_capture) or autotuning (algorithm_selection) on the call. Fails on anonymous growth of
    >= 1 MiB with >= 8 faults (or more CUDA memory reserved; allocator_growth), or on >= 1 MiB of
    file-backed pages (runtime_init), only when one more call at that shape fires it again. A
    memory cause on the check call alone is a note (see the module docstring). ignore: causes not to
    fail on (e.g. ("allocator_growth",)); they still show in the result.
    """
    if isinstance(ignore, str):
        ignore = (ignore,)
    ignored = set(ignore)
    unknown = sorted(ignored - set(causes_table.names()))
    if unknown:
        raise InputError(f"ignore names unknown cause(s) {', '.join(map(repr, unknown))}: causes are "
                         f"{', '.join(causes_table.names())}")
    result = _run("assert_warm", model, shapes, dtype=dtype, device=device, inputs=inputs, passes=1, ignored=ignored)
    failing = [(r, r.not_warm) for r in result.rows if r.not_warm]
    if failing:
        raise NotWarmError(not_warm_message(result, failing), result)
    return result


def not_warm_message(result: WarmupResult, failing: list[tuple[WarmRow, list[str]]]) -> str:
    n = len(result.rows)
    lines = [f"{result.model} is not warm on {result.device} at {len(failing)} of {n} shape{'s' if n != 1 else ''}: "
             "a call there still paid a one-time cost"]
    for r, fired in failing:
        paid = "; ".join(f"{c}" + (f" {r.causes[c]:.1f} ms" if c in r.causes else "") + f" ({r.evidence[c]})"
                         + (" (on the check call and the one after it)" if c in MEMORY_CAUSES else "")
                         for c in fired)
        lines.append(f"  {r.label}: {paid}")
    hints = {c for _, fired in failing for c in fired}
    if Name.JIT_COMPILE in hints:
        lines.append("  warm these shapes at start-up (warmprof.warmup(model, shapes)), or pad them to warmed buckets")
    if Name.GRAPH_CAPTURE in hints:
        lines.append("  cudagraph trees record a shape's CUDA graph on its 2nd call: warm with passes=3")
    if Name.ALLOCATOR_GROWTH in hints:
        lines.append("  memory grew on two calls in a row: a leak, or an allocator still growing (glibc's heap can keep "
                     "growing for a few calls at a new large shape: warm with more passes=); "
                     "ignore=('allocator_growth',) to accept it")
    return "\n".join(lines)


__all__ = ["ALLOC_MIN_BYTES", "ALLOC_MIN_FAULTS", "FILE_MIN_BYTES", "WARMUP_MAX_CALLS", "WarmRow", "WarmupResult",
           "assert_warm", "call_facts", "not_warm_message", "warmup"]

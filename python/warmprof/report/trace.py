"""The trace report: one first pass split into causes, with evidence, modules and the timeline."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from .. import causes
from ..causes import EVIDENCE
from ..errors import ReportError
from . import schema as S
from .base import SCHEMA_VERSION, ReportBase, non_negative, register_kind
from .settings import IN_CALLERS_PROCESS, Settings  # noqa: F401  (IN_CALLERS_PROCESS: RunContext.cache in the caller's process)
from .settings import SCHEMA as _SETTINGS
from .settings import inputs_label  # noqa: F401  (the report's wording of its inputs, where it was)


@dataclass
class CauseEntry:
    """One cause from one source: how much of the excess, and how warmprof knows."""

    cause: str
    ms: float
    share: float  # of the excess; 0 when there is no excess
    evidence: str
    source: str
    module: str = ""  # the module holding most of it ("" = outside any module)
    count: int = 0  # spans, faults, compiles... behind the figure (causes.count_label says what it counts)
    detail: str = ""
    # of `ms`, the time the thread waited for a CPU inside this cause's own spans (schedstat): a compile
    # preempted on a busy machine keeps that wait in its own time and says how much of it was waiting
    waited_ms: float = 0.0
    # of `ms`, the time the thread was blocked off the CPU inside this cause's own spans (a compile waiting
    # for its compiler's processes, a driver call for the driver)
    blocked_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """As JSON: waited_ms and blocked_ms only where there was such a wait (files before them had none)."""
        d = dataclasses.asdict(self)
        for k in ("waited_ms", "blocked_ms"):
            if not d[k]:
                del d[k]
        return d

    def scale(self, keep: float, said: str) -> None:
        """Keep `keep` (0..1) of this entry, its waits inside it shrinking with it (never more than the
        cause), and say why in its detail."""
        keep = min(1.0, max(0.0, keep))
        self.ms *= keep
        self.waited_ms *= keep
        self.blocked_ms *= keep
        self.detail = f"{self.detail}; {said}" if self.detail else said

    def validate(self) -> None:
        if self.cause != "unattributed":
            non_negative(self.ms, f"{self.cause}/{self.source} ms")
            non_negative(self.share, f"{self.cause}/{self.source} share")
            non_negative(self.waited_ms, f"{self.cause}/{self.source} waited_ms")
            non_negative(self.blocked_ms, f"{self.cause}/{self.source} blocked_ms")
            if self.waited_ms + self.blocked_ms > self.ms + 1e-3:
                raise ReportError(f"{self.cause}/{self.source}: waited_ms {self.waited_ms} and blocked_ms "
                                  f"{self.blocked_ms} are more than its ms {self.ms}")


@dataclass
class Setup:
    """The set-up before the first pass (traces/setup_phase.py): importing torch, the factory's module and
    the factory (the cold start of `warmprof trace`), the model moved to the device, cast, and its inputs
    made, timed with instruments on; its causes are its own, never the first pass's.

    Each step ({"name", "ms"}) carries its own causes ("causes": cause entries, each a share of the step,
    its module the step's name), attributed over the step's own window, so they add up to at most its
    time, and "unattributed_ms" (its time less its causes); "note" where its figures leave something out.
    `causes` is every step's causes one after the other (each a share of the whole set-up) and
    `unattributed_ms` the set-up's time less them, as files before the steps had causes of their own
    hold them (there each cause's module is the step holding most of it, and steps have neither)."""

    # a step's causes may pass its time by this much (ms) only: rounding, never a cause past its step
    SLACK_MS: ClassVar[float] = 0.01

    ms: float  # the whole set-up
    # {"name": "import torch" | "model.to(cuda:0)" | "model cast" | "inputs" ..., "ms", "causes",
    # "unattributed_ms", "note"}, in order ("causes"/"unattributed_ms"/"note" absent in older files)
    steps: list[dict[str, Any]]
    causes: list[CauseEntry]  # share: of the set-up's time
    unattributed_ms: float = 0.0
    instruments: dict[str, str] = field(default_factory=dict)  # name -> "on" or "off: why"
    how: str = ""

    @classmethod
    def of_steps(cls, ms: float, steps: list[dict[str, Any]], instruments: dict[str, str] | None = None,
                 how: str = "") -> "Setup":
        """The section from its steps (each with its own causes): the set-up-wide causes are theirs one
        after the other, each a share of `ms`, and its unattributed time is `ms` less them."""
        causes = [dataclasses.replace(c, share=c.ms / ms if ms > 0 else 0.0)
                  for st in steps for c in cls.own_causes(st)]
        return cls(ms=ms, steps=steps, causes=causes, unattributed_ms=ms - sum(c.ms for c in causes),
                   instruments=dict(instruments or {}), how=how)

    @staticmethod
    def own_causes(step: dict[str, Any]) -> list[CauseEntry]:
        """A step's own causes (none in a file from before steps had them)."""
        return [CauseEntry(**c) for c in step.get("causes", [])]

    def has_step_causes(self) -> bool:
        """True when the steps carry their own causes (every file since they do)."""
        return any("causes" in st for st in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Setup":
        steps = [dict(x, causes=[dict(c) for c in x["causes"]]) if "causes" in x else dict(x) for x in d["steps"]]
        return cls(ms=float(d["ms"]), steps=steps, causes=[CauseEntry(**c) for c in d["causes"]],
                   unattributed_ms=float(d.get("unattributed_ms", 0.0)), instruments=dict(d.get("instruments", {})),
                   how=str(d.get("how", "")))

    def validate(self) -> None:
        non_negative(self.ms, "setup.ms")
        for c in self.causes:
            c.validate()
        stepped = 0.0
        for st in self.steps:
            ms = float(st["ms"])
            non_negative(ms, f"setup step {st['name']!r} ms")
            if "causes" not in st:
                continue
            own = self.own_causes(st)
            for c in own:
                c.validate()
            booked = sum(c.ms for c in own)
            stepped += booked
            if booked > ms + self.SLACK_MS:
                raise ReportError(f"setup step {st['name']!r}: its causes add up to {booked:.3f} ms, more than the "
                                  f"step's {ms:.3f} ms (a step's causes are inside it)")
            if "unattributed_ms" in st and abs(float(st["unattributed_ms"]) - (ms - booked)) > self.SLACK_MS:
                raise ReportError(f"setup step {st['name']!r}: unattributed_ms {float(st['unattributed_ms']):.3f} is "
                                  f"not its time less its causes ({ms - booked:.3f} ms)")
        if self.has_step_causes() and abs(sum(c.ms for c in self.causes) - stepped) > self.SLACK_MS:
            raise ReportError(f"setup.causes add up to {sum(c.ms for c in self.causes):.3f} ms, not the steps' causes "
                              f"({stepped:.3f} ms)")


@dataclass
class Span:
    """One span of a recorded pass, in ms from that pass's start."""

    pass_: str  # "first" | "seen_rerun" | "steady"
    name: str
    cause: str  # cause id, or "" for structure (pass, module)
    source: str
    module: str
    start_ms: float
    dur_ms: float
    depth: int
    thread: int = 0
    value: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["pass"] = d.pop("pass_")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Span":
        d = dict(d)
        d["pass_"] = d.pop("pass")
        s = cls(**d)
        non_negative(s.dur_ms, f"span {s.name!r} duration")
        return s


@dataclass
class CounterSample:
    pass_: str
    name: str
    t_ms: float
    value: float

    def to_dict(self) -> dict[str, Any]:
        return {"pass": self.pass_, "name": self.name, "t_ms": self.t_ms, "value": self.value}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CounterSample":
        return cls(pass_=d["pass"], name=d["name"], t_ms=float(d["t_ms"]), value=float(d["value"]))


@dataclass
class RunContext:
    """Where a trace ran, set as data by whoever knows it: trace() alone knows only that it runs in
    its caller's process (the default); `warmprof trace`'s child knows that its process is fresh,
    how its caches were set, how many threads it was given and at what shape the model ran before the
    trace. In the JSON these are the protocol's fresh_process, cache, threads, caches and warm_shape
    keys (the last three only when set); the report's settings record repeats what they say."""

    fresh_process: bool = False
    cache: str = IN_CALLERS_PROCESS  # or the command line's --cache: "fresh" | "keep"
    threads: int | None = None  # torch.set_num_threads(N) first (--threads)
    caches: dict[str, str] | None = None  # a fresh process's caches: variable -> folder (or "fresh (removed after)")
    warm_shape: str | None = None  # the model ran once at this input shape before the trace (--warm-shape "1,64")


@dataclass
class RecorderStats:
    """What the native recorder kept and lost over the instrumented passes."""

    records: int = 0
    dropped: int = 0  # records lost to a full buffer
    thinned_modules: int = 0  # module calls not recorded once their budget was spent
    own_faults: int = 0  # page faults taken by warmprof's own buffers


@dataclass
class Protocol:
    """How the trace was run: the input, every steady pass, the machine's calibration, why the
    runtime was already warm, the recorder's figures, and where it ran (RunContext)."""

    input: str = ""  # how the input was made ("token ids [1, 128] in [0, 4096)", "caller's inputs")
    steady_ms: list[float] = field(default_factory=list)
    calibration: dict[str, Any] = field(default_factory=dict)  # traces.calibrate.MachineCosts.to_dict()
    runtime_warm: bool = False
    warm_reasons: list[str] = field(default_factory=list)
    unattributed_within_noise: bool = False
    attribution_thread_only: bool = True  # cause spans on other threads are noted, not counted
    recorder: RecorderStats = field(default_factory=RecorderStats)
    run: RunContext = field(default_factory=RunContext)
    # Steady passes with every instrument on (after the clean ones): the fastest of them against the
    # clean passes is warmprof's own cost per pass on this model (the profiler_overhead entry). Each
    # is net of its wait for a CPU, and so are the clean passes it is compared with.
    instrumented_steady_ms: list[float] = field(default_factory=list)
    # What the seen re-run took over a steady pass beyond its attributed causes: warm-up that takes
    # more than one call (interpreter specialisation, cold caches), an inferred residual.
    seen_rerun_residual_ms: float | None = None
    # torch's intra-op threads against the CPUs this process may use and the work runnable when the
    # trace started (platform.oversubscription); "" when they did not clash
    oversubscription: str = ""
    # Each clean steady pass's wait for a CPU (ms: its thread's schedstat run-queue delay), and the
    # steady median with each pass's wait taken out; empty / None where the kernel has no schedstat.
    steady_run_delay_ms: list[float] = field(default_factory=list)
    steady_net_median_ms: float | None = None
    # How many calls of the model one pass is: 2 when CUDA graphs (cudagraph trees) record on the second
    # call (compile="reduce-overhead"), so the first pass is the cold start of calls 1+2; else 1 (and
    # then absent from the JSON).
    calls_per_pass: int = 1
    # A loaded file's protocol is written back as it was: keys this class does not name (a newer
    # writer's) are kept in `extra`, and named keys the file did not have are in `absent`, so they
    # are not written back with defaults that would state facts nobody recorded.
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    absent: frozenset[str] = field(default=frozenset(), repr=False)

    _NESTED: ClassVar[tuple[str, ...]] = ("recorder", "run", "extra", "absent")

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: this dataclass's fields with the recorder nested and the run's flat."""
        d: dict[str, Any] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                             if f.name not in self._NESTED}
        d["recorder"] = dataclasses.asdict(self.recorder)
        d.update((k, v) for k, v in dataclasses.asdict(self.run).items() if v is not None)
        if self.calls_per_pass == 1:  # the usual pass of one call: said only when a pass is more
            d.pop("calls_per_pass")
        d = {k: v for k, v in d.items() if k not in self.absent}
        d.update((k, v) for k, v in self.extra.items() if k not in d)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Protocol":
        """From the JSON object (checked by _PROTOCOL first); see `extra` and `absent`."""
        def known(klass: type, data: dict[str, Any]) -> dict[str, Any]:
            return {f.name: data[f.name] for f in dataclasses.fields(klass) if f.name in data}

        own = {k: v for k, v in known(cls, d).items() if k not in cls._NESTED}
        named = {f.name for f in dataclasses.fields(cls) if f.name not in cls._NESTED}
        named |= {"recorder"} | {f.name for f in dataclasses.fields(RunContext)}
        return cls(**own, recorder=RecorderStats(**known(RecorderStats, d.get("recorder") or {})),
                   run=RunContext(**known(RunContext, d)),
                   extra={k: v for k, v in d.items() if k not in named},
                   absent=frozenset(named - set(d)))


@dataclass
class TorchCompileFigures:
    """What torch says of its own compiling during the trace (the torch_compile instrument's figures)."""

    torch_reported_ms: float = 0.0  # torch's own compile timers, summed
    compiles: int = 0  # compiles dynamo ran
    inductor_cache: str = "n/a"  # "hit" | "miss" | "n/a"
    # dynamo's recompile reasons grouped (recompile_groups): reason with its numbers as N, an example,
    # how many recompiles gave it and their span ms, the most first
    recompiles: list[dict[str, Any]] = field(default_factory=list)
    # dynamo's graph breaks during the trace, {"reason", "count"}, the most first
    graph_breaks: list[dict[str, Any]] = field(default_factory=list)
    # per frame dynamo compiled (the compile id's frame, "0" of "0/2"): its compiles and their span ms,
    # and the graphs it compiled from scratch and loaded from cache; only when more than one frame compiled
    frames: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_summary(cls, summary: Any) -> "TorchCompileFigures | None":
        """From the torch_compile instrument's summary (as report["instruments"]["torch_compile"]
        holds it); None when the instrument was off."""
        if not isinstance(summary, dict) or not summary.get("active"):
            return None
        cache = summary.get("inductor_cache")
        compiles = [c for c in summary.get("compiles", []) if isinstance(c, dict)]
        breaks = [{"reason": str(b["reason"]), "count": int(b["count"])} for b in summary.get("graph_breaks", [])
                  if isinstance(b, dict) and "reason" in b and "count" in b]
        return cls(torch_reported_ms=float(summary.get("torch_reported_compile_ms", 0.0)),
                   compiles=len(summary.get("compiles", [])),
                   inductor_cache=cache if isinstance(cache, str) else "n/a",
                   recompiles=recompile_groups(compiles), graph_breaks=breaks,
                   frames=[dict(f) for f in summary.get("frames", []) if isinstance(f, dict)])

    @property
    def recompiled(self) -> int:
        return sum(int(g["count"]) for g in self.recompiles)


def shown_compile(report: Any) -> TorchCompileFigures | None:
    """A trace report's torch.compile figures where a renderer shows them: a compiled trace always
    (0 included), an eager one only when it compiled something (the instrument is on whenever dynamo
    is imported); None otherwise."""
    tc = getattr(report, "torch_compile", None)
    if tc is None or not (getattr(report, "compile", None) or tc.compiles or tc.torch_reported_ms > 0):
        return None
    return tc


def break_headline(reason: str) -> str:
    """A graph break's reason as one line: dynamo's is a paragraph (explanation, hint, a link) whose
    first line names the break."""
    return (reason.strip().splitlines() or [""])[0]


def _compile_figures_json(figures: TorchCompileFigures | None) -> dict[str, Any] | None:
    """TorchCompileFigures as JSON; recompiles is optional: a trace that recompiled nothing writes what
    it wrote before the field."""
    if figures is None:
        return None
    out = dataclasses.asdict(figures)
    for name in ("recompiles", "graph_breaks", "frames"):
        if not out[name]:
            del out[name]
    return out


_NUMBER = re.compile(r"(?<![\w.])(?<!index )-?\d+(?:\.\d+)?")  # a tensor's dimension index stays
_COMPILE_ID_PREFIX = re.compile(r"^\s*\d+/\d+:\s*")


def recompile_reason_kind(reason: str) -> str:
    """dynamo's recompile reason with its numbers as N and its compile id prefix ("0/3: ") dropped:
    "tensor 'input_ids' size mismatch at index 1. expected 64, actual 65" and "... expected 65, actual
    66" are one kind. The tensor's name, the dimension's index and the guard's text stay."""
    first = reason.strip().splitlines()[0] if reason.strip() else ""
    return _NUMBER.sub("N", _COMPILE_ID_PREFIX.sub("", first)).strip()


def recompile_groups(compiles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recompiles among a trace's compile records (those with a recompile_reason), grouped by
    recompile_reason_kind: [{"reason", "example", "count", "ms"}], the most recompiles first."""
    groups: dict[str, dict[str, Any]] = {}
    for c in compiles:
        reason = c.get("recompile_reason")
        if not isinstance(reason, str) or not reason.strip():
            continue
        kind = recompile_reason_kind(reason)
        g = groups.setdefault(kind, {"reason": kind, "example": _COMPILE_ID_PREFIX.sub("", reason.strip().splitlines()[0]),
                                     "count": 0, "ms": 0.0})
        g["count"] += 1
        span = c.get("span_ms")
        g["ms"] += float(span) if isinstance(span, (int, float)) else 0.0
    return sorted(groups.values(), key=lambda g: (-g["count"], -g["ms"], g["reason"]))


# The JSON schema: every field a renderer (text, JSON, Chrome trace, PNG, compare) reads, checked at load.
_CAUSE_ENTRY = S.Obj(
    {"cause": S.OneOf("cause", causes.names), "ms": S.NUM, "share": S.NUM, "evidence": S.OneOf("evidence", EVIDENCE),
     "source": S.STR},
    {"module": S.STR, "count": S.NON_NEGATIVE_INT, "detail": S.STR, "waited_ms": S.NUM,
     "blocked_ms": S.NUM},
    extra=False,
)
_SPAN = S.Obj(
    {"pass": S.STR, "name": S.STR, "cause": S.OneOf("cause", lambda: ("",) + causes.names()), "source": S.STR, "module": S.STR,
     "start_ms": S.NUM, "dur_ms": S.NUM, "depth": S.NON_NEGATIVE_INT},
    {"thread": S.INT, "value": S.NUM},
    extra=False,
)
_COUNTER_SAMPLE = S.Obj({"pass": S.STR, "name": S.STR, "t_ms": S.NUM, "value": S.NUM})
_MODULE = S.Obj({"module": S.STR, "ms": S.NUM, "causes": S.MapOf(S.NUM)})
_WHERE = S.Obj({"module": S.STR, "ms": S.NUM}, {"op": S.STR, "calls": S.NON_NEGATIVE_INT,
                                                      "index": S.NON_NEGATIVE_INT, "call": S.MapOf(S.ANY), "rerun_ms": S.NUM,
                                                      "first_of_op": S.BOOL, "new_signature": S.BOOL,
                                                      "warm_process_ms": S.NUM, "warm_own_ms": S.NUM, "own_ms": S.NUM,
                                                      "inferred": S.Obj({"cause": S.STR, "ms": S.NUM})})
# The shapes of the caller's inputs (trace(inputs=), --inputs): one per positional argument and per
# keyword, null where the argument is not a tensor with a plain shape.
_INPUT_SHAPE = S.Nullable(S.ListOf(S.NON_NEGATIVE_INT))
_INPUTS = S.Obj({"args": S.ListOf(_INPUT_SHAPE), "kwargs": S.MapOf(_INPUT_SHAPE)})
_TORCH_COMPILE = S.Obj(optional={"torch_reported_compile_ms": S.NUM, "compiles": S.ListOf(S.ANY)})
_RECOMPILE_GROUP = S.Obj({"reason": S.STR, "example": S.STR, "count": S.NON_NEGATIVE_INT, "ms": S.NUM}, extra=False)
_GRAPH_BREAK = S.Obj({"reason": S.STR, "count": S.NON_NEGATIVE_INT}, extra=False)
_FRAME = S.Obj({"frame": S.STR, "compiles": S.NON_NEGATIVE_INT, "ms": S.NUM},
               {"graphs_compiled": S.NON_NEGATIVE_INT, "graphs_from_cache": S.NON_NEGATIVE_INT}, extra=False)
_TORCH_COMPILE_FIGURES = S.Obj({"torch_reported_ms": S.NUM, "compiles": S.NON_NEGATIVE_INT, "inductor_cache": S.STR},
                               {"recompiles": S.ListOf(_RECOMPILE_GROUP), "graph_breaks": S.ListOf(_GRAPH_BREAK),
                                "frames": S.ListOf(_FRAME)}, extra=False)
_RECORDER = S.Obj(optional={k: S.NON_NEGATIVE_INT for k in ("records", "dropped", "thinned_modules", "own_faults")})
_PROTOCOL = S.Obj(optional={
    "input": S.STR, "steady_ms": S.ListOf(S.NUM), "calibration": S.MapOf(S.ANY), "runtime_warm": S.BOOL,
    "warm_reasons": S.ListOf(S.STR), "unattributed_within_noise": S.BOOL, "attribution_thread_only": S.BOOL,
    "recorder": _RECORDER, "fresh_process": S.BOOL, "cache": S.STR, "threads": S.Nullable(S.POSITIVE_INT),
    "caches": S.MapOf(S.STR), "instrumented_steady_ms": S.ListOf(S.NUM), "seen_rerun_residual_ms": S.Nullable(S.NUM),
    "oversubscription": S.STR, "steady_run_delay_ms": S.ListOf(S.NUM), "steady_net_median_ms": S.Nullable(S.NUM),
    "warm_shape": S.Nullable(S.STR), "calls_per_pass": S.POSITIVE_INT,
})
_SETUP_STEP = S.Obj({"name": S.STR, "ms": S.NUM},
                    {"causes": S.ListOf(_CAUSE_ENTRY), "unattributed_ms": S.NUM, "note": S.STR}, extra=False)
_SETUP = S.Obj(
    {"ms": S.NUM, "steps": S.ListOf(_SETUP_STEP), "causes": S.ListOf(_CAUSE_ENTRY)},
    {"unattributed_ms": S.NUM, "instruments": S.MapOf(S.STR), "how": S.STR},
    extra=False,
)
_GEN_SPREAD = {"steady_p10_ms": S.NUM, "steady_p90_ms": S.NUM, "noise_band_ms": S.NUM}  # a phase's steady calls
_GEN_FIGURES = S.Obj({"first_ms": S.NUM, "steady_median_ms": S.NUM, "excess_ms": S.NUM}, dict(_GEN_SPREAD))
# A phase's one accounting (traces/generate.settle): headline_excess_ms = attributed + run_to_run + unattributed_ms
_GEN_PHASE = S.Obj(
    {"phase": S.OneOf("phase", ("prefill", "first_decode", "rest")), "first_ms": S.NUM, "steady_median_ms": S.NUM,
     "excess_ms": S.NUM, "causes": S.ListOf(_CAUSE_ENTRY)},
    {"forwards": S.NON_NEGATIVE_INT, "steady_calls": S.NON_NEGATIVE_INT, "own_cost_ms": S.NUM, "attributed_ms": S.NUM,
     "unattributed_ms": S.NUM, "clean": _GEN_FIGURES, "headline_excess_ms": S.NUM, "run_to_run_ms": S.NUM,
     "own_cost_estimated_ms": S.NUM, **_GEN_SPREAD},
)
_GENERATE = S.Obj(
    {"new_tokens": S.POSITIVE_INT, "ttft": _GEN_FIGURES, "phases": S.ListOf(_GEN_PHASE)},
    {"prompt_tokens": S.Nullable(S.POSITIVE_INT), "kv_cache": S.STR, "forwards_first_call": S.NON_NEGATIVE_INT,
     "call": S.MapOf(S.NUM), "notes": S.ListOf(S.STR), "how": S.STR},
)
# The one accounting (traces/fold.py): excess_ms = causes_ms + run_to_run_ms + unattributed_ms, exactly.
_BOUND = S.Obj({"spread_ms": S.NUM, "net_of_waits": S.BOOL, "after_pause_ms": S.NUM, "ms": S.NUM})  # the verdict's
_ACCOUNTING = S.Obj({"excess_ms": S.NUM, "causes_ms": S.NUM, "run_to_run_ms": S.NUM, "unattributed_ms": S.NUM},
                    {"run_to_run": S.MapOf(S.ANY), "unstable": S.BOOL, "tolerance_ms": S.NUM, "noise_ms": S.NUM,
                     "residual_unsettled": S.BOOL, "both_warm": S.BOOL, "how": S.STR, "no_cost_bound": _BOUND})
SCHEMA = S.Obj(
    {
        "model": S.STR, "shape": S.Nullable(S.ListOf(S.NON_NEGATIVE_INT)), "device": S.DEVICE,
        "first_pass_ms": S.NUM, "seen_rerun_ms": S.NUM, "steady_median_ms": S.NUM, "noise_band_ms": S.NUM,
        "excess_ms": S.NUM, "unattributed_ms": S.NUM, "causes": S.ListOf(_CAUSE_ENTRY), "platform": S.PLATFORM,
    },
    {
        "dtype": S.STR, "compile": S.Nullable(S.STR), "inputs": S.Nullable(_INPUTS), "settings": _SETTINGS,
        "steady_passes": S.NON_NEGATIVE_INT,
        "steady_p10_ms": S.NUM, "steady_p90_ms": S.NUM, "attributed_ms": S.NUM,
        "seen_rerun_causes": S.ListOf(_CAUSE_ENTRY), "modules": S.ListOf(_MODULE), "counters": S.MapOf(S.ANY),
        "unattributed_where": S.ListOf(_WHERE),
        "protocol": _PROTOCOL, "instruments": S.Obj(optional={"torch_compile": _TORCH_COMPILE}),
        "torch_compile": S.Nullable(_TORCH_COMPILE_FIGURES),
        "spans": S.ListOf(_SPAN), "counter_samples": S.ListOf(_COUNTER_SAMPLE), "advice": S.ListOf(S.STR),
        "notes": S.ListOf(S.STR), "warmprof_version": S.STR, "created": S.STR,
        "clean": S.Nullable(S.MapOf(S.ANY)), "own_cost": S.MapOf(S.ANY), "verdict": S.STR,
        "setup": S.Nullable(_SETUP), "generate": S.Nullable(_GENERATE), "accounting": S.Nullable(_ACCOUNTING),
    },
)


def warm_left_ms(row: Mapping[str, Any]) -> float:
    """An unattributed_where row's ms less what --explain's warm processes booked there."""
    return float(row.get("ms", 0.0)) - float(row.get("warm_own_ms", 0.0)) - float(row.get("warm_process_ms", 0.0))


def passes_gap_ms(acc: Mapping[str, Any]) -> float:
    """The clean first pass's excess less the instrumented one's less own cost, waits and all (run_to_run_ms
    leaves each pass's wait for a CPU outside causes out; older files: run_to_run_ms, that gap then)."""
    rr = acc.get("run_to_run") or {}
    inst = rr.get("instrumented_excess_less_own_ms")
    return float(acc["run_to_run_ms"]) if inst is None else float(acc["excess_ms"]) - float(inst)


def unplaced_ms(row: Mapping[str, Any]) -> float:
    """What of a row no fold booked (the warm processes, the probes' inferred causes), plus what the
    seen re-run still paid there: the row's part of the unattributed time."""
    taken = float(row.get("inferred", {}).get("ms", 0.0))
    return max(0.0, warm_left_ms(row) - taken) + max(0.0, float(row.get("rerun_ms", 0.0)))


@register_kind
@dataclass
class Report(ReportBase):
    """A trace report. JSON field names are a public contract (see docs in README)."""

    KIND = "trace"
    SCHEMA = SCHEMA

    model: str
    shape: list[int] | None
    device: str
    first_pass_ms: float
    seen_rerun_ms: float
    steady_median_ms: float
    noise_band_ms: float
    excess_ms: float
    unattributed_ms: float
    causes: list[CauseEntry]
    platform: dict[str, Any] = field(default_factory=dict)
    dtype: str = ""
    compile: str | None = None
    # trace(inputs=): every argument's shape, {"args": [shape | None, ...], "kwargs": {name: shape | None}};
    # None for a trace from a shape (`shape` says it), and then left out of the JSON, as files written
    # before this field have none (so a loaded one is saved back as it was).
    inputs: dict[str, Any] | None = None
    # Every setting that changes what is measured (report/settings.py), filled by the trace protocol;
    # None in a report written before schema version 4 (and then left out of the JSON, as it had none).
    settings: Settings | None = None
    steady_passes: int = 0
    steady_p10_ms: float = 0.0
    steady_p90_ms: float = 0.0
    attributed_ms: float = 0.0
    seen_rerun_causes: list[CauseEntry] = field(default_factory=list)
    modules: list[dict[str, Any]] = field(default_factory=list)  # {"module", "ms", "causes": {id: ms}}
    # Where the unattributed time sits: {"module", "ms"}, each module's first-pass time outside every
    # cause less the same in the seen-shape re-run (attribution.unattributed_where), largest first.
    # With the op view, by (module, op) site: rows of an op add "op", "calls", "index" (the site's
    # first call's place in the pass) and "call" (that call as an opspec, for `warmprof probe --from`);
    # rows without "op" are module code. "rerun_ms": what the seen re-run still paid at that site over
    # the fastest instrumented steady pass (warm-up that takes more than one call; op view only).
    # `--explain` adds "inferred" ({"cause", "ms"}) where a probe verdict was booked (traces/explain.py).
    unattributed_where: list[dict[str, Any]] = field(default_factory=list)
    counters: dict[str, Any] = field(default_factory=dict)
    protocol: Protocol | None = None  # None: not recorded ({} in the JSON)
    instruments: dict[str, Any] = field(default_factory=dict)  # each instrument's own summary, by name
    # torch's compile figures for the text; None when the torch_compile instrument was off
    torch_compile: TorchCompileFigures | None = None
    spans: list[Span] = field(default_factory=list)
    counter_samples: list[CounterSample] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The model's first pass measured clean (traces/controls.py: a second fresh process, no instrument
    # but the pass timer): first_pass_ms, steady_median_ms, excess_ms, steady_passes, noise_band_ms, ...;
    # the headline fields above are these when present. None: no clean pass (traced in the caller's
    # process, --no-control, or the control failed: the notes say which).
    clean: dict[str, Any] | None = None
    # warmprof's own cost, never a cause: "first_pass_ms" (the warm control's first pass over the
    # steady median, measured), "steady_ms" (per instrumented steady pass, estimated),
    # "instrumented_first_pass_ms", "instrumented_excess_ms", and "in_headline_ms" (what of it the
    # headline excess already had taken out: 0 with a clean pass, the estimate without one).
    own_cost: dict[str, Any] = field(default_factory=dict)
    # traces/verdict.py: "first_call_cost", "no_first_call_cost" (within the noise band),
    # "first_pass_faster" or "unstable" (the two fresh processes disagree beyond their waits and noise:
    # --repeat); "" in reports written before it.
    verdict: str = ""
    # The set-up before the first pass (model to the device, inputs), timed with instruments on; None in
    # reports before schema 5 (and then left out of the JSON) and where nothing was timed.
    setup: Setup | None = None
    # trace(..., generate=N): the generation's phases (prefill = TTFT, first_decode, rest), each first
    # call against its steady median with its causes (traces/generate.py); None otherwise (left out of
    # the JSON).
    generate: dict[str, Any] | None = None
    # The one accounting every printed figure comes from (traces/fold.py): "excess_ms" (the headline),
    # "causes_ms" (the causes' sum), "run_to_run_ms" (the clean first pass's excess against the instrumented
    # one's less warmprof's own cost, each without its wait for a CPU outside causes (the cpu_contention row is
    # the clean pass's): a difference between two processes, never a cause; 0 without a clean
    # control), "unattributed_ms", with excess = causes + run_to_run + unattributed exactly; "run_to_run"
    # says what the two processes' waits say about the difference, "unstable" whether it is beyond them and
    # the noise ("tolerance_ms"). None in reports written before it (left out of the JSON).
    accounting: dict[str, Any] | None = None
    warmprof_version: str = ""
    created: str = ""
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if isinstance(self.protocol, dict):  # a caller's (or a version-1 reader's) plain dict
            self.protocol = Protocol.from_dict(self.protocol) if self.protocol else None
        if isinstance(self.settings, dict):
            self.settings = Settings.from_dict(self.settings)
        if isinstance(self.setup, dict):
            self.setup = Setup.from_dict(self.setup)

    # -- data access -------------------------------------------------------------------------
    def cause_ms(self, cause: str) -> float:
        return sum(c.ms for c in self.causes if c.cause == cause)

    def by_cause(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for c in self.causes:
            out[c.cause] = out.get(c.cause, 0.0) + c.ms
        return out

    def causes_ms(self) -> float:
        """What the causes add up to (the residual left out)."""
        return sum(c.ms for c in self.causes if c.cause != "unattributed")

    def shares_of_attributed(self) -> bool:
        """True when the causes add up to more than a positive excess: shares are then fractions of
        the attributed time, not of the excess (traces.build.overshoot_note says so in the notes)."""
        return self.excess_ms > 0 and self.causes_ms() > self.excess_ms

    def own_entries(self) -> list[CauseEntry]:
        """warmprof's own estimated cost per pass as attribution booked it (own_cost["entries"]:
        source, module, detail); for reports before schema 3, their profiler_overhead causes."""
        rows = (self.own_cost or {}).get("entries")
        if isinstance(rows, list):
            return [CauseEntry(**r) for r in rows if isinstance(r, dict)]
        return [c for c in self.causes if c.cause == "profiler_overhead"]

    def top_cause(self) -> CauseEntry | None:
        real = [c for c in self.causes if c.cause != "unattributed"]
        return max(real, key=lambda c: c.ms) if real else None

    # -- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        if d.get("inputs") is None:  # optional: absent unless the trace ran on the caller's inputs
            d.pop("inputs", None)
        for name, empty in (("clean", None), ("own_cost", {}), ("verdict", ""), ("settings", None),
                            ("setup", None), ("generate", None), ("accounting", None)):  # absent in older reports:
            if d.get(name) == empty:  # a loaded one is saved back as it was
                d.pop(name, None)
        return d

    def _field_to_json(self, name: str, value: Any) -> Any:
        if name in ("causes", "seen_rerun_causes"):
            return [c.to_dict() for c in value]
        if name in ("spans", "counter_samples"):
            return [s.to_dict() for s in value]
        if name == "protocol":
            return value.to_dict() if value is not None else {}
        if name == "torch_compile":
            return _compile_figures_json(value)
        if name in ("settings", "setup"):
            return value.to_dict() if value is not None else None
        return value

    @classmethod
    def _fields_from_json(cls, data: dict[str, Any]) -> dict[str, Any]:
        compile_figures = data.get("torch_compile")
        return {
            "causes": [CauseEntry(**c) for c in data["causes"]],
            "seen_rerun_causes": [CauseEntry(**c) for c in data.get("seen_rerun_causes", [])],
            "spans": [Span.from_dict(s) for s in data.get("spans", [])],
            "counter_samples": [CounterSample.from_dict(s) for s in data.get("counter_samples", [])],
            "protocol": Protocol.from_dict(data["protocol"]) if data.get("protocol") else None,
            "torch_compile": TorchCompileFigures(**compile_figures) if compile_figures else None,
            "settings": Settings.from_dict(data["settings"]) if data.get("settings") is not None else None,
            "setup": Setup.from_dict(data["setup"]) if data.get("setup") is not None else None,
        }

    @classmethod
    def _upgrade(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        if version < 2:  # version 1 kept torch's compile figures in the instrument's summary only
            figures = TorchCompileFigures.from_summary(data.get("instruments", {}).get("torch_compile"))
            data = dict(data, torch_compile=_compile_figures_json(figures))
        return data

    def validate(self) -> None:
        """Invariants a loaded report must hold; a violation means a corrupt or edited file."""
        for name in ("first_pass_ms", "seen_rerun_ms", "steady_median_ms", "noise_band_ms"):
            non_negative(getattr(self, name), name)
        if self.torch_compile is not None:
            non_negative(self.torch_compile.torch_reported_ms, "torch_compile.torch_reported_ms")
        for c in self.causes + self.seen_rerun_causes:
            c.validate()
        if self.setup is not None:
            self.setup.validate()
        if self.generate is not None:
            for i, row in enumerate(self.generate["phases"]):
                for name in ("first_ms", "steady_median_ms"):
                    non_negative(row[name], f"generate.phases[{i}].{name}")
                if "headline_excess_ms" in row:  # each phase's own accounting holds too (traces/generate.settle)
                    summed = (float(row.get("attributed_ms", 0.0)) + float(row.get("run_to_run_ms", 0.0))
                              + float(row.get("unattributed_ms", 0.0)))
                    if abs(float(row["headline_excess_ms"]) - summed) > 0.01:
                        raise ReportError(f"generate.phases[{i}]: the accounting does not hold (headline_excess_ms "
                                          f"{row['headline_excess_ms']} != attributed + run_to_run + unattributed {summed})")
        from ..opspec import check

        for i, w in enumerate(self.unattributed_where):
            why = check(w["call"]) if "call" in w else ""
            if why:
                raise ReportError(f"unattributed_where[{i}].call: {why}")
        acc = self.accounting
        if acc is not None:  # the one accounting holds exactly (to 0.01 ms) and agrees with the headline fields
            summed = float(acc["causes_ms"]) + float(acc["run_to_run_ms"]) + float(acc["unattributed_ms"])
            checks = (("excess_ms = causes_ms + run_to_run_ms + unattributed_ms", float(acc["excess_ms"]), summed),
                      ("accounting.excess_ms = excess_ms", float(acc["excess_ms"]), self.excess_ms),
                      ("accounting.unattributed_ms = unattributed_ms", float(acc["unattributed_ms"]), self.unattributed_ms),
                      ("accounting.causes_ms = the causes' sum", float(acc["causes_ms"]), self.causes_ms()))
            for what, a, b in checks:
                if abs(a - b) > 0.01:
                    raise ReportError(f"the accounting does not hold: {what} ({a:.4f} != {b:.4f})")
        shares = sum(c.share for c in self.causes if c.cause != "unattributed")
        if shares > 1.0 + 1e-6:
            raise ReportError(f"cause shares sum to {shares:.3f} > 1")
        own_in = self.own_cost.get("in_headline_ms", 0.0) if isinstance(self.own_cost, dict) else 0.0
        own_in = own_in if isinstance(own_in, (int, float)) and not isinstance(own_in, bool) else 0.0
        expected = self.first_pass_ms - self.steady_median_ms - own_in
        if abs(self.excess_ms - expected) > 1e-3 * max(1.0, abs(expected)):
            raise ReportError(f"excess_ms {self.excess_ms} != first_pass_ms - steady_median_ms"
                              f"{' - own_cost.in_headline_ms' if own_in else ''} ({expected})")

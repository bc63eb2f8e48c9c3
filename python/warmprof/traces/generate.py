"""trace(..., generate=N): the traced call is a generation of N new tokens, told apart in phases.

What a user of an LLM server sees is the time to the first token (TTFT), not a forward. A generation
here is `model.generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False)` (transformers' API:
greedy, exactly N new tokens, so every call does the same work) or, for a callable without .generate,
`model(ids, N)`. A forward pre-hook on the model (one clock read and one page-fault read per step, in
every call alike) stamps each step's start, which splits every call into three phases:

    prefill       the call's start to the second forward's start: generate's own set-up, the prompt's
                  forward and the choice of the first token. TTFT is this phase.
    first_decode  the second forward's start to the third's: the first step at one new token
    rest          the third forward's start to the call's end: the other N - 2 steps

Each phase of the first call is set against the same phase of the steady calls (their median), and its
causes are the first call's attribution restricted to the phase's window (the same timeline, the same
estimators: attribution.attribute_pass with the phase as the window). A callable whose steps call no
forward of the model has no steps to see: the whole call is then the prefill, and the report says so.

With compile, the model's forward is compiled in place (model.forward = torch.compile(model.forward),
as transformers' docs do for generate: a compiled wrapper module's .generate would run the eager
forward) and put back after the trace. kv_cache="static" passes cache_implementation="static" to
generate (transformers' StaticCache: one shape for every decode step, so a compiled forward does not
recompile per length)."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from .. import _native
from ..attribution import steady_stats
from ..causes import Name
from ..errors import InputError
from ..stats import median

PHASES = ("prefill", "first_decode", "rest")
MAX_NEW_TOKENS = 4096
KV_CACHES = ("static",)
HOW = ("each phase of the first generate call against the same phase of the steady calls (median); a phase is "
       "bounded by the model's forward calls (a forward pre-hook's clock read: prefill = the call's start to the "
       "second forward, first_decode = to the third, rest = to the call's end); its causes are the first call's "
       "attribution over the phase's window. Each phase's one accounting: headline_excess_ms (the clean call's "
       "excess where the control ran, else the instrumented call's less warmprof's own cost in the phase) = "
       "attributed_ms (its causes) + run_to_run_ms (the clean call's excess less the instrumented call's less "
       "warmprof's own cost: a difference between two processes, never a cost; 0 without the control) + "
       "unattributed_ms (the instrumented call's excess less warmprof's own cost less the causes)")
# headline_verdict's answers (the trace's verdicts: traces/verdict.py)
FIRST_CALL_COST, NO_FIRST_CALL_COST, FIRST_PASS_FASTER = "first_call_cost", "no_first_call_cost", "first_pass_faster"
STEADY_STATS = ("steady_p10_ms", "steady_p90_ms", "noise_band_ms")  # each phase's steady spread, as the trace's


def check_generate(generate: Any, kv_cache: Any, model: Any) -> int | None:
    """generate as an int N >= 2 (None: not a generation); refuse what cannot be a generation."""
    if generate is None or generate is False:
        if kv_cache is not None:
            raise InputError("kv_cache goes with generate=N (the KV cache of a generation)")
        return None
    if isinstance(generate, bool) or not isinstance(generate, int) or not 2 <= generate <= MAX_NEW_TOKENS:
        raise InputError(f"generate must be a number of new tokens from 2 to {MAX_NEW_TOKENS} (prefill, a first decode "
                         f"step and the rest need at least 2), got {generate!r}")
    if kv_cache is not None and kv_cache not in KV_CACHES:
        raise InputError(f"kv_cache must be None (the model's own) or one of {', '.join(KV_CACHES)}, got {kv_cache!r}")
    if not callable(getattr(model, "generate", None)) and not callable(model):
        raise InputError(f"generate=N needs a model with a transformers-style .generate(input_ids, max_new_tokens=N) "
                         f"or a callable taking (input_ids, N); got {type(model).__name__}")
    if kv_cache is not None and not callable(getattr(model, "generate", None)):
        raise InputError("kv_cache='static' is passed to .generate (cache_implementation): the model has none")
    return generate


@dataclass
class CallSteps:
    """One generate call on the pass clock (_native.now_ns): its start and end, each forward's start,
    and the process's page faults (minor + major) at each of those."""

    t0: int
    t1: int
    starts: list[int]
    faults0: int
    faults1: int
    step_faults: list[int]

    def windows(self) -> dict[str, tuple[int, int]]:
        """Each phase's (start, end); a phase the call never reached (too few forwards) is absent."""
        s = self.starts
        out = {"prefill": (self.t0, s[1] if len(s) > 1 else self.t1)}
        if len(s) > 1:
            out["first_decode"] = (s[1], s[2] if len(s) > 2 else self.t1)
        if len(s) > 2:
            out["rest"] = (s[2], self.t1)
        return out

    def phase_ms(self) -> dict[str, float]:
        return {p: (b - a) / 1e6 for p, (a, b) in self.windows().items()}

    def phase_faults(self) -> dict[str, int]:
        """Each phase's page faults, as windows() bounds it."""
        marks = [self.faults0] + self.step_faults[1:3] + [self.faults1]  # a boundary's faults, in order
        return {p: max(0, marks[i + 1] - marks[i]) for i, p in enumerate(self.windows())}

    def forwards(self) -> dict[str, int]:
        n = len(self.starts)
        return {"prefill": min(n, 1), "first_decode": 1 if n > 1 else 0, "rest": max(0, n - 2)}


def _faults() -> int:
    got = _native.faults()
    return int(got[0]) + int(got[1])


class Generation:
    """The callable a generate trace times: each call one generation of `steps` new tokens, its step
    starts recorded (take() hands them over). Use as a context manager: the forward pre-hook (and a
    compiled forward) is in place inside it only, and removed whatever happens."""

    def __init__(self, model: Any, steps: int, compile: Any = None, kv_cache: str | None = None) -> None:
        self.model = model
        self.steps = steps
        self.compile = compile
        self.kv_cache = kv_cache
        self.calls: list[CallSteps] = []
        self._starts: list[int] = []
        self._faults: list[int] = []
        self._undo = contextlib.ExitStack()
        self._has_generate = callable(getattr(model, "generate", None))
        self.hooked = False  # a forward of the model's is seen per step

    # -- set-up ----------------------------------------------------------------------------------
    def __enter__(self) -> "Generation":
        import torch  # trace() needs it

        model = self.model
        try:
            if isinstance(model, torch.nn.Module):
                if self.compile not in (None, False):
                    self._compile_forward(torch, model)
                handle = model.register_forward_pre_hook(self._step)
                self._undo.callback(handle.remove)
                self.hooked = True
        except BaseException:
            self._undo.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._undo.close()

    def _compile_forward(self, torch: Any, model: Any) -> None:
        from .compile_options import compile_model

        had = "forward" in vars(model)
        old = vars(model).get("forward")
        compiled = compile_model(model.forward, self.compile)

        def put_back() -> None:
            if had:
                model.forward = old
            else:
                with contextlib.suppress(AttributeError):
                    del model.forward

        model.forward = compiled
        self._undo.callback(put_back)

    # -- the hot path ----------------------------------------------------------------------------
    def _step(self, *_: Any) -> None:
        self._starts.append(_native.now_ns())
        self._faults.append(_faults())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._starts, self._faults = [], []
        f0 = _faults()
        t0 = _native.now_ns()
        try:
            if self._has_generate:
                out = self.model.generate(*args, **self._generate_kwargs(args, kwargs))
            else:
                out = self.model(*args, self.steps, **kwargs)
        finally:
            t1 = _native.now_ns()
            f1 = _faults()
        self.calls.append(CallSteps(t0, t1, list(self._starts), f0, f1, list(self._faults)))
        return out

    def _generate_kwargs(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        """generate's options: exactly `steps` new tokens, greedy; an attention mask of ones over the
        prompt and the pad token as eos where the caller gave none (what transformers falls back to
        anyway, after a warning on every call); the caller's own keywords win."""
        extra: dict[str, Any] = {"max_new_tokens": self.steps, "min_new_tokens": self.steps, "do_sample": False}
        if self.kv_cache:
            extra["cache_implementation"] = self.kv_cache
        ids: Any = args[0] if args else kwargs.get("input_ids")
        if "attention_mask" not in kwargs and hasattr(ids, "new_ones") and getattr(ids, "dim", lambda: 0)() == 2:
            extra["attention_mask"] = ids.new_ones(ids.shape)
        config = getattr(self.model, "generation_config", None)
        if "pad_token_id" not in kwargs and config is not None and getattr(config, "pad_token_id", 0) is None:
            eos = getattr(config, "eos_token_id", None)
            eos = eos[0] if isinstance(eos, (list, tuple)) and eos else eos
            if isinstance(eos, int):
                extra["pad_token_id"] = eos
        return {**extra, **kwargs}

    def take(self) -> list[CallSteps]:
        got, self.calls = self.calls, []
        return got


def steady_phase_ms(steady: list[CallSteps]) -> dict[str, tuple[float, int]]:
    """Each phase's steady median (ms) and how many steady calls reached it ((0.0, 0): none did)."""
    out = {}
    for p in PHASES:
        st = [c.phase_ms()[p] for c in steady if p in c.phase_ms()]
        out[p] = (median(st) if st else 0.0, len(st))
    return out


def steady_phase_spread(steady: list[CallSteps]) -> dict[str, dict[str, float]]:
    """Each phase's steady p10, p90 and noise band (ms; attribution.steady_stats, as the trace's own
    steady passes); a phase no steady call reached is absent."""
    out = {}
    for p in PHASES:
        st = [c.phase_ms()[p] for c in steady if p in c.phase_ms()]
        if st:
            s = steady_stats(st)
            out[p] = {"steady_p10_ms": s.p10, "steady_p90_ms": s.p90, "noise_band_ms": s.noise_band}
    return out


def phase_figures(first: CallSteps, steady: list[CallSteps]) -> list[dict[str, Any]]:
    """Each phase's first-call time against its steady median (ms), with the forwards it held and the
    steady calls' spread (p10, p90, noise band)."""
    rows = []
    first_ms, fw = first.phase_ms(), first.forwards()
    base, spread = steady_phase_ms(steady), steady_phase_spread(steady)
    for p in PHASES:
        if p not in first_ms:
            continue
        ms, n = base[p]
        rows.append({"phase": p, "forwards": fw[p], "first_ms": first_ms[p], "steady_median_ms": ms,
                     "excess_ms": first_ms[p] - ms, "steady_calls": n, **spread.get(p, {})})
    return rows


def steady_phase_faults(steady: list[CallSteps]) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in PHASES:
        got = [c.phase_faults()[p] for c in steady if p in c.phase_faults()]
        if got:
            out[p] = float(median(got))
    return out


def section(first: CallSteps, steady: list[CallSteps], steps: int, kv_cache: str | None, hooked: bool,
            causes_of: Callable[[str, tuple[int, int], float], list[Any]],
            prompt_tokens: int | None) -> dict[str, Any]:
    """The report's `generate` section from the instrumented first call and the steady calls.
    causes_of(phase, window, excess_ms) -> the phase's cause entries (CauseEntry; warmprof's own estimated
    cost among them, which goes to the row's own_cost_ms)."""
    rows = phase_figures(first, steady)
    windows = first.windows()
    for row in rows:
        entries = causes_of(row["phase"], windows[row["phase"]], row["excess_ms"])
        own = [e for e in entries if e.cause == Name.PROFILER_OVERHEAD]
        row["causes"] = [dataclasses.asdict(e) for e in entries if e.cause != Name.PROFILER_OVERHEAD]
        row["own_cost_ms"] = sum(e.ms for e in own)  # warmprof's own, estimated: never the model's
        settle(row)
    prefill = rows[0]
    ttft = {"first_ms": prefill["first_ms"], "steady_median_ms": prefill["steady_median_ms"],
            "excess_ms": prefill["headline_excess_ms"], "source": "instrumented"}
    if prefill["own_cost_ms"]:  # the headline is the model's: warmprof's own cost in the phase is out of it
        ttft["own_cost_ms"] = prefill["own_cost_ms"]
    notes = []
    if not hooked or len(first.starts) < 2:
        notes.append("no step of the generation was seen (the callable called no forward of the model per step, or "
                     f"the model stopped after {len(first.starts)} forward(s)): the whole call is the prefill phase")
    elif len(first.starts) != steps:
        notes.append(f"the first call ran {len(first.starts)} forwards for {steps} new tokens")
    return {
        "new_tokens": steps,
        "prompt_tokens": prompt_tokens,
        "kv_cache": kv_cache or "the model's own",
        "forwards_first_call": len(first.starts),
        "ttft": ttft,
        "call": {"first_ms": (first.t1 - first.t0) / 1e6,
                 "steady_median_ms": median([(c.t1 - c.t0) / 1e6 for c in steady]) if steady else 0.0},
        "phases": rows,
        "notes": notes,
        "how": HOW,
    }


def settle(row: dict[str, Any]) -> None:
    """A phase row's one accounting, exact by construction (to float rounding), and each cause's share:

        headline_excess_ms = attributed_ms + run_to_run_ms + unattributed_ms

    headline_excess_ms: the clean call's excess where the control ran, else the instrumented call's less
    warmprof's own cost in the phase (own_cost_ms); attributed_ms: the phase's causes; run_to_run_ms: the
    clean call's excess less the instrumented call's less warmprof's own cost (two processes never pay
    exactly alike: a difference, never a cost; 0 without a clean control); unattributed_ms: the instrumented
    call's excess less warmprof's own cost less the causes (what the process whose causes were measured
    paid that no instrument named). No cause is sized from what the others leave."""
    causes = row["causes"]
    attributed = sum(c["ms"] for c in causes)
    model_instrumented = row["excess_ms"] - row.get("own_cost_ms", 0.0)
    clean = row.get("clean")
    headline = clean["excess_ms"] if clean else model_instrumented
    row["headline_excess_ms"] = headline
    row["attributed_ms"] = attributed
    row["run_to_run_ms"] = headline - model_instrumented if clean else 0.0
    row["unattributed_ms"] = model_instrumented - attributed
    base = headline if headline > 0 and attributed <= headline else attributed
    for c in causes:
        c["share"] = c["ms"] / base if base > 0 else 0.0


def headline_verdict(section_: dict[str, Any]) -> str:
    """A generate trace's verdict from its own headline: the time to first token's excess (the clean call's
    where the control ran, else the instrumented call's less warmprof's own cost) against the prefill
    phase's steady noise band (the clean calls' where they ran). Beyond the band: "first_call_cost"; under
    minus the band: "first_pass_faster"; within it: "no_first_call_cost". An excess outside the band is
    never "no first-call cost"."""
    ttft = section_.get("ttft") or {}
    prefill: dict[str, Any] = next((r for r in section_.get("phases", []) if r.get("phase") == "prefill"), {})
    excess = float(ttft.get("excess_ms", prefill.get("headline_excess_ms", 0.0)))
    clean = prefill.get("clean") if ttft.get("source") == "clean" else None
    figures = clean if isinstance(clean, dict) and "noise_band_ms" in clean else prefill
    band = max(0.0, float(figures.get("noise_band_ms", 0.0)))
    if excess > band:
        return FIRST_CALL_COST
    return NO_FIRST_CALL_COST if excess >= -band else FIRST_PASS_FASTER


def clean_phases(first: CallSteps, steady: list[CallSteps]) -> dict[str, Any]:
    """The control's clean figures per phase (no instrument but the pass timer and the step hook), with
    each phase's steady spread."""
    keys = ("phase", "first_ms", "steady_median_ms", "excess_ms", *STEADY_STATS)
    return {"phases": [{k: r[k] for k in keys if k in r} for r in phase_figures(first, steady)],
            "forwards_first_call": len(first.starts)}


def fold_clean(section_: dict[str, Any], clean: dict[str, Any] | None) -> None:
    """The headline TTFT from the control's clean first call where it ran (the instrumented call's
    phases keep their causes; each phase gains its clean figures)."""
    if not clean or not clean.get("phases"):
        return
    by = {r["phase"]: r for r in clean["phases"]}
    for row in section_["phases"]:
        c = by.get(row["phase"])
        if c is not None:
            row["clean"] = {k: c[k] for k in ("first_ms", "steady_median_ms", "excess_ms", *STEADY_STATS) if k in c}
    pre = by.get("prefill")
    if pre is not None:
        section_["ttft"] = {"first_ms": pre["first_ms"], "steady_median_ms": pre["steady_median_ms"],
                            "excess_ms": pre["excess_ms"], "source": "clean",
                            "instrumented_first_ms": section_["ttft"]["first_ms"]}


def fold_controls(section_: dict[str, Any], clean: dict[str, Any] | None, warm: list[dict[str, Any]] | None,
                  less: Callable[[list[Any], list[dict[str, Any]]], list[Any]]) -> None:
    """The controls into a generate section: the headline TTFT from the clean first call (fold_clean),
    and each phase's causes less what the warm control booked in the same phase (warmprof's own
    first-call work: `less` is fold._less, by (cause, source)); then each phase's accounting (settle).
    A warm control's phase that carries its first call's time ("first_ms") measures warmprof's own cost
    in the phase (its first call less the steady median, never below 0), in place of the estimate."""
    from ..report.trace import CauseEntry

    fold_clean(section_, clean)
    by = {w["phase"]: w for w in warm or []}
    for row in section_["phases"]:
        w = by.get(row["phase"], {})
        booked = w.get("causes")
        if booked:
            entries = less([CauseEntry(**c) for c in row["causes"]], booked)
            row["causes"] = [dataclasses.asdict(e) for e in entries]
        if isinstance(w.get("first_ms"), (int, float)):
            base = row.get("clean", row)["steady_median_ms"]
            row["own_cost_estimated_ms"] = row.get("own_cost_ms", 0.0)
            row["own_cost_ms"] = max(0.0, float(w["first_ms"]) - base)
        settle(row)
    pre = next((r for r in section_["phases"] if r["phase"] == "prefill"), None)
    if pre is not None and section_["ttft"].get("source") != "clean":  # no clean call: the model's, as settled
        section_["ttft"]["excess_ms"] = pre["headline_excess_ms"]
        section_["ttft"].pop("own_cost_ms", None)
        if pre.get("own_cost_ms"):
            section_["ttft"]["own_cost_ms"] = pre["own_cost_ms"]


__all__ = ["FIRST_CALL_COST", "FIRST_PASS_FASTER", "NO_FIRST_CALL_COST", "STEADY_STATS", "fold_controls", "CallSteps",
           "Generation", "HOW", "KV_CACHES", "PHASES", "check_generate", "clean_phases", "fold_clean",
           "headline_verdict", "phase_figures", "section", "settle", "steady_phase_faults", "steady_phase_ms",
           "steady_phase_spread"]

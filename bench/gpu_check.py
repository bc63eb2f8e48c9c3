"""The GPU check: what CUPTI saw and what warmprof made of it, in one table with PASS/FAIL per row.

    python3 bench/gpu_check.py [--budget-s 220] [--json PATH] [--only callbacks,attribution,eager,compiled]
                               [--trace-json eager=PATH] [--trace-json compiled=PATH]

Run it on a lent GPU machine against the warmprof installed there; it builds nothing. Phases, each
in a fresh child process (a true first call, one CUPTI subscriber per process, and a crash or hang
that cannot take the others down), each cut to what is left of the budget:
  callbacks    a raw ctypes CUPTI subscriber (driver, runtime and resource domains, on the libcupti
               torch mapped) counts the callbacks each torch operation fires (OPS below).
  attribution  the same operations in the same order in a new process, with the instruments a
               compiled CUDA trace runs (the device table's set, warmprof's CUPTI subscriber first,
               and the torch.compile instrument): what warmprof attributes to each (its attribution
               of a "pass" around each operation); then the demo LM's steady pass with and without
               the subscriber (CUPTI's cost per pass).
  eager        `warmprof trace --demo --device cuda`: each cause with its evidence.
  compiled     the same with --compile.
The table: per operation, the callbacks that fired, what warmprof attributed, what the code is
expected to do and PASS / FAIL / N/A; then the two traces' checks and causes (INFO rows); then the
CUPTI overhead against warmprof's own cost in the eager trace (own_cost, source instrumented_steady).
bench/gpu_proof/seq_probe.py is the longer record of the raw callback sequences alone.

About 2-3 minutes on one H200 (the compiled trace is most of it); --budget-s bounds the whole
run, from start to table (default 220 s): a phase gets what is left of it, up to its own cap, and
is killed with its children when that runs out. `--trace-json eager=PATH --trace-json
compiled=PATH` takes those two phases' reports from files instead of running the traces: the proof
(bench/gpu_proof.sh) runs this last that way, on the traces it ran, within what its budget left.
Exit codes: 0 every row PASS or N/A; 1 a row FAILED (a phase that crashed or timed out is a
FAIL row); 3 no GPU here: nothing to check.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

EXIT_FAILED = 1
EXIT_NO_GPU = 3
MIB = 1 << 20
HERE = Path(__file__).resolve().parent

# Operation key -> what it is, in the order both op phases run them.
OPS = {
    "new_segment": "allocate a new 256 MiB segment",
    "h2d_copy": "copy 16 MiB host to device (pageable)",
    "kernel_first": "first launch of a new precompiled kernel (F.gelu)",
    "kernel_second": "second launch of the same kernel",
    "jiterator_first": "first call of a jiterator op (torch.special.i0e: NVRTC)",
    "jiterator_second": "second call of the jiterator op",
    "matmul_first": "first matmul (cuBLAS)",
    "matmul_second": "second matmul",
    "graph_capture": "capture + instantiate a CUDA graph",
    "graph_replay": "replay the CUDA graph",
    "compile_first": "torch.compile first call",
    "compile_second": "torch.compile second call",
}
PHASES = {"callbacks": 60, "attribution": 60, "eager": 60, "compiled": 150}  # name -> cap (s)
MIN_PHASE_S = 8  # a phase with less time than this left is not started
FINISH_S = 5  # of the budget, kept for the table and the --json file after the last phase
HARD_LIMIT_SLACK_S = 5  # past the budget: the run is cut (only if the parent itself hangs)


# --- the operations (run in both op phases, in a child) -----------------------------------------

def op_steps(torch: Any) -> list[tuple[str, Callable[[], Any]]]:
    """OPS as callables, set up so each does only its own first-time work (the CUDA context, a
    warmed side stream for the capture and the graph's kernel exist before the first)."""
    torch.zeros(1, device="cuda")
    y = torch.randn(4096, device="cuda")
    m = torch.randn(512, 512, device="cuda")
    z = torch.zeros(4096, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        z.add_(1)
    torch.cuda.synchronize()
    host = torch.ones(16 * MIB, dtype=torch.uint8)
    graph = torch.cuda.CUDAGraph()
    keep: list[Any] = []

    def capture() -> None:
        with torch.cuda.graph(graph):
            z.add_(1)

    def new_segment() -> None:
        torch.cuda.empty_cache()
        keep.append(torch.empty(256 * MIB, dtype=torch.uint8, device="cuda"))

    # gelu's kernel is in torch's fatbinary (a first launch loads it lazily); i0e is a jiterator op,
    # compiled by NVRTC on its first call into a fresh PYTORCH_KERNEL_CACHE_PATH (the phase's env).
    gelu, i0e = torch.nn.functional.gelu, torch.special.i0e
    compiled = torch.compile(lambda t: (t * 2 + 1).relu())
    return [("new_segment", new_segment), ("h2d_copy", lambda: keep.append(host.to("cuda"))),
            ("kernel_first", lambda: gelu(y)), ("kernel_second", lambda: gelu(y)),
            ("jiterator_first", lambda: i0e(y)), ("jiterator_second", lambda: i0e(y)),
            ("matmul_first", lambda: m @ m), ("matmul_second", lambda: m @ m),
            ("graph_capture", capture), ("graph_replay", graph.replay),
            ("compile_first", lambda: compiled(y)), ("compile_second", lambda: compiled(y))]


# --- child phases: each returns plain data --------------------------------------------------------

def _cupti_library(ctypes: Any) -> tuple[Any, str]:
    """The libcupti torch mapped (never a second copy), else the first the loader finds."""
    with open("/proc/self/maps") as f:
        mapped = sorted({ln.split()[-1] for ln in f if "libcupti" in ln})
    errors = []
    for name in mapped + ["libcupti.so", "libcupti.so.13", "libcupti.so.12"]:
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            errors.append(str(e))
    raise RuntimeError("libcupti not found: " + "; ".join(errors[-3:]))


RESOURCE_NAMES = {1: "CONTEXT_CREATED", 2: "CONTEXT_DESTROY_STARTING", 3: "STREAM_CREATED",
                  4: "STREAM_DESTROY_STARTING", 5: "CU_INIT_FINISHED", 6: "MODULE_LOADED",
                  7: "MODULE_UNLOAD_STARTING", 8: "MODULE_PROFILED", 9: "GRAPH_CREATED",
                  10: "GRAPH_DESTROY_STARTING", 11: "GRAPH_CLONED", 12: "GRAPHNODE_CREATE_STARTING",
                  13: "GRAPHNODE_CREATED", 14: "GRAPHNODE_DESTROY_STARTING", 15: "GRAPHNODE_DEPENDENCY_CREATED",
                  16: "GRAPHNODE_DEPENDENCY_DESTROY_STARTING", 17: "GRAPHEXEC_CREATE_STARTING",
                  18: "GRAPHEXEC_CREATED", 19: "GRAPHEXEC_DESTROY_STARTING"}
DOMAINS = {1: "driver", 2: "runtime", 3: "resource"}


def phase_callbacks() -> dict:
    import ctypes

    import torch  # first: torch's CUDA wheels map their libcupti

    lib, path = _cupti_library(ctypes)
    steps = op_steps(torch)

    class CallbackData(ctypes.Structure):  # CUpti_CallbackData (cupti_callbacks.h), leading fields
        _fields_ = [("site", ctypes.c_int), ("functionName", ctypes.c_char_p)]

    counts: dict[str, dict[str, dict[str, int]]] = {}
    label = [""]

    def on_callback(_user: Any, domain: int, cbid: int, data: Any) -> None:
        try:
            if not label[0]:
                return
            dom = DOMAINS.get(domain)
            if dom in ("driver", "runtime"):
                d = ctypes.cast(data, ctypes.POINTER(CallbackData)).contents
                if d.site != 0:  # CUPTI_API_ENTER only
                    return
                name = (d.functionName or b"?").decode()
            elif dom == "resource":
                name = RESOURCE_NAMES.get(cbid, f"cbid{cbid}")
            else:
                return
            per = counts.setdefault(label[0], {}).setdefault(dom, {})
            per[name] = per.get(name, 0) + 1
        except Exception:  # never raise into CUDA
            pass

    callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)(on_callback)
    handle = ctypes.c_void_p()
    r = lib.cuptiSubscribe(ctypes.byref(handle), callback, None)
    if r != 0:
        raise RuntimeError(f"cuptiSubscribe failed: {_cupti_result(lib, ctypes, r)}")
    try:
        for dom in DOMAINS:
            r = lib.cuptiEnableDomain(1, handle, dom)
            if r != 0:
                raise RuntimeError(f"cuptiEnableDomain({dom}) failed: {_cupti_result(lib, ctypes, r)}")
        for key, fn in steps:
            torch.cuda.synchronize()
            label[0] = key
            fn()
            torch.cuda.synchronize()
            label[0] = ""
    finally:
        lib.cuptiUnsubscribe(handle)
    return {"libcupti": path, "ops": {key: counts.get(key, {}) for key, _ in steps}}


def _cupti_result(lib: Any, ctypes: Any, r: int) -> str:
    s = ctypes.c_char_p()
    lib.cuptiGetResultString(r, ctypes.byref(s))
    return f"{r} ({(s.value or b'?').decode()})"


def trace_instruments() -> list:
    """The instruments a compiled CUDA trace runs on the device (the device table's set, CUPTI
    first) and the torch.compile instrument: each op row judges what a trace would book."""
    from warmprof import devices
    from warmprof.instruments.device_set import device_instruments
    from warmprof.instruments.torch_compile import TorchCompile

    return device_instruments(devices.of("cuda"), {"device": "cuda", "compiled": True}) + [TorchCompile()]


def phase_attribution() -> dict:
    import torch
    from warmprof import _native, timeline
    from warmprof.attribution import attribute_pass

    steps = op_steps(torch)
    instruments = trace_instruments()
    windows: dict[str, tuple[int, int]] = {}
    stats: dict[str, tuple[dict, dict]] = {}
    inferred: dict[str, list] = {}
    with timeline.Recording(spare_buffers=4) as rec:
        with contextlib.ExitStack() as stack:
            for inst in instruments:
                stack.enter_context(inst)
            for key, fn in steps:
                torch.cuda.synchronize()
                for inst in instruments:
                    inst.mark_pass(key)
                before, t0 = _native.cupti_stats(), timeline.now_ns()
                with timeline.span(timeline.STRUCTURE, f"pass:{key}"):
                    fn()
                    for inst in instruments:
                        inst.before_sync(key)
                    torch.cuda.synchronize()
                windows[key], stats[key] = (t0, timeline.now_ns()), (before, _native.cupti_stats())
                for inst in instruments:
                    inst.end_pass(key)
                inferred[key] = [f for inst in instruments for f in inst.inferred(key)]
        tl = rec.drain()
    evidence = {src: ev for inst in instruments for src, ev in inst.span_evidence.items()}
    why = next((inst.reason for inst in instruments if inst.name == "cupti"), "no CUPTI instrument in the set")
    ops = {}
    for key, _ in steps:
        pa = attribute_pass(tl, key, window=windows[key], evidence=evidence, inferred=inferred[key])
        nbytes, names = _by_cause(pa.spans)
        ops[key] = {"parts": [{"cause": p.cause, "source": p.source, "evidence": p.evidence, "ms": p.ms,
                               "count": p.count} for p in pa.parts],
                    "bytes": nbytes, "names": names, "stats": _stats_delta(*stats[key]), "pass_ms": pa.pass_ms}
    return {"cupti": why, "instruments": {inst.name: inst.reason for inst in instruments},
            "stats_keys": sorted(_native.cupti_stats()), "ops": ops,
            "overhead": _cupti_cost_per_pass(torch, _native, timeline)}


def _by_cause(spans: list) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Bytes (allocations, copies) and the distinct span names of each cause among `spans`."""
    from warmprof.timeline import cause_name

    nbytes: dict[str, int] = {}
    names: dict[str, set[str]] = {}
    for s in spans:
        cause = cause_name(s.cause)
        if not cause:  # structure spans (the pass, kernel launches)
            continue
        names.setdefault(cause, set()).add(s.name)
        if s.value > 0:
            nbytes[cause] = nbytes.get(cause, 0) + int(s.value)
    return nbytes, {c: sorted(n) for c, n in names.items()}


def _stats_delta(before: dict, after: dict) -> dict[str, Any]:
    """What an operation added to each cumulative CUPTI stat the module gives (whatever its keys)."""
    out: dict[str, Any] = {}
    for k, v in after.items():
        b = before.get(k)
        if isinstance(v, (int, float)) and isinstance(b, (int, float)):
            out[k] = v - b
        elif isinstance(v, (list, tuple)) and isinstance(b, (list, tuple)):
            out[k] = len(v) - len(b)
    return out


def _cupti_cost_per_pass(torch: Any, native: Any, timeline: Any, passes: int = 30) -> dict[str, Any]:
    """Median demo-LM pass without and with warmprof's CUPTI subscriber (recording on in both)."""
    from warmprof.traces.demo import demo_model

    model = demo_model().cuda()
    ids = torch.randint(0, model.vocab, (1, 128), device="cuda")

    def median_ms() -> float:
        times = []
        for _ in range(passes):
            t0 = time.perf_counter_ns()
            model(ids)
            torch.cuda.synchronize()
            times.append((time.perf_counter_ns() - t0) / 1e6)
        return sorted(times)[passes // 2]

    with torch.no_grad():
        median_ms()  # warm
        with timeline.Recording(spare_buffers=4):
            off = median_ms()
            why = native.cupti_start()
            try:
                c0 = native.cupti_stats().get("callbacks", 0)
                on = median_ms() if not why else None
                c1 = native.cupti_stats().get("callbacks", 0)
            finally:
                native.cupti_stop()
    return {"off_ms": off, "on_ms": on, "reason": why, "callbacks_per_pass": (c1 - c0) / passes}


CHILD_PHASES = {"callbacks": phase_callbacks, "attribution": phase_attribution}


# --- judging (pure: tests/unit/test_cuda_gpu_check_script.py feeds it fake data) ------------------

class Row(NamedTuple):
    section: str
    item: str
    fired: str  # which CUPTI callbacks fired (op rows)
    attributed: str  # what warmprof attributed
    expect: str
    result: str  # PASS, FAIL, N/A or INFO
    note: str = ""


def fired_any(fired: dict | None, prefixes: tuple[str, ...], domains: tuple[str, ...] = ("driver", "runtime")) -> bool | None:
    """Whether a callback named with one of `prefixes` fired (None: the callbacks are not known)."""
    if fired is None:
        return None
    return any(name.startswith(prefixes) for d in domains for name in fired.get(d, {}))


def module_load_fired(fired: dict | None) -> bool | None:
    if fired is None:
        return None
    return "MODULE_LOADED" in fired.get("resource", {}) or bool(
        fired_any(fired, ("cuModuleLoad", "cuLibraryLoad", "cudaLibraryLoad")))


def cause_ms(got: dict, cause: str) -> float:
    return sum(p["ms"] for p in got.get("parts", []) if p["cause"] == cause)


def _launches(got: dict) -> int | None:
    v = got.get("stats", {}).get("kernel_launches")
    return None if v is None else int(v)


def _verdict(ok: bool, why: str = "") -> tuple[str, str]:
    return ("PASS" if ok else "FAIL"), why


def _judge_new_segment(fired, got):
    if fired_any(fired, ("cuMemAlloc", "cuMemCreate", "cudaMalloc")) is False:
        return "N/A", "no allocation callback fired (a cached segment was reused)"
    return _verdict(cause_ms(got, "allocator_growth") > 0 and got.get("bytes", {}).get("allocator_growth", 0) >= 256 * MIB)


def _judge_h2d(fired, got):
    if fired_any(fired, ("cuMemcpy", "cudaMemcpy")) is False:
        return "N/A", "no copy callback fired"
    return _verdict(got.get("bytes", {}).get("data_transfer", 0) >= 16 * MIB)


def _judge_first_launch(fired, got):
    launches = _launches(got)
    if launches is not None and launches < 1:
        return "FAIL", "no kernel launch counted"
    one_time = cause_ms(got, "runtime_init") + cause_ms(got, "jit_compile")
    if module_load_fired(fired) is False:
        return _verdict(cause_ms(got, "runtime_init") == 0, "no module load fired: nothing one-time expected")
    return _verdict(one_time > 0)


def _judge_jiterator_first(fired, got):
    """NVRTC has no CUPTI domain: the compile shows only as the cubin it loads (cuModuleLoadData and
    MODULE_LOADED), which a CUPTI reading alone books runtime_init. The compile is jit_compile."""
    if cause_ms(got, "jit_compile") > 0:
        return "PASS", ""
    if module_load_fired(fired) is False:
        return "N/A", "no module load fired: nothing was compiled (a cached kernel, or torch built without the jiterator)"
    booked = cause_ms(got, "runtime_init")
    return "FAIL", "no jit_compile" + (f"; runtime_init {booked:.2f} ms booked instead" if booked > 0 else "")


def _judge_nothing_one_time(fired, got, causes=("runtime_init", "jit_compile")):
    extra = {c: cause_ms(got, c) for c in causes if cause_ms(got, c) > 0}
    return _verdict(not extra, ", ".join(f"{c} {ms:.3f} ms" for c, ms in extra.items()))


def _judge_first_matmul(fired, got):
    if module_load_fired(fired) is False and fired_any(fired, ("cuMemAlloc", "cudaMalloc")) is False:
        return "N/A", "neither a module load nor an allocation fired (cuBLAS was already set up)"
    return _verdict(cause_ms(got, "runtime_init") + cause_ms(got, "allocator_growth") > 0)


def _judge_capture(fired, got):
    if fired_any(fired, ("cuStreamBeginCapture", "cuGraphInstantiate", "cudaStreamBeginCapture",
                         "cudaGraphInstantiate")) is False:
        return "FAIL", "no capture/instantiate callback fired (the probe did not capture?)"
    return _verdict(cause_ms(got, "graph_capture") > 0)


def _judge_replay(fired, got):
    uploaded = fired_any(fired, ("cuGraphUpload", "cudaGraphUpload"))
    causes = ("runtime_init", "jit_compile") if uploaded else ("runtime_init", "jit_compile", "graph_capture")
    return _judge_nothing_one_time(fired, got, causes)


def _judge_compile_first(fired, got):
    from_compile = sum(p["ms"] for p in got.get("parts", []) if p["cause"] == "jit_compile"
                       and p["source"].startswith("torch.compile"))
    return _verdict(from_compile > 0, "" if from_compile > 0 else "no jit_compile span from torch.compile")


# key -> (expectation, judge(fired or None, attributed) -> (result, note))
OP_RULES: dict[str, tuple[str, Callable[[Any, dict], tuple[str, str]]]] = {
    "new_segment": ("allocator_growth > 0 with >= 256 MiB (CUPTI cuMemAlloc/cuMemCreate or runtime cudaMalloc seen)",
                    _judge_new_segment),
    "h2d_copy": ("data_transfer >= 16 MiB (cuMemcpyHtoD / cudaMemcpy seen)", _judge_h2d),
    "kernel_first": ("launch counted; runtime_init or jit_compile > 0 when a module load fired (lazy loading)",
                     _judge_first_launch),
    "kernel_second": ("second launch of the same kernel: no runtime_init, no jit_compile", _judge_nothing_one_time),
    "jiterator_first": ("jit_compile > 0 (torch's NVRTC compile of the kernel, into its kernel cache)",
                        _judge_jiterator_first),
    "jiterator_second": ("second call: no runtime_init, no jit_compile", _judge_nothing_one_time),
    "matmul_first": ("runtime_init (cuBLAS modules/handle) or allocator_growth (workspace) > 0", _judge_first_matmul),
    "matmul_second": ("no runtime_init, no jit_compile, no allocator_growth",
                      lambda f, g: _judge_nothing_one_time(f, g, ("runtime_init", "jit_compile", "allocator_growth"))),
    "graph_capture": ("graph_capture > 0 (cuStreamBeginCapture..cuGraphInstantiate)", _judge_capture),
    "graph_replay": ("no runtime_init / jit_compile; graph_capture only if cuGraphUpload fired", _judge_replay),
    "compile_first": ("jit_compile > 0 from torch.compile (measured)", _judge_compile_first),
    "compile_second": ("no jit_compile, no runtime_init", _judge_nothing_one_time),
}

KEY_CALLS = ("cuMem", "cudaMalloc", "cudaMemcpy", "cudaFree", "cuLaunch", "cudaLaunch", "cuStream", "cudaStream",
             "cuGraph", "cudaGraph", "cuModule", "cuLibrary", "cudaLibrary", "cuKernel", "cuCtx", "cuDevicePrimaryCtx",
             "cuLink", "nvrtc", "cublas")


def fired_text(fired: dict | None, keep: int = 4) -> str:
    """'drv 12 (cuMemAlloc_v2, ...) | rt 3 (cudaMalloc) | res MODULE_LOADED x2': totals and the key calls."""
    if fired is None:
        return "unknown"
    parts = []
    for dom, short in (("driver", "drv"), ("runtime", "rt"), ("resource", "res")):
        calls = fired.get(dom, {})
        total = sum(calls.values())
        key = [n for n in sorted(calls, key=lambda n: -calls[n]) if dom == "resource" or n.startswith(KEY_CALLS)]
        names = ", ".join(f"{n} x{calls[n]}" if calls[n] > 1 else n for n in key[:keep]) + (", ..." if len(key) > keep else "")
        parts.append(f"{short} {total}" + (f" ({names})" if names else ""))
    return " | ".join(parts)


def attributed_text(got: dict) -> str:
    """'runtime_init 0.30 ms (cupti:lazy_load); launches 1': per cause its time, bytes, span names."""
    by_cause: dict[str, float] = {}
    for p in got.get("parts", []):
        by_cause[p["cause"]] = by_cause.get(p["cause"], 0.0) + p["ms"]
    texts = []
    for cause, ms in sorted(by_cause.items(), key=lambda kv: -kv[1]):
        n = got.get("bytes", {}).get(cause)
        names = got.get("names", {}).get(cause, [])
        texts.append(f"{cause} {ms:.2f} ms" + (f" {n / MIB:.1f} MiB" if n else "")
                     + (f" ({', '.join(names[:3])})" if names else ""))
    text = ", ".join(texts) or "nothing"
    launches = _launches(got)
    if launches is not None:
        text += f"; launches {launches}"
    return text


def op_rows(callbacks: dict, attribution: dict) -> list[Row]:
    cb_ops = callbacks.get("ops") if "error" not in callbacks else None
    at_ops = attribution.get("ops") if "error" not in attribution else None
    rows = []
    for key, label in OPS.items():
        expect, judge = OP_RULES[key]
        fired = cb_ops.get(key, {}) if cb_ops is not None else None
        why_unknown = "" if cb_ops is not None else f"callbacks phase: {callbacks.get('error', '?')}"
        if at_ops is None:
            rows.append(Row("op", label, fired_text(fired), "not run", expect, "FAIL",
                            f"attribution phase: {attribution.get('error', '?')}"))
            continue
        got = at_ops.get(key, {})
        result, note = judge(fired, got)
        if attribution.get("cupti"):
            note = f"warmprof CUPTI off: {attribution['cupti']}" + (f"; {note}" if note else "")
            if result == "PASS":  # "nothing attributed" proves nothing when nothing was subscribed
                result = "N/A"
        note = "; ".join(filter(None, [note, why_unknown]))
        rows.append(Row("op", label, fired_text(fired), attributed_text(got), expect, result, note))
    return rows


def _entries(summary: dict, key: str) -> list[dict]:
    return [c for c in summary.get(key, []) if isinstance(c, dict)]


def _check(section: str, item: str, ok: bool | None, got: str, expect: str, note: str = "") -> Row:
    return Row(section, item, "", got, expect, "N/A" if ok is None else ("PASS" if ok else "FAIL"), note)


def trace_rows(section: str, summary: dict, compiled: bool, refusal: Callable[[str], str] = lambda r: "") -> list[Row]:
    """The checks of one trace report (its JSON as a dict), then one INFO row per cause."""
    if "error" in summary:
        return [Row(section, "trace", "", "not run", "the trace runs", "FAIL", summary["error"])]
    first, steady = float(summary.get("first_pass_ms", 0)), float(summary.get("steady_median_ms", 0))
    causes, rerun = _entries(summary, "causes"), _entries(summary, "seen_rerun_causes")
    inst = summary.get("instruments", {})
    cupti = inst.get("cupti", {})
    rows = [_check(section, "first pass vs steady", first > steady, f"{first:.2f} ms vs {steady:.2f} ms",
                   "first pass slower than the steady median")]
    refused = refusal(cupti.get("reason", "")) if not cupti.get("active") else ""
    rows.append(_check(section, "CUPTI in the trace", None if refused else bool(cupti.get("active")),
                       "active" if cupti.get("active") else f"off: {cupti.get('reason', '?')}",
                       "warmprof's CUPTI subscriber active", refused))
    if compiled:
        jit = sum(c["ms"] for c in causes if c["cause"] == "jit_compile" and str(c.get("source", "")).startswith("torch.compile"))
        rows.append(_check(section, "jit_compile from torch.compile", jit > 0, f"{jit:.1f} ms", "jit_compile > 0 (measured)"))
        again = sum(c["ms"] for c in rerun if c["cause"] == "jit_compile")
        rows.append(_check(section, "seen_rerun jit_compile", again == 0, f"{again:.2f} ms", "no jit_compile in the re-run"))
    else:
        cuda = sum(c["ms"] for c in causes if c["cause"] in ("runtime_init", "allocator_growth") and c.get("evidence") == "measured")
        rows.append(_check(section, "CUDA one-time causes", cuda > 0, f"{cuda:.2f} ms",
                           "runtime_init or allocator_growth > 0 (measured) in the first pass"))
    lazy = sum(c["ms"] for c in rerun if c["cause"] == "runtime_init" and str(c.get("source", "")).startswith("cupti"))
    rows.append(_check(section, "seen_rerun runtime_init from CUPTI", lazy == 0, f"{lazy:.3f} ms",
                       "none: every module was loaded by the first pass"))
    rows.append(_gpu_time_row(section, inst.get("cuda_events", {}), first, float(summary.get("seen_rerun_ms", 0))))
    sub = cupti.get("subscribe_ms")
    if cupti.get("active"):
        rows.append(_check(section, "CUPTI subscribe cost", sub is not None and sub > 0, f"{sub} ms",
                           "measured, reported as profiler_overhead (cupti:subscribe) outside the passes"))
    for pass_name, entries in (("first", causes), ("seen_rerun", rerun)):
        for c in entries:
            if c["cause"] == "unattributed" or (pass_name == "seen_rerun" and c["ms"] <= 0.05):
                continue
            rows.append(Row(section, f"{pass_name}: {c['cause']}", "",
                            f"{c['ms']:.2f} ms {c.get('evidence', '?')} ({c.get('source', '?')}, n={c.get('count', 0)})",
                            "", "INFO", c.get("detail", "")))
    rows.append(Row(section, "excess / unattributed", "", f"{summary.get('excess_ms', 0):.2f} / "
                    f"{summary.get('unattributed_ms', 0):.2f} ms", "", "INFO",
                    f"noise band {summary.get('noise_band_ms', 0):.2f} ms"))
    return rows


def _gpu_time_row(section: str, events: dict, first_ms: float, rerun_ms: float) -> Row:
    expect = "0 < GPU time <= host time + 1 ms per pass (end event recorded before the host sync)"
    gpu = events.get("gpu_ms")
    if not events.get("active") or not gpu:
        return _check(section, "CUDA events GPU time", False, f"off: {events.get('reason', 'no gpu_ms')}", expect)
    pairs = [(gpu.get("first"), first_ms), (gpu.get("seen_rerun"), rerun_ms)]
    ok = all(g is not None and 0 < g <= host + 1.0 for g, host in pairs if host > 0)
    got = " / ".join(f"{g if g is not None else float('nan'):.2f} of {host:.2f} ms" for g, host in pairs)
    return _check(section, "CUDA events GPU time (first / seen_rerun)", ok, got, expect)


def own_cost_entries(summary: dict) -> list[dict]:
    """warmprof's own cost per pass as a trace report books it: `own_cost.entries` (schema 3 on),
    else the profiler_overhead causes of the first pass (older reports)."""
    own = summary.get("own_cost")
    if isinstance(own, dict) and isinstance(own.get("entries"), list):
        return [e for e in own["entries"] if isinstance(e, dict)]
    return [c for c in _entries(summary, "causes") if c.get("cause") == "profiler_overhead"]


OWN_COST_SOURCE = "instrumented_steady"  # attribution/estimators.py instrument_cost: what a CLI trace books


def overhead_rows(attribution: dict, eager: dict) -> list[Row]:
    cost = attribution.get("overhead") or {}
    if "error" in attribution or not cost:
        return [Row("overhead", "CUPTI cost per pass", "", "not measured", "", "N/A", attribution.get("error", ""))]
    if cost.get("on_ms") is None:
        return [Row("overhead", "CUPTI cost per pass", "", "not measured", "", "N/A", f"CUPTI off: {cost.get('reason')}")]
    measured = cost["on_ms"] - cost["off_ms"]
    rows = [Row("overhead", "CUPTI cost per demo-LM pass (median on - off)", "", f"{measured:.3f} ms", "", "INFO",
                f"off {cost['off_ms']:.3f} ms, on {cost['on_ms']:.3f} ms, "
                f"{cost.get('callbacks_per_pass', 0):.0f} callbacks/pass")]
    expect = (f"warmprof's own cost per pass measured on the model (own_cost, source {OWN_COST_SOURCE}, estimated), "
              "at least a third of the CUPTI cost measured here (it holds CUPTI's callbacks and the module hooks)")
    if "error" in eager:
        return rows + [Row("overhead", "own cost in the eager trace", "", "not run", expect, "N/A", eager["error"])]
    reported = [e for e in own_cost_entries(eager) if e.get("source") == OWN_COST_SOURCE]
    ms = sum(float(e.get("ms", 0)) for e in reported)
    ok = bool(reported) and all(e.get("evidence") == "estimated" for e in reported) and (
        measured < 0.1 or ms >= measured / 3)
    got = ", ".join(f"{float(e.get('ms', 0)):.3f} ms {e.get('evidence')} ({e.get('source')})" for e in reported) or (
        "none; booked: " + (", ".join(f"{e.get('source')} {float(e.get('ms', 0)):.3f} ms" for e in own_cost_entries(eager))
                            or "nothing"))
    return rows + [Row("overhead", "own cost in the eager trace (per pass)", "", got, expect, "PASS" if ok else "FAIL")]


def build_rows(results: dict[str, dict], refusal: Callable[[str], str] = lambda r: "") -> list[Row]:
    """The table's rows from the phases' results (a phase left out with --only: its rows too)."""
    none = {"error": "not run"}
    rows = []
    if "attribution" in results:
        rows += op_rows(results.get("callbacks", none), results["attribution"])
    for name in ("eager", "compiled"):
        if name in results:
            rows += trace_rows(name, results[name], name == "compiled", refusal)
    if "attribution" in results:
        rows += overhead_rows(results["attribution"], results.get("eager", none))
    return rows


WIDTHS = {"section": 8, "item": 44, "fired": 64, "attributed": 56, "expect": 72, "result": 4}  # "note": whole


def _cell(text: str, width: int) -> str:
    return (text if len(text) <= width else text[:width - 3] + "...").ljust(width)


def format_table(rows: list[Row]) -> str:
    """One line a row; long cells cut (the --json file keeps them whole); then the counts."""
    cols = list(WIDTHS)
    widths = [max(len(c), min(w, max([0] + [len(str(getattr(r, c))) for r in rows]))) for c, w in WIDTHS.items()]
    lines = ["  ".join(_cell(c, w) for c, w in zip(cols, widths)) + "  note"]
    for r in rows:
        lines.append("  ".join(_cell(str(getattr(r, c)), w) for c, w in zip(cols, widths)) + "  " + r.note)
    counts = {k: sum(r.result == k for r in rows) for k in ("PASS", "FAIL", "N/A", "INFO")}
    lines.append(", ".join(f"{k} {n}" for k, n in counts.items()))
    return "\n".join(lines)


def exit_code(rows: list[Row]) -> int:
    return EXIT_FAILED if any(r.result == "FAIL" for r in rows) else 0


# --- the parent -----------------------------------------------------------------------------------

def environment() -> dict[str, Any]:
    """What the installed warmprof exposes (for the --json file: which branch's module ran)."""
    import warmprof
    from warmprof import _native

    testing = getattr(_native, "_testing", None)
    return {"backends": warmprof.backends(), "version": getattr(warmprof, "__version__", "?"),
            "testing_entries": sorted(n for n in dir(testing) if not n.startswith("_")) if testing else []}


def print_backends(env: dict[str, Any]) -> None:
    for name, e in env["backends"].items():
        print(f"backend {name}: " + ("available" if e["available"] else f"off ({e['reason']})"))


def no_gpu_reason() -> str:
    """'' when torch sees a CUDA GPU; else why there is nothing to check."""
    try:
        import torch
    except ImportError as e:
        return f"torch is not importable ({e})"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__}: torch.cuda.is_available() is False"
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}", flush=True)
    return ""


def platform_refusal() -> Callable[[str], str]:
    """tests/gpu_gate.py's reading of a CUPTI reason as a platform refusal (the same words there)."""
    path = HERE.parent / "tests" / "gpu_gate.py"
    try:
        spec = importlib.util.spec_from_file_location("gpu_gate", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.platform_refusal
    except Exception:
        return lambda reason: ""


_running: list[int] = []  # the process group of the phase running now


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_bounded(cmd: list[str], timeout_s: float, env: dict, log: Path) -> str:
    """Runs `cmd` in its own process group, output to `log`; '' or what went wrong. The whole group
    goes when it returns or times out (torch.compile's workers too): nothing outlives the phase."""
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        _running[:] = [p.pid]
        try:
            rc = p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            _kill_group(p.pid)
            p.wait()
            _running.clear()
    if rc is None:
        return f"timed out after {timeout_s:.0f} s"
    if rc != 0:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1:]
        return f"exit {rc}: {tail[0][:300] if tail else ''}"
    return ""


def _fresh_env(tmp: Path) -> dict:
    try:
        from warmprof.traces.child import fresh_env

        return fresh_env(str(tmp))
    except Exception:  # the caches this script's own ops compile into
        env = dict(os.environ)
        for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH", "PYTORCH_KERNEL_CACHE_PATH"):
            env[var] = str(tmp / var.lower())
        return env


def run_phase(name: str, timeout_s: float, work: Path) -> dict:
    tmp = work / name
    tmp.mkdir()
    out = tmp / "result.json"
    if name in CHILD_PHASES:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--json", str(out)]
        env = _fresh_env(tmp)
    else:  # a trace through the CLI, which runs it in its own fresh child with fresh caches
        cmd = [sys.executable, "-m", "warmprof", "trace", "--demo", "--device", "cuda", "--steady", "10", "--quiet",
               "--json", str(out)] + (["--compile"] if name == "compiled" else [])
        env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    problem = run_bounded(cmd, timeout_s, env, tmp / "log.txt")
    if problem:
        return {"error": problem}
    try:
        return json.loads(out.read_text())
    except (OSError, ValueError) as e:
        return {"error": f"no result: {e}"}


def run_phases(names: list[str], budget_s: float, work: Path) -> dict[str, dict]:
    deadline = time.monotonic() + budget_s
    results: dict[str, dict] = {}
    for name in names:
        left = deadline - time.monotonic()
        if left < MIN_PHASE_S:
            results[name] = {"error": "not run: out of the time budget"}
            continue
        limit = min(PHASES[name], left)
        print(f"phase {name} (limit {limit:.0f} s)", flush=True)
        t0 = time.monotonic()
        results[name] = run_phase(name, limit, work)
        print(f"  {time.monotonic() - t0:.1f} s" + (f": {results[name]['error']}" if "error" in results[name] else ""),
              flush=True)
    return results


def _hard_limit(seconds: float) -> None:
    """The last guard on the whole run (phases already stop at the budget): past it, the running
    phase's group is killed and the script exits FAILED."""
    def expire(*_: Any) -> None:
        for pid in _running:
            _kill_group(pid)
        print(f"gpu_check: hard limit of {seconds:.0f} s reached", flush=True)
        os._exit(EXIT_FAILED)

    signal.signal(signal.SIGALRM, expire)
    signal.alarm(max(1, int(seconds)))


TRACE_PHASES = ("eager", "compiled")


def load_report(path: str) -> dict:
    """A trace report already made (bench/gpu_proof runs the traces itself), as a phase's result."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        return {"error": f"no report at {path}: {e}"}


def child_main(name: str, out: str) -> int:
    result = CHILD_PHASES[name]()
    Path(out).write_text(json.dumps(result, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the rows and the raw phase results here")
    ap.add_argument("--budget-s", type=float, default=220.0, help="the whole run's time limit (default 220 s)")
    ap.add_argument("--only", help=f"comma-separated phases (default all: {','.join(PHASES)})")
    ap.add_argument("--trace-json", action="append", default=[], metavar="PHASE=PATH",
                    help="take the eager or compiled phase's report from PATH (a `warmprof trace --json` file) "
                         "instead of running the trace")
    ap.add_argument("--child", choices=sorted(CHILD_PHASES), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args.child, args.json)
    t0 = time.monotonic()  # the budget counts from here: torch's import is part of it
    given = dict(item.partition("=")[::2] for item in args.trace_json)
    names = args.only.split(",") if args.only else [n for n in PHASES if n not in given]
    unknown = [n for n in names if n not in PHASES] + [n for n in given if n not in TRACE_PHASES]
    if unknown:
        ap.error(f"unknown phases {unknown}; choose from {list(PHASES)} (--trace-json: {list(TRACE_PHASES)})")
    why = no_gpu_reason()  # imports torch first: its CUDA wheels map the libcupti warmprof finds
    env = environment()
    print_backends(env)
    if why:
        print(f"no GPU: nothing to check ({why})")
        return EXIT_NO_GPU
    left = args.budget_s - (time.monotonic() - t0)
    _hard_limit(left + HARD_LIMIT_SLACK_S)
    with tempfile.TemporaryDirectory(prefix="warmprof-gpu-check-") as work:
        results = run_phases([n for n in names if n not in given], left - FINISH_S, Path(work))
    signal.alarm(0)
    results.update({name: load_report(path) for name, path in given.items()})
    rows = build_rows(results, platform_refusal())
    print()
    print(format_table(rows))
    print(f"gpu_check: {time.monotonic() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": [r._asdict() for r in rows], "results": results,
                                               "environment": env}, indent=1, default=str))
    return exit_code(rows)


if __name__ == "__main__":
    sys.exit(main())

"""The proof's reading of its phases (pure: tests/unit/test_gpu_proof_cupti_verdict.py feeds it fakes).

digest(name, result) -> the few lines summary.txt gives a phase; cupti_verdict(seq, ab) -> whether
CUPTI works here, was refused by the platform (the raw ctypes subscribe, no warmprof code, fails or
delivers nothing too) or warmprof is broken (the raw subscribe works and warmprof's does not). A
digest never raises: a result it cannot read is one line saying so.
"""

from __future__ import annotations

from typing import Any, Callable

WORKS = "works"
REFUSED = "refused_by_platform"
BROKEN = "warmprof_broken"
ODD = "raw_failed_warmprof_works"
NOT_SETTLED = "not_settled"


def _num(v: Any, fmt: str = "{:.2f}") -> str:
    return fmt.format(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else "?"


def _failed(result: dict) -> str:
    """What a child or phase said went wrong ('' if nothing)."""
    for key in ("no_gpu", "error", "err"):
        if result.get(key):
            return f"{key}: {str(result[key]).strip().splitlines()[-1][:300] if str(result[key]).strip() else '?'}"
    return ""


# ---- the differential: the raw subscribe against warmprof's ----------------------------------------

def _raw_state(seq: dict | None) -> tuple[str | None, str, int]:
    """(None | "failed" | "silent" | "works", text, callbacks) of the raw ctypes subscriber."""
    if not isinstance(seq, dict) or not isinstance(seq.get("subscribe"), dict):
        return None, _failed(seq) if isinstance(seq, dict) else "no result", 0
    sub = seq["subscribe"]
    text = f"cuptiSubscribe{'_v2' if sub.get('api') == 'v2' else ''} -> {sub.get('result')} ({sub.get('text', '')})" + (
        f", held by {sub['holder']}" if sub.get("holder") else "")
    if sub.get("result") != 0:
        return "failed", text, 0
    steps = seq.get("steps") or {}
    n = int(seq.get("raw_callbacks", sum(int(s.get("callbacks", 0)) for s in steps.values() if isinstance(s, dict))))
    if steps and n == 0:
        return "silent", text + f", then no callback in {len(steps)} operations", 0
    if not steps:
        return None, text + ", no operation ran under it", 0
    return "works", text + f", {n} callbacks in {len(steps)} operations", n


def warmprof_attempts(seq: dict | None, ab: dict | None) -> tuple[list[tuple[str, bool, str]], list[str]]:
    """warmprof's subscribes: [(where, delivered, why)], and those that could not run (a crash)."""
    tried: list[tuple[str, bool, str]] = []
    broken_runs: list[str] = []

    def one(where: str, r: Any, callbacks_key: str) -> None:
        if not isinstance(r, dict):
            return
        if "why" not in r:
            broken_runs.append(f"{where}: {_failed(r) or 'no result'}")
            return
        why = str(r.get("why") or "")
        n = r.get(callbacks_key)
        delivered = not why and isinstance(n, (int, float)) and n > 0
        tried.append((where, delivered, why or ("" if delivered else f"subscribed, {n} callbacks delivered")))

    if isinstance(seq, dict):
        one("fresh process (seq)", seq.get("warmprof_fresh"), "callbacks")
        one("after the raw subscriber left (seq)", seq.get("warmprof_silu"), "callbacks")
    runs = ab.get("runs", []) if isinstance(ab, dict) else []
    for i, r in enumerate(x for x in runs if isinstance(x, dict) and x.get("mode") == "cupti"):
        one(f"A/B run {i + 1}", r, "first_pass_callbacks")
    return tried, broken_runs


def cupti_verdict(seq: dict | None, ab: dict | None) -> dict[str, str]:
    state, raw_text, _ = _raw_state(seq)
    tried, crashed = warmprof_attempts(seq, ab)
    failed = [f"{where}: {why}" for where, ok, why in tried if not ok]
    worked = [where for where, ok, _ in tried if ok]
    extra = ("; warmprof's runs that crashed: " + "; ".join(crashed)) if crashed else ""
    if state is None:
        wp = ("warmprof's: " + ("delivered" if worked and not failed else "; ".join(failed) or "not tried")) if tried else \
            "warmprof's not tried"
        return {"verdict": NOT_SETTLED, "text": f"NOT SETTLED: no raw subscribe to compare ({raw_text}); {wp}{extra}"}
    if state in ("failed", "silent"):
        if worked:
            return {"verdict": ODD, "text": f"NOT SETTLED: the raw ctypes subscribe failed ({raw_text}) but warmprof's "
                                            f"delivered callbacks ({', '.join(worked)}): the raw probe is suspect{extra}"}
        wp = ("; warmprof's fails too: " + "; ".join(failed)) if failed else "; warmprof's not tried"
        return {"verdict": REFUSED, "text": f"REFUSED BY THE PLATFORM: the raw ctypes CUPTI subscribe, no warmprof code, "
                                            f"fails too ({raw_text}){wp}{extra}"}
    if not tried:
        return {"verdict": NOT_SETTLED, "text": f"NOT SETTLED: the raw subscribe works ({raw_text}); warmprof's was "
                                                f"not tried{extra}"}
    if failed:
        return {"verdict": BROKEN, "text": f"WARMPROF BROKEN: the raw ctypes subscribe works ({raw_text}) and warmprof's "
                                           f"does not: " + "; ".join(failed) + extra}
    return {"verdict": WORKS, "text": f"CUPTI WORKS: the raw subscribe ({raw_text}) and warmprof's "
                                      f"({', '.join(worked)}) both deliver callbacks{extra}"}


# ---- one digest a phase --------------------------------------------------------------------------

def _tool_version(text: str) -> str:
    """'release 13.0, V13.0.88' from nvcc's output, cmake's first line, ninja's version, or what failed."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "release" in ln:
            return ln.split("release", 1)[1].strip()[:60]
    return lines[0][:80] if lines else "?"


def _facts(r: dict) -> list[str]:
    t = r.get("torch") or {}
    uname = r.get("uname") or {}
    nv = r.get("nvml") or {}
    gpu = r.get("gpu") or {}
    tools = r.get("tools") or {}
    lines = [f"gpu: {t.get('device', '?')} sm_{''.join(map(str, t.get('capability', []))) or '?'}"
             if gpu.get("available") else f"gpu: NO ({gpu.get('reason', '?')})",
             f"kernel {uname.get('release', '?')} ({'gVisor' if r.get('gvisor') else 'not gVisor'}), "
             f"{r.get('cpus', '?')} CPUs, Python {r.get('python', '?')}",
             f"nvidia-smi: {str((r.get('tools') or {}).get('nvidia-smi', '?'))[:200]}",
             f"torch {t.get('version', '?')} CUDA {t.get('cuda', '?')} cuDNN {t.get('cudnn', '?')}; "
             f"allocator {t.get('allocator_backend', '?')}; module loading {t.get('module_loading', '?')}",
             f"libcupti mapped by import torch: {t.get('libcupti_mapped', '?')} (CUPTI API {t.get('cupti_api_version', '?')})",
             f"SM clock (NVML) now/max: {nv.get('sm_now_mhz', '?')}/{nv.get('sm_max_mhz', '?')} MHz",
             "tools: " + "; ".join(f"{name} {_tool_version(str(tools.get(name, '?')))}" for name in ("nvcc", "cmake", "ninja")),
             "packages: " + ", ".join(f"{k} {v}" for k, v in (r.get("packages") or {}).items())]
    return lines


def _build(r: dict) -> list[str]:
    imp = r.get("import") or {}
    lines = [f"pip rc {r.get('rc', '?')} in {_num(r.get('pip_s'), '{:.0f}')} s"]
    lines += [f"  {ln}" for ln in (r.get("kept_lines") or []) if "warmprof:" in ln][:4]
    if "backends" in imp:
        lines.append("backends: " + "; ".join(
            f"{n} {'available' if e.get('available') else 'off (' + str(e.get('reason', ''))[:160] + ')'}"
            for n, e in imp["backends"].items() if isinstance(e, dict)))
    elif imp:
        lines.append(f"import warmprof: {_failed(imp) or imp}")
    return lines


def _seq(r: dict) -> list[str]:
    _, text, _ = _raw_state(r)
    lines = [f"raw: {text}"]
    for key in ("gelu_first", "i0e_first", "mm_first", "capture"):
        s = (r.get("steps") or {}).get(key)
        if not isinstance(s, dict):
            continue
        launches = ", ".join(f"{e.get('name')}{' (params NULL)' if e.get('params_null') else ''}"
                             for e in (s.get("launches") or [])[:2]) or "none"
        loads = s.get("module_loaded") or []
        where = sorted({str(e.get("in")) for e in loads})
        magic = sorted({str(e.get("magic")) for e in loads if e.get("magic")})
        longest = (s.get("longest") or [{}])[0]
        lines.append(f"{key}: {_num(s.get('ms'), '{:.3f}')} ms, {s.get('callbacks', 0)} callbacks; launch {launches}; "
                     f"MODULE_LOADED x{len(loads)}" + (f" in {where}" if loads else "") +
                     (f" magic {magic}" if magic else "") +
                     (f"; longest {longest.get('name')} {_num(longest.get('dur_us'), '{:.0f}')} us" if longest else ""))
    for key in ("warmprof_fresh", "warmprof_silu"):
        w = r.get(key)
        if isinstance(w, dict):
            lines.append(f"{key}: " + (_failed(w) or f"why {w.get('why')!r}, {w.get('callbacks')} callbacks, "
                                                     f"{w.get('launches')} launches, {w.get('new_kernels')} new kernels"))
    for conf, a in (r.get("allocators") or {}).items():
        if isinstance(a, dict):
            spans = a.get("spans") or []
            lines.append(f"allocator {conf}: " + (_failed(a) or f"backend {a.get('backend')}, {len(spans)} cause spans, "
                                                                f"stats delta {a.get('stats_delta')}"))
    if r.get("errors"):
        lines.append(f"errors: {r['errors'][:3]}")
    return lines


def _kineto(r: dict) -> list[str]:
    k, w = r.get("kineto_first") or {}, r.get("warmprof_first") or {}
    trace = k.get("trace") or {}
    return [f"kineto first: first pass {_num(k.get('first_ms_under_profiler'))} ms under torch.profiler, "
            f"{k.get('kernel_events', '?')} kernel events, overhead records {k.get('overhead_ms', '?')}",
            f"  then warmprof's cupti_start: {k.get('warmprof_after_profile', '?')!r}; in-process trace: cupti "
            f"{trace.get('cupti', '?')}, cuda_events active {(trace.get('cuda_events') or {}).get('active', '?')}, "
            f"first {_num(trace.get('first_ms'))} ms steady {_num(trace.get('steady_ms'))} ms" +
            (f"; {_failed(k)}" if _failed(k) else ""),
            f"warmprof first: start {w.get('warmprof_start', '?')!r}, kineto kernel events while subscribed "
            f"{w.get('kernel_events_while_warmprof_subscribed', '?')}, after it left "
            f"{w.get('kernel_events_after_warmprof_left', '?')}; warmprof's check after the profile "
            f"{w.get('warmprof_check_after_profile', '?')!r}" + (f"; {_failed(w)}" if _failed(w) else "")]


def _median(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if isinstance(x, (int, float)))
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def _ab(r: dict) -> list[str]:
    runs = [x for x in r.get("runs", []) if isinstance(x, dict)]
    lines = []
    by = {m: [x for x in runs if x.get("mode") == m and "first_ms" in x] for m in ("none", "cupti")}
    for mode, rs in by.items():
        if rs:
            lines.append(f"{mode}: first {[round(x['first_ms'], 2) for x in rs]} ms, re-run "
                         f"{[round(x.get('rerun_ms', 0), 2) for x in rs]} ms, steady "
                         f"{[round(x.get('steady_ms', 0), 3) for x in rs]} ms" +
                         (f", callbacks {[x.get('first_pass_callbacks') for x in rs]}, subscribe "
                          f"{[round(x.get('subscribe_ms', 0), 2) for x in rs]} ms, why {[x.get('why') for x in rs]}"
                          if mode == "cupti" else ""))
    a, b = _median([x["first_ms"] for x in by["none"]]), _median([x["first_ms"] for x in by["cupti"]])
    if a is not None and b is not None:
        lines.append(f"warmprof's subscription adds {b - a:+.2f} ms to the first pass (median {b:.2f} vs {a:.2f} ms)")
    lines += [f"run failed: {_failed(x)}" for x in runs if "first_ms" not in x]
    return lines or ["no run finished"]


def _trace(r: dict) -> list[str]:
    cupti = (r.get("instruments") or {}).get("cupti") or {}
    causes = sorted((c for c in r.get("causes", []) if isinstance(c, dict)), key=lambda c: -float(c.get("ms", 0)))
    rerun = [c for c in r.get("seen_rerun_causes", []) if isinstance(c, dict) and float(c.get("ms", 0)) > 0.05]
    own = r.get("own_cost") or {}
    return [f"first {_num(r.get('first_pass_ms'))} ms, seen re-run {_num(r.get('seen_rerun_ms'))} ms, steady "
            f"{_num(r.get('steady_median_ms'), '{:.3f}')} ms; excess {_num(r.get('excess_ms'))} ms, unattributed "
            f"{_num(r.get('unattributed_ms'))} ms (noise {_num(r.get('noise_band_ms'), '{:.3f}')})",
            "cupti: " + ("active" if cupti.get("active") else f"off ({cupti.get('reason', '?')})") +
            f"; own cost {_num(own.get('steady_ms'), '{:.3f}')} ms a pass",
            "causes: " + "; ".join(f"{c.get('cause')} {_num(c.get('ms'))} ms {c.get('evidence', '?')} ({c.get('source', '?')})"
                                   for c in causes[:6]),
            "seen re-run: " + ("; ".join(f"{c.get('cause')} {_num(c.get('ms'))} ms ({c.get('source', '?')})"
                                         for c in rerun[:4]) or "nothing over 0.05 ms")]


def _run_cuda(r: dict) -> list[str]:
    cupti = r.get("cupti") or {}
    state = (f"CUPTI on ({cupti.get('callbacks', '?')} callbacks, subscribe {_num(cupti.get('subscribe_ms'))} ms)"
             if cupti.get("on") else f"CUPTI off: {cupti.get('reason', '?')}")
    init = r.get("cuda_init") or {}
    causes = ", ".join(f"{c.get('cause')} {_num(c.get('ms'))} ms" for c in init.get("causes", [])[:4])
    by = ", ".join(f"{k} {_num(v)} ms" for k, v in sorted((r.get("cupti_ms_by_cause") or {}).items()))
    return [f"  rc {r.get('rc')}; {state}",
            f"  cuda init {_num(init.get('ms'))} ms: {causes or 'no causes'}; unattributed {_num(init.get('unattributed_ms'))} ms",
            f"  CUPTI's spans in the process: {by or 'none'}"]


def _gpu_check(r: dict) -> list[str]:
    rows = [x for x in r.get("rows", []) if isinstance(x, dict)]
    counts = {k: sum(x.get("result") == k for x in rows) for k in ("PASS", "FAIL", "N/A", "INFO")}
    lines = [", ".join(f"{k} {n}" for k, n in counts.items())]
    lines += [f"FAIL {x.get('section')}: {x.get('item')}: {str(x.get('attributed'))[:120]} (expected: "
              f"{str(x.get('expect'))[:100]}){'; ' + str(x.get('note'))[:160] if x.get('note') else ''}"
              for x in rows if x.get("result") == "FAIL"]
    return lines


DIGESTS: dict[str, Callable[[dict], list[str]]] = {
    "facts": _facts, "build": _build, "seq": _seq, "kineto": _kineto, "ab": _ab,
    "trace_eager": _trace, "trace_compile": _trace, "trace_ro": _trace, "gpu_check": _gpu_check, "run_cuda": _run_cuda,
}


def digest(name: str, result: Any) -> list[str]:
    if not isinstance(result, dict) or not result:
        return []
    if result.get("no_gpu"):
        return []
    try:
        return DIGESTS.get(name, lambda r: [])(result)
    except Exception as e:  # a digest must never cost the summary
        return [f"(digest failed: {type(e).__name__}: {e})"]

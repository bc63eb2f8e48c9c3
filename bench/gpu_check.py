"""The CUDA check for a lent GPU machine: warmprof's CUDA figures beside independent references.

    pip install --no-build-isolation --no-deps . && python bench/gpu_check.py [--json PATH]
        [--budget-s 285] [--only backends,eager,...] [--require-gpu]

Sections, in priority order (each in a fresh child process, so every trace sees a true first pass
and a crash or hang in one section cannot take the others down; each has a time limit cut from
the overall budget, so the whole run ends within 5 minutes):
  backends       CUPTI and CUDA events load; CUPTI subscribe cost; raw CUPTI records of a new
                 allocator segment, a host-to-device copy and a CUDA-graph capture, against
                 torch's segment count, the bytes copied and a wall-clock capture time; a CUDA
                 event against a host timer around a GPU sleep.
  eager          trace(demo LM, (1, 128), device="cuda"): causes; cuMemAlloc spans vs the
                 allocator's new segments; launches per pass vs torch.profiler's kernel count.
  compile        the same with torch.compile(mode="reduce-overhead"): jit_compile vs dynamo's own
                 compile time, graph_capture vs torch's CUDAGraphNode.record timer, autotune.
  conv           a small conv net with cudnn.benchmark: algorithm_selection, new conv shapes vs
                 the distinct conv configurations in the net.
  probe_eager, probe_compile   warmprof.probe(device="cuda", backend=...) verdicts.
  cupy           a new CuPy ElementwiseKernel: the jit_compile span vs first call minus second.

Output: one table (section, item, warmprof, reference, ok, note); --json writes the rows.
Exit codes: 0 every section ran (rows may still say a figure did not match); 1 a section failed
or timed out; on a machine without a usable CUDA device it says so ("NO GPU: ...") after checking
the backends, and exits 0 (3 with --require-gpu).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable

ROW_PREFIX = "@@ROW "
SECTIONS = {  # name -> time cap (s)
    "backends": 60,
    "eager": 75,
    "compile": 150,
    "conv": 60,
    "probe_eager": 60,
    "probe_compile": 120,
    "cupy": 60,
}
EXIT_NO_GPU_REQUIRED = 3


# --- rows ---------------------------------------------------------------------------------------

def row(section: str, item: str, warmprof: Any, reference: Any = None, ok: bool | None = None, note: str = "") -> None:
    print(ROW_PREFIX + json.dumps({"section": section, "item": item, "warmprof": warmprof, "reference": reference,
                                   "ok": ok, "note": note}, default=str), flush=True)


def close(a: float, b: float, factor: float = 2.0, floor_ms: float = 1.0) -> bool:
    """Within a factor of each other (or both under `floor_ms`)."""
    if max(abs(a), abs(b)) < floor_ms:
        return True
    lo, hi = sorted((abs(a), abs(b)))
    return lo > 0 and hi / lo <= factor


def fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.2f}"
    return "" if v is None else str(v)


# --- child sections -----------------------------------------------------------------------------

def _spans(report: Any, pass_name: str, prefix: str) -> list[Any]:
    return [s for s in report.spans if s.pass_ == pass_name and s.name.startswith(prefix)]


def _cause_rows(section: str, report: Any) -> None:
    row(section, "first_pass_ms", report.first_pass_ms, note=f"steady median {report.steady_median_ms:.2f} ms")
    row(section, "excess_ms", report.excess_ms, note=f"unattributed {report.unattributed_ms:.2f} ms, "
                                                     f"noise band {report.noise_band_ms:.2f} ms")
    for cause, ms in sorted(report.by_cause().items(), key=lambda kv: -kv[1]):
        kinds = "+".join(sorted({c.evidence for c in report.causes if c.cause == cause}))
        row(section, f"first: {cause}", ms, note=kinds)
    for c in report.seen_rerun_causes:
        if c.cause != "unattributed" and c.ms > 0.05:
            row(section, f"seen_rerun: {c.cause}/{c.source}", c.ms, note=c.evidence)
    for name, inst in sorted(report.instruments.items()):
        if inst.get("reason"):
            row(section, f"instrument {name}", "off", note=inst["reason"])
    cupti = report.instruments.get("cupti", {})
    if cupti.get("active"):
        row(section, "cupti subscribe_ms (profiler_overhead, outside the pass)", cupti.get("subscribe_ms"))
    gpu = report.instruments.get("cuda_events", {}).get("gpu_ms", {})
    if gpu:
        row(section, "gpu_ms first / seen_rerun (CUDA events)", f"{gpu.get('first', 0):.2f} / {gpu.get('seen_rerun', 0):.2f}")
    ramp = report.instruments.get("clock_ramp", {})
    if ramp.get("active"):
        first = ramp.get("passes", {}).get("first", {})
        row(section, "clock_ramp inferred_ms (first)", first.get("inferred_ms"),
            note=f"start {first.get('start_mhz')} MHz, steady {ramp.get('steady_mhz')} MHz ({ramp.get('source')})")


def _allocator_rows(section: str, report: Any) -> None:
    allocs = [s for s in _spans(report, "first", "cupti:cuMem") if s.cause == "allocator_growth"]
    segments = report.instruments.get("torch_cuda_allocator", {}).get("passes", {}).get("first", {}).get("segments")
    n_alloc = sum(1 for s in allocs if "Alloc" in s.name or "Create" in s.name)
    row(section, "device allocations in first pass (CUPTI cuMemAlloc/cuMemCreate spans)", n_alloc,
        reference=segments, ok=None if segments is None else n_alloc == segments,
        note="reference: torch allocator's new segments")
    row(section, "bytes allocated (CUPTI)", sum(s.value for s in allocs if "Map" not in s.name and "Reserve" not in s.name))


def section_backends() -> None:
    import torch

    import warmprof
    from warmprof import _native
    from warmprof.timeline import Recording

    s = "backends"
    for name, entry in warmprof.backends().items():
        row(s, f"backend {name}", "available" if entry["available"] else "off", ok=entry["available"] or name == "metal",
            note=entry["reason"])
    torch.zeros(1, device="cuda")  # context up before CUPTI (as in a trace)
    with Recording() as rec:
        why = _native.cupti_start()
        row(s, "cupti_start", why or "subscribed", ok=not why)
        if not why:
            try:
                _cupti_micro_checks(s, torch)
            finally:
                _native.cupti_stop()
        stats = _native.cupti_stats()
    row(s, "cupti subscribe_ms", stats["subscribe_ns"] / 1e6, note=f"{stats['callbacks']} callbacks")
    row(s, "cupti active after stop", _native.cupti_active(), ok=not _native.cupti_active())
    _records_rows(s, rec.drain())
    _event_rows(s, torch, _native)


def _cupti_micro_checks(s: str, torch: Any) -> None:
    from warmprof import timeline

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    seg0 = torch.cuda.memory_stats().get("segment.all.allocated", 0)
    with timeline.span(timeline.STRUCTURE, "check:alloc"):
        x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    seg1 = torch.cuda.memory_stats().get("segment.all.allocated", 0)
    row(s, "torch new segments for a 256 MiB tensor", seg1 - seg0, note="reference for the CUPTI allocation rows")
    host = torch.ones(16 << 20, dtype=torch.uint8)
    with timeline.span(timeline.STRUCTURE, "check:copy"):
        host.to("cuda")
        torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    y = torch.zeros(1024, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y.add_(1)  # warm the kernel outside the capture
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    with timeline.span(timeline.STRUCTURE, "check:graph"):
        with torch.cuda.graph(g):
            y.add_(1)
    capture_ms = (time.perf_counter_ns() - t0) / 1e6
    row(s, "torch.cuda.graph capture wall ms", capture_ms, note="reference for the graph_capture rows")
    del x


def _records_rows(s: str, tl: Any) -> None:
    from warmprof.attribution import build_spans
    from warmprof.timeline import ALLOCATOR_GROWTH, DATA_TRANSFER, GRAPH_CAPTURE, RUNTIME_INIT

    spans = build_spans(tl)
    allocs = [x for x in spans if x.cause == ALLOCATOR_GROWTH and x.name.startswith("cupti:")]
    row(s, "CUPTI allocation spans / bytes", f"{len(allocs)} / {sum(x.value for x in allocs)}",
        reference=f">=1 / >={256 << 20}", ok=bool(allocs) and sum(x.value for x in allocs) >= 256 << 20)
    copies = [x for x in spans if x.cause == DATA_TRANSFER]
    row(s, "CUPTI host-to-device bytes", sum(x.value for x in copies), reference=16 << 20,
        ok=sum(x.value for x in copies) >= 16 << 20, note=", ".join(sorted({x.name for x in copies})))
    graph = [x for x in spans if x.cause == GRAPH_CAPTURE]
    graph_ms = sum(x.dur_ns for x in graph if x.name == "cupti:stream_capture" or "Instantiate" in x.name) / 1e6
    row(s, "CUPTI graph_capture spans", ", ".join(sorted({x.name for x in graph})) or "none", ok=bool(graph))
    row(s, "CUPTI stream_capture + instantiate ms", graph_ms, note="compare with the wall ms above")
    init = [x for x in spans if x.cause == RUNTIME_INIT]
    row(s, "CUPTI runtime_init spans", len(init), note=", ".join(sorted({x.name for x in init}))[:120])


def _event_rows(s: str, torch: Any, native: Any) -> None:
    stream = torch.cuda.current_stream().cuda_stream
    a = native.cuda_event_record(stream)
    t0 = time.perf_counter_ns()
    torch.cuda._sleep(50_000_000)
    b = native.cuda_event_record(stream)
    ms = native.cuda_event_elapsed_ms(a, b)
    host_ms = (time.perf_counter_ns() - t0) / 1e6
    native.cuda_events_release()
    row(s, "CUDA event ms around a GPU sleep", ms, reference=host_ms, ok=close(ms, host_ms, 1.5),
        note="reference: host wall time until the end event completed")


def _trace_demo(s: str, compile: Any) -> Any:
    import warmprof
    from warmprof.demo import demo_model

    t0 = time.perf_counter()
    report = warmprof.trace(demo_model(), (1, 128), device="cuda", compile=compile, steady=(5, 30), steady_budget_s=2.0)
    row(s, "trace wall s", time.perf_counter() - t0)
    _cause_rows(s, report)
    return report


def _profiler_launches(model_fn: Callable[[], Any], torch: Any) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        model_fn()
        torch.cuda.synchronize()
    return sum(e.count for e in prof.key_averages() if getattr(e, "device_type", None) is not None
               and "CUDA" in str(e.device_type) and not e.key.startswith("Memcpy") and not e.key.startswith("Memset"))


def section_eager() -> None:
    import torch

    from warmprof.demo import demo_model

    s = "eager"
    report = _trace_demo(s, None)
    _allocator_rows(s, report)
    cupti = report.instruments.get("cupti", {}).get("passes", {})
    lazy = _spans(report, "first", "cupti:lazy_load")
    row(s, "lazy module loads in first launches", len(lazy), note=f"CUDA_MODULE_LOADING={os.environ.get('CUDA_MODULE_LOADING', '(default: LAZY)')}")
    rerun = cupti.get("seen_rerun", {}).get("kernel_launches")
    model = demo_model().cuda()
    ids = torch.randint(0, model.vocab, (1, 128), device="cuda")
    with torch.no_grad():
        model(ids)
        ref = _profiler_launches(lambda: model(ids), torch)
    row(s, "kernel launches in seen_rerun (CUPTI)", rerun, reference=ref, ok=None if rerun is None else rerun == ref,
        note="reference: torch.profiler kernel count of a steady pass")
    row(s, "new kernels first pass / seen_rerun", f"{cupti.get('first', {}).get('new_kernels')} / "
                                                  f"{cupti.get('seen_rerun', {}).get('new_kernels')}")


def section_compile() -> None:
    s = "compile"
    report = _trace_demo(s, "reduce-overhead")
    tc = report.instruments.get("torch_compile", {})
    jit = report.cause_ms("jit_compile")
    torch_ms = tc.get("torch_reported_compile_ms", 0.0)
    row(s, "jit_compile ms (first)", jit, reference=torch_ms, ok=close(jit, torch_ms, 1.5),
        note="reference: dynamo's _compile.compile_inner total")
    ind = report.instruments.get("inductor_cuda", {}).get("passes", {})
    for key, cause in (("cudagraph_record_ms", "graph_capture"), ("triton_autotune_ms", "algorithm_selection")):
        ref = sum(p.get(key, 0.0) for p in ind.values())
        got = report.cause_ms(cause) + sum(c.ms for c in report.seen_rerun_causes if c.cause == cause)
        row(s, f"{cause} ms (first + seen_rerun)", got, reference=ref, ok=close(got, ref, 1.5),
            note=f"reference: torch timer {key}")
    captures = _spans(report, "first", "cupti:stream_capture") + _spans(report, "seen_rerun", "cupti:stream_capture")
    row(s, "CUPTI stream captures (first + seen_rerun)", len(captures), ok=len(captures) > 0,
        note="cudagraph trees record on the 2nd call")


def section_conv() -> None:
    import torch

    import warmprof

    s = "conv"
    torch.backends.cudnn.benchmark = True
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10))
    report = warmprof.trace(net, (8, 3, 64, 64), device="cuda", steady=(5, 30), steady_budget_s=2.0)
    _cause_rows(s, report)
    found = report.instruments.get("cudnn_benchmark", {}).get("new_shapes", {})
    distinct = 4
    row(s, "cuDNN finds first / seen_rerun", f"{found.get('first', 0)} / {found.get('seen_rerun', 0)}",
        reference=f"{distinct} / 0", ok=found.get("first", 0) == distinct and not found.get("seen_rerun"),
        note="reference: distinct conv configurations in the net")
    row(s, "algorithm_selection ms", report.cause_ms("algorithm_selection"), ok=report.cause_ms("algorithm_selection") > 0)


def _probe(s: str, backend: str, ops: tuple[str, ...]) -> None:
    import warmprof

    t0 = time.perf_counter()
    report = warmprof.probe(ops, device="cuda", backend=backend, K=6, B=2, shapes_per_op=2, steady_calls=10,
                            rerun_rounds=1, progress=False)
    row(s, "probe wall s", time.perf_counter() - t0)
    row(s, "verdicts", json.dumps(report.verdicts()))
    for note in report.notes[:3]:
        row(s, "note", "", note=note)


def section_probe_eager() -> None:
    _probe("probe_eager", "eager", ("matmul", "softmax", "elementwise"))


def section_probe_compile() -> None:
    _probe("probe_compile", "compile", ("matmul", "elementwise"))


def section_cupy() -> None:
    s = "cupy"
    try:
        import cupy
    except ImportError as e:
        row(s, "cupy", "skipped", note=f"cupy is not installed ({e})")
        return
    from warmprof.instruments.cuda import Cupti
    from warmprof.instruments.cupy import Cupy
    from warmprof.timeline import Recording

    kernel = cupy.ElementwiseKernel("float32 x", "float32 y", f"y = x * {time.time_ns() % 997}.0f + 1.0f",
                                    f"warmprof_check_{os.getpid()}")
    x = cupy.ones(1 << 20, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    with Recording() as rec:
        with Cupti() as cupti, Cupy() as inst:
            inst.mark_pass("first")
            t0 = time.perf_counter_ns()
            kernel(x)
            cupy.cuda.Device().synchronize()
            first_ms = (time.perf_counter_ns() - t0) / 1e6
    t0 = time.perf_counter_ns()
    kernel(x)
    cupy.cuda.Device().synchronize()
    second_ms = (time.perf_counter_ns() - t0) / 1e6
    from warmprof.attribution import build_spans

    spans = build_spans(rec.drain())
    jit_ms = sum(sp.dur_ns for sp in spans if sp.name == "cupy:kernel_cache") / 1e6
    row(s, "jit_compile ms (cupy:kernel_cache span)", jit_ms, reference=first_ms - second_ms,
        ok=close(jit_ms, first_ms - second_ms, 1.5), note="reference: first call minus second call")
    row(s, "NVRTC compiles / disk hits", f"{sum(inst.compiles.values())} / {sum(inst.summary()['disk_cache_hits'].values())}")
    row(s, "cupti", "on" if cupti.available else "off", note=cupti.reason)


# --- parent -------------------------------------------------------------------------------------

def gpu_status() -> tuple[bool, str]:
    """(usable, why not): checked in the parent, before any child starts."""
    import warmprof

    backends = warmprof.backends()
    for name in ("cupti", "cuda_events"):
        e = backends[name]
        print(f"backend {name}: compiled={e['compiled']} available={e['available']}"
              + (f" ({e['reason']})" if e["reason"] else ""))
    try:
        import torch
    except ImportError as e:
        return False, f"torch is not importable ({e})"
    if not torch.cuda.is_available():
        why = backends["cuda_events"]["reason"] or "no CUDA device visible"
        return False, f"torch {torch.__version__}: torch.cuda.is_available() is False; {why}"
    name = torch.cuda.get_device_name(0)
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, device 0: {name}")
    return True, ""


def run_child(section: str, timeout_s: float) -> tuple[list[dict], str]:
    """Rows the child printed, and '' or what went wrong."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", section]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        out, err, rc = p.stdout, p.stderr, p.returncode
        problem = "" if rc == 0 else f"exit {rc}: {_last_line(err)}"
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        problem = f"timed out after {timeout_s:.0f} s"
    rows = [json.loads(line[len(ROW_PREFIX):]) for line in out.splitlines() if line.startswith(ROW_PREFIX)]
    return rows, problem


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def print_table(rows: list[dict]) -> None:
    cols = ("section", "item", "warmprof", "reference", "ok", "note")
    cells = [[r["section"], r["item"], fmt(r["warmprof"]), fmt(r["reference"]),
              {True: "yes", False: "NO", None: ""}[r["ok"]], r["note"]] for r in rows]
    widths = [min(60, max([len(c)] + [len(str(x[i])) for x in cells])) for i, c in enumerate(cols[:-1])]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)) + "  note")
    for c in cells:
        print("  ".join(str(v)[:60].ljust(w) for v, w in zip(c, widths)) + "  " + str(c[-1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--budget-s", type=float, default=285.0, help="overall time budget (default 285 s)")
    ap.add_argument("--only", help="comma-separated sections (default: all)")
    ap.add_argument("--require-gpu", action="store_true", help=f"exit {EXIT_NO_GPU_REQUIRED} when no GPU is usable")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        globals()[f"section_{args.child}"]()
        return 0
    usable, why = gpu_status()
    if not usable:
        print(f"NO GPU: {why}. Nothing that needs a GPU was run.")
        return EXIT_NO_GPU_REQUIRED if args.require_gpu else 0
    sections = args.only.split(",") if args.only else list(SECTIONS)
    unknown = [x for x in sections if x not in SECTIONS]
    if unknown:
        ap.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")
    deadline = time.monotonic() + args.budget_s
    rows: list[dict] = []
    failed = False
    for section in sections:
        left = deadline - time.monotonic()
        if left < 10:
            rows.append({"section": section, "item": "skipped", "warmprof": None, "reference": None, "ok": None,
                         "note": "out of time budget"})
            continue
        print(f"running {section} (limit {min(SECTIONS[section], left):.0f} s)", flush=True)
        got, problem = run_child(section, min(SECTIONS[section], left))
        rows.extend(got)
        if problem:
            failed = True
            rows.append({"section": section, "item": "FAILED", "warmprof": None, "reference": None, "ok": False,
                         "note": problem})
    print()
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Synthetic reports for tests (compare, chrome, png, show, terminal safety, output files).

Consistent by construction: excess = causes + unattributed, spans nested inside modules. Import
with `from factories import trace_report` (tests/ is on sys.path through its conftest.py).
"""

from __future__ import annotations

from warmprof.report import CauseEntry, CounterSample, Report, Span
from warmprof.report.probe import Prediction, ProbeReport, ShapeRow

ORIN = {"os": "Ubuntu 22.04.4 LTS", "cpu": "ARM Cortex-A78AE", "cpu_count": 12, "jetson": "NVIDIA Jetson AGX Orin Developer Kit",
        "power_mode": "MAXN", "gpu": "Orin integrated GPU (Ampere)", "python": "3.10.12", "torch": "2.5.0"}
DESKTOP = {"os": "Ubuntu 22.04.4 LTS", "cpu": "AMD Ryzen 9 5950X 16-Core Processor", "cpu_count": 32,
           "gpu": "NVIDIA GeForce RTX 4090", "cuda_driver": "550.54.14", "python": "3.10.12", "torch": "2.5.0"}


_DEFAULT = object()


def trace_settings(device: str = "cpu", compile: str | None = None, shape=(1, 64), torch: str = "2.5.0", **over):
    """A trace's settings record as `warmprof trace --shape 1,64` on 4 threads would write it."""
    from warmprof.report.settings import Settings

    base = dict(device=device, compile=compile, model_dtype="float32", input_dtype="float32",
                input_shape=list(shape) if shape else None, threads=4, cache="fresh", fresh_process=True,
                torch_version=torch)
    return Settings(**{**base, **over})


def trace_report(causes: dict[str, float], *, steady: float = 4.0, unattributed: float = 1.5, model: str = "demo_lm",
                 shape=(1, 64), device: str = "cpu", platform: dict | None = None, compile: str | None = None,
                 version: str = "0.1.0", rerun_causes: dict[str, float] | None = None, steady_spans: int = 0,
                 settings=_DEFAULT) -> Report:
    """A consistent trace report: excess = causes + unattributed, spans nested inside modules. Its
    settings record matches its fields (trace_settings); settings=None: a report written before the record."""
    excess = sum(causes.values()) + unattributed
    first = steady + excess
    entries = [CauseEntry(cause=c, ms=ms, share=ms / excess, evidence="measured", source=f"src_{c}", module="blocks.0", count=2)
               for c, ms in causes.items()]
    entries.append(CauseEntry(cause="unattributed", ms=unattributed, share=unattributed / excess, evidence="residual", source="residual"))
    rerun = rerun_causes or {}
    rerun_ms = steady + sum(rerun.values()) + 0.2
    spans = [Span("first", "pass:first", "", "pass", "", 0.0, first, 0),
             Span("first", "module:blocks.0", "", "module", "blocks.0", 0.1, first - 0.2, 1)]
    t = 0.2
    for c, ms in causes.items():
        spans.append(Span("first", f"src_{c}:{c}", c, f"src_{c}", "blocks.0", t, ms * 0.9, 2, value=7))
        t += ms * 0.9 + 0.01
    # A child whose end overruns its parent by a rounding error, and a span on a second thread.
    spans.append(Span("first", "module:blocks.0.mlp", "", "module", "blocks.0.mlp", first - 0.15, 0.05 + 1e-7, 2))
    spans.append(Span("first", "onednn:create", "jit_compile", "onednn", "", 0.3, 0.2, 0, thread=1))
    spans += [Span("seen_rerun", "pass:seen_rerun", "", "pass", "", 0.0, rerun_ms, 0),
              Span("seen_rerun", "module:blocks.0", "", "module", "blocks.0", 0.05, rerun_ms - 0.1, 1)]
    for i in range(steady_spans):
        start = 100.0 * i
        spans += [Span("steady", "pass:steady", "", "pass", "", start, steady + 0.1 * i, 0),
                  Span("steady", "module:blocks.0", "", "module", "blocks.0", start + 0.05, steady / 2, 1)]
    samples = [CounterSample("first", "host:minor_faults", t_ms, v) for t_ms, v in ((0.0, 1000), (first / 2, 1600), (first, 2100))]
    samples += [CounterSample("first", "host:rss_bytes", t_ms, v) for t_ms, v in ((0.0, 2e8), (first, 2.5e8))]
    samples += [CounterSample("seen_rerun", "host:minor_faults", t_ms, v) for t_ms, v in ((0.0, 2100), (rerun_ms, 2110))]
    return Report(
        model=model, shape=list(shape) if shape else None, device=device, first_pass_ms=first, seen_rerun_ms=rerun_ms,
        steady_median_ms=steady, noise_band_ms=0.3, excess_ms=excess, unattributed_ms=unattributed, causes=entries,
        platform=dict(platform if platform is not None else DESKTOP), dtype="float32", compile=compile, steady_passes=20,
        attributed_ms=excess - unattributed,
        seen_rerun_causes=[CauseEntry(c, ms, 0.0, "measured", f"src_{c}") for c, ms in rerun.items()],
        spans=spans, counter_samples=samples, warmprof_version=version, created="2025-01-01T00:00:00Z",
        settings=(trace_settings(device, compile, shape, torch=str((platform or DESKTOP).get("torch", "")))
                  if settings is _DEFAULT else settings),
    )


def shape_row(shape: list[int], first_ms: float, steady_ms: float, verdict: str, role: str = "new_shape") -> ShapeRow:
    return ShapeRow(shape=shape, label="x".join(map(str, shape)), role=role, output_bytes=4096, first_ms=first_ms,
                    steady_ms=steady_ms, steady_p10_ms=steady_ms * 0.9, steady_p90_ms=steady_ms * 1.2,
                    ratio=first_ms / steady_ms, seen_rerun_ms=steady_ms * 1.1, alloc_hi_ms=0.2, keyed="shape", verdict=verdict)


def probe_report(scale: float = 1.0, platform: dict | None = None, holds: bool = True, ops: tuple[str, ...] = ("matmul", "softmax"),
                 backend: str = "compile") -> ProbeReport:
    rows = {
        "matmul": [shape_row([64, 64, 64], 30.0 * scale, 0.05, "compile", "op_first"),
                   shape_row([96, 64, 32], 25.0, 0.04, "compile")],
        "softmax": [shape_row([1, 1024], 2.0, 0.02, "allocation", "op_first"), shape_row([3, 1024], 0.03, 0.02, "launch")],
    }
    return ProbeReport(
        device="cuda", backend=backend,
        bands={"launch": {"lo_ms": 0.001, "hi_ms": 0.01, "how": "trivial op"},
               "allocation": {"lo_ms": 0.01, "hi_ms": 0.5, "how": "fresh allocation"},
               "compile": {"lo_ms": 0.5, "hi_ms": None, "how": "above allocation"}},
        ops={op: rows[op] for op in ops}, shape_vs_size=[],
        bucketing={"K": 8, "B": 2, "distinct": {"compiles": 8, "wall_ms": 120.0}, "bucketed": {"compiles": 2, "wall_ms": 31.0},
                   "default_dynamic": None},
        predictions=[Prediction("P1", "first call >> steady at new shapes", True, "median first/steady: matmul 600x"),
                     Prediction("P3", "keyed on shape, not size", holds, "both pay > 5x? matmul 64x64 12x / 32x128 1.1x")],
        platform=dict(platform if platform is not None else DESKTOP), warmprof_version="0.1.0",
    )


ADDMM_CALL = {"op": "aten.addmm.default", "args": [{"tensor": [32], "dtype": "float32"}, {"tensor": [8, 16], "dtype": "float32"},
                                                   {"tensor": [16, 32], "dtype": "float32", "stride": [1, 16]}], "kwargs": {}}
ADD_CALL = {"op": "aten.add.Tensor", "args": [{"tensor": [4, 8], "dtype": "float32"}, {"tensor": [4, 8], "dtype": "float32"}],
            "kwargs": {}}


def trace_report_with_ops(rows: list[dict] | None = None, threads: int | None = 1):
    """A trace report whose unattributed_where holds op rows (the op view's), as `probe --from` reads them."""
    from warmprof.report.trace import Protocol, RunContext

    r = trace_report({"jit_compile": 2.0})
    r.unattributed_where = rows if rows is not None else [
        {"module": "blocks.0", "ms": 0.2},  # module code outside any op
        {"module": "blocks.0.mlp", "ms": 0.9, "op": "aten.addmm.default", "calls": 2, "call": ADDMM_CALL},
        {"module": "blocks.0.act", "ms": 0.5, "op": "aten.add.Tensor", "calls": 1, "call": ADD_CALL},
        {"module": "blocks.1.mlp", "ms": 0.4, "op": "aten.addmm.default", "calls": 2, "call": ADDMM_CALL},  # same call again
    ]
    r.protocol = Protocol(run=RunContext(fresh_process=True, cache="fresh", threads=threads))
    return r


def op_result(verdict: str = "jit_compile", **over):
    from warmprof.report.op_probe import OpResult

    base = dict(op="aten.addmm.default", short="addmm", label="f32[32], f32[8,16], f32[16,32]*", call=dict(ADDMM_CALL),
                verdict=verdict, evidence="first 1 ms vs steady 0.02 ms", first_ms=1.0, steady_ms=0.02, steady_p10_ms=0.019,
                steady_p90_ms=0.022, cold_excess_ms=0.98, shape_excess_ms=0.5, rerun_ms=0.021, runtime_warmup_ms=1.3,
                launch_hi_ms=0.002, alloc_hi_ms=0.05, working_set_bytes=4096,
                variants=[{"what": "leading dim", "label": "f32[32], f32[13,16], f32[16,32]*", "first_ms": 0.52,
                           "steady_ms": 0.02, "steady_p10_ms": 0.019, "steady_p90_ms": 0.021}],
                source={"module": "blocks.0.mlp", "ms": 0.9, "calls": 2})
    base.update(over)
    return OpResult(**base)


def op_probe_report(results: list | None = None):
    from warmprof.report.op_probe import OpProbeReport

    return OpProbeReport(device="cpu", ops=results or [op_result(), op_result("failed", error="RuntimeError: boom", first_ms=None,
                                                                              steady_ms=None, cold_excess_ms=None)],
                         platform=dict(DESKTOP), protocol={"threads": 1, "steady_calls": 20}, wall_s=1.5,
                         warmprof_version="0.1.0", created="2025-01-01T00:00:00Z")


def watch_call(*fields):
    """A _native.WatchCall (what watch's hot path hands over for a kept call) from its fields in order;
    the CUPTI rows default to None."""
    from warmprof import _native

    fields = list(fields) + [None] * (_native.WatchCall.n_fields - len(fields))
    return _native.WatchCall(fields)


def call_costs(fault_ns: float):
    """watch's unit costs with the first-touch cost of one fault fixed (no calibration in unit tests)."""
    from warmprof import _native
    from warmprof.attribution.faults import call_calibration
    from warmprof.serving.watch.events import CallCosts

    return CallCosts(call_calibration(fault_ns, _native.page_size()))


THREAD_CLOCK_NAMES = ("host:run_delay_ns", "host:thread_cpu_ns", "host:voluntary_switches", "host:storage_read_bytes",
                      "host:thread_major_faults", "host:involuntary_switches")


def thread_clock_timeline(spans, boundaries, *, pass_ms: float = 100.0, thread: int = 0, clock_thread: int | None = None,
                          process_major_faults=()):
    """A synthetic pass (0 to pass_ms) on `thread` with the pass thread's clocks as module boundaries
    record them. spans: (name, cause id, start ms, end ms). boundaries: (t_ms, run_delay_ns) where the
    thread kept its CPU (the run-queue delay only), or (t_ms, run_delay_ns, cpu_ns, voluntary, read_bytes,
    major_faults[, involuntary]) where it had left it (the involuntary switches with the delay, the rest
    read just after, 2 us later, as bindings.cpp does).
    clock_thread: the thread the clocks are of (default: the pass's). process_major_faults: (t_ms, count)
    samples of the process's major faults (host:major_faults, sampled at every boundary)."""
    from warmprof.timeline import BEGIN, COUNTER, END, STRUCTURE, Timeline

    ms = 1_000_000
    names = ["pass:first", *THREAD_CLOCK_NAMES, "host:major_faults"]
    recs = [(0, BEGIN, STRUCTURE, 0, 0, thread), (int(pass_ms * ms), END, STRUCTURE, 0, 0, thread)]
    for name, cause, a, b in spans:
        names.append(name)
        k = len(names) - 1
        recs += [(int(a * ms), BEGIN, cause, k, 0, thread), (int(b * ms), END, cause, k, 0, thread)]
    on = thread if clock_thread is None else clock_thread
    for b in boundaries:
        t = int(b[0] * ms)
        recs.append((t, COUNTER, STRUCTURE, 1, int(b[1]), on))
        if len(b) > 2:
            for k, v in enumerate(b[2:6], start=2):
                recs.append((t + 2000, COUNTER, STRUCTURE, k, int(v), on))
            recs.append((t, COUNTER, STRUCTURE, 6, int(b[6]) if len(b) > 6 else 0, on))
    recs += [(int(t * ms), COUNTER, STRUCTURE, 7, int(v), on) for t, v in process_major_faults]
    return Timeline.from_records(recs, names)

"""warmprof.trace end to end on the CPU: real models, real instruments, structure and ratios."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import warmprof
from warmprof.traces.demo import demo_model
from warmprof.report import Report

from .helpers import FirstTouch, Leftovers


# How a trace says it skipped the instrumented steady passes (traces.passes.self_cost_plan's note).
SELF_COST_SKIPPED = "warmprof's own cost is the calibrated figures only"


def small_demo():
    return demo_model(vocab=512, d_model=64, n_heads=2, n_layers=2, max_seq=64)


def test_demo_trace_structure_and_round_trip(tmp_path):
    model = small_demo()
    left = Leftovers(model)
    r = warmprof.trace(model, (1, 32), steady=5)
    left.check()
    assert isinstance(r, Report)
    assert r.dtype == "int64" and r.shape == [1, 32] and r.model == "DemoLM"
    assert r.first_pass_ms > 0 and r.steady_median_ms > 0 and r.steady_passes == 5
    # in the caller's process (no control): the instrumented pass less warmprof's estimated own cost
    assert r.clean is None and r.own_cost["in_headline_ms"] >= 0
    assert r.excess_ms == pytest.approx(r.first_pass_ms - r.steady_median_ms - r.own_cost["in_headline_ms"])
    assert r.unattributed_ms == pytest.approx(r.excess_ms - sum(c.ms for c in r.causes))
    assert all(c.ms >= 0 and 0 <= c.share <= 1 for c in r.causes)
    assert sum(c.share for c in r.causes) <= 1 + 1e-9
    assert r.instruments["modules"]["modules"] == len(list(model.modules()))
    passes = {s.pass_ for s in r.spans}
    assert passes == {"first", "seen_rerun"}  # steady passes run uninstrumented: nothing recorded
    from warmprof.render.chrome import ChromeTraceRenderer

    steady = [e for e in ChromeTraceRenderer().events(r)["traceEvents"] if e["ph"] == "X" and e["pid"] == 3]
    assert [e["name"] for e in steady] == ["steady pass (median of 5)"]
    assert any(s.name == "module:DemoLM.blocks.0.attn" for s in r.spans)
    # warmprof's own cost, measured on the model: steady passes with every instrument on less the
    # clean ones, never below the calibrated floor (module calls x hook cost per call)
    (own,) = r.own_entries()
    assert "profiler_overhead" not in r.by_cause() and r.own_cost["steady_ms"] == pytest.approx(own.ms)
    instrumented = r.protocol.instrumented_steady_ms
    assert r.steady_passes == 5 == len(r.protocol.steady_ms)
    module_calls = sum(1 for s in r.spans if s.pass_ == "first" and s.name.startswith("module:"))
    floor_ms = module_calls * r.protocol.calibration["hook_cost_ns"] / 1e6
    assert floor_ms > 0 and own.ms >= floor_ms * (1 - 1e-9)
    # On a busy machine the clean steady passes can take long enough that measuring the instruments'
    # cost would add too much to the trace: the instrumented steady passes are skipped, the trace says
    # so, and the calibrated floor stands alone (traces.passes.self_cost_plan).
    skipped = [n for n in r.notes if SELF_COST_SKIPPED in n]
    if skipped:
        assert instrumented == [], skipped
        assert (own.source, own.evidence, own.count) == ("module_hooks", "estimated", module_calls)
        assert own.ms == pytest.approx(floor_ms)
    else:
        assert 3 <= len(instrumented) <= 5  # at least SELF_COST_PASSES[0], at most max_steady
        assert (own.source, own.evidence, own.count) == ("instrumented_steady", "estimated", len(instrumented))
        # the least disturbed passes of each kind: the fastest instrumented one against the clean passes'
        # time at the quantile a fastest-of-n sits at (1 / (n + 1)); both net of their waits for a CPU
        # (schedstat run-queue delay), which are the machine's load, not the instruments' cost
        waits = r.protocol.steady_run_delay_ms
        net = ([t - w for t, w in zip(r.protocol.steady_ms, waits)] if len(waits) == len(r.protocol.steady_ms)
               else r.protocol.steady_ms)
        clean_low = float(np.quantile(net, 1 / (len(instrumented) + 1)))
        measured_ms = min(instrumented) - clean_low
        if "capped at what this pass took over the clean steady median" in own.detail:
            # a busy machine slowed the instrumented passes more than the whole first pass had to give
            assert floor_ms * (1 - 1e-9) <= own.ms <= measured_ms * (1 + 1e-9), own.detail
        elif measured_ms > floor_ms:
            assert own.ms == pytest.approx(measured_ms)
    own_source = "module_hooks" if skipped else "instrumented_steady"
    assert [c.source for c in r.seen_rerun_causes if c.cause == "profiler_overhead"] == [own_source]
    names = {f"DemoLM.{n}" if n else "DemoLM" for n, _ in model.named_modules()} | {"(outside modules)"}
    where = [(w["module"], w["ms"]) for w in r.unattributed_where]
    assert all(m in names and ms > 0 for m, ms in where), where
    assert [ms for _, ms in where] == sorted((ms for _, ms in where), reverse=True)
    loaded = warmprof.load(r.save(tmp_path / "r.json"))
    assert loaded.to_dict() == r.to_dict()
    assert "warmprof trace: DemoLM" in str(r)
    # every setting that changes what is measured, as trace() was called and as it measured them
    import torch

    from warmprof.report.settings import IN_CALLERS_PROCESS, Settings

    assert r.settings == Settings(device="cpu", compile=None, model_dtype="float32", model_cast=None,
                                  input_dtype="int64", input_shape=[1, 32], inputs=None, op_view=False, explain=False,
                                  threads=torch.get_num_threads(), threads_set=False, cache=IN_CALLERS_PROCESS,
                                  fresh_process=False, steady=[5, 5], steady_budget_s=3.0, no_grad=True,
                                  warm_shape=None, torch_version=torch.__version__, controls=[])


def test_second_trace_of_same_model_says_runtime_is_warm():
    model = small_demo()
    warmprof.trace(model, (1, 8), steady=3)
    again = warmprof.trace(model, (1, 8), steady=3)
    assert again.protocol.runtime_warm
    assert any("already traced" in n for n in again.notes)
    other = warmprof.trace(nn.Sequential(nn.Linear(4, 4)), (1, 4), steady=3)  # a new model, same process
    assert other.protocol.runtime_warm and "an earlier trace ran in this process" in other.protocol.warm_reasons
    # In-process traces always say what they cannot know, and how to get a fresh process.
    assert other.protocol.run.fresh_process is False
    assert any("traced in the caller's process" in n and "warmprof trace" in n for n in other.notes)


def test_onednn_creation_is_jit_compile_equal_to_onednn_own_times():
    # An odd channel count and size keep the primitives new to this process's oneDNN cache.
    model = nn.Sequential(nn.Conv2d(7, 19, 3), nn.ReLU(), nn.Conv2d(19, 23, 5), nn.ReLU(), nn.Conv2d(23, 29, 3))
    left = Leftovers(model)
    r = warmprof.trace(model, (1, 7, 45, 45), steady=5)
    left.check()
    onednn = [c for c in r.causes if c.source == "onednn"]
    assert onednn, f"no oneDNN creation attributed: {r.causes} {r.instruments.get('onednn')}"
    assert all(c.cause == "jit_compile" and c.evidence == "measured" for c in onednn)
    reported = r.instruments["onednn"]["passes"]["first"]["create_miss_ms"]
    # oneDNN times its creations in wall time: a wait for a CPU inside them is in its figure, and in
    # warmprof's (said as the entry's waited_ms); a disk read inside them warmprof takes out of the span
    # into disk_read (source storage_in:onednn)
    assert not any(c.source == "run_queue_in:onednn" for c in r.causes)
    carved = ("storage_in:onednn",)
    ours = sum(c.ms for c in onednn) + sum(c.ms for c in r.causes if c.source in carved)
    assert reported > 0
    assert abs(ours - reported) <= 0.10 * reported, (ours, reported, [(c.cause, c.source, c.ms) for c in r.causes],
                                                     [(s.name, s.start_ms, s.dur_ms) for s in r.spans
                                                      if s.pass_ == "first" and s.cause])
    # cached: the seen-shape re-run creates nothing new
    assert r.instruments["onednn"]["passes"].get("seen_rerun", {}).get("cache_miss", 0) == 0


def test_first_touch_allocation_is_estimated_close_to_its_measured_cost():
    # The fixture's own measure is the CPU its thread spent touching the pages: under a CPU hog its
    # wall time also holds the time it waited for a core (the estimate was 0.46x of that), which
    # is not a cost of the faults. Up to three fresh fixtures; within 1.5x in one of them.
    ratios = []
    for _ in range(3):
        model = FirstTouch(96 << 20)
        r = warmprof.trace(model, (4, 8), steady=5)
        est = [c for c in r.causes if c.cause == "allocator_growth" and c.source == "host_faults"]
        assert est and est[0].evidence == "estimated"
        assert est[0].module == "FirstTouch"
        ratios.append(est[0].ms / model.alloc_cpu_ms)
        if 1 / 1.5 <= ratios[-1] <= 1.5:
            break
    assert 1 / 1.5 <= ratios[-1] <= 1.5, ratios


def test_inputs_callable_and_float_default():
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
    r = warmprof.trace(model, inputs=lambda: torch.randn(2, 16), steady=3)
    assert r.protocol.input == "caller's inputs: [2, 16]"  # every input's shape (the report's `inputs`)
    assert r.inputs == {"args": [[2, 16]], "kwargs": {}}
    assert r.shape == [2, 16] and r.dtype == "float32"  # read from the caller's first input
    assert str(r).startswith("warmprof trace: Sequential (2, 16) float32 on cpu")
    r2 = warmprof.trace(model, (2, 16), steady=3)
    assert r2.dtype == "float32"


@pytest.mark.slow
def test_compile_inside_a_module_inside_a_module_counts_once():
    @torch.compile(dynamic=False)
    def kernel(x):
        return torch.sin(x) * 2 + 1

    class Inner(nn.Module):
        def forward(self, x):
            return kernel(x)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(x) + 1

    torch._dynamo.reset()
    model = Outer()
    left = Leftovers(model)
    r = warmprof.trace(model, (3, 37), steady=5)
    left.check()
    jit = [c for c in r.causes if c.cause == "jit_compile"]
    total = sum(c.ms for c in jit)
    compile_info = r.instruments["torch_compile"]
    spans = sum(c["span_ms"] for c in compile_info["compiles"] if c["pass"] == "first")
    # Python imports the compiler runs inside its compile span stay in the compile (torch's timers
    # count them too): they are recorded as spans but own no time of their own.
    # A wait for a CPU inside the compile span stays in it (the entry's waited_ms); a disk read inside it
    # is taken out, as disk_read (source storage_in:<the span's source>)
    assert all(0 <= c.waited_ms <= c.ms for c in jit)
    carved = {f"storage_in:{c.source}" for c in jit}
    waited = sum(c.ms for c in r.causes if c.cause in ("cpu_contention", "disk_read") and c.source in carved)
    assert total + waited == pytest.approx(spans, rel=0.02)  # counted once, not once per enclosing module
    assert total <= r.first_pass_ms
    assert {c.module for c in jit} == {"Outer.inner"}  # the innermost module
    assert not [c for c in r.seen_rerun_causes if c.cause == "jit_compile"]


@pytest.mark.slow
def test_compiled_model_jit_is_top_and_matches_torch_own_figure():
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
    waits = {}

    def progress(msg: str) -> None:  # the passes run on this thread: its run-queue wait per phase
        waits[msg.split(" (")[0]] = _runqueue_wait_ms()

    r = warmprof.trace(model, (4, 32), compile=True, steady=10, progress=progress)
    # Time the pass's thread spent ready but without a core (a busy machine) is cpu_contention now; the
    # allowance below stays for what the steady passes' own waits leave of it.
    waited_ms = waits["seen-shape re-run"] - waits["first pass"]
    # torch's timers count wall time: a wait for a CPU inside the compile spans is in them and in the
    # compile's figure (its waited_ms); a disk read inside them warmprof books as disk_read (storage_in:<source>)
    jit_sources = {f"storage_in:{c.source}" for c in r.causes if c.cause == "jit_compile"}
    jit_ms = sum(c.ms for c in r.causes if c.cause == "jit_compile" or c.source in jit_sources)
    # the largest of the model's own causes, the compile with the disk reads inside it (with a cold page
    # cache and a busy disk the compile's reads of inductor's files, 1 s and more, outweighed its CPU part:
    # the suite failed there while three venvs installed beside it); its wait for a CPU, the machine's, aside
    others: dict[str, float] = {}
    for c in r.causes:
        if c.cause not in ("jit_compile", "cpu_contention") and c.source not in jit_sources:
            others[c.cause] = others.get(c.cause, 0.0) + c.ms
    assert jit_ms > max(others.values(), default=0.0), (jit_ms, others)
    assert {c.evidence for c in r.causes if c.cause == "jit_compile"} == {"measured"}
    torch_ms = r.instruments["torch_compile"]["torch_reported_compile_ms"]
    assert torch_ms > 0 and abs(jit_ms - torch_ms) <= 0.10 * torch_ms, (jit_ms, torch_ms)
    assert not [c for c in r.seen_rerun_causes if c.cause == "jit_compile"]
    sources = {c.source for c in r.causes if c.cause == "jit_compile"}
    assert "torch.compile/dynamo" in sources
    dynamo_ms = sum(c.ms for c in r.causes if c.source == "torch.compile/dynamo")
    assert dynamo_ms > 0.5 * sum(c.ms for c in r.causes if c.source == "torch.compile")  # phases nest in the span
    assert abs(r.unattributed_ms) <= max(0.10 * r.excess_ms, r.noise_band_ms) + waited_ms, waited_ms


def _runqueue_wait_ms() -> float:
    """This thread's time runnable but not running, so far (schedstat's second field)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e6
    except (OSError, IndexError, ValueError):  # no schedstat here: no allowance
        return 0.0


def test_an_instruments_span_evidence_reaches_the_report(monkeypatch):
    """The trace hands each instrument's span_evidence to attribution (cuDNN find uses it on CUDA;
    here oneDNN's spans stand in, relabelled for the test)."""
    from warmprof.instruments.onednn import OneDNN

    monkeypatch.setattr(OneDNN, "span_evidence", {"onednn": "inferred"})
    model = nn.Sequential(nn.Conv2d(5, 17, 3), nn.ReLU(), nn.Conv2d(17, 13, 5))
    r = warmprof.trace(model, (1, 5, 41, 41), steady=3)
    onednn = [c for c in r.causes if c.source == "onednn"]
    assert onednn, f"no oneDNN creation attributed: {r.causes}"
    assert {c.evidence for c in onednn} == {"inferred"}


def test_nothing_is_calibrated_before_the_first_pass(monkeypatch):
    """Calibration starts threads, faults pages and calls a torch module: before the first pass it
    would warm what the pass is there to measure cold."""
    from warmprof.traces import calibrate as calibration

    events: list[str] = []
    monkeypatch.setattr(calibration, "_calibration", None)  # as in a fresh process
    real = calibration.measure  # what trace() calls while it holds the one-trace lock
    monkeypatch.setattr(calibration, "measure", lambda **kw: (events.append("calibrate"), real(**kw))[1])
    r = warmprof.trace(nn.Sequential(nn.Linear(8, 8)), (1, 8), steady=3, progress=events.append)
    assert events.index("calibrate") > events.index("steady passes") > events.index("first pass")
    # calibrated, and the hooks cost something: under a CPU hog and more every plain batch may be slowed past
    # the hooked ones' best, and one calibration read 0 (seen once); a positive one in three more then
    from warmprof.instruments.modules import ModuleHooks

    cost = r.protocol.calibration["hook_cost_ns"]
    assert cost > 0 or any(ModuleHooks.calibrate_cost() > 0 for _ in range(3)), cost

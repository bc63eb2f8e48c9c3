"""The observer effect: a model's first pass clean, under warmprof.trace's default instruments, and
under the op view, each in its own fresh process (torch.set_num_threads(1)), interleaved.

    python bench/observer.py [--runs 5] [--models demo,bert,llama] [--observers clean,default,op_view]
                             [--compiled] [--baseline PYTHON] [--nice N] [--json PATH]

clean: the model's first forward timed with nothing but time.perf_counter_ns (no warmprof import);
default: warmprof.trace(model, inputs=...).first_pass_ms; op_view: the same with op_view=True;
profiler: the first forward under torch.profiler.profile() (CPU), for reference;
default-NAME (e.g. default-modules, default-onednn): the default trace with the instrument NAME off,
to see what each instrument costs. bert and llama are built from transformers' small configs in code
(no downloads; skipped when transformers is missing). --compiled: torch.compile(model) (each child has
its own empty inductor cache; warmprof.trace(model, compile=True)). --baseline PYTHON: every warmprof
observer runs again under that interpreter (another warmprof installed there, e.g. the main branch's),
in the same rounds, as rows OBSERVER@baseline: a before/after table from one run. --nice N: the children
run at that niceness (negative: ahead of the machine's other work, which on a busy machine is most of
the spread; needs the privilege to raise priority). Prints each figure's median, min
and max over the runs and the ratio of medians to clean's (the acceptance bound is 1.10 for default), and
the same for the pass thread's CPU time (time.thread_time_ns around the forward; around the pass,
inside every instrument's pass-boundary work, under warmprof), which leaves out a busy machine's waits.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
which, observer, compiled = sys.argv[1], sys.argv[2], sys.argv[3] == "compiled"


def build(which):
    if which == "demo":
        from warmprof.traces.demo import DEFAULT_SHAPE, demo_model
        m = demo_model()
        return m, (torch.randint(0, m.vocab, DEFAULT_SHAPE),)
    import transformers

    class Wrap(torch.nn.Module):  # a plain tensor out, as a serving wrapper would return
        def __init__(self, m):
            super().__init__()
            self.m = m.eval()

        def forward(self, ids):
            return self.m(input_ids=ids).last_hidden_state

    torch.manual_seed(0)
    small = dict(vocab_size=2000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256)
    if which == "bert":
        m = transformers.BertModel(transformers.BertConfig(**small))
    elif which == "llama":
        m = transformers.LlamaModel(transformers.LlamaConfig(**small, num_key_value_heads=2, max_position_embeddings=512))
    else:
        raise SystemExit(f"unknown model {which!r}")
    return Wrap(m), (torch.randint(0, 2000, (1, 128)),)


model, inputs = build(which)
if observer in ("clean", "profiler"):
    import contextlib
    runner = torch.compile(model) if compiled else model
    ctx = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if observer == "profiler" else contextlib.nullcontext()
    with torch.no_grad(), ctx:
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        runner(*inputs)
        first, cpu = (time.perf_counter_ns() - t0) / 1e6, (time.thread_time_ns() - c0) / 1e6
    print(json.dumps({"first_ms": first, "cpu_ms": cpu}))
    sys.exit(0)

import warmprof
import warmprof.traces.passes as passes
mode, _, without = observer.partition("-")
from warmprof.instruments.base import Instrument
drop = set(without.split("+")) if without else set()
cpu = {}


class CpuFrom(Instrument):  # last to mark a pass: the pass thread's CPU time from here...
    name = "bench_cpu_from"

    def mark_pass(self, name):
        super().mark_pass(name)
        cpu.setdefault(name, [time.thread_time_ns(), None])


class CpuTo(Instrument):  # ...to the first end_pass after it (the instruments' own pass-boundary work is outside)
    name = "bench_cpu_to"

    def end_pass(self, name):
        if cpu[name][1] is None:
            cpu[name][1] = time.thread_time_ns()


make = passes.instruments
passes.instruments = lambda *a, **k: [CpuTo(), *(i for i in make(*a, **k) if i.name not in drop), CpuFrom()]
r = warmprof.trace(model, inputs=inputs, steady=5, op_view=mode == "op_view", compile=True if compiled else None)
print(json.dumps({"first_ms": r.first_pass_ms, "steady_ms": r.steady_median_ms,
                  "cpu_ms": (cpu["first"][1] - cpu["first"][0]) / 1e6}))
"""


def run_child(model: str, observer: str, compiled: bool, python: str = sys.executable, nice: int = 0) -> dict:
    cache = tempfile.mkdtemp(prefix="warmprof-observer-")
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
               TRITON_CACHE_DIR=os.path.join(cache, "triton"), OMP_NUM_THREADS="1")
    try:
        out = subprocess.run([python, "-c", CHILD, model, observer, "compiled" if compiled else "eager"],
                             env=env, capture_output=True, text=True, cwd=cache,
                             preexec_fn=(lambda: os.setpriority(os.PRIO_PROCESS, 0, nice)) if nice else None)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if out.returncode != 0:
        raise SystemExit(f"{model} / {observer} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(results: dict[str, dict[str, list[float]]], cpu: dict[str, dict[str, list[float]]]) -> tuple[list[str], dict]:
    """Rows of (model, observer): wall median, min, max and the ratio of medians to clean's; the pass
    thread's CPU time (median) and its ratio, which a busy machine's waits for a core leave out."""
    lines = [f"{'model':<7} {'observer':<24} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'ratio':>7} "
             f"{'cpu ms':>8} {'cpu ratio':>10}"]
    summary: dict = {}
    for model, by_obs in results.items():
        clean = statistics.median(by_obs["clean"])
        clean_cpu = statistics.median(cpu[model]["clean"])
        for obs, vals in by_obs.items():
            med, cpu_med = statistics.median(vals), statistics.median(cpu[model][obs])
            summary[f"{model}.{obs}"] = {"median_ms": med, "runs_ms": vals, "ratio_to_clean": med / clean,
                                         "cpu_median_ms": cpu_med, "cpu_runs_ms": cpu[model][obs],
                                         "cpu_ratio_to_clean": cpu_med / clean_cpu}
            lines.append(f"{model:<7} {obs:<24} {med:>10.2f} {min(vals):>8.2f} {max(vals):>8.2f} {med / clean:>7.2f} "
                         f"{cpu_med:>8.2f} {cpu_med / clean_cpu:>10.2f}")
    return lines, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--models", default="demo,bert,llama")
    ap.add_argument("--observers", default="clean,default,op_view")
    ap.add_argument("--compiled", action="store_true", help="torch.compile the model (default and clean only)")
    ap.add_argument("--baseline", metavar="PYTHON", help="run the warmprof observers under this interpreter too")
    ap.add_argument("--nice", type=int, default=0, help="the children's niceness (negative: ahead of other work)")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    models = args.models.split(",")
    observers = args.observers.split(",")
    if "clean" not in observers:
        observers.insert(0, "clean")
    try:
        import transformers  # noqa: F401
    except ImportError:
        models = [m for m in models if m == "demo"]
    runs = [(o, o, sys.executable) for o in observers]
    if args.baseline:
        runs += [(f"{o}@baseline", o, args.baseline) for o in observers if o not in ("clean", "profiler")]
    results: dict[str, dict[str, list[float]]] = {m: {label: [] for label, _, _ in runs} for m in models}
    cpu_results: dict[str, dict[str, list[float]]] = {m: {label: [] for label, _, _ in runs} for m in models}
    t_start = time.monotonic()
    for i in range(args.runs):
        for model in models:
            for label, obs, python in runs:  # interleaved: drift in the machine's load hits every observer alike
                got = run_child(model, obs, args.compiled, python, args.nice)
                results[model][label].append(got["first_ms"])
                cpu_results[model][label].append(got.get("cpu_ms", float("nan")))
                print(f"  run {i + 1}/{args.runs} {model:<6} {label:<22} first pass {got['first_ms']:9.2f} ms "
                      f"(cpu {got.get('cpu_ms', float('nan')):.2f})", file=sys.stderr, flush=True)
    lines, summary = table(results, cpu_results)
    print(f"\nobserver effect on the first pass ({args.runs} fresh processes each, 1 thread"
          f"{', compiled' if args.compiled else ''}{f', nice {args.nice}' if args.nice else ''}; "
          f"{time.monotonic() - t_start:.0f} s in all); ratio: median / clean's")
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

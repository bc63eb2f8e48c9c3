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
and max over the runs and the ratio of medians to clean's: the acceptance bound is 1.10 for default.
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
        t0 = time.perf_counter_ns()
        runner(*inputs)
        first = (time.perf_counter_ns() - t0) / 1e6
    print(json.dumps({"first_ms": first}))
    sys.exit(0)

import warmprof
import warmprof.traces.api as api
mode, _, without = observer.partition("-")
if without:
    drop = set(without.split("+"))
    make = api._instruments
    api._instruments = lambda *a, **k: [i for i in make(*a, **k) if i.name not in drop]
r = warmprof.trace(model, inputs=inputs, steady=5, op_view=mode == "op_view", compile=True if compiled else None)
print(json.dumps({"first_ms": r.first_pass_ms, "steady_ms": r.steady_median_ms}))
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


def table(results: dict[str, dict[str, list[float]]]) -> tuple[list[str], dict]:
    lines = [f"{'model':<7} {'observer':<24} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'ratio':>7}"]
    summary: dict = {}
    for model, by_obs in results.items():
        clean = statistics.median(by_obs["clean"]) if by_obs.get("clean") else None
        for obs, vals in by_obs.items():
            med = statistics.median(vals)
            ratio = med / clean if clean else None
            summary[f"{model}.{obs}"] = {"median_ms": med, "runs_ms": vals, "ratio_to_clean": ratio}
            lines.append(f"{model:<7} {obs:<24} {med:>10.2f} {min(vals):>8.2f} {max(vals):>8.2f} "
                         + (f"{ratio:>7.2f}" if ratio is not None else f"{'':>7}"))
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
    t_start = time.monotonic()
    for i in range(args.runs):
        for model in models:
            for label, obs, python in runs:  # interleaved: drift in the machine's load hits every observer alike
                ms = run_child(model, obs, args.compiled, python, args.nice)["first_ms"]
                results[model][label].append(ms)
                print(f"  run {i + 1}/{args.runs} {model:<6} {label:<22} first pass {ms:9.2f} ms", file=sys.stderr,
                      flush=True)
    lines, summary = table(results)
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

"""What per-module hooks cost a model's FIRST pass (cold), not a steady one: a transformers Llama
(small config, built in code) in fresh processes, its first forward's thread CPU time under:

  clean        no hooks, no warmprof import
  pyhooks      a no-op Python forward pre-hook and forward hook on every module (torch's slow
               _call_impl path, no warmprof)
  native       warmprof's native ModuleHook on every module inside a Recording (as a trace does)
  native-nogap the same with module boundaries taking no host-counter samples (set_boundary_gap_ns)
  native-norec the native hooks with no Recording open (nothing is recorded)

    python bench/hook_first_call.py [--runs 7]

Prints each figure's median, min and max over the runs (interleaved) and the ratio of medians to
clean's. Run by hand; needs transformers. (The observer effect of issue 24: on Llama the module hooks
are most of what the default trace adds to the first pass, bench/observer.py default-modules.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
import transformers
mode = sys.argv[1]
torch.manual_seed(0)
small = dict(vocab_size=2000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256)
m = transformers.LlamaModel(transformers.LlamaConfig(**small, num_key_value_heads=2, max_position_embeddings=512)).eval()
x = torch.randint(0, 2000, (1, 128))
n = 0
if mode == "pyhooks":
    for mod in m.modules():
        mod.register_forward_pre_hook(lambda mod, a: None)
        mod.register_forward_hook(lambda mod, a, o: None)
        n += 1
elif mode.startswith("native"):
    from warmprof import _native
    from warmprof.timeline import Recording, name_id
    if mode != "native-norec":
        rec = Recording()
        rec.__enter__()
    if mode == "native-nogap":
        _native.set_boundary_gap_ns(1e15)
    for q, mod in m.named_modules():
        h = _native.ModuleHook(name_id("module:" + q), True, lambda: None, q == "")
        mod.register_forward_pre_hook(h)
        mod.register_forward_hook(h)
        n += 1
with torch.no_grad():
    t0 = time.thread_time_ns()
    m(input_ids=x)
    t1 = time.thread_time_ns()
print(json.dumps({"modules": n, "cpu_ms": (t1 - t0) / 1e6}))
"""

MODES = ("clean", "pyhooks", "native", "native-nogap", "native-norec")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    got: dict[str, list[float]] = {m: [] for m in MODES}
    modules = 0
    for i in range(args.runs):
        for mode in MODES:
            out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True)
            if out.returncode != 0:
                print(f"{mode} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
                return 1
            row = json.loads(out.stdout.strip().splitlines()[-1])
            got[mode].append(row["cpu_ms"])
            modules = max(modules, row["modules"])
        print(f"run {i + 1}/{args.runs}", file=sys.stderr)
    clean = statistics.median(got["clean"])
    print(f"first forward of LlamaModel (2 layers, {modules} modules), thread CPU ms, {args.runs} fresh processes each")
    print(f"{'hooks':<14} {'median':>8} {'min':>8} {'max':>8} {'ratio':>7}")
    for mode in MODES:
        v = got[mode]
        print(f"{mode:<14} {statistics.median(v):8.3f} {min(v):8.3f} {max(v):8.3f} {statistics.median(v) / clean:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

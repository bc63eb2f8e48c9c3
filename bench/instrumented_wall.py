"""What the instrumented steady passes (warmprof's own cost measured on the model) add to a trace's
wall time: the same trace with and without them, in fresh processes, alternated, 1 thread.

    python bench/instrumented_wall.py [--runs 3] [--models demo,bert,gpt2,resnet]

bert, gpt2 and resnet are built from transformers' configs (no downloads) and skipped when
transformers is not installed. Prints the median wall time of each and the ratio (bound: +20%).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r'''
import sys, time, json, torch
torch.set_num_threads(1)
import warmprof, warmprof.traces.passes as passes
which, mode = sys.argv[1], sys.argv[2]
if mode == "off":
    passes.SELF_COST_MAX_SHARE = passes.SELF_COST_ALWAYS_S = 0.0  # the protocol then skips the instrumented steady passes
if which == "demo":
    from warmprof.traces.demo import demo_model, DEFAULT_SHAPE
    m, shape = demo_model(), DEFAULT_SHAPE
else:
    import transformers

    class Wrap(torch.nn.Module):
        def __init__(self, m, key):
            super().__init__()
            self.m, self.key = m.eval(), key
        def forward(self, x):
            return self.m(**{self.key: x}).last_hidden_state

    if which == "bert":
        m = Wrap(transformers.BertModel(transformers.BertConfig(hidden_size=128, num_hidden_layers=4,
                 num_attention_heads=4, intermediate_size=256, vocab_size=1000)), "input_ids")
    elif which == "gpt2":
        m = Wrap(transformers.GPT2Model(transformers.GPT2Config(n_embd=128, n_layer=4, n_head=4, vocab_size=1000,
                 n_positions=256, bos_token_id=0, eos_token_id=0)), "input_ids")
    else:
        m = Wrap(transformers.ResNetModel(transformers.ResNetConfig(embedding_size=32, hidden_sizes=[32, 64, 128, 256],
                 depths=[1, 1, 1, 1])), "pixel_values")
    shape = (1, 3, 64, 64) if which == "resnet" else (1, 64)
t0 = time.perf_counter()
r = warmprof.trace(m, shape, dtype="float32" if which == "resnet" else None)
print(json.dumps({"wall_s": time.perf_counter() - t0, "n": len(r.protocol.instrumented_steady_ms)}))
'''


def one(which: str, mode: str) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, which, mode], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{which} ({mode}) failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--models", default="demo,bert,gpt2,resnet")
    a = ap.parse_args()
    models = a.models.split(",")
    try:
        import transformers  # noqa: F401
    except ImportError:
        models = [m for m in models if m == "demo"]
    print(f"{'model':8} {'without s':>10} {'with s':>8} {'passes':>7} {'added':>7}")
    for which in models:
        res: dict[str, list[dict]] = {"off": [], "on": []}
        for i in range(a.runs):
            for mode in ("off", "on"):
                res[mode].append(one(which, mode))
        off = statistics.median(o["wall_s"] for o in res["off"])
        on = statistics.median(o["wall_s"] for o in res["on"])
        n = statistics.median(o["n"] for o in res["on"])
        print(f"{which:8} {off:10.2f} {on:8.2f} {n:7.0f} {on / off - 1:+7.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

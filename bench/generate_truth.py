"""Ground truth for `warmprof trace --generate N`: the time to first token measured without warmprof.

For each run, in fresh processes, one thread each:
- bare: the zoo's Llama (bench/zoo.py, transformers at a small config) built, then generate() timed with
  nothing of warmprof's loaded: a transformers streamer's put() calls stamp the clock (generate puts the
  prompt first, then each new token as it is chosen), so the first call's TTFT is its start to the second
  put, and the steady TTFT is the median of the next calls';
- traced: `warmprof trace bench/zoo.py:llama --generate N --threads 1` and its report's generate.ttft
  (the control's clean first call).

Prints a table per run and the medians of traced/bare for the first call's TTFT and its excess.
    python bench/generate_truth.py [--runs 3] [--new-tokens 4] [--python PY]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

BARE = r"""
import sys, time, json
sys.path.insert(0, %(here)r)
import torch
torch.set_num_threads(1)
import zoo
model = zoo.llama()
ids = zoo.llama_inputs()
mask = torch.ones_like(ids)
stamps = []
class Streamer:
    def put(self, value):
        stamps.append(time.perf_counter_ns())
    def end(self):
        pass
def one():
    stamps.clear()
    t0 = time.perf_counter_ns()
    with torch.no_grad():
        model.generate(ids, attention_mask=mask, max_new_tokens=%(n)d, min_new_tokens=%(n)d, do_sample=False,
                       pad_token_id=model.generation_config.eos_token_id, streamer=Streamer())
    return (stamps[1] - t0) / 1e6
first = one()
steady = [one() for _ in range(20)]
print(json.dumps({"first_ms": first, "steady_median_ms": sorted(steady)[len(steady) // 2]}))
"""


def bare(python: str, n: int) -> dict:
    got = subprocess.run([python, "-c", BARE % {"here": HERE, "n": n}], capture_output=True, text=True, check=True)
    return json.loads(got.stdout.strip().splitlines()[-1])


def traced(python: str, n: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        subprocess.run([python, "-m", "warmprof", "trace", os.path.join(HERE, "zoo.py") + ":llama", "--shape", "1,128",
                        "--generate", str(n), "--threads", "1", "--quiet", "--json", out],
                       check=True, capture_output=True, text=True)
        with open(out) as f:
            return json.load(f)["generate"]["ttft"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=4)
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    rows = []
    print(f"{'run':>3} {'bare first':>11} {'bare steady':>12} {'bare excess':>12} {'traced first':>13} "
          f"{'traced steady':>14} {'traced excess':>14} {'source':>7}")
    for i in range(a.runs):
        b, t = bare(a.python, a.new_tokens), traced(a.python, a.new_tokens)
        b["excess_ms"] = b["first_ms"] - b["steady_median_ms"]
        rows.append((b, t))
        print(f"{i:>3} {b['first_ms']:>11.2f} {b['steady_median_ms']:>12.2f} {b['excess_ms']:>12.2f} "
              f"{t['first_ms']:>13.2f} {t['steady_median_ms']:>14.2f} {t['excess_ms']:>14.2f} {t.get('source', ''):>7}")
    first = statistics.median(t["first_ms"] / b["first_ms"] for b, t in rows)
    excess = statistics.median(t["excess_ms"] / b["excess_ms"] for b, t in rows if b["excess_ms"] > 0)
    print(f"median traced/bare: TTFT first call {first:.2f}x, TTFT excess {excess:.2f}x ({a.runs} runs, "
          f"{a.new_tokens} new tokens, prompt 128, --threads 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

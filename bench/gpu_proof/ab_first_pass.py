"""What warmprof's CUPTI subscription adds to a first pass beyond its steady per-callback cost: the
demo LM's first pass, seen re-run and steady median in fresh processes, alternately without and with
warmprof's subscriber (recording on in both), twice each.

    python3 ab_first_pass.py OUT.json

The runs with the subscriber are also warmprof's side of the proof's differential (its subscribe in
a fresh process: `why` is '' and callbacks come, or not).
"""

from __future__ import annotations

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proof_common import exit_if_no_gpu, last_json_line, left_s, save  # noqa: E402

CHILD = r"""
import json, statistics, sys, time, torch
from warmprof import _native
from warmprof.traces.demo import demo_model
from warmprof.timeline import Recording
mode = sys.argv[1]
m = demo_model().cuda(); ids = torch.randint(0, m.vocab, (1, 128), device='cuda'); torch.cuda.synchronize()
def once():
    t0 = time.perf_counter_ns(); m(ids); torch.cuda.synchronize(); return (time.perf_counter_ns() - t0) / 1e6
out = {'mode': mode}
with torch.no_grad(), Recording():
    why = _native.cupti_start() if mode == 'cupti' else ''
    out['why'] = why
    c0 = _native.cupti_stats()['callbacks'] if mode == 'cupti' else 0
    out['first_ms'] = once(); out['rerun_ms'] = once()
    c1 = _native.cupti_stats()['callbacks'] if mode == 'cupti' else 0
    out['steady_ms'] = statistics.median(once() for _ in range(30))
    out['first_pass_callbacks'] = c1 - c0
    if mode == 'cupti' and not why:
        st = _native.cupti_stats(); out['subscribe_ms'] = st['subscribe_ns'] / 1e6; _native.cupti_stop()
print(json.dumps(out))
"""
MODES = ("none", "cupti", "none", "cupti")


def one_run(mode: str) -> dict:
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=left_s(30))
    except subprocess.TimeoutExpired:
        return {"mode": mode, "error": "timed out"}
    got = last_json_line(p.stdout)
    return got if p.returncode == 0 and isinstance(got, dict) else {"mode": mode, "rc": p.returncode,
                                                                      "err": p.stderr[-800:]}


def main(out: str) -> int:
    exit_if_no_gpu(out)
    runs: list = []
    for mode in MODES:
        runs.append(one_run(mode))
        save(out, {"runs": runs})
    return 0 if all("first_ms" in r for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

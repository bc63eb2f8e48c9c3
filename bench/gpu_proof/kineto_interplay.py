"""torch.profiler (kineto) against warmprof's CUPTI subscriber, both ways, each in a fresh process:

  kineto_first   the demo LM's first pass under torch.profiler (CPU+CUDA): kineto's CUPTI OVERHEAD
                 records ("Runtime Triggered Module Loading", "Lazy Function Loading", "Driver
                 Compiler"): the lazy-loading ground truth warmprof's runtime_init should match;
                 then warmprof's cupti_start() (expected: another subscriber holds CUPTI, kineto
                 keeps it for the life of the process), then a whole in-process warmprof.trace():
                 does the report stand on CUDA events alone, and say why CUPTI is off?
  warmprof_first warmprof subscribed first, then torch.profiler: does kineto still get GPU events,
                 during and after warmprof's subscription (kineto initialises once per process)?

    python3 kineto_interplay.py OUT.json
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proof_common import exit_if_no_gpu, last_json_line, left_s, save  # noqa: E402

KINETO_FIRST = r"""
import json, os, tempfile, time, torch
from torch.profiler import profile, ProfilerActivity
from warmprof.traces.demo import demo_model
m = demo_model().cuda(); ids = torch.randint(0, m.vocab, (1, 128), device='cuda'); torch.cuda.synchronize()
out = {}
path = os.path.join(tempfile.mkdtemp(), 't.json')
with torch.no_grad():
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter(); m(ids); torch.cuda.synchronize(); out['first_ms_under_profiler'] = (time.perf_counter() - t0) * 1e3
prof.export_chrome_trace(path)
ev = json.load(open(path)).get('traceEvents', [])
over = {}
for e in ev:
    if e.get('cat') == 'overhead' or e.get('name') in ('Lazy Function Loading', 'Runtime Triggered Module Loading', 'Driver Compiler'):
        k = e.get('name', '?'); n, d = over.get(k, (0, 0.0)); over[k] = (n + 1, d + float(e.get('dur', 0)) / 1e3)
out['overhead_ms'] = {k: {'n': n, 'ms': d} for k, (n, d) in over.items()}
out['kernel_events'] = sum(1 for e in ev if e.get('cat') == 'kernel')
print(json.dumps(out), flush=True)
from warmprof import _native
why = _native.cupti_start(); out['warmprof_after_profile'] = why
if not why: _native.cupti_stop()
print(json.dumps(out), flush=True)
import warmprof
r = warmprof.trace(demo_model(), (1, 128), device='cuda', steady=(5, 10), steady_budget_s=1.0)
inst = r.instruments
out['trace'] = {'cupti': {k: inst.get('cupti', {}).get(k) for k in ('active', 'reason', 'notes')},
                'cuda_events': {k: inst.get('cuda_events', {}).get(k) for k in ('active', 'reason', 'gpu_ms')},
                'first_ms': r.first_pass_ms, 'steady_ms': r.steady_median_ms,
                'causes': [(c.cause, c.source, round(c.ms, 3), c.evidence) for c in r.causes][:12]}
print(json.dumps(out), flush=True)
"""

WARMPROF_FIRST = r"""
import json, os, tempfile, torch
from torch.profiler import profile, ProfilerActivity
from warmprof import _native
from warmprof.timeline import Recording
x = torch.ones(1 << 20, device='cuda'); torch.cuda.synchronize()
def kernels():
    path = os.path.join(tempfile.mkdtemp(), 't.json')
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        (x * 2).sum().item()
    prof.export_chrome_trace(path)
    return sum(1 for e in json.load(open(path)).get('traceEvents', []) if e.get('cat') == 'kernel')
out = {}
with Recording():
    out['warmprof_start'] = _native.cupti_start()
    out['kernel_events_while_warmprof_subscribed'] = kernels()
    out['warmprof_check_after_profile'] = _native.cupti_check()
    out['warmprof_stop'] = _native.cupti_stop()
print(json.dumps(out), flush=True)
out['kernel_events_after_warmprof_left'] = kernels()
print(json.dumps(out), flush=True)
"""

SCENARIOS = (("kineto_first", KINETO_FIRST, 60), ("warmprof_first", WARMPROF_FIRST, 40))


def scenario(code: str, default_s: float) -> dict:
    """A fresh process; what it printed last (it prints as it goes: a cut child keeps its start)."""
    import subprocess

    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=left_s(default_s))
        stdout, stderr, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr, rc = "timed out", None
    got = last_json_line(stdout)
    out = got if isinstance(got, dict) else {}
    if rc != 0:
        out.update({"rc": rc, "err": stderr[-1500:]})
    return out


def main(out: str) -> int:
    exit_if_no_gpu(out)
    result: dict = {}
    for name, code, default_s in SCENARIOS:
        result[name] = scenario(code, default_s)
        save(out, result)
    return 0 if all("rc" not in r for r in result.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

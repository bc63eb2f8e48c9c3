"""The child bench/accuracy.py runs in a fresh process, with no profiler: the ground truth.

    python bench/acc_child.py bare FACTORY [STEADY]   build zoo.FACTORY() and zoo.<model>_inputs(), time the
                                                      first forward, then STEADY (default 30) steady passes;
                                                      print one JSON line {first_ms, steady_ms, excess_ms, ...}
    python bench/acc_child.py bare-other FACTORY [STEADY] the same after one untimed pass at another shape (one more
                                                      in the batch dimension): the excess a new shape pays
    python bench/acc_child.py plain-demo              build the demo, run its first pass and ten more (the baseline of
                                                      the time-to-an-answer check); print {first_ms}
    python bench/acc_child.py planted                 time zoo.plant_cost() alone (the cost planted in
                                                      zoo.unet_planted's block: a fresh 64 MiB float32 tensor,
                                                      every page written) once, after a small warm-up of the
                                                      same ops; print {planted_ms, rewrite_ms, faults_ms, ...}

torch.set_num_threads(1) first (the harness traces with --threads 1); every pass under torch.no_grad(), as
warmprof's trace runs them. Only time.perf_counter_ns around the forward calls (the waits below are read
outside them); nothing else is loaded.

Waits (bare): around the first pass and each steady pass, outside it, the thread's schedstat run-queue delay
(/proc/thread-self/schedstat, field 2, ns), its CPU time (time.thread_time_ns) and voluntary switches
(getrusage RUSAGE_THREAD), split as warmprof's clean control splits a pass (traces/control_serve.py
_off_cpu): the run-queue delay capped at the pass's wall time less its CPU time is its wait for a CPU
(wait_ms), the rest of that idle time its time off the CPU (off_cpu_ms; all of the idle time is a wait for a
CPU when the thread never blocked). net_excess_ms = (first - its wait) - median(each steady pass - its wait):
the excess with the waits for a CPU (the machine's contention) out on both sides; off-CPU time (disk reads,
sleeps) stays in, as warmprof keeps its wait and disk_read causes. net_excess_all_ms takes both out.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PLAIN_DEMO_PASSES = 11  # plain-demo: the first pass and ten more


def load_zoo():
    spec = importlib.util.spec_from_file_location("zoo", os.path.join(HERE, "zoo.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def call(model, inputs):
    return model(**inputs) if isinstance(inputs, dict) else model(inputs)


def run_delay_ns() -> int | None:
    """This thread's run-queue delay so far (schedstat field 2, ns); None where the kernel has none."""
    for path in ("/proc/thread-self/schedstat", f"/proc/self/task/{threading.get_native_id()}/schedstat"):
        try:
            with open(path) as f:
                return int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return None


def _usage() -> tuple[int | None, int, int | None]:
    """(run-queue delay ns, thread CPU ns, voluntary switches) now; read around a pass, outside it."""
    who = getattr(resource, "RUSAGE_THREAD", None)
    vol = resource.getrusage(who).ru_nvcsw if who is not None else None
    return run_delay_ns(), time.thread_time_ns(), vol


def _split(t0: int, t1: int, u0: tuple, u1: tuple) -> tuple[float, float]:
    """(wait for a CPU, time off the CPU) of one pass, ms, as warmprof's clean control splits one."""
    idle = max(0, (t1 - t0) - (u1[1] - u0[1]))
    if u0[0] is None or u1[0] is None:
        return 0.0, idle / 1e6
    delay = min(max(0, u1[0] - u0[0]), idle)
    if u0[2] is not None and u1[2] is not None and u1[2] - u0[2] <= 0:
        delay = idle  # never blocked: all of it was a wait for a CPU whose accounting came late
    return delay / 1e6, (idle - delay) / 1e6


def grown(torch, inputs):
    """The inputs one row longer in their batch dimension (the first row again), as warmprof's control grows
    them for its other-shape pass (traces/control_serve.other_inputs)."""
    def grow(v):
        return torch.cat([v, v[:1]]) if isinstance(v, torch.Tensor) and v.dim() > 0 else v

    return {k: grow(v) for k, v in inputs.items()} if isinstance(inputs, dict) else grow(inputs)


def bare(factory: str, steady: int, other_first: bool = False) -> dict:
    """other_first: one pass at another shape (one more in the batch dimension) before the timed first pass,
    so what is left of the first pass's excess is what a new shape pays; the bare excess less it is what the
    process pays once whatever the shape (the ground truth of the report's warm_process row)."""
    import torch

    torch.set_num_threads(1)
    zoo = load_zoo()
    base = factory.removesuffix("_prerun")
    t_build = time.perf_counter_ns()
    model = getattr(zoo, factory)()
    inputs = getattr(zoo, base + "_inputs")()
    built_ms = (time.perf_counter_ns() - t_build) / 1e6
    if other_first:
        with torch.no_grad():
            call(model, grown(torch, inputs))
    with torch.no_grad():
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
        u0 = _usage()
        t0 = time.perf_counter_ns()
        call(model, inputs)
        t1 = time.perf_counter_ns()
        u1 = _usage()
        major = resource.getrusage(resource.RUSAGE_SELF).ru_majflt - f0
        times, splits = [], []
        for _ in range(steady):
            v0 = _usage()
            a = time.perf_counter_ns()
            call(model, inputs)
            b = time.perf_counter_ns()
            v1 = _usage()
            times.append((b - a) / 1e6)
            splits.append(_split(a, b, v0, v1))
    first = (t1 - t0) / 1e6
    med = statistics.median(times)
    first_wait, first_off = _split(t0, t1, u0, u1)
    steady_net = statistics.median(t - w for t, (w, _) in zip(times, splits))
    steady_net_all = statistics.median(t - w - o for t, (w, o) in zip(times, splits))
    return {"first_ms": first, "steady_ms": med, "excess_ms": first - med, "steady_min_ms": min(times),
            "steady_max_ms": max(times), "second_ms": times[0], "build_ms": built_ms, "steady_passes": steady,
            "first_major_faults": major,
            "schedstat": u0[0] is not None,
            "first_wait_ms": first_wait, "first_off_cpu_ms": first_off,
            "steady_wait_ms": statistics.median(w for w, _ in splits),
            "steady_off_cpu_ms": statistics.median(o for _, o in splits),
            "steady_net_ms": steady_net, "net_excess_ms": (first - first_wait) - steady_net,
            "net_excess_all_ms": (first - first_wait - first_off) - steady_net_all,
            "torch": torch.__version__, "threads": torch.get_num_threads()}


def planted() -> dict:
    """zoo.plant_cost() timed alone in this fresh process: its first call (a fresh 64 MiB, every page written:
    mapping and first-touch faults and the writes) and then the same tensor written again (the writes alone).
    planted_net_ms = planted_ms less its wait for a CPU (read around it as in bare); faults_ms = planted_net_ms -
    rewrite_ms, what the first touch of the pages cost. A small tensor is made and
    filled first, so fill_'s own first call (dispatch, kernel set-up) is not in planted_ms: in the UNet the
    block's first call comes after many other ops."""
    import torch

    torch.set_num_threads(1)
    zoo = load_zoo()
    torch.empty(1024).fill_(1.0)  # fill_'s first call, small (served by the heap, no fresh mapping)
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    u0 = _usage()
    t0 = time.perf_counter_ns()
    x = zoo.plant_cost()
    t1 = time.perf_counter_ns()
    u1 = _usage()
    minor = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    t2 = time.perf_counter_ns()
    x.fill_(2.0)
    t3 = time.perf_counter_ns()
    wait, off = _split(t0, t1, u0, u1)
    first, again = (t1 - t0) / 1e6, (t3 - t2) / 1e6
    return {"planted_ms": first, "rewrite_ms": again, "faults_ms": first - wait - again, "wait_ms": wait,
            "off_cpu_ms": off, "planted_net_ms": first - wait, "minor_faults": minor,
            "bytes": x.numel() * x.element_size(),
            "torch": torch.__version__}


def plain_demo() -> dict:
    import torch

    torch.set_num_threads(1)
    from warmprof.traces.demo import demo_model

    model = demo_model()
    x = torch.randint(0, 4096, (1, 128))
    with torch.no_grad():
        t0 = time.perf_counter_ns()
        model(x)
        t1 = time.perf_counter_ns()
        for _ in range(PLAIN_DEMO_PASSES - 1):  # a script that serves a few passes, as issue 39 times it
            model(x)
    return {"first_ms": (t1 - t0) / 1e6, "passes": PLAIN_DEMO_PASSES}


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] in ("bare", "bare-other"):
        out = bare(argv[1], int(argv[2]) if len(argv) > 2 else 30, other_first=argv[0] == "bare-other")
    elif argv == ["plain-demo"]:
        out = plain_demo()
    elif argv == ["planted"]:
        out = planted()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

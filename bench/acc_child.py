"""The child bench/accuracy.py runs in a fresh process, with no profiler: the ground truth.

    python bench/acc_child.py bare FACTORY [STEADY]   build zoo.FACTORY() and zoo.<model>_inputs(), time the
                                                      first forward, then STEADY (default 30) steady passes;
                                                      print one JSON line {first_ms, steady_ms, excess_ms, ...}
    python bench/acc_child.py plain-demo              build the demo and run its first pass (the baseline of
                                                      the time-to-an-answer check); print {first_ms}

torch.set_num_threads(1) first (the harness traces with --threads 1); every pass under torch.no_grad(), as
warmprof's trace runs them. Only time.perf_counter_ns around the forward calls; nothing else is loaded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def load_zoo():
    spec = importlib.util.spec_from_file_location("zoo", os.path.join(HERE, "zoo.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def call(model, inputs):
    return model(**inputs) if isinstance(inputs, dict) else model(inputs)


def bare(factory: str, steady: int) -> dict:
    import torch

    torch.set_num_threads(1)
    zoo = load_zoo()
    base = factory.removesuffix("_prerun")
    t_build = time.perf_counter_ns()
    model = getattr(zoo, factory)()
    inputs = getattr(zoo, base + "_inputs")()
    built_ms = (time.perf_counter_ns() - t_build) / 1e6
    import resource

    with torch.no_grad():
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
        t0 = time.perf_counter_ns()
        call(model, inputs)
        t1 = time.perf_counter_ns()
        major = resource.getrusage(resource.RUSAGE_SELF).ru_majflt - f0
        times = []
        for _ in range(steady):
            a = time.perf_counter_ns()
            call(model, inputs)
            times.append((time.perf_counter_ns() - a) / 1e6)
    first = (t1 - t0) / 1e6
    med = statistics.median(times)
    return {"first_ms": first, "steady_ms": med, "excess_ms": first - med, "steady_min_ms": min(times),
            "steady_max_ms": max(times), "second_ms": times[0], "build_ms": built_ms, "steady_passes": steady, "first_major_faults": major,
            "torch": torch.__version__, "threads": torch.get_num_threads()}


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
    return {"first_ms": (t1 - t0) / 1e6}


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "bare":
        out = bare(argv[1], int(argv[2]) if len(argv) > 2 else 30)
    elif argv == ["plain-demo"]:
        out = plain_demo()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

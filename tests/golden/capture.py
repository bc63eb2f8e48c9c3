"""Record the golden inputs and outputs of the three callers of attribution (run by hand).

The golden test (tests/unit/test_golden.py) replays what a real run handed to attribution and checks
that today's code builds the same result from it. This script made those files, once, on the code
before the attribution engine was shared (commit 4a2fb60): re-running it on later code records that
code's output, which is no longer a check of "no behaviour change".

    python tests/golden/capture.py tests/fixtures/golden            # the files below
    python tests/golden/capture.py tests/fixtures/golden --extra    # warmup_extra.json (see SYNTHETIC_WARM_EXTRA)

- trace_eager / trace_compiled: warmprof.trace of the demo LM (small, 1x32), eager and under
  torch.compile, with attribute_pass's and build_report's inputs recorded (the timeline's arrays in an
  .npz), and the report's to_dict().
- warmup: warmup of the compiled small demo at three lengths, each call's deltas (what the booking
  rule was handed) and its booked row; the result's to_dict() and str().
- watch: a short replay of the watch demo, each kept call's native record and the event built from it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

TL_ARRAYS = ("ts_ns", "kind", "cause", "name", "value", "thread", "own_fault_ns")


def _plain(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, set):
        return sorted(_plain(v) for v in x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    return x


def _save_timeline(tl: Any, path: Path) -> dict[str, Any]:
    np.savez_compressed(path, **{k: getattr(tl, k) for k in TL_ARRAYS})
    return {"file": path.name, "names": list(tl.names), "dropped": tl.dropped, "threads": tl.threads,
            "os_tids": list(tl.os_tids), "thinned": tl.thinned}


def capture_trace(out: Path, name: str, compile: Any) -> None:
    import warmprof
    from warmprof.demo import demo_model
    from warmprof.traces import api

    calls: list[dict[str, Any]] = []
    facts_seen: dict[str, Any] = {}
    built: list[dict[str, Any]] = []
    timelines: dict[int, dict[str, Any]] = {}
    real_attr, real_build = api.attribute_pass, api.build_report

    def attr(tl, pass_name, **kw):
        if id(tl) not in timelines:
            timelines[id(tl)] = _save_timeline(tl, out / f"{name}_timeline{len(timelines)}.npz")
        calls.append({"timeline": timelines[id(tl)]["file"], "pass_name": pass_name, "kwargs": _plain(kw)})
        return real_attr(tl, pass_name, **kw)

    def build(facts):
        skip = {"first", "rerun", "warm_pass", "timeline", "op_call", "op_firsts"}
        facts_seen.update({f.name: _plain(getattr(facts, f.name)) for f in dataclasses.fields(facts)
                           if f.name not in skip})
        facts_seen["timeline"] = timelines[id(facts.timeline)]["file"]
        report = real_build(facts)
        built.append(json.loads(json.dumps(report.to_dict())))  # as built: trace() adds notes after
        return report

    api.attribute_pass, api.build_report = attr, build
    try:
        warmprof.trace(demo_model(n_layers=1, d_model=64, n_heads=2), (1, 32), compile=compile,
                                progress=False, label=f"demo-{name}")
    finally:
        api.attribute_pass, api.build_report = real_attr, real_build
    doc = {"timelines": list(timelines.values()), "attribute_pass": calls, "facts": facts_seen,
           "report": built[0]}
    (out / f"{name}.json").write_text(json.dumps(doc, indent=1))


MIB = 1 << 20
_CMP = {"trigger": "torch.compile:compile", "span_ms": 12.5, "compile_id": "0/0", "faults": 300,
        "rss_bytes": 3 * MIB, "file_bytes": MIB, "recompile_reason": "size mismatch"}
SYNTHETIC_WARM = [
    (5_000_000, [], 7, 4 * MIB, 0, None), (5_000_000, [], 8, 4 * MIB, 0, None),
    (5_000_000, [], 400, MIB - 1, 0, None), (5_000_000, [], 400, MIB, 0, None),
    (5_000_000, [], 600, 2 * MIB, 3 * MIB, None), (5_000_000, [], 20, 0, MIB, None),
    (5_000_000, [], 0, 0, 0, 4 * MIB), (5_000_000, [], 0, 0, 0, 0),
    (30_000_000, [_CMP], 900, 8 * MIB, 2 * MIB, None),
    (30_000_000, [_CMP, {"trigger": "cudagraphs:record", "span_ms": 3.0},
                  {"trigger": "triton:autotune", "span_ms": 4.0}], 10, 0, 0, 2 * MIB),
]


class _Leaky:
    """Keeps 40 MiB of fresh memory a call (allocator growth on every call)."""

    def __init__(self) -> None:
        self.kept: list = []

    def __call__(self, x):
        import torch

        self.kept.append(torch.ones(10 << 20))
        return x


def capture_warmup(out: Path) -> None:
    import torch

    import warmprof
    from warmprof import warm
    from warmprof.live.demo import SMALL
    from warmprof.demo import demo_model

    booked: list[dict[str, Any]] = []
    real_book = warm._book

    def book(row, ns, compiles, outcome, faults, anon, files, reserved):
        real_book(row, ns, compiles, outcome, faults, anon, files, reserved)
        booked.append({"shape": _plain(row.shape), "ns": ns, "compiles": _plain(compiles), "outcome": _plain(outcome),
                       "faults": faults, "anon": anon, "files": files, "reserved": reserved, "row": _plain(row.to_dict())})

    warm._book = book
    try:
        model = torch.compile(demo_model(**SMALL), dynamic=False)
        result = warmprof.warmup(model, [(1, 16), (1, 24), (1, 32)])
        leak = _Leaky()
        grown = warmprof.warmup(leak, [(1, 4096)], passes=2)
        # synthetic deltas at and around each rule's floor (page faults, anonymous and file bytes, CUDA
        # reserved bytes, side causes from dynamo's callbacks), booked by the same rule
        for ns, compiles, faults, anon, files, reserved in SYNTHETIC_WARM:
            row = warm.WarmRow(shape=(1, 8), ms=0.0)
            book(row, ns, compiles, warm.CacheOutcome(), faults, anon, files, reserved)
    finally:
        warm._book = real_book
    doc = {"fault_ns": warm.fault_ns(), "page_size": warmprof._native.page_size(), "calls": booked,
           "result": _plain(result.to_dict()), "text": str(result),
           "grown_result": _plain(grown.to_dict()), "grown_text": str(grown)}
    (out / "warmup.json").write_text(json.dumps(doc, indent=1))


def capture_watch(out: Path) -> None:
    from warmprof import watch
    from warmprof.live import demo as wdemo
    from warmprof.live import events

    kept: list[dict[str, Any]] = []
    real_build = events.build

    def build(info, *, index, key, start_ns, idle_ns, dynamo, prices, reserved, side=None):
        seen = _SeenDynamo(dynamo) if dynamo is not None else None
        event = real_build(info, index=index, key=key, start_ns=start_ns, idle_ns=idle_ns, dynamo=seen,
                           prices=prices, reserved=reserved, side=side)
        reasons, cache = (seen.reasons, seen.cache_text) if seen is not None else ([], "")
        record = [None if i in (1, 2, 3) else _plain(v) for i, v in enumerate(info)]
        kept.append({"info": record, "index": index, "key": key, "start_ns": start_ns, "idle_ns": idle_ns,
                     "dynamo": None if dynamo is None else {"recompile_reasons": reasons, "cache_text": cache},
                     "fault_ns": prices.ns(), "reserved": _plain(reserved), "side": _plain(side),
                     "event": _plain(event)})
        return event

    events.build = build
    try:
        model = wdemo.compiled_demo()
        w = watch(model)
        try:
            wdemo.replay(w, wdemo.stream(40, lengths=wdemo.LENGTHS[:4]), idle_at=30)
        finally:
            w.close()
    finally:
        events.build = real_build
    synthetic = []
    for info, idle_ns, dyn, fault_ns, reserved, side in SYNTHETIC_WATCH:
        dynamo = None if dyn is None else _FakeDynamo(*dyn)
        event = real_build(tuple(info), index=0, key="k", start_ns=0, idle_ns=idle_ns, dynamo=dynamo,
                           prices=_FixedPrice(fault_ns), reserved=reserved, side=side)
        synthetic.append({"info": info, "index": 0, "key": "k", "start_ns": 0, "idle_ns": idle_ns,
                          "dynamo": None if dyn is None else {"recompile_reasons": dyn[0], "cache_text": dyn[1]},
                          "fault_ns": fault_ns, "reserved": _plain(reserved), "side": _plain(side),
                          "event": _plain(event)})
    (out / "watch.json").write_text(json.dumps({"events": kept + synthetic}, indent=1))


class _SeenDynamo:
    """Passes dynamo's state through to build, keeping what build read (each read consumes it)."""

    def __init__(self, dynamo) -> None:
        self.dynamo, self.reasons, self.cache_text = dynamo, [], ""

    def recompile_reasons(self):
        self.reasons = self.dynamo.recompile_reasons()
        return self.reasons

    def cache(self):
        outcome = self.dynamo.cache()
        self.cache_text = outcome.text()
        return outcome


class _FixedPrice:
    def __init__(self, ns: float) -> None:
        self._ns = ns

    def ns(self) -> float:
        return self._ns


class _FakeDynamo:
    def __init__(self, reasons, cache_text) -> None:
        self._reasons, self._text = reasons, cache_text

    def recompile_reasons(self):
        return list(self._reasons)

    def cache(self):
        text = self._text

        class _C:
            def text(self):
                return text
        return _C()


def _info(first=False, outlier=True, dur=5_000_000, gap=0, clock=None, cpu=4_000_000, minflt=0, majflt=0, nivcsw=0,
          compiles=0, compile_ns=0, calls_before=20, median=1_000_000, cupti=None):
    return [7, None, None, None, first, outlier, 1_000_000_000, dur, gap, clock, cpu, minflt, majflt, nivcsw, compiles,
            compile_ns, calls_before, median, cupti]


_ALLOC, _INIT, _JIT, _CAPTURE = 4, 5, 1, 3  # recorder cause ids (csrc/core/causes.h)
SYNTHETIC_WATCH = [
    (_info(minflt=15), 10**9, None, 1000.0, (None, None), []),
    (_info(minflt=16), 10**9, None, 1000.0, (None, None), []),
    (_info(minflt=5000, majflt=3), 10**9, None, 1000.0, ((1 << 20, 1), (5 << 20, 3)), []),
    (_info(nivcsw=3, cpu=1_000_000), 10**9, None, 1000.0, (None, None), []),
    (_info(nivcsw=0, cpu=1_000_000), 10**9, None, 1000.0, (None, None), []),
    (_info(gap=2 * 10**9, clock=(900.0, 1980.0)), 10**9, None, 1000.0, (None, None), []),
    (_info(gap=2 * 10**9, clock=(1980.0, 1980.0)), 10**9, None, 1000.0, (None, None), []),
    (_info(gap=2 * 10**9), 10**9, None, 1000.0, (None, None), []),
    (_info(gap=2 * 10**9, clock=("x", None)), 10**9, None, 1000.0, (None, None), []),
    (_info(first=True, outlier=False, compiles=2, compile_ns=3_000_000, minflt=900), 10**9,
     (["0/1: guard"], "1 graph compiled from scratch"), 1000.0, (None, None), []),
    (_info(compiles=3, compile_ns=4_000_000), 10**9, ([], ""), 1000.0, (None, None),
     [["cudagraphs:record", 1_000_000], ["triton:autotune", 500_000]]),
    (_info(cupti=[[_ALLOC, 2, 600_000, 64 << 20], [_INIT, 1, 300_000, 0], [_CAPTURE, 1, 100_000, 0]]), 10**9, None,
     1000.0, (None, None), []),
    (_info(dur=1_200_000, cupti=[[_ALLOC, 2, 6_000_000, 1 << 20], [_JIT, 1, 3_000_000, 0]], minflt=100, nivcsw=2,
           cpu=100_000), 10**9, None, 1000.0, (None, None), []),
]


# More synthetic warm-up calls (added after review, recorded with the same old code): file-backed growth
# that is not a whole number of fault-around blocks; a reserve that grew beside file pages; a reserve
# that shrank (an intended change: no longer growth).
SYNTHETIC_WARM_EXTRA = [
    (5_000_000, [], 1000, MIB, 100_000, None), (5_000_000, [], 700, 3 * MIB, 5 * MIB + 12_345, None),
    (5_000_000, [], 100, 0, 3 * MIB, 2 * MIB), (5_000_000, [], 0, 0, 0, -2 * MIB),
]


def capture_warmup_extra(out: Path) -> None:
    """`--extra`: SYNTHETIC_WARM_EXTRA through the booking rule, into warmup_extra.json."""
    import warmprof
    from warmprof import warm

    warm._fault_ns = 1000.0
    booked = []
    for ns, compiles, faults, anon, files, reserved in SYNTHETIC_WARM_EXTRA:
        row = warm.WarmRow(shape=(1, 8), ms=0.0)
        warm._book(row, ns, compiles, warm.CacheOutcome(), faults, anon, files, reserved)
        booked.append({"shape": [1, 8], "ns": ns, "compiles": compiles, "outcome": _plain(warm.CacheOutcome()),
                       "faults": faults, "anon": anon, "files": files, "reserved": reserved, "row": _plain(row.to_dict())})
    doc = {"fault_ns": 1000.0, "page_size": warmprof._native.page_size(), "calls": booked}
    (out / "warmup_extra.json").write_text(json.dumps(doc, indent=1))


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    if "--extra" in sys.argv[2:]:
        capture_warmup_extra(out)
        return
    capture_trace(out, "trace_eager", None)
    capture_trace(out, "trace_compiled", True)
    capture_warmup(out)
    capture_watch(out)


if __name__ == "__main__":
    main()

"""The CUPTI subscriber: CUDA driver and runtime calls as causes.

`Cupti` subscribes warmprof's native CUPTI handler for the instrumented passes, enabling only the
driver, runtime and resource callbacks its table maps. The handler writes those calls into the
recorder (csrc/backends/cupti_handler.h): context set-up and module loads (runtime_init for a
cubin, jit_compile for PTX the driver compiles, including a launch that loaded a module lazily),
allocations (allocator_growth, bytes counted once; a stream-ordered allocation the pool served is
not growth), stream capture / graph instantiate / upload (graph_capture), host-to-device copies
(data_transfer, bytes). Kernel launches are counted, with a span only for a kernel's first launch.
A runtime call (cudaLaunchKernel) and the driver call it makes inside count once.
CUPTI's own subscribe cost is recorded as a profiler_overhead span before the first pass, so it
is reported and never blamed on the model; the callbacks each pass takes are sampled as the
counter "cupti:callbacks" at the pass's start and end (attribution books them x the handler's
calibrated cost as estimated profiler_overhead). If another tool holds CUPTI (torch.profiler,
Nsight) the instrument is off with that reason and the other CUDA instruments still run. If another
tool tears warmprof's subscription down mid-trace (cuptiFinalize; Kineto's TEARDOWN_CUPTI=1 only
finalizes a subscription of its own), the instrument finds out at the next pass boundary, stops
cleanly and says from which pass on its data is missing. A subscription that delivered no callback
at all while CUDA events timed GPU work is reported as CUPTI having delivered nothing (off, with that
reason), not as an active CUPTI that found no causes.

CUPTI's OVERHEAD activity records (the driver's own times of lazy module and function loads and of
its PTX compiles) are taken at each pass end: those naming the pass thread become spans
("cupti:overhead:<kind>", runtime_init or jit_compile); each pass's summary counts them all.

CUDA events (the GPU-side time of each pass) are instruments/cuda_events.py.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from .. import _native
from ..system import cuda_paths
from ..timeline import (
    CUPTI_CALLBACKS,
    PROFILER_OVERHEAD,
    counter,
    name_id,
    now_ns,
    record_span_ns,
)
from .base import Instrument

NEW_KERNEL_NAMES_KEPT = 20  # per pass, in the summary
HELD_ELSEWHERE_NOTE = (
    "CUPTI is off: another subscriber holds it (torch.profiler's Kineto, in torch 2.11, subscribes on "
    "the first profile and keeps it for the rest of the process; Nsight holds it while attached); CUDA "
    "causes come from CUDA events, torch's allocator statistics and hooks (and CuPy) only"
)


def delivered_nothing(callbacks: int, gpu_ms: dict[str, float]) -> str:
    """The reason CUPTI is off when a subscription delivered no callback while CUDA events timed GPU
    work in the same passes ("" otherwise; pure)."""
    busy = sum(ms for ms in gpu_ms.values() if ms > 0)
    if callbacks or busy <= 0:
        return ""
    return (f"CUPTI delivered nothing: subscribed, but no callback arrived while CUDA events timed {busy:.3f} ms "
            f"of GPU work in {len(gpu_ms)} pass(es); CUDA causes come from CUDA events, torch's allocator "
            "statistics and hooks only")


def overhead_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """CUPTI's OVERHEAD records of one pass, by kind: count, ms, and how many named another thread (pure)."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        k = out.setdefault(str(r["kind"]), {"count": 0, "ms": 0.0, "other_threads": 0})
        k["count"] += 1
        k["ms"] += max(0, int(r["end_ns"]) - int(r["start_ns"])) / 1e6
        k["other_threads"] += 0 if r["this_thread"] else 1
    return out


def pass_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """What one pass added to the cumulative CUPTI stats (pure)."""
    names = list(after["new_kernels"][len(before["new_kernels"]):])
    return {
        "kernel_launches": int(after["kernel_launches"] - before["kernel_launches"]),
        "new_kernels": int(after["new_kernel_count"] - before["new_kernel_count"]),
        "new_kernel_names": names[:NEW_KERNEL_NAMES_KEPT],
        "callbacks": int(after["callbacks"] - before["callbacks"]),
        "pool_hits": int(after["pool_hits"] - before["pool_hits"]),
    }


class Cupti(Instrument):
    name = "cupti"

    def __init__(self, gpu_ms: Callable[[], dict[str, float]] | None = None) -> None:
        """gpu_ms: the GPU time of each pass, from CUDA events (pass -> ms), read at exit."""
        super().__init__()
        self._gpu_ms = gpu_ms
        cuda_paths.install()
        entry = _native.backends()["cupti"]
        # A loaded libcupti that has not subscribed yet is not a reason to stay off: subscribing
        # in __enter__ is what tells whether CUPTI works with this driver.
        if not entry["available"] and not entry.get("path"):
            self.reason = entry["reason"]
        self.subscribed = False
        self.subscribe_ms = 0.0
        self.passes: dict[str, dict[str, Any]] = {}
        self.stopped_early: dict[str, str] | None = None  # {"at", "reason"} once torn down
        self._open: dict[str, Mapping[str, Any]] = {}
        self._callbacks = 0
        self._callbacks_at_start = 0

    def __enter__(self) -> "Cupti":
        if self.reason:
            return self
        why = _native.cupti_start()
        t1 = now_ns()
        if why:
            self.reason = why
            if "another CUPTI subscriber" in why:
                self.notes.append(HELD_ELSEWHERE_NOTE)
            return self
        self.subscribed = True
        stats = _native.cupti_stats()
        self._callbacks_at_start = int(stats["callbacks"])
        subscribe_ns = int(stats["subscribe_ns"])
        self.subscribe_ms = subscribe_ns / 1e6
        record_span_ns(PROFILER_OVERHEAD, "cupti:subscribe", t1 - subscribe_ns, t1)
        if stats["refused_callbacks"]:
            self.notes.append(f"libcupti refused {stats['refused_callbacks']} of the callbacks warmprof maps "
                              "(a libcupti older than the headers warmprof was built with): those calls are not seen")
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.subscribed:
            return
        try:
            for name in list(self._open):
                self.end_pass(name)
            self._callbacks = int(_native.cupti_stats()["callbacks"])
        finally:
            why = _native.cupti_stop() or ""  # an unsubscribe error is a reason, never a crash
            self.subscribed = False
        if why and self.stopped_early is None:
            self._stop_early("after the last instrumented pass", why)
        nothing = delivered_nothing(self._callbacks - self._callbacks_at_start, self._gpu_ms() if self._gpu_ms else {})
        if nothing:
            self.reason = nothing

    @property
    def _collecting(self) -> bool:
        return self.subscribed and self.stopped_early is None

    def _standing(self, at: str) -> bool:
        """Whether the subscription still stands; if not, says from where CUPTI data is missing."""
        why = _native.cupti_check() or ""
        if why:
            self._stop_early(at, why)
        return not why

    def _stop_early(self, at: str, why: str) -> None:
        self.stopped_early = {"at": at, "reason": why}
        self.notes.append(f"CUPTI data stops {at}: {why}; the other instruments carry on")

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        if self._collecting and self._standing(f"before pass {name!r}"):
            self._take_overheads()  # what came before the pass is not the pass's
            self._open[name] = self._sample()

    def end_pass(self, name: str) -> None:
        before = self._open.pop(name, None)
        if not self._collecting or before is None:
            return
        delta = pass_delta(before, self._sample())
        if not self._standing(f"during pass {name!r} (the subscription stood when it began)"):
            delta["partial"] = True
        overheads = self._take_overheads()
        if overheads:
            delta["overheads"] = overheads
        self.passes[name] = delta

    @staticmethod
    def _take_overheads() -> dict[str, dict[str, Any]]:
        """CUPTI's OVERHEAD records since the last pass: those on this thread become spans."""
        got = _native.cupti_overheads()
        records = [r for r in got["records"] if int(r["end_ns"]) >= int(r["start_ns"]) > 0]
        for r in records:
            if r["this_thread"]:
                record_span_ns(int(r["cause"]), f"cupti:overhead:{r['kind']}", int(r["start_ns"]), int(r["end_ns"]))
        return overhead_summary(records)

    @staticmethod
    def _sample() -> Mapping[str, Any]:
        """The cumulative stats, with the callback count put on the timeline as a counter sample."""
        stats = _native.cupti_stats()
        counter(name_id(CUPTI_CALLBACKS), int(stats["callbacks"]))
        return stats

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if self.reason:
            return out
        out["subscribe_ms"] = self.subscribe_ms
        out["callbacks"] = self._callbacks
        out["passes"] = self.passes
        if self.stopped_early is not None:
            out["stopped_early"] = dict(self.stopped_early)
        return out


__all__ = ["Cupti", "delivered_nothing", "overhead_summary", "pass_delta"]

"""clock_ramp: the GPU's SM clock during the instrumented passes, and the time a slow clock cost.

The clock is read from NVML (nvidia-ml-py's `pynvml`, when importable) or, on Jetson, from the
GPU's devfreq node (/sys/class/devfreq/<gpu>/cur_freq). A sampler thread reads it every
`sample_ms` while the instrument is on; each pass's samples are written to the timeline as the
counter "clock:sm_mhz" (from the pass's own thread, at the samples' times).

Inference (evidence `inferred`, an estimate): the steady clock is the highest clock seen while
instrumented. A pass whose first sample is below `threshold` x steady is taken to have run its GPU
work at the clock's fraction of steady speed. A slow clock costs time only while the GPU is busy:
host-bound time with an idle GPU (a lazy load, a 30 s inductor compile) loses nothing to it. So the
loss is the integral of busy x (1 - clock/steady) over the pass (sample and hold), where busy is
the GPU's busy fraction the reader gives with each sample (NVML's utilization, Jetson's GPU load),
and is at most the pass's GPU-busy time x (1 - lowest clock/steady), that busy time bounded by
the CUDA events' GPU time of the pass and by the seen re-run's GPU work run at the pass's lowest
clock (`gpu_ms`, from the CUDA events instrument). Without any busy signal the whole pass counts
as busy: an upper bound, and the detail says so. Attribution then caps the figure at what the
pass's other causes left unexplained (Figure.fills_unexplained, as the MPS pipeline estimate is).
The figure is in summary()["passes"][name]["inferred_ms"] (before that cap).
"""

from __future__ import annotations

import glob
import os
import re
import threading
from typing import Any, Callable

from ..attribution.parts import Figure
from ..causes import Name
from ..timeline import counter_at, name_id, now_ns
from .base import Instrument

DEVFREQ_ROOT = "/sys/class/devfreq"
# Jetson GPU devfreq nodes: 17000000.gv11b (Xavier), 17000000.ga10b (Orin), 57000000.gpu, ...
_JETSON_GPU = re.compile(r"(gpu|gv11b|ga10b|gp10b|gm20b|gk20a|gb10b)", re.IGNORECASE)


def _busy_of(sample: tuple) -> float | None:
    """A sample's GPU-busy fraction (its third item), None where the reader gives none."""
    if len(sample) < 3 or sample[2] is None:
        return None
    return min(1.0, max(0.0, float(sample[2])))


def infer_ramp_ms(samples: list[tuple], t0_ns: int, t1_ns: int, steady_mhz: float,
                  threshold: float = 0.8) -> float:
    """Time lost to a low clock in [t0, t1] (pure; samples are (t_ns, mhz) or (t_ns, mhz, busy),
    sorted by time; busy is the GPU's busy fraction 0..1, or None when not read).

    Each stretch between samples loses busy x (1 - clock/steady) of its length, with the clock and
    the busy fraction of the sample that starts it (sample and hold), except that a busy fraction is
    the reader's figure for the time up to its sample (NVML's utilization is over its last period),
    so a stretch takes the busy fraction of the sample that ends it, where there is one. A stretch with
    no busy figure counts as busy (an upper bound). The clock before the first sample in the window is
    the last sample before the window (or the first one inside it). Zero when the pass starts at or
    above threshold x steady.
    """
    if steady_mhz <= 0 or t1_ns <= t0_ns or not samples:
        return 0.0
    before = [s for s in samples if s[0] <= t0_ns]
    inside = [s for s in samples if t0_ns < s[0] < t1_ns]
    after = [s for s in samples if s[0] >= t1_ns]
    start = before[-1] if before else (inside[0] if inside else None)
    if start is None or start[1] >= threshold * steady_mhz:
        return 0.0
    points = [(t0_ns, start[1], _busy_of(start))] + [(s[0], s[1], _busy_of(s)) for s in inside]
    end = (t1_ns, 0.0, _busy_of(after[0]) if after else None)
    lost_ns = 0.0
    for (ta, fa, ba), (tb, _, bb) in zip(points, points[1:] + [end]):
        busy = bb if bb is not None else (ba if ba is not None else 1.0)
        lost_ns += (tb - ta) * busy * max(0.0, 1.0 - fa / steady_mhz)
    return lost_ns / 1e6


def busy_bound_ms(gpu_ms: float | None, rerun_gpu_ms: float | None, min_mhz: float, steady_mhz: float) -> float | None:
    """An upper bound on a pass's GPU-busy time (pure; None when neither figure is known): its CUDA
    events' GPU time (the stream's work lies between the two events, idle gaps included), and the seen
    re-run's GPU time (at least its GPU work at the steady clock) run at this pass's lowest clock."""
    bounds = [b for b in (gpu_ms,) if b is not None and b >= 0]
    if rerun_gpu_ms is not None and rerun_gpu_ms >= 0 and min_mhz > 0 and steady_mhz > 0:
        bounds.append(rerun_gpu_ms * max(1.0, steady_mhz / min_mhz))
    return min(bounds) if bounds else None


def ramp_cap_ms(busy_ms: float | None, min_mhz: float, steady_mhz: float) -> float | None:
    """The most a slow clock can have cost a pass whose GPU was busy at most `busy_ms` (pure)."""
    if busy_ms is None or steady_mhz <= 0:
        return None
    return busy_ms * max(0.0, 1.0 - max(0.0, min_mhz) / steady_mhz)


class NvmlReader:
    """SM clock of one GPU through NVML (the CUDA index mapped through CUDA_VISIBLE_DEVICES)."""

    source = "nvml"

    def __init__(self, cuda_index: int = 0) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        try:
            self._handle = self._handle_for(cuda_index)
            self.max_mhz = float(pynvml.nvmlDeviceGetMaxClockInfo(self._handle, pynvml.NVML_CLOCK_SM))
        except Exception:
            pynvml.nvmlShutdown()
            raise

    def _handle_for(self, cuda_index: int) -> Any:
        nv = self._nvml
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        if cuda_index < len(visible):
            v = visible[cuda_index]
            if v.isdigit():
                return nv.nvmlDeviceGetHandleByIndex(int(v))
            return nv.nvmlDeviceGetHandleByUUID(v)
        return nv.nvmlDeviceGetHandleByIndex(cuda_index)

    def read_mhz(self) -> float:
        return float(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))

    def read_busy(self) -> float | None:
        """The share of NVML's last sample period (1/6 s to 1 s by GPU) in which a kernel ran."""
        try:
            return float(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu) / 100.0
        except Exception:  # not supported on this GPU (some MIG slices): no busy signal
            return None

    def close(self) -> None:
        self._nvml.nvmlShutdown()


class DevfreqReader:
    """Jetson: the GPU devfreq node's cur_freq (Hz)."""

    source = "devfreq"

    def __init__(self, node: str) -> None:
        self.node = node
        self.max_mhz = self._read("max_freq")
        self.read_mhz()  # fail now, not in the sampler

    def _read(self, leaf: str) -> float:
        with open(os.path.join(self.node, leaf)) as f:
            return int(f.read().strip()) / 1e6

    def read_mhz(self) -> float:
        return self._read("cur_freq")

    def read_busy(self) -> float | None:
        """Jetson's GPU load (per mille, the node's device/load), where the board has one."""
        try:
            with open(os.path.join(self.node, "device", "load")) as f:
                return min(1.0, max(0.0, int(f.read().strip()) / 1000.0))
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        pass

    @staticmethod
    def find(root: str = DEVFREQ_ROOT) -> str | None:
        for node in sorted(glob.glob(os.path.join(root, "*"))):
            if _JETSON_GPU.search(os.path.basename(node)) and os.path.exists(os.path.join(node, "cur_freq")):
                return node
        return None


def find_reader(cuda_index: int = 0, devfreq_root: str = DEVFREQ_ROOT) -> tuple[Any, str]:
    """(reader, "") or (None, why there is none)."""
    why = []
    try:
        return NvmlReader(cuda_index), ""
    except ImportError:
        why.append("pynvml is not installed (pip install nvidia-ml-py)")
    except Exception as e:
        why.append(f"NVML: {type(e).__name__}: {e}")
    node = DevfreqReader.find(devfreq_root)
    if node is None:
        why.append("no Jetson GPU devfreq node")
    else:
        try:
            return DevfreqReader(node), ""
        except OSError as e:
            why.append(f"devfreq {node}: {e}")
    return None, "; ".join(why)


class ClockRamp(Instrument):
    name = "clock_ramp"

    def __init__(self, cuda_index: int = 0, sample_ms: float = 10.0, reader: Any = None,
                 threshold: float = 0.8, clock: Callable[[], int] = now_ns,
                 gpu_ms: Callable[[str], float | None] | None = None) -> None:
        """gpu_ms: a pass name -> that pass's GPU time (the CUDA events instrument's), read after the
        passes; it bounds the GPU-busy time a slow clock can have cost (busy_bound_ms)."""
        super().__init__()
        self._gpu_ms = gpu_ms
        if reader is None:
            reader, why = find_reader(cuda_index)
            if reader is None:
                self.reason = f"no GPU clock source: {why}"
        self._reader = reader
        self._source = getattr(reader, "source", "")
        self._period_s = max(sample_ms, 0.5) / 1e3
        self._threshold = threshold
        self._clock = clock
        self._samples: list[tuple[int, float, float | None]] = []  # (t_ns, mhz, busy)
        self._windows: dict[str, list[int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        try:
            mhz = self._reader.read_mhz()
        except Exception as e:  # a reader that fails mid-trace: keep what was sampled
            self._stop.set()
            self.notes.append(f"clock read failed: {type(e).__name__}: {e}")
            return
        busy = None
        read_busy = getattr(self._reader, "read_busy", None)
        if read_busy is not None:
            try:
                busy = read_busy()
            except Exception:  # a busy figure is a refinement: without it the pass counts as busy
                busy = None
        with self._lock:
            self._samples.append((self._clock(), mhz, busy))

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            self.sample()

    def __enter__(self) -> "ClockRamp":
        if self.reason:
            return self
        self._stop.clear()
        self.sample()
        self._thread = threading.Thread(target=self._run, name="warmprof-clock", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def mark_pass(self, name: str) -> None:
        super().mark_pass(name)
        if not self.reason:
            self.sample()
            self._windows[name] = [self._clock(), 0]

    def end_pass(self, name: str) -> None:
        window = self._windows.get(name)
        if self.reason or window is None:
            return
        self.sample()
        window[1] = self._clock()
        nid = name_id("clock:sm_mhz")
        for t, mhz, *_ in self.samples_between(window[0], window[1]):
            counter_at(nid, int(mhz), t)

    def samples_between(self, t0: int, t1: int) -> list[tuple]:
        with self._lock:
            return [s for s in self._samples if t0 <= s[0] <= t1]

    def _pass_gpu_ms(self, name: str) -> float | None:
        if self._gpu_ms is None:
            return None
        try:
            got = self._gpu_ms(name)
        except Exception:
            return None
        return float(got) if isinstance(got, (int, float)) and not isinstance(got, bool) else None

    def inferred(self, pass_name: str) -> list[Figure]:
        if self.reason:
            return []
        one = self.summary().get("passes", {}).get(pass_name, {})
        ms = one.get("inferred_ms", 0.0)
        if ms <= 0:
            return []
        weighted = (f"weighted by the GPU's busy fraction ({one['busy_samples']} of {one['samples']} samples read it)"
                    if one.get("busy_samples") else
                    "no GPU-busy signal from this clock source, so the whole pass counted as busy (an upper bound)")
        detail = (f"an estimate: the SM clock started at {one['start_mhz']:.0f} MHz against a steady "
                  f"{self.summary().get('steady_mhz', 0.0):.0f} MHz; GPU work at a slow clock loses "
                  f"(1 - clock/steady) of its time, {weighted}")
        if one.get("capped_by_gpu_ms") is not None:
            detail += (f"; capped at {one['capped_by_gpu_ms']:.3f} ms, the most the pass's GPU-busy time (at most "
                       f"{one['busy_bound_ms']:.3f} ms: CUDA events) could lose at its lowest clock")
        detail += "; booked only out of what the pass's other causes left unexplained"
        return [Figure(Name.CLOCK_RAMP, f"clock:{self._source}", ms, fills_unexplained=True, detail=detail)]

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if self.reason:
            return out
        with self._lock:
            samples = sorted(self._samples, key=lambda s: s[0])
        steady = max((s[1] for s in samples), default=0.0)
        out["source"] = self._source
        out["steady_mhz"] = steady
        out["passes"] = {}
        rerun_gpu = self._pass_gpu_ms("seen_rerun")
        for name, (t0, t1) in self._windows.items():
            window = [s for s in samples if t0 <= s[0] <= t1]
            inside = [s[1] for s in window]
            one: dict[str, Any] = {
                "start_mhz": inside[0] if inside else 0.0,
                "min_mhz": min(inside, default=0.0),
                "mean_mhz": sum(inside) / len(inside) if inside else 0.0,
                "samples": len(inside),
                "busy_samples": sum(1 for s in window if _busy_of(s) is not None),
                "inferred_ms": infer_ramp_ms(samples, t0, t1, steady, self._threshold) if t1 else 0.0,
            }
            bound = busy_bound_ms(self._pass_gpu_ms(name), rerun_gpu if name != "seen_rerun" else None,
                                  one["min_mhz"], steady)
            cap = ramp_cap_ms(bound, one["min_mhz"], steady)
            if cap is not None and one["inferred_ms"] > cap:
                one["inferred_ms"] = cap
                one["capped_by_gpu_ms"] = cap
                one["busy_bound_ms"] = bound
            out["passes"][name] = one
        return out


__all__ = ["ClockRamp", "DevfreqReader", "NvmlReader", "busy_bound_ms", "find_reader", "infer_ramp_ms", "ramp_cap_ms"]

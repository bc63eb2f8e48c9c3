"""clock_ramp: the GPU's SM clock during the instrumented passes, and the time a slow clock cost.

The clock is read from NVML (nvidia-ml-py's `pynvml`, when importable) or, on Jetson, from the
GPU's devfreq node (/sys/class/devfreq/<gpu>/cur_freq). A sampler thread reads it every
`sample_ms` while the instrument is on; each pass's samples are written to the timeline as the
counter "clock:sm_mhz" (from the pass's own thread, at the samples' times).

Inference (evidence `inferred`): the steady clock is the highest clock seen while instrumented.
A pass whose first sample is below `threshold` x steady is taken to have run its GPU work at the
clock's fraction of steady speed: it lost the integral of (1 - clock/steady) over the pass (sample
and hold between samples). A pass that starts near the steady clock gets nothing. The figure is in
summary()["passes"][name]["inferred_ms"]; it is an upper bound for work that is not GPU-bound.
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


def infer_ramp_ms(samples: list[tuple[int, float]], t0_ns: int, t1_ns: int, steady_mhz: float,
                  threshold: float = 0.8) -> float:
    """Time lost to a low clock in [t0, t1] (pure; samples are (t_ns, mhz), sorted by time).

    The clock before the first sample in the window is the last sample before the window (or the
    first one inside it). Zero when the pass starts at or above threshold x steady.
    """
    if steady_mhz <= 0 or t1_ns <= t0_ns or not samples:
        return 0.0
    before = [s for s in samples if s[0] <= t0_ns]
    inside = [s for s in samples if t0_ns < s[0] < t1_ns]
    start = before[-1] if before else (inside[0] if inside else None)
    if start is None or start[1] >= threshold * steady_mhz:
        return 0.0
    points = [(t0_ns, start[1])] + inside
    lost_ns = 0.0
    for (ta, fa), (tb, _) in zip(points, points[1:] + [(t1_ns, 0.0)]):
        lost_ns += (tb - ta) * max(0.0, 1.0 - fa / steady_mhz)
    return lost_ns / 1e6


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
                 threshold: float = 0.8, clock: Callable[[], int] = now_ns) -> None:
        super().__init__()
        if reader is None:
            reader, why = find_reader(cuda_index)
            if reader is None:
                self.reason = f"no GPU clock source: {why}"
        self._reader = reader
        self._source = getattr(reader, "source", "")
        self._period_s = max(sample_ms, 0.5) / 1e3
        self._threshold = threshold
        self._clock = clock
        self._samples: list[tuple[int, float]] = []
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
        with self._lock:
            self._samples.append((self._clock(), mhz))

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
        for t, mhz in self.samples_between(window[0], window[1]):
            counter_at(nid, int(mhz), t)

    def samples_between(self, t0: int, t1: int) -> list[tuple[int, float]]:
        with self._lock:
            return [s for s in self._samples if t0 <= s[0] <= t1]

    def inferred(self, pass_name: str) -> list[Figure]:
        if self.reason:
            return []
        ms = self.summary().get("passes", {}).get(pass_name, {}).get("inferred_ms", 0.0)
        if ms <= 0:
            return []
        return [Figure(Name.CLOCK_RAMP, f"clock:{self._source}", ms)]

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if self.reason:
            return out
        with self._lock:
            samples = sorted(self._samples)
        steady = max((m for _, m in samples), default=0.0)
        out["source"] = self._source
        out["steady_mhz"] = steady
        out["passes"] = {}
        for name, (t0, t1) in self._windows.items():
            inside = [m for t, m in samples if t0 <= t <= t1]
            out["passes"][name] = {
                "start_mhz": inside[0] if inside else 0.0,
                "min_mhz": min(inside, default=0.0),
                "mean_mhz": sum(inside) / len(inside) if inside else 0.0,
                "samples": len(inside),
                "inferred_ms": infer_ramp_ms(samples, t0, t1, steady, self._threshold) if t1 else 0.0,
            }
        return out


__all__ = ["ClockRamp", "DevfreqReader", "NvmlReader", "find_reader", "infer_ramp_ms"]

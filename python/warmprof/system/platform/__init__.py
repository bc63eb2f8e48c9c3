"""Platform fingerprint stored in every report: what machine, runtime and power state made it.

Every file is read relative to an injectable `root` (tests use small trees copying the real
files' formats), external tools go through an injectable `run`, and a missing or unreadable
file, an absent tool or a garbled answer simply leaves its keys out: never an error.

The fingerprint never initializes CUDA and never imports torch or CuPy: a report's first pass
must not be warmed by its own bookkeeping. It reads what the process has already loaded, and
package metadata for the rest.

This module is the public face, and assembles the facts; each source has a file of its own:
files.py (the root-relative reader), tools.py (the query tools), linux.py (OS, CPU, NVIDIA
driver), jetson.py (Tegra boards), apple.py (macOS), runtime.py (torch, CUDA, CuPy), and
cpu_budget.py (usable CPUs and their oversubscription). `fingerprint` looks each part up here,
so a test that patches one on this package (`_runtime_facts`, `run_tool`) reaches it.
"""

from __future__ import annotations

import os
import platform as _platform
from typing import Any

from ... import devices

# The parts; the public names (and _runtime_facts, which tests replace) are reached through here.
from .apple import _apple_facts
from .cpu_budget import oversubscription, runnable_others, usable_cpus
from .files import _Files
from .jetson import _jetson_facts, _short_board
from .linux import _cpu_facts, _nvidia_driver_facts, _nvidia_smi_facts, _os_facts
from .runtime import _runtime_facts
from .tools import SYSTEM_PROFILER_TIMEOUT_S, TOOL_TIMEOUT_S, Runner, run_tool

__all__ = [
    "Runner", "SYSTEM_PROFILER_TIMEOUT_S", "TOOL_TIMEOUT_S", "cuda_index", "describe_device", "fingerprint",
    "oversubscription", "run_tool", "runnable_others", "usable_cpus",
]


def cuda_index(device: str) -> int | None:
    """N of 'cuda:N' (the GPU a fingerprint should name for work on that device); None otherwise."""
    kind = devices.find(str(device))
    index = str(device).partition(":")[2]
    return int(index) if kind is not None and kind.gpu_index and index.isascii() and index.isdigit() else None


def fingerprint(
    root: str | os.PathLike = "/",
    *,
    run: Runner | None = None,
    system: str | None = None,
    runtimes: bool = True,
    gpu_index: int | None = None,
) -> dict[str, Any]:
    """The platform as a flat dict of JSON scalars; absent facts are absent keys.

    root: where /proc, /sys and /etc are read from. run: how external tools (nvpmodel, sysctl,
    nvidia-smi) are invoked. system: the OS name (platform.system() by default). runtimes=False
    leaves out what comes from this process (Python, torch, CuPy, CUDA), for a fingerprint made
    of the files alone. gpu_index: the CUDA device the work ran on (cuda:N); when this process's
    CUDA is up, that device's name and memory replace the first GPU's.
    """
    fs = _Files(root)
    run = run or run_tool
    system = system or _platform.system()
    fp: dict[str, Any] = {}
    fp.update(_os_facts(fs, system, run))
    fp.update(_cpu_facts(fs))
    fp.update(_nvidia_driver_facts(fs))
    fp.update(_jetson_facts(fs, run))
    if system == "Darwin":
        fp.update(_apple_facts(run))
    if runtimes:
        runtime = _runtime_facts(gpu_index)
        for key, value in runtime.items():
            fp.setdefault(key, value)  # the files name the hardware; the runtime only fills gaps
        if gpu_index and "gpu" in runtime:  # not device 0: the files list GPUs in bus order, CUDA may not
            fp.update({k: runtime[k] for k in ("gpu", "gpu_memory_gb", "gpu_capability", "gpu_index") if k in runtime})
    if "gpu_memory_gb" not in fp and fs.exists("proc/driver/nvidia/gpus"):
        for key, value in _nvidia_smi_facts(fs, run).items():
            fp.setdefault(key, value)
    if fp.get("unified_memory") and "memory_gb" in fp:
        fp.setdefault("gpu_memory_gb", fp["memory_gb"])
    return fp


def describe_device(fp: dict[str, Any], device: str = "") -> str:
    """A short name for titles: the GPU (or Jetson board and power mode), the Apple chip, or the CPU."""
    kind = devices.find(device or "") or devices.HOST  # each kind's title is in the device table
    board = _short_board(fp.get("jetson", ""))
    mode = f" ({fp['power_mode']})" if fp.get("power_mode") else ""
    return kind.title(fp, board, mode)

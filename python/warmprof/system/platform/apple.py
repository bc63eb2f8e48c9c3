"""The macOS facts: the Apple chip, CPU and GPU core counts, memory, Metal support and macOS build.

Each comes from a short query of sysctl, sw_vers, ioreg or system_profiler through the injected
runner (tests replay recorded output); a tool that fails or answers garbage leaves its facts out.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .files import _GIB
from .tools import SYSTEM_PROFILER_TIMEOUT_S, TOOL_TIMEOUT_S, Runner

def _apple_facts(run: Runner) -> dict[str, Any]:
    """The Apple chip, its CPU and GPU core counts, memory, Metal support and macOS build, from
    sysctl, ioreg and system_profiler (each a short query; a tool that fails leaves its facts out)."""
    out: dict[str, Any] = {}

    def sysctl(name: str) -> str:
        return (run(["sysctl", "-n", name], TOOL_TIMEOUT_S) or "").strip()

    chip = sysctl("machdep.cpu.brand_string")
    if chip:
        out["apple_chip"] = chip
    memsize = sysctl("hw.memsize")
    if memsize.isdigit():
        out["memory_gb"] = round(int(memsize) / _GIB, 1)
    for key, name in (("cpu_count", "hw.ncpu"), ("cpu_performance_cores", "hw.perflevel0.physicalcpu"),
                      ("cpu_efficiency_cores", "hw.perflevel1.physicalcpu")):
        value = sysctl(name)
        if value.isdigit() and int(value) > 0:
            out[key] = int(value)
    build = (run(["sw_vers", "-buildVersion"], TOOL_TIMEOUT_S) or "").strip()
    if build:
        out["os_build"] = build
    # GPU cores: the AGX accelerator's registry entry, else system_profiler's display report
    cores = re.search(r'"gpu-core-count"\s*=\s*(\d+)', run(["ioreg", "-rc", "AGXAccelerator", "-d", "1"], TOOL_TIMEOUT_S) or "")
    if cores:
        out["gpu_cores"] = int(cores.group(1))
    gpu = _apple_display(run(["system_profiler", "-json", "SPDisplaysDataType"], SYSTEM_PROFILER_TIMEOUT_S) or "")
    if gpu.get("sppci_cores", "").isdigit():
        out.setdefault("gpu_cores", int(gpu["sppci_cores"]))
    if gpu.get("sppci_model") or gpu.get("_name"):
        out["gpu"] = gpu.get("sppci_model") or gpu.get("_name")
    family = gpu.get("spdisplays_mtlgpufamilysupport", "")
    if family.startswith("spdisplays_metal"):
        out["metal"] = "Metal " + family.removeprefix("spdisplays_metal")
    if chip.startswith("Apple"):
        out["unified_memory"] = True
    return out


def _apple_display(text: str) -> dict[str, str]:
    """The first GPU in `system_profiler -json SPDisplaysDataType`'s output (string fields only)."""
    try:
        rows = json.loads(text).get("SPDisplaysDataType") or []
    except (ValueError, AttributeError):
        return {}
    first = rows[0] if rows and isinstance(rows[0], dict) else {}
    return {k: v for k, v in first.items() if isinstance(v, str)}

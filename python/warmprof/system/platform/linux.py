"""The Linux facts: the OS release and kernel, the CPU model and count, memory, and the NVIDIA driver.

The OS, CPU and memory come from /etc/os-release, /proc/cpuinfo and /proc/meminfo (ARM cores are
named from their part ids); the driver and its GPUs from /proc/driver/nvidia, and the GPU memory,
when this process's CUDA is cold, from nvidia-smi in a process of its own. `_os_facts` also names
macOS (sw_vers) so that every system's "os" key is made in one place.
"""

from __future__ import annotations

import os
import platform as _platform
import re
from typing import Any

from .files import _GIB, _Files, _key_values
from .tools import TOOL_TIMEOUT_S, Runner

# ARM "CPU part" ids (implementer 0x41) of the cores found in Jetsons and ARM servers.
_ARM_PARTS = {
    "0xd03": "ARM Cortex-A53", "0xd04": "ARM Cortex-A35", "0xd05": "ARM Cortex-A55",
    "0xd07": "ARM Cortex-A57", "0xd08": "ARM Cortex-A72", "0xd09": "ARM Cortex-A73",
    "0xd0a": "ARM Cortex-A75", "0xd0b": "ARM Cortex-A76", "0xd0c": "ARM Neoverse-N1",
    "0xd40": "ARM Neoverse-V1", "0xd41": "ARM Cortex-A78", "0xd42": "ARM Cortex-A78AE",
    "0xd44": "ARM Cortex-X1", "0xd49": "ARM Neoverse-N2", "0xd4f": "ARM Neoverse-V2",
}
_NVIDIA_PARTS = {"0x003": "NVIDIA Denver 2", "0x004": "NVIDIA Carmel"}  # implementer 0x4e


def _os_facts(fs: _Files, system: str, run: Runner) -> dict[str, Any]:
    out: dict[str, Any] = {}
    release = _key_values(fs.read("etc/os-release") or "")
    if system == "Darwin":
        version = (run(["sw_vers", "-productVersion"], TOOL_TIMEOUT_S) or "").strip()
        out["os"] = f"macOS {version}".strip()
    elif release.get("PRETTY_NAME"):
        out["os"] = release["PRETTY_NAME"]
    elif fs.live:
        out["os"] = f"{system} {_platform.release()}".strip()
    kernel = fs.read("proc/sys/kernel/osrelease") or (_platform.release() if fs.live else None)
    if kernel:
        out["kernel"] = kernel
    if fs.live:
        out["machine"] = _platform.machine()
    return out


def _cpu_facts(fs: _Files) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cpuinfo = fs.read("proc/cpuinfo") or ""
    blocks = [_key_values(b, sep=":") for b in re.split(r"\n\s*\n", cpuinfo) if b.strip()]
    cpus = [b for b in blocks if "processor" in b and b["processor"].isdigit()]
    name = _cpu_name(cpus[0] if cpus else {})
    if name:
        out["cpu"] = name
    if cpus:
        out["cpu_count"] = len(cpus)
    elif fs.live and os.cpu_count():
        out["cpu_count"] = os.cpu_count()
    mem_kb = _key_values(fs.read("proc/meminfo") or "", sep=":").get("MemTotal", "").split()
    if mem_kb and mem_kb[0].isdigit():
        out["memory_gb"] = round(int(mem_kb[0]) * 1024 / _GIB, 1)
    return out


def _cpu_name(cpu: dict[str, str]) -> str:
    model = cpu.get("model name", "")
    implementer, part = cpu.get("CPU implementer", "").lower(), cpu.get("CPU part", "").lower()
    parts = _NVIDIA_PARTS if implementer == "0x4e" else _ARM_PARTS if implementer == "0x41" else {}
    # ARM kernels print a generic "ARMv8 Processor rev 1 (v8l)", or nothing: the part id says more.
    if part in parts and (not model or model.startswith("ARMv")):
        return parts[part]
    return re.sub(r"\s+", " ", model).strip()


def _nvidia_driver_facts(fs: _Files) -> dict[str, Any]:
    out: dict[str, Any] = {}
    m = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", fs.read("proc/driver/nvidia/version") or "")
    if m:
        out["cuda_driver"] = m.group(1)
    names = []
    for info in fs.glob("proc/driver/nvidia/gpus/*/information"):
        model = _key_values(fs.read(info) or "", sep=":").get("Model")
        if model:
            names.append(model)
    if names:
        out["gpu"] = names[0]
        out["gpu_count"] = len(names)
    return out


def _nvidia_smi_facts(fs: _Files, run: Runner) -> dict[str, Any]:
    """GPU name and memory from nvidia-smi (a separate process: this one's CUDA stays cold)."""
    tool = fs.tool("nvidia-smi")
    answer = run([tool, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"], TOOL_TIMEOUT_S) if tool else None
    rows = [[c.strip() for c in line.split(",")] for line in (answer or "").splitlines() if line.count(",") == 1]
    if not rows:
        return {}
    out: dict[str, Any] = {"gpu": rows[0][0], "gpu_count": len(rows)}
    if rows[0][1].isdigit():
        out["gpu_memory_gb"] = round(int(rows[0][1]) * (1 << 20) / _GIB, 1)
    return out

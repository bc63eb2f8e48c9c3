"""The Jetson (Tegra) board facts: the board, L4T release, SoC, power mode and integrated GPU.

Read from the device tree, /etc/nv_tegra_release, nvpmodel (or the mode it last set) and the
iGPU's devfreq node (clocks and governor). A device tree that names no Tegra gives only "board"
(a Raspberry Pi, say); `_short_board` trims a board's name for titles.
"""

from __future__ import annotations

import re
from typing import Any

from .files import _Files
from .tools import TOOL_TIMEOUT_S, Runner

# Tegra SoC (device-tree "compatible") -> (product family, GPU architecture).
_TEGRA_SOCS = {
    "tegra210": ("Tegra X1", "Maxwell"),
    "tegra186": ("Tegra X2", "Pascal"),
    "tegra194": ("Xavier", "Volta"),
    "tegra234": ("Orin", "Ampere"),
    "tegra264": ("Thor", "Blackwell"),
}
# Integrated-GPU devfreq node names (the part after the unit address: 17000000.ga10b).
_IGPU_NODES = {"gm20b": "Maxwell", "gp10b": "Pascal", "gv11b": "Volta", "ga10b": "Ampere", "gpu": ""}
_DEVFREQ_GLOBS = (
    "sys/class/devfreq/*",
    "sys/devices/*/devfreq/*",
    "sys/devices/gpu.0/devfreq/*",
    "sys/devices/platform/*/devfreq/*",
    "sys/devices/platform/bus@0/*/devfreq/*",
)


def _jetson_facts(fs: _Files, run: Runner) -> dict[str, Any]:
    out: dict[str, Any] = {}
    model = fs.read("proc/device-tree/model")
    compatible = (fs.read_raw("proc/device-tree/compatible") or "").split("\x00")
    soc = next((c.split(",", 1)[1] for c in compatible if c.startswith("nvidia,tegra")), "")
    tegra = _tegra_release(fs.read("etc/nv_tegra_release") or "")
    if not (tegra or soc):
        if model:
            out["board"] = model  # a non-Jetson board with a device tree (a Raspberry Pi, say)
        return out
    out["jetson"] = model or "NVIDIA Jetson"
    if tegra:
        out["l4t"] = tegra
    if soc:
        out["soc"] = soc
    out.update(_power_mode(fs, run))
    out.update(_igpu(fs, soc))
    out["unified_memory"] = True
    return out


def _tegra_release(text: str) -> str:
    m = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", text)
    return f"R{m.group(1)}.{m.group(2)}" if m else ""


def _power_mode(fs: _Files, run: Runner) -> dict[str, Any]:
    """nvpmodel -q where the tool exists; else the mode it last set (/var/lib/nvpmodel/status)."""
    tool = fs.tool("nvpmodel")
    answer = run([tool, "-q"], TOOL_TIMEOUT_S) if tool else None
    m = re.search(r"NV Power Mode:\s*(\S+)\s*\n\s*(\d+)", answer or "")
    if m:
        return {"power_mode": m.group(1), "power_mode_id": int(m.group(2))}
    status = re.search(r"pmode:(\d+)", fs.read("var/lib/nvpmodel/status") or "")
    if not status:
        return {}
    mode_id = int(status.group(1))
    names = dict(re.findall(r"<\s*POWER_MODEL\s+ID=(\d+)\s+NAME=(\S+?)\s*>", fs.read("etc/nvpmodel.conf") or ""))
    out: dict[str, Any] = {"power_mode_id": mode_id}
    if str(mode_id) in names:
        out["power_mode"] = names[str(mode_id)]
    return out


def _igpu(fs: _Files, soc: str) -> dict[str, Any]:
    """The integrated GPU: its name, and from its devfreq node the clocks (MHz) and governor."""
    family, arch = _TEGRA_SOCS.get(soc, ("Tegra", ""))
    nodes = [p for pattern in _DEVFREQ_GLOBS for p in fs.glob(pattern) if p.name.rsplit(".", 1)[-1] in _IGPU_NODES]
    if not nodes and not soc:
        return {}
    arch = arch or (_IGPU_NODES[nodes[0].name.rsplit(".", 1)[-1]] if nodes else "")
    out: dict[str, Any] = {"gpu": f"{family} integrated GPU" + (f" ({arch})" if arch else "")}
    if nodes:  # /sys/class/devfreq links and the device paths name the same node: read the first
        for key, name in (("gpu_freq_mhz", "cur_freq"), ("gpu_freq_min_mhz", "min_freq"), ("gpu_freq_max_mhz", "max_freq")):
            hz = fs.read_int(nodes[0] / name)
            if hz is not None:
                out[key] = round(hz / 1e6, 1)
        governor = fs.read(nodes[0] / "governor")
        if governor:
            out["gpu_governor"] = governor
    return out


def _short_board(model: str) -> str:
    return re.sub(r"^NVIDIA\s+|\s+Developer Kit$", "", model).strip()

"""Platform fingerprint stored in every report: what machine, runtime and power state made it.

Every file is read relative to an injectable `root` (tests use small trees copying the real
files' formats), external tools go through an injectable `run`, and a missing or unreadable
file, an absent tool or a garbled answer simply leaves its keys out: never an error.

The fingerprint never initializes CUDA and never imports torch or CuPy: a report's first pass
must not be warmed by its own bookkeeping. It reads what the process has already loaded, and
package metadata for the rest.
"""

from __future__ import annotations

import glob
import json
import os
import platform as _platform
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Optional

from ... import devices

# run(argv, timeout_s) -> stdout, or None when the tool failed, timed out or is absent.
Runner = Callable[[list, float], Optional[str]]

TOOL_TIMEOUT_S = 2.0
SYSTEM_PROFILER_TIMEOUT_S = 5.0  # system_profiler's display report takes about a second
_MAX_READ = 4 << 20
_GIB = float(1 << 30)

# ARM "CPU part" ids (implementer 0x41) of the cores found in Jetsons and ARM servers.
_ARM_PARTS = {
    "0xd03": "ARM Cortex-A53", "0xd04": "ARM Cortex-A35", "0xd05": "ARM Cortex-A55",
    "0xd07": "ARM Cortex-A57", "0xd08": "ARM Cortex-A72", "0xd09": "ARM Cortex-A73",
    "0xd0a": "ARM Cortex-A75", "0xd0b": "ARM Cortex-A76", "0xd0c": "ARM Neoverse-N1",
    "0xd40": "ARM Neoverse-V1", "0xd41": "ARM Cortex-A78", "0xd42": "ARM Cortex-A78AE",
    "0xd44": "ARM Cortex-X1", "0xd49": "ARM Neoverse-N2", "0xd4f": "ARM Neoverse-V2",
}
_NVIDIA_PARTS = {"0x003": "NVIDIA Denver 2", "0x004": "NVIDIA Carmel"}  # implementer 0x4e

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
_CUPY_DISTS = ("cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x")


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


def run_tool(argv: list, timeout_s: float = TOOL_TIMEOUT_S) -> str | None:
    """Run a query tool briefly; None on any failure (absent, non-zero exit, timeout)."""
    try:
        done = subprocess.run(
            [str(a) for a in argv], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return done.stdout if done.returncode == 0 else None


# -- reading files under a root ----------------------------------------------------------------
class _Files:
    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.live = self.root.resolve() == Path("/").resolve()

    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def exists(self, rel: str) -> bool:
        return self.path(rel).exists()

    def read_raw(self, rel: str | Path) -> str | None:
        """The file's text as is, or None when absent, unreadable or not text."""
        p = rel if isinstance(rel, Path) else self.path(rel)
        try:
            with open(p, "rb") as f:
                return f.read(_MAX_READ).decode("utf-8")
        except (OSError, ValueError):  # absent, a directory, no permission, not UTF-8
            return None

    def read(self, rel: str | Path) -> str | None:
        """The file's text with NULs (device-tree strings) removed and stripped; None if empty."""
        text = (self.read_raw(rel) or "").replace("\x00", "").strip()
        return text or None

    def read_int(self, rel: str | Path) -> int | None:
        text = self.read(rel)
        try:
            return int(text.split()[0]) if text else None
        except ValueError:
            return None

    def glob(self, pattern: str) -> list[Path]:
        return sorted(Path(p) for p in glob.glob(str(self.path(pattern))))

    def tool(self, name: str) -> str | None:
        """Where a tool lives under the root; on the live system, anywhere on PATH too."""
        for d in ("usr/sbin", "usr/bin", "sbin", "bin"):
            p = self.path(f"{d}/{name}")
            if p.is_file():
                return str(p)
        return shutil.which(name) if self.live else None


# -- the facts -------------------------------------------------------------------------------
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


def _runtime_facts(gpu_index: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"python": _platform.python_version()}
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None) or _dist_version(("torch",))
    if version:
        out["torch"] = str(version)
    if torch is not None:
        out.update(_torch_facts(torch, gpu_index))
    cupy = sys.modules.get("cupy")
    version = getattr(cupy, "__version__", None) or _dist_version(_CUPY_DISTS)
    if version:
        out["cupy"] = str(version)
    if cupy is not None:
        try:  # cudaRuntimeGetVersion: a constant of the loaded library, no CUDA initialization
            out.setdefault("cuda_runtime", _cuda_version(cupy.cuda.runtime.runtimeGetVersion()))
        except Exception:
            pass
    return out


def _cuda_version(v: int) -> str:
    """CUDA's integer versions (12040) as text (12.4)."""
    return f"{v // 1000}.{v % 1000 // 10}"


def _torch_facts(torch: Any, gpu_index: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        out["torch_threads"] = torch.get_num_threads()
        if getattr(torch.version, "cuda", None):
            out["cuda_runtime"] = torch.version.cuda
        if getattr(torch.version, "hip", None):
            out["hip_runtime"] = torch.version.hip
        # Only a CUDA the process already initialized: asking would pay its runtime_init here.
        if not torch.cuda.is_initialized():
            return out
        index = torch.cuda.current_device() if gpu_index is None else gpu_index
        props = torch.cuda.get_device_properties(index)
        if index:
            out["gpu_index"] = index
        out["gpu"] = props.name
        out["gpu_memory_gb"] = round(props.total_memory / _GIB, 1)
        out["gpu_count"] = torch.cuda.device_count()
        out["gpu_capability"] = f"{props.major}.{props.minor}"
        driver_api = getattr(torch._C, "_cuda_getDriverVersion", None)
        if driver_api is not None:
            out["cuda_driver_api"] = _cuda_version(driver_api())
    except Exception:  # a broken or partial CUDA install is a fact we simply do not record
        pass
    return out


def _dist_version(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        except Exception:
            return None
    return None


# -- parsing helpers -------------------------------------------------------------------------
def _key_values(text: str, sep: str = "=") -> dict[str, str]:
    """KEY=value (os-release) or key : value (cpuinfo, meminfo) lines; quotes removed."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, found, value = line.partition(sep)
        if found and key.strip():
            out.setdefault(key.strip(), value.strip().strip('"').strip("'"))
    return out


def _short_board(model: str) -> str:
    return re.sub(r"^NVIDIA\s+|\s+Developer Kit$", "", model).strip()


# -- CPU budget: what this process may use, and what else wants it (trace and probe share this) ----


def usable_cpus(affinity: int | None = None, quota_text: str | None = None) -> tuple[float, str]:
    """CPUs this process may run on: its affinity mask, capped by a cgroup CPU quota; and how that was read."""
    if affinity is None:
        try:
            affinity = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            affinity = os.cpu_count() or 1
    how = [f"{affinity} in its affinity mask"]
    cpus = float(affinity)
    if quota_text is None:
        quota_text = _read_text("/sys/fs/cgroup/cpu.max")
    parts = (quota_text or "").split()
    if len(parts) == 2 and parts[0] != "max":
        try:
            quota = int(parts[0]) / int(parts[1])
        except (ValueError, ZeroDivisionError):
            quota = 0.0
        if 0 < quota < cpus:
            cpus = quota
            how.append(f"a cgroup quota of {quota:g} CPUs")
    return cpus, ", ".join(how)


def runnable_others(loadavg_text: str | None = None) -> int:
    """Tasks runnable on the machine right now besides the one reading (/proc/loadavg's 4th field)."""
    text = loadavg_text if loadavg_text is not None else _read_text("/proc/loadavg")
    try:
        running = int((text or "").split()[3].split("/")[0])
    except (IndexError, ValueError):
        return 0
    return max(0, running - 1)


def oversubscription(threads: int, *, cpus: tuple[float, str] | None = None, others: int | None = None) -> str:
    """A note when torch's intra-op threads clash with the CPUs this process may use or with the other
    work runnable now (threads that take turns on a core wait for each other inside every parallel
    op, so passes inflate and spread); "" when they do not."""
    n_cpus, how = cpus if cpus is not None else usable_cpus()
    others = runnable_others() if others is None else others
    fit = max(1, int(n_cpus))
    if threads > n_cpus:
        return (f"torch runs {threads} intra-op threads but this process may use {n_cpus:g} CPU(s) ({how}): the "
                f"threads take turns, so parallel ops wait and pass times inflate and spread; --threads {fit} "
                "(torch.set_num_threads) measures without that")
    if threads > 1 and threads + others > n_cpus:
        free = max(1, fit - others)
        return (f"{others} other task(s) were runnable when the run started, on {n_cpus:g} usable CPU(s) ({how}), "
                f"beside torch's {threads} intra-op threads: parallel ops wait for descheduled threads, so pass "
                f"times inflate and spread; --threads {free} (torch.set_num_threads) measures with less of that")
    return ""


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None

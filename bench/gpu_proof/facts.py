"""The proof's first phase: what machine this is, before anything is built.

    python3 facts.py OUT.json

The GPU gate first (torch.cuda.is_available(), saved at once: prove.py reads it to say NO GPU for
the phases after), then: uname and /proc/version (gVisor reports a 4.4.0 kernel), nvidia-smi (name,
driver, SM clock now and max, persistence), the environment that changes CUDA's behaviour, the
tools and packages the build needs, torch's versions, which libcupti `import torch` maps and
CUPTI's version, the allocator backend and module loading mode after CUDA is up, NVML's clocks.
With no GPU it still records what it can, then exits 3.
"""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proof_common import EXIT_NO_GPU, no_gpu_reason, save  # noqa: E402

ENV_PREFIXES = ("CUDA_", "KINETO", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTORCH_", "TORCH_", "NSYS", "TEARDOWN_CUPTI",
                "NVIDIA_", "TRITON_")
TOOLS = {"nvidia-smi": ["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,persistence_mode,"
                                      "compute_mode,memory.total", "--format=csv,noheader"],
         "nvcc": ["nvcc", "--version"], "cmake": ["cmake", "--version"], "ninja": ["ninja", "--version"]}
PACKAGES = ("torch", "triton", "cupy-cuda13x", "cupy-cuda12x", "nvidia-cuda-cupti", "scikit_build_core", "pybind11",
            "numpy", "nvidia-ml-py")  # distribution names (nvidia-ml-py is the pynvml module)


def run(argv: list[str], timeout: float = 10.0) -> str:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return (p.stdout + p.stderr).strip()[-2000:] + ("" if p.returncode == 0 else f" [exit {p.returncode}]")
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"not run: {type(e).__name__}: {e}"


def package_versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name.replace("_", "-"))
        except metadata.PackageNotFoundError:
            try:
                out[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                out[name] = "absent"
    return out


def torch_facts(gpu: bool) -> dict:
    """torch's versions, the libcupti its import mapped and CUPTI's version; with a GPU, the
    allocator backend once CUDA is up. Never raises: a failure is a recorded fact."""
    out: dict = {}
    try:
        import torch
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
    out["version"], out["cuda"] = torch.__version__, torch.version.cuda
    try:
        out["cudnn"] = torch.backends.cudnn.version()
    except Exception as e:
        out["cudnn"] = f"{type(e).__name__}: {e}"
    with open("/proc/self/maps") as f:
        out["libcupti_mapped"] = sorted({ln.split()[-1] for ln in f if "libcupti" in ln})
    if out["libcupti_mapped"] and not gpu:
        # CUPTI 13.2 (torch 2.15's wheel) crashes in cuptiGetVersion with no driver (seen here, no GPU):
        # the version is read only where a GPU (and so a driver) is
        out["cupti_api_version"] = "not read: no GPU (cuptiGetVersion can crash without a driver)"
    elif out["libcupti_mapped"]:
        try:
            v = ctypes.c_uint32()
            ctypes.CDLL(out["libcupti_mapped"][0]).cuptiGetVersion(ctypes.byref(v))
            out["cupti_api_version"] = v.value
        except Exception as e:
            out["cupti_api_version"] = f"{type(e).__name__}: {e}"
    if gpu:
        try:
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
            out["device"] = torch.cuda.get_device_name(0)
            out["capability"] = list(torch.cuda.get_device_capability(0))
            out["allocator_backend"] = torch.cuda.get_allocator_backend()
            out["driver_version"] = torch._C._cuda_getDriverVersion() if hasattr(torch._C, "_cuda_getDriverVersion") else None
        except Exception as e:
            out["cuda_error"] = f"{type(e).__name__}: {e}"
    out["module_loading"] = os.environ.get("CUDA_MODULE_LOADING", "(unset: the driver's default, lazy)")
    out["alloc_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    return out


def nvml_clocks() -> dict:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return {"sm_now_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "sm_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def main(out: str) -> int:
    t0 = time.monotonic()
    why = no_gpu_reason()
    result: dict = {"gpu": {"available": not why, "reason": why}}
    save(out, result)  # the gate first: prove.py reads it even if the rest is cut
    if why:
        print(f"NO GPU: {why}", flush=True)
    uname = platform.uname()
    result["uname"] = {"system": uname.system, "release": uname.release, "machine": uname.machine, "node": uname.node}
    try:
        with open("/proc/version") as f:
            result["proc_version"] = f.read(300).strip()
    except OSError as e:
        result["proc_version"] = str(e)
    result["gvisor"] = uname.release.startswith("4.4.0")
    result["cpus"] = os.cpu_count()
    result["python"] = sys.version.split()[0]
    result["env"] = {k: v[:300] for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}
    result["tools"] = {name: run(argv) for name, argv in TOOLS.items()}
    result["packages"] = package_versions()
    save(out, result)
    result["torch"] = torch_facts(gpu=not why)
    result["nvml"] = nvml_clocks() if not why else {"error": "no GPU"}
    result["seconds"] = round(time.monotonic() - t0, 2)
    save(out, result)
    print({k: result[k] for k in ("gpu", "uname", "python")}, flush=True)
    return EXIT_NO_GPU if why else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""The runtime facts of this process: Python, torch (threads, CUDA/HIP build), CuPy, the CUDA runtime.

Read only from what the process has already imported (sys.modules) and from package metadata:
torch and CuPy are never imported here, and a GPU's name and memory come from torch only when
this process's CUDA is already initialized, so the fingerprint never warms a first pass.
"""

from __future__ import annotations

import platform as _platform
import sys
from importlib import metadata
from typing import Any

from .files import _GIB

_CUPY_DISTS = ("cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x")


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

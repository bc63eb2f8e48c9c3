"""Where the CUDA wheels keep libcupti, told to the native loader (which cannot know site-packages).

The loader (csrc/backends/cupti_loader.h) reuses a libcupti already in the process first (torch's
CUDA wheels load their own when torch is imported), then looks in the folders given here, then
tries the sonames libcupti.so.13, libcupti.so.12 and last libcupti.so. The wheels' layouts:

    cu12 (nvidia-cuda-cupti-cu12):  site-packages/nvidia/cuda_cupti/lib/libcupti.so.12
    cu13 (nvidia-cuda-cupti 13.x):  site-packages/nvidia/cu13/lib/libcupti.so.13

When both are installed, the one torch depends on comes first: torch loads that one later, and
a process must not hold two.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from .. import _native

WHEEL_LIB_DIRS = {13: os.path.join("nvidia", "cu13", "lib"), 12: os.path.join("nvidia", "cuda_cupti", "lib")}

_installed: list[str] | None = None


def torch_cuda_major(requirements: Iterable[str] | None) -> int | None:
    """The CUDA major release of the libcupti torch's wheel depends on, read from its requirements."""
    for req in requirements or ():
        name = req.split(";", 1)[0].lower().replace("_", "-")
        if "cupti" not in name:
            continue
        if "-cu12" in name:
            return 12
        if "==13" in name.replace(" ", "") or "-cu13" in name:
            return 13
    return None


def _torch_requirements() -> list[str] | None:
    from importlib import metadata

    try:
        return metadata.requires("torch")
    except metadata.PackageNotFoundError:
        return None


def cupti_dirs(path_entries: Iterable[str] | None = None, requirements: Iterable[str] | None = None) -> list[str]:
    """The CUDA wheels' folders that hold a libcupti, torch's CUDA release first, then newest first."""
    entries = list(sys.path if path_entries is None else path_entries)
    first = torch_cuda_major(_torch_requirements() if requirements is None else requirements)
    majors = sorted(WHEEL_LIB_DIRS, key=lambda m: (m != first, -m))
    found: list[str] = []
    for major in majors:
        for entry in entries:
            folder = os.path.join(entry or os.curdir, WHEEL_LIB_DIRS[major])
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            if any(n.startswith("libcupti.so") for n in names) and folder not in found:
                found.append(folder)
    return found


def install() -> list[str]:
    """Gives the native loader the wheels' folders, once per process; returns them."""
    global _installed
    if _installed is None:
        _installed = cupti_dirs()
        _native.cupti_set_search_path(_installed)
    return list(_installed)


__all__ = ["WHEEL_LIB_DIRS", "cupti_dirs", "install", "torch_cuda_major"]

"""Which CUDA/CUPTI headers the build picks (cmake/cuda_headers.cmake), on fake header trees.

A machine whose CUDA came from pip has no toolkit folder: the CUDA wheels' include folders in
site-packages count (cu12: nvidia/cuda_cupti, nvidia/cuda_runtime, nvidia/cuda_nvcc; cu13:
nvidia/cu13), and a set is used only when it holds cupti.h, cuda.h and crt/host_defines.h.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULE = REPO / "cmake" / "cuda_headers.cmake"

pytestmark = [
    pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not on PATH"),
    pytest.mark.skipif(not MODULE.exists(), reason="not run from a source checkout"),
]


def headers(folder: Path, *names: str, api: int = 18, cuda: int = 12000) -> Path:
    """Empty stand-ins for the headers the discovery looks at (it reads two version lines only)."""
    for name in names:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    if "cupti.h" in names:
        (folder / "cupti_version.h").write_text(f"#define CUPTI_API_VERSION {api}\n")
    if "cuda.h" in names:
        (folder / "cuda.h").write_text(f"#define CUDA_VERSION {cuda}\n")
    return folder


def cu12_wheels(site: Path, *, nvcc: bool = True) -> Path:
    nv = site / "nvidia"
    headers(nv / "cuda_cupti" / "include", "cupti.h")
    headers(nv / "cuda_runtime" / "include", "cuda.h")
    if nvcc:
        headers(nv / "cuda_nvcc" / "include", "crt/host_defines.h")
    return site


def cu13_wheels(site: Path) -> Path:
    headers(site / "nvidia" / "cu13" / "include", "cupti.h", "cuda.h", "crt/host_defines.h", api=130001, cuda=13000)
    return site


def discover(tmp_path: Path, sites: list[Path], toolkits: list[Path] = ()) -> tuple[list[str], str]:
    script = tmp_path / "discover.cmake"
    script.write_text(
        f'include("{MODULE.as_posix()}")\n'
        "warmprof_cuda_headers(dirs summary)\n"
        'message("DIRS=${dirs}")\n'
        'message("SUMMARY=${summary}")\n'
    )
    cmd = ["cmake", f"-DWARMPROF_SITE_DIRS={';'.join(map(str, sites))}",
           f"-DWARMPROF_CUDA_TOOLKIT_ROOTS={';'.join(map(str, toolkits))}", "-P", str(script)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stderr
    lines = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    dirs = [d for d in lines["DIRS"].split(";") if d]
    return dirs, lines["SUMMARY"]


def test_cu12_wheels_give_cupti_runtime_and_nvcc_include_folders(tmp_path):
    site = cu12_wheels(tmp_path / "site")
    dirs, summary = discover(tmp_path, [site])
    nv = site / "nvidia"
    assert dirs == [str(nv / "cuda_cupti/include"), str(nv / "cuda_runtime/include"), str(nv / "cuda_nvcc/include")]
    assert summary.startswith(f"cu12 wheels in {site}")
    assert "CUPTI_API_VERSION 18" in summary and "CUDA_VERSION 12000" in summary


def test_cu13_wheels_hold_everything_in_one_folder_and_come_first(tmp_path):
    site = cu13_wheels(cu12_wheels(tmp_path / "site"))
    dirs, summary = discover(tmp_path, [site])
    assert dirs == [str(site / "nvidia/cu13/include")]
    assert summary.startswith("cu13 wheels") and "CUPTI_API_VERSION 130001" in summary


def test_runtime_wheels_without_crt_are_refused_with_what_is_missing(tmp_path):
    site = cu12_wheels(tmp_path / "site", nvcc=False)
    dirs, summary = discover(tmp_path, [site])
    assert dirs == []
    assert "lacks crt/host_defines.h" in summary and "nvidia-cuda-nvcc-cu12" in summary


def test_a_toolkit_wins_over_the_wheels(tmp_path):
    toolkit = tmp_path / "cuda"
    headers(toolkit / "include", "cuda.h", "crt/host_defines.h", cuda=12040)
    headers(toolkit / "extras/CUPTI/include", "cupti.h", api=22)
    site = cu12_wheels(tmp_path / "site")
    dirs, summary = discover(tmp_path, [site], toolkits=[toolkit])
    assert dirs == [str(toolkit / "extras/CUPTI/include"), str(toolkit / "include")]
    assert summary.startswith(f"toolkit {toolkit}")


def test_an_incomplete_toolkit_falls_through_to_the_wheels(tmp_path):
    toolkit = tmp_path / "cuda"
    headers(toolkit / "include", "cuda.h")  # no CUPTI: a runtime-only install
    site = cu12_wheels(tmp_path / "site")
    dirs, summary = discover(tmp_path, [site], toolkits=[toolkit])
    assert dirs[0] == str(site / "nvidia/cuda_cupti/include")


def test_site_dirs_come_from_the_build_python_even_inside_pips_isolation(tmp_path):
    # pip's isolated build hides the target environment's site-packages behind PYTHONPATH; the
    # discovery runs the interpreter with -I, which ignores it.
    script = tmp_path / "sites.cmake"
    script.write_text(
        f'include("{MODULE.as_posix()}")\n'
        f'warmprof_site_dirs("{Path(sys.executable).as_posix()}" sites)\n'
        'message("SITES=${sites}")\n'
    )
    hidden = tmp_path / "isolation"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text("import sys\nsys.path[:] = [p for p in sys.path if 'site-packages' not in p]\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(hidden), "PYTHONNOUSERSITE": "1"}
    out = subprocess.run(["cmake", "-P", str(script)], capture_output=True, text=True, timeout=60, check=True, env=env).stderr
    sites = out.split("SITES=", 1)[1].strip().split(";")
    assert sysconfig.get_paths()["purelib"] in sites

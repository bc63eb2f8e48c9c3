"""The CUDA wheels' libcupti folders Python hands the native loader (warmprof.system.cuda_paths)."""

from __future__ import annotations

from pathlib import Path

import pytest

from warmprof.system import cuda_paths

CU12 = "nvidia/cuda_cupti/lib"
CU13 = "nvidia/cu13/lib"


def wheel(site: Path, sub: str, file_name: str) -> str:
    folder = site / sub
    folder.mkdir(parents=True, exist_ok=True)
    (folder / file_name).write_bytes(b"")
    return str(folder)


@pytest.mark.parametrize("requirements,major", [
    (["nvidia-cuda-cupti-cu12==12.8.90; platform_system == 'Linux'"], 12),
    (["nvidia_cuda_cupti_cu12==12.1.105; platform_system == \"Linux\" and platform_machine == \"x86_64\""], 12),
    (["nvidia-cuda-cupti==13.0.85; platform_system == 'Linux'"], 13),
    (["cuda-toolkit[cublas,cudart,cupti]==13.0.2; platform_system == 'Linux'"], 13),
    (["numpy", "filelock"], None),
    ([], None),
    (None, None),
])
def test_torch_cuda_major_reads_the_cupti_requirement(requirements, major):
    assert cuda_paths.torch_cuda_major(requirements) == major


def test_both_layouts_are_found_newest_first_without_torch(tmp_path):
    cu12 = wheel(tmp_path / "a", CU12, "libcupti.so.12")
    cu13 = wheel(tmp_path / "b", CU13, "libcupti.so.13")
    assert cuda_paths.cupti_dirs([str(tmp_path / "a"), str(tmp_path / "b")], requirements=[]) == [cu13, cu12]


def test_torchs_cuda_release_comes_first(tmp_path):
    # torch loads its own libcupti on import; loading the other one first would put two in the process.
    cu12 = wheel(tmp_path, CU12, "libcupti.so.12")
    cu13 = wheel(tmp_path, CU13, "libcupti.so.13")
    torch_cu12 = ["nvidia-cuda-cupti-cu12==12.8.90; platform_system == 'Linux'"]
    assert cuda_paths.cupti_dirs([str(tmp_path)], requirements=torch_cu12) == [cu12, cu13]


def test_folders_without_a_libcupti_and_repeats_are_left_out(tmp_path):
    wheel(tmp_path / "empty", CU12, "libnvperf_host.so")
    cu13 = wheel(tmp_path / "site", CU13, "libcupti.so.13")
    entries = [str(tmp_path / "empty"), str(tmp_path / "site"), str(tmp_path / "site"), str(tmp_path / "missing")]
    assert cuda_paths.cupti_dirs(entries, requirements=[]) == [cu13]


def test_install_hands_the_folders_to_the_native_loader_once(monkeypatch):
    given = []
    monkeypatch.setattr(cuda_paths, "_installed", None)
    monkeypatch.setattr(cuda_paths, "cupti_dirs", lambda: ["/x/nvidia/cu13/lib"])
    monkeypatch.setattr(cuda_paths._native, "cupti_set_search_path", given.append)
    assert cuda_paths.install() == ["/x/nvidia/cu13/lib"]
    assert cuda_paths.install() == ["/x/nvidia/cu13/lib"]
    assert given == [["/x/nvidia/cu13/lib"]]

"""The platform fingerprint: fixture trees copying real files' formats give the right facts; bad files are absent."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import warmprof.system.platform as platform_mod
import warmprof.system.platform.files as platform_files
from warmprof.system.platform import describe_device, fingerprint, run_tool

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "platforms"


class Tools:
    """An injected runner: answers for a tool by its name, records every call."""

    def __init__(self, **answers: str) -> None:
        self.answers, self.calls = answers, []

    def __call__(self, argv: list, timeout_s: float) -> str | None:
        self.calls.append([os.path.basename(str(argv[0]))] + [str(a) for a in argv[1:]])
        assert 0 < timeout_s <= 5, "tools run with a short timeout"
        return self.answers.get(os.path.basename(str(argv[0])))


def files_only(tree: str, **answers: str) -> dict:
    return fingerprint(FIXTURES / tree, run=Tools(**answers), runtimes=False)


def test_jetson_agx_orin():
    fp = files_only("jetson_agx_orin")
    assert fp == {
        "os": "Ubuntu 22.04.4 LTS", "kernel": "5.15.136-tegra", "cpu": "ARM Cortex-A78AE", "cpu_count": 12,
        "memory_gb": 61.4, "jetson": "NVIDIA Jetson AGX Orin Developer Kit", "l4t": "R36.3.0", "soc": "tegra234",
        "power_mode": "MODE_30W", "power_mode_id": 2, "gpu": "Orin integrated GPU (Ampere)",
        "gpu_freq_mhz": 306.0, "gpu_freq_min_mhz": 306.0, "gpu_freq_max_mhz": 1300.5, "gpu_governor": "nvhost_podgov",
        "unified_memory": True, "gpu_memory_gb": 61.4,
    }
    assert describe_device(fp, "cuda") == "Jetson AGX Orin (MODE_30W)"
    assert describe_device(fp, "cpu") == "Jetson AGX Orin (MODE_30W) CPU (ARM Cortex-A78AE, 12 cores)"


def test_orin_power_mode_comes_from_nvpmodel_when_the_tool_answers():
    tools = Tools(nvpmodel="NV Fan Mode:quiet\nNV Power Mode: MAXN\n0\n")
    fp = fingerprint(FIXTURES / "jetson_agx_orin", run=tools, runtimes=False)
    assert (fp["power_mode"], fp["power_mode_id"]) == ("MAXN", 0)
    assert ["nvpmodel", "-q"] in tools.calls


def test_jetson_nano_without_the_nvpmodel_tool():
    tools = Tools(nvpmodel="NV Power Mode: MAXN\n0\n")
    fp = fingerprint(FIXTURES / "jetson_nano", run=tools, runtimes=False)
    assert fp == {
        "os": "Ubuntu 18.04.6 LTS", "kernel": "4.9.253-tegra", "cpu": "ARM Cortex-A57", "cpu_count": 4, "memory_gb": 3.9,
        "jetson": "NVIDIA Jetson Nano Developer Kit", "l4t": "R32.7.1", "soc": "tegra210", "power_mode": "5W",
        "power_mode_id": 1, "gpu": "Tegra X1 integrated GPU (Maxwell)", "gpu_freq_mhz": 76.8, "gpu_freq_min_mhz": 76.8,
        "gpu_freq_max_mhz": 921.6, "gpu_governor": "nvhost_podgov", "unified_memory": True, "gpu_memory_gb": 3.9,
    }
    assert tools.calls == []  # no nvpmodel in this tree: the tool is not run, the status file answers
    assert describe_device(fp, "cuda") == "Jetson Nano (5W)"


def test_desktop_with_an_nvidia_gpu():
    fp = files_only("desktop_nvidia")
    assert fp == {
        "os": "Ubuntu 22.04.4 LTS", "kernel": "6.5.0-26-generic", "cpu": "AMD Ryzen 9 5950X 16-Core Processor",
        "cpu_count": 32, "memory_gb": 62.7, "cuda_driver": "550.54.14", "gpu": "NVIDIA GeForce RTX 4090", "gpu_count": 1,
    }
    assert describe_device(fp, "cuda:0") == "NVIDIA GeForce RTX 4090"
    assert describe_device(fp, "cpu") == "AMD Ryzen 9 5950X 16-Core Processor, 32 cores"


def test_desktop_gpu_memory_from_nvidia_smi_when_cuda_is_cold():
    fp = files_only("desktop_nvidia", **{"nvidia-smi": "NVIDIA GeForce RTX 4090, 24564\n"})
    assert fp["gpu_memory_gb"] == 24.0 and fp["gpu"] == "NVIDIA GeForce RTX 4090"


def test_plain_cpu_box():
    tools = Tools()
    fp = fingerprint(FIXTURES / "cpu_box", run=tools, runtimes=False)
    assert fp == {
        "os": "Debian GNU/Linux 12 (bookworm)", "kernel": "6.1.0-18-cloud-amd64",
        "cpu": "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "cpu_count": 8, "memory_gb": 31.3,
    }
    assert tools.calls == []
    assert describe_device(fp, "cpu") == "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz, 8 cores"


def test_the_four_platforms_differ_where_they_should():
    fps = {t: files_only(t) for t in ("jetson_agx_orin", "jetson_nano", "desktop_nvidia", "cpu_box")}
    assert {t for t, fp in fps.items() if "jetson" in fp} == {"jetson_agx_orin", "jetson_nano"}
    assert {t for t, fp in fps.items() if "gpu" in fp} == {"jetson_agx_orin", "jetson_nano", "desktop_nvidia"}
    assert len({fp["cpu"] for fp in fps.values()}) == 4


def test_a_tree_of_unreadable_files_does_not_fail():
    fp = files_only("unreadable", nvpmodel="garbled answer")
    # Directories where files belong, non-UTF-8 bytes, numbers that are not numbers: all absent.
    assert fp == {"jetson": "NVIDIA Jetson", "soc": "tegra234", "gpu": "Orin integrated GPU (Ampere)", "unified_memory": True}


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
def test_files_without_read_permission_are_absent(tmp_path):
    tree = shutil.copytree(FIXTURES / "cpu_box", tmp_path / "cpu_box")
    (tree / "proc" / "cpuinfo").chmod(0)
    (tree / "etc").chmod(0)
    try:
        fp = fingerprint(tree, run=Tools(), runtimes=False)
    finally:  # leave tmp_path removable
        (tree / "etc").chmod(0o755)
        (tree / "proc" / "cpuinfo").chmod(0o644)
    if os.geteuid() == 0:  # root reads through file modes: the permission case is the monkeypatched one below
        assert fp["cpu_count"] == 8
    else:
        assert "cpu" not in fp and "os" not in fp and fp["memory_gb"] == 31.3


def test_open_refusing_every_file_leaves_them_all_out(monkeypatch):
    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(platform_files, "open", refuse, raising=False)  # the reader's module: every file goes through it
    assert fingerprint(FIXTURES / "jetson_agx_orin", run=Tools(), runtimes=False) == {}
    assert fingerprint(FIXTURES / "desktop_nvidia", run=Tools(), runtimes=False) == {}


def test_a_missing_root_gives_an_empty_fingerprint(tmp_path):
    assert fingerprint(tmp_path / "nothing", run=Tools(), runtimes=False) == {}


def test_apple_chip_on_macos():
    tools = Tools(sysctl="Apple M2 Pro\n", sw_vers="14.4.1\n")
    fp = fingerprint(FIXTURES / "missing", run=tools, system="Darwin", runtimes=False)
    assert fp["apple_chip"] == "Apple M2 Pro" and fp["os"] == "macOS 14.4.1"
    assert ["sysctl", "-n", "machdep.cpu.brand_string"] in tools.calls
    assert describe_device(fp, "mps") == "Apple M2 Pro"
    assert describe_device(fp, "cpu") == "Apple M2 Pro"
    assert "apple_chip" not in fingerprint(FIXTURES / "missing", run=Tools(), system="Darwin", runtimes=False)


class RecordedTools:
    """Answers a tool call from a fixture tree's tools/ folder: one file per command line, holding
    what that command printed on the machine (absent file: the tool failed or is missing)."""

    def __init__(self, tree: str) -> None:
        self.folder, self.calls = FIXTURES / tree / "tools", []

    def __call__(self, argv: list, timeout_s: float) -> str | None:
        line = " ".join([os.path.basename(str(argv[0]))] + [str(a) for a in argv[1:]])
        self.calls.append(line)
        assert 0 < timeout_s <= 5, "tools run with a short timeout"
        path = self.folder / line
        return path.read_text() if path.is_file() else None


@pytest.mark.parametrize("tree, expected, title", [
    ("apple_m4_pro", {"os": "macOS 15.1", "os_build": "24B83", "apple_chip": "Apple M4 Pro", "memory_gb": 48.0,
                      "cpu_count": 14, "cpu_performance_cores": 10, "cpu_efficiency_cores": 4, "gpu_cores": 20,
                      "gpu": "Apple M4 Pro", "metal": "Metal 3", "unified_memory": True, "gpu_memory_gb": 48.0},
     "Apple M4 Pro (20-core GPU)"),
    # no ioreg answer: the GPU cores come from system_profiler's report
    ("apple_m1", {"os": "macOS 14.6.1", "os_build": "23G93", "apple_chip": "Apple M1", "memory_gb": 8.0,
                  "cpu_count": 8, "cpu_performance_cores": 4, "cpu_efficiency_cores": 4, "gpu_cores": 7,
                  "gpu": "Apple M1", "metal": "Metal 3", "unified_memory": True, "gpu_memory_gb": 8.0},
     "Apple M1 (7-core GPU)"),
])
def test_apple_silicon_fingerprints_from_recorded_tool_output(tree, expected, title):
    tools = RecordedTools(tree)
    fp = fingerprint(FIXTURES / tree, run=tools, system="Darwin", runtimes=False)
    assert fp == expected
    assert describe_device(fp, "mps") == title
    assert "ioreg -rc AGXAccelerator -d 1" in tools.calls and "system_profiler -json SPDisplaysDataType" in tools.calls


def test_apple_facts_survive_broken_tool_output():
    tools = Tools(sysctl="not a number\n", system_profiler="{not json", ioreg="garbage", sw_vers="")
    fp = fingerprint(FIXTURES / "missing", run=tools, system="Darwin", runtimes=False)
    # the brand string is the one text fact; the numbers that are not numbers are left out
    assert fp == {"os": "macOS", "apple_chip": "not a number"}


def test_live_fingerprint_has_the_process_facts():
    fp = fingerprint()
    assert fp["python"] == ".".join(map(str, sys.version_info[:3]))
    assert fp["cpu_count"] >= 1 and fp["os"] and fp["machine"]
    torch = sys.modules.get("torch")
    if torch is not None:
        assert fp["torch"] == torch.__version__ and fp["torch_threads"] == torch.get_num_threads()


def test_fingerprint_imports_neither_torch_nor_cupy_and_leaves_cuda_cold():
    code = ("import sys, warmprof.system.platform as p; fp = p.fingerprint(); "
            "print(sorted(m for m in ('torch', 'cupy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_run_tool_returns_none_on_failure_and_timeout():
    assert run_tool([sys.executable, "-c", "print('ok')"]) == "ok\n"
    assert run_tool([sys.executable, "-c", "import sys; sys.exit(3)"]) is None
    assert run_tool(["/nonexistent/warmprof-tool", "-q"]) is None
    assert run_tool([sys.executable, "-c", "import time; time.sleep(5)"], timeout_s=0.2) is None


def test_a_trace_on_cuda_n_names_that_gpu_not_the_first(monkeypatch):
    def runtime(gpu_index=None):
        index = gpu_index or 0
        return {"python": "3.11", "gpu": ["NVIDIA GeForce RTX 4090", "NVIDIA H200"][index], "gpu_memory_gb": [24.0, 139.8][index],
                **({"gpu_index": index} if index else {})}

    monkeypatch.setattr(platform_mod, "_runtime_facts", runtime)
    root = FIXTURES / "desktop_nvidia"
    second = fingerprint(root, run=Tools(), gpu_index=1)
    assert (second["gpu"], second["gpu_memory_gb"], second["gpu_index"]) == ("NVIDIA H200", 139.8, 1)
    first = fingerprint(root, run=Tools(), gpu_index=0)
    assert first["gpu"] == "NVIDIA GeForce RTX 4090" and "gpu_index" not in first


def test_the_cuda_index_read_from_a_device_string():
    from warmprof.system.platform import cuda_index

    assert [cuda_index(d) for d in ("cuda:1", "cuda", "cpu", "cpu:0", "mps:0", "cuda:x")] == [1, None, None, None, None, None]

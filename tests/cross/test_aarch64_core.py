"""The native core's aarch64 path (cntvct_el0 clock, recorder, host counters), cross-compiled and run
under qemu-user by tests/cross/run_aarch64.sh: it passes clean, and fails with each bug planted in
csrc/core. Skipped where the cross toolchain or qemu-aarch64 is missing, unless
WARMPROF_REQUIRE_AARCH64=1 (CI sets it once it has installed them): then that is a failure."""

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("run_aarch64.sh")
CROSS_CXX = os.environ.get("AARCH64_CXX", "aarch64-linux-gnu-g++")
QEMU = os.environ.get("QEMU_AARCH64") or shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
SKIP_STATUS = 77


def _missing() -> list[str]:
    missing = []
    if shutil.which(CROSS_CXX) is None:
        missing.append(f"{CROSS_CXX} (Debian: g++-aarch64-linux-gnu)")
    if QEMU is None or shutil.which(QEMU) is None:
        missing.append("qemu-aarch64 (Debian: qemu-user)")
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        missing.append("a native g++")
    return missing


def _require_tools() -> None:
    missing = _missing()
    if not missing:
        return
    reason = "aarch64 cross test needs " + ", ".join(missing)
    if os.environ.get("WARMPROF_REQUIRE_AARCH64") == "1":
        pytest.fail(reason + " (WARMPROF_REQUIRE_AARCH64=1)")
    pytest.skip(reason)


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    _require_tools()
    env = dict(os.environ, BUILD_DIR=str(tmp_path))
    p = subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    if p.returncode == SKIP_STATUS:  # the script found a tool missing that the checks above did not
        _require_tools()
        pytest.fail("run_aarch64.sh skipped although the tools were found:\n" + p.stderr)
    return p


def _section(out: str, arch: str, cross: bool) -> str:
    """The core test's own output for one build (from its 'info arch' line to its summary): the
    cross build's run under qemu comes after the script's '== aarch64 cross build' line."""
    mark = out.index("== aarch64 cross build")
    part = out[mark:] if cross else out[:mark]
    start = part.index(f"info arch {arch}")
    end = part.index(f"core_test {arch}:", start)
    return part[start : part.index("\n", end)]


def test_core_passes_natively_and_under_qemu_aarch64(tmp_path):
    p = _run(tmp_path)
    out = p.stdout
    assert p.returncode == 0, out[-6000:] + p.stderr[-3000:]
    arm = _section(out, "aarch64", cross=True)
    assert "ARM aarch64" in out or shutil.which("file") is None  # the binary qemu ran is an aarch64 one
    for check in (
        "clock.source_is_cntvct_el0",
        "clock.ticks_read_cntvct_el0",
        "clock.calibration_matches_cntfrq_el0",
        "clock.ticks_monotonic_two_threads",
        "recorder.drain_sorted_by_ticks",
        "recorder.drain_interleaves_threads",
        "recorder.overflow_counted_as_dropped",
        "host.first_touch_raises_minor_faults",
        "host.rss_grows_with_touched_memory",
    ):
        assert f"ok   {check}\n" in arm, f"{check} did not pass under qemu:\n{arm}"
    assert "FAIL" not in arm
    assert "info clock source=cntvct_el0" in arm
    assert ", 0 failed" in arm.splitlines()[-1]
    # The same test, built for this machine, passed too (both sections are in the one run).
    native = platform.machine()
    if native in {"x86_64", "aarch64"}:
        host = _section(out, native, cross=False)
        assert "FAIL" not in host and ", 0 failed" in host.splitlines()[-1]


# A planted bug in csrc/core (run_aarch64.sh --plant NAME) and the check that must catch it.
PLANTED = {
    "clock": "clock.ticks_monotonic",  # clock.h: a cntvct_el0 read in 16 steps back
    "calibration": "clock.calibration_matches_cntfrq_el0",  # clock.cpp: the slope 3x off
    "recorder": "recorder.drain_sorted_by_ticks",  # recorder.cpp: drain() leaves records unsorted
}


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_core_test_under_qemu_fails_with_a_planted_bug(tmp_path, bug):
    p = _run(tmp_path, "--plant", bug)
    out = p.stdout
    # 1 is "a check failed"; a build failure or a crash (2) would not show that the test caught it.
    assert p.returncode == 1, f"status {p.returncode}\n{out[-6000:]}{p.stderr[-3000:]}"
    arm = _section(out, "aarch64", cross=True)
    assert f"built with planted bug: {bug}" in arm
    assert f"FAIL {PLANTED[bug]}:" in arm, arm
    assert "failed" in arm.splitlines()[-1] and ", 0 failed" not in arm.splitlines()[-1]

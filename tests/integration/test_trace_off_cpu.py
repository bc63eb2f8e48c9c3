"""Off-CPU time end to end: `warmprof trace` in a fresh CLI process on a small model with a planted
first-call sleep (a wait) or a first read of a file dropped from the page cache (a disk read), each in
a module of its own (planted_off_cpu.py). Each is named as what it is, in the module it is in, at what
the plant's own clocks say that very call was blocked, and is never booked as a compile or the
allocator; the only contention there is the machine's own queueing for a CPU, measured apart. Structure
and ratios only, robust to a busy machine: the plants time themselves in the traced process, and the
ratio to the planted sleep is loose."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from warmprof import _native

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import page_cache  # noqa: E402

PLANTED = Path(__file__).with_name("planted_off_cpu.py")
SLEEP_S = 0.06

pytestmark = pytest.mark.skipif(_native.thread_times() is None,
                                reason="no per-thread schedstat or RUSAGE_THREAD here: off-CPU time is not read")


def _trace(tmp_path: Path, factory: str, blob: str = "", *extra: str) -> tuple[dict, dict]:
    """The report of a fresh CLI trace, and the ms each plant's own clocks say its first call was
    blocked (wall less CPU less run-queue delay)."""
    out, own = tmp_path / f"{factory}.json", tmp_path / f"{factory}.self.jsonl"
    env = {**os.environ, "PLANTED_SLEEP_S": str(SLEEP_S), "PLANTED_SELF_TIMES": str(own), "PLANTED_BLOB": blob}
    p = subprocess.run([sys.executable, "-m", "warmprof", "trace", f"{PLANTED}:{factory}", "--shape", "4,64",
                        "--threads", "1", "--quiet", "--json", str(out), *extra], capture_output=True, text=True, env=env,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    # the last line of each plant is the traced process's first pass (a fresh process runs it first)
    selfs = {}
    for line in own.read_text().splitlines():
        o = json.loads(line)
        selfs[o["what"]] = (o["ns"] - o["cpu_ns"] - o["delay_ns"]) / 1e6
    return json.loads(out.read_text()), selfs


def _module(report: dict, name: str) -> dict[str, float]:
    return next((m["causes"] for m in report["modules"] if m["module"] == name), {})


def test_a_first_call_sleep_is_a_wait_in_the_module_that_slept(tmp_path):
    report, own = _trace(tmp_path, "waits")
    # the largest cause but for reads of torch's own code from disk, which a page cache a busy machine
    # keeps cold (proactive reclaim) may add to any first pass: never in the sleeper
    top = max((c for c in report["causes"] if c["cause"] != "disk_read"), key=lambda c: c["ms"])
    assert (top["cause"], top["source"], top["module"], top["evidence"]) == ("wait", "off_cpu", "Planted.sleeper", "measured")
    sleeper = _module(report, "Planted.sleeper")
    # what the sleeper's own clocks gave that very call
    assert sleeper["wait"] == pytest.approx(own["sleep"], rel=0.1)
    assert 0.9 <= sleeper["wait"] / (SLEEP_S * 1e3) <= 1.6
    # nothing else of the sleep's: its wait for a CPU on waking, where the machine is busy, is the
    # machine's (cpu_contention, measured), and a few ms at most on two busy cores
    for other in ("jit_compile", "allocator_growth", "disk_read"):
        assert sleeper.get(other, 0.0) < 0.05 * sleeper["wait"], (other, sleeper)
    assert sleeper.get("cpu_contention", 0.0) < 0.5 * sleeper["wait"]
    assert not [c for c in report["seen_rerun_causes"] if c["cause"] == "wait" and c["ms"] > 0.1 * top["ms"]]


def test_a_first_read_of_a_cold_file_is_a_disk_read_in_the_module_that_read(tmp_path):
    blob = str(tmp_path / "blob64.bin")
    page_cache.make_file(blob, 64 << 20)
    why = page_cache.drop(blob)
    if why:
        pytest.skip(why)
    # No control process: it runs the same first call on the same file, and the page cache is shared,
    # so whichever process read first paid the disk (on 2 CPUs at one thread the control's clean pass
    # runs beside the trace's build, and read it first in 2 of 9 runs: the trace's reader then read
    # pages already cached). This test is about the traced pass: its reader must be the one reading.
    report, own = _trace(tmp_path, "reads", blob, "--no-control")
    reader = _module(report, "Planted.reader")
    # the largest cause of the reader's but for the machine's own load (a copy of 64 MiB queued for a CPU)
    assert reader["disk_read"] == max(v for k, v in reader.items() if k != "cpu_contention")
    assert reader["disk_read"] == pytest.approx(own["read"], rel=0.2)
    entry = max((c for c in report["causes"] if c["cause"] == "disk_read"), key=lambda c: c["ms"])
    assert entry["module"] == "Planted.reader" and entry["evidence"] == "measured"
    assert "pages read from disk" in entry["detail"] and "MiB read from storage" in entry["detail"]
    assert entry["count"] >= 0.9 * (64 << 20) // _native.page_size()
    for other in ("jit_compile", "allocator_growth", "wait"):
        assert reader.get(other, 0.0) < 0.05 * reader["disk_read"], (other, reader)
    os.unlink(blob)

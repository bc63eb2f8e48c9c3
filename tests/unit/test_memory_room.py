"""Issue 40: a default trace holds the model twice (the control's copy beside the traced one). The room
for the second copy: what the control's copy holds (control_serve.memory_held), the memory available
(system/memory.py: MemAvailable, or a cgroup's lower limit), and the check that stops the trace naming
--no-control where it does not fit (controls.check_room). The command line's end of it is in
tests/integration/test_child_processes.py."""

from __future__ import annotations

import pytest
import torch

from warmprof.errors import WarmprofError
from warmprof.system import memory
from warmprof.traces.control_serve import memory_held
from warmprof.traces.controls import check_room

GIB = 1 << 30


def _files(tmp_path, cgroup_line, files):
    tmp_path.mkdir(parents=True, exist_ok=True)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal:       {32 * GIB // 1024} kB\nMemAvailable:   {8 * GIB // 1024} kB\n")
    self_cgroup = tmp_path / "cgroup"
    self_cgroup.write_text(cgroup_line + "\n")
    root = tmp_path / "fs"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return dict(meminfo=str(meminfo), cgroup_root=str(root), self_cgroup=str(self_cgroup))


def test_meminfo_alone(tmp_path, monkeypatch):
    monkeypatch.delenv(memory.FAKE_ENV, raising=False)
    got = memory.available_bytes(**_files(tmp_path, "0::/", {}))
    assert got == (8 * GIB, "MemAvailable in /proc/meminfo")


def test_a_cgroup_v2_limit_lower_than_the_machine(tmp_path, monkeypatch):
    monkeypatch.delenv(memory.FAKE_ENV, raising=False)
    # a pod: 4 GiB limit, 3.5 GiB charged: 1.5 GiB of file pages (a checkpoint just read: the page cache,
    # active or not, reclaimed before the kernel says no), 0.5 GiB of it shared memory (not reclaimed): 4 less
    # the 2.5 GiB that stays, 1.5 GiB of room (the inactive pages alone would have left 1 GiB)
    got = memory.available_bytes(**_files(tmp_path, "0::/kubepods/pod1", {
        "kubepods/pod1/memory.max": str(4 * GIB), "kubepods/pod1/memory.current": str(3 * GIB + GIB // 2),
        "kubepods/pod1/memory.stat": f"anon {2 * GIB}\nfile {GIB + GIB // 2}\nactive_file {GIB}\n"
                                     f"inactive_file {GIB // 2}\nshmem {GIB // 2}\n",
        "kubepods/memory.max": "max", "kubepods/memory.current": str(5 * GIB)}))
    assert got is not None and got[0] == GIB + GIB // 2 and "kubepods/pod1" in got[1]


def test_a_cgroup_v1_limit_in_a_container_and_no_limit(tmp_path, monkeypatch):
    monkeypatch.delenv(memory.FAKE_ENV, raising=False)
    # in a container the mount is the process's own cgroup (its path under the mount is not there)
    got = memory.available_bytes(**_files(tmp_path, "4:memory:/docker/abc", {
        "memory/memory.limit_in_bytes": str(6 * GIB), "memory/memory.usage_in_bytes": str(2 * GIB),
        "memory/memory.stat": f"total_active_file {GIB // 2}\ntotal_inactive_file {GIB // 2}\n"}))
    assert got is not None and got[0] == 5 * GIB  # 6 less the 1 GiB charged beyond its page cache
    unlimited = memory.available_bytes(**_files(tmp_path / "u", "4:memory:/", {
        "memory/memory.limit_in_bytes": "9223372036854771712", "memory/memory.usage_in_bytes": str(GIB)}))
    assert unlimited == (8 * GIB, "MemAvailable in /proc/meminfo")


def test_the_fake_for_tests(monkeypatch):
    monkeypatch.setenv(memory.FAKE_ENV, "1234")
    assert memory.available_bytes() == (1234, f"{memory.FAKE_ENV}=1234")


def test_what_the_controls_copy_holds_counts_a_shared_tensor_once():
    lin = torch.nn.Linear(256, 256)
    model = torch.nn.Sequential(lin, lin, torch.nn.BatchNorm1d(256))
    got = memory_held(torch, model, torch.device("cpu"))
    params = (256 * 256 + 256) * 4 + 2 * 256 * 4  # the linear once, the norm's weight and bias
    buffers = 2 * 256 * 4 + 8  # running mean and var, num_batches_tracked
    assert got["model_bytes"] == params + buffers
    assert got["process_bytes"] and got["process_bytes"] > got["model_bytes"]
    assert "device_free_bytes" not in got  # the host


def test_two_copies_that_fit_go_on():
    check_room({"model_bytes": 4 * GIB, "process_bytes": 5 * GIB}, available=(6 * GIB, "MemAvailable"))
    check_room({"model_bytes": 0, "process_bytes": None}, available=None)  # nothing to go by: no check


def test_two_copies_that_do_not_fit_name_no_control():
    with pytest.raises(WarmprofError) as e:
        check_room({"model_bytes": 4 * GIB, "process_bytes": int(4.3 * GIB)},
                   available=(int(3.9 * GIB), "MemAvailable in /proc/meminfo"))
    message = str(e.value)
    assert message.startswith("not enough memory for a second copy of the model: a trace holds it twice at once")
    assert "4.00 GiB" in message and "4.30 GiB in all" in message and "3.90 GiB is available" in message
    assert "--no-control" in message and e.value.exit_code == 2
    with pytest.raises(WarmprofError, match=r"not enough memory on cuda:0 .*1\.00 GiB is free; trace with --no-control"):
        check_room({"model_bytes": 2 * GIB, "process_bytes": GIB, "device": "cuda:0", "device_model_bytes": 2 * GIB,
                    "device_free_bytes": GIB}, available=(64 * GIB, "MemAvailable"))

"""A trace under an address-space limit (ulimit -v), of a model that starts fresh threads on each call:
the buffer of a thread that exited keeps only the pages holding its records, and none once drained, and the calibration's
file-page mapping that finds no room is a trial not made, not a traceback (issue 40)."""

from __future__ import annotations

import mmap
import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent("""
    import resource, threading
    import torch
    import warmprof

    class Fresh(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l = torch.nn.Linear(64, 64)

        def forward(self, x):
            out = [None] * 100
            def one(i):
                out[i] = self.l(x)
            ts = [threading.Thread(target=one, args=(i,)) for i in range(100)]
            for t in ts: t.start()
            for t in ts: t.join()
            return out[0]

    def vm_mib(key="VmSize"):
        return int(open("/proc/self/status").read().split(key + ":")[1].split()[0]) // 1024

    torch.set_num_threads(1)
    m = Fresh()
    m(torch.randn(1, 64))  # the model's own threads' stacks, before warmprof
    peak0 = vm_mib("VmPeak")
    limit = (vm_mib() + 2048) * 2**20  # 2 GiB more than torch and the model take
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sizes = []
    for _ in range(3):
        r = warmprof.trace(m, (1, 64), steady=3, op_view=False)
        sizes.append(vm_mib())
    print("peak_growth_mib", vm_mib("VmPeak") - peak0)
    print("vm_mib", sizes)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc: Linux")
def test_traces_of_a_model_that_starts_fresh_threads_hold_under_an_address_space_limit(tmp_path):
    script = tmp_path / "fresh_threads.py"
    script.write_text(_SCRIPT)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=1800, cwd=tmp_path,
                       env={**__import__("os").environ, "MALLOC_ARENA_MAX": "2"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    sizes = eval(p.stdout.split("vm_mib")[1])
    # Within one recording too: each exited thread's buffer keeps only the pages holding its records (a
    # whole 6 MiB buffer per thread per pass grew the peak by 2.4 GiB here, and under the limit a pass
    # with more instrumented passes, as a faster machine runs, could not start its threads)
    peak_growth = int(p.stdout.split("peak_growth_mib")[1].split()[0])
    assert peak_growth < 1024, peak_growth
    # the third trace's process is no bigger than the first's by more than a few buffers' worth
    assert sizes[2] - sizes[0] < 200, sizes


def test_the_file_page_calibration_with_no_room_to_map_is_a_trial_not_made(monkeypatch):
    from warmprof.traces import calibrate

    def no_room(*a, **k):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(mmap, "mmap", no_room)
    got = calibrate.file_page_cost()
    assert got["trials"] == 0 and not got["reliable"]

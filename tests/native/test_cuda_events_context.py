"""CUDA events against a fake driver: each event is created and recorded in its stream's own
context, and a pass records its end event before the host sync.

tests/native/fake_libcuda.c is compiled here into a libcuda.so.1 that logs every call and keeps
the driver's rule that an event and the stream it is recorded on share a context. Each case runs
in a child process whose loader finds the fake first, so this process never maps it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import warmprof

FAKE_SOURCE = Path(__file__).with_name("fake_libcuda.c")

pytestmark = pytest.mark.skipif(not warmprof.backends()["cuda_events"]["compiled"],
                                reason="the CUDA events backend is a stub in this build")

# Child prologue: the fake (the same handle the native module dlopens) and warmprof on top of it.
PROLOGUE = """
import ctypes, json, os
lib = ctypes.CDLL("libcuda.so.1")
lib.fake_stream.restype = ctypes.c_void_p
lib.fake_launch.argtypes = [ctypes.c_void_p]
import warmprof
from warmprof import _native
entry = warmprof.backends()["cuda_events"]
assert entry["available"], "the fake libcuda lacks what the driver loader needs: " + entry["reason"]
s0, s1 = lib.fake_stream(0), lib.fake_stream(1)

def current_device():
    c = ctypes.c_void_p()
    lib.cuCtxGetCurrent(ctypes.byref(c))
    return ctypes.c_int.from_address(c.value).value

def note(text):
    with open(os.environ["FAKE_CUDA_LOG"], "a") as f:
        f.write(text + "\\n")
"""


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the fake libcuda")
    folder = tmp_path_factory.mktemp("fake_cuda")
    subprocess.run([cc, "-shared", "-fPIC", "-O0", "-o", str(folder / "libcuda.so.1"), str(FAKE_SOURCE)],
                   check=True, capture_output=True, text=True)
    return folder


def run(fake_driver: Path, body: str, tmp_path: Path) -> tuple[dict, list[str]]:
    """The child's printed JSON and the fake driver's log, one call a line."""
    log = tmp_path / "calls.log"
    env = dict(os.environ, FAKE_CUDA_LOG=str(log),
               LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(fake_driver), os.environ.get("LD_LIBRARY_PATH")])))
    code = PROLOGUE + textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = log.read_text().splitlines() if log.exists() else []
    return json.loads(p.stdout.strip().splitlines()[-1]), lines


def calls(lines: list[str], name: str) -> list[dict[str, str]]:
    """The log lines of one call, as their key=value fields."""
    out = []
    for line in lines:
        head, *fields = line.split()
        if head == name:
            out.append(dict(f.split("=", 1) for f in fields))
    return out


def test_a_cuda1_stream_gets_cuda1_events_while_cuda0_is_current(fake_driver, tmp_path):
    got, lines = run(fake_driver, """
        a = _native.cuda_event_record(s1)
        b = _native.cuda_event_record(s1)
        print(json.dumps({"ms": _native.cuda_event_elapsed_ms(a, b), "current_after": current_device()}))
    """, tmp_path)
    assert {c["ctx"] for c in calls(lines, "cuEventCreate")} == {"1"}
    records = calls(lines, "cuEventRecord")
    assert len(records) == 2 and all(r["event_ctx"] == r["stream_ctx"] == "1" and r["rc"] == "0" for r in records)
    assert {c["current"] for c in calls(lines, "cuEventElapsedTime")} == {"1"}
    assert got == {"ms": 1.5, "current_after": 0}  # the thread's own context is current again
    assert len(calls(lines, "push")) == len(calls(lines, "pop"))


def test_the_default_stream_is_taken_as_the_given_devices(fake_driver, tmp_path):
    """torch's default stream is handle 0 on every device: the device says which context it is."""
    got, lines = run(fake_driver, """
        _native.cuda_event_record(0, device=1)
        _native.cuda_events_release()
        _native.cuda_event_record(0, device=1)
        on_current = _native.cuda_event_record(0)
        try:
            _native.cuda_event_record(0, device=7)
            bad = ""
        except RuntimeError as e:
            bad = str(e)
        print(json.dumps({"bad": bad, "pool": _native.cuda_events_pool_size()}))
    """, tmp_path)
    records = calls(lines, "cuEventRecord")
    assert [(r["event_ctx"], r["current"], r["rc"]) for r in records] == [("1", "1", "0")] * 2 + [("0", "0", "0")]
    assert "CUDA device 7" in got["bad"]
    assert got["pool"] == 2
    # Retained once: CUPTI counts cuDevicePrimaryCtxRetain as runtime_init, so no pass may call it.
    assert calls(lines, "cuDevicePrimaryCtxRetain") == [{"device": "1"}]


def test_events_are_pooled_per_context(fake_driver, tmp_path):
    got, lines = run(fake_driver, """
        a, b = _native.cuda_event_record(s0), _native.cuda_event_record(s1)
        try:
            _native.cuda_event_elapsed_ms(a, b)
            mixed = ""
        except RuntimeError as e:
            mixed = str(e)
        _native.cuda_events_release()
        again = [_native.cuda_event_record(s1), _native.cuda_event_record(s0)]
        print(json.dumps({"mixed": mixed, "first": [a, b], "again": again, "pool": _native.cuda_events_pool_size()}))
    """, tmp_path)
    assert got["pool"] == 2 and len(calls(lines, "cuEventCreate")) == 2
    assert got["again"] == got["first"][::-1]  # each context's own event, reused
    assert "different contexts" in got["mixed"]


@pytest.mark.parametrize("device", [0, 1])
def test_a_pass_records_its_end_event_before_the_host_sync(fake_driver, tmp_path, device):
    """The end event must be queued behind the pass's work before the host waits: recorded after
    the sync it would time an idle stream, i.e. the host's time, not the GPU's."""
    got, lines = run(fake_driver, f"""
        from warmprof.instruments.cuda_events import CudaEvents
        from warmprof.timeline import Recording
        from warmprof.traces.passes import run_pass
        stream = lib.fake_stream({device})
        inst = CudaEvents(device={device}, stream=lambda: stream)
        with Recording():
            with inst:
                note("pass")
                run_pass(lambda: lib.fake_launch(stream), (), {{}}, "first", [inst], lambda: lib.cuCtxSynchronize())
        print(json.dumps(inst.summary()))
    """, tmp_path)
    assert got["active"] and got["gpu_ms"] == {"first": 1.5}, got
    in_pass = [ln.split()[0] for ln in lines[lines.index("pass") + 1:] if ln.split()[0] not in ("push", "pop")]
    assert in_pass[:5] == ["cuEventRecord", "launch", "cuEventRecord", "cuCtxSynchronize", "cuEventSynchronize"], lines
    records = calls(lines, "cuEventRecord")
    assert all(r["event_ctx"] == r["stream_ctx"] == str(device) and r["rc"] == "0" for r in records)

"""The GPU tests' gate (tests/gpu_gate.py): on a GPU machine a backend that cannot work fails the
test with its reason; only a platform refusal (named) or a machine without a GPU skips."""

from __future__ import annotations

import types

import gpu_gate
import pytest

HELD = "another CUPTI subscriber holds the process (torch.profiler or Nsight)"
NO_LIB = "libcupti not found (add the CUDA toolkit's lib64 or extras/CUPTI/lib64 to LD_LIBRARY_PATH): dlopen failed"


def test_no_gpu_skips_plainly_whatever_the_backend_says():
    gate = gpu_gate.decide("CUPTI", "torch.cuda.is_available() is False", NO_LIB)
    assert gate == ("skip", "no CUDA GPU: torch.cuda.is_available() is False")


def test_a_working_backend_runs():
    assert gpu_gate.decide("CUPTI", "", "") == ("run", "")


@pytest.mark.parametrize("reason", [NO_LIB, HELD, "built without CUDA headers (set CUDA_HOME and rebuild)",
                                    "cuptiEnableDomain(1) failed: CUPTI_ERROR_UNKNOWN",
                                    "cuptiSubscribe failed: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"])
def test_on_a_gpu_machine_any_other_reason_fails_with_it(reason):
    gate = gpu_gate.decide("CUPTI", "", reason)
    assert gate.action == "fail"
    assert reason in gate.message and "GPU is present" in gate.message


@pytest.mark.parametrize("reason,named", [
    ("cuptiSubscribe failed: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES", "privileges"),
    ("cuptiEnableDomain(1) failed: CUPTI error 35", "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"),
    ("cuptiSubscribe failed: CUPTI_ERROR_NOT_SUPPORTED", "container or sandbox"),
    ("ERR_NVGPUCTRPERM: set NVreg_RestrictProfilingToAdminUsers=0", "admin users"),
    ("cuptiSubscribe failed: CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED", "MIG"),
])
def test_a_platform_refusal_skips_and_says_what_refused(reason, named):
    gate = gpu_gate.decide("CUPTI", "", reason)
    assert gate.action == "skip"
    assert gate.message.startswith("CUPTI refused by the platform: ") and named in gate.message and reason in gate.message


LOADED = "loaded, not yet subscribed (libcupti /x/libcupti.so.13): CUPTI is known to work ..."


class FakeNative(types.SimpleNamespace):
    """`available`: True (subscribed before), "loaded" (a libcupti loaded, no subscribe yet: the
    state of a fresh process on a GPU machine) or False (nothing loaded)."""

    def __init__(self, available, start: str) -> None:
        super().__init__(available=available, start=start, calls=[])

    def backends(self):
        if self.available == "loaded":
            return {"cupti": {"compiled": True, "available": False, "reason": LOADED, "path": "/x/libcupti.so.13"}}
        return {"cupti": {"compiled": True, "available": self.available, "reason": "" if self.available else NO_LIB,
                          "path": "/x/libcupti.so.13" if self.available else ""}}

    def cupti_start(self) -> str:
        self.calls.append("start")
        return self.start

    def cupti_stop(self) -> None:
        self.calls.append("stop")


@pytest.mark.parametrize("available,start,reason,calls", [
    (False, "", NO_LIB, []),
    (True, "", "", ["start", "stop"]),
    (True, "cuptiSubscribe failed: CUPTI_ERROR_NOT_SUPPORTED", "cuptiSubscribe failed: CUPTI_ERROR_NOT_SUPPORTED", ["start"]),
    # A fresh process: loaded but never subscribed is not "cannot work": the gate tries a subscribe.
    ("loaded", "", "", ["start", "stop"]),
    ("loaded", "cuptiSubscribe failed: CUPTI error 35", "cuptiSubscribe failed: CUPTI error 35", ["start"]),
])
def test_cupti_reason_asks_the_subscriber_not_only_the_loader(available, start, reason, calls):
    native = FakeNative(available, start)
    assert gpu_gate.cupti_reason(native) == reason
    assert native.calls == calls


def test_gpu_absent_reads_torch():
    assert gpu_gate.gpu_absent(None) == "torch is not installed"
    cuda = types.SimpleNamespace(is_available=lambda: True)
    assert gpu_gate.gpu_absent(types.SimpleNamespace(cuda=cuda, __version__="2.11")) == ""
    cuda.is_available = lambda: False
    assert "is_available() is False" in gpu_gate.gpu_absent(types.SimpleNamespace(cuda=cuda, __version__="2.11"))

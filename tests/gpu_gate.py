"""Whether a GPU test runs, skips or fails: on a machine with a CUDA GPU a backend that cannot work
is a failure with its reason, unless the platform itself refuses profiling (a sandbox, a driver
restricted to admins, a virtualised or MIG device), which the skip names. Only a machine without a
GPU skips plainly. Pure: the native module and torch are passed in (tests/unit/test_gpu_gate.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

# Text in a CUPTI/driver reason that means the platform refuses profiling, -> what it means.
# cupti.cpp words an unnamed result as "CUPTI error N", so the numbers of cupti_result.h are here too.
PLATFORM_REFUSALS = {
    "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES": "profiling needs privileges this process lacks",
    "CUPTI error 35": "profiling needs privileges this process lacks (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)",
    "CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES": "the virtual GPU does not allow profiling",
    "CUPTI error 40": "the virtual GPU does not allow profiling",
    "NVreg_RestrictProfilingToAdminUsers": "the driver restricts profiling to admin users",
    "ERR_NVGPUCTRPERM": "the driver restricts profiling to admin users",
    "CUPTI_ERROR_NOT_SUPPORTED": "CUPTI is not supported here (a container or sandbox)",
    "CUPTI error 27": "CUPTI is not supported here (CUPTI_ERROR_NOT_SUPPORTED: a container or sandbox)",
    "CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED": "CUPTI is not supported on this virtual GPU",
    "CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED": "CUPTI is not supported in confidential computing mode",
    "CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED": "CUPTI is not supported on this CMP device",
    "CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED": "CUPTI is not supported on this MIG instance",
    "CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED": "CUPTI is not supported under WSL",
}


class Gate(NamedTuple):
    action: str  # "run", "skip" or "fail"
    message: str = ""


def platform_refusal(reason: str) -> str:
    """What the platform refuses, from a backend's reason; '' when the reason is not a refusal."""
    for marker, meaning in PLATFORM_REFUSALS.items():
        if marker in reason:
            return f"{meaning} [{marker}]"
    return ""


def gpu_absent(torch: Any) -> str:
    """'' when torch sees a CUDA GPU, else why not. Import torch before any warmprof backend is asked:
    torch's CUDA wheels map the libcupti warmprof then finds."""
    if torch is None:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__}: torch.cuda.is_available() is False"
    return ""


def cupti_reason(native: Any) -> str:
    """'' when warmprof's CUPTI subscriber can subscribe here, else why not (it subscribes once and
    unsubscribes: a refusal shows at cuptiSubscribe/cuptiEnableDomain, not at load)."""
    entry = native.backends()["cupti"]
    if not entry["available"] and not entry.get("path"):  # nothing loaded: no driver or no libcupti
        return entry["reason"]
    # Loaded: `available` turns true only once a subscribe succeeded, so try one (and undo it).
    why = native.cupti_start()
    if not why:
        native.cupti_stop()
    return why


def decide(backend: str, no_gpu: str, reason: str) -> Gate:
    """The gate of a test of `backend`: `no_gpu` is '' on a GPU machine, `reason` '' when it works."""
    if no_gpu:
        return Gate("skip", f"no CUDA GPU: {no_gpu}")
    if not reason:
        return Gate("run")
    refusal = platform_refusal(reason)
    if refusal:
        return Gate("skip", f"{backend} refused by the platform: {refusal}: {reason}")
    return Gate("fail", f"a CUDA GPU is present but {backend} cannot work: {reason}")

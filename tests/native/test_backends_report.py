"""backends(): one entry per backend, and an unavailable backend says why instead of failing."""

import json
import subprocess
import sys

import pytest
from libcuda_probe import has_libcuda

import warmprof
from warmprof import _native

BACKENDS = {"cupti", "cuda_events", "metal"}


def test_backends_dict_shape():
    report = warmprof.backends()
    assert set(report) == BACKENDS
    for name, entry in report.items():
        extra = {"path"} if name == "cupti" else set()  # the libcupti file in use, "" if none
        assert set(entry) == {"compiled", "available", "reason"} | extra, name
        assert isinstance(entry["compiled"], bool) and isinstance(entry["available"], bool)
        assert isinstance(entry["reason"], str) and all(isinstance(entry[k], str) for k in extra)
        # The reason is empty exactly when the backend is available; available implies compiled.
        assert (entry["reason"] == "") == entry["available"], name
        assert entry["compiled"] or not entry["available"], name


def test_cupti_is_not_available_before_any_subscribe():
    # Loading libcupti proves nothing (one newer than the driver loads, then refuses to
    # subscribe): available waits for a subscribe. A fresh process has made none.
    code = "import json, warmprof; print(json.dumps(warmprof.backends()['cupti']))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    entry = json.loads(out.stdout)
    assert entry["available"] is False
    if entry["path"]:
        assert entry["reason"].startswith("loaded, not yet subscribed")
    if not entry["compiled"]:
        assert entry["path"] == ""


def test_public_backends_is_the_native_report_as_a_copy():
    report = warmprof.backends()
    assert report == _native.backends()
    report["cupti"]["available"] = "changed"
    assert warmprof.backends()["cupti"]["available"] != "changed"


@pytest.mark.skipif(has_libcuda(), reason="libcuda.so.1 is present on this machine")
@pytest.mark.parametrize("name", ["cupti", "cuda_events"])
def test_cuda_backends_without_a_driver_explain_why(name):
    # Compiled or stubbed, a CUDA backend on a driverless machine is off and says why
    # (test_cupti_without_driver.py covers the compiled build's calls in detail).
    entry = warmprof.backends()[name]
    assert entry["available"] is False
    assert entry["reason"].strip()


@pytest.mark.skipif(sys.platform == "darwin", reason="Metal is real on Apple platforms")
def test_metal_is_a_stub_off_apple():
    assert warmprof.backends()["metal"] == {"compiled": False, "available": False,
                                            "reason": "Metal: not on this platform"}
    with pytest.raises(RuntimeError, match="^Metal: not on this platform$"):
        _native.metal_probe([16, 32], 2)


@pytest.mark.parametrize("lengths,repeats,match", [
    ([], 2, "lengths must not be empty"), ([0], 2, "within 1..8192, got 0"), ([8193], 2, "got 8193"),
    ([16, 32, 16], 2, "distinct .16 twice"), ([16], 0, "repeats must be within 1..1000"), ([16], 1001, "got 1001"),
])
def test_metal_probe_checks_its_arguments_before_anything_else(lengths, repeats, match):
    # On every platform: a bad argument is a ValueError, before the backend is asked (the stub's
    # RuntimeError would otherwise hide it off Apple).
    with pytest.raises(ValueError, match=match):
        _native.metal_probe(lengths, repeats)

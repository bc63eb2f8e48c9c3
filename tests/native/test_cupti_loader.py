"""Which libcupti warmprof loads and when CUPTI counts as available, each in a fresh process with
fake libcuda/libcupti (tests/native/fake_cuda_libs.py).

Search order: a libcupti already in the process, then the CUDA wheels' folders Python passes,
then the sonames libcupti.so.13 / .12, the unversioned libcupti.so last; never a second copy.
"""

from __future__ import annotations

import pytest
from fake_cuda_libs import compiler, fake_cupti, fake_driver, run_child

from warmprof import _native

pytestmark = [
    pytest.mark.skipif(not _native.backends()["cupti"]["compiled"], reason="the CUPTI backend is a stub in this build"),
    pytest.mark.skipif(compiler() is None, reason="no C compiler to build the fake libraries"),
]


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fake_cuda")
    driver = fake_driver(root / "driver").parent
    return {
        "root": root,
        "driver": driver,
        # torch's wheel, already loaded by the time warmprof looks
        "mapped": fake_cupti(root / "torch_wheel", "libcupti.so.12", "mapped"),
        # a CUDA wheel folder Python finds in site-packages
        "wheel": fake_cupti(root / "site" / "nvidia" / "cu13" / "lib", "libcupti.so.13", "wheel"),
        # what LD_LIBRARY_PATH offers: a versioned copy and a development link of another one
        "ld13": fake_cupti(root / "ld", "libcupti.so.13", "ld13"),
        "ld_dev": fake_cupti(root / "ld", "libcupti.so", "ld_dev", soname="libcupti.so"),
    }


def child(libs, code, *, ld=("ld",), env=None):
    """Runs `code` with the fake driver and the folders `ld` (under the fakes' root) on LD_LIBRARY_PATH."""
    return run_child(code, library_path=[libs["driver"], *(libs["root"] / d for d in ld)], env=env)


REPORT = """
entry = (globals().get("BACKENDS") or _native.backends)()["cupti"]
print(json.dumps({"entry": entry, "tag": fake().fake_cupti_tag().decode() if entry["path"] else "",
                  "mapped": mapped_cuptis()}))
"""


def test_a_libcupti_already_in_the_process_is_reused_and_no_second_is_loaded(libs):
    code = f"ctypes.CDLL({str(libs['mapped'])!r})\n_native.cupti_set_search_path([{str(libs['wheel'].parent)!r}])\n" + REPORT
    out = child(libs, code)
    assert out["mapped"] == [str(libs["mapped"])]  # the old loader added ld/libcupti.so beside it
    assert out["entry"]["path"] == str(libs["mapped"]) and out["tag"] == "mapped"


def test_the_wheels_folders_come_before_the_sonames(libs):
    code = f"_native.cupti_set_search_path([{str(libs['wheel'].parent)!r}])\n" + REPORT
    out = child(libs, code)
    assert out["tag"] == "wheel" and out["entry"]["path"] == str(libs["wheel"])
    assert out["mapped"] == [str(libs["wheel"])]


def test_python_passes_the_wheels_folders_before_the_first_load(libs):
    # warmprof.backends() installs the folders warmprof.cuda_paths finds on sys.path.
    code = f"import sys\nsys.path.insert(0, {str(libs['root'] / 'site')!r})\nBACKENDS = warmprof.backends\n" + REPORT
    out = child(libs, code)
    assert out["tag"] == "wheel"


def test_a_versioned_soname_comes_before_the_unversioned_name(libs):
    out = child(libs, REPORT)
    assert out["tag"] == "ld13"  # the old loader took libcupti.so first
    assert out["entry"]["path"].endswith("/ld/libcupti.so.13")


def test_loaded_is_not_available_until_a_subscribe_succeeds(libs):
    code = """
before = warmprof.backends()["cupti"]
why = _native.cupti_start()
after = warmprof.backends()["cupti"]
stopped = _native.cupti_stop()
print(json.dumps({"before": before, "why": why, "after": after, "stopped": stopped,
                  "later": warmprof.backends()["cupti"]}))
"""
    out = child(libs, code)
    assert out["before"]["available"] is False and out["before"]["path"]
    assert out["before"]["reason"].startswith("loaded, not yet subscribed (libcupti ")
    assert out["why"] == ""
    assert out["after"] == {"compiled": True, "available": True, "reason": "", "path": out["before"]["path"]}
    assert out["later"]["available"] is True  # a subscribe succeeded in this process


def test_a_libcupti_newer_than_the_driver_loads_but_is_not_available(libs):
    code = """
why = _native.cupti_start()
print(json.dumps({"why": why, "entry": warmprof.backends()["cupti"], "active": _native.cupti_active()}))
"""
    out = child(libs, code, env={"FAKE_CUDA_DRIVER_VERSION": "12040", "FAKE_CUPTI_VERSION": "130001",
                                 "FAKE_CUPTI_SUBSCRIBE": "15"})
    assert out["why"].startswith("cuptiSubscribe failed: CUPTI_ERROR_NOT_INITIALIZED (libcupti ")
    assert "newer than the driver, which supports CUDA 12.4" in out["why"]
    assert out["entry"]["available"] is False and out["entry"]["reason"] == out["why"]
    assert out["entry"]["path"] and out["active"] is False

"""Which libcupti warmprof loads, when CUPTI counts as available, and a subscription torn down
under it, each in a fresh process with fake libcuda/libcupti (tests/native/fake_cuda_libs.py).

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
        # one without cuptiGetCallbackState, as an older libcupti might be
        "no_state": fake_cupti(root / "no_state", "libcupti.so.13", "no_state", callback_state=False),
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
    # warmprof.backends() installs the folders warmprof.system.cuda_paths finds on sys.path.
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
    assert out["why"] == "" and out["stopped"] == ""
    assert out["after"] == {"compiled": True, "available": True, "reason": "", "path": out["before"]["path"]}
    assert out["later"]["available"] is True  # a subscribe succeeded in this process


def test_a_subscribe_whose_every_callback_is_refused_is_not_available(libs):
    code = """
why = _native.cupti_start()
print(json.dumps({"why": why, "entry": warmprof.backends()["cupti"], "active": _native.cupti_active()}))
"""
    out = child(libs, code, env={"FAKE_CUPTI_ENABLE": "1"})
    assert out["why"].startswith("cuptiEnableCallback failed for every callback warmprof maps")
    assert out["entry"]["available"] is False and out["entry"]["reason"] == out["why"]
    assert out["active"] is False


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


def test_kineto_holding_the_subscriber_leaves_the_other_cuda_instruments_running(libs):
    # torch.profiler's Kineto keeps CUPTI's one subscriber once a profile has run.
    code = """
import contextlib
from warmprof.instruments.cuda import HELD_ELSEWHERE_NOTE
from warmprof.instruments.cuda_set import cuda_instruments
from warmprof.timeline import Recording
with Recording():
    insts = cuda_instruments({"device": "cuda", "stream": 0})
    with contextlib.ExitStack() as stack:
        for inst in insts:
            stack.enter_context(inst)
        for inst in insts:
            inst.mark_pass("first")
        for inst in insts:
            inst.end_pass("first")
summaries = {i.name: i.summary() for i in insts}
print(json.dumps({"summaries": summaries, "note": HELD_ELSEWHERE_NOTE, "active": _native.cupti_active(),
                  "entry": warmprof.backends()["cupti"]}))
"""
    out = child(libs, code, env={"FAKE_CUPTI_SUBSCRIBE": "39"})
    cupti = out["summaries"]["cupti"]
    assert cupti["active"] is False
    assert cupti["reason"].startswith("another CUPTI subscriber holds the process")
    assert cupti["notes"] == [out["note"]]
    assert {"cuda_events", "torch_cuda_allocator"} <= set(out["summaries"])  # entered and left, off for their own reasons
    assert out["active"] is False
    assert out["entry"]["available"] is False and out["entry"]["reason"] == cupti["reason"]


TEARDOWN = """
assert _native.cupti_start() == ""
standing = _native.cupti_check()
fake().{action}
found = _native.cupti_check() if {check_first} else ""
active = _native.cupti_active()
stopped = _native.cupti_stop()
print(json.dumps({{"standing": standing, "found": found, "active": active, "stopped": stopped,
                  "unsubscribes": fake().fake_cupti_unsubscribe_calls(), "again": _native.cupti_start(),
                  "stop_again": _native.cupti_stop(), "available": warmprof.backends()["cupti"]["available"]}}))
"""


def teardown(libs, action, *, check_first=True, ld=("ld",)):
    return child(libs, TEARDOWN.format(action=action, check_first=check_first), ld=ld)


def test_a_subscription_torn_down_by_cuptifinalize_is_found_and_not_unsubscribed(libs):
    out = teardown(libs, "cuptiFinalize()")
    assert out["standing"] == ""
    assert out["found"].startswith("the CUPTI subscription was torn down by another tool calling cuptiFinalize")
    assert "cuptiGetCallbackState: CUPTI_ERROR_INVALID_PARAMETER" in out["found"]
    assert out["active"] is False
    assert out["stopped"] == out["found"]  # stop says so once, and does not crash
    assert out["unsubscribes"] == 0  # the stale handle is never unsubscribed
    assert out["again"] == "" and out["stop_again"] == ""  # a later trace subscribes afresh
    assert out["available"] is True


def test_a_teardown_seen_only_at_stop_is_a_reason_not_a_crash(libs):
    out = teardown(libs, "cuptiFinalize()", check_first=False)
    assert out["active"] is True  # nobody asked yet
    assert "torn down" in out["stopped"] and out["unsubscribes"] == 0


def test_without_cuptigetcallbackstate_the_failed_unsubscribe_is_the_reason(libs):
    out = teardown(libs, "cuptiFinalize()", check_first=False, ld=("no_state",))
    assert out["stopped"].endswith("(cuptiUnsubscribe: CUPTI_ERROR_INVALID_PARAMETER)")
    assert out["unsubscribes"] == 1


def test_a_handle_reused_by_another_subscriber_is_left_alone(libs):
    out = teardown(libs, "fake_cupti_reuse_handle()")
    assert out["found"].endswith("(its launch callback is no longer enabled)")
    assert out["unsubscribes"] == 0  # unsubscribing would remove the other tool's subscription


def test_cuptis_own_fatal_error_notice_is_the_reason(libs):
    out = teardown(libs, "fake_cupti_fatal(b'device lost')")
    assert out["found"] == "CUPTI hit a fatal error and finalized itself: device lost"
    assert out["again"] == "" and out["stop_again"] == ""  # the next subscription starts clean


def test_the_instrument_says_from_which_pass_cupti_data_is_missing(libs):
    code = """
from warmprof.instruments.cuda import Cupti
from warmprof.timeline import Recording
with Recording():
    with Cupti() as inst:
        inst.mark_pass("first")
        fake().cuptiFinalize()  # torch.profiler exits inside the pass
        inst.end_pass("first")
        inst.mark_pass("seen_rerun")
        inst.end_pass("seen_rerun")
print(json.dumps({"summary": inst.summary(), "active": _native.cupti_active()}))
"""
    out = child(libs, code)
    summary = out["summary"]
    assert summary["active"] is True and summary["passes"]["first"]["partial"] is True
    assert "seen_rerun" not in summary["passes"]
    assert summary["stopped_early"]["at"] == "during pass 'first' (the subscription stood when it began)"
    assert len(summary["notes"]) == 1 and summary["notes"][0].startswith("CUPTI data stops during pass 'first'")
    assert "torn down" in summary["notes"][0] and out["active"] is False

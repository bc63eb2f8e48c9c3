"""What a subscription does at its edges, each in a fresh process with fake libcuda/libcupti
(tests/native/fake_cuda_libs.py):

- CUPTI's OVERHEAD activity records (the driver's own times of lazy module and function loads and
  of its PTX compiles) are enabled at subscribe, flushed and read through the activity API, and
  come back in warmprof's clock;
- no callback calls the driver: the device's architecture is read at subscribe time;
- cupti_start and cupti_stop let go of the GIL (CUPTI's locks may be held by a thread that needs it);
- a subscription that ends while a call is open on a thread leaves nothing open behind it.
"""

from __future__ import annotations

import pytest
from fake_cuda_libs import compiler, fake_cupti, fake_driver, run_child
from test_cupti_module_loads import ELF, PTX, fatbin

from warmprof import _native
from warmprof.timeline import JIT_COMPILE, RUNTIME_INIT

pytestmark = [
    pytest.mark.skipif(not _native.backends()["cupti"]["compiled"], reason="the CUPTI backend is a stub in this build"),
    pytest.mark.skipif(compiler() is None, reason="no C compiler to build the fake libraries"),
]


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fake_cuda_edges")
    return [fake_driver(root / "driver").parent, fake_cupti(root / "ld", "libcupti.so.13", "edges").parent]


def child(libs, code, env=None):
    return run_child(code, library_path=libs, env=env)


OVERHEADS = """
import threading
assert _native.cupti_start() == ""
lib = fake()
lib.fake_cupti_overhead.argtypes = [ctypes.c_uint, ctypes.c_ulonglong, ctypes.c_uint]
enabled_while_subscribed = lib.fake_cupti_overhead_enabled()
me = threading.get_native_id()
t0 = _native.now_ns()
lib.fake_cupti_overhead(4 << 16, 2_000_000, me)    # RUNTIME_TRIGGERED_MODULE_LOADING, 2 ms
lib.fake_cupti_overhead(5 << 16, 1_000_000, me)    # LAZY_FUNCTION_LOADING
lib.fake_cupti_overhead(1, 3_000_000, me + 1)      # DRIVER_COMPILER, on another thread
lib.fake_cupti_overhead(1 << 16, 500_000, me)      # CUPTI's own buffer flush: not the model's
t1 = _native.now_ns()
first = _native.cupti_overheads()
again = _native.cupti_overheads()
lib.fake_cupti_overhead(4 << 16, 1_000, me)        # still held when the subscription ends
stopped = _native.cupti_stop()
after_stop = _native.cupti_overheads()
print(json.dumps({"enabled": enabled_while_subscribed, "disabled_at_stop": lib.fake_cupti_overhead_enabled() == 0,
                  "t0": t0, "t1": t1, "first": first, "again": again, "after_stop": after_stop, "me": me}))
"""


def test_overhead_records_are_read_through_the_activity_api_in_warmprof_s_clock(libs):
    out = child(libs, OVERHEADS)
    assert out["enabled"] == 1 and out["disabled_at_stop"]
    first = out["first"]
    assert first["enabled"] is True and first["reason"] == "" and first["dropped"] == 0
    got = [(r["kind"], r["cause"], r["this_thread"]) for r in first["records"]]
    assert got == [("module_loading", RUNTIME_INIT, True), ("lazy_function_loading", RUNTIME_INIT, True),
                   ("driver_compiler", JIT_COMPILE, False)]
    slack = 50_000_000  # the clock pairing's bracket on a busy 2-core machine, generously
    for r, ns in zip(first["records"], (2_000_000, 1_000_000, 3_000_000)):
        assert r["end_ns"] - r["start_ns"] == ns  # durations are CUPTI's own
        assert out["t0"] - slack <= r["end_ns"] <= out["t1"] + slack  # ended between the clock reads around it
    assert out["again"]["records"] == []  # taken once
    assert [r["kind"] for r in out["after_stop"]["records"]] == ["module_loading"]  # stop flushed it
    assert out["after_stop"]["enabled"] is False


def test_without_the_activity_api_overhead_records_are_off_with_the_reason(tmp_path):
    root = tmp_path
    libs = [fake_driver(root / "driver").parent,
            fake_cupti(root / "ld", "libcupti.so.13", "no_activity", activity=False).parent]
    out = run_child('assert _native.cupti_start() == ""\nprint(json.dumps(_native.cupti_overheads()))',
                    library_path=libs)
    assert out["enabled"] is False and out["records"] == []
    assert "lacks the activity API" in out["reason"]


ARCH = """
from warmprof.timeline import Recording
assert _native.cupti_start() == ""
driver = ctypes.CDLL("libcuda.so.1")
driver.fake_driver_reset_calls()
with Recording() as rec:
    _native._testing.cupti_inject_load(3, {module_loaded}, True, _native.now_ticks(), bytes.fromhex({image!r}), -1)
tl = rec.drain()
causes = [int(tl.cause[i]) for i in range(len(tl)) if tl.name_of(i) == "cupti:MODULE_LOADED"]
print(json.dumps({{"causes": causes, "driver_calls": driver.fake_driver_arch_calls()}}))
"""


def test_a_module_loaded_callback_reads_the_architecture_cached_at_subscribe_and_calls_no_driver(libs):
    from cupti_calls import RESOURCE

    # An sm_80 cubin and sm_90 PTX: on the fake driver's sm_90 device the PTX is compiled (jit_compile);
    # were the architecture unknown, the cubin would be read as the load (runtime_init).
    image = fatbin((ELF, 80), (PTX, 90)).hex()
    out = child(libs, ARCH.format(module_loaded=RESOURCE["MODULE_LOADED"], image=image))
    assert out["causes"] == [JIT_COMPILE]
    assert out["driver_calls"] == 0


GIL = """
import threading, time
lib = ctypes.CDLL(_native.backends()["cupti"]["path"])
if {call!r} == "cupti_stop":
    assert _native.cupti_start() == ""
def release():
    time.sleep(0.05)
    lib.fake_cupti_release()
t = threading.Thread(target=release)
t.start()
why = getattr(_native, {call!r})()
t.join()
print(json.dumps({{"why": why, "waited_out": lib.fake_cupti_waited_out()}}))
"""


@pytest.mark.parametrize("call,waits", [("cupti_start", "subscribe"), ("cupti_stop", "unsubscribe")])
def test_start_and_stop_let_go_of_the_gil(libs, call, waits):
    """The fake's cuptiSubscribe (cuptiUnsubscribe) waits for another Python thread, which can only
    run if warmprof released the GIL around the call; it gives up after 3 s."""
    out = child(libs, GIL.format(call=call), env={"FAKE_CUPTI_WAIT": waits})
    assert out["why"] == ""
    assert out["waited_out"] == 0


EPOCH = """
from warmprof.timeline import Recording
D, RT = 1, 2
# One recording throughout (a new recording would drop the frames by itself), as under a watcher,
# which holds the subscription with no recording generation starting.
with Recording() as rec:
    assert _native.cupti_start() == ""
    _native._testing.cupti_inject(RT, {rt_launch}, True, _native.now_ticks(), 77)  # open when the watcher closes
    assert _native.cupti_stop() == ""
    assert _native.cupti_start() == ""
    before = _native.cupti_stats()["kernel_launches"]
    for k in (91, 92):
        _native._testing.cupti_inject(D, {launch}, True, _native.now_ticks(), k)
        _native._testing.cupti_inject(D, {launch}, False, _native.now_ticks(), k)
    launches = _native.cupti_stats()["kernel_launches"] - before
    assert _native.cupti_stop() == ""
tl = rec.drain()
names = [tl.name_of(i) for i in range(len(tl)) if tl.name_of(i).startswith("cupti:")]
print(json.dumps({{"launches": launches, "names": names}}))
"""


def test_a_subscription_that_ends_mid_call_leaves_no_frame_absorbing_later_launches(libs):
    from cupti_calls import DRIVER, runtime_id

    out = child(libs, EPOCH.format(rt_launch=runtime_id("cudaLaunchKernel"), launch=DRIVER["cuLaunchKernel"]))
    assert out["launches"] == 2
    assert out["names"] == ["cupti:cuLaunchKernel"] * 4  # both first launches, recorded

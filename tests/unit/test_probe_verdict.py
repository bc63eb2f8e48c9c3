"""Probe verdicts on synthetic timings: compile vs allocation vs launch, keyed on shape vs size vs op, too noisy."""

import pytest

from warmprof.probes.verdict import (
    VERDICTS,
    RowBands,
    Timing,
    band_of,
    is_cached,
    op_keying,
    pay_rank,
    size_keying,
    too_noisy,
    verdict,
)

# launch band up to 0.01 ms, allocation band up to 0.5 ms at this output size
BANDS = RowBands(launch_hi_ms=0.01, alloc_hi_ms=0.5)


def steady(first, rerun=None, median=0.1, spread=0.004):
    return Timing(first, median, median - spread / 2, median + spread / 2, rerun)


def test_compile_needs_the_compile_band_a_cached_rerun_and_the_shape_key():
    v, ev = verdict(steady(70.0, rerun=0.15), BANDS, "shape")
    assert v == "compile"
    assert any("compile band" in e for e in ev) and any("cached" in e for e in ev)


def test_allocation_band_tax_is_allocation_even_when_keyed_on_shape():
    v, ev = verdict(steady(0.4, rerun=0.11), BANDS, "shape")
    assert v == "allocation"
    assert any("allocation band" in e for e in ev)


def test_launch_band_tax_is_launch():
    v, _ = verdict(steady(0.108, rerun=0.1, spread=0.001), BANDS, "shape")
    assert v == "launch"


def test_no_excess_beyond_the_noise_floor_is_none():
    v, ev = verdict(steady(0.103, rerun=0.1), BANDS, "shape")
    assert v == "none"
    assert "noise floor" in ev[-1]


def test_keyed_on_op_is_a_one_time_load_in_either_band():
    assert verdict(steady(20.0, rerun=0.12), BANDS, "op")[0] == "one-time load"
    assert verdict(steady(0.3, rerun=0.1), BANDS, "op")[0] == "one-time load"


def test_keyed_on_size_is_allocation_even_above_the_allocation_band():
    v, ev = verdict(steady(5.0, rerun=0.1), BANDS, "size")
    assert v == "allocation"
    assert "keyed on size" in ev[-1]


def test_a_tax_the_seen_rerun_pays_again_is_not_a_compile():
    v, ev = verdict(steady(5.0, rerun=4.8), BANDS, "shape")
    assert v == "recurring"
    assert any("paid again" in e for e in ev)


def test_a_lone_compile_band_tax_without_the_op_pattern_is_not_called():
    v, ev = verdict(steady(15.0, rerun=0.1), BANDS, "none")
    assert v == "too noisy"
    assert "isolated" in ev[-1]


def test_a_steady_spread_wider_than_its_median_is_too_noisy_for_a_small_excess():
    wide = Timing(first_ms=0.3, steady_ms=0.1, steady_p10_ms=0.02, steady_p90_ms=0.4, seen_rerun_ms=0.1)
    assert too_noisy(wide)
    v, ev = verdict(wide, BANDS, "shape")
    assert v == "too noisy"
    assert "too noisy" in ev[-1]


def test_a_huge_excess_is_called_even_when_the_steady_loop_is_noisy():
    wide = Timing(first_ms=80.0, steady_ms=0.1, steady_p10_ms=0.02, steady_p90_ms=0.4, seen_rerun_ms=0.3)
    assert not too_noisy(wide)
    assert verdict(wide, BANDS, "shape")[0] == "compile"


def test_band_limits_are_inclusive_upper_bounds():
    assert band_of(0.01, BANDS) == "launch"
    assert band_of(0.0101, BANDS) == "allocation"
    assert band_of(0.5, BANDS) == "allocation"
    assert band_of(0.5001, BANDS) == "compile"


def test_cached_is_relative_to_the_first_calls_excess():
    assert is_cached(steady(10.0, rerun=2.0), BANDS)  # 1.9 ms left of a 9.9 ms excess
    assert not is_cached(steady(10.0, rerun=3.0), BANDS)
    assert is_cached(steady(10.0), BANDS) is None


def test_pay_rank_orders_the_bands():
    assert pay_rank(steady(0.108, spread=0.001), BANDS) == 0  # a launch-band tax is not "paying"
    assert pay_rank(steady(0.3), BANDS) == 1
    assert pay_rank(steady(3.0), BANDS) == 2


@pytest.mark.parametrize("first, later, key", [
    (2, [2, 2, 2], "shape"),  # every new shape pays the compile-band tax again
    (2, [2, 0, 2], "shape"),  # most do
    (2, [0, 0, 0], "op"),  # only the op's first call paid: a one-time load
    (2, [1, 1, 1], "op"),  # later shapes pay only allocation: the compile-band part was per op
    (1, [1, 0, 1], "shape"),
    (0, [0, 0, 0], "none"),
    (0, [2, 2, 0], "shape"),
])
def test_op_keying(first, later, key):
    assert op_keying(first, later) == key


@pytest.mark.parametrize("a, b, key", [
    (2, 2, "shape"),  # both of the equal-size pair pay: keyed on shape, not size
    (2, 0, "size"),  # the second of equal size ran free: keyed on size
    (2, 1, "size"),
    (0, 0, "none"),
    (0, 1, "shape"),
])
def test_size_keying(a, b, key):
    assert size_keying(a, b) == key


def test_every_verdict_returned_is_in_the_vocabulary():
    cases = [steady(70.0, 0.1), steady(0.4, 0.1), steady(0.108, 0.1), steady(0.1, 0.1), steady(5.0, 5.0)]
    for t in cases:
        for keyed in ("shape", "op", "size", "none"):
            assert verdict(t, BANDS, keyed)[0] in VERDICTS


def test_unknown_keying_is_a_programming_error():
    with pytest.raises(ValueError):
        verdict(steady(1.0), BANDS, "banana")


def test_on_cuda_eager_a_per_shape_verdict_says_it_is_a_lazy_kernel_load_not_a_compile(monkeypatch):
    import types

    from warmprof import devices
    from warmprof.probes import api
    from warmprof.probes.verdict import cuda_eager_note

    monkeypatch.setattr("warmprof.instruments.torch_cuda.library_settings",
                        lambda torch=None, environ=None: {"tunableop": False, "cudnn_benchmark": False})
    be = types.SimpleNamespace(kind=devices.KINDS["cuda"])
    notes = api._device_notes(be, "eager", ("matmul", "softmax"))
    v, ev = verdict(steady(70.0, rerun=0.15), BANDS, "shape", notes["matmul"])
    assert v == "compile"  # the band and keying's name...
    assert any("loaded lazily" in e and "benchmark nothing" in e for e in ev)  # ...and what it is on CUDA
    assert "precompiled" in notes["softmax"]
    # a compile backend compiles, CuPy compiles with NVRTC, the CPU has oneDNN: no such note there
    assert api._device_notes(be, "compile", ("matmul",)) == {}
    assert api._device_notes(types.SimpleNamespace(kind=devices.KINDS["cpu"]), "eager", ("matmul",)) == {}
    assert "TunableOp" in cuda_eager_note("matmul", {"tunableop": True})
    assert verdict(steady(70.0, rerun=0.15), BANDS, "shape")[1] == verdict(steady(70.0, rerun=0.15), BANDS, "shape", "")[1]

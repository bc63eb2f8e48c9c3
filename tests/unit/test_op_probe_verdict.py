"""The aten op verdict rules on synthetic timings (probes/aten_verdict.py): one rule, one test."""

import pytest

from warmprof.probes.aten_verdict import CAUSES, OpTiming, VariantTiming, family, judge_op, shape_pays
from warmprof.report.op_probe import VERDICTS

LAUNCH, ALLOC = 0.002, 0.05  # launch band top, allocation band top (ms)


def timing(first, steady=0.02, spread=0.002, rerun=None, variants=(), alloc=ALLOC):
    rerun = steady if rerun is None else rerun
    vs = [VariantTiming(f, s, s - spread / 2, s + spread / 2) for f, s in variants]
    return OpTiming(first, steady, steady - spread / 2, steady + spread / 2, rerun, LAUNCH, alloc, vs)


def test_causes_are_the_report_verdicts_less_failed():
    assert set(CAUSES) | {"failed"} == set(VERDICTS)


def test_a_cold_call_near_steady_is_none():
    cause, ev = judge_op(timing(0.021), "aten.gelu.default")
    assert cause == "none" and "no first-call cost" in ev


def test_a_wide_steady_spread_with_a_small_excess_is_too_noisy():
    cause, ev = judge_op(timing(0.05, steady=0.02, spread=0.05), "aten.gelu.default")
    assert cause == "too_noisy" and "too noisy" in ev


def test_an_excess_in_the_allocation_band_is_allocator_growth():
    cause, ev = judge_op(timing(0.06, variants=[(0.03, 0.02)] * 3), "aten.gelu.default")
    assert cause == "allocator_growth" and "allocation band" in ev


def test_paid_once_and_not_by_new_shapes_is_runtime_init():
    cause, ev = judge_op(timing(2.0, variants=[(0.021, 0.02)] * 3), "aten.gelu.default")
    assert cause == "runtime_init" and "once per process" in ev


def test_new_shapes_paying_only_allocation_sized_taxes_leave_runtime_init():
    cause, ev = judge_op(timing(2.0, variants=[(0.05, 0.02)] * 3), "aten.layer_norm.default")
    assert cause == "runtime_init" and "within the allocation band" in ev


@pytest.mark.parametrize("op, device, cause", [
    ("aten.gelu.default", "cpu", "jit_compile"),
    ("aten.addmm.default", "cpu", "jit_compile"),
    # cuBLAS/cuBLASLt and cuDNN pick by heuristics: a new shape's extra time is a lazily loaded kernel
    ("aten.addmm.default", "cuda", "runtime_init"),
    ("aten.convolution.default", "cuda", "runtime_init"),
    ("aten.gelu.default", "cuda", "jit_compile"),
])
def test_new_shapes_paying_above_the_allocation_band_is_a_per_shape_cause(op, device, cause):
    got, ev = judge_op(timing(2.0, variants=[(1.5, 0.02), (1.2, 0.03), (1.4, 0.02)]), op, device)
    assert got == cause
    assert "keyed on shape" in ev and "read from the keying, not observed" in ev


@pytest.mark.parametrize("op, library, cause", [
    ("aten.addmm.default", {"tunableop": True, "cudnn_benchmark": False}, "algorithm_selection"),
    ("aten.addmm.default", {"tunableop": False, "cudnn_benchmark": True}, "runtime_init"),
    ("aten.convolution.default", {"tunableop": False, "cudnn_benchmark": True}, "algorithm_selection"),
    ("aten.convolution.default", {"tunableop": True, "cudnn_benchmark": False}, "runtime_init"),
    ("aten.mm.default", {"tunableop": False, "cudnn_benchmark": False}, "runtime_init"),
])
def test_on_cuda_selection_only_when_the_library_benchmarks(op, library, cause):
    got, ev = judge_op(timing(2.0, variants=[(1.5, 0.02), (1.2, 0.03), (1.4, 0.02)]), op, "cuda", library=library)
    assert got == cause
    if cause == "runtime_init":
        assert "lazily loaded kernel" in ev and "heuristics" in ev
    else:
        assert ("TunableOp" in ev) if "mm" in op else ("cudnn.benchmark" in ev)


def test_no_new_shape_ran_says_the_shape_question_could_not_be_asked():
    t = timing(2.0)
    assert t.shape_excess_ms is None and shape_pays(t) is None
    cause, ev = judge_op(t, "aten.gelu.default")
    assert cause == "runtime_init" and "could not be asked" in ev


def test_no_new_shape_of_a_onednn_op_on_cpu_is_named_from_its_family():
    cause, ev = judge_op(timing(2.0), "aten.mm.default", "cpu")
    assert cause == "jit_compile" and "could not be asked" in ev and "oneDNN" in ev


def test_a_big_tax_paid_again_at_the_seen_shape_is_not_a_one_time_cause():
    cause, ev = judge_op(timing(2.0, rerun=1.9, variants=[(0.021, 0.02)] * 3), "aten.gelu.default")
    assert cause == "too_noisy" and "paid again" in ev


def test_shape_excess_is_the_median_of_the_variants_first_over_their_own_steady():
    t = timing(2.0, variants=[(1.0, 0.5), (0.3, 0.1), (0.9, 0.1)])
    assert t.shape_excess_ms == pytest.approx(0.5)
    assert t.cold_excess_ms == pytest.approx(1.98)


def test_family_reads_the_packet_name():
    assert family("aten.addmm.default") == family("conv2d") == "matmul/conv"
    assert family("aten.gelu.default") == ""


def test_every_verdict_carries_its_figures_in_the_evidence():
    for first in (0.021, 0.06, 2.0):
        _, ev = judge_op(timing(first, variants=[(0.021, 0.02)]), "aten.gelu.default")
        assert ev.startswith("first ") and "cold excess" in ev


def test_new_shapes_are_judged_against_the_allocation_band_at_their_own_size():
    t = timing(2.0, variants=[(0.1, 0.02)] * 3)
    assert judge_op(t, "aten.gelu.default")[0] == "jit_compile"
    larger = OpTiming(**{**t.__dict__, "shape_alloc_hi_ms": 0.2})
    assert judge_op(larger, "aten.gelu.default")[0] == "runtime_init"

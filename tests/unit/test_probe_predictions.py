"""P1..P4 judged on synthetic rows, and the pieces that feed them: judging rows, bucket plans."""

from warmprof.probes import bucketing
from warmprof.probes.experiments import RawRow
from warmprof.probes.judge import judge
from warmprof.probes.predictions import p1, p2, p3, p4, predictions
from warmprof.probes.timing import Stats, stats
from warmprof.probes.verdict import RowBands
from warmprof.report.probe import ShapeRow


def srow(role, first, steady, rerun):
    return ShapeRow(shape=[8, 8], label="8x8", role=role, output_bytes=256, first_ms=first, steady_ms=steady,
                    steady_p10_ms=steady, steady_p90_ms=steady, ratio=first / steady, seen_rerun_ms=rerun,
                    alloc_hi_ms=0.5, keyed="shape", verdict="compile")


COMPILED = {"matmul": [srow("op_first", 70.0, 0.1, 0.15), srow("new_shape", 80.0, 0.1, 0.12)],
            "softmax": [srow("op_first", 1000.0, 0.05, 0.06), srow("new_shape", 900.0, 0.05, 0.05)]}
EAGER = {"matmul": [srow("op_first", 0.12, 0.1, 0.1), srow("new_shape", 0.11, 0.1, 0.1)]}


def sweep(distinct, bucketed, counted=True, K=20, B=4):
    return {"K": K, "B": B, "counted": counted, "counter": "dynamo" if counted else "inferred",
            "distinct": {"compiles": distinct, "wall_ms": 1500.0}, "bucketed": {"compiles": bucketed, "wall_ms": 300.0}}


def test_p1_holds_when_every_ops_median_ratio_exceeds_ten():
    assert p1(COMPILED).holds
    assert "matmul 750x" in p1(COMPILED).figure
    assert not p1(EAGER).holds
    assert "1.1x" in p1(EAGER).figure


def test_p1_ignores_the_matched_size_pairs():
    ops = {"matmul": [srow("op_first", 70.0, 0.1, 0.1), srow("pair_a", 0.1, 0.1, 0.1), srow("pair_b", 0.1, 0.1, 0.1)]}
    assert p1(ops).holds


def test_p2_needs_the_seen_rerun_back_near_steady():
    assert p2(COMPILED).holds
    assert not p2(EAGER).holds  # no tax: a re-run as dear as the first call is not "cached"
    uncached = {"matmul": [srow("op_first", 70.0, 0.1, 60.0), srow("new_shape", 80.0, 0.1, 70.0)]}
    assert not p2(uncached).holds


def test_p3_needs_both_shapes_of_every_pair_to_pay():
    pay = {"op": "softmax", "shape_a": "512x512", "shape_b": "256x1024", "a_ratio": 66.0, "b_ratio": 48.0}
    assert p3([pay]).holds
    assert "66x / 256x1024 48x" in p3([pay]).figure
    assert not p3([pay, dict(pay, op="matmul", b_ratio=1.1)]).holds
    assert not p3([]).holds


def test_p4_with_a_counter_needs_exactly_K_and_B():
    assert p4(sweep(20, 4)).holds
    assert "5.0x less wall" in p4(sweep(20, 4)).figure
    slower = sweep(0, 0)
    slower["bucketed"]["wall_ms"] = 1875.0  # buckets that cost more wall (eager: nothing compiled)
    assert "1.2x more wall" in p4(slower).figure and "less wall" not in p4(slower).figure
    assert not p4(sweep(20, 5)).holds
    assert not p4(sweep(2, 2)).holds  # automatic dynamic shapes: nothing left for buckets to collapse


def test_p4_inferred_counts_allow_one_miscount_but_not_nothing():
    assert p4(sweep(19, 5, counted=False)).holds
    assert not p4(sweep(0, 0, counted=False)).holds
    assert not p4(sweep(None, None)).holds


def test_predictions_come_in_order():
    ids = [p.id for p in predictions(COMPILED, [], sweep(20, 4))]
    assert ids == ["P1", "P2", "P3", "P4"]


def test_bucket_plan_uses_every_bucket_and_never_an_original_length():
    lens = bucketing.lengths(20)
    tops, padded = bucketing.buckets(lens, 4)
    assert len(set(lens)) == 20 and len(tops) == 4 and sorted(set(padded)) == tops
    assert not set(tops) & set(lens)  # bucket shapes are never-seen in the distinct run
    assert all(p >= n for p, n in zip(padded, lens))
    tops5, padded5 = bucketing.buckets(bucketing.lengths(5), 4)
    assert len(set(padded5)) == 4


def raw(op, role, first, median, rerun, nbytes=1024, spread=0.002):
    return RawRow(op, (8, 8, 8) if op == "matmul" else (8, 8), role, nbytes, nbytes, first, Stats(median, median - spread / 2, median + spread / 2, median, 20),
                  [rerun])


BANDS = {1024: RowBands(0.01, 0.5)}


def test_judge_calls_a_cached_shape_keyed_tax_compile_and_pairs_keyed_on_shape():
    rows = [raw("matmul", "op_first", 70.0, 0.1, 0.12), raw("matmul", "new_shape", 75.0, 0.1, 0.1),
            raw("matmul", "new_shape", 72.0, 0.1, 0.11), raw("matmul", "pair_a", 90.0, 1.0, 1.0),
            raw("matmul", "pair_b", 95.0, 1.0, 1.1)]
    ops, pairs, summary = judge(rows, BANDS)
    assert [r.verdict for r in ops["matmul"]] == ["compile"] * 5
    assert pairs[0]["keyed"] == "shape" and pairs[0]["a_pays"] and pairs[0]["b_pays"]
    assert summary["matmul"]["keyed"] == "shape"


def test_judge_calls_an_op_keyed_tax_a_one_time_load_and_a_size_keyed_one_allocation():
    rows = [raw("softmax", "op_first", 20.0, 0.1, 0.1), raw("softmax", "new_shape", 0.1, 0.1, 0.1),
            raw("softmax", "new_shape", 0.101, 0.1, 0.1), raw("softmax", "pair_a", 0.4, 0.1, 0.1),
            raw("softmax", "pair_b", 0.1, 0.1, 0.1)]
    ops, pairs, summary = judge(rows, BANDS)
    verdicts = [r.verdict for r in ops["softmax"]]
    assert verdicts == ["one-time load", "none", "none", "allocation", "none"]
    assert summary["softmax"]["keyed"] == "op"
    assert pairs[0]["keyed"] == "size"


def test_a_lone_stall_at_one_new_shape_is_not_called_a_compile():
    rows = [raw("matmul", "op_first", 0.1, 0.1, 0.1), raw("matmul", "new_shape", 15.0, 0.1, 0.1),
            raw("matmul", "new_shape", 0.1, 0.1, 0.1), raw("matmul", "new_shape", 0.1, 0.1, 0.1)]
    ops, _, _ = judge(rows, BANDS)
    assert ops["matmul"][1].verdict == "too noisy"


def test_stats_percentiles():
    s = stats([float(v) for v in range(1, 12)])
    assert (s.median_ms, s.p10_ms, s.p90_ms, s.max_ms, s.n) == (6.0, 2.0, 10.0, 11.0, 11)


def test_plan_runs_new_shapes_then_pairs_and_sizes_the_allocation_band_on_the_working_set():
    from warmprof.probes.experiments import plan

    rows = plan(("matmul", "softmax"), 2, 4)
    assert [(r.op, r.role) for r in rows] == [
        ("matmul", "op_first"), ("matmul", "new_shape"), ("softmax", "op_first"), ("softmax", "new_shape"),
        ("matmul", "pair_a"), ("matmul", "pair_b"), ("softmax", "pair_a"), ("softmax", "pair_b")]
    mm = rows[0]  # 96x160x224: [96, 160] @ [160, 224] -> [96, 224]
    assert mm.output_bytes == 96 * 224 * 4
    assert mm.alloc_bytes == (96 * 160 + 160 * 224 + 96 * 224) * 4
    pair_a, pair_b = rows[4], rows[5]
    assert pair_a.output_bytes == pair_b.output_bytes  # equal output size, different shape

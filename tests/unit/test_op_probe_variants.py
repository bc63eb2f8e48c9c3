"""New shapes of a recorded call (probes/aten_variants.py): consistent size changes, strides kept in order."""

from factories import ADDMM_CALL

from warmprof.probes.aten_variants import dense_strides, new_sizes, perturbations, variant

SDPA = {"op": "aten.scaled_dot_product_attention.default", "kwargs": {},
        "args": [{"tensor": [1, 4, 16, 8], "dtype": "float32"}] * 3}


def test_new_sizes_are_distinct_and_never_the_recorded_one():
    for size in (1, 2, 7, 64, 768):
        sizes = new_sizes(size)
        assert len(set(sizes)) == 3 and size not in sizes and min(sizes) > size


def test_the_leading_dim_is_changed_in_every_tensor_sharing_it_first():
    what, targets, size = next(perturbations(SDPA))
    assert size == 1 and "leading" in what and len(targets) == 3
    v = variant(SDPA, targets, 3)
    assert [a["tensor"] for a in v["args"]] == [[3, 4, 16, 8]] * 3
    assert SDPA["args"][0]["tensor"] == [1, 4, 16, 8]  # the recorded spec is untouched


def test_a_transposed_tensor_stays_transposed():
    assert dense_strides([16, 40], [1, 16]) == [1, 16]
    assert dense_strides([40, 16], [1, 40]) == [1, 40]
    assert dense_strides([2, 3, 4], [12, 4, 1]) == [12, 4, 1]
    tried = list(perturbations(ADDMM_CALL))
    targets = next(t for w, t, s in tried if t == [(("args", 2), 0)])
    v = variant(ADDMM_CALL, targets, 21)
    assert v["args"][2] == {"tensor": [21, 32], "dtype": "float32", "stride": [1, 21]}


def test_perturbations_try_the_largest_tensor_first_and_never_repeat():
    tried = list(perturbations(ADDMM_CALL))
    assert tried[0][1] == [(("args", 1), 0)]  # mat1's leading dim (8), shared with no other tensor
    keys = [tuple(sorted(t)) for _, t, _ in tried]
    assert len(keys) == len(set(keys))


def test_a_call_without_tensors_has_no_perturbation():
    assert list(perturbations({"op": "aten.zeros.default", "args": [{"list": [{"value": 3}]}], "kwargs": {}})) == []

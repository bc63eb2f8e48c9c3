"""torch's profiler as the op view's observer (instruments/op_events.py): its events read back as the
calls a dispatch mode would have seen, its clock mapped onto warmprof's."""

import pytest

torch = pytest.importorskip("torch")

from warmprof import opspec  # noqa: E402
from warmprof.instruments import op_events  # noqa: E402
from warmprof.instruments.op_events import Anchors, Session, _contiguous, _piecewise, visible_ops  # noqa: E402


def _record(fn):
    """Run fn under a session between two anchor groups: (the visible calls, the anchors, the events)."""
    anchors = Anchors()
    session = Session.start()
    try:
        a = anchors.take()
        with torch.no_grad():
            fn()
        b = anchors.take()
    finally:
        events = session.stop()
    to_ns, thread, _ = anchors.mapping(events)
    assert to_ns is not None
    lo, hi = anchors.kineto_window(a, b)
    return visible_ops(events, thread, lo, hi), anchors, events, to_ns


def test_the_scalar_type_numbering_is_the_one_the_profiler_records():
    dtypes = [torch.uint8, torch.int32, torch.int64, torch.float16, torch.float32, torch.float64, torch.bool,
              torch.bfloat16, torch.complex64]
    calls, *_ = _record(lambda: [torch.empty(1, dtype=dt) for dt in dtypes])
    got = [opspec.call_spec(c.name, c.args, c.kwargs)["kwargs"]["dtype"] for c in calls]
    assert [c.name for c in calls] == ["aten.empty.memory_format"] * len(dtypes)
    assert got == [{"dtype": opspec.dtype_name(dt)} for dt in dtypes]


def test_composite_ops_are_looked_through_and_kernels_inner_ops_are_not_the_models():
    x, w, b = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5)
    calls, *_ = _record(lambda: (torch.nn.functional.linear(x, w, b), x.contiguous(), x.t().contiguous()))
    # linear decomposes into t and addmm; addmm's own copy_ and expand are inside its kernel; a
    # contiguous tensor's contiguous() runs nothing, a transposed one's clones
    assert [c.name for c in calls] == ["aten.t.default", "aten.addmm.default", "aten.t.default", "aten.clone.default"]


def test_a_string_argument_is_its_schema_default_and_a_device_the_calls_own():
    x = torch.randn(2, 3)
    calls, *_ = _record(lambda: (torch.nn.functional.gelu(x), torch.ones(2, device="cpu")))
    gelu, ones = (opspec.call_spec(c.name, c.args, c.kwargs) for c in calls[:2])
    assert gelu == {"op": "aten.gelu.default", "args": [{"tensor": [2, 3], "dtype": "float32"}],
                    "kwargs": {"approximate": {"value": "none"}}}
    assert ones["args"] == [{"list": [{"value": 2}]}] and ones["kwargs"]["device"] == {"device": "cpu"}
    for spec in (gelu, ones):
        args, kwargs = opspec.build(spec, "cpu")
        opspec.resolve_op(spec["op"])(*args, **kwargs)


def test_tensor_lists_and_strides_are_recorded():
    x = torch.randn(4, 6)
    calls, *_ = _record(lambda: torch.cat([x, x.t().contiguous().t()], dim=1))
    cat = opspec.call_spec(calls[-1].name, calls[-1].args, calls[-1].kwargs)
    assert cat["op"] == "aten.cat.default"
    assert cat["args"][0] == {"list": [{"tensor": [4, 6], "dtype": "float32"},
                                       {"tensor": [4, 6], "dtype": "float32", "stride": [1, 4]}]}
    assert cat["args"][1] == {"value": 1}


def test_annotations_are_looked_through_and_other_threads_left_out():
    import threading

    x = torch.randn(3)

    def work():
        with torch.profiler.record_function("user code"):
            torch.sin(x)
        t = threading.Thread(target=lambda: torch.cos(x))
        t.start()
        t.join()

    calls, *_ = _record(work)
    assert [c.name for c in calls] == ["aten.sin.default"]


def test_the_mapped_times_fall_between_the_clock_reads_around_them():
    from warmprof import _native

    x = torch.randn(64, 64)
    marks = []

    def work():
        marks.append(_native.now_ns())
        torch.mm(x, x)
        marks.append(_native.now_ns())

    calls, anchors, events, to_ns = _record(work)
    (mm,) = calls
    assert marks[0] <= to_ns(mm.start_ns) <= to_ns(mm.end_ns) <= marks[1]


def test_the_anchor_map_is_piecewise_linear_and_extrapolates():
    f = _piecewise([(0.0, 100.0), (1000.0, 1100.0), (2000.0, 2102.0)])
    assert (f(0), f(500), f(1000), f(1500), f(3000)) == (100, 600, 1100, 1601, 3104)
    assert f(-100) == 0
    assert _piecewise([(10.0, 15.0)])(20) == 25


@pytest.mark.parametrize("sizes, strides, contiguous", [
    ((2, 3), (3, 1), True), ((2, 3), (1, 2), False), ((1, 3), (99, 1), True), ((0, 3), (7, 7), True),
    ((), (), True), ((4, 1, 2), (2, 5, 1), True), ((2, 3), (3,), False)])
def test_contiguity_is_read_as_torch_reads_it(sizes, strides, contiguous):
    assert _contiguous(sizes, strides) is contiguous


def test_a_call_that_cannot_be_read_is_kept_as_not_replayable():
    class Fake:
        name, overload_name, start_time_ns, end_time_ns, correlation_id = "aten::sin", "", 1, 2, 0

        class extra_fields:  # noqa: N801 - the profiler's attribute name
            inputs = [1, 2, 3]  # three inputs for sin's one argument

    schema = op_events._schema("aten::sin", "")
    call = op_events._call(Fake(), schema, None, op_events.scalar_types())
    spec = opspec.call_spec(call.name, call.args, call.kwargs)
    assert spec["op"] == "aten.sin.default" and "cannot be rebuilt" in opspec.replayable(spec)

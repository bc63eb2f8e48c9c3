"""warmprof run's op watch (runs/ops.py; issue 41: the first request's excess to causes): a dispatcher op
that sets a new shape up inside itself (vLLM's oneDNN matmul) is timed on the thread's CPU clock at its
first call at each key and a few later ones, and the first call's extra CPU is an inferred figure of the op's
cause, checked against what the op itself measured of its own set-up. The op stays the op for torch: its
class is a subclass of its own, the dispatcher and torch.compile see the same op, and a call torch makes
while it compiles (fake tensors) is only the call."""

from __future__ import annotations

import os
import time
import warnings

import pytest
import torch

from warmprof.causes import Name
from warmprof.runs import ops

SET_UP_S = 0.02  # CPU the op spends setting a new shape up (a busy loop: on the CPU clock, whatever the load)
SET_UP_CPU_NS: dict[tuple, int] = {}  # what the op itself measured of each shape's set-up: the ground truth


@torch.library.custom_op("warmprof_test::sets_up_shapes", mutates_args=())
def sets_up_shapes(x: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
    key = (tuple(x.shape), y is None)
    if key not in SET_UP_CPU_NS:
        c0 = time.thread_time_ns()
        while time.thread_time_ns() - c0 < SET_UP_S * 1e9:
            pass
        SET_UP_CPU_NS[key] = time.thread_time_ns() - c0
    return x * 2 if y is None else x + y


@sets_up_shapes.register_fake
def _(x: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
    return torch.empty_like(x)


OP = "warmprof_test::sets_up_shapes"


@pytest.fixture(scope="module")
def watched():
    assert ops.watch(OP, Name.ALGORITHM_SELECTION, "sets each new shape up") == ""
    yield ops.OPS[OP]


def test_a_watched_op_is_the_same_op_to_torch(watched):
    packet = torch.ops.warmprof_test.sets_up_shapes
    assert isinstance(packet, torch._ops.OpOverloadPacket) and isinstance(packet.default, torch._ops.OpOverload)
    assert getattr(type(packet.default), ops.MARK) == OP and packet.default._schema.name == OP
    assert ops.watch(OP, Name.ALGORITHM_SELECTION, "again") == ""  # once: watching it again changes nothing
    assert type(type(packet.default).__mro__[1]) is type and type(packet.default).__mro__[1] is torch._ops.OpOverload
    x = torch.arange(6.0).reshape(2, 3)
    assert torch.equal(packet(x, None), x * 2) and torch.equal(packet.default(x, x), x + x)
    # keyword arguments: only the call (no key of its own is made of them)
    n = len(watched["calls"])
    assert torch.equal(packet.default(x=x, y=None), x * 2) and len(watched["calls"]) == n


def test_first_calls_at_each_key_then_only_a_few_later_ones_are_timed(watched):
    x = torch.ones(7, 5)
    for _ in range(ops.LATER + 4):
        torch.ops.warmprof_test.sets_up_shapes.default(x, None)
    mine = [c for c in ops.records()[OP]["calls"] if c["key"] == "[7, 5] -"]
    assert [c["n"] for c in mine] == list(range(ops.LATER + 1)), mine  # the first, then LATER later ones
    assert all(c["tid"] == mine[0]["tid"] and c["end_ns"] >= c["start_ns"] for c in mine)
    # the first call holds the set-up on the CPU clock; the later ones do not
    assert mine[0]["cpu_ns"] >= SET_UP_CPU_NS[((7, 5), True)] > 5 * max(c["cpu_ns"] for c in mine[1:])
    # a strided argument is a key of its own, its strides shown
    t = torch.ones(5, 7).t()
    torch.ops.warmprof_test.sets_up_shapes(t, None)
    last = ops.records()[OP]["calls"][-1]
    assert last["key"] == "[7, 5]/[1, 7] -" and last["n"] == 0
    torch.ops.warmprof_test.sets_up_shapes(x, x)
    last = ops.records()[OP]["calls"][-1]
    assert last["key"] == "[7, 5] [7, 5]" and last["n"] == 0


def test_the_figure_is_the_set_up_the_op_measured_itself(watched):
    from warmprof import _native

    w0 = _native.now_ns()
    shapes = [(3, 11), (4, 11), (5, 11)]
    for s in shapes:
        x = torch.ones(*s)
        for _ in range(4):
            torch.ops.warmprof_test.sets_up_shapes(x, None)
    w1 = _native.now_ns()
    tid = watched["calls"][-1]["tid"]
    (fig,) = ops.figures(ops.records(), tid, (w0, w1))
    truth_ms = sum(SET_UP_CPU_NS[(s, True)] for s in shapes) / 1e6
    assert fig.cause == Name.ALGORITHM_SELECTION and fig.evidence == "inferred" and fig.count == 3
    assert fig.source == f"op:{OP}" and "sets each new shape up" in fig.detail
    # the op's own measure of its set-up against warmprof's figure: a ratio (the later calls' median is
    # taken off, and the first call's own work is in it), not a time
    assert 0.9 < fig.ms / truth_ms < 1.25, (fig.ms, truth_ms)
    # a window that does not hold the first calls, or another thread: no figure
    assert ops.figures(ops.records(), tid, (w1, w1 + 10**9)) == []
    assert ops.figures(ops.records(), tid + 10**7, (w0, w1)) == []


def test_a_key_without_a_later_call_gives_no_figure_and_creations_inside_are_taken_off():
    calls = [{"key": "a", "n": 0, "start_ns": 10, "end_ns": 20, "cpu_ns": 5_000_000, "tid": 1, "created_ms": 1.5},
             {"key": "a", "n": 1, "start_ns": 30, "end_ns": 31, "cpu_ns": 1_000_000, "tid": 1, "created_ms": 0.0},
             {"key": "a", "n": 2, "start_ns": 40, "end_ns": 41, "cpu_ns": 1_200_000, "tid": 1, "created_ms": 0.0},
             {"key": "b", "n": 0, "start_ns": 50, "end_ns": 60, "cpu_ns": 9_000_000, "tid": 1, "created_ms": 0.0},
             # a key whose first call was no slower than its later ones: nothing
             {"key": "c", "n": 0, "start_ns": 70, "end_ns": 71, "cpu_ns": 1_000_000, "tid": 1, "created_ms": 0.0},
             {"key": "c", "n": 1, "start_ns": 72, "end_ns": 73, "cpu_ns": 1_100_000, "tid": 1, "created_ms": 0.0}]
    recs = {"ns::op": {"cause": Name.ALGORITHM_SELECTION, "detail": "d", "calls": calls}}
    (fig,) = ops.figures(recs, 1, (0, 100))
    # a: 5 ms first, median of later 1.1 ms, 1.5 ms of oneDNN's own creation spans inside: 2.4 ms
    assert fig.ms == pytest.approx(2.4) and fig.count == 1 and "1.500 ms oneDNN timed" in fig.detail
    # the first call's extra page faults are the engine's to book (their own estimate): taken off here
    for c in calls:
        c["faults"] = 0
    calls[0]["faults"] = 100
    (fig,) = ops.figures(recs, 1, (0, 100), fault_ns=5_000.0)
    assert fig.ms == pytest.approx(2.4 - 0.5) and "100 extra page fault(s)" in fig.detail
    # where oneDNN's creations were not timed (the user's ONEDNN_VERBOSE): the figure holds them, and says so
    recs["ns::op"]["creations_timed"] = False
    for c in calls:
        c["created_ms"] = 0.0
    (fig,) = ops.figures(recs, 1, (0, 100), fault_ns=5_000.0)
    assert fig.ms == pytest.approx(3.9 - 0.5) and "not timed in this process" in fig.detail


def test_a_call_torch_makes_while_it_compiles_is_only_the_call(watched):
    def f(x):
        return torch.ops.warmprof_test.sets_up_shapes.default(x, None) + 1

    g = torch.compile(f, fullgraph=True, backend="aot_eager")
    x = torch.ones(2, 13)
    n = len(watched["calls"])
    assert torch.equal(g(x), x * 2 + 1)
    new = ops.records()[OP]["calls"][n:]
    # the compile ran the op on fake tensors (not timed); the compiled graph's call is the op's, timed
    assert new and all(c["key"] == "[2, 13] -" for c in new), new
    assert [c["n"] for c in new] == [0], new


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_starts_its_record_at_the_fork(watched):
    torch.ops.warmprof_test.sets_up_shapes(torch.ones(1, 2), None)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(w, str(len(ops.OPS[OP]["calls"])).encode())
        os._exit(0)
    os.close(w)
    got = os.read(r, 64)
    os.waitpid(pid, 0)
    os.close(r)
    assert got == b"0" and len(watched["calls"]) > 0


def test_an_argument_without_strides_or_a_key_past_the_limit_is_only_the_call(monkeypatch):
    calls: list = []
    call = ops._timed((torch.Tensor, torch.nn.Parameter), calls)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's prototype warning for nested tensors
        nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    assert call(lambda o, *a: "ran", None, (nested,)) == "ran" and calls == []  # no sizes nor strides: no key
    monkeypatch.setattr(ops, "MAX_KEYS", 2)
    for i in range(1, 5):
        assert call(lambda o, *a: "ran", None, (torch.ones(i),)) == "ran"
    # the first two keys are timed; a third new key finds the limit reached (a server's many batch sizes)
    assert [ops.show_key(c["key"]) for c in calls] == ["[1]", "[2]"], calls
    call(lambda o, *a: "ran", None, (torch.ones(1),))  # a timed key goes on to its later calls
    assert [c["n"] for c in calls] == [0, 0, 1]


def test_a_layers_bias_a_parameter_is_a_running_calls_argument_and_a_call_that_raised_is_not_counted():
    calls: list = []
    call = ops._timed((torch.Tensor, torch.nn.Parameter), calls)
    bias = torch.nn.Parameter(torch.zeros(3))
    assert call(lambda o, *a: "ran", None, (torch.ones(2, 3), bias)) == "ran"
    assert [ops.show_key(c["key"]) for c in calls] == ["[2, 3] [3]"]  # timed, as vLLM's biased linear layers are

    def fails(o, *a):
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        call(fails, None, (torch.ones(5),))
    assert len(calls) == 1  # not recorded, not counted: the next call at the key is its first
    call(lambda o, *a: "ran", None, (torch.ones(5),))
    assert [c["n"] for c in calls] == [0, 0] and calls[-1]["faults"] >= -1
    # a size-1 dimension's stride is a key's, and said: two layouts, two texts
    call(lambda o, *a: "ran", None, (torch.ones(1, 4).as_strided((1, 4), (1, 1)),))
    assert ops.show_key(calls[-1]["key"]) == "[1, 4]/[1, 1]" and ops.show_key(calls[0]["key"]) == "[2, 3] [3]"


def test_an_op_that_cannot_be_watched_says_why_in_the_record():
    assert "not registered" in ops.watch("warmprof_test::no_such_op", Name.ALGORITHM_SELECTION, "d")
    assert ops.records()["warmprof_test::no_such_op"] == {"why": ops.REFUSED["warmprof_test::no_such_op"]}
    # an entry with no calls (refused) gives no figure
    assert ops.figures({"warmprof_test::no_such_op": ops.records()["warmprof_test::no_such_op"]}, 1, (0, 10**20)) == []

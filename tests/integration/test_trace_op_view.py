"""The op view on a real model: (module, op) rows with replayable first calls, and nothing left behind."""

import pytest

torch = pytest.importorskip("torch")

import warmprof  # noqa: E402
from warmprof import opspec
from warmprof.errors import InputError, ModelError  # noqa: E402


def _mode_stack_empty() -> bool:
    """No dispatch mode and no torch profiler left on (the op view reads the profiler's events)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    return _get_current_dispatch_mode() is None and not torch.autograd._profiler_enabled()


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(24, 40), torch.nn.Linear(40, 8)
        self.norm = torch.nn.LayerNorm(40)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x))))


def test_op_view_places_rows_by_module_and_op_with_replayable_calls():
    r = warmprof.trace(Mlp(), (3, 24), steady=5, op_view=True)
    assert _mode_stack_empty()
    summary = r.instruments["aten_ops"]
    assert summary["active"] and summary["ops_first_pass"] >= 5  # addmm x2, t x2, layer_norm, gelu at least
    op_rows = [w for w in r.unattributed_where if "op" in w]
    for w in op_rows:
        assert w["op"].startswith("aten.") and w["calls"] >= 1
        assert w["module"].startswith("Mlp")
        if "call" in w:
            assert w["call"]["op"] == w["op"] and opspec.replayable(w["call"]) == ""
            args, kwargs = opspec.build(w["call"], "cpu")
            opspec.resolve_op(w["op"])(*args, **kwargs)  # the recorded call replays
    # the re-run's own excess over a warm instrumented pass is placed by site too (never negative)
    assert all(w.get("rerun_ms", 0.0) >= 0 for w in r.unattributed_where)
    assert all(w["ms"] > 0 or w.get("rerun_ms", 0.0) > 0 for w in r.unattributed_where)
    # the report round-trips with its op rows
    again = type(r).from_json(r.to_json())
    assert again.unattributed_where == r.unattributed_where


def test_the_recorded_first_calls_have_the_model_shapes():
    r = warmprof.trace(Mlp(), (3, 24), steady=5, op_view=True)
    calls = {w["op"]: w["call"] for w in r.unattributed_where if "call" in w}
    for call in calls.values():
        shapes = [a["tensor"] for a in call["args"] if "tensor" in a]
        assert shapes, call
    if "aten.addmm.default" in calls:
        assert [3, 24] in [a.get("tensor") for a in calls["aten.addmm.default"]["args"]] or \
            [3, 40] in [a.get("tensor") for a in calls["aten.addmm.default"]["args"]]


class Raises(torch.nn.Module):
    def forward(self, x):
        x * 2  # one op runs before the raise
        raise RuntimeError("planted failure after one op")


def test_a_model_that_raises_under_the_op_view_leaves_no_dispatch_mode():
    with pytest.raises(ModelError, match="planted failure"):
        warmprof.trace(Raises(), (2, 3), steady=5, op_view=True)
    assert _mode_stack_empty()


def test_op_view_must_be_a_bool():
    with pytest.raises(InputError, match="op_view must be True or False"):
        warmprof.trace(Mlp(), (3, 24), op_view="yes")


def test_compiled_models_get_no_op_view():
    from warmprof.instruments.aten_ops import AtenOps

    inst = AtenOps(compiled=True)
    assert not inst.available and "dynamo" in inst.reason
    with inst:
        assert _mode_stack_empty()


def test_the_op_view_imports_nothing_into_the_first_pass():
    """The op view reads torch's profiler: it imports no torch._dynamo (a dispatch mode did, hundreds of
    modules), and nothing of its own is booked as the model's runtime_init in a fresh process."""
    import json
    import subprocess
    import sys

    code = ("import json, sys, torch, warmprof\n"
            "assert 'torch._dynamo' not in sys.modules\n"
            "r = warmprof.trace(torch.nn.Linear(8, 8), (2, 8), steady=5, op_view=True)\n"
            "print(json.dumps({'imports': [c.ms for c in r.causes if c.source == 'python_import'],"
            " 'dynamo': 'torch._dynamo' in sys.modules, 'ops': r.instruments['aten_ops']['ops_first_pass']}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["imports"] == [] and not got["dynamo"] and got["ops"] >= 2  # aten.t, aten.addmm
    assert "profiler_start" not in out.stderr  # kineto's own start and stop lines are kept quiet


class Nested(torch.nn.Module):
    """Ops in the root, in a child and in a grandchild: each op's span lies in its own module."""

    def __init__(self):
        super().__init__()
        self.outer = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.ReLU())
        self.head = torch.nn.Linear(6, 3)

    def forward(self, x):
        x = torch.tanh(x) * 2  # the root's own ops
        x = self.outer(x).view(-1, 6)
        return self.head(x).to(torch.float64)


def test_op_spans_land_under_the_module_that_ran_them():
    from warmprof.attribution import build_spans
    from warmprof.instruments.aten_ops import AtenOps
    from warmprof.instruments.modules import ModuleHooks
    from warmprof.timeline import Recording
    from warmprof import _native

    model, x = Nested(), torch.randn(4, 6)
    with torch.no_grad(), Recording() as rec:
        with ModuleHooks(model) as hooks, AtenOps() as ops:
            _native.begin_section(1)
            for inst in (hooks, ops):
                inst.mark_pass("first")
            model(x)
            ops.end_pass("first")
        tl = rec.drain()
    spans = build_spans(tl)
    mods = [s for s in spans if s.name.startswith("module:")]
    where = {}
    for s in spans:
        if s.name.startswith("op:"):
            inside = [m for m in mods if m.start_ns <= s.start_ns and s.end_ns <= m.end_ns]
            crossing = [m for m in mods if s.start_ns < m.start_ns < s.end_ns or s.start_ns < m.end_ns < s.end_ns]
            assert inside and not crossing, s
            where.setdefault(max(inside, key=lambda m: m.start_ns).name[len("module:"):], []).append(s.name[3:])
    assert {"aten.tanh.default", "aten.mul.Tensor", "aten.view.default", "aten._to_copy.default"} <= set(where["Nested"])
    assert where["Nested.outer.0"] == ["aten.t.default", "aten.addmm.default"]  # linear, looked through
    assert where["Nested.outer.1"] == ["aten.relu.default"]
    assert where["Nested.head"] == ["aten.t.default", "aten.addmm.default"]
    calls = {op: (args, kwargs) for op, args, kwargs in ops.calls["first"]}
    view = opspec.call_spec("aten.view.default", *calls["aten.view.default"])
    assert view["args"][1] == {"list": [{"value": -1}, {"value": 6}]}  # a scalar list, from the profiler
    to = opspec.call_spec("aten._to_copy.default", *calls["aten._to_copy.default"])
    assert to["kwargs"]["dtype"] == {"dtype": "float64"}  # a ScalarType, read against the schema
    for op, (args, kwargs) in calls.items():
        spec = opspec.call_spec(op, args, kwargs)
        assert opspec.replayable(spec) == "", spec
        opspec.resolve_op(op)(*opspec.build(spec, "cpu")[0], **opspec.build(spec, "cpu")[1])
    assert _mode_stack_empty()


def test_the_op_view_refuses_to_share_a_profiler_the_caller_runs():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        r = warmprof.trace(Mlp(), (3, 24), steady=3, op_view=True)
    assert not r.instruments["aten_ops"]["active"]
    assert "already on" in r.instruments["aten_ops"]["reason"]
    assert _mode_stack_empty()


def test_explain_probes_the_top_op_in_a_fresh_process_and_folds_its_verdict():
    r = warmprof.trace(Mlp(), (3, 24), steady=5, explain=True, explain_top=1)
    probes = r.instruments["op_probes"]
    (v,) = probes["verdicts"]
    assert v["verdict"] in ("runtime_init", "jit_compile", "algorithm_selection", "allocator_growth", "none",
                            "too_noisy", "failed")
    assert v["op"] in {w["op"] for w in r.unattributed_where if "op" in w}
    assert any(n.startswith("--explain: 1 op(s) probed") for n in r.notes)
    inferred = [c for c in r.causes if c.source == "probe"]
    assert all(c.evidence == "inferred" for c in inferred)
    assert sum(c.ms for c in inferred) == pytest.approx(probes["folded_ms"])
    assert r.attributed_ms + r.unattributed_ms == pytest.approx(r.excess_ms)
    for w in r.unattributed_where:  # a fold never takes more than the row's own residual
        if "inferred" in w:
            assert 0 < w["inferred"]["ms"] <= w["ms"] + 1e-9


@pytest.mark.parametrize("bad", [0, 101, True, 2.0])
def test_explain_top_is_checked_before_anything_runs(bad):
    with pytest.raises(InputError, match="explain_top"):
        warmprof.trace(Mlp(), (3, 24), explain=True, explain_top=bad)
    assert _mode_stack_empty()


def test_nested_tensors_inside_the_model_do_not_break_the_op_view():
    """A TransformerEncoder with a padding mask runs its fast path on nested tensors in eval: the op
    view records those arguments as not replayable instead of asking them for sizes."""
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[1, 4:] = True

    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = enc

        def forward(self, x):
            return self.enc(x, src_key_padding_mask=mask)

    r = warmprof.trace(Masked(), (2, 6, 16), steady=5, op_view=True)
    assert r.instruments["aten_ops"]["ops_first_pass"] > 0
    assert _mode_stack_empty()


class Identity(torch.nn.Module):
    def forward(self, x):
        return x


def test_explain_with_nothing_to_probe_keeps_the_trace_and_says_why():
    r = warmprof.trace(Identity(), (2, 3), steady=5, explain=True)
    assert any(n.startswith("--explain: nothing probed") for n in r.notes)
    assert "op_probes" not in r.instruments


def test_explain_refuses_a_compiled_model_before_anything_runs():
    with pytest.raises(InputError, match="explain is for eager models"):
        warmprof.trace(Mlp(), (3, 24), explain=True, compile=True)

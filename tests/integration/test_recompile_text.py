"""issue 27: a trace says why dynamo recompiled, grouped. A model whose first pass calls a function
compiled with dynamic=False at four lengths recompiles three times, each for a new size at dimension 1:
the report holds one group of three (its reason with the numbers as N, an example, the recompiles'
span), the text says it with what that guard means, and the JSON round-trips it. The eager backend:
no C++ compiler needed."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

import warmprof  # noqa: E402
from warmprof.report import Report  # noqa: E402
from warmprof.report.trace import recompile_groups, recompile_reason_kind  # noqa: E402

LENGTHS = (4, 5, 6, 7)


class _Recompiling(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.inner = torch.compile(lambda x: (x * 2).sin(), backend="eager", dynamic=False)

    def forward(self, x):
        out = 0
        for n in LENGTHS:
            out = out + self.inner(x[:, :n]).sum()
        return self.lin(x) + out


def test_a_traced_first_pass_that_recompiled_says_why_grouped(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    r = warmprof.trace(_Recompiling(), inputs=(torch.randn(2, 8, 8),))
    tc = r.torch_compile
    assert tc is not None and tc.compiles == len(LENGTHS), tc
    (g,) = tc.recompiles
    assert g["count"] == len(LENGTHS) - 1 == tc.recompiled and g["ms"] > 0
    assert "size mismatch at index 1" in g["reason"] and "expected N, actual N" in g["reason"], g
    assert g["example"].endswith("expected 4, actual 5"), g
    text = str(r)
    assert f"{len(LENGTHS)} compile(s), {len(LENGTHS) - 1} of them recompiles" in text
    line = next(x for x in text.splitlines() if x.strip().startswith("recompiled"))
    assert f"recompiled {len(LENGTHS) - 1}x" in line and "a new size at that dimension" in line, line
    back = Report.from_dict(json.loads(json.dumps(r.to_dict())))
    back.validate()
    assert back.torch_compile.recompiles == tc.recompiles


@pytest.mark.parametrize("reason, kind", [
    ("0/3: tensor 'input_ids' size mismatch at index 1. expected 64, actual 65",
     "tensor 'input_ids' size mismatch at index 1. expected N, actual N"),
    ("len(L['args']) == 3", "len(L['args']) == N"),
    ("  ___check_obj_id(L['self'], 140230)\nmore", "___check_obj_id(L['self'], N)"),
    ("", ""),
])
def test_a_reason_kind_drops_the_numbers_but_the_dimension(reason, kind):
    assert recompile_reason_kind(reason) == kind


def test_groups_count_and_time_the_recompiles_most_first():
    compiles = [{"recompile_reason": None, "span_ms": 50.0},  # a first compile: no reason
                {"recompile_reason": "0/1: len(L['args']) == 2", "span_ms": 5.0},
                {"recompile_reason": "0/2: tensor 'x' size mismatch at index 0. expected 1, actual 2", "span_ms": 7.0},
                {"recompile_reason": "0/3: tensor 'x' size mismatch at index 0. expected 2, actual 3", "span_ms": 8.0}]
    got = recompile_groups(compiles)
    assert [(g["count"], g["ms"]) for g in got] == [(2, 15.0), (1, 5.0)]
    assert got[0]["example"] == "tensor 'x' size mismatch at index 0. expected 1, actual 2"


class _Followed(_Recompiling):
    """The advice followed: the inner function compiled with dynamic=True."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.compile(lambda x: (x * 2).sin(), backend="eager", dynamic=True)


def test_the_advice_names_the_dimension_and_following_it_removes_the_recompiles(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    r = warmprof.trace(_Recompiling(), inputs=(torch.randn(2, 8, 8),))
    line = next(a for a in r.advice if a.startswith("jit_compile ("))
    assert "recompiled 3 time(s) for a new size of x at dimension 1" in line
    assert "torch._dynamo.mark_dynamic(x, 1)" in line and "dynamic=True" in line
    torch._dynamo.reset()
    followed = warmprof.trace(_Followed(), inputs=(torch.randn(2, 8, 8),))
    assert followed.torch_compile.compiles == 1 and followed.torch_compile.recompiles == []
    assert not any("recompiled" in a for a in followed.advice)


class _Breaking(torch.nn.Module):
    """Compiled whole: a graph break in the middle (torch._dynamo.graph_break) splits it in two graphs,
    and the function it calls after the break is a frame of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):
        x = self.a(x).relu()
        torch._dynamo.graph_break()
        return _after_break(self.b(x))


def _after_break(x):
    return (x * 3).sin()


def test_a_compiled_pass_with_a_graph_break_says_the_break_and_each_frame(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    r = warmprof.trace(_Breaking(), inputs=(torch.randn(2, 8),), compile={"backend": "eager"})
    tc = r.torch_compile
    assert tc is not None and tc.graph_breaks, tc
    assert sum(b["count"] for b in tc.graph_breaks) >= 1
    assert len(tc.frames) >= 2 and sum(f["compiles"] for f in tc.frames) <= tc.compiles
    text = str(r)
    assert "graph breaks:" in text
    for b in tc.graph_breaks:
        assert b["reason"].splitlines()[0][:60] in text
    for f in tc.frames:
        assert f"frame {f['frame']}: {f['compiles']} compile(s)" in text
    back = Report.from_dict(json.loads(json.dumps(r.to_dict())))
    back.validate()
    assert back.torch_compile.graph_breaks == tc.graph_breaks and back.torch_compile.frames == tc.frames

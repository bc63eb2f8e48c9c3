"""Pure pieces of instruments: oneDNN verbose lines, torch.compile phase carving."""

import pytest

from warmprof.instruments.onednn import parse_line
from warmprof.instruments.torch_compile import phases
from warmprof.timeline import ALGORITHM_SELECTION, JIT_COMPILE

LINE_TS = ("onednn_verbose,v1,1795962537157.767090,primitive,create:cache_miss,cpu,convolution,jit:avx512_core,"
           "forward_training,src:f32:a:blocked:aBcd16b::f0 wei:f32:a:blocked:ABcd16b16a::f0,attr-scratchpad:user,"
           "alg:convolution_direct,mb1_ic16oc32_ih62oh60kh3sh1dh0ph0_iw62ow60kw3sw1dw0pw0,1.83496\n")
LINE_NO_TS = "onednn_verbose,primitive,create:cache_hit,cpu,reorder,jit:blk,undef,src:f32 dst:f32,,,1x16x62x62,0.10498"


def test_parse_create_line_with_timestamp():
    r = parse_line(LINE_TS)
    assert r.outcome == "cache_miss" and r.primitive == "convolution" and r.impl == "jit:avx512_core"
    assert r.ms == pytest.approx(1.83496)
    assert r.wall_ms == pytest.approx(1795962537157.767090)


def test_parse_create_line_without_timestamp_or_version():
    r = parse_line(LINE_NO_TS)
    assert r.outcome == "cache_hit" and r.primitive == "reorder" and r.wall_ms is None


@pytest.mark.parametrize("line", [
    "hello world",
    "onednn_verbose,v1,info,oneDNN v3.12.0",
    "onednn_verbose,v1,1795962537160.466064,primitive,exec,cpu,reorder,jit:blk,undef,a,b,,1x16,0.0458984",
    "onednn_verbose,v1,primitive,create:cache_miss,cpu,conv,impl,x,y,z,notanumber",
])
def test_other_lines_are_not_creations(line):
    assert parse_line(line) is None


def test_phases_are_disjoint_and_fit_the_span():
    totals = {"OutputGraph.call_user_compiler": 16.5, "compile_fx_inner": 15.0,
              "GraphLowering.compile_to_module": 12.0, "select_algorithm.autotune": 2.0}
    out = phases(totals, span_s=17.0)
    d = {name: (cause, s) for cause, name, s in out}
    assert d["torch.compile/dynamo"][1] == pytest.approx(0.5)
    assert d["torch.compile/aot_autograd"][1] == pytest.approx(1.5)
    assert d["torch.compile/inductor"][1] == pytest.approx(3.0)
    assert d["torch.compile/codegen_and_cxx_compile"][1] == pytest.approx(10.0)
    assert d["torch.compile/autotune"] == (ALGORITHM_SELECTION, pytest.approx(2.0))
    assert sum(s for _, _, s in out) == pytest.approx(17.0)
    assert all(c in (JIT_COMPILE, ALGORITHM_SELECTION) for c, _, _ in out)


def test_phases_never_exceed_the_span():
    out = phases({"OutputGraph.call_user_compiler": 20.0, "compile_fx_inner": 19.0}, span_s=10.0)
    assert sum(s for _, _, s in out) <= 10.0 + 1e-9


def test_phases_with_no_torch_timers_is_all_dynamo():
    assert phases({}, span_s=2.0) == [(JIT_COMPILE, "torch.compile/dynamo", 2.0)]

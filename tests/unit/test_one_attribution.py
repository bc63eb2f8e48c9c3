"""One attribution, three callers: the same synthetic call (a 30 ms call in which dynamo compiled for
12.5 ms, taking 300 page faults inside the compile and 2,000 outside it while 8 MiB of anonymous memory
grew) handed to a trace (as a recorded pass), to warmup (as its deltas) and to watch (as its native
record) gives the same parts: the compile measured, the faults outside it priced at the one price.

And the vocabularies stay in their tables: no file outside causes.py spells out five or more cause
names; the compile triggers map to causes in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from factories import call_costs, watch_call
from warmprof import _native
from warmprof.attribution import attribute_pass
from warmprof.attribution.calls import CallFacts, attribute_call
from warmprof.attribution.compiles import TRIGGERS, cause_of
from warmprof.attribution.faults import NOISE_BYTES, NOISE_FAULTS, call_calibration, is_growth
from warmprof.causes import Name, names
from warmprof.instruments.torch_compile import CacheOutcome, CompileEvent
from warmprof.timeline import BEGIN, COUNTER, END, JIT_COMPILE, STRUCTURE, Timeline

MS, MIB = 1_000_000, 1 << 20
CALL_NS, COMPILE_NS = 30 * MS, 12.5 * MS
INSIDE_FAULTS, OUTSIDE_FAULTS = 300, 2000
FAULT_NS = 1000.0
PACKAGE = Path(__file__).resolve().parents[2] / "python" / "warmprof"


def _cal():
    return call_calibration(FAULT_NS, _native.page_size())


def _trace_parts():
    """The call as a trace's recorded pass: a compile span, and the fault and memory counters sampled
    at every span boundary."""
    t0, c0, c1, t1 = 0, 5 * MS, 5 * MS + int(COMPILE_NS), CALL_NS
    names_ = ["pass:first", "torch.compile:compile", "host:minor_faults", "host:major_faults", "host:rss_bytes",
              "host:file_bytes"]
    recs = [(t0, BEGIN, STRUCTURE, 0, 0), (c0, BEGIN, JIT_COMPILE, 1, 0), (c1, END, JIT_COMPILE, 1, 0),
            (t1, END, STRUCTURE, 0, 0)]
    samples = {t0: (0, 0, 0), c0: (0, 0, 0), c1: (INSIDE_FAULTS, 3 * MIB, MIB),
               t1: (INSIDE_FAULTS + OUTSIDE_FAULTS, 11 * MIB, MIB)}
    for t, (faults, rss, files) in samples.items():
        recs += [(t, COUNTER, STRUCTURE, 2, faults), (t, COUNTER, STRUCTURE, 3, 0), (t, COUNTER, STRUCTURE, 4, rss),
                 (t, COUNTER, STRUCTURE, 5, files)]
    att = attribute_pass(Timeline.from_records(recs, names_), "first", calibration=_cal(), window=(t0, t1))
    return {(p.cause, p.evidence, round(p.ms, 9)) for p in att.parts}


def _warmup_parts(monkeypatch):
    from warmprof.serving import warmup
    from warmprof.traces import calibrate

    monkeypatch.setattr(calibrate, "_call_fault_ns", FAULT_NS)
    compile_entry = CompileEvent("0/0", "torch.compile:compile", COMPILE_NS / 1e6, INSIDE_FAULTS, 3 * MIB, MIB)
    assert compile_entry.cause == Name.JIT_COMPILE  # a compile event carries its cause
    facts = warmup.call_facts(CALL_NS, [compile_entry], CacheOutcome(), INSIDE_FAULTS + OUTSIDE_FAULTS, 10 * MIB, MIB,
                              None)
    got = attribute_call(facts, calibrate.call_costs())
    row = warmup.WarmRow(shape=(1, 8), ms=0.0)
    warmup._book(row, CALL_NS, [compile_entry], CacheOutcome(), INSIDE_FAULTS + OUTSIDE_FAULTS, 10 * MIB, MIB, None)
    assert {c: round(ms, 9) for c, ms in row.causes.items()} == {p.cause: round(p.ms, 9) for p in got.parts}
    return {(p.cause, p.evidence, round(p.ms, 9)) for p in got.parts if p.ns is not None}


def _watch_parts():
    from warmprof.serving.watch import events

    call = watch_call(1, None, (), None, True, False, 10**9, CALL_NS, 0, None, CALL_NS, INSIDE_FAULTS + OUTSIDE_FAULTS,
                      0, 0, 1, int(COMPILE_NS), 0, 0.0)
    event = events.build(call, index=0, key="k", start_ns=0, idle_ns=10**9, dynamo=None, costs=call_costs(FAULT_NS),
                         reserved=(None, None), side=[("torch.compile:compile", int(COMPILE_NS), INSIDE_FAULTS)])
    return {(c["cause"], c["evidence"], round(c["ms"], 9)) for c in event["causes"]}


def test_the_same_call_gives_the_same_parts_to_trace_warmup_and_watch(monkeypatch):
    want = {(Name.JIT_COMPILE, "measured", 12.5), (Name.ALLOCATOR_GROWTH, "estimated", OUTSIDE_FAULTS * FAULT_NS / 1e6)}
    assert _trace_parts() == want
    assert _warmup_parts(monkeypatch) == want
    assert _watch_parts() == want


def test_a_watched_call_whose_compile_faults_are_unknown_books_none_of_its_faults():
    """An older compile tap (or a compile that ended on another thread) leaves the compile's own faults
    unknown: none of the call's faults can be told to be outside it."""
    from warmprof.serving.watch import events

    call = watch_call(1, None, (), None, True, False, 10**9, CALL_NS, 0, None, CALL_NS, 5000, 0, 0, 1, int(COMPILE_NS),
                      0, 0.0)
    event = events.build(call, index=0, key="k", start_ns=0, idle_ns=10**9, dynamo=None, costs=call_costs(FAULT_NS),
                         reserved=(None, None), side=[])
    assert [c["cause"] for c in event["causes"]] == [Name.JIT_COMPILE]


def test_one_noise_floor_for_every_caller():
    page = _native.page_size()
    assert not is_growth(NOISE_FAULTS - 1, 64 << 20, page) and is_growth(NOISE_FAULTS, 64 << 20, page)  # huge pages
    assert not is_growth(NOISE_FAULTS, (1 << 20) - 1, page) and is_growth(NOISE_FAULTS, 1 << 20, page)
    at = NOISE_BYTES // page  # no bytes read (watch): each fault stands for one small page
    assert not is_growth(at - 1, None, page) and is_growth(at, None, page)
    below = attribute_call(CallFacts(ns=10 * MS, faults=at - 1), _cal())
    got = attribute_call(CallFacts(ns=10 * MS, faults=at), _cal())
    assert not below.parts and got.part(Name.ALLOCATOR_GROWTH).ns == pytest.approx(at * FAULT_NS)


def test_estimates_fit_in_the_calls_time_outside_its_measured_parts():
    got = attribute_call(CallFacts(ns=2 * MS, faults=10_000), _cal())  # 10 ms of faults in a 2 ms call
    part = got.part(Name.ALLOCATOR_GROWTH)
    assert part.ns == pytest.approx(2 * MS) and part.figures["capped_from_ns"] == pytest.approx(10 * MS)
    assert got.residual_ns == pytest.approx(0.0)


def test_every_compile_trigger_maps_to_a_cause_in_the_table():
    assert {cause for _, cause in TRIGGERS.values()} <= set(names())
    for source, cause in TRIGGERS.values():
        assert cause_of(source) == cause
    assert cause_of("something:new") == Name.JIT_COMPILE  # an unknown stretch is a compile


def test_cause_name_constants_are_the_tables_names():
    consts = {v for k, v in vars(Name).items() if k.isupper()}
    assert consts == set(names())


def _spelled_causes(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    known = set(names())
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in known and id(n) not in docstrings}


def test_no_file_outside_the_cause_table_spells_out_five_cause_names():
    crowded = {str(p.relative_to(PACKAGE)): sorted(found) for p in PACKAGE.rglob("*.py")
               if p.name != "causes.py" and len(found := _spelled_causes(p)) >= 5}
    assert not crowded, f"use causes.Name instead of spelling these out: {crowded}"


def test_the_unit_costs_are_read_only_when_some_faults_are_to_be_priced():
    """watch's first event must not pay a fault calibration on the serving thread for nothing."""
    asked = []

    def costs():
        asked.append(1)
        return _cal()

    attribute_call(CallFacts(ns=10 * MS, faults=3, cpu_ns=MS, involuntary_switches=2), costs)
    assert not asked
    attribute_call(CallFacts(ns=10 * MS, faults=10_000), costs)
    assert asked == [1]


def test_a_stretch_that_ended_outside_the_watched_call_is_not_the_calls():
    """A compile on this thread while no watched call ran stays in the tap's queue; the next event keeps
    only what ended inside its own call, so its compile's faults are still known."""
    from warmprof.serving.watch import events

    start = 10**9
    call = watch_call(1, None, (), None, True, False, start, CALL_NS, 0, None, CALL_NS, INSIDE_FAULTS + OUTSIDE_FAULTS,
                      0, 0, 1, int(COMPILE_NS), 0, 0.0)
    side = [("torch.compile:compile", 5 * MS, 9000, start - MS),  # before the call: not its own
            ("torch.compile:compile", int(COMPILE_NS), INSIDE_FAULTS, start + 20 * MS)]
    event = events.build(call, index=0, key="k", start_ns=0, idle_ns=10**9, dynamo=None, costs=call_costs(FAULT_NS),
                         reserved=(None, None), side=side)
    got = {(c["cause"], c["evidence"], round(c["ms"], 9)) for c in event["causes"]}
    assert got == {(Name.JIT_COMPILE, "measured", 12.5), (Name.ALLOCATOR_GROWTH, "estimated", OUTSIDE_FAULTS * FAULT_NS / 1e6)}


def test_the_cuda_reserve_grown_with_no_faults_to_price_is_its_own_cause_in_watch():
    from warmprof.serving.watch import events

    call = watch_call(1, None, (), None, False, True, 10**9, 5 * MS, 0, None, 5 * MS, 3, 0, 0, 0, 0, 9, float(MS))
    event = events.build(call, index=0, key="k", start_ns=0, idle_ns=10**9, dynamo=None, costs=call_costs(FAULT_NS),
                         reserved=((1 << 20, 1), (5 << 20, 3)))
    (c,) = event["causes"]
    assert (c["cause"], c["source"], c["evidence"], c["ms"]) == (Name.ALLOCATOR_GROWTH, "cuda_caching_allocator",
                                                                 "measured", 0.0)
    assert "grew 4.0 MiB in 2 new segments" in c["detail"]
    shrunk = attribute_call(CallFacts(ns=5 * MS, cuda_reserved_bytes=-(2 << 20)), _cal())
    assert not shrunk.parts  # a reserve that shrank is no growth

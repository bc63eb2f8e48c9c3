"""warmup's rules (attribution/calls.py, booked by serving/warmup.py), on made-up deltas: what fires on a call, with which figures (the real calls are
tests/integration/test_warm_cpu.py and test_warm_compile_cpu.py)."""

from __future__ import annotations

import pytest

from warmprof.serving import warmup as warm
from warmprof.traces import calibrate
from warmprof.errors import NotWarmError, WarmprofError
from warmprof.instruments.torch_compile import CacheOutcome, CompileEvent, cache_outcome

MiB = 1 << 20
COLD = cache_outcome({"stats.unique_graphs": 1, "inductor.fxgraph_cache_miss": 1})


@pytest.fixture(autouse=True)
def fault_cost(monkeypatch):
    monkeypatch.setattr(calibrate, "_call_fault_ns", 1000.0)  # 1 us a fault: no calibration in unit tests


def book(compiles=(), outcome=CacheOutcome(), faults=0, anon=0, files=0, reserved=None, ns=5_000_000):
    row = warm.WarmRow(shape=(1, 8), ms=0.0)
    warm._book(row, ns, list(compiles), outcome, faults, anon, files, reserved)
    return row


def compile_entry(ms=2000.0, faults=30000, rss=40 * MiB, files=2 * MiB, reason=None, trigger="torch.compile:compile"):
    return CompileEvent("0/1", trigger, ms, faults, rss, files, recompile_reason=reason)


def test_a_quiet_call_fires_nothing():
    row = book(faults=3, anon=64 << 10)
    assert row.fired == [] and row.causes == {} and row.ms == pytest.approx(5.0)


def test_a_compile_is_jit_compile_with_its_reason_and_cache_figures():
    reason = "0/0: tensor 'ids' size mismatch at index 1. expected 8, actual 16"
    row = book([compile_entry(reason=reason)], COLD, faults=30010, anon=38 * MiB, files=2 * MiB, ns=2_010_000_000)
    assert row.fired == ["jit_compile"]  # the compile's own faults and memory are the compile's
    assert row.causes == {"jit_compile": 2000.0} and row.compiles == 1
    assert row.recompile_reasons == [reason]
    assert reason in row.evidence["jit_compile"] and "1 graph compiled from scratch" in row.evidence["jit_compile"]
    assert row.cache["compiled"] == 1 and row.cache["loaded"] == 0


def test_dynamos_graph_counter_alone_still_says_jit_compile():
    row = book(outcome=CacheOutcome(graphs=1))  # no callback seen (dynamo imported during the call)
    assert row.fired == ["jit_compile"] and "jit_compile" not in row.causes
    assert "unique_graphs" in row.evidence["jit_compile"]


@pytest.mark.parametrize("faults, anon, fires", [
    (256, 1 * MiB, True),  # at both floors
    (255 * 4, 4 * MiB - 1, True),
    (8, 16 * MiB, True),  # huge pages: few faults, much memory
    (7, 16 * MiB, False),  # resident memory that grew without the call faulting it in (khugepaged)
    (5000, MiB - 4096, False),  # many faults, memory given back: churn, not growth
    (5000, -8 * MiB, False),
])
def test_allocator_growth_floors(faults, anon, fires):
    row = book(faults=faults, anon=anon)
    assert ("allocator_growth" in row.fired) is fires
    if fires:
        assert row.causes["allocator_growth"] == pytest.approx(faults * 1000 / 1e6)  # faults x 1 us, estimated
        assert f"{faults} page faults" in row.evidence["allocator_growth"]


def test_growth_inside_a_compile_is_not_allocator_growth():
    row = book([compile_entry(faults=9000, rss=30 * MiB, files=0)], COLD, faults=9004, anon=30 * MiB + 8192)
    assert row.fired == ["jit_compile"]


def test_file_backed_pages_are_runtime_init_and_their_faults_not_the_allocators():
    row = book(faults=300, anon=2 * MiB, files=12 * MiB)
    assert row.fired == ["allocator_growth", "runtime_init"]
    # 12 MiB of file pages at 16 pages a fault: 192 of the 300 faults; 108 anonymous at 1 us
    assert row.causes["allocator_growth"] == pytest.approx(0.108)
    assert "runtime_init" not in row.causes


def test_cuda_reserved_growth_and_graph_recording():
    row = book([compile_entry(ms=12.0, trigger="cudagraphs:record", faults=0, rss=0, files=0)], reserved=20 * MiB)
    assert row.fired == ["graph_capture", "allocator_growth"]
    assert row.causes == {"graph_capture": 12.0}
    assert "reserved +20.0 MiB" in row.evidence["allocator_growth"]
    assert book(reserved=0).fired == []


def test_calls_add_up_in_one_row():
    row = warm.WarmRow(shape=(1, 8), ms=0.0)
    warm._merge(row, book([compile_entry(ms=900.0)], COLD, faults=35000, anon=40 * MiB, ns=1_000_000_000))
    warm._merge(row, book(faults=600, anon=3 * MiB, ns=1_000_000))
    assert row.calls == 2 and row.ms == pytest.approx(1001.0) and row.compiles == 1
    assert row.causes["jit_compile"] == 900.0 and row.causes["allocator_growth"] == pytest.approx(5.6)
    assert row.evidence["allocator_growth"].startswith("+2.0 MiB") and "; call 2: +3.0 MiB" in row.evidence["allocator_growth"]
    assert row.per_call == [{"ms": pytest.approx(1000.0), "fired": ["jit_compile", "allocator_growth"]},
                            {"ms": pytest.approx(1.0), "fired": ["allocator_growth"]}]
    assert row.cache["compiled"] == 1


QUIET = {}
COMPILE = {"compiles": [compile_entry()], "outcome": COLD}
GROWS = {"faults": 600, "anon": 3 * MiB}


def checked(kind, script, passes=None, ignored=()):
    """_Checker over made-up calls: `script` is each call's book() arguments, in order."""
    calls = iter(script)
    made = []

    def call():
        made.append(1)
        return book(**next(calls))

    checker = warm._Checker(kind, passes, set(ignored))
    row = warm.WarmRow(shape=(1, 8), ms=0.0)
    checker.run(call, row)
    return row, len(made), checker.notes


@pytest.mark.parametrize("script, passes, calls", [
    ([COMPILE, QUIET, QUIET], None, 2),  # until a call pays nothing
    ([QUIET], None, 1),
    ([COMPILE, GROWS, GROWS, QUIET], None, 3),  # at most WARMUP_MAX_CALLS
    ([COMPILE, QUIET, QUIET], 3, 3),  # passes= fixes the count
    ([COMPILE, QUIET], 1, 1),
])
def test_warmup_calls_until_a_call_pays_nothing(script, passes, calls):
    row, made, _ = checked("warmup", script, passes)
    assert made == row.calls == calls and row.not_warm == []


def test_a_compile_fails_the_check_at_once():
    row, made, notes = checked("assert_warm", [COMPILE])
    assert made == 1 and row.not_warm == ["jit_compile"] and notes == []


def test_memory_fails_the_check_only_when_the_next_call_pays_it_too():
    row, made, notes = checked("assert_warm", [GROWS, GROWS])
    assert made == 2 and row.not_warm == ["allocator_growth"]
    row, made, notes = checked("assert_warm", [GROWS, QUIET])  # one call's churn, or a last growth
    assert made == 2 and row.not_warm == [] and "allocator_growth on the check call" in notes[0]
    row, made, notes = checked("assert_warm", [GROWS], ignored=("allocator_growth",))
    assert made == 1 and row.not_warm == [] and row.fired == ["allocator_growth"]


def test_result_table_and_lookup():
    r = warm.WarmupResult("warmup", "DemoLM", "cpu", [book([compile_entry()], COLD, ns=2_050_000_000), book()])
    r.rows[1].shape = (1, 16)
    text = str(r)
    assert text.splitlines()[0].startswith("warmup of DemoLM on cpu: 2 shapes, 2.06 s in all")
    assert "(1, 8)" in text and "jit_compile 2000.0 ms" in text and "nothing one-time" in text
    assert r.row((1, 16)) is r.rows[1] and r.row("1,8") is r.rows[0]
    assert r.paid() == {"jit_compile": 2000.0} and not r.warm
    assert r.to_dict()["rows"][0]["shape"] == [1, 8]
    with pytest.raises(KeyError):
        r.row((1, 32))


def test_not_warm_error_names_each_shape_and_cause():
    reason = "0/0: tensor 'ids' size mismatch at index 1. expected 8, actual 32"
    bad = book([compile_entry(reason=reason)], COLD)
    bad.shape = (1, 32)
    r = warm.WarmupResult("assert_warm", "DemoLM", "cpu", [book(), bad])
    err = NotWarmError(warm.not_warm_message(r, [(bad, bad.fired)]), r)
    assert isinstance(err, WarmprofError) and err.exit_code == 7 and err.result is r
    msg = str(err)
    assert "at 1 of 2 shapes" in msg and "(1, 32): jit_compile 2000.0 ms" in msg and reason in msg

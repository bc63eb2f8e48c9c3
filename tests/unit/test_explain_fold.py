"""--explain's fold (traces/explain.py): probe verdicts booked on the (module, op) rows, never past a
row's own residual, and the report's totals and shares kept consistent."""

import pytest
from factories import trace_report

from warmprof.traces.explain import apply, fold

GELU = {"op": "aten.gelu.default", "args": [{"tensor": [1, 64, 256], "dtype": "float32"}], "kwargs": {}}
ADDMM_A = {"op": "aten.addmm.default", "args": [{"tensor": [128], "dtype": "float32"},
                                                 {"tensor": [64, 128], "dtype": "float32"}], "kwargs": {}}
ADDMM_B = {"op": "aten.addmm.default", "args": [{"tensor": [256], "dtype": "float32"},
                                                 {"tensor": [64, 256], "dtype": "float32"}], "kwargs": {}}


def rows():
    return [
        {"module": "L0.act", "ms": 0.5, "op": "aten.gelu.default", "calls": 1, "index": 10, "call": GELU},
        {"module": "L1.act", "ms": 0.05, "op": "aten.gelu.default", "calls": 1, "index": 30, "call": GELU},
        {"module": "L0.q", "ms": 0.8, "op": "aten.addmm.default", "calls": 1, "index": 2, "call": ADDMM_A},
        {"module": "L0.k", "ms": 0.3, "op": "aten.addmm.default", "calls": 1, "index": 4, "call": ADDMM_A},
        {"module": "L0.up", "ms": 0.4, "op": "aten.addmm.default", "calls": 1, "index": 8, "call": ADDMM_B},
        {"module": "L0", "ms": 0.9},  # module code: never folded
    ]


def verdict(op, cause, cold, shape=None):
    return {"op": op, "verdict": cause, "cold_excess_ms": cold, "shape_excess_ms": shape}


def test_once_per_process_goes_to_the_ops_first_site_only_capped_by_its_residual():
    r = rows()
    (f,) = fold(r, [verdict("aten.gelu.default", "runtime_init", 0.7)])
    assert (f.cause, f.ms, f.sites, f.module) == ("runtime_init", pytest.approx(0.5), 1, "L0.act")  # capped at 0.5
    assert r[0]["inferred"] == {"cause": "runtime_init", "ms": pytest.approx(0.5)}
    assert "inferred" not in r[1]  # the second gelu site paid nothing the probe explains


def test_keyed_on_shape_goes_to_each_new_signature():
    r = rows()
    (f,) = fold(r, [verdict("aten.addmm.default", "jit_compile", 0.6, 0.25)])
    # first site (index 2): op-cold 0.6; L0.k repeats ADDMM_A: nothing; L0.up is a new shape: 0.25
    assert r[2]["inferred"]["ms"] == pytest.approx(0.6)
    assert "inferred" not in r[3]
    assert r[4]["inferred"]["ms"] == pytest.approx(0.25)
    assert (f.cause, f.sites) == ("jit_compile", 2) and f.ms == pytest.approx(0.85)


def test_nothing_found_too_noisy_and_module_code_are_left_alone():
    r = rows()
    assert fold(r, [verdict("aten.gelu.default", "none", 0.7), verdict("aten.addmm.default", "too_noisy", 0.2)]) == []
    assert not any("inferred" in row for row in r)
    # a verdict for an op no row has
    assert fold(r, [verdict("aten.tanh.default", "runtime_init", 1.0)]) == []


def test_apply_keeps_the_report_consistent():
    rep = trace_report({"jit_compile": 1.0}, unattributed=3.0)
    rep.unattributed_where = rows()
    before_attr, before_un = rep.attributed_ms, rep.unattributed_ms
    folded = apply(rep, [verdict("aten.gelu.default", "runtime_init", 0.7),
                         verdict("aten.addmm.default", "jit_compile", 0.6, 0.25)], wall_s=3.5)
    added = sum(f.ms for f in folded)
    assert added == pytest.approx(0.5 + 0.85)
    assert rep.attributed_ms == pytest.approx(before_attr + added)
    assert rep.unattributed_ms == pytest.approx(before_un - added)
    probe_rows = [c for c in rep.causes if c.source == "probe"]
    assert {c.cause for c in probe_rows} == {"runtime_init", "jit_compile"}
    assert all(c.evidence == "inferred" for c in probe_rows)
    for c in rep.causes:
        assert c.share == pytest.approx(c.ms / max(rep.excess_ms, rep.attributed_ms))
    assert rep.instruments["op_probes"]["folded_ms"] == pytest.approx(added)
    assert any("--explain: 2 op(s) probed" in n for n in rep.notes)
    again = type(rep).from_json(rep.to_json())  # the folded report still validates and loads
    assert again.unattributed_where == rep.unattributed_where


def test_advice_names_the_ops_the_op_view_found_or_sends_to_the_op_view():
    from warmprof.traces.advice import advise

    rep = trace_report({"jit_compile": 0.2}, unattributed=3.0)
    rep.unattributed_where = rows()
    text = " ".join(advise(rep))
    assert "warmprof probe --ops addmm,gelu" in text or "warmprof probe --ops gelu,addmm" in text
    rep.unattributed_where = [{"module": "L0", "ms": 2.0}]  # no op view
    assert "warmprof trace --explain" in " ".join(advise(rep))


def test_what_the_trace_books_in_a_first_call_is_not_added_again():
    from warmprof.traces.explain import Prices, booked_by_trace_ms

    prices = Prices(fault_ns=10_000.0, file_ns_per_byte=0.1, file_faults_per_byte=1 / 4096)
    first_call = {"faults": 30, "file_bytes": 40960, "onednn_create_ms": 0.2}  # 10 of the faults are file pages
    booked = booked_by_trace_ms(first_call, prices)
    assert booked == pytest.approx(0.2 + 40960 * 0.1 / 1e6 + 20 * 0.01)
    r = rows()
    v = dict(verdict("aten.gelu.default", "runtime_init", 0.7), first_call=first_call)
    (f,) = fold(r, [v], prices)
    assert f.ms == pytest.approx(0.7 - booked)
    # a probe whose first call holds nothing beyond what the trace books: nothing inferred
    v = dict(verdict("aten.gelu.default", "runtime_init", 0.1), first_call=first_call)
    assert fold(rows(), [v], prices) == []
    assert Prices.of({"fault_cost_ns": 900.0, "unusable": {"first_touch": "spread too wide"}}).fault_ns == 0.0


def test_the_fold_never_takes_more_than_the_unattributed_time_in_all():
    rep = trace_report({"jit_compile": 1.0}, unattributed=0.2)
    rep.unattributed_where = rows()
    folded = apply(rep, [verdict("aten.gelu.default", "runtime_init", 0.7),
                         verdict("aten.addmm.default", "jit_compile", 0.6, 0.25)])
    assert sum(f.ms for f in folded) == pytest.approx(0.2)
    assert rep.unattributed_ms == pytest.approx(0.0, abs=1e-9)
    assert rep.attributed_ms <= rep.excess_ms + 1e-9
    # booked in pass order: the earliest site (addmm at index 2) first
    assert rows_inferred(rep) == {"L0.q": pytest.approx(0.2)}


def rows_inferred(rep):
    return {w["module"]: w["inferred"]["ms"] for w in rep.unattributed_where if "inferred" in w}


def test_rows_that_say_where_the_ops_first_call_was_decide():
    r = rows()
    r[0]["first_of_op"], r[1]["first_of_op"] = False, True  # the pass ran L1.act's gelu first
    r[1]["ms"] = 0.3
    fold(r, [verdict("aten.gelu.default", "runtime_init", 0.7)])
    assert "inferred" not in r[0] and r[1]["inferred"]["ms"] == pytest.approx(0.3)
    r = rows()
    for w in r[2:5]:
        w["first_of_op"], w["new_signature"] = w["index"] == 2, w["module"] != "L0.k"
    fold(r, [verdict("aten.addmm.default", "jit_compile", 0.6, 0.25)])
    assert [w.get("inferred", {}).get("ms") for w in r[2:5]] == [pytest.approx(0.6), None, pytest.approx(0.25)]


def test_new_shape_figures_lose_what_the_trace_books_in_each_new_shape():
    from warmprof.traces.explain import Prices

    v = dict(verdict("aten.addmm.default", "jit_compile", 0.6, 0.25),
             variants=[{"first_ms": 0.35, "steady_ms": 0.05, "first_call": {"onednn_create_ms": 0.2}},
                       {"first_ms": 0.40, "steady_ms": 0.05, "first_call": {"onednn_create_ms": 0.2}},
                       {"first_ms": 0.45, "steady_ms": 0.05, "first_call": {"onednn_create_ms": 0.2}}])
    r = rows()
    fold(r, [v], Prices())
    assert r[4]["inferred"]["ms"] == pytest.approx(0.15)  # median of 0.10, 0.15, 0.20


def test_off_the_cpu_verdicts_are_kept_but_not_folded():
    rep = trace_report({"jit_compile": 1.0}, unattributed=3.0, device="cuda:0")
    rep.unattributed_where = rows()
    before = rep.unattributed_ms
    assert apply(rep, [verdict("aten.gelu.default", "runtime_init", 0.7)]) == []
    assert rep.unattributed_ms == before and rep.instruments["op_probes"]["verdicts"]
    assert any("not folded" in n for n in rep.notes)


def test_a_report_is_folded_once():
    from warmprof.errors import InputError

    rep = trace_report({"jit_compile": 1.0}, unattributed=3.0)
    rep.unattributed_where = rows()
    apply(rep, [verdict("aten.gelu.default", "runtime_init", 0.7)])
    with pytest.raises(InputError, match="already has op probe verdicts"):
        apply(rep, [verdict("aten.gelu.default", "runtime_init", 0.7)])


def test_advice_names_only_ops_the_probe_takes_by_name():
    from warmprof.traces.advice import advise

    rep = trace_report({"jit_compile": 0.2}, unattributed=3.0)
    rep.unattributed_where = [{"module": "L0", "ms": 1.0, "op": "aten.t.default", "calls": 1, "index": 0},
                              {"module": "L0", "ms": 0.5, "op": "aten.gelu.default", "calls": 1, "index": 1}]
    text = " ".join(advise(rep))
    assert "warmprof probe --ops gelu" in text and "--ops t" not in text and "--ops gelu,t" not in text


def _warm_report(rows_ms, shape=(2, 64), unattributed=None):
    """A warm process's trace: its rows, and an unattributed time that is their signed sum unless given."""
    un = sum(rows_ms.values()) if unattributed is None else unattributed
    rep = trace_report({"jit_compile": 1.0}, unattributed=un, shape=shape)
    rep.unattributed_where = [{"module": m, "ms": ms, **({"op": op} if op else {})} for (m, op), ms in rows_ms.items()]
    return rep


def test_warm_processes_book_warmprofs_own_cost_then_what_a_process_pays_once():
    from warmprof.traces.explain import fold_warm_processes

    rep = trace_report({"jit_compile": 1.0}, unattributed=3.0)
    rep.unattributed_where = rows()  # c: gelu 0.5, gelu 0.05, addmm 0.8, 0.3, 0.4, code 0.9  (sum 2.95)
    # the model warm at this very shape: module code still paid 0.3 and addmm at L0.q 0.1 (warmprof's own)
    same = _warm_report({("L0", ""): 0.3, ("L0.q", "aten.addmm.default"): 0.1}, shape=(1, 64))
    # warm at another shape: module code 0.35, addmm at L0.q 0.7 (keyed on shape), the rest nothing
    other = _warm_report({("L0", ""): 0.35, ("L0.q", "aten.addmm.default"): 0.7})
    before = rep.unattributed_ms
    own, once = fold_warm_processes(rep, same, other)
    assert (own.cause, own.ms) == ("profiler_overhead", pytest.approx(0.4))
    # per row min(c - own, c - o): 0.5 + 0.05 + min(0.7, 0.1) + 0.3 + 0.4 + min(0.6, 0.55) = 1.9,
    # within the signed cap 3.0 - 1.05
    assert (once.cause, once.ms) == ("runtime_init", pytest.approx(1.9))
    by = {(w["module"], w.get("op", "")): w for w in rep.unattributed_where}
    assert by[("L0", "")]["warm_own_ms"] == pytest.approx(0.3)
    assert by[("L0", "")]["warm_process_ms"] == pytest.approx(0.55)
    assert by[("L0.q", "aten.addmm.default")]["warm_process_ms"] == pytest.approx(0.1)  # 0.8 - 0.7
    assert rep.unattributed_ms == pytest.approx(before - 0.4 - 1.9)
    assert {c.source for c in rep.causes if c.evidence == "inferred"} == {"warm_same_shape", "warm_process"}
    assert rep.attributed_ms + rep.unattributed_ms == pytest.approx(rep.excess_ms)
    # the probes then fold only what the warm processes left of a row
    fold(rep.unattributed_where, [verdict("aten.addmm.default", "jit_compile", 5.0, 5.0)])
    assert by[("L0.q", "aten.addmm.default")]["inferred"]["ms"] == pytest.approx(0.8 - 0.1 - 0.1)


def test_the_warm_processes_totals_are_capped_by_the_whole_traces_signed_figures():
    from warmprof.traces.explain import fold_warm_processes

    rep = _warm_report({("A", ""): 1.0, ("B", ""): 0.5}, shape=(1, 64))
    # the other-shape process paid less at A but 2 ms at a row this trace does not have: in all it paid more
    assert fold_warm_processes(rep, None, _warm_report({("A", ""): 0.2, ("D", ""): 2.0})) == []
    # the same-shape process: rows positive at A, but its whole first pass over its re-run only 0.1 ms
    rep = _warm_report({("A", ""): 1.0, ("B", ""): 0.5}, shape=(1, 64))
    (own,) = fold_warm_processes(rep, _warm_report({("A", ""): 0.6}, shape=(1, 64), unattributed=0.1), None)
    assert own.ms == pytest.approx(0.1)


def test_what_the_model_still_paid_at_its_second_call_is_not_warmprofs():
    from warmprof.traces.explain import fold_warm_processes

    rep = _warm_report({("A", ""): 1.0}, shape=(1, 64))
    rep.unattributed_where[0]["rerun_ms"] = 0.4  # here the model's second call (the re-run) still paid 0.4
    same = _warm_report({("A", ""): 0.5}, shape=(1, 64))  # there its second call was the traced first pass
    (own,) = fold_warm_processes(rep, same, None)
    assert own.ms == pytest.approx(0.1)


def test_warm_processes_book_nothing_when_they_paid_as_much():
    from warmprof.traces.explain import fold_warm_processes

    rep = trace_report({"jit_compile": 1.0}, unattributed=3.0)
    rep.unattributed_where = rows()
    other = _warm_report({(w["module"], w.get("op", "")): w["ms"] + 0.1 for w in rows()})
    assert fold_warm_processes(rep, None, other) == []
    assert fold_warm_processes(rep, _warm_report({}), None) == []  # warm at this shape: nothing left at all
    assert not any(c.source.startswith("warm") for c in rep.causes)


def test_warm_processes_never_book_past_the_unattributed_time():
    from warmprof.traces.explain import fold_warm_processes

    rep = trace_report({"jit_compile": 1.0}, unattributed=0.5)
    rep.unattributed_where = rows()
    (f,) = fold_warm_processes(rep, None, _warm_report({}))
    assert f.ms == pytest.approx(0.5) and rep.unattributed_ms == pytest.approx(0.0, abs=1e-9)


def test_the_probe_does_not_book_again_what_a_warm_process_booked_as_paid_once():
    r = rows()
    r[0]["warm_process_ms"] = 0.3  # gelu's first site: 0.3 of its 0.5 already booked as paid once
    fold(r, [verdict("aten.gelu.default", "runtime_init", 0.35)])
    assert r[0]["inferred"]["ms"] == pytest.approx(0.05)  # 0.35 - 0.3, within the 0.2 left

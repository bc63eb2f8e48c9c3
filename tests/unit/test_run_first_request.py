"""The first request's excess split across the tree (runs/requests.py), on synthetic records: a main
process whose requests wait on an engine process's steps, which wait on a model process's calls."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from warmprof.errors import ReportError
from warmprof.report.run import RunReport
from warmprof.runs import requests

MS = 1_000_000


def _call(label, key, start, end, delay=0.0):
    return {"label": label, "key": key, "start_ns": int(start * MS), "end_ns": int(end * MS),
            "run_delay_ns": int(delay * MS), "cpu_ns": 0, "tid": 1}


def _tree():
    main = [_call("vllm request", "1 prompt", 0, 60, delay=3), _call("vllm request", "1 prompt", 100, 130, delay=1),
            _call("vllm request", "1 prompt", 200, 232, delay=1)]
    core = [_call("vllm engine step", "-", 10, 40, delay=5), _call("vllm engine step", "-", 102, 110),
            _call("vllm engine step", "-", 202, 211)]
    worker = [_call("vllm execute_model", "prefill 16", 12, 35), _call("vllm execute_model", "prefill 16", 103, 108),
              _call("vllm execute_model", "prefill 16", 203, 209)]
    records = [SimpleNamespace(pid=1, meta={"calls": main}), SimpleNamespace(pid=2, meta={"calls": core}),
               SimpleNamespace(pid=3, meta={"calls": worker})]
    # each process's first calls as first_calls attributed them (against their own later calls)
    processes = {
        1: {"pid": 1, "role": "main", "calls": []},
        2: {"pid": 2, "role": "VLLM::EngineCore", "calls": [
            {"label": "vllm engine step", "key": "-", "first_ms": 30.0, "steady_ms": 8.5, "excess_ms": 21.5,
             "causes": [{"cause": "wait", "ms": 17.0, "evidence": "measured"},
                        {"cause": "cpu_contention", "ms": 4.5, "evidence": "measured"}]}]},
        3: {"pid": 3, "role": "VLLM::Worker", "calls": [
            {"label": "vllm execute_model", "key": "prefill 16", "first_ms": 23.0, "steady_ms": 5.5, "excess_ms": 17.5,
             "causes": [{"cause": "disk_read", "ms": 10.0, "evidence": "measured"}]}]},
    }
    return records, processes, {1: [2], 2: [3]}


def test_the_first_requests_excess_is_cut_by_the_deepest_call_and_adds_up():
    records, processes, children = _tree()
    q = requests.first_request(records, processes, children, 1, "vllm request")
    # 60 ms against the median of 30 and 32: the two middle later requests' parts, averaged
    assert q["first_ms"] == pytest.approx(60.0) and q["steady_ms"] == pytest.approx(31.0)
    assert q["excess_ms"] == pytest.approx(29.0) and q["later"] == 2
    parts = {(r["pid"], r["part"]): r for r in q["by_part"]}
    worker, core, outside = parts[(3, "vllm execute_model")], parts[(2, "vllm engine step")], parts[(1, requests.OUTSIDE)]
    # the worker's call owns its 23 ms; the engine's step what its worker call leaves (30 - 23); the rest is
    # the request's own (60 - 30); the steady request's the same cut of each later window
    assert (worker["first_ms"], worker["steady_ms"], worker["excess_ms"]) == pytest.approx((23.0, 5.5, 17.5))
    assert (core["first_ms"], core["steady_ms"], core["excess_ms"]) == pytest.approx((7.0, 3.0, 4.0))
    assert (outside["first_ms"], outside["steady_ms"], outside["excess_ms"]) == pytest.approx((30.0, 22.5, 7.5))
    assert sum(r["excess_ms"] for r in q["by_part"]) == pytest.approx(q["excess_ms"])
    # the worker's part: its first call's causes; the engine's step: no wait (that is the worker's part), its
    # contention capped at the part's 4 ms; the request's own part: its extra run delay (3 ms less 1)
    assert [(c["cause"], c["ms"]) for c in worker["causes"]] == [("disk_read", pytest.approx(10.0))]
    assert worker["unattributed_ms"] == pytest.approx(7.5) and worker["first_calls"][0]["key"] == "prefill 16"
    assert [(c["cause"], c["ms"]) for c in core["causes"]] == [("cpu_contention", pytest.approx(4.0))]
    assert core["unattributed_ms"] == pytest.approx(0.0)
    assert [(c["cause"], c["ms"]) for c in outside["causes"]] == [("cpu_contention", pytest.approx(2.0))]
    assert q["by_cause"] == {"disk_read": pytest.approx(10.0), "cpu_contention": pytest.approx(6.0)}
    assert q["unattributed_ms"] == pytest.approx(13.0)
    assert q["explained_share"] == pytest.approx(16.0 / 29.0)


def test_no_later_request_no_split_and_a_split_that_does_not_add_up_is_refused():
    records, processes, children = _tree()
    records[0].meta["calls"] = records[0].meta["calls"][:1]
    assert requests.first_request(records, processes, children, 1, "vllm request") is None
    # the engine process killed at the end: its record is its last checkpoint's (at 150 ms), so the later
    # request at 200 ms is left out of the steady figure (its steps are not known), and with none left, no split
    records, processes, children = _tree()
    records[1].meta.update({"end": requests.CHECKPOINT_END, "t_end_ns": 150 * MS})
    q = requests.first_request(records, processes, children, 1, "vllm request")
    assert q["later"] == 1 and q["steady_ms"] == pytest.approx(30.0)
    records[1].meta["t_end_ns"] = 90 * MS
    assert requests.first_request(records, processes, children, 1, "vllm request") is None
    records, processes, children = _tree()
    q = requests.first_request(records, processes, children, 1, "vllm request")
    report = RunReport(command=["x"], duration_ms=300.0, processes=[], first_request=q)
    assert RunReport.from_dict(report.to_dict()).first_request["excess_ms"] == pytest.approx(29.0)
    bad = dict(q, by_part=q["by_part"][:-1])
    with pytest.raises(ReportError, match="first_request: its parts' excesses add up to"):
        RunReport.from_dict(RunReport(command=["x"], duration_ms=300.0, processes=[], first_request=bad).to_dict())
    bad = dict(q, unattributed_ms=q["unattributed_ms"] + 5.0)
    with pytest.raises(ReportError, match="first_request: causes, warmprof's own and unattributed add up to"):
        RunReport.from_dict(RunReport(command=["x"], duration_ms=300.0, processes=[], first_request=bad).to_dict())


def test_two_first_calls_in_one_part_book_one_entry_per_cause():
    records, processes, children = _tree()
    # a first decode after the first prefill, inside the same engine step, with a cause of its own and one
    # the prefill has too
    records[2].meta["calls"] += [_call("vllm execute_model", "decode 1", 36, 38),
                                 _call("vllm execute_model", "decode 1", 108.5, 109), _call("vllm execute_model", "decode 1", 209.5, 210)]
    processes[3]["calls"][0]["causes"].append({"cause": "cpu_contention", "ms": 1.0, "evidence": "measured"})
    processes[3]["calls"].append({"label": "vllm execute_model", "key": "decode 1", "first_ms": 2.0, "steady_ms": 0.5,
                                  "excess_ms": 1.5, "causes": [{"cause": "cpu_contention", "ms": 0.5, "evidence": "measured"}]})
    q = requests.first_request(records, processes, children, 1, "vllm request")
    worker = next(r for r in q["by_part"] if r["pid"] == 3)
    assert (worker["first_ms"], worker["steady_ms"]) == pytest.approx((25.0, 6.0))
    assert [(c["cause"], c["ms"]) for c in worker["causes"]] == [("disk_read", pytest.approx(10.0)),
                                                                  ("cpu_contention", pytest.approx(1.5))]
    assert [e["key"] for e in worker["first_calls"]] == ["prefill 16", "decode 1"]
    assert sum(r["excess_ms"] for r in q["by_part"]) == pytest.approx(q["excess_ms"])


def test_a_parts_later_calls_extra_wait_for_a_cpu_is_booked_beside_its_first_calls():
    # the first request's later decodes (not the first at their key) waited 2.5 ms for a CPU, the steady
    # requests' none: the part books it as contention (measured), beside what its first calls booked, and
    # never twice: the first prefill's own 1 ms of contention is taken off the part's extra wait
    records, processes, children = _tree()
    records[2].meta["calls"][0]["run_delay_ns"] = 1 * MS
    records[2].meta["calls"] += [_call("vllm execute_model", "decode 1", 36, 37.5, delay=0.5),
                                 _call("vllm execute_model", "decode 1", 37.5, 39.5, delay=2.0),
                                 _call("vllm execute_model", "decode 1", 108.5, 109), _call("vllm execute_model", "decode 1", 209.5, 210)]
    processes[3]["calls"][0]["causes"].append({"cause": "cpu_contention", "ms": 1.0, "evidence": "measured"})
    q = requests.first_request(records, processes, children, 1, "vllm request")
    worker = next(r for r in q["by_part"] if r["pid"] == 3)
    assert (worker["first_ms"], worker["steady_ms"]) == pytest.approx((26.5, 6.0))
    booked = {c["cause"]: c["ms"] for c in worker["causes"]}
    # 3.5 ms of run delay in the first window, none steady, 1 ms of it the first prefill's: 2.5 more
    assert booked == {"disk_read": pytest.approx(10.0), "cpu_contention": pytest.approx(3.5)}, worker["causes"]
    assert worker["unattributed_ms"] == pytest.approx(20.5 - 13.5)
    assert sum(r["excess_ms"] for r in q["by_part"]) == pytest.approx(q["excess_ms"])
    # its later calls' share of the excess: the part's 20.5 ms less the first prefill's own 17.5; the
    # engine's step holds the worker's calls (not the deepest): no such figure there
    assert worker["later_ms"] == pytest.approx(3.0)
    assert "later_ms" not in next(r for r in q["by_part"] if r["pid"] == 2)
    procs = [{"pid": p, "parent": {2: 1, 3: 2}.get(p), "role": processes[p]["role"], "start_ms": 0.0, "end_ms": 300.0,
              "phases": []} for p in (1, 2, 3)]
    text = str(RunReport(command=["x"], duration_ms=300.0, processes=procs, first_request=q))
    assert "unattributed 7.00 ms (+3.00 ms of the excess in its later calls, not the first at their key)" in text, text
    # no extra wait: nothing more than the first calls' own
    records, processes, children = _tree()
    q = requests.first_request(records, processes, children, 1, "vllm request")
    worker = next(r for r in q["by_part"] if r["pid"] == 3)
    assert [c["cause"] for c in worker["causes"]] == ["disk_read"], worker["causes"]


def test_one_cause_from_two_sources_in_a_call_is_booked_whole():
    # a first prefill's disk reads outside oneDNN's creations and inside them are two entries of one cause
    # (sources storage and storage_in:onednn): the part books both (it kept only the last, 0.5 of 3.5 ms)
    records, processes, children = _tree()
    processes[3]["calls"][0]["causes"] = [{"cause": "disk_read", "ms": 3.0, "evidence": "measured", "source": "storage"},
                                          {"cause": "jit_compile", "ms": 1.0, "evidence": "measured", "source": "onednn"},
                                          {"cause": "disk_read", "ms": 0.5, "evidence": "measured", "source": "storage_in:onednn"}]
    q = requests.first_request(records, processes, children, 1, "vllm request")
    worker = next(r for r in q["by_part"] if r["pid"] == 3)
    assert [(c["cause"], c["ms"]) for c in worker["causes"]] == [("disk_read", pytest.approx(3.5)),
                                                                  ("jit_compile", pytest.approx(1.0))]
    # how it knows: the sources behind each (the text says them)
    assert [c["sources"] for c in worker["causes"]] == [["storage", "storage_in:onednn"], ["onednn"]]


def test_the_text_says_each_parts_excess_and_the_share_with_a_cause():
    records, processes, children = _tree()
    q = requests.first_request(records, processes, children, 1, "vllm request")
    procs = [{"pid": p, "parent": {2: 1, 3: 2}.get(p), "role": processes[p]["role"], "start_ms": 0.0, "end_ms": 300.0,
              "phases": []} for p in (1, 2, 3)]
    text = str(RunReport(command=["x"], duration_ms=300.0, processes=procs, first_request=q))
    assert ("first vllm request across the tree: 60.0 ms vs steady 31.0 ms (2 later): excess 29.0 ms, "
            "55% of it to causes") in text, text
    assert "VLLM::Worker: vllm execute_model 23.0 ms vs 5.50 ms: +17.50 ms = disk_read 10.0 ms (measured), " \
           "unattributed 7.50 ms" in text, text
    assert "main: between steps 30.0 ms vs 22.5 ms: +7.50 ms = cpu_contention 2.00 ms (measured: run_queue)" in text, text


def test_the_requests_own_part_books_the_requests_own_causes_without_its_wait():
    records, processes, children = _tree()
    processes[1]["calls"] = [{"label": "vllm request", "key": "1 prompt", "first_ms": 60.0, "steady_ms": 31.0,
                              "excess_ms": 29.0, "causes": [{"cause": "wait", "ms": 20.0, "evidence": "measured"},
                                                            {"cause": "runtime_init", "ms": 3.0, "evidence": "measured"},
                                                            {"cause": "cpu_contention", "ms": 2.0, "evidence": "measured"}]}]
    q = requests.first_request(records, processes, children, 1, "vllm request")
    outside = next(r for r in q["by_part"] if r["part"] == requests.OUTSIDE)
    # its wait is the engine's and the worker's parts (booked there); an import in the request is its own
    assert [(c["cause"], c["ms"]) for c in outside["causes"]] == [("runtime_init", pytest.approx(3.0)),
                                                                   ("cpu_contention", pytest.approx(2.0))]
    assert outside["unattributed_ms"] == pytest.approx(2.5)
    # one process alone (a generate script with --watch): the request is the only part, and its wait its own
    alone = requests.first_request(records[:1], {1: processes[1]}, {}, 1, "vllm request")
    (part,) = alone["by_part"]
    assert part["excess_ms"] == pytest.approx(29.0)
    assert {c["cause"]: c["ms"] for c in part["causes"]} == {"wait": pytest.approx(20.0), "runtime_init": pytest.approx(3.0),
                                                               "cpu_contention": pytest.approx(2.0)}


def test_a_call_nested_in_the_same_process_is_not_booked_twice():
    # one process (vLLM's in-process executor, or nested --watch functions): a request 0-60 ms whose
    # attribution holds a 20 ms compile, and a forward 10-40 ms inside it that did that compile
    main = [_call("request", "k", 0, 60), _call("forward", "x", 10, 40),
            _call("request", "k", 100, 130), _call("forward", "x", 105, 120),
            _call("request", "k", 200, 230), _call("forward", "x", 205, 220)]
    records = [SimpleNamespace(pid=1, meta={"calls": main})]
    processes = {1: {"pid": 1, "role": "main", "calls": [
        {"label": "request", "key": "k", "first_ms": 60.0, "steady_ms": 30.0, "excess_ms": 30.0,
         "causes": [{"cause": "jit_compile", "ms": 20.0, "evidence": "measured"},
                    {"cause": "wait", "ms": 4.0, "evidence": "measured"}]},
        {"label": "forward", "key": "x", "first_ms": 30.0, "steady_ms": 15.0, "excess_ms": 15.0,
         "causes": [{"cause": "jit_compile", "ms": 20.0, "evidence": "measured"}]}]}}
    q = requests.first_request(records, processes, {}, 1, "request")
    parts = {r["part"]: r for r in q["by_part"]}
    assert parts["forward"]["excess_ms"] == pytest.approx(15.0) and parts[requests.OUTSIDE]["excess_ms"] == pytest.approx(15.0)
    # the forward's part books the compile (capped at its 15 ms); the request's own part not again, and it keeps
    # its own wait: no other process's call lies inside it
    assert [(c["cause"], c["ms"]) for c in parts["forward"]["causes"]] == [("jit_compile", pytest.approx(15.0))]
    assert [(c["cause"], c["ms"]) for c in parts[requests.OUTSIDE]["causes"]] == [("wait", pytest.approx(4.0))]
    assert q["by_cause"] == {"jit_compile": pytest.approx(15.0), "wait": pytest.approx(4.0)}


def test_the_parts_of_many_calls_are_cut_as_by_hand():
    # calls that straddle the window's ends, equal depths (the later start owns), an odd count of later requests
    calls = [(1, -5, 10, 2, "a"), (1, 5, 20, 3, "b"), (2, 8, 12, 4, "c"), (1, 50, 120, 2, "a")]
    got = requests._totals(requests._segments((0, 100), calls, 1))
    # 0-5 a; 5-8 b (later start); 8-12 c (deeper); 12-20 b; 20-50 outside; 50-100 a
    assert got == {(2, "a"): 55, (3, "b"): 11, (4, "c"): 4, (1, requests.OUTSIDE): 30}
    assert sum(got.values()) == 100
    records, processes, children = _tree()
    records[0].meta["calls"].append(_call("vllm request", "1 prompt", 300, 340))
    q = requests.first_request(records, processes, children, 1, "vllm request")
    assert q["later"] == 3 and q["steady_ms"] == pytest.approx(32.0)  # the median of 30, 32 and 40
    assert sum(r["excess_ms"] for r in q["by_part"]) == pytest.approx(q["excess_ms"])


def _own(*spans):
    return [(int(a * MS), int(b * MS)) for a, b in spans]


def test_warmprofs_own_time_in_the_first_request_is_its_own_line_and_on_neither_side_of_the_share():
    records, processes, children = _tree()
    # the worker's first call holds 2 ms of warmprof's own spans, each later one 0.5 ms; the request's own
    # part 1 ms in the first window (none later); an own span of another thread is not the part's
    # the worker's own 1 ms after its call (its record of it), inside the engine's step, is the step's part's; the
    # main process's own span during the engine's step runs beside it (not the step's)
    own = {3: {1: _own((20, 22), (36, 37), (104, 104.5), (204, 204.5)), 7: _own((13, 30))},
           1: {1: _own((20, 21), (50, 51))}}
    q = requests.first_request(records, processes, children, 1, "vllm request", own_spans=own)
    parts = {(r["pid"], r["part"]): r for r in q["by_part"]}
    worker, core, outside = (parts[(3, "vllm execute_model")], parts[(2, "vllm engine step")],
                             parts[(1, requests.OUTSIDE)])
    assert (worker["own_ms"], core["own_ms"], outside["own_ms"]) == pytest.approx((1.5, 1.0, 1.0))
    assert ("profiler_overhead", pytest.approx(1.5)) in [(c["cause"], c["ms"]) for c in worker["causes"]]
    assert worker["unattributed_ms"] == pytest.approx(17.5 - 10.0 - 1.5)
    # the engine step's part: 4 ms of excess, warmprof's own 1 ms measured, its contention (4 ms) scaled to the 3 left
    assert sorted((c["cause"], c["ms"]) for c in core["causes"]) == [
        ("cpu_contention", pytest.approx(3.0)), ("profiler_overhead", pytest.approx(1.0))]
    # the own line is apart from the model's causes and the share is of the rest
    assert q["by_cause"] == {"disk_read": pytest.approx(10.0), "cpu_contention": pytest.approx(5.0)}
    assert q["own_ms"] == pytest.approx(3.5)
    assert q["excess_ms"] == pytest.approx(sum(q["by_cause"].values()) + q["own_ms"] + q["unattributed_ms"])
    assert q["explained_share"] == pytest.approx(15.0 / (29.0 - 3.5))
    procs = [{"pid": p, "parent": {2: 1, 3: 2}.get(p), "role": processes[p]["role"], "start_ms": 0.0, "end_ms": 300.0,
              "phases": []} for p in (1, 2, 3)]
    text = str(RunReport(command=["x"], duration_ms=300.0, processes=procs, first_request=q))
    assert "excess 29.0 ms (warmprof's own 3.50 ms of it), 59% of the rest to causes" in text, text
    assert "warmprof's own 3.50 ms, unattributed 10.5 ms" in text, text
    assert "warmprof's own 1.50 ms (measured: own_spans)" in text, text
    # the JSON keeps it and its load checks the sum with it (and refuses one without it)
    report = RunReport(command=["x"], duration_ms=300.0, processes=procs, first_request=q)
    assert RunReport.from_json(report.to_json()).first_request["own_ms"] == pytest.approx(3.5)
    with pytest.raises(ReportError, match="warmprof's own and unattributed add up to"):
        RunReport.from_dict(RunReport(command=["x"], duration_ms=300.0, processes=procs,
                                      first_request=dict(q, own_ms=0.0)).to_dict())
    # without own spans (or with less own time in the first window than in the steady ones) no own line
    own[3][1] = _own((20, 20.2), (104, 104.5), (204, 204.5))
    own[1][1] = _own((20, 21))
    q = requests.first_request(records, processes, children, 1, "vllm request", own_spans=own)
    assert q["own_ms"] == 0.0 and q["explained_share"] == pytest.approx(16.0 / 29.0)


def test_own_spans_are_read_per_thread_outermost_from_a_timeline():
    from warmprof.runs import assemble
    from warmprof.runs.agent import OWN_SPAN
    from warmprof.timeline import Timeline

    names = ["other", OWN_SPAN]
    recs = [(10, 0, 8, 1, 0, 0), (12, 0, 8, 1, 0, 0), (14, 1, 8, 1, 0, 0), (20, 1, 8, 1, 0, 0),  # nested: 10-20
            (15, 0, 0, 0, 0, 0), (16, 1, 0, 0, 0, 0),  # another name
            (30, 0, 8, 1, 0, 1), (35, 1, 8, 1, 0, 1), (40, 0, 8, 1, 0, 0), (41, 1, 8, 1, 0, 0)]
    rec = assemble.ProcRecord({"pid": 5, "os_tids": [100, 200]}, Timeline.from_records(recs, names), 0)
    assert assemble.own_spans(rec) == {100: [(10, 20), (40, 41)], 200: [(30, 35)]}


def test_a_collection_inside_an_own_span_is_not_warmprofs_too():
    """A garbage collection the agent's bookkeeping triggered is its own span (garbage_collection, booked
    by the engine): the own spans leave its time out, so it is not on the own line as well."""
    from warmprof.causes import GARBAGE_COLLECTION
    from warmprof.runs import assemble
    from warmprof.runs.agent import OWN_SPAN
    from warmprof.timeline import Timeline

    names = ["other", OWN_SPAN, "gc:gen0", "gc:gen2"]
    g = GARBAGE_COLLECTION
    recs = [(10, 0, 8, 1, 0, 0), (12, 0, g, 2, 0, 0), (14, 1, g, 2, 0, 0), (20, 1, 8, 1, 0, 0),  # own 10-20, gc 12-14
            (25, 0, g, 3, 0, 0), (28, 1, g, 3, 0, 0),  # a collection outside every own span: nothing to cut
            (30, 0, 8, 1, 0, 1), (31, 0, g, 2, 0, 1), (35, 1, 8, 1, 0, 1), (36, 1, g, 2, 0, 1),  # gc past the own end
            (40, 0, 8, 1, 0, 0), (41, 1, 8, 1, 0, 0)]
    rec = assemble.ProcRecord({"pid": 5, "os_tids": [100, 200]}, Timeline.from_records(recs, names), 0)
    assert assemble.own_spans(rec) == {100: [(10, 12), (14, 20), (40, 41)], 200: [(30, 31)]}

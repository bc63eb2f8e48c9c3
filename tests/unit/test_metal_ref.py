"""The Metal reference probe's parsing (probes/metal_ref.py) on synthetic native results, its runner
with a fake native module, and, off Apple, the real stub: off, with its reason, nothing left behind."""

from __future__ import annotations

import copy
import json
import os
import sys
import threading

import pytest

import warmprof
from warmprof import _native
from warmprof.errors import BackendError, InputError
from warmprof.probes.metal_ref import compile_band_ms, metal_reference, parse

# Realistic figures for an Apple-silicon GPU: the library compiles in tens of ms, a new pipeline in
# 1-96 ms, a re-build of a seen length from the cache in tens of us, a dispatch's GPU time in tens of us.
FIRST_BUILD = {16: (0.4e6, 12.0e6), 64: (0.5e6, 31.0e6), 256: (0.6e6, 95.0e6)}  # length -> (specialise, pipeline) ns
GPU_S = {16: 18e-6, 64: 35e-6, 256: 90e-6}


def raw_result(lengths=(16, 64, 256), repeats=4) -> dict:
    builds, dispatches, t = [], [], 5000.0  # mach seconds since boot
    for length in lengths:
        spec, pipe = FIRST_BUILD[length]
        builds.append({"length": length, "seen": False, "specialise_ns": int(spec), "pipeline_ns": int(pipe)})
        for i in range(repeats):
            commit = t
            start = commit + (80e-6 if i == 0 else 30e-6)
            end = start + GPU_S[length] * (1.3 if i == 0 else 1.0)
            done = end + 40e-6
            dispatches.append({"length": length, "index": i, "gpu_start_s": start, "gpu_end_s": end,
                               "host_commit_s": commit, "host_done_s": done, "host_ns": int((done - commit) * 1e9)})
            t = done + 1e-3
    for length in lengths:
        builds.append({"length": length, "seen": True, "specialise_ns": 30_000, "pipeline_ns": 25_000})
    return {"device": "Apple M4 Pro", "error": "", "device_ns": 21_000_000, "library_ns": 38_000_000,
            "kernel": "warmprof_softmax_8a3f01c2", "rows": 1024, "builds": builds, "dispatches": dispatches,
            "row_sums": {length: 1.0000002 for length in lengths}}


def _shape(result, length):
    return next(s for s in result.shapes if s.length == length)


def test_a_clean_result_becomes_one_row_per_length_with_compile_cache_and_dispatch_figures():
    result = parse(raw_result())
    assert result.notes == () and result.error == ""
    assert [s.length for s in result.shapes] == [16, 64, 256]
    assert result.library_ms == pytest.approx(38.0) and result.device_open_ms == pytest.approx(21.0)
    s = _shape(result, 64)
    assert s.specialise_ms == pytest.approx(0.5) and s.pipeline_ms == pytest.approx(31.0)
    assert s.compile_ms == pytest.approx(31.5)  # a new shape pays both
    assert s.rebuild_ms == pytest.approx(0.055) and s.cached is True
    # GPU time from seconds: 35 us steady, the first dispatch 1.3x
    assert s.steady_gpu_ms == pytest.approx(0.035) and s.first_gpu_ms == pytest.approx(0.0455)
    assert s.steady_host_ms > s.steady_gpu_ms and s.host_over_gpu > 1
    assert s.first_over_steady > 1  # the first dispatch waited longer in the queue and ran slower
    assert result.compile_band_ms == pytest.approx((12.4, 95.6))
    assert len(result.dispatches) == 12
    d = result.dispatches[0]
    assert d.queue_ms == pytest.approx(0.08) and d.host_over_gpu > 1


def test_to_dict_is_strict_json_and_text_names_every_length():
    result = parse(raw_result())
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["kind"] == "metal_reference" and data["compile_band_ms"] == pytest.approx([12.4, 95.6])
    assert [s["length"] for s in data["shapes"]] == [16, 64, 256] and len(data["dispatches"]) == 12
    text = result.text()
    assert "Apple M4 Pro" in text and "12.40-95.60 ms" in text
    for length in (16, 64, 256):
        assert any(line.split()[:1] == [str(length)] for line in text.splitlines())


def test_a_rebuild_as_slow_as_the_first_is_not_cached():
    raw = raw_result()
    for b in raw["builds"]:
        if b["seen"] and b["length"] == 16:
            b["pipeline_ns"] = 11_000_000
    s = _shape(parse(raw), 16)
    assert s.cached is False and s.rebuild_ms == pytest.approx(11.03)


def test_one_repeat_has_no_steady_figures():
    s = _shape(parse(raw_result(repeats=1)), 16)
    assert s.first_gpu_ms is not None
    assert s.steady_gpu_ms is None and s.first_over_steady is None and s.host_over_gpu is None


def test_a_gpu_end_before_its_start_is_left_out_with_a_note():
    raw = raw_result()
    d = raw["dispatches"][2]
    d["gpu_start_s"], d["gpu_end_s"] = d["gpu_end_s"], d["gpu_start_s"]
    result = parse(raw)
    (note,) = result.notes
    assert "GPU end before GPU start" in note and "length 16 #2" in note
    row = result.dispatches[2]
    assert row.gpu_ms is None and row.host_over_gpu is None and row.host_ms is not None
    assert _shape(result, 16).steady_gpu_ms == pytest.approx(0.018)  # from the other two


def test_zero_gpu_timestamps_say_there_were_none():
    raw = raw_result()
    for d in raw["dispatches"]:
        if d["length"] == 256:
            d["gpu_start_s"] = d["gpu_end_s"] = 0.0
    result = parse(raw)
    (note,) = result.notes
    assert note.startswith("no GPU timestamps") and ": 4 (" in note  # one line for the four
    assert _shape(result, 256).steady_gpu_ms is None and _shape(result, 64).steady_gpu_ms is not None


@pytest.mark.parametrize("value", [0, -3_000_000, float("nan"), float("inf")])
def test_a_pipeline_time_that_is_not_a_time_leaves_that_shape_out_of_the_band(value):
    raw = raw_result()
    raw["builds"][2]["pipeline_ns"] = value  # length 256's first build
    result = parse(raw)
    (note,) = result.notes
    assert "pipeline compile time not a positive time" in note and "length 256" in note
    s = _shape(result, 256)
    assert s.pipeline_ms is None and s.compile_ms is None and s.cached is None
    assert result.compile_band_ms == pytest.approx((12.4, 31.5))
    json.dumps(result.to_dict(), allow_nan=False)


def test_nan_gpu_times_and_negative_host_times_are_notes():
    raw = raw_result()
    raw["dispatches"][0]["gpu_end_s"] = float("nan")
    raw["dispatches"][1]["host_ns"] = -20
    result = parse(raw)
    assert any("not finite" in n and "length 16 #0" in n for n in result.notes)
    assert any("host time not a positive time" in n and "length 16 #1" in n for n in result.notes)
    assert result.dispatches[0].gpu_ms is None and result.dispatches[1].host_ms is None
    json.dumps(result.to_dict(), allow_nan=False)


def test_a_library_time_that_is_not_a_time_is_a_note():
    raw = raw_result()
    raw["library_ns"] = 0
    result = parse(raw)
    assert result.library_ms is None and any("library compile time" in n for n in result.notes)


def test_a_gpu_window_outside_commit_and_done_is_noted_and_has_no_queue_time():
    raw = raw_result()
    d = raw["dispatches"][5]
    d["host_commit_s"] += 1.0  # the GPU "started" a second before the commit
    d["host_done_s"] += 1.0
    result = parse(raw)
    (note,) = result.notes
    assert "outside the host's commit..done" in note and result.dispatches[5].queue_ms is None
    assert result.dispatches[5].gpu_ms is not None


def test_a_host_time_below_the_gpu_time_is_noted():
    raw = raw_result()
    raw["dispatches"][3]["host_ns"] = 5_000  # 5 us around a 18 us kernel
    (note,) = parse(raw).notes
    assert "host time shorter than GPU time" in note


def test_a_row_sum_far_from_one_says_the_kernel_may_not_have_run():
    raw = raw_result()
    raw["row_sums"][64] = 0.0
    result = parse(raw)
    (note,) = result.notes
    assert "length 64 sums to 0.0" in note and _shape(result, 64).row_sum == 0.0


def test_a_stage_that_failed_after_some_lengths_keeps_them_with_a_note():
    raw = raw_result()
    raw["error"] = "Metal: newComputePipelineStateWithFunction:error: for length 256 failed: Compiler encountered an internal error (MTLLibraryErrorDomain 1)"
    raw["builds"] = [b for b in raw["builds"] if b["length"] != 256 and not b["seen"]]
    raw["dispatches"] = [d for d in raw["dispatches"] if d["length"] != 256]
    del raw["row_sums"][256]
    result = parse(raw)
    assert [s.length for s in result.shapes] == [16, 64] and result.error.startswith("Metal: newCompute")
    assert any(n.startswith("the probe stopped early: Metal: newCompute") for n in result.notes)
    assert _shape(result, 16).rebuild_ms is None
    assert "stopped early" in result.text()


def test_a_failure_before_anything_was_measured_is_a_backend_error():
    raw = raw_result()
    raw.update(error="Metal: newLibraryWithSource:options:error: failed: program_source:5:3: error: use of undeclared identifier",
               library_ns=0, builds=[], dispatches=[], row_sums={})
    with pytest.raises(BackendError, match="newLibraryWithSource.*undeclared identifier"):
        parse(raw)


@pytest.mark.parametrize("key", ["device", "error", "library_ns", "builds", "dispatches"])
def test_a_missing_top_level_field_is_refused_by_name(key):
    raw = raw_result()
    del raw[key]
    with pytest.raises(BackendError, match=f"result has no field '{key}'"):
        parse(raw)


@pytest.mark.parametrize("where,key", [("builds", "pipeline_ns"), ("builds", "seen"), ("builds", "length"),
                                       ("dispatches", "gpu_end_s"), ("dispatches", "host_ns"),
                                       ("dispatches", "index")])
def test_a_missing_row_field_is_refused_with_its_place(where, key):
    raw = raw_result()
    del raw[where][1][key]
    with pytest.raises(BackendError, match=rf"{where}\[1\] has no field '{key}'"):
        parse(raw)


@pytest.mark.parametrize("mutate,match", [
    (lambda r: r.update(library_ns="38 ms"), r"library_ns is '38 ms', not a number"),
    (lambda r: r["builds"][0].update(seen=1), r"builds\[0\]\.seen is 1, not a bool"),
    (lambda r: r["dispatches"][0].update(gpu_start_s=True), r"gpu_start_s is True, not a number"),
    (lambda r: r["dispatches"][0].update(length=17), r"dispatches\[0\] dispatches length 17, which was never built"),
    (lambda r: r["dispatches"].append(dict(r["dispatches"][0])), r"repeats dispatch #0 of length 16"),
    (lambda r: r["builds"].append(dict(r["builds"][0])), r"repeats the first build of length 16"),
    (lambda r: r["builds"].insert(0, {"length": 16, "seen": True, "specialise_ns": 1, "pipeline_ns": 1}),
     r"re-builds length 16, which has no first build"),
    (lambda r: r.update(builds={"length": 16}), r"builds is dict, not a list"),
    (lambda r: r["dispatches"].__setitem__(0, [1, 2]), r"dispatches\[0\] is list, not a dict"),
    (lambda r: r.update(row_sums={16: "one"}), r"row_sums\[16\] is 'one', not a number"),
])
def test_malformed_results_are_refused_naming_the_field(mutate, match):
    raw = raw_result()
    mutate(raw)
    with pytest.raises(BackendError, match=match):
        parse(raw)


def test_not_a_dict_is_refused():
    with pytest.raises(BackendError, match="result is list"):
        parse([])


def test_parse_does_not_change_its_input():
    raw = raw_result()
    before = copy.deepcopy(raw)
    parse(raw)
    assert raw == before


# -- the runner, with a fake native module --------------------------------------------------------

class FakeNative:
    def __init__(self, available=True, reason="", raw=None, raises=None):
        self.entry = {"compiled": True, "available": available, "reason": reason}
        self.raw, self.raises, self.calls = raw, raises, []

    def backends(self):
        return {"metal": dict(self.entry)}

    def metal_probe(self, lengths, repeats):
        self.calls.append((lengths, repeats))
        if self.raises:
            raise self.raises
        return self.raw if self.raw is not None else raw_result(tuple(lengths), repeats)


def test_metal_reference_runs_the_native_probe_and_parses_it():
    native = FakeNative()
    result = metal_reference((16, 64), 3, native=native)
    assert native.calls == [([16, 64], 3)]
    assert [s.length for s in result.shapes] == [16, 64] and len(result.dispatches) == 6


def test_an_unavailable_backend_is_a_backend_error_with_its_reason_and_no_probe():
    native = FakeNative(available=False, reason="Metal: no Metal device (MTLCreateSystemDefaultDevice returned nil ...)")
    with pytest.raises(BackendError, match="no Metal device"):
        metal_reference(native=native)
    assert native.calls == []
    assert compile_band_ms(native=native) is None and native.calls == []


@pytest.mark.parametrize("exc,kind", [(RuntimeError("Metal: gone"), BackendError), (ValueError("bad length"), InputError)])
def test_native_exceptions_become_warmprof_errors(exc, kind):
    with pytest.raises(kind, match=str(exc)):
        metal_reference((16,), 2, native=FakeNative(raises=exc))


@pytest.mark.parametrize("lengths,repeats,match", [
    ((), 2, "must not be empty"), ((16, 16), 2, "distinct"), ((0,), 2, "within 1..8192"),
    ((True,), 2, "within 1..8192"), ((16.0,), 2, "within 1..8192"), ((9000,), 2, "within 1..8192"),
    (16, 2, "sequence of ints"), ((16,), 0, "repeats"), ((16,), 2.5, "repeats"),
])
def test_bad_arguments_are_input_errors_before_any_native_call(lengths, repeats, match):
    native = FakeNative()
    with pytest.raises(InputError, match=match):
        metal_reference(lengths, repeats, native=native)
    assert native.calls == []


def test_compile_band_is_the_measured_new_shape_range():
    assert compile_band_ms((16, 64, 256), 2, native=FakeNative()) == pytest.approx((12.4, 95.6))


def test_a_probe_that_measured_no_compile_gives_no_band_but_an_error():
    raw = raw_result((16,), 2)
    raw["builds"][0]["pipeline_ns"] = 0
    with pytest.raises(BackendError, match="measured no pipeline compile.*not a positive time"):
        compile_band_ms((16,), 2, native=FakeNative(raw=raw))


# -- the real stub, off Apple ----------------------------------------------------------------------

OFF_APPLE = pytest.mark.skipif(sys.platform == "darwin", reason="Metal is real on Apple platforms")


@OFF_APPLE
def test_off_apple_the_backend_is_the_stub_with_its_reason():
    assert warmprof.backends()["metal"] == {"compiled": False, "available": False,
                                            "reason": "Metal: not on this platform"}


@OFF_APPLE
def test_off_apple_the_probe_is_a_backend_error_and_leaves_nothing_behind():
    threads = threading.active_count()
    fds = sorted(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    with pytest.raises(BackendError, match="^Metal: not on this platform$"):
        metal_reference()
    with pytest.raises(RuntimeError, match="^Metal: not on this platform$"):
        _native.metal_probe([16], 2)  # the native call itself refuses, whatever called it
    assert compile_band_ms() is None
    assert threading.active_count() == threads and not _native.enabled()
    if fds is not None:
        assert sorted(os.listdir("/proc/self/fd")) == fds


def test_a_probe_report_on_mps_carries_the_measured_metal_compile_beside_its_band(tmp_path):
    import dataclasses

    from factories import probe_report

    from warmprof.report import load

    r = probe_report()
    bands = {**r.bands, "compile": {**r.bands["compile"], "metal_reference": {
        "library_ms": 41.5, "pipeline_lo_ms": 1.2, "pipeline_hi_ms": 96.0, "lengths": [16, 32],
        "how": "native", "notes": []}}}
    r = dataclasses.replace(r, device="mps", bands=bands)
    r.save(tmp_path / "p.json")
    text = str(load(tmp_path / "p.json"))
    assert "Metal compile measured here (native reference probe): a new pipeline 1.2" in text and "96" in text
    failed = dataclasses.replace(r, bands={**r.bands, "compile": {**r.bands["compile"], "metal_reference": {
        "error": "Metal: not on this platform"}}})
    assert "Metal compile not measured: Metal: not on this platform" in str(failed)


def test_the_probe_asks_the_metal_reference_and_keeps_its_error_as_data():
    from warmprof.probes.api import _metal_reference

    got = _metal_reference(lambda line: None)
    assert got == {"error": "Metal: not on this platform"}

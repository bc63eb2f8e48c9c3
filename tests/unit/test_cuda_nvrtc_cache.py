"""torch's own NVRTC compiles (jiterator), read off its kernel cache: the instrument (a fake cache
folder and clocks) and the estimator (synthetic timelines). Issue 25, item 5. Tested with fakes:
no GPU here, so no real jiterator compile."""

from __future__ import annotations

import os

import pytest

from warmprof.attribution import attribute_pass
from warmprof.timeline import BEGIN, COUNTER, END, RUNTIME_INIT, STRUCTURE, Recording, Timeline
from warmprof.traces import child

MS = 1_000_000
NVRTC_CACHE_FILE = "torch:nvrtc_cache_file"  # timeline.NVRTC_CACHE_FILE (checked below)


def _timeline(spans, counters=()):
    """spans: (cause, name, t0 ms, t1 ms); counters: (name, t ms, value)."""
    names: list[str] = []
    recs = []

    def nid(n):
        if n not in names:
            names.append(n)
        return names.index(n)

    for cause, name, a, b in spans:
        recs.append((int(a * MS), BEGIN, cause, nid(name), 0, 0))
        recs.append((int(b * MS), END, cause, nid(name), 0, 0))
    for name, t, v in counters:
        recs.append((int(t * MS), COUNTER, STRUCTURE, nid(name), v, 0))
    return Timeline.from_records(recs, names)


def test_a_new_cache_file_in_an_op_span_is_a_measured_jit_compile():
    # op:aten.special_i0e 10-50 ms: NVRTC compiled until the file was written at 40 ms, then CUPTI saw
    # the in-memory cubin load (runtime_init) 40-45 ms.
    tl = _timeline([(STRUCTURE, "pass:first", 0, 100), (STRUCTURE, "module:M", 0, 100),
                    (STRUCTURE, "op:aten.special_i0e.default", 10, 50), (RUNTIME_INIT, "cupti:lazy_load", 40, 45)],
                   [(NVRTC_CACHE_FILE, 40, 4096)])
    att = attribute_pass(tl, "first")
    jit = [p for p in att.parts if p.cause == "jit_compile"]
    assert len(jit) == 1 and jit[0].source == "torch:nvrtc" and jit[0].evidence == "measured"
    assert jit[0].ms == pytest.approx(30.0)  # 10 -> 40 ms, the op span's start to the write
    assert att.attributed_by_cause("runtime_init") == pytest.approx(5.0)  # the load stays the load's
    assert jit[0].by_module == {"M": pytest.approx(30 * MS)}
    assert sum(att.unexplained_by_module.values()) == pytest.approx((100 - 35) * MS)


def test_in_a_module_span_it_is_an_inferred_estimate_from_the_last_event_before_the_write():
    # module M 20-80 ms: a child module 22-30, an import 32-35, then the write at 60 ms
    tl = _timeline([(STRUCTURE, "pass:first", 0, 100), (STRUCTURE, "module:M", 20, 80),
                    (STRUCTURE, "module:M.child", 22, 30), (RUNTIME_INIT, "python_import:x", 32, 35)],
                   [(NVRTC_CACHE_FILE, 60, 4096)])
    jit = next(p for p in attribute_pass(tl, "first").parts if p.cause == "jit_compile")
    assert jit.evidence == "inferred" and "estimate" in jit.detail
    assert jit.ms == pytest.approx(25.0)  # 35 -> 60 ms: after the import, the last thing recorded


def test_two_writes_in_one_op_are_two_stretches_not_one_counted_twice():
    tl = _timeline([(STRUCTURE, "pass:first", 0, 100), (STRUCTURE, "op:aten.special_i1e.default", 10, 90)],
                   [(NVRTC_CACHE_FILE, 30, 1), (NVRTC_CACHE_FILE, 70, 1)])
    jit = next(p for p in attribute_pass(tl, "first").parts if p.cause == "jit_compile")
    assert jit.ms == pytest.approx(60.0) and jit.count == 2  # 10 -> 30 and 30 -> 70


def test_no_new_file_no_compile():
    tl = _timeline([(STRUCTURE, "pass:first", 0, 100), (STRUCTURE, "op:aten.special_i0e.default", 10, 50)])
    assert not [p for p in attribute_pass(tl, "first").parts if p.cause == "jit_compile"]


def test_the_instrument_puts_each_new_file_on_the_timeline_at_its_write_time(tmp_path):
    from warmprof import timeline
    from warmprof.instruments.kernel_cache import TorchKernelCache

    assert timeline.NVRTC_CACHE_FILE == NVRTC_CACHE_FILE
    folder = tmp_path / "kernels"
    folder.mkdir()
    (folder / "old_kernel").write_bytes(b"x" * 10)  # found warm: not a compile
    from warmprof.timeline import now_ns

    base = now_ns()
    now, wall = [base], [5_000_000 * MS]
    inst = TorchKernelCache(folder=str(folder), clock=lambda: now[0], wall=lambda: wall[0])
    with Recording() as rec:
        with inst:
            inst.mark_pass("first")
            f = folder / "jit_i0e_float"
            f.write_bytes(b"y" * 321)
            # written 30 ms before the pass ends (wall clock); the pass ends 100 ms after it started
            os.utime(f, ns=(wall[0] + 70 * MS, wall[0] + 70 * MS))
            now[0] += 100 * MS
            wall[0] += 100 * MS
            inst.end_pass("first")
            inst.mark_pass("seen_rerun")
            inst.end_pass("seen_rerun")
    tl = rec.drain()
    got = [(int(tl.ts_ns[i]), int(tl.value[i])) for i in range(len(tl))
           if tl.kind[i] == COUNTER and tl.name_of(i) == NVRTC_CACHE_FILE]
    assert len(got) == 1 and got[0][1] == 321
    assert got[0][0] == pytest.approx(base + 70 * MS, abs=0.01 * MS)  # 70 ms into the pass
    s = inst.summary()
    assert s["passes"]["first"]["new_files"] == 1 and s["passes"]["seen_rerun"]["new_files"] == 0


def test_new_files_are_the_added_or_rewritten_ones():
    from warmprof.instruments.kernel_cache import new_files

    before = {"a": (1, 10), "b": (2, 10)}
    after = {"a": (1, 10), "b": (5, 12), "c": (3, 7)}
    assert new_files(before, after) == [("c", 3, 7), ("b", 5, 12)]


def test_the_cache_folder_is_torchs():
    from warmprof.instruments.kernel_cache import TorchKernelCache, kernel_cache_dir

    assert kernel_cache_dir({"PYTORCH_KERNEL_CACHE_PATH": "/x/k"}) == "/x/k"
    assert kernel_cache_dir({"XDG_CACHE_HOME": "/c"}) == os.path.join("/c", "torch", "kernels")
    assert TorchKernelCache(environ={"USE_PYTORCH_KERNEL_CACHE": "0"}).reason


def test_a_fresh_run_points_cupys_cache_at_an_empty_folder_too(tmp_path):
    assert "CUPY_CACHE_DIR" in child.CACHES
    env = child.fresh_env(str(tmp_path))
    assert env["CUPY_CACHE_DIR"].startswith(str(tmp_path)) and os.listdir(env["CUPY_CACHE_DIR"]) == []


def test_the_cuda_set_watches_the_kernel_cache():
    from warmprof.instruments.cuda_set import cuda_instruments

    assert "torch_nvrtc_cache" in [i.name for i in cuda_instruments({"cupti": False})]

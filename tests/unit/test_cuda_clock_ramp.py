"""clock_ramp: the inference (pure), the readers (a fake devfreq tree), and the sampler thread."""

from __future__ import annotations

import threading

import pytest

from warmprof.instruments.clock_ramp import ClockRamp, DevfreqReader, find_reader, infer_ramp_ms
from warmprof.timeline import COUNTER, Recording

MS = 1_000_000


def test_no_ramp_when_the_pass_starts_near_steady():
    samples = [(0, 1900.0), (5 * MS, 1980.0)]
    assert infer_ramp_ms(samples, 1 * MS, 10 * MS, 1980.0) == 0.0


def test_ramp_is_the_integral_of_the_missing_clock_fraction():
    steady = 2000.0
    # 500 MHz for the first 4 ms of the pass, then 1000 MHz for 4 ms, then steady for 2 ms.
    samples = [(-1 * MS, 500.0), (4 * MS, 1000.0), (8 * MS, 2000.0)]
    got = infer_ramp_ms(samples, 0, 10 * MS, steady)
    assert got == pytest.approx(4 * 0.75 + 4 * 0.5)


def test_ramp_uses_the_first_sample_inside_when_none_before():
    got = infer_ramp_ms([(2 * MS, 1000.0)], 0, 4 * MS, 2000.0)
    assert got == pytest.approx(4 * 0.5)


@pytest.mark.parametrize("args", [([], 0, MS, 2000.0), ([(0, 100.0)], MS, MS, 2000.0), ([(0, 100.0)], 0, MS, 0.0)])
def test_degenerate_inputs_give_zero(args):
    assert infer_ramp_ms(*args) == 0.0


def test_ramp_never_exceeds_the_pass():
    assert infer_ramp_ms([(0, 0.0)], 0, 10 * MS, 2000.0) == pytest.approx(10.0)


def _devfreq(tmp_path, name="17000000.ga10b", cur=306_000_000, top=1_300_500_000):
    node = tmp_path / name
    node.mkdir()
    (node / "cur_freq").write_text(f"{cur}\n")
    (node / "max_freq").write_text(f"{top}\n")
    (tmp_path / "3d00000.pcie").mkdir()  # not a GPU
    return node


def test_devfreq_reader_finds_the_jetson_gpu_node(tmp_path):
    node = _devfreq(tmp_path)
    assert DevfreqReader.find(str(tmp_path)) == str(node)
    r = DevfreqReader(str(node))
    assert r.read_mhz() == pytest.approx(306.0) and r.max_mhz == pytest.approx(1300.5)
    (node / "cur_freq").write_text("1300500000\n")
    assert r.read_mhz() == pytest.approx(1300.5)


def test_find_reader_says_why_there_is_none(tmp_path):
    reader, why = find_reader(0, devfreq_root=str(tmp_path))
    if reader is not None:  # a machine with NVML
        reader.close()
        pytest.skip("NVML is available here")
    assert "pynvml" in why or "NVML" in why
    assert "devfreq" in why


class StepReader:
    """A clock that starts low and reaches steady after `low_reads` reads."""

    source = "fake"

    def __init__(self, low_reads: int = 2) -> None:
        self.reads = 0
        self.low_reads = low_reads
        self.closed = False

    def read_mhz(self) -> float:
        self.reads += 1
        return 400.0 if self.reads <= self.low_reads else 1600.0

    def close(self) -> None:
        self.closed = True


def test_instrument_samples_writes_counters_and_infers():
    t = iter(range(0, 10**12, MS))  # a fake clock: 1 ms per read
    reader = StepReader(low_reads=3)
    threads_before = threading.active_count()
    with Recording() as rec:
        with ClockRamp(reader=reader, sample_ms=1000.0, clock=lambda: next(t)) as inst:
            inst.mark_pass("first")
            inst.sample()
            inst.sample()
            inst.end_pass("first")
            inst.mark_pass("seen_rerun")
            inst.end_pass("seen_rerun")
    tl = rec.drain()
    assert reader.closed and threading.active_count() == threads_before
    mhz = [int(tl.value[i]) for i in range(len(tl)) if tl.kind[i] == COUNTER and tl.name_of(i) == "clock:sm_mhz"]
    assert mhz and mhz[0] == 400 and mhz[-1] == 1600
    s = inst.summary()
    assert s["source"] == "fake" and s["steady_mhz"] == 1600.0
    assert s["passes"]["first"]["start_mhz"] == 400.0
    assert s["passes"]["first"]["inferred_ms"] > 0
    assert s["passes"]["seen_rerun"]["inferred_ms"] == 0.0


def test_reader_failure_keeps_the_trace_going():
    class Broken(StepReader):
        def read_mhz(self):
            raise OSError("gone")

    with ClockRamp(reader=Broken(), sample_ms=1.0) as inst:
        inst.mark_pass("first")
        inst.end_pass("first")
    assert any("clock read failed" in n for n in inst.summary()["notes"])


def test_no_source_is_a_reason_and_a_no_op(monkeypatch):
    import warmprof.instruments.clock_ramp as cr

    monkeypatch.setattr(cr, "find_reader", lambda index: (None, "pynvml is not installed; no Jetson GPU devfreq node"))
    threads_before = threading.active_count()
    with ClockRamp() as inst:
        inst.mark_pass("first")
        inst.end_pass("first")
    assert inst.reason.startswith("no GPU clock source: pynvml")
    assert threading.active_count() == threads_before


# ---- issue 25, item 1: a slow clock costs time only while the GPU is busy, and only what is left ----

LOW, STEADY = 345.0, 1980.0  # an H200's idle and steady SM clocks


def test_an_idle_gpu_loses_nothing_to_a_slow_clock():
    # The clock is at idle for the whole pass, but the GPU did nothing (a host-bound compile).
    samples = [(-1 * MS, LOW, 0.0), (50 * MS, LOW, 0.0), (100 * MS, LOW, 0.0)]
    assert infer_ramp_ms(samples, 0, 100 * MS, STEADY) == 0.0


def test_the_loss_is_weighted_by_the_gpus_busy_fraction():
    busy = [(-1 * MS, LOW, 0.5), (50 * MS, LOW, 0.5), (100 * MS, LOW, 0.5)]
    unknown = [(s[0], s[1]) for s in busy]
    assert infer_ramp_ms(busy, 0, 100 * MS, STEADY) == pytest.approx(0.5 * infer_ramp_ms(unknown, 0, 100 * MS, STEADY))
    # the busy figure covers the time up to its sample: idle for the first half, busy for the second
    halves = [(-1 * MS, LOW, 1.0), (50 * MS, LOW, 0.0), (100 * MS, LOW, 1.0)]
    assert infer_ramp_ms(halves, 0, 100 * MS, STEADY) == pytest.approx(0.5 * infer_ramp_ms(unknown, 0, 100 * MS, STEADY))


class _IdleThenSteady:
    """The SM clock at idle for `low_reads` reads, then steady; optionally a busy fraction."""

    source = "fake"

    def __init__(self, low_reads: int, busy: float | None = None) -> None:
        self.reads, self.low_reads, self.busy = 0, low_reads, busy

    def read_mhz(self) -> float:
        self.reads += 1
        return LOW if self.reads <= self.low_reads else STEADY

    def read_busy(self) -> float | None:
        return self.busy

    def close(self) -> None:
        pass


def _ramp(gpu_ms=None, busy=None):
    """A 100 ms first pass at the idle clock, then a 10 ms seen re-run at the steady one."""
    now = [0]
    inst = ClockRamp(reader=_IdleThenSteady(low_reads=3, busy=busy), sample_ms=1e6, clock=lambda: now[0],
                     **({"gpu_ms": gpu_ms.get} if gpu_ms is not None else {}))
    with inst:
        inst.mark_pass("first")
        now[0] = 100 * MS
        inst.end_pass("first")
        now[0] = 200 * MS
        inst.mark_pass("seen_rerun")
        now[0] = 210 * MS
        inst.end_pass("seen_rerun")
    return inst


def test_the_ramp_is_capped_by_the_gpu_busy_time_the_cuda_events_allow():
    # A host-bound first pass: 100 ms of wall time, while the seen re-run's GPU work took 2 ms. At
    # 345/1980 MHz that work takes at most 2 x 1980/345 ms, and loses (1 - 345/1980) of it.
    uncapped = _ramp().summary()["passes"]["first"]["inferred_ms"]
    capped = _ramp(gpu_ms={"first": 100.0, "seen_rerun": 2.0}).summary()["passes"]["first"]
    assert capped["inferred_ms"] < 0.15 * uncapped
    assert capped["inferred_ms"] == pytest.approx(2.0 * STEADY / LOW * (1 - LOW / STEADY))
    assert capped["busy_bound_ms"] == pytest.approx(2.0 * STEADY / LOW)


def test_the_ramp_figure_takes_only_what_the_passs_other_causes_left():
    from warmprof.attribution import attribute_pass
    from warmprof.timeline import BEGIN, END, JIT_COMPILE, STRUCTURE, Timeline

    inst = _ramp()
    figures = inst.inferred("first")
    assert figures and figures[0].fills_unexplained and "estimate" in figures[0].detail
    # the pass: 100 ms, of which a compile (host-bound, GPU idle) took 95 ms
    names = ["pass:first", "torch.compile:compile"]
    tl = Timeline.from_records([(0, BEGIN, STRUCTURE, 0, 0, 0), (0, BEGIN, JIT_COMPILE, 1, 0, 0),
                                (95 * MS, END, JIT_COMPILE, 1, 0, 0), (100 * MS, END, STRUCTURE, 0, 0, 0)], names)
    att = attribute_pass(tl, "first", inferred=figures)
    ramp = att.attributed_by_cause("clock_ramp")
    assert 0 < ramp <= 5.0 + 1e-6
    assert att.attributed_ms <= att.pass_ms + 1e-6
    assert "capped" in next(p.detail for p in att.parts if p.cause == "clock_ramp")


def test_a_busy_signal_from_the_reader_is_used_and_said():
    idle = _ramp(busy=0.0)
    assert idle.summary()["passes"]["first"]["inferred_ms"] == 0.0 and idle.inferred("first") == []
    half = _ramp(busy=0.5)
    one = half.summary()["passes"]["first"]
    assert one["busy_samples"] == one["samples"] > 0
    assert one["inferred_ms"] == pytest.approx(0.5 * _ramp().summary()["passes"]["first"]["inferred_ms"])
    assert "busy fraction" in half.inferred("first")[0].detail


def test_jetson_load_is_the_devfreq_readers_busy_signal(tmp_path):
    node = _devfreq(tmp_path)
    r = DevfreqReader(str(node))
    assert r.read_busy() is None  # no load file: no busy signal
    (node / "device").mkdir()
    (node / "device" / "load").write_text("250\n")
    assert r.read_busy() == pytest.approx(0.25)

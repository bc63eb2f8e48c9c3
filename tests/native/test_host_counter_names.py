"""The host counter names are declared once in Python (timeline.py) and equal what csrc/bindings.cpp
interns for the native sampler: nothing missing, nothing spelled twice."""

import re
from pathlib import Path

from warmprof import timeline
from warmprof.timeline import COUNTER, Recording

BINDINGS = Path(__file__).resolve().parents[2] / "csrc" / "bindings.cpp"


def _interned_host_names() -> list[str]:
    return re.findall(r'recorder::intern\("(host:[^"]*)"\)', BINDINGS.read_text())


def test_the_declared_names_are_the_ones_bindings_interns():
    native = _interned_host_names()
    assert len(native) == len(set(native))
    assert sorted(native) == sorted(timeline.HOST_COUNTERS)
    assert len(set(timeline.HOST_COUNTERS)) == len(timeline.HOST_COUNTERS)
    assert set(timeline.FAULT_COUNTERS) <= set(timeline.HOST_COUNTERS)


def test_every_host_counter_recorded_is_declared():
    nid = timeline.name_id("module:test_host_counter_names")
    with Recording() as rec:
        timeline.sample_host()
        timeline.module_enter(nid, True)
        timeline.module_exit(nid)
    tl = rec.drain()
    seen = {tl.names[n] for n, k in zip(tl.name.tolist(), tl.kind.tolist())
            if k == COUNTER and tl.names[n].startswith("host:")}
    assert {timeline.MINOR_FAULTS_COUNTER, timeline.RSS_COUNTER, timeline.FILE_COUNTER} <= seen
    assert seen <= set(timeline.HOST_COUNTERS)

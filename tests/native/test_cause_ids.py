"""The cause ids in timeline.py mirror csrc/core/causes.h: every native id has a Python name."""

from warmprof import _native, timeline


def test_every_native_cause_id_has_a_python_constant():
    ids = [getattr(timeline, c.upper()) for c in timeline.CAUSE_NAMES.values()] + [timeline.STRUCTURE]
    assert sorted(ids) == list(range(_native.NUM_CAUSES))


def test_the_last_cause_id_is_the_last_the_recorder_accepts():
    nid = timeline.name_id("test:cause_ids")
    with timeline.Recording() as rec:
        timeline.instant(_native.NUM_CAUSES - 1, nid)
    assert int(rec.drain().cause[0]) == timeline.PROFILER_OVERHEAD


def test_record_kinds_match_the_drained_values():
    nid = timeline.name_id("test:kinds")
    with timeline.Recording() as rec:
        timeline.begin(0, nid)
        timeline.end(0, nid)
        timeline.instant(0, nid)
        timeline.counter(nid, 5)
    kinds = [int(k) for k in rec.drain().kind]
    assert kinds == [timeline.BEGIN, timeline.END, timeline.INSTANT, timeline.COUNTER]
    assert _native.RECORD_BYTES == 24

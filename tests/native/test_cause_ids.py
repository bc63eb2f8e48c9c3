"""The cause table (causes.py) mirrors csrc/core/causes.h: same ids, same names, nothing missing."""

import re
from pathlib import Path

from warmprof import _native, causes, timeline

HEADER = Path(__file__).resolve().parents[2] / "csrc" / "core" / "causes.h"


def _header_causes() -> dict[str, int]:
    """enum Cause's values from the header, e.g. {"jit_compile": 1, ...} (kStructure and kNumCauses apart)."""
    text = HEADER.read_text()
    body = re.search(r"enum Cause : uint8_t \{(.*?)\};", text, re.S).group(1)
    out = {}
    for name, value in re.findall(r"k(\w+)\s*=\s*(\d+)", body):
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
        out[snake] = int(value)
    return out


def test_the_table_matches_the_native_header():
    native = _header_causes()
    assert native.pop("structure") == causes.STRUCTURE == 0
    assert native.pop("num_causes") == _native.NUM_CAUSES
    # The header spells the selection cause "AlgorithmSelection" like the table: names must agree.
    assert native == {name: cid for cid, name in causes.recorded().items()}
    assert sorted(native.values()) == list(range(1, _native.NUM_CAUSES))


def test_every_recorded_cause_has_a_timeline_constant():
    for cid, name in causes.recorded().items():
        assert getattr(timeline, name.upper()) == cid
        assert timeline.cause_name(cid) == name
    assert timeline.cause_name(timeline.STRUCTURE) == ""


def test_the_last_cause_id_is_the_last_the_recorder_accepts():
    nid = timeline.name_id("test:cause_ids")
    with timeline.Recording() as rec:
        timeline.instant(_native.NUM_CAUSES - 1, nid)
    assert int(rec.drain().cause[0]) == timeline.GARBAGE_COLLECTION


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

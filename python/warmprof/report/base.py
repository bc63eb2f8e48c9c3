"""What every report kind shares: schema version, JSON I/O, load-time validation, kind dispatch."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, ClassVar

from ..errors import ReportError

SCHEMA_VERSION = 1
_KINDS: dict[str, type["ReportBase"]] = {}


def register_kind(cls: type["ReportBase"]) -> type["ReportBase"]:
    _KINDS[cls.KIND] = cls
    return cls


class ReportBase:
    """A report is data: to_json/from_json/save/load; renderers turn it into text or files."""

    KIND: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:  # pragma: no cover - each kind defines it
        raise NotImplementedError

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ReportBase":  # pragma: no cover
        raise NotImplementedError

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_json(cls, text: str, *, origin: str = "<string>") -> "ReportBase":
        data = parse_json(text, origin)
        kind = data.get("kind")
        if cls.KIND and kind != cls.KIND:
            raise ReportError(f"{origin}: a {kind!r} report, not a {cls.KIND!r} report")
        target = cls if cls.KIND else _KINDS.get(kind)
        if target is None:
            raise ReportError(f"{origin}: unknown report kind {kind!r} (known: {', '.join(sorted(_KINDS))})")
        try:
            return target.from_dict(data)
        except ReportError as e:
            raise ReportError(f"{origin}: {e}") from None
        except (KeyError, TypeError, ValueError) as e:
            raise ReportError(f"{origin}: malformed {kind} report ({type(e).__name__}: {e})") from None

    def save(self, path: str | os.PathLike) -> Path:
        p = Path(path)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(self.to_json() + "\n")
        tmp.replace(p)  # no half-written report is ever left under the final name
        return p

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ReportBase":
        p = Path(path)
        try:
            text = p.read_text()
        except FileNotFoundError:
            raise ReportError(f"{p}: no such file") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ReportError(f"{p}: cannot read ({e})") from None
        return cls.from_json(text, origin=str(p))


def parse_json(text: str, origin: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReportError(f"{origin}: not a warmprof report (invalid JSON: {e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict) or "schema_version" not in data or "kind" not in data:
        raise ReportError(f"{origin}: not a warmprof report (no schema_version/kind)")
    version = data["schema_version"]
    if not isinstance(version, int) or version < 1:
        raise ReportError(f"{origin}: bad schema_version {version!r}")
    if version > SCHEMA_VERSION:
        raise ReportError(
            f"{origin}: schema_version {version} is newer than this warmprof understands ({SCHEMA_VERSION}); upgrade warmprof"
        )
    return data


def load(path: str | os.PathLike) -> ReportBase:
    """Load any report kind (trace or probe) from a file; the kind comes from the file."""
    return ReportBase.load(path)


# Validation helpers used by each kind's from_dict.
def require(data: dict, key: str, types: type | tuple) -> Any:
    if key not in data:
        raise ReportError(f"missing field {key!r}")
    value = data[key]
    if not isinstance(value, types) or isinstance(value, bool) and bool not in _as_tuple(types):
        raise ReportError(f"field {key!r} has type {type(value).__name__}")
    return value


def _as_tuple(t: type | tuple) -> tuple:
    return t if isinstance(t, tuple) else (t,)


def non_negative(value: float | None, what: str, slack: float = 0.0) -> None:
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ReportError(f"{what} is not a finite number: {value!r}")
    if value < -slack:
        raise ReportError(f"{what} is negative: {value}")

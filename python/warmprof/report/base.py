"""What every report kind shares: schema version, JSON I/O, load-time validation, kind dispatch."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from ..errors import ReportError
from ..system.fileio import read_regular, write_output
from . import schema

# 2: a trace report's torch_compile figures are a field of their own (1 kept them in
# instruments.torch_compile only); version 1 files still load, converted by Report._upgrade.
# 3: a trace report's excess is the model's own (its clean first pass when `clean` is there), its
# causes the model's, and warmprof's own cost is `own_cost`, not a profiler_overhead cause; older
# files load as they were written (their profiler_overhead rows stay).
# 4: a trace report has a settings record (report/settings.py); files before it load without one
# (settings None: compare reads what their other fields tell and says which settings it cannot).
# 5: a trace report has a `setup` section (the set-up before the first pass, timed with instruments on)
# and protocol.calls_per_pass (2 under cudagraph trees); files before it load without them.
# 6: a trace report has `accounting` (excess = causes + run_to_run + unattributed, exactly), cause entries
# may carry waited_ms / blocked_ms (a cause's own wait inside its spans), set-up steps carry their own
# causes, and generate phases their own accounting; files before it load as they were written.
SCHEMA_VERSION = 6
_KINDS: dict[str, type["ReportBase"]] = {}
# str() of a report or a comparison: the render layer's "text" format, set by warmprof.render when it
# is imported (warmprof/__init__ imports it), so the report layer never imports the layer above it.
_text_renderer: Callable[[Any], str] | None = None


def register_kind(cls: type["ReportBase"]) -> type["ReportBase"]:
    for kind in (cls.KIND, *cls.KIND_ALIASES):
        _KINDS[kind] = cls
    return cls


def set_text_renderer(render: Callable[[Any], str]) -> None:
    """Make `render` what str() of every report kind, and of a comparison, returns."""
    global _text_renderer
    _text_renderer = render


def as_text(obj: Any) -> str:
    """A report or a comparison as text: what str() of either returns. The render layer registers its
    text renderer when it is imported; `import warmprof` does not import it (a process `warmprof run`
    records loads warmprof at start-up, and must not pay for the renderers), so the first str() does,
    by name: the report layer never imports the layer above it in code."""
    if _text_renderer is None:
        import importlib

        importlib.import_module(__name__.rsplit(".", 2)[0] + ".render")
    if _text_renderer is None:  # pragma: no cover - warmprof.render always sets it
        return repr(obj)
    return _text_renderer(obj)


class ReportBase:
    """A report is data: to_json/from_json/save/load; renderers turn it into text or files."""

    KIND: ClassVar[str] = ""
    KIND_ALIASES: ClassVar[tuple[str, ...]] = ()  # other "kind" values its files hold (warmup's "assert_warm")
    SCHEMA: ClassVar[Any] = None  # the kind's schema.Obj, checked before anything is built
    if TYPE_CHECKING:  # what every kind's dataclass has (declared for the type checker only)
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]
        schema_version: int

    # Each kind is a dataclass; these two name how its nested fields (entries, rows) go to and
    # come from JSON. Every other field is JSON as it stands.
    def _field_to_json(self, name: str, value: Any) -> Any:
        return value

    @classmethod
    def _fields_from_json(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {}

    @classmethod
    def _upgrade(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        """Data checked against the schema, written in an older schema_version -> this version's
        layout (each kind converts what changed for it)."""
        return data

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"schema_version": self.schema_version, "kind": self.KIND}
        for f in dataclasses.fields(self):
            if f.name != "schema_version":
                d[f.name] = self._field_to_json(f.name, getattr(self, f.name))
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ReportBase":
        schema.check(data, cls.SCHEMA)
        data = cls._upgrade(data, data.get("schema_version", SCHEMA_VERSION))
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs.update(cls._fields_from_json(data))
        kwargs["schema_version"] = SCHEMA_VERSION  # converted: saved again, it is this version's layout
        report = cls(**kwargs)
        report.validate()
        return report

    def validate(self) -> None:
        """Invariants a loaded report must hold (each kind adds its own)."""

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_json(cls, text: str, *, origin: str = "<string>") -> "ReportBase":
        data = parse_json(text, origin)
        kind = data["kind"]
        if cls.KIND and kind not in (cls.KIND, *cls.KIND_ALIASES):
            raise ReportError(f"{origin}: a {kind!r} report, not a {cls.KIND!r} report")
        target = cls if cls.KIND else _KINDS.get(kind)
        if target is None:
            raise ReportError(f"{origin}: unknown report kind {kind!r} (known: {', '.join(sorted(_KINDS))})")
        try:
            return target.from_dict(data)
        except ReportError as e:
            raise ReportError(f"{origin}: {e}") from None
        except Exception as e:  # the schema should catch every bad field first; this is the net under it
            raise ReportError(f"{origin}: malformed {kind} report ({type(e).__name__}: {e})") from e

    def save(self, path: str | os.PathLike) -> Path:
        """Write the report as JSON (see warmprof.system.fileio: a file is replaced atomically, a device
        or FIFO written in place, a directory refused)."""
        return write_output(path, self.to_json() + "\n")

    def __str__(self) -> str:
        return as_text(self)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ReportBase":
        data = read_regular(path)  # a FIFO or a device is refused at once, never waited on
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ReportError(f"{os.fspath(path)}: cannot read ({e})") from None
        return cls.from_json(text, origin=os.fspath(path))


class _NonFinite(ValueError):
    pass


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999
        raise _NonFinite(text)
    return value


class _TooLong(ValueError):
    pass


_MAX_INT_DIGITS = 20  # a uint64 has 20; anything longer is no figure warmprof wrote


def _bounded_int(text: str) -> int:
    # Refused before int() sees it: Python's own digit limit would raise a bare ValueError, and a
    # huge integer is slow to convert.
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise _TooLong(f"an integer of {len(text.lstrip('-'))} digits")
    return int(text)


def _no_constant(name: str) -> float:  # NaN, Infinity, -Infinity: Python's json reads them, JSON has none
    raise _NonFinite(name)


def parse_json(text: str, origin: str) -> dict[str, Any]:
    try:
        data = json.loads(text, parse_float=_finite_float, parse_int=_bounded_int, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise ReportError(f"{origin}: not a warmprof report (invalid JSON: {e.msg.removesuffix(' at')} at line {e.lineno}, column {e.colno})") from None
    except _NonFinite as e:
        raise ReportError(f"{origin}: not a warmprof report (non-finite number {e} in the JSON)") from None
    except _TooLong as e:
        raise ReportError(f"{origin}: not a warmprof report ({e} in the JSON)") from None
    except RecursionError:
        raise ReportError(f"{origin}: not a warmprof report (JSON nested too deeply)") from None
    except ValueError as e:  # the net under the hooks: no Python limit becomes a traceback
        raise ReportError(f"{origin}: not a warmprof report ({e})") from None
    if not isinstance(data, dict) or "schema_version" not in data or "kind" not in data:
        raise ReportError(f"{origin}: not a warmprof report (no schema_version/kind)")
    version = data["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ReportError(f"{origin}: bad schema_version {version!r}")
    if not isinstance(data["kind"], str):
        raise ReportError(f"{origin}: bad report kind {data['kind']!r}")
    if version > SCHEMA_VERSION:
        raise ReportError(
            f"{origin}: schema_version {version} is newer than this warmprof understands ({SCHEMA_VERSION}); upgrade warmprof"
        )
    return data


def load(path: str | os.PathLike) -> ReportBase:
    """Load any report kind (trace or probe) from a file; the kind comes from the file."""
    return ReportBase.load(path)


# Validation helper used by each kind's validate(); the field types are checked by report.schema.
def non_negative(value: float | None, what: str, slack: float = 0.0) -> None:
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ReportError(f"{what} is not a finite number: {value!r}")
    if value < -slack:
        raise ReportError(f"{what} is negative: {value}")

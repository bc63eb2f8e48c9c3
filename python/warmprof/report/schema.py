"""A small declarative check of a report's JSON: the type and shape of every field a renderer reads.

Each kind (trace.py, probe.py) writes its schema out of these pieces; from_dict runs it on the raw
data before building anything, so a renderer never meets a field of the wrong type. A failure is a
ReportError naming the field's path and what was expected, e.g. "modules[0]: missing key 'module'"
or "instruments.torch_compile: expected an object, got 'on'".

Objects allow keys the schema does not name (newer writers may add some) unless extra=False, used
where the object becomes a dataclass that could not take them.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Iterable

from .. import devices
from ..errors import ReportError


def describe(value: Any) -> str:
    """A value as it reads in an error message: its JSON type, with the value when short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and len(value) > 40:
        return f"a {len(value)}-character string"
    if isinstance(value, (int, float, str)):
        return repr(value)
    if isinstance(value, list):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _fail(path: str, message: str) -> None:
    raise ReportError(f"{path}: {message}" if path else message)


class Spec:
    """What one value must be. `what` reads after 'expected' in an error message; accepts() is the
    value's own type, check_inside() what a list or object holds."""

    what = "a value"

    def check(self, value: Any, path: str) -> None:
        if not self.accepts(value):
            _fail(path, f"expected {self.what}, got {describe(value)}")
        self.check_inside(value, path)

    def accepts(self, value: Any) -> bool:
        return True

    def check_inside(self, value: Any, path: str) -> None:
        pass


class Anything(Spec):
    what = "any value"


class Str(Spec):
    what = "a string"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str)


class Bool(Spec):
    what = "true or false"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool)


class Num(Spec):
    """A finite JSON number (true/false are not numbers here) of a size a report can hold: below 1e15
    either way (31 years in ms, a petabyte in bytes), so a renderer's unit conversion cannot overflow."""

    what = "a finite number within ±1e15"
    LIMIT = 1e15

    def accepts(self, value: Any) -> bool:
        return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and abs(value) <= self.LIMIT)


class Int(Spec):
    def __init__(self, min: int | None = None) -> None:
        self.min = min
        self.what = {None: "an integer", 0: "a non-negative integer", 1: "a positive integer"}.get(
            min, f"an integer >= {min}")

    def accepts(self, value: Any) -> bool:
        return (isinstance(value, int) and not isinstance(value, bool)
                and (self.min is None or value >= self.min))


class Nullable(Spec):
    def __init__(self, inner: Spec) -> None:
        self.inner = inner
        self.what = f"{inner.what} or null"

    def accepts(self, value: Any) -> bool:
        return value is None or self.inner.accepts(value)

    def check(self, value: Any, path: str) -> None:
        if value is None:
            return
        if not self.inner.accepts(value):
            _fail(path, f"expected {self.what}, got {describe(value)}")
        self.inner.check(value, path)


class OneOf(Spec):
    """A string from a fixed set; `noun` names it in the message ("unknown verdict 'magic'")."""

    def __init__(self, noun: str, values: Iterable[str] | Callable[[], Iterable[str]]) -> None:
        self.noun = noun
        self._values = values if callable(values) else tuple(values)

    @property
    def values(self) -> tuple[str, ...]:
        """The set as it is now (a callable is asked each time: the cause table can grow)."""
        return tuple(self._values()) if callable(self._values) else self._values

    @property
    def what(self) -> str:  # type: ignore[override]  # Spec.what is only read: OneOf's comes from its values
        return f"one of {', '.join(self.values)}"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.values

    def check(self, value: Any, path: str) -> None:
        if not self.accepts(value):
            known = ", ".join(repr(v) for v in self.values)
            _fail(path, f"unknown {self.noun} {describe(value)} (known: {known})")


class Pattern(Spec):
    """A string matching a regular expression (whole string)."""

    def __init__(self, noun: str, pattern: str, hint: str) -> None:
        self.noun = noun
        self.regex = re.compile(pattern)
        self.hint = hint
        self.what = hint

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and self.regex.fullmatch(value) is not None

    def check(self, value: Any, path: str) -> None:
        if not self.accepts(value):
            _fail(path, f"unknown {self.noun} {describe(value)} (expected {self.hint})")


class ListOf(Spec):
    def __init__(self, item: Spec) -> None:
        self.item = item
        self.what = "a list"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, list)

    def check_inside(self, value: Any, path: str) -> None:
        for i, v in enumerate(value):
            self.item.check(v, f"{path}[{i}]")


class MapOf(Spec):
    """An object whose keys are free (names, sizes) and whose values all have one shape."""

    def __init__(self, value: Spec) -> None:
        self.value = value
        self.what = "an object"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, dict)

    def check_inside(self, value: Any, path: str) -> None:
        for k, v in value.items():
            self.value.check(v, f"{path}[{k!r}]")


class Obj(Spec):
    """An object with named keys: required ones, optional ones (absent is fine; null only where
    the spec says Nullable), and other keys allowed unless extra=False."""

    def __init__(self, required: dict[str, Spec] | None = None, optional: dict[str, Spec] | None = None,
                 *, extra: bool = True) -> None:
        self.required = dict(required or {})
        self.optional = dict(optional or {})
        self.extra = extra
        self.what = "an object"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, dict)

    def check_inside(self, value: Any, path: str) -> None:
        for key, spec in self.required.items():
            if key not in value:
                _fail(path, f"missing key {key!r}" if path else f"missing field {key!r}")
            spec.check(value[key], _key_path(path, key))
        for key, spec in self.optional.items():
            if key in value:
                spec.check(value[key], _key_path(path, key))
        if not self.extra:
            for key in value:
                if key not in self.required and key not in self.optional:
                    _fail(path, f"unexpected key {key!r}")


ANY = Anything()
STR = Str()
BOOL = Bool()
NUM = Num()
INT = Int()
NON_NEGATIVE_INT = Int(min=0)
POSITIVE_INT = Int(min=1)
DEVICE_KINDS = devices.NAMES  # ("cpu", "cuda", "mps"): the device table's kinds
DEVICE = Pattern("device", rf"({'|'.join(DEVICE_KINDS)})(:[0-9]+)?",
                 f"{devices.either(list(DEVICE_KINDS))}, optionally with an index (cuda:1)")
# The platform fingerprint is free-form; these keys are the ones joined into device names as text.
PLATFORM = Obj(optional={"jetson": STR, "apple_chip": STR, "cpu": STR})


def check(data: Any, spec: Spec) -> None:
    """Check a whole report's data (the top-level path is empty: "missing field 'model'")."""
    spec.check(data, "")

"""A device kind's instruments, from the names the device table gives (devices.py says why names).

The device table is on the ground floor and may not import what it names; the layers that use
those names resolve them here, the layer below them both (traces and probes).
"""

from __future__ import annotations

import importlib
from typing import Any

from .base import Instrument


def resolve(dotted: str) -> Any:
    """The object a "module:attribute" name from the device table names."""
    module, _, attribute = dotted.partition(":")
    return getattr(importlib.import_module(module), attribute)


def device_instruments(kind: Any, options: dict) -> list[Instrument]:
    """The instruments a trace runs for its device kind (a devices.DeviceKind), given `options`
    (each kind's factory reads the keys it knows: cuda_set.py and mps.py list theirs)."""
    return list(resolve(kind.instruments)(options))


def setup_instruments(kind: Any, options: dict) -> list[Instrument]:
    """The device kind's instruments for the set-up before the first pass (none named: none)."""
    name = getattr(kind, "setup_instruments", None)
    return list(resolve(name)(options)) if name else []


__all__ = ["device_instruments", "resolve", "setup_instruments"]

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


__all__ = ["device_instruments", "resolve"]

"""warmprof: why was the first pass slow, and what exactly would a warm-up have to cover?"""

from __future__ import annotations

from . import _native
from .errors import (
    BackendError,
    DeviceError,
    InputError,
    ModelError,
    ReportError,
    WarmprofError,
)

__version__ = _native.__version__


def backends() -> dict[str, dict]:
    """Backend name -> {"compiled": bool, "available": bool, "reason": str} (reason empty when available)."""
    return {name: dict(entry) for name, entry in _native.backends().items()}


__all__ = [
    "BackendError",
    "DeviceError",
    "InputError",
    "ModelError",
    "ReportError",
    "WarmprofError",
    "backends",
    "__version__",
]

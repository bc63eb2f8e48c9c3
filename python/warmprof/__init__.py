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
from . import render as _render  # noqa: F401  (registers the text renderers behind str(report))

__version__ = _native.__version__


def backends() -> dict[str, dict]:
    """Backend name -> {"compiled": bool, "available": bool, "reason": str} (reason empty when available)."""
    return {name: dict(entry) for name, entry in _native.backends().items()}


def trace(model, shape=None, **kwargs):
    """Trace a model's first pass and attribute its excess time to causes. See warmprof.trace_api."""
    from .trace_api import trace as _trace

    return _trace(model, shape, **kwargs)


def probe(ops=("matmul", "softmax", "elementwise"), **kwargs):
    """Run the op probes (first call vs steady, shape keying, bucketing). See warmprof.probes."""
    from .probes import probe as _probe

    return _probe(ops, **kwargs)


def compare(*reports, **kwargs):
    """Put two or more reports side by side. See warmprof.compare_api."""
    from .compare_api import compare as _compare

    return _compare(*reports, **kwargs)


def load(path):
    """Load a saved report (trace or probe)."""
    from .report import load as _load

    return _load(path)


__all__ = [
    "compare",
    "load",
    "probe",
    "trace",
    "BackendError",
    "DeviceError",
    "InputError",
    "ModelError",
    "ReportError",
    "WarmprofError",
    "backends",
    "__version__",
]

"""warmprof: why was the first pass slow, and what exactly would a warm-up have to cover?"""

from __future__ import annotations

from .system.launch import quiet_start as _quiet_start

_quiet_start()  # first: in warmprof's command line, Ctrl-C while it imports ends it in one line (exit 130)

from . import _native  # noqa: E402
from .errors import (
    BackendError,
    DeviceError,
    InputError,
    ModelError,
    NotWarmError,
    ReportError,
    WarmprofError,
)

__version__ = _native.__version__


def backends() -> dict[str, dict]:
    """Backend name -> {"compiled": bool, "available": bool, "reason": str} (reason empty when available).

    "cupti" adds "path", the libcupti file in use ("" when none is loaded), and is available only
    once a trace has subscribed in this process: before, its reason says "loaded, not yet subscribed".
    """
    from .system import cuda_paths

    cuda_paths.install()
    return {name: dict(entry) for name, entry in _native.backends().items()}


# The entry points are the real functions (help() shows their signatures and docs), imported on
# first use so `import warmprof` stays light: numpy and the attribution code load only when needed.
_LAZY = {
    "trace": ("traces.api", "trace"),
    "TraceOptions": ("traces.options", "TraceOptions"),
    "calibrate": ("traces.calibrate", "calibrate"),
    "probe": ("probes", "probe"),
    "probe_ops": ("probes.aten", "probe_ops"),
    "probe_from": ("probes.aten", "probe_from"),
    "compare": ("report.comparison", "compare"),
    "load": ("report", "load"),
    "watch": ("serving.watch.core", "watch"),
    "plan_buckets": ("serving.buckets", "plan_buckets"),
    "warmup": ("serving.warmup", "warmup"),
    "assert_warm": ("serving.warmup", "assert_warm"),
    "costs_from_probe": ("serving.buckets", "costs_from_probe"),
    "costs_from_watch": ("serving.buckets", "costs_from_watch"),
    "costs_from_trace": ("serving.buckets", "costs_from_trace"),
    "Watcher": ("serving.watch.core", "Watcher"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value  # later lookups skip this hook
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API only (__all__, with the module's own dunders): not the submodules that
    importing warmprof loads (render, report, errors, ...) nor its helpers. `import warmprof.render`
    and the like still work; they are just not listed."""
    return sorted(set(__all__) | {name for name in globals() if name.startswith("__") and name.endswith("__")})


__all__ = [
    "Watcher",
    "assert_warm",
    "warmup",
    "NotWarmError",
    "calibrate",
    "compare",
    "costs_from_probe",
    "costs_from_trace",
    "costs_from_watch",
    "load",
    "plan_buckets",
    "probe",
    "probe_from",
    "probe_ops",
    "trace",
    "TraceOptions",
    "BackendError",
    "DeviceError",
    "InputError",
    "ModelError",
    "ReportError",
    "WarmprofError",
    "backends",
    "__version__",
    "watch",
]

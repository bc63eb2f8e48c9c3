"""What `import warmprof` offers: the public API, and nothing else listed."""

from __future__ import annotations

import importlib
import subprocess
import sys

PUBLIC = {"trace", "TraceOptions", "watch", "Watcher", "warmup", "assert_warm", "NotWarmError", "plan_buckets", "costs_from_probe", "costs_from_watch", "costs_from_trace", "calibrate", "probe", "probe_ops", "probe_from", "compare", "load", "backends",
          "BackendError", "DeviceError", "InputError", "ModelError", "ReportError", "WarmprofError"}


def test_dir_lists_the_public_api_only():
    import warmprof

    importlib.import_module("warmprof.render")  # submodules loaded by now or later are not listed
    importlib.import_module("warmprof.render.format")
    names = {n for n in dir(warmprof) if not (n.startswith("__") and n.endswith("__"))}
    assert names == PUBLIC
    assert "__version__" in dir(warmprof)
    assert set(warmprof.__all__) == PUBLIC | {"__version__"}


def test_every_listed_name_and_the_submodules_still_resolve():
    import warmprof

    for name in PUBLIC:
        assert getattr(warmprof, name) is not None, name
    import warmprof.render  # noqa: F401
    import warmprof.report

    assert warmprof.render.render is not None and warmprof.report.load is warmprof.load


def test_a_fresh_import_lists_the_same():
    """In a fresh interpreter (no test has imported the submodules): the same names."""
    code = "import warmprof; print(sorted(n for n in dir(warmprof) if not n.startswith('__')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(sorted(PUBLIC))

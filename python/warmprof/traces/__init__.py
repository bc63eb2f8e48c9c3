"""The trace protocol: `trace()` runs the passes (api.py), checks and applies the compile option
(compile_options.py), measures this machine's unit costs once per process (calibrate.py), builds
the Report from what the passes gave (build.py) and writes its advice (advice.py).

The package is plural so that `warmprof.trace` stays the function.
"""

from .api import trace

__all__ = ["trace"]

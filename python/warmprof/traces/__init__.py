"""The trace protocol: `trace()` and what its passes, controls and report are built from (README,
Layout). The package is plural so that `warmprof.trace` stays the function."""

from .api import trace

__all__ = ["trace"]

"""Platform fingerprint stored in every report (minimal; extended by the platform issue)."""

from __future__ import annotations

import os
import platform as _platform
import sys
from typing import Any


def fingerprint() -> dict[str, Any]:
    fp: dict[str, Any] = {
        "os": f"{_platform.system()} {_platform.release()}",
        "machine": _platform.machine(),
        "cpu_count": os.cpu_count() or 0,
        "python": sys.version.split()[0],
    }
    try:
        import torch

        fp["torch"] = torch.__version__
    except Exception:  # torch is optional
        pass
    return fp

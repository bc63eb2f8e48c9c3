"""Running the external query tools (nvpmodel, nvidia-smi, sysctl, sw_vers, ioreg, system_profiler).

A `Runner` is `run(argv, timeout_s) -> stdout`, or None when the tool failed, timed out or is
absent; `run_tool` is the real one, and tests inject recorded answers in its place. Every query
runs with a short timeout, so an absent or hung tool costs seconds at most.
"""

from __future__ import annotations

import subprocess
from typing import Callable, Optional

# run(argv, timeout_s) -> stdout, or None when the tool failed, timed out or is absent.
Runner = Callable[[list, float], Optional[str]]

TOOL_TIMEOUT_S = 2.0
SYSTEM_PROFILER_TIMEOUT_S = 5.0  # system_profiler's display report takes about a second


def run_tool(argv: list, timeout_s: float = TOOL_TIMEOUT_S) -> str | None:
    """Run a query tool briefly; None on any failure (absent, non-zero exit, timeout)."""
    try:
        done = subprocess.run(
            [str(a) for a in argv], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return done.stdout if done.returncode == 0 else None

"""What every phase script of the proof shares: the NO GPU exit, the deadline its children must end
by, and writing its result so a cut phase leaves what it had.

Each phase script takes one argument, the JSON file its result goes to, rewrites it as it goes, and
exits 0 (done), 3 (NO GPU: nothing to prove here, said at once) or anything else (failed).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

EXIT_NO_GPU = 3
DEADLINE_VAR = "PROOF_DEADLINE"  # epoch seconds the phase must end by (prove.py sets it)


def save(path: str, result: Any) -> None:
    """Writes `result` as JSON, atomically (a phase killed mid-write keeps the last whole file)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1, default=str)
    os.replace(tmp, path)


def no_gpu_reason() -> str:
    """'' when torch sees a CUDA device; else why not (torch missing, no device, no driver)."""
    try:
        import torch
    except Exception as e:  # an import that fails for any reason is no GPU to prove on
        return f"torch is not importable ({type(e).__name__}: {e})"
    try:
        if torch.cuda.is_available():
            return ""
    except Exception as e:
        return f"torch {torch.__version__}: torch.cuda.is_available() raised {type(e).__name__}: {e}"
    return f"torch {torch.__version__}: torch.cuda.is_available() is False"


def exit_if_no_gpu(out: str) -> None:
    """The phase's first step: with no GPU, say NO GPU, write it as the result and exit 3."""
    why = no_gpu_reason()
    if why:
        save(out, {"no_gpu": why})
        print(f"NO GPU: {why}", flush=True)
        sys.exit(EXIT_NO_GPU)


def left_s(default: float, reserve: float = 1.0) -> float:
    """A child's timeout: `default`, cut to what the phase has left before its deadline (less
    `reserve` for writing the result); at least 1 s."""
    deadline = os.environ.get(DEADLINE_VAR)
    if not deadline:
        return default
    try:
        left = float(deadline) - time.time() - reserve
    except ValueError:
        return default
    return max(1.0, min(default, left))


def last_json_line(text: str) -> Any:
    """The JSON object a child printed last (its result), or None."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{") or line.startswith("["):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None

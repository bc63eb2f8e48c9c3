"""oneDNN's primitive creations in a `warmprof run` tree, from oneDNN's own creation lines.

oneDNN makes a primitive (JIT code generation, xbyak) the first time it meets a shape: vLLM's CPU
linear layers (its own oneDNN, linked into vllm._C) make one per new batch size on the first prefill
and the first decode; torch's own oneDNN makes convolutions', linear layers' and reorders'. The creation
is a first call's cost that no Python-level clock sees. oneDNN times it itself and prints the time with
`ONEDNN_VERBOSE=profile_create`, with printf, to C stdout; every copy of oneDNN in the process (torch's,
an extension's, each with hidden symbols no runtime call could reach) reads that variable once, so:
- the launcher turns the lines on for the tree (`environment`), unless the user set oneDNN's verbosity
  (theirs is kept, and the report says creations went untimed) or passed --no-onednn;
- each process's agent puts the C stdout tap on at its start (`start`, core/stdio_tap.h): the lines
  never reach the user's output, and each creation (`create:cache_miss`) is a span of jit_compile,
  measured, named `onednn:<primitive>`, on the thread that made it, ending when its line arrived. Where
  the tap cannot go on (no glibc), oneDNN's verbosity is taken out of this process's environment again
  before oneDNN reads it, so nothing is printed.
Light: the standard library and warmprof._native only (it runs in every process of the tree).
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from .. import _native
from ..causes import JIT_COMPILE

ENV = "WARMPROF_RUN_ONEDNN"  # "tap": the launcher turned oneDNN's creation lines on for this tree
VERBOSE = "ONEDNN_VERBOSE"
USER_VARS = (VERBOSE, "DNNL_VERBOSE", "MKLDNN_VERBOSE")  # oneDNN 3 reads the first set; older names too
PREFIXES = ["onednn_verbose,", "dnnl_verbose,"]


def supported() -> str:
    """'' where the tap can run (Linux with glibc), else why not."""
    if not sys.platform.startswith("linux"):
        return f"oneDNN's creation lines are taken from C stdout on Linux only (this is {sys.platform})"
    if platform.libc_ver()[0] != "glibc":
        return "oneDNN's creation lines are taken from C stdout with glibc only"
    return ""


def environment(env: dict[str, str], enabled: bool) -> str:
    """The launcher's part: oneDNN's creation timings on for the tree. '' if on, else why not."""
    if not enabled:
        return "--no-onednn"
    user = [v for v in USER_VARS if v in env]
    if user:
        return f"{user[0]}={env[user[0]]} is set (yours): oneDNN's output is left as you asked"
    why = supported()
    if why:
        return why
    env[VERBOSE] = "profile_create"
    env[ENV] = "tap"
    return ""


def start() -> dict[str, Any]:
    """The agent's part, at the process's start (before oneDNN can have read its settings)."""
    if os.environ.get(ENV) != "tap":
        return {}
    why = _native.stdio_tap_start(PREFIXES, JIT_COMPILE)
    if why:
        os.environ.pop(VERBOSE, None)  # never printed to the user's output instead
        return {"on": False, "why": why}
    return {"on": True}


def stats(state: dict[str, Any]) -> dict[str, Any]:
    """What the record says of the tap: its counts, or why it was off."""
    if not state or not state.get("on"):
        return dict(state)
    s = _native.stdio_tap_stats()
    return {"on": True, "creations": int(s["misses"]), "creation_ms": float(s["miss_ms"]), "reused": int(s["hits"]),
            "lines": int(s["lines"]), **({"write_error": s["write_error"]} if s["write_error"] else {})}

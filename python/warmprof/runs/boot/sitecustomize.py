"""`warmprof run`'s start-up hook: this folder is put first on PYTHONPATH, so every Python process of
the command's tree (the command itself, what it spawns, what those spawn: the environment is inherited)
runs this file at start-up, before its own code. It starts warmprof's agent (warmprof.runs.agent) when
WARMPROF_RUN_DIR says where to write, then runs the sitecustomize this one shadows, if there is one.
A Python without warmprof installed, or run with -E / -I (which ignore PYTHONPATH), is not recorded:
the report lists what it saw and says which processes of the tree it did not."""

import os
import sys


def _chain() -> None:
    """Run the next sitecustomize on sys.path (the one this file shadows), as site.py would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    mod = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401  (the shadowed one, if any)
    except ImportError as e:
        if mod is not None:
            sys.modules["sitecustomize"] = mod
        if e.name != "sitecustomize":  # the user's own failed inside: site.py says so, as without warmprof
            raise


if os.environ.get("WARMPROF_RUN_DIR"):
    try:
        from warmprof.runs import agent as _agent

        _agent.start()
    except Exception as _e:  # never break the user's process: say it once, go on unrecorded
        try:
            sys.stderr.write(f"warmprof run: pid {os.getpid()} not recorded: {type(_e).__name__}: {_e}\n")
        except Exception:
            pass
    # oneDNN's creation lines are on for the tree (runs/onednn.py): where no tap takes them here (the agent
    # did not start), they are turned off again before oneDNN reads its settings, never printed
    if os.environ.get("WARMPROF_RUN_ONEDNN") == "tap":
        _a = sys.modules.get("warmprof.runs.agent")
        _cur = _a.current() if _a is not None else None
        if not (_cur is not None and (getattr(_cur, "onednn", None) or {}).get("on")):
            os.environ.pop("ONEDNN_VERBOSE", None)
_chain()

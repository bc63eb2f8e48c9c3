"""What an in-process trace may leave changed in the caller's process, said plainly.

warmprof restores everything it changes itself (hooks, callbacks, fd 1, oneDNN's verbose mode and
its environment variable: each instrument's __exit__, checked by the tests' autouse fixture).
torch changes the process too while a model runs for the first time: importing inductor sets
TORCHINDUCTOR_CACHE_DIR and puts folders on sys.path, for instance. Undoing torch's changes under
it would break torch, so a trace leaves them and its report lists them.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

_SHOWN = 3  # entries named per kind; the rest are counted


@dataclass(frozen=True)
class ProcessState:
    env: dict[str, str]
    path: tuple[str, ...]

    @classmethod
    def take(cls) -> "ProcessState":
        return cls(dict(os.environ), tuple(sys.path))

    def changes_since(self) -> list[str]:
        """Notes for what differs now from this snapshot (empty when nothing does)."""
        now = ProcessState.take()
        notes = []
        # Names only: values can be secrets (tokens), and reports are made to be shared.
        env = [f"{k} set" if k not in self.env else f"{k} changed" if k in now.env else f"{k} unset"
               for k in sorted(set(self.env) | set(now.env)) if self.env.get(k) != now.env.get(k)]
        if env:
            notes.append("environment changed during the trace by torch or the model (warmprof leaves it so; "
                         "values not recorded): " + _listed(env))
        added = [p for p in now.path if p not in self.path]
        removed = [p for p in self.path if p not in now.path]
        if added:
            notes.append("sys.path grew during the trace, by torch or the model (warmprof leaves it so): "
                         + _listed(added))
        if removed:
            notes.append("sys.path lost entries during the trace, by torch or the model: " + _listed(removed))
        return notes


def _listed(items: list[str]) -> str:
    shown = ", ".join(repr(i) if not i else i for i in items[:_SHOWN])
    more = len(items) - _SHOWN
    return shown + (f" and {more} more" if more > 0 else "")

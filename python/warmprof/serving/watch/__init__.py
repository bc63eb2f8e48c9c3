"""Live traffic (warmprof.watch): which cause made a call slow, while serving (core.py), and its report."""

from .core import Watcher, watch

__all__ = ["Watcher", "watch"]

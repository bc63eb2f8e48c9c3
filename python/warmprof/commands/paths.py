"""Output paths every command checks before it does any work (trace, probe, show, compare)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError


def check_output_path(path: str, option: str = "--json") -> None:
    """Refuse an output file that cannot be written, before any work: its folder must exist and be
    writable, and the path must not be a folder itself."""
    if not path:
        raise InputError(f"{option} needs a file path, got an empty one")
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise InputError(f"{option} {path}: is a directory; give a file path inside it")
    if not parent.exists():
        raise InputError(f"{option} {path}: the directory {parent} does not exist")
    if not parent.is_dir():
        raise InputError(f"{option} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: the directory {parent} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise InputError(f"{option} {path}: the file exists and is not writable")

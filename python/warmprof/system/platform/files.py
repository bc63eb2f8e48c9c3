"""Reading a machine's files under a root: the `_Files` reader and the text parsing helpers.

Every path is relative to an injectable root (tests point it at small trees copying the real
files' formats; "/" is the live system). A missing, unreadable or non-text file reads as None,
never an error, so a fact it would have given is simply absent.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

_MAX_READ = 4 << 20
_GIB = float(1 << 30)


class _Files:
    """The files under `root`; `live` when the root is this machine's own "/"."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.live = self.root.resolve() == Path("/").resolve()

    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def exists(self, rel: str) -> bool:
        return self.path(rel).exists()

    def read_raw(self, rel: str | Path) -> str | None:
        """The file's text as is, or None when absent, unreadable or not text."""
        p = rel if isinstance(rel, Path) else self.path(rel)
        try:
            with open(p, "rb") as f:
                return f.read(_MAX_READ).decode("utf-8")
        except (OSError, ValueError):  # absent, a directory, no permission, not UTF-8
            return None

    def read(self, rel: str | Path) -> str | None:
        """The file's text with NULs (device-tree strings) removed and stripped; None if empty."""
        text = (self.read_raw(rel) or "").replace("\x00", "").strip()
        return text or None

    def read_int(self, rel: str | Path) -> int | None:
        text = self.read(rel)
        try:
            return int(text.split()[0]) if text else None
        except ValueError:
            return None

    def glob(self, pattern: str) -> list[Path]:
        return sorted(Path(p) for p in glob.glob(str(self.path(pattern))))

    def tool(self, name: str) -> str | None:
        """Where a tool lives under the root; on the live system, anywhere on PATH too."""
        for d in ("usr/sbin", "usr/bin", "sbin", "bin"):
            p = self.path(f"{d}/{name}")
            if p.is_file():
                return str(p)
        return shutil.which(name) if self.live else None


def _key_values(text: str, sep: str = "=") -> dict[str, str]:
    """KEY=value (os-release) or key : value (cpuinfo, meminfo) lines; quotes removed."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, found, value = line.partition(sep)
        if found and key.strip():
            out.setdefault(key.strip(), value.strip().strip('"').strip("'"))
    return out

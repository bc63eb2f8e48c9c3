r"""Text bound for a terminal: names come from users and reports, and a control character in one
("net\x1b[2J", "a\rb", "\x07") would clear, overwrite or beep instead of printing. safe_text shows
each C0/C1 control character (and DEL) as a visible escape such as \x1b; newlines and tabs stay."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe_text(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)

r"""Text bound for a terminal: names come from users and reports, and a control character in one
("net\x1b[2J", "a\rb", "\x07") would clear, overwrite or beep instead of printing. safe_text shows
each C0/C1 control character (and DEL) as a visible escape such as \x1b; newlines and tabs stay.
one_line() is for a single field (a name, a note): its newlines are escaped too, so a name
cannot forge lines of the report around it."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe_text(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


_ANY_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(text: str) -> str:
    return _ANY_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))

r"""Text bound for a terminal: names come from users and reports, and a control character in one
("net\x1b[2J", "a\rb", "\x07") would clear, overwrite or beep instead of printing. safe_text shows
each C0/C1 control character (and DEL) as a visible escape such as \x1b; newlines and tabs stay.
Bidirectional formatting characters (U+202A-202E, U+2066-2069, U+200E/F, U+061C), which reorder what
the terminal shows ("Trojan Source"), and lone surrogates (a name read with surrogateescape, or a
report's "\udcff"), which no terminal encoding can print, are shown as \uXXXX.
one_line() is for a single field (a name, a note): its newlines are escaped too, so a name
cannot forge lines of the report around it."""

from __future__ import annotations

import re

_UNPRINTABLE = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_CONTROL = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_UNPRINTABLE}]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def safe_text(text: str) -> str:
    return _CONTROL.sub(_escape, text)


_ANY_CONTROL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_UNPRINTABLE}]")


def one_line(text: str) -> str:
    return _ANY_CONTROL.sub(_escape, str(text))

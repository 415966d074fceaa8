"""Text for a terminal: a value someone wrote is shown, never obeyed.

Almost every string the plugin prints was written by someone other than the reader: a
reason or a result a person typed into an annotation, an actor's user name, a message or
a reason a worker left, a name, a condition, an API server's error quoting a value. A
control character in one of them (ESC starts a sequence that moves the cursor, clears the
screen or retitles the window; a newline starts a forged row) or a Unicode format
character (U+202E reverses what follows it) would act on the reader's terminal.

So every line the plugin writes as text passes :func:`escape`, which shows each such
character as a visible escape instead: ``\\n``, ``\\r``, ``\\t``, else ``\\xNN`` /
``\\uNNNN`` / ``\\UNNNNNNNN`` (its code point). One value stays on one line, and a row of
a table stays one row. A backslash is left as it is, so escaping twice changes nothing:
the views escape their values before laying out columns, and the command line escapes
every line again as it writes it (a value typed as the six characters ``\\x1b`` looks like
an escaped ESC; it is shown, not obeyed, either way). ``-o json`` is not escaped here:
``json.dumps`` writes every such character as ``\\uNNNN`` and the document stays exact.
"""

from __future__ import annotations

import unicodedata
from typing import Any

# Control (C0, DEL, C1), format (bidi overrides and isolates, zero-width characters, BOM),
# surrogate, and line and paragraph separator characters.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _shown(char: str) -> str:
    if char in NAMED:
        return NAMED[char]
    if unicodedata.category(char) not in UNSAFE_CATEGORIES:
        return char
    point = ord(char)
    if point < 0x100:
        return f"\\x{point:02x}"
    return f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"


def escape(text: str) -> str:
    """``text`` with every control, format and separator character shown as an escape."""
    if text.isprintable():  # the common case: nothing to do (a space is printable)
        return text
    return "".join(_shown(char) for char in text)


def escaped(document: Any) -> Any:
    """``document`` (a view: dicts, lists, strings, numbers) with every string escaped."""
    if isinstance(document, str):
        return escape(document)
    if isinstance(document, dict):
        return {key: escaped(value) for key, value in document.items()}
    if isinstance(document, list | tuple):
        return [escaped(value) for value in document]
    return document

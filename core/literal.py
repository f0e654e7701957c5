"""Text from a host, a file or the store, made safe to show: the one helper every screen, widget,
dialog, notification and CLI line uses for such strings.

A model folder, a process's command line, a GPU's name, an error a host sent, a log line: any of
them may hold what a terminal acts on (ESC, CSI and OSC sequences that move the cursor, retitle
the window, clear the screen), line breaks that draw over whatever is below (a ``python3 -c``
script's lines over the dashboard's host list), carriage returns and tabs that misplace what
follows, and bidi overrides (U+202E) or zero-width characters that make one name read as another.
:func:`literal` turns every such character into its escape (``\\n``, ``\\x1b``, ``\\u202e``), the
way Python writes it, and leaves everything printable as it is (accented and CJK letters too).

Markup is the other half: the screens put such text into Rich ``Text`` objects (or Textual
widgets told ``markup=False``), never into a string that Rich or Textual parse as markup, so
``[red]x[/red]`` in a folder's name is shown as those characters. The CLI prints it without
markup the same way.

:func:`exact` is for destructive dialogs: the path as an unambiguous quoted literal whenever its
plain form could mislead (an escape, a backslash, a quote, leading or trailing blanks)."""

from __future__ import annotations

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_cache: dict[str, str] = {}


def _escape(ch: str) -> str:
    known = _ESCAPES.get(ch)
    if known is not None:
        return known
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def literal(text: object) -> str:
    """`text` (a str, or anything: its str()) with every character that is not printable escaped as
    Python escapes it: control characters (C0, DEL, C1: ESC, CR, LF, TAB, BEL, ...), format
    characters (bidi overrides and isolates, zero-width joiners and spaces), line and paragraph
    separators, surrogates, private-use and unassigned code points, and spaces other than the
    ASCII space. One line, shown as it reads. Backslashes are left as they are (see :func:`exact`)."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    if text.isprintable():  # (nearly always: one pass in C)
        return text
    return "".join(ch if ch.isprintable() else _cache.get(ch) or _cache.setdefault(ch, _escape(ch))
                   for ch in text)


def literal_lines(text: object) -> str:
    """`text` shown over several lines: each line as :func:`literal` shows it, the line breaks
    (``\\n``, ``\\r\\n``) kept as breaks (a traceback, a py-spy dump, a listing)."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    if text.isprintable():
        return text
    return "\n".join(literal(line) for line in text.replace("\r\n", "\n").split("\n"))


def exact(path: object) -> str:
    """A path for a question that acts on it (delete this?): as it is when that is unambiguous,
    else Python's quoted literal of it (``repr``: in quotes, an ESC written ``\\x1b``, a backslash
    ``\\\\``), so that what the question shows is the path, character for character."""
    if not isinstance(path, str):
        path = str(path)
    if path.isprintable() and path == path.strip() and not any(c in path for c in "\\'\""):
        return path
    return repr(path)

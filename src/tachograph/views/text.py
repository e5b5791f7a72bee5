"""Terminal-safe text: recorded bytes never act on the terminal that shows them.

A recorded payload, actor name or error message is untrusted text. Printed raw it could clear
the screen (``ESC [2J``), set the window title or plant a link (OSC), move the cursor back
over a line (``CR``), start a forged timeline line (``LF``, U+2028), hide or reorder text
(bidi overrides such as U+202E), or cut the output short (``NUL``). :func:`escape` turns each
such character into a visible escape (``\\x1b``, ``\\u202e``) and leaves every other character,
backslashes included, as it is. Every human-readable command passes recorded text through it;
JSON output does not need it (JSON escapes C0 itself, and :func:`escape_json` adds the rest).

This module imports nothing heavy: it is used before rich is loaded, and by ``tacho doctor``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["UNSAFE", "escape", "escape_json", "is_safe", "redact_url", "spell_surrogates"]


def _unsafe_codepoints() -> frozenset[int]:
    points = set(range(0x20))  # C0 controls, including TAB, LF, CR, ESC, NUL
    points.add(0x7F)  # DEL
    points.update(range(0x80, 0xA0))  # C1 controls (0x9B is a one-byte CSI)
    points.update((0x061C, 0x200E, 0x200F))  # bidi marks
    points.update(range(0x202A, 0x202F))  # LRE RLE PDF LRO RLO
    points.update(range(0x2066, 0x206A))  # LRI RLI FSI PDI
    points.update((0x2028, 0x2029))  # line and paragraph separators: a line break to some
    points.update((0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF))  # invisible: hide a difference
    points.update(range(0xD800, 0xE000))  # lone surrogates (undecodable stored bytes)
    # every other format character (Unicode category Cf, as of Unicode 15.1): invisible, and
    # the tag characters (U+E0020-E007F) spell hidden ASCII ("ASCII smuggling")
    for first, last in _FORMAT:
        points.update(range(first, last + 1))
    # invisible by design, and as able to carry hidden bytes: the variation selectors and
    # the Hangul and Mongolian fillers
    points.update(range(0xFE00, 0xFE10))
    points.update(range(0xE0100, 0xE01F0))
    points.update(range(0x180B, 0x1810))
    points.update((0x115F, 0x1160, 0x3164, 0xFFA0))
    # the rest of Unicode's default-ignorable code points (drawn as nothing): the combining
    # grapheme joiner, Khmer's inherent vowels, and the unassigned ones kept for more
    points.update((0x034F, 0x17B4, 0x17B5, 0x2065))
    points.update(range(0xFFF0, 0xFFF9))
    points.update(range(0xE0000, 0xE1000))
    return frozenset(points)


_FORMAT = (
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
)


UNSAFE = _unsafe_codepoints()
"""The code points :func:`escape` replaces."""


def _spelling(point: int) -> str:
    if point < 0x100:
        return f"\\x{point:02x}"
    return f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"


def _json_spelling(point: int) -> str:
    if point < 0x10000:
        return f"\\u{point:04x}"
    high, low = divmod(point - 0x10000, 0x400)  # JSON spells a character past U+FFFF as a pair
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


_TABLE = {point: _spelling(point) for point in UNSAFE}
_KEEP_NEWLINES = {point: value for point, value in _TABLE.items() if point != 0x0A}
_JSON_TABLE = {point: _json_spelling(point) for point in UNSAFE if point >= 0x7F}


def escape(text: str, *, newlines: bool = False) -> str:
    """``text`` with every control, bidi and invisible character shown as an escape.

    With ``newlines=True`` a line feed is kept (for multi-line blocks whose lines are each
    escaped); a carriage return never is, since it overwrites the line it ends.
    """
    if text.isascii() and text.isprintable():
        return text
    return text.translate(_KEEP_NEWLINES if newlines else _TABLE)


def escape_json(text: str) -> str:
    """Serialized JSON made terminal-safe: the unsafe characters JSON leaves raw (DEL, C1,
    bidi, separators) become ``\\uXXXX`` escapes, which keep the JSON valid and equal."""
    if text.isascii():
        return text.replace("\x7f", "\\u007f")
    return text.translate(_JSON_TABLE)


_SURROGATES = {point: _spelling(point) for point in range(0xD800, 0xE000)}


def spell_surrogates(value: Any) -> Any:
    """A JSON value with each lone surrogate in its text (keys too) spelled as :func:`escape`
    spells it (``\\udcff``): text a store read back with surrogates standing for bytes that
    are not UTF-8 (a file changed behind its back), which JSON cannot hold, shown as the
    text commands show it."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.translate(_SURROGATES)
        return value
    if isinstance(value, dict):
        return {spell_surrogates(k): spell_surrogates(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [spell_surrogates(v) for v in value]
    return value


def is_safe(text: str) -> bool:
    """True when :func:`escape` would leave ``text`` unchanged."""
    return escape(text) == text


_SECRET_QUERY = ("key", "token", "secret", "password", "passwd", "sig", "signature", "auth")
"""Query parameters whose values a printed URL hides (``api_key=``, ``access_token=``...)."""
_SECRET_QUERY_NAMES = frozenset({"code"})
"""Query parameters hidden by their whole name only: an Azure Functions key or an OAuth
authorization code is ``code=``, while ``country_code=`` is none."""


def _secret_parameter(name: str) -> bool:
    lower = name.lower()
    return lower in _SECRET_QUERY_NAMES or any(word in lower for word in _SECRET_QUERY)


def redact_url(url: str) -> str:
    """``url`` as it may be printed: its password (``user:***@host``) and the values of
    query parameters named like a credential (``api_key=***``) hidden; anything that is not
    a URL with a scheme, as it is."""
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not parts.scheme or not parts.netloc:
        return url
    netloc = parts.netloc
    if password is not None:
        user = parts.username or ""
        netloc = f"{user}:***@{netloc.rsplit('@', 1)[1]}"
    query = parts.query
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        if any(_secret_parameter(k) for k, _ in pairs):
            query = "&".join(
                f"{urllib.parse.quote(k, safe='')}="
                + ("***" if _secret_parameter(k) else urllib.parse.quote(v, safe=""))
                for k, v in pairs
            )
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))

"""What reaches a terminal from recorded text: every format character (Unicode category Cf,
the tag characters of "ASCII smuggling" among them), the variation selectors that can carry
hidden bytes, and the invisible fillers are shown as escapes, in text and in JSON output;
the JSON stays valid and equal to what it says."""

from __future__ import annotations

import json
import sys
import unicodedata

import pytest

from tachograph.views.text import UNSAFE, escape, escape_json, is_safe


def test_every_format_character_of_this_unicode_is_escaped() -> None:
    missing = [
        f"U+{point:04X}"
        for point in range(sys.maxunicode + 1)
        if unicodedata.category(chr(point)) == "Cf" and point not in UNSAFE
    ]
    assert missing == [], f"Unicode {unicodedata.unidata_version}: {missing}"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("ok\U000e0041\U000e0042", "ok\\U000e0041\\U000e0042"),  # tags spell hidden "AB"
        ("a\u00adb", "a\\xadb"),  # soft hyphen
        ("x\u2062y", "x\\u2062y"),  # invisible times
        ("\u2764\ufe0f", "\u2764\\ufe0f"),  # a variation selector
        ("v\U000e0100", "v\\U000e0100"),
        ("\u3164name", "\\u3164name"),  # Hangul filler
        ("plain text, caf\u00e9 \u4e2d\u6587", "plain text, caf\u00e9 \u4e2d\u6587"),
    ],
)
def test_invisible_characters_are_shown(text: str, shown: str) -> None:
    assert escape(text) == shown
    assert is_safe(shown)


def test_json_output_escapes_them_and_stays_equal() -> None:
    value = {"k\U000e0041": "".join(chr(p) for p in sorted(UNSAFE) if not 0xD800 <= p < 0xE000)}
    raw = json.dumps(value, ensure_ascii=False)
    shown = escape_json(raw)
    assert json.loads(shown) == value
    assert all(ord(c) not in UNSAFE or ord(c) < 0x7F for c in shown)
    assert "\\udb40\\udc41" in shown  # past U+FFFF as a surrogate pair, as JSON spells it


def test_every_default_ignorable_code_point_is_escaped() -> None:
    """Drawn as nothing wherever they appear (Unicode's DerivedCoreProperties): U+034F, the
    Khmer inherent vowels, the unassigned U+2065, U+FFF0-FFF8 and U+E0000-E0FFF among them."""
    ignorable = [
        *range(0x00AD, 0x00AE), 0x034F, 0x061C, *range(0x115F, 0x1161), *range(0x17B4, 0x17B6),
        *range(0x180B, 0x1810), *range(0x200B, 0x2010), *range(0x202A, 0x202F),
        *range(0x2060, 0x2070), 0x3164, *range(0xFE00, 0xFE10), 0xFEFF, 0xFFA0,
        *range(0xFFF0, 0xFFF9), *range(0x1BCA0, 0x1BCA4), *range(0x1D173, 0x1D17B),
        *range(0xE0000, 0xE1000),
    ]  # fmt: skip
    missing = [f"U+{p:04X}" for p in ignorable if p not in UNSAFE]
    assert missing == []

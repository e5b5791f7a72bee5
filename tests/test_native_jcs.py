"""The compiled JCS of stored bytes (``native.jcs``) against what verification computes
without it, ``canonical(orjson.loads(data))``: whenever it answers, the same bytes; where
orjson would refuse the bytes, or read them as another value, no answer (None), so that a
verifier never admits what the reader a replay serves from reads otherwise.

Generated documents in every spelling (orjson's, ``json.dumps`` with and without escapes and
indentation), then mutated byte by byte; numbers as text in every form JSON allows; and the
cases where it must step aside, one by one.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tachograph.record import verify
from tachograph.record.canonical import canonical, es6_number

native = pytest.importorskip(
    "tachograph.record.native", reason="the compiled helpers are not built here"
)


def reference(data: bytes) -> bytes | None:
    """``canonical(orjson.loads(data))``, or None where orjson refuses the bytes or canonical
    refuses the value."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    try:
        return canonical(value)
    except Exception:
        return None


def agrees(data: bytes) -> bytes | None:
    """The compiled answer, checked: None, or exactly the reference's bytes."""
    got = native.jcs(data)
    if got is not None:
        want = reference(data)
        assert want is not None, (data, got)
        assert got == want, (data, got, want)
    return got


# Keys and strings from every plane: ASCII, controls, escapes' characters, Latin, CJK, the
# private-use area and the specials (U+E000 up, where JCS's UTF-16 order differs from the
# code point order), and supplementary characters.
_chars = st.one_of(
    st.sampled_from('abcAZ09_ "\\/\x00\x01\x08\t\n\x0c\r\x1f\x7f'),
    st.characters(min_codepoint=0x80, max_codepoint=0x7FF),
    st.characters(min_codepoint=0x800, max_codepoint=0xD7FF),
    st.characters(min_codepoint=0xE000, max_codepoint=0xFFFF),
    st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF),
)
_text = st.text(_chars, max_size=12)
_numbers = st.one_of(
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True, width=32),
    st.sampled_from([0.0, -0.0, 1.0, 25.0, 1e21, 1e-7, 1e-6, 5e-324, 1.7976931348623157e308]),
    st.integers(-(10**16), 10**16).map(float),
)
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), _numbers, _text),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(_text, inner, max_size=6),
    ),
    max_leaves=30,
)


def _spellings(value: Any) -> list[bytes]:
    out = [
        json.dumps(value, ensure_ascii=True).encode(),
        json.dumps(value, ensure_ascii=False, indent=1).encode("utf-8", "surrogatepass"),
        json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode(),
    ]
    try:
        out.append(orjson.dumps(value))
    except orjson.JSONEncodeError:
        pass
    return out


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(_json)
def test_every_spelling_of_a_document_gives_the_reference_bytes(value: Any) -> None:
    for data in _spellings(value):
        agrees(data)


_bmp_text = st.text(st.characters(max_codepoint=0xD7FF), max_size=8)
_plain_json = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**53) + 1, 2**53 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        _text,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(_bmp_text, inner, max_size=6)
    ),
    max_leaves=30,
)


@settings(max_examples=400)
@given(st.dictionaries(_bmp_text, _plain_json))
def test_documents_it_should_take_are_taken(value: dict[str, Any]) -> None:
    # keys below U+E000 and integers within the profile: the common case must not fall back
    # to the slow path
    data = orjson.dumps(value)
    assert agrees(data) is not None, data


_INTERESTING = [
    *b'"\\{}[]:,0123456789eE-+. \t\n\rtfnu/',
    0x00, 0x1F, 0x7F, 0x80, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEE, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF,
]  # fmt: skip


@settings(max_examples=2500, suppress_health_check=[HealthCheck.too_slow])
@given(
    _json,
    st.lists(
        st.tuples(
            st.sampled_from(["flip", "insert", "delete", "duplicate"]),
            st.integers(0, 10_000),
            st.sampled_from(_INTERESTING),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_mutated_bytes_are_never_admitted_unlike_orjson(
    value: Any, edits: list[tuple[str, int, int]]
) -> None:
    data = bytearray(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    for kind, where, byte in edits:
        at = where % (len(data) + 1)
        if kind == "flip" and at < len(data):
            data[at] = byte
        elif kind == "insert":
            data.insert(at, byte)
        elif kind == "delete" and at < len(data):
            del data[at]
        elif kind == "duplicate":
            data[at:at] = data[at : at + 1 + where % 7]
    agrees(bytes(data))


_number_text = st.from_regex(
    r"\A-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,24})?([eE][+-]?[0-9]{1,3})?\Z", fullmatch=True
)


@settings(max_examples=3000)
@given(_number_text)
def test_numbers_in_every_form_json_allows(text: str) -> None:
    got = agrees(text.encode())
    if got is not None:
        # in an array and as a member too, where the number ends at ',' ']' or '}'
        assert agrees(f"[{text},{text}]".encode()) == b"[" + got + b"," + got + b"]"
        assert agrees(f'{{"b":{text},"a":{text}}}'.encode()) == (
            b'{"a":' + got + b',"b":' + got + b"}"
        )


@settings(max_examples=2000)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_double_in_its_shortest_spellings(value: float) -> None:
    for text in (repr(value), json.dumps(value), f"{value:.17g}", f"{value:.15g}", f"{value:e}"):
        if "inf" in text or "nan" in text:
            continue
        got = agrees(text.encode())
        if got is not None and math.isfinite(float(text)) and float(text) != 0:
            assert got == es6_number(float(text)).encode()


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":1,"a":2}',  # a duplicate key (orjson keeps the last)
        b'{"a":{"x":1,"x":1}}',
        '{"\ue000":1}'.encode(),  # keys from U+E000 up: UTF-16 order is not UTF-8 order
        '{"\U0001f600":1}'.encode(),
        b'{"\\ue000":1}',
        b'{"\\ud83d\\ude00":1}',
        b'"\\ud800"',  # lone surrogates
        b'"\\udc00x"',
        b'"\\ud800\\u0041"',
        b"9007199254740992",  # an integer beyond the profile: the slow path widens it
        b"-9007199254740992",
        b"12345678901234567890",
        b"1e400",  # an infinity
        b"-1e400",
        b"1e-400",  # a fraction that underflows to zero
        b"0." + b"0" * 39 + b"1",  # more than 40 characters
        b"01",  # not JSON
        b"1.",
        b".5",
        b"+1",
        b"-",
        b"1e",
        b"NaN",
        b"Infinity",
        b"[1,]",
        b'{"a":1,}',
        b"{,}",
        b'{"a" 1}',
        b"[1 2]",
        b"",
        b" ",
        b"[1]x",
        b"[1][2]",
        b'"\x00"',  # a raw control character
        b'"\x1f"',
        b'"\xff"',  # invalid UTF-8: a stray byte, overlong, a surrogate, past U+10FFFF
        b'"\xc0\xaf"',
        b'"\xed\xa0\x80"',
        b'"\xf4\x90\x80\x80"',
        b'"\xe2\x82"',
        b'"\\x41"',  # an escape JSON does not have
        b'"\\u12"',
        b'"abc',
        b"tru",
        b"nul",
        b"\xef\xbb\xbf{}",  # a byte-order mark
        b"[" * 61 + b"]" * 61,  # deeper than the compiled walk goes
    ],
)
def test_where_it_steps_aside(data: bytes) -> None:
    assert native.jcs(data) is None


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (b'{"b":1.0,"a":[25.0,-0,-0.0,0.0]}', b'{"a":[25,0,0,0],"b":1}'),
        (b"1e21", b"1e+21"),
        (b"1e20", b"100000000000000000000"),
        (b"0.000001", b"0.000001"),
        (b"0.0000001", b"1e-7"),
        (b"123456789012345.6", b"123456789012345.6"),
        (b"1.7976931348623157e308", b"1.7976931348623157e+308"),
        (b"5e-324", b"5e-324"),
        (
            b'"\\u00e9\\/\\b\\f\\n\\r\\t\\u001F\\u007f\\""',
            '"é/\\b\\f\\n\\r\\t\\u001f\x7f\\""'.encode(),
        ),
        (b' {\n "z" : [ ] , "y" : { } }\t', b'{"y":{},"z":[]}'),
        ('{"é":1,"e":2,"名":3,"f":4}'.encode(), '{"e":2,"f":4,"é":1,"名":3}'.encode()),
        (b'{"a\\u0000":1,"a":2}', b'{"a":2,"a\\u0000":1}'),
        (b'"\\ud83d\\ude00"', '"\U0001f600"'.encode()),
        (b"[" * 60 + b"]" * 60, b"[" * 60 + b"]" * 60),
    ],
)
def test_known_answers(data: bytes, want: bytes) -> None:
    assert agrees(data) == want


def test_many_members_are_sorted_and_checked_for_duplicates() -> None:
    keys = [f"k{(i * 7919) % 1000:04d}" for i in range(1000)]
    data = orjson.dumps({k: i for i, k in enumerate(keys)})
    assert agrees(data) == canonical({k: i for i, k in enumerate(keys)})
    twice = data[:-1] + b',"k0500":1}'
    assert native.jcs(twice) is None


def test_only_bytes_are_taken() -> None:
    with pytest.raises(TypeError):
        native.jcs("{}")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        native.jcs(bytearray(b"{}"))  # type: ignore[arg-type]


def test_verification_digests_stored_bytes_the_same_with_and_without_it() -> None:
    salt = bytes(range(16))
    for data in (
        orjson.dumps({"b": 25.0, "a": "é", "c": [1.5, None, True]}),
        b'{"a":1,"a":2}',
        b"9007199254740993",
        b"{not json",
        b'"\\ud800"',
    ):
        assert verify._stored_digest(salt, data) == verify._stored_digest_py(salt, data)

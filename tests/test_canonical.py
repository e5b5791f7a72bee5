"""Canonical bytes (SPEC section 2): RFC 8785 for the closed value profile, and nothing else."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import math
import struct
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from tachograph.errors import ProfileError, TachographError
from tachograph.record import canonical as canonical_module
from tachograph.record.canonical import (
    MAX_DEPTH,
    MAX_SAFE_INTEGER,
    DuplicateKeyError,
    canonical,
    canonical_exact,
    check_profile,
    es6_number,
    loads,
    loads_strict,
    use_compiled,
)


@pytest.fixture(scope="module", autouse=True, params=["compiled", "python"])
def scan_mode(request: pytest.FixtureRequest) -> Any:
    """Every test of this module runs twice: with the compiled scan (``native.c``) and with
    the Python walk it replaces; both must give the same bytes and the same refusals."""
    if request.param == "compiled" and not canonical_module.COMPILED:
        pytest.skip("the compiled scan is not in use (not built, or TACHOGRAPH_PURE_PYTHON set)")
    assert use_compiled(request.param == "compiled") is (request.param == "compiled")
    yield request.param
    use_compiled(True)


# -- the reference vectors ---------------------------------------------------------------------


def test_jcs_vectors(vectors_dir: Path, jcs_case: str) -> None:
    jcs = vectors_dir / "jcs"
    value = loads_strict((jcs / "input" / f"{jcs_case}.json").read_bytes())
    expected = (jcs / "output" / f"{jcs_case}.json").read_bytes()
    hex_text = (jcs / "outhex" / f"{jcs_case}.txt").read_text()
    assert bytes.fromhex("".join(hex_text.split())) == expected  # the vector agrees with itself
    assert canonical(value) == expected
    assert canonical_exact(value) == expected


def _es6_lines(vectors_dir: Path) -> list[tuple[str, float, str]]:
    rows = []
    for line in (vectors_dir / "jcs" / "es6numbers.txt").read_text().splitlines():
        bits, expected = line.split(",")
        value = struct.unpack(">d", bytes.fromhex(bits.zfill(16)))[0]
        rows.append((bits, value, expected))
    return rows


def test_every_es6_number_vector(vectors_dir: Path) -> None:
    rows = _es6_lines(vectors_dir)
    assert len(rows) > 20_000  # the whole file, not a sample
    wrong = []
    for bits, value, expected in rows:
        assert math.isfinite(value), bits
        got = (es6_number(value), canonical(value), canonical_exact(value), canonical([value]))
        if got != (expected, expected.encode(), expected.encode(), f"[{expected}]".encode()):
            wrong.append((bits, expected, got))
    assert wrong == []


def test_es6_number_refuses_non_finite() -> None:
    for value in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="no JSON form"):
            es6_number(value)


# -- generated values against the rfc8785 package ------------------------------------------------

_texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
_high_keys = st.text(
    st.characters(min_codepoint=0xE000, exclude_categories=("Cs",)), min_size=1, max_size=4
)
_astral = st.text(st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF), max_size=4)
_keys = _texts | _high_keys | _astral
_ints = st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
_floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(2**70), 2**70).map(float),  # integral, printed without a fraction below 1e21
    st.floats(1e-7, 1e-5) | st.floats(-1e-5, -1e-7),  # ECMAScript fixed notation down to 1e-6
    st.floats(1e15, 1e300) | st.floats(-1e300, -1e15),
    st.sampled_from([0.0, -0.0, 1e21, 1e-6, 1e-7, 5e-324, 1.7976931348623157e308, 0.1, 1.0]),
)
_scalars = st.none() | st.booleans() | _ints | _floats | _texts | _astral
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_keys, inner, max_size=5),
    max_leaves=30,
)


@given(_values)
def test_canonical_matches_rfc8785(value: Any) -> None:
    expected = rfc8785.dumps(value)
    assert canonical(value) == expected
    assert canonical_exact(value) == expected


@given(_values)
def test_fast_path_equals_exact_path(value: Any) -> None:
    assert canonical(value) == canonical_exact(value)


@given(st.dictionaries(_high_keys | _astral | _texts, _ints, min_size=2, max_size=8))
def test_keys_sort_by_utf16_code_units(value: dict[str, int]) -> None:
    assert canonical(value) == rfc8785.dumps(value)


def _permuted(value: Any, data: st.DataObject) -> Any:
    if type(value) is dict:
        keys = data.draw(st.permutations(list(value)))
        return {k: _permuted(value[k], data) for k in keys}
    if type(value) is list:
        return [_permuted(v, data) for v in value]
    return value


@given(_values, st.data())
def test_key_order_does_not_matter(value: Any, data: st.DataObject) -> None:
    assert canonical(_permuted(value, data)) == canonical(value)


@given(_values)
def test_canonical_bytes_read_back_to_the_same_bytes(value: Any) -> None:
    data = canonical(value)
    assert canonical(loads_strict(data)) == data
    assert canonical(loads(data)) == data


def test_integral_and_tiny_floats() -> None:
    # ECMAScript prints the shortest round-trip digits, zero-padded: 2**60 as ...847000, as the
    # es6numbers vectors do (2**68 -> 295147905179352830000). SPEC section 2's example
    # "1152921504606846976" is the integer's digits, not the JCS form of the double.
    assert (
        canonical({"a": 1.0, "b": 2.0**60, "c": -0.0}) == b'{"a":1,"b":1152921504606847000,"c":0}'
    )
    assert canonical(2.0**60) == rfc8785.dumps(2.0**60)
    assert canonical([1e-6, 1e-7, 1.5e-5, 1e21, 1e20]) == (
        b"[0.000001,1e-7,0.000015,1e+21,100000000000000000000]"
    )
    assert canonical({"\ue000": 1, "\U0001f600": 2}) == rfc8785.dumps(
        {"\ue000": 1, "\U0001f600": 2}
    )
    # U+1F600 is a surrogate pair D83D DE00 in UTF-16: it sorts before U+E000
    assert canonical({"\ue000": 1, "\U0001f600": 2}).index("😀".encode()) < canonical(
        {"\ue000": 1, "\U0001f600": 2}
    ).index("\ue000".encode())


def test_max_safe_integers_are_admitted() -> None:
    assert (
        canonical([MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER]) == b"[9007199254740991,-9007199254740991]"
    )


def test_orjson_refuses_what_the_scan_leaves_to_it() -> None:
    # canonical leaves keys, integers and lone surrogates to orjson: its limits must be ours
    strict = orjson.OPT_STRICT_INTEGER | orjson.OPT_SORT_KEYS
    assert orjson.dumps([MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER], option=strict)
    for bad in (
        MAX_SAFE_INTEGER + 1,
        -MAX_SAFE_INTEGER - 1,
        {_Text("a"): 1},
        {1: 1},
        {"k": "\ud800"},
        {"\udfff": 1},
    ):
        with pytest.raises(orjson.JSONEncodeError):
            orjson.dumps(bad, option=strict)


# -- values outside the profile -------------------------------------------------------------------


class _Colour(enum.Enum):
    RED = "red"


class _Label(str, enum.Enum):
    SHIPPED = "shipped"


class _Level(enum.IntEnum):
    HIGH = 3


class _Text(str):
    pass


class _Number(int):
    pass


class _Ratio(float):
    pass


class _Mapping(dict):  # type: ignore[type-arg]
    pass


class _Items(list):  # type: ignore[type-arg]
    pass


@dataclasses.dataclass
class _Point:
    x: int


def _nest(levels: int, kind: str) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value] if kind == "list" else {"k": value}
    return value


_REJECTED = [
    pytest.param(math.nan, "payload.args.x", "float", id="nan"),
    pytest.param(math.inf, "payload.args.x", "float", id="inf"),
    pytest.param(-math.inf, "payload.args.x", "float", id="-inf"),
    pytest.param(2**53, "payload.args.x", "integer", id="int-2^53"),
    pytest.param(-(2**53), "payload.args.x", "integer", id="int--2^53"),
    pytest.param(10**30, "payload.args.x", "integer", id="int-huge"),
    pytest.param("ok \ud800", "payload.args.x", "surrogate", id="lone-high-surrogate"),
    pytest.param("\udfff", "payload.args.x", "surrogate", id="lone-low-surrogate"),
    pytest.param(datetime.datetime(2026, 1, 1), "payload.args.x", "type", id="datetime"),
    pytest.param(datetime.date(2026, 1, 1), "payload.args.x", "type", id="date"),
    pytest.param({1, 2}, "payload.args.x", "type", id="set"),
    pytest.param(frozenset(), "payload.args.x", "type", id="frozenset"),
    pytest.param(b"bytes", "payload.args.x", "type", id="bytes"),
    pytest.param(bytearray(b"x"), "payload.args.x", "type", id="bytearray"),
    pytest.param((1, 2), "payload.args.x", "type", id="tuple"),
    pytest.param(decimal.Decimal("1.5"), "payload.args.x", "type", id="decimal"),
    pytest.param(object(), "payload.args.x", "type", id="object"),
    pytest.param(_Colour.RED, "payload.args.x", "type", id="enum"),
    pytest.param(_Label.SHIPPED, "payload.args.x", "type", id="str-enum"),
    pytest.param(complex(1, 2), "payload.args.x", "type", id="complex"),
    # what orjson itself would print: the scan must refuse it
    pytest.param(_Level.HIGH, "payload.args.x", "type", id="int-enum"),
    pytest.param(_Text("s"), "payload.args.x", "type", id="str-subclass"),
    pytest.param(_Number(1), "payload.args.x", "type", id="int-subclass"),
    pytest.param(_Ratio(0.5), "payload.args.x", "type", id="float-subclass"),
    pytest.param(_Mapping(a=1), "payload.args.x", "type", id="dict-subclass"),
    pytest.param(_Items([1]), "payload.args.x", "type", id="list-subclass"),
    pytest.param(uuid.UUID(int=1), "payload.args.x", "type", id="uuid"),
    pytest.param(_Point(1), "payload.args.x", "type", id="dataclass"),
    pytest.param(orjson.Fragment(b"1"), "payload.args.x", "type", id="fragment"),
    pytest.param(datetime.time(1, 2), "payload.args.x", "type", id="time"),
    pytest.param([[2**53]], "payload.args.x[0][0]", "integer", id="nested-int-2^53"),
    pytest.param({"k": -(2**63)}, "payload.args.x.k", "integer", id="int64-min"),
    pytest.param(2**64, "payload.args.x", "integer", id="int-2^64"),
    pytest.param({1: "one"}, "payload.args.x[1]", "key", id="int-key"),
    pytest.param({None: "none"}, "payload.args.x[None]", "key", id="none-key"),
    pytest.param({("a",): 1}, "payload.args.x[('a',)]", "key", id="tuple-key"),
    pytest.param({_Text("a"): 1}, "payload.args.x['a']", "key", id="str-subclass-key"),
    pytest.param(
        {_Label.SHIPPED: 1}, "payload.args.x[<_Label.SHIPPED: 'shipped'>]", "key", id="str-enum-key"
    ),
    pytest.param({True: 1}, "payload.args.x[True]", "key", id="bool-key"),
    pytest.param({1.5: 1}, "payload.args.x[1.5]", "key", id="float-key"),
    pytest.param({"\ud800": 1}, 'payload.args.x["\ud800"]', "surrogate", id="surrogate-key"),
    pytest.param([0, [1, math.nan]], "payload.args.x[1][1]", "float", id="nan-in-list"),
    pytest.param({"a b": {"c": {1}}}, 'payload.args.x["a b"].c', "type", id="quoted-key-path"),
]


@pytest.mark.parametrize(("bad", "path", "reason"), _REJECTED)
def test_values_outside_the_profile_are_refused_naming_the_path(
    bad: Any, path: str, reason: str
) -> None:
    value = {"tool": "t", "args": {"ok": [1, 2.5, "s"], "x": bad}}
    for encode in (canonical, canonical_exact, check_profile):
        with pytest.raises(ProfileError) as info:
            encode(value, "payload")
        err = info.value
        assert err.path == path
        assert err.reason == reason
        assert str(err).startswith(f"{path}: ")
        assert isinstance(err, TachographError)
        assert isinstance(err, TypeError)


def test_a_datetime_gets_a_message_that_says_what_to_do() -> None:
    with pytest.raises(ProfileError) as info:
        canonical({"args": {"when": datetime.datetime(2026, 10, 15)}}, "payload")
    assert info.value.path == "payload.args.when"
    assert str(info.value) == (
        "payload.args.when: datetime.datetime is not a JSON value; convert it first"
    )


@pytest.mark.parametrize(
    ("bad", "hint"),
    [
        ((1, 2), "convert it to a list first"),
        (_Label.SHIPPED, "convert it to a plain str first"),
        (decimal.Decimal(1), "convert it first"),
        ({1}, "convert it first"),
    ],
)
def test_rejections_carry_a_hint(bad: Any, hint: str) -> None:
    with pytest.raises(ProfileError, match=hint):
        canonical({"v": bad}, "payload")


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_nesting_is_limited_to_64_levels(kind: str) -> None:
    assert MAX_DEPTH == 64
    deepest = _nest(MAX_DEPTH, kind)
    assert canonical(deepest) == canonical_exact(deepest) == rfc8785.dumps(deepest)
    for too_deep in (_nest(MAX_DEPTH + 1, kind), _nest(5000, kind)):
        for encode in (canonical, canonical_exact, check_profile):
            with pytest.raises(ProfileError) as info:
                encode(too_deep, "payload")
            assert info.value.reason == "depth"
            assert "deeper than 64" in str(info.value)


def test_rejection_does_not_depend_on_the_fast_path() -> None:
    # a value that needs the exact path (integral float, non-ASCII key) and is also bad
    with pytest.raises(ProfileError) as info:
        canonical({"é": 1.0, "z": [math.nan]}, "payload")
    assert info.value.path == "payload.z[0]"


def test_the_top_level_path_defaults_to_value() -> None:
    with pytest.raises(ProfileError) as info:
        canonical(math.nan)
    assert info.value.path == "value"


# -- reading ------------------------------------------------------------------------------------


def test_loads_strict_refuses_duplicate_keys() -> None:
    with pytest.raises(DuplicateKeyError) as info:
        loads_strict('{"a": 1, "b": {"c": 1, "c": 2}}')
    assert info.value.key == "c"


def test_large_integers_read_as_doubles() -> None:
    # SPEC section 2: a number beyond 2^53 - 1 is taken as the double of the same value
    text = '{"n": 1152921504606846976, "m": -9007199254740993, "k": 9007199254740991}'
    for parse in (loads, loads_strict):
        value = parse(text)
        assert value == {"n": 2.0**60, "m": -9007199254740992.0, "k": 9007199254740991}
        assert type(value["n"]) is float
        assert type(value["k"]) is int
        assert canonical(value) == rfc8785.dumps(json.loads(text, parse_int=float))


def test_loads_strict_parses_nan_so_the_profile_check_can_name_it() -> None:
    value = loads_strict('{"x": NaN}')
    with pytest.raises(ProfileError, match=r"payload\.x"):
        canonical(value, "payload")


# -- the fast path for integral floats and non-ASCII keys ----------------------------------------

_non_ascii_keys = st.text(
    st.characters(min_codepoint=0x80, exclude_categories=("Cs",)), min_size=1, max_size=6
)
_integral_floats = st.integers(-(2**53), 2**53).map(float) | st.integers(-(2**80), 2**80).map(float)
_float_heavy = st.recursive(
    _integral_floats | _floats | _ints | _texts,
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.dictionaries(_non_ascii_keys | _keys | _texts, inner, max_size=6)
    ),
    max_leaves=40,
)


@settings(max_examples=600)
@given(_float_heavy)
def test_the_float_and_key_rewrite_is_byte_identical(value: Any) -> None:
    snapshot = repr(value)
    expected = rfc8785.dumps(value)
    assert canonical(value) == expected
    assert canonical_exact(value) == expected
    assert repr(value) == snapshot  # the rewrite works on a copy: the caller's value is intact


@settings(max_examples=300)
@given(st.dictionaries(_non_ascii_keys, _integral_floats | _ints, min_size=1, max_size=10))
def test_non_ascii_keys_below_u_e000_keep_orjson_order(value: dict[str, Any]) -> None:
    assert canonical(value) == rfc8785.dumps(value) == canonical_exact(value)


def test_integral_floats_print_as_integers_on_the_fast_path() -> None:
    value = {"price": 25.0, "qty": [1.0, -0.0, 2.0**53 - 1, 2.0**53, 2.0**60], "é": {"ü": 3.5}}
    assert (
        canonical(value)
        == (
            '{"price":25,"qty":[1,0,9007199254740991,9007199254740992,1152921504606847000],'
            '"é":{"ü":3.5}}'
        ).encode()
    )
    assert canonical(value) == rfc8785.dumps(value)
    assert type(value["price"]) is float  # not rewritten in place


# Strings that look like the number spellings orjson and JCS print differently, so that a
# drop of ".0" inside a string, a key or next to a negative zero is tried.
_tricky_texts = st.sampled_from(
    [
        *("1.0,", "x.0]", ".0}", "-0,", "1e5", "2E3", "0" * 16, "a.0", "25.0", "{", "[[", "é.0,"),
        # escaped quotes and backslashes
        *('"1.0,', "\\", 'a\\"', '\\".0]', '\\\\"2.0}', '"', "-0.0,", "\n1.0,"),
    ]
)
_parsed_scalars = _scalars | _tricky_texts
_parsed_values = st.recursive(
    _parsed_scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(_keys | _tricky_texts, inner, max_size=5)
    ),
    max_leaves=30,
)
# Mostly integral floats (what orjson prints unlike JCS), mixed with the tricky strings.
_integral_floats = st.integers(-(10**9), 10**9).map(float) | st.sampled_from([0.0, 1e14, 0.5, 3.25])
_float_heavy = st.recursive(
    _integral_floats | _tricky_texts | _texts,
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(_keys | _tricky_texts, inner, max_size=6)
    ),
    max_leaves=40,
)


def _canonical_of_parsed(value: dict[str, Any]) -> None:
    """What check 5 does with a stored payload: parse its bytes, encode the value."""
    try:
        parsed = orjson.loads(orjson.dumps(value))
    except orjson.JSONEncodeError:
        return  # not storable as JSON bytes in the first place
    assert canonical(parsed) == canonical_exact(parsed) == rfc8785.dumps(parsed)


@given(st.dictionaries(_keys | _tricky_texts, _parsed_values, max_size=6))
def test_canonical_of_stored_payloads(value: dict[str, Any]) -> None:
    """The verifier encodes whatever orjson parses back from stored bytes: exactly."""
    _canonical_of_parsed(value)


@settings(max_examples=500)
@given(st.dictionaries(_keys | _tricky_texts, _float_heavy, min_size=1, max_size=6))
def test_canonical_of_float_heavy_stored_payloads(value: dict[str, Any]) -> None:
    _canonical_of_parsed(value)


def test_canonical_of_the_common_float_payload() -> None:
    payload = {"usage": {"cost_usd": 25.0, "scores": [1.0, 0.5, 3.0]}, "métadonnées": {"clé": 2.0}}
    _canonical_of_parsed(payload)
    # a string that holds what the drop edits, escaped quotes and backslashes: the strings
    # are left alone
    for tricked in (
        {"note": "1.0,", "n": 2.0},
        {"note": 'say "3.0," \\', "n": [2.0, {"k\\": "x\\\\"}], "m": '\\"4.0}'},
    ):
        _canonical_of_parsed(tricked)
        assert canonical(tricked) == rfc8785.dumps(tricked)


# -- the compiled scan against the Python walk ---------------------------------------------------


def _python_answer(value: Any) -> int | str:
    try:
        return canonical_module._scan(value, 1)
    except (canonical_module._Reject, RecursionError):
        return "reject"


def _compiled_answer(value: Any) -> int | str:
    assert canonical_module._compiled is not None
    try:
        return canonical_module._compiled.scan(value)
    except ValueError:
        return "reject"


_odd_values = st.sampled_from(
    [
        (1, 2),
        math.nan,
        math.inf,
        -math.inf,
        -0.0,
        1e16,
        -1e16,
        9999999999999998.0,
        1e-5,
        -1e-5,
        9.9e-6,
        2.0**53,
        decimal.Decimal(1),
        uuid.UUID(int=1),
        datetime.date(2026, 1, 1),
        b"x",
        bytearray(b"x"),
        {1, 2},
        frozenset(),
        object(),
        True,
        2**80,
    ]
)
_scan_values = st.recursive(
    _scalars | _odd_values | _integral_floats,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_keys, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=800)
@given(_scan_values)
def test_the_compiled_scan_answers_as_the_python_walk(value: Any) -> None:
    if canonical_module._compiled is None:
        pytest.skip("the compiled scan is not in use (not built, or TACHOGRAPH_PURE_PYTHON set)")
    assert _compiled_answer(value) == _python_answer(value)


def test_the_compiled_scan_refuses_subclasses_and_depth_as_the_python_walk() -> None:
    if canonical_module._compiled is None:
        pytest.skip("the compiled scan is not in use (not built, or TACHOGRAPH_PURE_PYTHON set)")
    for bad in (
        [_Text("x")],
        [_Ratio(1.0)],
        [_Mapping()],
        [_Items()],
        {"k": _Text("v")},
        _Mapping(),
        _Items(),
    ):
        assert _compiled_answer(bad) == _python_answer(bad) == "reject"
    for levels, kind in ((MAX_DEPTH, "list"), (MAX_DEPTH + 1, "list"), (MAX_DEPTH + 1, "dict")):
        nested: Any = 1.0
        for _ in range(levels):
            nested = [nested] if kind == "list" else {"k": nested}
        assert _compiled_answer(nested) == _python_answer(nested)
    deep: Any = []
    for _ in range(100_000):  # far past the recursion limit: refused, no crash
        deep = [deep]
    assert _compiled_answer(deep) == "reject"
    # counts past 32 bits of either field stay exact
    many = [1.0] * 70_000 + [-0.0] * 3
    assert _compiled_answer(many) == _python_answer(many) == 70_000 + 3 * (1 << 40)


_drop_bytes = st.lists(
    st.sampled_from([b".0", b",", b"]", b"}", b"0", b"1", b".", b'"', b"a", b".0,", b"e"]),
    max_size=40,
).map(b"".join)


@settings(max_examples=800)
@given(_drop_bytes, st.integers(0, 12))
def test_the_compiled_drop_answers_as_the_regular_expression(data: bytes, count: int) -> None:
    if canonical_module._compiled is None:
        pytest.skip("the compiled scan is not in use (not built, or TACHOGRAPH_PURE_PYTHON set)")
    expected = canonical_module._drop_dot_zero_py(data, count)
    assert canonical_module._compiled.drop_dot_zero(data, count) == expected
    found = canonical_module._DOT_ZERO_BEFORE_END.subn(b"", data)[1]
    assert canonical_module._compiled.drop_dot_zero(data, found) is not None


def test_the_compiled_count_of_other_floats_does_not_wrap_around() -> None:
    """2^24 floats of the 'other' kind would carry the compiled count past 64 bits, to 0: it
    stops counting instead, and still says 'other floats here'."""
    if canonical_module._compiled is None:
        pytest.skip("the compiled scan is not in use (not built, or TACHOGRAPH_PURE_PYTHON set)")
    many = [1e-7] * (2**24 + 3)
    flags = canonical_module._compiled.scan(many)
    assert flags >= 1 << 40
    assert canonical_module._compiled.scan([*many, 1.0]) == flags + 1

"""The compiled format check of a stored row (``native.row_plain``) against the Python one it
replaces (``verify._row_plainly_well_formed_py``): the same answer for every row, well formed
or broken in any one field, and verification gives the same reports with either."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tachograph.record import verify
from tachograph.record.event import ENVELOPE_KEYS
from tachograph.record.rows import StoredRow

native = pytest.importorskip(
    "tachograph.record.native", reason="the compiled helpers are not built here"
)

GOOD: tuple[Any, ...] = (
    "default",
    "run-1:a.b_c",
    0,
    "01KBEXAMPE" + "0" * 14 + "AZ",
    "2026-12-03T08:00:00.123456Z",
    "tool.requested",
    "agent",
    "0af7651916cd43dd8448eb211c80319c",
    "b7ad6b7169203331",
    "run-1:tool:0123",
    "claude-sonnet-4-5",
    42,
    "sha256:" + "ab" * 32,
    None,
    "sha256:" + "cd" * 32,
    b'{"x":1}',
    "0f" * 16,
)
assert len(GOOD) == len(StoredRow._fields) == 17


def _same(row: tuple[Any, ...]) -> bool:
    python = verify._row_plainly_well_formed_py(row)
    assert native.row_plain(row) is python, row
    return python


def test_a_well_formed_row_and_its_optional_fields() -> None:
    assert _same(GOOD)
    for index in (7, 8, 9, 10, 11, 13, 15, 16):  # every field that may be null
        row = list(GOOD)
        row[index] = None
        assert _same(tuple(row))
    assert _same(("t", *GOOD[1:]))
    assert _same((*GOOD[:5], "handoff", *GOOD[6:]))
    assert _same((*GOOD[:5], "decision", *GOOD[6:]))


# Values that break a field or come close: wrong types, subclasses, lengths, characters,
# non-ASCII look-alikes, the boundaries of the integer ranges.
class _Str(str):
    pass


class _Int(int):
    pass


_ODD: list[Any] = [
    None,
    "",
    "~",
    "\n",
    "a\nb",
    "é",
    "\uff21",  # fullwidth A
    "\uff10",  # fullwidth 0
    "x" * 64,
    "x" * 65,
    "x" * 128,
    "x" * 129,
    _Str("default"),
    b"default",
    0,
    -1,
    True,
    _Int(1),
    1.0,
    2**53 - 1,
    2**53,
    -(2**53) + 1,
    -(2**53),
    2**70,
    "0" * 32,
    "0" * 16,
    "0" * 31 + "1",
    "0" * 15 + "1",
    "A" * 32,
    "sha256:" + "AB" * 32,
    "sha256:" + "ab" * 31,
    "sha256:" + "ab" * 32 + "\n",
    "sha257:" + "ab" * 32,
    "01KBEXAMPE" + "0" * 14 + "AI",
    "01KBEXAMPE" + "0" * 14 + "AL",
    "01KBEXAMPE" + "0" * 14 + "AO",
    "01KBEXAMPE" + "0" * 14 + "AU",
    "01KBEXAMPE" + "0" * 15 + "A",
    "01kbexampe" + "0" * 14 + "az",
    "2026-12-03T08:00:00.123456",
    "2026-12-03 08:00:00.123456Z",
    "2026-12-03T08:00:00.12345Z",
    "tool",
    "tool.",
    ".tool",
    "tool..x",
    "Tool.x",
    "tool.X",
    "t1.x_2.y",
    "tool.1x",
    "handoffs",
    "decision.made",
    "a:b",
    "a/b",
    "a b",
    bytearray(b"{}"),
    memoryview(b"{}"),
]


@settings(max_examples=1500)
@given(
    st.lists(
        st.tuples(st.integers(0, 16), st.sampled_from(_ODD) | st.text(max_size=40)),
        min_size=1,
        max_size=3,
    )
)
def test_the_compiled_check_answers_as_the_python_one(changes: list[tuple[int, Any]]) -> None:
    row = list(GOOD)
    for index, value in changes:
        row[index] = value
    _same(tuple(row))


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_.ABZ:-~é\n", max_size=30))
def test_identifier_and_type_fields_on_generated_text(text: str) -> None:
    for index in (0, 1, 3, 5, 6):
        row = list(GOOD)
        row[index] = text
        _same(tuple(row))


# The compiled checks read each character's class from a table (no branch per character):
# every code point up to 255, and a few beyond, at the first, a middle and the last place of
# each field whose characters are checked one by one.
_CHARACTER_FIELDS = {0: 1, 1: 3, 3: 13, 7: 16, 8: 8, 12: 40, 13: 70, 14: 7, 16: 31}


@pytest.mark.parametrize("index", sorted(_CHARACTER_FIELDS))
def test_every_character_in_every_checked_field(index: int) -> None:
    base = GOOD[index] if GOOD[index] is not None else "sha256:" + "ef" * 32
    for at in (0, _CHARACTER_FIELDS[index], len(base) - 1):
        for code in [*range(256), 0x100, 0x660, 0xFF21, 0x1D7D8]:
            row = list(GOOD)
            row[index] = base[:at] + chr(code) + base[at + 1 :]
            _same(tuple(row))


def test_the_verifier_uses_the_compiled_check_unless_told_not_to() -> None:
    from tachograph.record import compiled, event

    if compiled.NATIVE is None:  # TACHOGRAPH_PURE_PYTHON is set
        assert verify._row_plainly_well_formed is verify._row_plainly_well_formed_py
        assert event._native_envelope is None
    else:
        assert verify._row_plainly_well_formed is native.row_plain
        assert event._native_envelope is native.envelope


def test_the_pure_python_switch_is_read_at_import() -> None:
    probe = (
        "from tachograph.record import canonical, compiled, event, verify;"
        "print(compiled.NATIVE is None, canonical.COMPILED, event._native_envelope is None,"
        " verify._row_plainly_well_formed is verify._row_plainly_well_formed_py)"
    )
    for value, expected in (("1", "True False True True"), ("0", "False True False False")):
        env = dict(os.environ, TACHOGRAPH_PURE_PYTHON=value)
        done = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
        )
        assert done.stdout.strip() == expected


def test_a_row_that_is_not_a_17_tuple_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        native.row_plain(GOOD[:16])
    with pytest.raises(TypeError):
        native.row_plain(list(GOOD))


# -- the envelope's bytes ------------------------------------------------------------------------

_ENVELOPE: tuple[Any, ...] = (1, *GOOD[:14])  # v, then the row up to prev_hash


def _orjson_envelope(values: tuple[Any, ...]) -> bytes | str:
    import orjson

    try:
        return orjson.dumps(
            dict(sorted(zip(ENVELOPE_KEYS, values, strict=True))), option=orjson.OPT_STRICT_INTEGER
        )
    except (orjson.JSONEncodeError, TypeError):
        return "refused"


def _via_envelope_bytes(values: tuple[Any, ...]) -> bytes | str:
    import orjson

    from tachograph.record.event import envelope_bytes

    try:
        return envelope_bytes(*values)
    except (orjson.JSONEncodeError, TypeError):
        return "refused"


_envelope_values = (
    st.none()
    | st.text()
    | st.integers(-(2**63), 2**63)
    | st.sampled_from(_ODD)
    | st.floats(allow_nan=False)
    | st.text(st.characters(codec="utf-8") | st.sampled_from(["\ud800", "\udfff"]), max_size=8)
)


@settings(max_examples=1500)
@given(st.lists(st.tuples(st.integers(0, 14), _envelope_values), max_size=4))
def test_the_compiled_envelope_writes_orjsons_bytes(changes: list[tuple[int, Any]]) -> None:
    values = list(_ENVELOPE)
    for index, value in changes:
        values[index] = value
    row = tuple(values)
    expected = _orjson_envelope(row)
    compiled = native.envelope(*row)
    if compiled is not None:  # a value it leaves to orjson: None
        assert compiled == expected
    assert _via_envelope_bytes(row) == expected


def test_the_compiled_envelope_escapes_as_orjson_does() -> None:
    every_control = "".join(chr(i) for i in range(0x20)) + '\x7f"\\é\u2028\U0001f600'
    values = list(_ENVELOPE)
    values[10] = every_control
    values[11] = "x" * 5000  # past the compiled writer's first buffer
    row = tuple(values)
    assert native.envelope(*row) == _orjson_envelope(row)
    for refused in (2**53, -(2**53), True, 1.0, "\ud800"):
        values = list(_ENVELOPE)
        values[12] = refused
        assert native.envelope(*values) is None
    with pytest.raises(TypeError):
        native.envelope(*_ENVELOPE[:14])


# -- events --------------------------------------------------------------------------------------


def test_the_compiled_event_is_the_dataclass_constructor() -> None:
    import dataclasses
    import gc

    from tachograph.record import compiled, event

    if compiled.NATIVE is None:
        assert event.stored_event is event._stored_event_py
        return
    assert event.stored_event is native.event
    values: list[Any] = [1, *GOOD[:12], GOOD[12], GOOD[13], GOOD[14], {"a": [1]}, GOOD[16]]
    values.append(GOOD[15])
    built, reference = native.event(*values), event.Event(*values)
    assert type(built) is event.Event
    names = [f.name for f in dataclasses.fields(event.Event)]
    assert [getattr(built, n) for n in names] == [getattr(reference, n) for n in names]
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.seq = 2
    # out of the cycle collector's sight, unlike the dataclass's own: every caller hands a
    # tree of JSON values, which cannot lead back to the event (event.stored_event)
    assert not gc.is_tracked(built)
    assert gc.is_tracked(reference)
    # no reference gained or lost per field: freed by reference counting
    marker = object()
    values[16] = marker
    before = sys.getrefcount(marker)
    for _ in range(200):
        native.event(*values)
    assert sys.getrefcount(marker) == before
    with pytest.raises(TypeError):
        native.event(*values[:17])


def test_binding_the_compiled_event_to_a_class_without_those_slots_is_refused() -> None:
    class Plain:
        pass

    class Slotted:
        __slots__ = ("a",)

    names = tuple(f"f{i}" for i in range(19))
    with pytest.raises(TypeError):
        native.bind_event(Plain, names)
    with pytest.raises((TypeError, AttributeError)):
        native.bind_event(Slotted, names)
    with pytest.raises(TypeError):
        native.bind_event(Slotted, ("a",))


# -- one stored row verified at once (native.verify_row) ------------------------------------------


def _float_rows() -> list[tuple[Any, ...]]:
    """Stored rows of a small chain whose payloads hold what the compiled JCS must get right:
    integral floats, non-ASCII keys, escapes, nesting."""
    from tachograph.record.event import new_event

    payloads = [
        {"input": None, "env": {}},
        {"tool": "quote", "args": {"amount": 25.0, "currency": "EUR", "é": [1.0, 0.5]}},
        {"tool": "quote", "result": {"名前": "claude", "price": 1500.0, "note": 'a "b"\n'}},
        {"status": "ok", "output": {"z": 1, "a": {"y": [], "x": {}}}},
    ]
    rows, prev = [], None
    for seq, payload in enumerate(payloads):
        e = new_event(run_id="run-f", seq=seq, type="decision", actor="agent", payload=payload,
                      prev_hash=prev)  # fmt: skip
        rows.append(verify._ROW_OF(e))
        prev = e.hash
    return rows


_ROWS = _float_rows()
native.bind_hash(hashlib.sha256)  # as verify binds it (where TACHOGRAPH_PURE_PYTHON is unset)


def _report(rows: list[tuple[Any, ...]], compiled: bool) -> dict[str, Any]:
    saved = verify._verify_row
    if not compiled:
        verify._verify_row = None
    try:
        return verify.verify_run(rows).to_dict()
    finally:
        verify._verify_row = saved


def test_a_well_formed_run_is_verified_row_by_row_at_once() -> None:
    prev = None
    for pos, row in enumerate(_ROWS):
        assert native.verify_row(row, prev, pos, "run-f", "default") == row[14]
        assert native.verify_row(StoredRow(*row), prev, pos, "run-f", "default") == row[14]
        prev = row[14]
    # out of place, of another run or tenant, after another head: not vouched for
    assert native.verify_row(_ROWS[1], _ROWS[0][14], 2, "run-f", "default") is None
    assert native.verify_row(_ROWS[1], _ROWS[1][14], 1, "run-f", "default") is None
    assert native.verify_row(_ROWS[1], _ROWS[0][14], 1, "run-g", "default") is None
    assert native.verify_row(_ROWS[1], _ROWS[0][14], 1, "run-f", "acme") is None
    assert native.verify_row(_ROWS[0], "sha256:" + "0" * 64, 0, "run-f", "default") is None
    assert _report(_ROWS, True) == _report(_ROWS, False)
    report = _report(_ROWS, True)
    assert report["first_failure"] is None
    assert report["events"] == len(_ROWS)


def _body_variants(body: bytes) -> list[bytes]:
    # the same value spelled otherwise (still verifies), and values that differ
    value = orjson.loads(body)
    return [
        json.dumps(value, ensure_ascii=True).encode(),
        json.dumps(value, indent=2, sort_keys=True).encode(),
        body.replace(b".0", b".00"),
        body.replace(b".0", b""),
        body.replace(b"}", b',"extra":1}', 1),
        body[:-1] + b',"tool":"other"}',  # a duplicate key: orjson keeps the last
        body.replace(b"a", b"\\u0061"),
        body + b" ",
        body + b"x",
        body[:-1],
        b"",
    ]


# one or two fields of a row replaced: odd values, other rows' values, the payload respelled
_CHANGES = st.lists(
    st.tuples(
        st.integers(0, 16),
        st.sampled_from(_ODD)
        | st.sampled_from([r[i] for r in _ROWS for i in range(17)])
        | st.integers(0, len(_ROWS) * 11 - 1).map(
            lambda k: _body_variants(_ROWS[k // 11][15])[k % 11]
        ),
    ),
    max_size=2,
)


def _changed(where: int, changes: list[tuple[int, Any]]) -> list[tuple[Any, ...]]:
    """The chain with the row at ``where`` given ``changes`` (field index, new value)."""
    rows = list(_ROWS)
    row = list(rows[where])
    for index, value in changes:
        row[index] = value
    rows[where] = tuple(row)
    return rows


@settings(max_examples=800)
@given(st.integers(0, len(_ROWS) - 1), _CHANGES)
def test_verification_reports_the_same_with_the_compiled_row_check(
    where: int, changes: list[tuple[int, Any]]
) -> None:
    rows = _changed(where, changes)
    assert _report(rows, True) == _report(rows, False)


def test_the_compiled_row_check_takes_a_row_and_four_values() -> None:
    with pytest.raises(TypeError):
        native.verify_row(_ROWS[0][:16], None, 0, "run-f", "default")
    with pytest.raises(TypeError):
        native.verify_row(list(_ROWS[0]), None, 0, "run-f", "default")
    with pytest.raises(TypeError):
        native.verify_row(_ROWS[0], None, 0, "run-f")


# -- a loaded event verified at once (native.verify_event) ----------------------------------------


# native.verify_event reads the Event class bound at import (event.py), which a run with
# TACHOGRAPH_PURE_PYTHON=1 does not bind: these tests compare the compiled check with the
# Python path where the compiled helpers serve.
_BOUND = pytest.mark.skipif(
    verify._verify_event is None, reason="the compiled helpers do not serve here"
)


def _event_of(row: tuple[Any, ...], v: Any = 1) -> Any:
    """The event a store's read builds from ``row`` (``stored_event``: no checks), its payload
    decoded when the bytes parse."""
    from tachograph.record.event import stored_event

    body = row[15]
    try:
        payload = orjson.loads(body) if isinstance(body, bytes) else None
    except orjson.JSONDecodeError:
        payload = None
    return stored_event(v, *row[:15], payload, row[16], body)


def _event_report(events: list[Any], *, event: bool, row: bool) -> dict[str, Any]:
    saved = verify._verify_event, verify._verify_row
    verify._verify_event = native.verify_event if event else None
    verify._verify_row = native.verify_row if row else None
    try:
        return verify.verify_run(events, decoded=True).to_dict()
    finally:
        verify._verify_event, verify._verify_row = saved


@_BOUND
def test_a_loaded_run_is_verified_event_by_event_at_once() -> None:
    prev = None
    for pos, row in enumerate(_ROWS):
        e = _event_of(row)
        assert native.verify_event(e, prev, pos, "run-f", "default") == row[14]
        assert native.verify_event(e, prev, pos, "run-f", "default") == native.verify_row(
            row, prev, pos, "run-f", "default"
        )
        prev = row[14]
    e1 = _event_of(_ROWS[1])
    assert native.verify_event(e1, _ROWS[0][14], 2, "run-f", "default") is None
    assert native.verify_event(e1, _ROWS[0][14], 1, "run-g", "default") is None
    assert native.verify_event(e1, _ROWS[0][14], 1, "run-f", "acme") is None
    events = [_event_of(r) for r in _ROWS]
    assert _event_report(events, event=True, row=True) == _event_report(
        events, event=False, row=False
    )
    assert _event_report(events, event=True, row=True)["first_failure"] is None


@_BOUND
@pytest.mark.parametrize("v", [True, 2, 1.0, "1", None, 2**64 + 1, -1])
def test_the_compiled_event_check_steps_aside_unless_v_is_the_int_1(v: Any) -> None:
    e = _event_of(_ROWS[0], v=v)
    assert native.verify_event(e, None, 0, "run-f", "default") is None
    events = [_event_of(_ROWS[0], v=v), *(_event_of(r) for r in _ROWS[1:])]
    compiled = _event_report(events, event=True, row=True)
    assert compiled == _event_report(events, event=False, row=False)
    assert compiled["first_failure"] is not None


@_BOUND
def test_the_compiled_event_check_steps_aside_for_what_it_cannot_read() -> None:
    from dataclasses import replace

    from tachograph.record.event import Event

    e = _event_of(_ROWS[0])
    # no stored bytes (an event built in memory, or erased): the Python path decides
    assert native.verify_event(replace(e, payload_bytes=None), None, 0, "run-f", "default") is None

    class Sub(Event):
        __slots__ = ()

    sub = Sub(*(getattr(e, f) for f in Event.__dataclass_fields__))
    assert native.verify_event(sub, None, 0, "run-f", "default") is None
    assert native.verify_event(_ROWS[0], None, 0, "run-f", "default") is None  # a row, not one
    with pytest.raises(TypeError):
        native.verify_event(e, None, 0, "run-f")


@_BOUND
@settings(max_examples=800)
@given(st.integers(0, len(_ROWS) - 1), _CHANGES)
def test_verification_of_loaded_events_reports_the_same_with_the_compiled_event_check(
    where: int, changes: list[tuple[int, Any]]
) -> None:
    events = [_event_of(r) for r in _changed(where, changes)]
    compiled = _event_report(events, event=True, row=True)
    assert compiled == _event_report(events, event=False, row=True)
    assert compiled == _event_report(events, event=False, row=False)


# -- whether any of a set of words occurs (native.contains_any) -----------------------------------


def _secret_words() -> list[bytes]:
    from tachograph.privacy.redactor import Redactor

    return list(Redactor()._engine.blob_words)


_WORDS = _secret_words()


@settings(max_examples=1500)
@given(
    st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6, unique=True),
    st.lists(
        st.binary(max_size=6)
        | st.sampled_from(_WORDS).map(lambda w: w[: max(1, len(w) - 1)])
        | st.sampled_from(_WORDS)
        | st.sampled_from([b'"', b":", b"{", b"}", b"a", b"_", b"\xff", b"\x00"]),
        max_size=12,
    ),
)
def test_contains_any_answers_as_the_alternation_of_the_words(
    words: list[bytes], parts: list[bytes]
) -> None:
    from tachograph.privacy.redactor import _any_of, _by_first_byte

    data = b"".join(parts)
    table = _by_first_byte(words)
    assert native.contains_any(data, table) is (_any_of(words).search(data) is not None)
    assert native.contains_any(data, _by_first_byte(_WORDS)) is (
        _any_of(_WORDS).search(data) is not None
    )


def test_contains_any_refuses_a_table_it_cannot_read() -> None:
    from tachograph.privacy.redactor import _by_first_byte

    table = _by_first_byte([b"api", b"pass"])
    assert native.contains_any(b"x-api-key", table) is True
    assert native.contains_any(b"", table) is False
    assert native.contains_any(b"ap", table) is False  # a word cut by the end of the data
    with pytest.raises(TypeError):
        native.contains_any("api", table)
    with pytest.raises(TypeError):
        native.contains_any(b"api", table[:255])
    misfiled = list(table)
    misfiled[ord("a")] = (b"pass",)
    with pytest.raises(ValueError, match="first byte"):
        native.contains_any(b"a", tuple(misfiled))
    broken = list(table)
    broken[ord("a")] = [b"api"]
    with pytest.raises(TypeError):
        native.contains_any(b"a", tuple(broken))
    with pytest.raises(ValueError, match="empty"):
        _by_first_byte([b""])
    # a refused table is not kept: the good one still answers, and a refused one is refused
    # again (the pairs of bytes that begin a word are read once per table, then cached)
    assert native.contains_any(b"x-api-key", table) is True
    with pytest.raises(ValueError, match="first byte"):
        native.contains_any(b"zzz", tuple(misfiled))


@settings(max_examples=500)
@given(
    st.lists(st.binary(min_size=1, max_size=3), min_size=1, max_size=5),
    st.binary(max_size=12),
)
def test_contains_any_with_one_and_two_byte_words(words: list[bytes], data: bytes) -> None:
    """Short words: a one-byte word begins every pair of bytes, and the last byte of the
    data begins no pair at all."""
    from tachograph.privacy.redactor import _any_of, _by_first_byte

    table = _by_first_byte(words)
    assert native.contains_any(data, table) is (_any_of(words).search(data) is not None)
    # the table cached by the first call answers the next one too
    other = data[::-1] + data
    assert native.contains_any(other, table) is (_any_of(words).search(other) is not None)


def test_a_one_byte_word_is_found_before_any_byte() -> None:
    from tachograph.privacy.redactor import _by_first_byte

    for first in (0, ord("a"), 255):
        table = _by_first_byte([bytes([first])])
        for after in range(256):  # every pair it begins, and as the last byte
            assert native.contains_any(bytes([first, after]), table) is True
            assert native.contains_any(bytes([after, first]), table) is True
        assert native.contains_any(bytes([first ^ 1] * 4), table) is False


# -- a new event built at once (native.fresh) ------------------------------------------------------

# event.fresh_event hands a new event (no salt, clock, ULID or bytes given) to native.fresh, bound
# at import where the compiled helpers serve; given the salt, ts and event_id it takes the
# Python path. The two must build the same event from the same inputs.
_FRESH = pytest.mark.skipif(
    __import__("tachograph.record.event", fromlist=["_native_fresh"])._native_fresh is None,
    reason="the compiled helpers do not serve here",
)

_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
_OPTIONAL_ID = st.none() | st.text(alphabet="0123456789abcdef", min_size=32, max_size=32)
_OPTIONAL_SPAN = st.none() | st.text(alphabet="0123456789abcdef", min_size=16, max_size=16)


def _python_twin(event: Any) -> Any:
    """The same event built by the Python path: the native one's salt, clock and ULID given."""
    from tachograph.record.event import fresh_event

    return fresh_event(
        event.run_id,
        event.seq,
        event.type,
        event.actor,
        event.payload,
        event.prev_hash,
        event.tenant,
        event.trace_id,
        event.span_id,
        event.idempotency_key,
        event.model,
        event.seed,
        event.ts,
        event.event_id,
        bytes.fromhex(event.salt),
        None,
    )


@_FRESH
@settings(max_examples=300)
@given(
    payload=st.dictionaries(st.text(), _JSON_VALUES, max_size=6),
    seq=st.integers(0, 2**53 - 1),
    key=st.none() | st.text(),
    model=st.none() | st.text(),
    seed=st.none() | st.integers(-(2**53) + 1, 2**53 - 1),
    trace=_OPTIONAL_ID,
    span=_OPTIONAL_SPAN,
)
def test_the_compiled_new_event_is_the_python_paths(
    payload: dict[str, Any],
    seq: int,
    key: str | None,
    model: str | None,
    seed: int | None,
    trace: str | None,
    span: str | None,
) -> None:
    from hypothesis import assume

    from tachograph.errors import EventError, ProfileError
    from tachograph.record.event import fresh_event

    assume(trace != "0" * 32 and span != "0" * 16)
    prev = None if seq == 0 else "sha256:" + "ab" * 32
    try:
        event = fresh_event(
            "run-1", seq, "tool.completed", "agent", payload, prev, "tenant-ü",
            trace, span, key, model, seed, None, None, None, None,
        )  # fmt: skip
    except (EventError, ProfileError):
        return  # refused before either path builds anything (a lone surrogate, a float key)
    twin = _python_twin(event)
    assert event == twin
    assert event.payload_bytes == twin.payload_bytes == orjson.dumps(payload)
    assert event.payload is payload


@_FRESH
def test_the_compiled_new_events_read_the_clock_once_and_in_order() -> None:
    from tachograph.record.event import _native_fresh, fresh_event
    from tachograph.record.verify import verify_events

    events = []
    prev = None
    for seq in range(300):
        event = fresh_event(
            "run-1", seq, "tool.completed", "agent", {"i": seq}, prev, "default",
            None, None, None, None, None, None, None, None, None,
        )  # fmt: skip
        prev = event.hash
        events.append(event)
    assert _native_fresh is not None
    assert verify_events(events).ok
    ids = [e.event_id for e in events]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    for event in events:
        ms = 0
        for c in event.event_id[:10]:
            ms = ms * 32 + crockford.index(c)
        # the ULID's milliseconds are the timestamp's (one reading of the clock)
        assert time_ms(event.ts) == ms
        assert len(event.salt) == 32
        assert event.salt == event.salt.lower()
    assert len({e.salt for e in events}) == len(events)


def time_ms(ts: str) -> int:
    """Milliseconds since 1970 of a ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` timestamp."""
    from datetime import datetime

    since = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ") - datetime(1970, 1, 1)
    return since.days * 86_400_000 + since.seconds * 1000 + since.microseconds // 1000


@_FRESH
def test_a_value_the_compiled_envelope_leaves_to_orjson_takes_the_python_path() -> None:
    from tachograph.record.event import _native_fresh, fresh_event

    class Name(str):
        pass

    args = ("default", "run-1", 0, "tool.completed", Name("agent"), None, None, None, None,
            None, None, {"x": 1}, b'{"x":1}', b"\0" * 16)  # fmt: skip
    assert _native_fresh is not None
    assert _native_fresh(*args) is None
    event = fresh_event(
        "run-1", 0, "tool.completed", Name("agent"), {"x": 1}, None, "default",
        None, None, None, None, None, None, None, None, None,
    )  # fmt: skip
    assert event.actor == "agent"
    assert event == _python_twin(event)


def test_the_compiled_new_event_refuses_what_it_cannot_take() -> None:
    with pytest.raises(TypeError):
        native.fresh("too", "few")
    with pytest.raises(TypeError):
        native.bind_fresh(hashlib.sha256, orjson.dumps, object())
    if __import__("tachograph.record.event", fromlist=["_native_fresh"])._native_fresh is None:
        return
    args = ["default", "run-1", 0, "tool.completed", "agent", None, None, None, None, None,
            None, {"x": 1}, b'{"x":1}', b"\0" * 15]  # fmt: skip
    with pytest.raises(TypeError):
        native.fresh(*args)  # a salt of 15 bytes
    args[13] = b"\0" * 16
    args[12] = "not bytes"
    with pytest.raises(TypeError):
        native.fresh(*args)


# -- the SHA-256 of the compiled helpers (native.bind_sha256, native.sha256) ----------------------

# Where hashlib runs on a shared libcrypto this process has mapped, the compiled digests take
# OpenSSL's SHA256_Init/_Update/_Final from it; otherwise (or after bind_sha256(None)) hashlib's
# sha256. Either way the digest must be hashlib's, byte for byte.


@pytest.fixture
def sha256_paths() -> Any:
    from tachograph.record import compiled

    native.bind_hash(hashlib.sha256)
    path = compiled.libcrypto_of_hashlib()
    try:
        yield path
    finally:
        # as tachograph.record.compiled left it
        native.bind_sha256(compiled.SHA256_FROM)


_LENGTHS = [0, 1, 3, 55, 56, 63, 64, 65, 119, 120, 128, 2047, 2048, 2049, 100_000]


@given(data=st.binary(max_size=5000))
@settings(max_examples=200, deadline=None)
def test_the_compiled_sha256_is_hashlibs_on_either_path(data: bytes) -> None:
    from tachograph.record import compiled

    native.bind_hash(hashlib.sha256)
    path = compiled.libcrypto_of_hashlib()
    try:
        for bound in (path, None):
            native.bind_sha256(bound)
            assert native.sha256(data) == hashlib.sha256(data).digest()
    finally:
        native.bind_sha256(compiled.SHA256_FROM)


def test_the_compiled_sha256_at_block_edges_and_past_the_gil_size(sha256_paths: Any) -> None:
    for bound in (sha256_paths, None):
        native.bind_sha256(bound)
        for n in _LENGTHS:
            data = os.urandom(n)
            assert native.sha256(data) == hashlib.sha256(data).digest(), (bound, n)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_openssl_is_taken_from_the_library_hashlib_runs_on(sha256_paths: Any) -> None:
    from tachograph.record import compiled

    if sha256_paths is None:
        pytest.skip("hashlib's OpenSSL is not a shared library mapped here")
    assert "libcrypto.so" in os.path.basename(sha256_paths)
    assert native.bind_sha256(sha256_paths) is True
    if compiled.NATIVE is not None:
        # bound at import, by the soname the library mapped from that file answers to
        assert compiled.SHA256_FROM is not None
        assert native.bind_sha256(compiled.SHA256_FROM) is True


def test_a_library_not_loaded_is_never_loaded_and_changes_nothing(
    sha256_paths: Any, tmp_path: Any
) -> None:
    missing = str(tmp_path / "libcrypto.so.3")
    for before in (sha256_paths, None):
        native.bind_sha256(before)
        assert native.bind_sha256(missing) is False
        assert native.bind_sha256("/nonexistent/libcrypto.so.3") is False
        # a file name that is not UTF-8 (surrogate-escaped, as os.fsdecode gives it)
        assert native.bind_sha256(os.fsdecode(b"/nonexistent/\xff/libcrypto.so.3")) is False
        data = os.urandom(300)
        assert native.sha256(data) == hashlib.sha256(data).digest()
    with pytest.raises(TypeError):
        native.bind_sha256(b"/usr/lib/libcrypto.so.3")
    with pytest.raises(TypeError):
        native.sha256("not bytes")


def test_verification_and_new_events_agree_on_either_sha256(sha256_paths: Any) -> None:
    """A run verified with OpenSSL's digests and with hashlib's gives the same report, and
    a tampered payload fails on both."""
    from tachograph.record import compiled

    if compiled.NATIVE is None:
        pytest.skip("the compiled helpers do not serve here")
    reports = []
    for bound in (sha256_paths, None):
        native.bind_sha256(bound)
        prev = None
        for pos, row in enumerate(_ROWS):
            assert native.verify_row(row, prev, pos, "run-f", "default") == row[14]
            prev = row[14]
        bad = list(_ROWS[1])
        bad[16] = "00" * 16  # another salt: the payload digest no longer matches
        assert native.verify_row(tuple(bad), _ROWS[0][14], 1, "run-f", "default") is None
        good = verify.verify_run(list(map(StoredRow._make, _ROWS)))
        tampered = verify.verify_run([StoredRow._make(r) for r in [_ROWS[0], tuple(bad)]])
        assert good.ok
        assert not tampered.ok
        reports.append((good.to_dict(), tampered.to_dict()))
    assert reports[0] == reports[1]


def test_one_hex_digit_off_in_either_digest_fails_on_either_sha256(sha256_paths: Any) -> None:
    """Every one of the 64 hex digits of the stored hash, and of the payload digest (with the
    hash recomputed over the changed envelope, so that only the payload check can catch it),
    changed to any other digit: the compiled check never vouches for the row."""
    from tachograph.record.event import envelope_bytes

    row = _ROWS[1]
    prev = _ROWS[0][14]
    for bound in (sha256_paths, None):
        native.bind_sha256(bound)
        assert native.verify_row(row, prev, 1, "run-f", "default") == row[14]
        for field in (14, 12):
            text = row[field]
            for i in range(7, 71):
                other = "0" if text[i] != "0" else "f"
                bad = list(row)
                bad[field] = text[:i] + other + text[i + 1 :]
                if field == 12:
                    env = envelope_bytes(1, *bad[:14])
                    bad[14] = "sha256:" + hashlib.sha256(env).hexdigest()
                assert native.verify_row(tuple(bad), prev, 1, "run-f", "default") is None, (
                    bound,
                    field,
                    i,
                )


# -- a page verified in one call (native.verify_many) ---------------------------------------------


def _chain(n: int) -> list[tuple[Any, ...]]:
    from tachograph.record.event import new_event

    rows, prev = [], None
    for seq in range(n):
        payload = {"i": seq, "x": seq * 1.5, "名": "é" * (seq % 3)}
        e = new_event(run_id="run-m", seq=seq, type="decision", actor="agent", payload=payload,
                      prev_hash=prev)  # fmt: skip
        rows.append(verify._ROW_OF(e))
        prev = e.hash
    return rows


_MANY = _chain(30)


@_BOUND
def test_verify_many_goes_as_far_as_every_check_passes() -> None:
    rows = list(_ROWS)
    assert native.verify_many(rows, 0, None, 0, "run-f", "default") == (4, rows[3][14])
    assert native.verify_many(rows, 1, rows[0][14], 1, "run-f", "default") == (3, rows[3][14])
    assert native.verify_many(rows, 4, rows[3][14], 4, "run-f", "default") == (0, rows[3][14])
    assert native.verify_many([], 0, None, 0, "run-f", "default") == (0, None)
    # rows and loaded events alike, in one list
    mixed = [rows[0], _event_of(rows[1]), rows[2], _event_of(rows[3])]
    assert native.verify_many(mixed, 0, None, 0, "run-f", "default") == (4, rows[3][14])
    # it stops at the first item it cannot vouch for, whatever follows
    for bad_at in range(4):
        for change in ("salt", "hash", "seq", "other"):
            bad = list(rows)
            if change == "other":
                bad[bad_at] = dict(enumerate(rows[bad_at]))
            else:
                row = list(rows[bad_at])
                if change == "salt":
                    row[16] = "00" * 16
                elif change == "hash":
                    row[14] = "sha256:" + "0" * 64
                else:
                    row[2] = row[2] + 1
                bad[bad_at] = tuple(row)
            last = rows[bad_at - 1][14] if bad_at else None
            got = native.verify_many(bad, 0, None, 0, "run-f", "default")
            assert got == (bad_at, last), (bad_at, change)
    # a bad row followed by the good one it stands for: still stops at the bad one
    bad_first = [rows[0], (*rows[1][:16], "00" * 16), *rows[1:]]
    assert native.verify_many(bad_first, 0, None, 0, "run-f", "default") == (1, rows[0][14])
    # another run's name or tenant: nothing passes
    assert native.verify_many(rows, 0, None, 0, "run-g", "default") == (0, None)
    assert native.verify_many(rows, 0, None, 0, "run-f", "acme") == (0, None)


def test_verify_many_refuses_what_it_cannot_take() -> None:
    native.bind_hash(hashlib.sha256)
    with pytest.raises(TypeError):
        native.verify_many(tuple(_ROWS), 0, None, 0, "run-f", "default")
    with pytest.raises(TypeError):
        native.verify_many(list(_ROWS), 0, None, 0, "run-f")
    with pytest.raises(ValueError, match="negative"):
        native.verify_many(list(_ROWS), -1, None, 0, "run-f", "default")
    with pytest.raises(ValueError, match="negative"):
        native.verify_many(list(_ROWS), 0, None, -1, "run-f", "default")


def _reports_three_ways(rows: list[Any]) -> list[dict[str, Any]]:
    """verify_run's report with verify_many, with one compiled call per row, and in Python."""
    saved = verify._verify_many, verify._verify_row, verify._verify_event
    out = []
    try:
        for many, single in ((True, True), (False, True), (False, False)):
            verify._verify_many = saved[0] if many else None
            verify._verify_row = saved[1] if single else None
            verify._verify_event = saved[2] if single else None
            out.append(verify.verify_run(list(rows)).to_dict())
            out.append(verify.verify_run(iter(rows)).to_dict())
    finally:
        verify._verify_many, verify._verify_row, verify._verify_event = saved
    return out


@_BOUND
@given(
    at=st.lists(st.integers(0, len(_MANY) - 1), min_size=0, max_size=3),
    change=st.sampled_from(["salt", "hash", "seq", "run", "body", "drop", "event"]),
)
@example(at=[len(_MANY) - 1], change="drop")  # a cut tail: verifies without a summary
@example(at=[0, 15], change="salt")
@settings(max_examples=60, deadline=None)
def test_verify_many_gives_the_reports_of_the_row_by_row_paths(at: list[int], change: str) -> None:
    rows: list[Any] = list(_MANY)
    for i in sorted(set(at), reverse=True):
        row = list(rows[i]) if isinstance(rows[i], tuple) else None
        if change == "drop":
            del rows[i]
            continue
        if change == "event":
            rows[i] = _event_of(_MANY[i])
            continue
        assert row is not None
        if change == "salt":
            row[16] = "00" * 16
        elif change == "hash":
            row[14] = "sha256:" + "1" * 64
        elif change == "seq":
            row[2] = 10_000
        elif change == "run":
            row[1] = "run-other"
        else:
            row[15] = row[15].replace(b'"i"', b'"j"')
        rows[i] = tuple(row)
    reports = _reports_three_ways(rows)
    assert all(r == reports[0] for r in reports)
    # a cut tail leaves a chain that verifies: only a store's summary exposes it (not given here)
    tail_cut = change == "drop" and sorted(set(at)) == list(range(min(at or [0]), len(_MANY)))
    assert (reports[0]["status"] == "verified") == (not at or change == "event" or tail_cut)


# -- the keyed hash of a call's key (native.hmac_pads, native.hmac16) -----------------------------


@given(secret=st.binary(max_size=150), data=st.binary(max_size=3000))
@settings(max_examples=150, deadline=None)
def test_the_compiled_keyed_hash_is_hmac_sha256(secret: bytes, data: bytes) -> None:
    import hmac

    from tachograph.record import compiled
    from tachograph.record.seal import _block_key, _KeyHash

    want = hmac.new(secret, data, hashlib.sha256).hexdigest()[:16]
    path = compiled.libcrypto_of_hashlib()
    try:
        for bound in (path, None):
            native.bind_sha256(bound)
            pads = native.hmac_pads(_block_key(secret))
            if bound is None:
                assert pads is None
            else:
                assert pads is not None
                assert native.hmac16(pads[0], pads[1], data) == want
            assert _KeyHash(secret)(data) == want
    finally:
        native.bind_sha256(compiled.SHA256_FROM)


def test_a_keyed_hash_made_with_openssl_still_answers_without_it(sha256_paths: Any) -> None:
    from tachograph.record.seal import _block_key, _KeyHash

    if sha256_paths is None:
        pytest.skip("hashlib's OpenSSL is not a shared library mapped here")
    native.bind_sha256(sha256_paths)
    secret, data = os.urandom(16), b'{"i":5}'
    keyed = _KeyHash(secret)
    first = keyed(data)
    native.bind_sha256(None)  # hmac16 now answers None: hashlib's path serves
    pads = native.hmac_pads(_block_key(secret))
    assert pads is None
    assert keyed(data) == first
    with pytest.raises(TypeError):
        native.hmac_pads("not bytes")
    with pytest.raises(TypeError):
        native.hmac16(b"short", b"short", data)

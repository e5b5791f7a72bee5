"""The event record (SPEC section 3): ids, timestamps, field rules, digests and hashes."""

from __future__ import annotations

import importlib
import itertools
import json
import os
import pickle
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from tachograph.errors import EventError, ProfileError
from tachograph.record.canonical import canonical
from tachograph.record.compiled import NATIVE
from tachograph.record.event import (
    ENVELOPE_KEYS,
    LINE_KEYS,
    Effect,
    Event,
    EventType,
    _format_ts_py,
    check_type,
    digest_payload,
    envelope_bytes,
    hash_envelope,
    new_event,
    new_ulid,
    now_ts,
)
from tachograph.record.event import _UlidSource as PyUlidSource
from tachograph.store import SQLiteStore

CROCKFORD = re.compile(r"[0123456789ABCDEFGHJKMNPQRSTVWXYZ]{26}", re.ASCII)
TS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z", re.ASCII)
ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


# Each test of the clock and of the ULID source runs against the Python code and, where it is
# built, its compiled twin (native.format_ts, native.UlidSource): the same text, the same ids.
_TWINS = ["python", "compiled"] if NATIVE is not None else ["python"]


_FORMATTERS = [_format_ts_py] + ([NATIVE.format_ts] if NATIVE is not None else [])
_each_formatter = pytest.mark.parametrize(
    "format_ts", _FORMATTERS, ids=["python", "compiled"][: len(_FORMATTERS)]
)


def _ulid_source(kind: str, draw: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh ULID source of ``kind`` that draws its random parts with ``draw``."""
    if kind == "compiled":
        assert NATIVE is not None
        return NATIVE.UlidSource(draw)
    # (by module object: the facade name tachograph.record is not this package)
    event_module = importlib.import_module("tachograph.record.event")
    monkeypatch.setattr(event_module, "random_bytes", draw)
    return PyUlidSource()


def _ulid_ms(ulid: str) -> int:
    value = 0
    for char in ulid:
        value = value * 32 + ALPHABET.index(char)
    return value >> 80


def _event(**overrides: Any) -> Event:
    fields: dict[str, Any] = {
        "run_id": "run-1",
        "seq": 0,
        "type": "run.started",
        "actor": "agent",
        "payload": {"input": "hi"},
        "prev_hash": None,
    }
    fields.update(overrides)
    return new_event(**fields)


# -- ids and time -------------------------------------------------------------------------------


def test_ulids_are_strictly_increasing_within_a_process() -> None:
    before = time.time_ns() // 1_000_000
    ids = [new_ulid() for _ in range(20_000)]
    after = time.time_ns() // 1_000_000
    assert all(CROCKFORD.fullmatch(i) for i in ids)
    assert all(a < b for a, b in itertools.pairwise(ids))
    assert len(set(ids)) == len(ids)
    # the first 10 characters are the millisecond clock (ULID spec), not something else
    assert before <= _ulid_ms(ids[0]) <= _ulid_ms(ids[-1]) <= after + 1


def test_event_ids_are_monotonic_across_new_event_and_new_ulid() -> None:
    ids = []
    for i in range(2000):
        ids.append(_event(seq=0).event_id if i % 2 else new_ulid())
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_ulids_from_many_threads_are_unique() -> None:
    results: list[list[str]] = [[] for _ in range(8)]

    def work(out: list[str]) -> None:
        out.extend(new_ulid() for _ in range(3000))

    threads = [threading.Thread(target=work, args=(out,)) for out in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for out in results for i in out]
    assert len(set(every)) == len(every)
    for out in results:
        assert out == sorted(out)


def _ulid_text(ms: int, rand: int) -> str:
    # the ULID spec's encoding, done the slow way: 26 base32 digits of the 130-bit number
    value = ms << 80 | rand
    return "".join(ALPHABET[value >> (5 * (25 - i)) & 31] for i in range(26))


@pytest.mark.parametrize(
    "start",
    [0, 2**10 - 3, 2**20 - 3, 2**40 - 3, 2**70 - 3, 2**79 - 3],
    ids=["zero", "carry-10", "carry-20", "carry-40", "carry-70", "top"],
)
@pytest.mark.parametrize("kind", _TWINS)
def test_ulids_count_up_across_every_carry(
    monkeypatch: pytest.MonkeyPatch, start: int, kind: str
) -> None:
    # the random draw is fixed so that counting up crosses a carry boundary within one
    # millisecond; each id must be the plain encoding of the time and the counted value
    draws = iter([(start << 1).to_bytes(10, "big"), (5 << 1).to_bytes(10, "big")])
    source = _ulid_source(kind, lambda n: next(draws), monkeypatch)
    ms = 1_760_497_929_412
    got = [source.next(ms) for _ in range(6)]
    assert got == [_ulid_text(ms, start + i) for i in range(6)]
    # a clock that steps back keeps counting in the last millisecond seen
    assert source.next(ms - 5) == _ulid_text(ms, start + 6)
    # a new millisecond draws a new random part
    assert source.next(ms + 1) == _ulid_text(ms + 1, 5)
    assert source.next(ms + 1) == _ulid_text(ms + 1, 6)


@pytest.mark.parametrize("kind", _TWINS)
def test_a_forked_child_draws_anew_in_the_same_millisecond(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # forget() (run in a forked child) makes the next id draw, rather than count on from the
    # parent's state, which the parent counts on from too
    draws = iter([(100 << 1).to_bytes(10, "big"), (7 << 1).to_bytes(10, "big")])
    source = _ulid_source(kind, lambda n: next(draws), monkeypatch)
    ms = 1_760_497_929_412
    assert source.next(ms) == _ulid_text(ms, 100)
    source.forget()
    assert source.next(ms) == _ulid_text(ms, 7)


def test_the_compiled_source_refuses_what_the_clock_cannot_give() -> None:
    if NATIVE is None:
        pytest.skip("the compiled helpers are not built here")
    source = NATIVE.UlidSource(lambda n: bytes(10))
    for bad in (-1, 2**48):
        with pytest.raises(ValueError):
            source.next(bad)
    with pytest.raises(TypeError):
        NATIVE.UlidSource(42)
    wrong = NATIVE.UlidSource(lambda n: b"short")
    with pytest.raises(TypeError):
        wrong.next(1)
    with pytest.raises(ValueError):
        NATIVE.format_ts(-1)


def test_the_compiled_source_counts_past_the_top_into_the_next_millisecond() -> None:
    if NATIVE is None:
        pytest.skip("the compiled helpers are not built here")
    # a draw is shifted right by one bit: all ones gives 2^79 - 1, so 2^79 more ids fit
    # before the 80 bits run out; this reaches the end by a draw that is already at the top
    # of what a shift can give, then counts: ids stay increasing either way
    source = NATIVE.UlidSource(lambda n: b"\xff" * 10)
    ms = 1_760_497_929_412
    first = source.next(ms)
    second = source.next(ms)
    assert first < second
    assert second == _ulid_text(ms, 2**79)


def test_ulid_encoding_matches_the_spec() -> None:
    ulid = new_ulid()
    now = time.time_ns() // 1_000_000
    value = 0
    for char in ulid:
        value = value * 32 + ALPHABET.index(char)
    assert _ulid_text(value >> 80, value & (2**80 - 1)) == ulid
    assert now - 1000 <= value >> 80 <= now


@_each_formatter
def test_timestamps_have_exactly_six_fraction_digits(format_ts: Any) -> None:
    assert format_ts(0) == "1970-01-01T00:00:00.000000Z"
    assert format_ts(1_760_497_929_412_000_999) == "2025-10-15T03:12:09.412000Z"
    assert format_ts(1_760_497_929_000_000_001) == "2025-10-15T03:12:09.000000Z"
    assert format_ts(1_760_497_929_999_999_999) == "2025-10-15T03:12:09.999999Z"
    stamps = [now_ts() for _ in range(1000)] + [_event().ts for _ in range(100)]
    assert all(TS.fullmatch(s) for s in stamps)


@given(st.integers(0, 2**62) | st.integers(0, 10**9 - 1).map(lambda r: 1_760_497_929 * 10**9 + r))
def test_timestamps_keep_every_fraction_digit(ns: int) -> None:
    # the fraction is the microseconds, truncated, padded to six digits; both twins alike
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 1_000_000_000))
    for format_ts in _FORMATTERS:
        assert format_ts(ns) == f"{seconds}.{ns % 1_000_000_000 // 1000:06d}Z"


@_each_formatter
def test_timestamps_from_many_threads_are_consistent(format_ts: Any) -> None:
    # threads format the same few seconds in turn: the per-second cache must not mix them up
    errors: list[str] = []

    def work(offset: int) -> None:
        for i in range(4000):
            ns = (1_700_000_000 + (i + offset) % 3) * 1_000_000_000 + 123_456_000
            got = format_ts(ns)
            want = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 1_000_000_000))
            if got != want + ".123456Z":
                errors.append(got)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, to expose a race
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


# -- field rules ----------------------------------------------------------------------------------

_BAD_FIELDS = [
    ("run_id", ""),
    ("run_id", "has space"),
    ("run_id", "x" * 129),
    ("run_id", "run/1"),
    ("run_id", "rün"),
    ("run_id", None),
    ("run_id", 7),
    ("tenant", ""),
    ("tenant", "a:b"),  # ':' is allowed in run ids, not tenants
    ("tenant", "t" * 65),
    ("tenant", "acme eu"),
    ("tenant", None),
    ("type", "Run.started"),
    ("type", "run"),
    ("type", "run..started"),
    ("type", "run.started."),
    ("type", "1run.started"),
    ("type", "run.Started"),
    ("type", "run-x.started"),
    ("type", ""),
    ("type", None),
    ("actor", ""),
    ("actor", "a" * 129),
    ("actor", None),
    ("actor", 5),
    ("actor", "bad \ud800"),
    ("trace_id", "0" * 32),
    ("trace_id", "A" * 32),
    ("trace_id", "a" * 31),
    ("trace_id", "g" * 32),
    ("trace_id", 123),
    ("span_id", "0" * 16),
    ("span_id", "F" * 16),
    ("span_id", "f" * 17),
    ("span_id", b"f" * 16),
    ("seed", 2**53),
    ("seed", -(2**53)),
    ("seed", True),
    ("seed", 1.0),
    ("seed", "7"),
    ("seq", -1),
    ("seq", True),
    ("seq", 1.0),
    ("idempotency_key", 5),
    ("idempotency_key", "k\udc00"),
    ("model", ["gpt"]),
    ("model", "\ud83d"),
    ("ts", "2026-10-15T03:12:09.412Z"),
    ("ts", "2026-10-15T03:12:09.4120000Z"),
    ("ts", "2026-10-15 03:12:09.412000Z"),
    ("ts", "2026-10-15T03:12:09.412000+00:00"),
    ("ts", "２０２６-10-15T03:12:09.412000Z"),  # noqa: RUF001 - fullwidth digits, on purpose
    ("event_id", "01j9z8q2m4aaaaaaaaaaaaaaaa"),
    ("event_id", "01J9Z8Q2M4AAAAAAAAAAAAAAAU"),
    ("event_id", "01J9Z8Q2M4AAAAAAAAAAAAAAA"),
    ("salt", b"short"),
    ("salt", "00" * 16),
    ("payload", ["not", "an", "object"]),
    ("payload", None),
]


@pytest.mark.parametrize(
    ("field", "value"), _BAD_FIELDS, ids=[f"{f}={v!r}"[:60] for f, v in _BAD_FIELDS]
)
def test_bad_fields_are_refused_before_anything_is_written(
    field: str, value: Any, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    try:
        with pytest.raises(EventError) as info:
            store.append([_event(**{field: value})])
        assert info.value.field == field
        assert store.count_events() == 0
    finally:
        store.close()


def test_prev_hash_is_null_exactly_at_seq_0() -> None:
    with pytest.raises(EventError, match="prev_hash") as info:
        _event(seq=0, prev_hash="sha256:" + "a" * 64)
    assert info.value.field == "prev_hash"
    with pytest.raises(EventError, match="prev_hash"):
        _event(seq=1, prev_hash=None)


def test_a_payload_outside_the_profile_is_a_profile_error_naming_the_path() -> None:
    with pytest.raises(ProfileError) as info:
        _event(payload={"args": {"when": time.gmtime(0)}})
    assert info.value.path == "payload.args.when"


@pytest.mark.parametrize(
    "overrides",
    [
        {"run_id": "r" * 128},
        {"run_id": "tenant:run_2026-10-15.1"},
        {"tenant": "t" * 64},
        {"tenant": "Acme_EU-1.prod"},
        {"actor": "a" * 128},
        {"actor": "agent \u2603 \U0001f916"},
        {"type": "acme.review.queued"},
        {"type": "handoff"},
        {"type": "decision"},
        {"seed": 2**53 - 1},
        {"seed": -(2**53 - 1)},
        {"trace_id": "0" * 31 + "1", "span_id": "0" * 15 + "1"},
        {"model": "gpt-5.6-2026-09-30", "idempotency_key": "run-1:model:0123456789abcdef#2"},
        {"ts": "2026-10-15T03:12:09.000000Z", "event_id": "01J9Z8Q2M4AAAAAAAAAAAAAAAA"},
    ],
)
def test_values_at_the_edge_are_accepted(overrides: dict[str, Any]) -> None:
    event = _event(**overrides)
    for key, value in overrides.items():
        assert getattr(event, key) == value
    assert hash_envelope(event.envelope_jcs()) == event.hash


def test_every_known_type_is_well_formed() -> None:
    for member in EventType:
        assert check_type(member.value) == member.value
        assert str(member) == member.value


def test_effect_parse_lists_the_valid_names() -> None:
    assert Effect.parse("write") is Effect.WRITE
    with pytest.raises(EventError) as info:
        Effect.parse("destructive")
    assert "'pure', 'read', 'write', 'irreversible'" in str(info.value)
    assert info.value.field == "effect"


# -- hashes and digests reproduce the golden vectors ----------------------------------------------


def _vector_lines(vectors_dir: Path) -> list[dict[str, Any]]:
    text = (vectors_dir / "events" / "refund_run.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_refund_run_hashes_reproduce_step_by_step(vectors_dir: Path) -> None:
    lines = _vector_lines(vectors_dir)
    expected = json.loads((vectors_dir / "events" / "refund_run.expected.json").read_text())
    assert [e["seq"] for e in expected] == [line["seq"] for line in lines] == list(range(11))
    for line, want in zip(lines, expected, strict=True):
        payload_jcs = canonical(line["payload"], "payload")
        assert payload_jcs.hex() == want["jcs_payload_hex"]
        assert payload_jcs == rfc8785.dumps(line["payload"])
        digest = digest_payload(bytes.fromhex(line["salt"]), payload_jcs)
        assert digest == want["payload_digest"] == line["payload_digest"]
        env = envelope_bytes(*(line[key] for key in ENVELOPE_KEYS))
        assert env == want["jcs_envelope"].encode("utf-8")
        assert env == rfc8785.dumps({key: line[key] for key in ENVELOPE_KEYS})
        assert hash_envelope(env) == want["hash"] == line["hash"]


def test_new_event_rebuilds_the_refund_run_exactly(vectors_dir: Path) -> None:
    lines = _vector_lines(vectors_dir)
    prev = None
    for line in lines:
        event = new_event(
            run_id=line["run_id"],
            seq=line["seq"],
            type=line["type"],
            actor=line["actor"],
            payload=line["payload"],
            prev_hash=prev,
            tenant=line["tenant"],
            trace_id=line["trace_id"],
            span_id=line["span_id"],
            idempotency_key=line["idempotency_key"],
            model=line["model"],
            seed=line["seed"],
            ts=line["ts"],
            event_id=line["event_id"],
            salt=bytes.fromhex(line["salt"]),
        )
        assert event.to_line() == line
        assert json.loads(event.to_json()) == line
        prev = event.hash


def test_the_envelope_has_exactly_the_fifteen_keys_in_jcs_order() -> None:
    event = _event(seed=3, model="m-1")
    envelope = json.loads(event.envelope_jcs())
    assert list(envelope) == sorted(ENVELOPE_KEYS)
    assert set(envelope) == set(ENVELOPE_KEYS)
    assert len(ENVELOPE_KEYS) == 15
    assert set(event.to_line()) == LINE_KEYS == set(ENVELOPE_KEYS) | {"hash", "payload", "salt"}
    assert event.envelope() == {key: getattr(event, key) for key in ENVELOPE_KEYS}


def test_salt_is_fresh_per_event_and_hides_the_payload() -> None:
    a, b = _event(payload={"email": "a@example.com"}), _event(payload={"email": "a@example.com"})
    assert a.salt != b.salt
    assert len(bytes.fromhex(a.salt or "")) == 16
    assert a.payload_digest != b.payload_digest
    bare = digest_payload(b"", canonical({"email": "a@example.com"}))
    assert bare not in (a.payload_digest, b.payload_digest)


def test_a_changed_field_changes_the_hash() -> None:
    base: dict[str, Any] = {
        "salt": b"\x01" * 16,
        "ts": "2026-10-15T03:12:09.412000Z",
        "event_id": "0" * 26,
    }
    first = _event(**base)
    assert _event(**base).hash == first.hash  # deterministic given the same inputs
    for change in (
        {"tenant": "other"},
        {"run_id": "run-2"},
        {"actor": "someone"},
        {"type": "run.resumed"},
        {"payload": {"input": "hj"}},
        {"model": "m"},
        {"seed": 0},
        {"idempotency_key": "k"},
        {"trace_id": "1" * 32},
        {"span_id": "1" * 16},
        {"salt": b"\x02" * 16},
        {"ts": "2026-10-15T03:12:09.412001Z"},
        {"event_id": "0" * 25 + "1"},
    ):
        assert _event(**{**base, **change}).hash != first.hash, change


def test_erased_is_both_payload_and_salt_null() -> None:
    event = _event()
    assert not event.erased
    erased = Event(**{**{k: getattr(event, k) for k in LINE_KEYS}, "payload": None, "salt": None})
    assert erased.erased
    assert erased.hash == event.hash


def test_stored_event_is_the_dataclass_constructor_field_for_field() -> None:
    """The slot-setting constructor of the hot paths builds what ``Event(...)`` builds, and
    covers every field (a field added to Event without it fails here)."""
    import dataclasses

    from tachograph.record.event import Event, stored_event
    from tachograph.testing import build_run

    names = [f.name for f in dataclasses.fields(Event)]
    for event in build_run("fields", 4, status="ok"):
        values = [getattr(event, name) for name in names]
        fast, slow = stored_event(*values), Event(*values)
        assert type(fast) is Event
        assert [getattr(fast, n) for n in names] == [getattr(slow, n) for n in names] == values
        assert fast == slow
        assert repr(fast) == repr(slow)
        assert pickle.loads(pickle.dumps(fast)) == fast
        with pytest.raises(dataclasses.FrozenInstanceError):
            fast.seq = 9  # type: ignore[misc]
    assert stored_event(*values[:-1]).payload_bytes is None  # the default, as in Event


def test_receipt_is_the_dataclass_constructor_field_for_field() -> None:
    """The stores' receipt constructor builds what ``Receipt(...)`` builds, and covers every
    field (a field added to Receipt without it fails here)."""
    import dataclasses

    from tachograph.store.base import Receipt, receipt

    names = [f.name for f in dataclasses.fields(Receipt)]
    for values in (["e", "t", "r", 3, "sha256:h", True], ["e2", "t", "r", 4, "sha256:i", False]):
        fast, slow = receipt(*values), Receipt(*values)
        assert type(fast) is Receipt
        assert [getattr(fast, n) for n in names] == [getattr(slow, n) for n in names] == values
        assert fast == slow
        assert hash(fast) == hash(slow)
        assert repr(fast) == repr(slow)
        assert pickle.loads(pickle.dumps(fast)) == fast
        with pytest.raises(dataclasses.FrozenInstanceError):
            fast.seq = 9  # type: ignore[misc]
    assert receipt(*values[:-1]).duplicate is False  # the default, as in Receipt


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_mint_its_parents_next_ulid() -> None:
    # parent and child ask for an id in the same millisecond right after the fork: counting
    # on from the same inherited state, both would get the same one
    event_module = importlib.import_module("tachograph.record.event")
    source = event_module._ULIDS
    ms = time.time_ns() // 1_000_000
    source.next(ms)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, then out
        try:
            os.write(write, source.next(ms).encode())
        finally:
            os._exit(0)
    os.close(write)
    mine = source.next(ms)
    with os.fdopen(read, "rb") as pipe:
        theirs = pipe.read().decode()
    os.waitpid(pid, 0)
    assert CROCKFORD.fullmatch(theirs)
    assert theirs != mine

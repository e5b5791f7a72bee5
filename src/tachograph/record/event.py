"""The event record of SPEC sections 3 to 6: envelope, payload, salt, digest and hash.

An :class:`Event` is a frozen value. :func:`new_event` builds one for recording (drawing the
salt, the ULID and the timestamp, checking every field); :func:`event_from_line` reads one from
an interchange line without trusting it (verification does the checking).
"""

from __future__ import annotations

import enum
import hashlib
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Final, Protocol

import orjson

from ..errors import EventError
from .canonical import canonical
from .compiled import NATIVE
from .entropy import pool, random_bytes

_native_envelope: Callable[..., bytes | None] | None = (
    NATIVE.envelope if NATIVE is not None else None
)

__all__ = [
    "ENVELOPE_KEYS",
    "LINE_KEYS",
    "Effect",
    "Event",
    "EventType",
    "check_actor",
    "check_run_id",
    "check_tenant",
    "check_type",
    "digest_payload",
    "envelope_bytes",
    "fresh_event",
    "hash_envelope",
    "new_event",
    "new_ulid",
    "now_ts",
    "stored_event",
    "stored_json",
]

_NOTHING = b""


def stored_json(value: Any) -> bytes:
    """``orjson.dumps(value)`` in an object of its own size, for bytes an event keeps.

    orjson hands back its bytes in the buffer it wrote them into, at least 4 KiB (an
    85-byte payload holds 4,098 bytes under orjson 3.13), so that every queued or loaded
    event would carry about 4 KiB of slack; joining copies them into an exact object
    (65 ns for a small payload).
    """
    return _NOTHING.join((orjson.dumps(value), _NOTHING))


FORMAT_VERSION: Final = 1

ENVELOPE_KEYS: Final = (
    "v",
    "tenant",
    "run_id",
    "seq",
    "event_id",
    "ts",
    "type",
    "actor",
    "trace_id",
    "span_id",
    "idempotency_key",
    "model",
    "seed",
    "payload_digest",
    "prev_hash",
)
"""The 15 hashed keys, in the order SPEC section 3 lists them."""

LINE_KEYS: Final = frozenset((*ENVELOPE_KEYS, "hash", "payload", "salt"))
"""The keys of an interchange line (SPEC section 4)."""


class EventType(str, enum.Enum):
    """The event types SPEC section 6 names. Other dotted types are allowed."""

    RUN_STARTED = "run.started"
    RUN_FINISHED = "run.finished"
    MODEL_REQUEST = "model.request"
    MODEL_RESPONSE = "model.response"
    MODEL_FAILED = "model.failed"
    TOOL_REQUESTED = "tool.requested"
    TOOL_COMPLETED = "tool.completed"
    TOOL_FAILED = "tool.failed"
    PLAN_SELECTED = "plan.selected"
    GUARDRAIL_TRIPWIRE = "guardrail.tripwire"
    GUARDRAIL_PASSED = "guardrail.passed"
    OUTPUT_ACCEPTED = "output.accepted"
    OUTPUT_REJECTED = "output.rejected"
    HANDOFF = "handoff"
    DECISION = "decision"
    CLOCK_READ = "clock.read"
    RANDOM_SEED = "random.seed"
    RANDOM_VALUE = "random.value"
    EXTERNAL_READ = "external.read"

    def __str__(self) -> str:
        return self.value


class Effect(str, enum.Enum):
    """What running a tool does to the world; decides durability, replay and resume."""

    PURE = "pure"
    READ = "read"
    WRITE = "write"
    IRREVERSIBLE = "irreversible"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: str | Effect) -> Effect:
        """Return the effect named by ``value`` or fail listing the valid names."""
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(repr(e.value) for e in cls)
            raise EventError(
                f"unknown effect {value!r}; expected one of {valid}", field="effect", value=value
            ) from None


_TENANT = re.compile(r"[A-Za-z0-9._-]{1,64}")
_RUN_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_TYPE = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")
_ULID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")
# [0-9], not \d: \d also matches non-ASCII digits (e.g. fullwidth), which SPEC does not allow.
_TS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
_TRACE = re.compile(r"[0-9a-f]{32}")
_SPAN = re.compile(r"[0-9a-f]{16}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_SALT = re.compile(r"[0-9a-f]{32}")

# "handoff" and "decision" are the known types without a dot; every other type must be dotted.
_UNDOTTED_KNOWN: Final = frozenset({EventType.HANDOFF.value, EventType.DECISION.value})


def check_tenant(tenant: str) -> str:
    """Return ``tenant`` if it is 1-64 chars of ``[A-Za-z0-9._-]``, else raise."""
    if type(tenant) is not str or not _TENANT.fullmatch(tenant):
        raise EventError(
            f"tenant {tenant!r} must be 1-64 characters of [A-Za-z0-9._-]",
            field="tenant",
            value=tenant,
        )
    return tenant


def check_run_id(run_id: str) -> str:
    """Return ``run_id`` if it is 1-128 chars of ``[A-Za-z0-9._:-]``, else raise."""
    if type(run_id) is not str or not _RUN_ID.fullmatch(run_id):
        raise EventError(
            f"run id {run_id!r} must be 1-128 characters of [A-Za-z0-9._:-]",
            field="run_id",
            value=run_id,
        )
    return run_id


def check_type(event_type: str) -> str:
    """Return ``event_type`` if it is a dotted lower-case name (or a known undotted one)."""
    if type(event_type) is not str or not (
        event_type in _UNDOTTED_KNOWN or _TYPE.fullmatch(event_type)
    ):
        raise EventError(
            f"event type {event_type!r} must be dotted lower case, e.g. 'acme.review.queued'",
            field="type",
            value=event_type,
        )
    return event_type


def check_actor(actor: str) -> str:
    """Return ``actor`` if it is a string of 1-128 characters."""
    if type(actor) is not str or not 1 <= len(actor) <= 128:
        raise EventError(f"actor {actor!r} must be 1-128 characters", field="actor", value=actor)
    _check_unicode("actor", actor)
    return actor


def _check_unicode(name: str, text: str) -> None:
    """Strings in the envelope must be valid Unicode (SPEC section 2: no lone surrogates)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise EventError(
                f"{name} {text!r} contains a lone surrogate", field=name, value=text
            ) from None


# -- ids and time -----------------------------------------------------------------------------

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Every 10-bit value as two Crockford base32 characters: a ULID is 13 lookups at most.
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]


class _UlidSource:
    """Monotonic ULIDs: within one millisecond the 80-bit random part counts up by one.

    Counting up changes only its last 10 bits (the last two characters) in 1023 steps of 1024,
    so the text before them, the 48-bit time and the first 70 random bits, is kept as one
    24-character head and rebuilt only when the count carries out of the last 10 bits or a
    new millisecond draws a new random part: a ULID is then the head and one pair lookup.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ms = -1
        self._high = 0  # the random part without its last 10 bits
        self._low = 0  # its last 10 bits
        self._head = ""  # the text of the time and of ``_high``: 24 characters

    def next(self, ms: int) -> str:
        with self._lock:
            if ms <= self._ms:
                ms = self._ms
                low = self._low + 1
                if low < 1024:
                    self._low = low
                    return self._head + _PAIRS[low]
                low = 0
                high = self._high + 1  # the carry out of the last 10 bits
                if high >> 70:  # pragma: no cover - 2^80 ids in one millisecond
                    ms += 1
                    high, low = self._draw()
            else:
                high, low = self._draw()
            p = _PAIRS
            # 12 pairs of 10 bits: the time (after 2 zero bits), then the high 70 random bits
            head = (
                p[ms >> 40 & 1023] + p[ms >> 30 & 1023] + p[ms >> 20 & 1023]
                + p[ms >> 10 & 1023] + p[ms & 1023]
                + p[high >> 60 & 1023] + p[high >> 50 & 1023] + p[high >> 40 & 1023]
                + p[high >> 30 & 1023] + p[high >> 20 & 1023] + p[high >> 10 & 1023]
                + p[high & 1023]
            )  # fmt: skip
            self._ms, self._high, self._low, self._head = ms, high, low, head
            return head + p[low]

    @staticmethod
    def _draw() -> tuple[int, int]:
        # The top bit stays clear so the counter has room to grow within the millisecond.
        rand = int.from_bytes(random_bytes(10), "big") >> 1
        return rand >> 10, rand & 1023

    def forget(self) -> None:
        """Draw a new random part on the next call: a forked child must not count on from
        its parent's state (both would mint the same ids within the millisecond)."""
        with self._lock:
            self._ms = -1


class UlidSource(Protocol):
    """What mints the ULIDs of new events: :class:`_UlidSource`, or its compiled twin
    ``native.UlidSource`` (the same ids from the same draws: tests/test_events.py)."""

    def next(self, ms: int) -> str: ...
    def forget(self) -> None: ...


_ULIDS: UlidSource = NATIVE.UlidSource(random_bytes) if NATIVE is not None else _UlidSource()
os.register_at_fork(after_in_child=_ULIDS.forget)
# (seconds, formatted seconds with the point) as one tuple, replaced in a single assignment, so
# that a thread never sees the seconds of one moment paired with the text of another.
_ts_cache: tuple[int, str] = (-1, "")
# The six fraction digits are two lookups of three: about half the cost of formatting them.
_MILLIS = [f"{i:03d}" for i in range(1000)]
_MICROS_Z = [f"{i:03d}Z" for i in range(1000)]


def _format_ts_py(ns: int) -> str:
    global _ts_cache
    secs, rem = divmod(ns, 1_000_000_000)
    cached = _ts_cache
    if cached[0] != secs:
        cached = (secs, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(secs)))
        _ts_cache = cached
    return cached[1] + _MILLIS[rem // 1_000_000] + _MICROS_Z[rem // 1000 % 1000]


_format_ts: Callable[[int], str] = NATIVE.format_ts if NATIVE is not None else _format_ts_py
"""The timestamp of ``ns``: the compiled twin where it is built (the same text:
tests/test_events.py)."""


def now_ts() -> str:
    """The current UTC time as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    return _format_ts(time.time_ns())


def new_ulid() -> str:
    """A new ULID, monotonic within this process."""
    return _ULIDS.next(time.time_ns() // 1_000_000)


# -- hashing ----------------------------------------------------------------------------------


def digest_payload(salt: bytes, payload_bytes: bytes) -> str:
    """``"sha256:" + hex(SHA-256(salt ‖ JCS(payload)))`` given the canonical payload bytes."""
    h = hashlib.sha256(salt)
    h.update(payload_bytes)
    return "sha256:" + h.hexdigest()


def envelope_bytes(
    v: int,
    tenant: str,
    run_id: str,
    seq: int,
    event_id: str,
    ts: str,
    type: str,
    actor: str,
    trace_id: str | None,
    span_id: str | None,
    idempotency_key: str | None,
    model: str | None,
    seed: int | None,
    payload_digest: str,
    prev_hash: str | None,
) -> bytes:
    """``JCS(envelope)``. Keys are inserted in JCS order, so no sorting is needed.

    Every value is a string, an integer or null, whose orjson form is its JCS form. The
    compiled ``native.envelope`` writes the same bytes without the dict, where it is built;
    a value it does not handle (another type, an integer beyond 2^53, a lone surrogate) is
    left to orjson, which gives the bytes or the refusal.
    """
    if _native_envelope is not None:
        out = _native_envelope(
            v,
            tenant,
            run_id,
            seq,
            event_id,
            ts,
            type,
            actor,
            trace_id,
            span_id,
            idempotency_key,
            model,
            seed,
            payload_digest,
            prev_hash,
        )
        if out is not None:
            return out
    return orjson.dumps(
        {
            "actor": actor,
            "event_id": event_id,
            "idempotency_key": idempotency_key,
            "model": model,
            "payload_digest": payload_digest,
            "prev_hash": prev_hash,
            "run_id": run_id,
            "seed": seed,
            "seq": seq,
            "span_id": span_id,
            "tenant": tenant,
            "trace_id": trace_id,
            "ts": ts,
            "type": type,
            "v": v,
        },
        option=orjson.OPT_STRICT_INTEGER,
    )


def hash_envelope(envelope_jcs: bytes) -> str:
    """``"sha256:" + hex(SHA-256(JCS(envelope)))``."""
    return "sha256:" + hashlib.sha256(envelope_jcs).hexdigest()


builtins_type = type  # new_event's parameter 'type' shadows the builtin


# -- the event --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    """One recorded event: the 15 envelope fields, its hash, its payload and salt.

    ``payload`` and ``salt`` are ``None`` once erased. ``payload_bytes`` is the payload as
    stored (JSON in its original key order, not necessarily canonical) where known; it is not
    part of the value's identity.
    """

    v: int
    tenant: str
    run_id: str
    seq: int
    event_id: str
    ts: str
    type: str
    actor: str
    trace_id: str | None
    span_id: str | None
    idempotency_key: str | None
    model: str | None
    seed: int | None
    payload_digest: str
    prev_hash: str | None
    hash: str
    payload: Any
    salt: str | None
    payload_bytes: bytes | None = field(default=None, compare=False, repr=False)

    @property
    def erased(self) -> bool:
        """True when the payload and salt have been erased."""
        return self.payload is None and self.salt is None

    def envelope(self) -> dict[str, Any]:
        """The 15 hashed fields as a dict, in SPEC order."""
        return {key: getattr(self, key) for key in ENVELOPE_KEYS}

    def envelope_jcs(self) -> bytes:
        """``JCS(envelope)`` recomputed from the fields."""
        return envelope_bytes(
            self.v,
            self.tenant,
            self.run_id,
            self.seq,
            self.event_id,
            self.ts,
            self.type,
            self.actor,
            self.trace_id,
            self.span_id,
            self.idempotency_key,
            self.model,
            self.seed,
            self.payload_digest,
            self.prev_hash,
        )

    def to_line(self) -> dict[str, Any]:
        """The interchange line of SPEC section 4 as a dict."""
        line = self.envelope()
        line["hash"] = self.hash
        line["payload"] = self.payload
        line["salt"] = self.salt
        return line

    def to_json(self) -> bytes:
        """One interchange line as compact JSON bytes (no newline)."""
        return orjson.dumps(self.to_line())


class _EventDraft:
    """An :class:`Event` being filled in by ``stored_event``: the same slots, not frozen."""

    # The same slots in the same order on the same base: the layout ``__class__`` assignment
    # requires.
    __slots__ = Event.__slots__


def _stored_event_py(
    v: int,
    tenant: str,
    run_id: str,
    seq: int,
    event_id: str,
    ts: str,
    type: str,
    actor: str,
    trace_id: str | None,
    span_id: str | None,
    idempotency_key: str | None,
    model: str | None,
    seed: int | None,
    payload_digest: str,
    prev_hash: str | None,
    hash: str,
    payload: Any,
    salt: str | None,
    payload_bytes: bytes | None = None,
    *,
    _new: Any = object.__new__,
    _draft: type[_EventDraft] = _EventDraft,
    _cls: type[Event] = Event,
) -> Event:
    """``Event(...)`` with the same arguments, for the hot paths that build events by the
    million (every store read, every recorded event). The frozen dataclass's ``__init__``
    sets each of its 19 fields through ``object.__setattr__`` by name (about 2.8 us here).
    This fills an unfrozen draft of the same layout, where each field is one plain slot
    store, then turns it into an ``Event`` by assigning its class (about 0.6 us): the result
    is an ``Event`` like any other, frozen from then on. Nothing is checked, as in
    ``Event(...)``; a test holds the two equal field for field.
    """
    e: Any = _new(_draft)
    e.v = v
    e.tenant = tenant
    e.run_id = run_id
    e.seq = seq
    e.event_id = event_id
    e.ts = ts
    e.type = type
    e.actor = actor
    e.trace_id = trace_id
    e.span_id = span_id
    e.idempotency_key = idempotency_key
    e.model = model
    e.seed = seed
    e.payload_digest = payload_digest
    e.prev_hash = prev_hash
    e.hash = hash
    e.payload = payload
    e.salt = salt
    e.payload_bytes = payload_bytes
    e.__class__ = _cls
    return e  # type: ignore[no-any-return]


stored_event: Callable[..., Event] = _stored_event_py
"""``Event(...)`` with the same 19 arguments in order (``payload_bytes`` may be left out), for
the hot paths that build events by the million: see :func:`_stored_event_py`. Where the
compiled helpers serve, ``native.event`` writes the 19 slots directly (about 0.15 us against
0.6 us); a test holds both to the dataclass constructor field for field.

``native.event`` also leaves the event out of the cycle collector's sight (as CPython does
for a tuple of atoms): each caller hands a payload that is a tree of JSON values (checked by
``canonical``, or decoded from stored bytes), which cannot lead back to the event, so
reference counting frees it. Tracked, the events a long recording queued for the writer
thread, and the events of a long run read whole, were walked by collections of every
generation."""
_SALTS = pool(16)
"""The ready draws of ``random_bytes(16)``: a new event takes its salt from here inline."""


_native_fresh: Callable[..., Event | None] | None = None
"""``native.fresh``: the rest of :func:`fresh_event` for a new event (payload bytes, clock,
ULID, digest, envelope, hash, event) in one call, where the compiled helpers serve."""
if NATIVE is not None:
    NATIVE.bind_event(Event, tuple(f.name for f in fields(Event)))
    stored_event = NATIVE.event
    NATIVE.bind_fresh(hashlib.sha256, orjson.dumps, _ULIDS)
    _native_fresh = NATIVE.fresh


def new_event(
    *,
    run_id: str,
    seq: int,
    type: str,
    actor: str,
    payload: dict[str, Any],
    prev_hash: str | None,
    tenant: str = "default",
    trace_id: str | None = None,
    span_id: str | None = None,
    idempotency_key: str | None = None,
    model: str | None = None,
    seed: int | None = None,
    ts: str | None = None,
    event_id: str | None = None,
    salt: bytes | None = None,
    payload_bytes: bytes | None = None,
    checked: bool = False,
) -> Event:
    """Build a new event: draw its salt, ULID and timestamp, compute its digest and hash.

    Every field is checked and the payload must be in the closed profile; nothing is built
    from bad input. ``checked=True`` skips the checks of run id, tenant, actor and type when a
    caller has already made them once for the whole run.
    """
    if not checked:
        check_run_id(run_id)
        check_tenant(tenant)
        check_actor(actor)
        check_type(type)
    return fresh_event(
        run_id,
        seq,
        type,
        actor,
        payload,
        prev_hash,
        tenant,
        trace_id,
        span_id,
        idempotency_key,
        model,
        seed,
        ts,
        event_id,
        salt,
        payload_bytes,
    )


def fresh_event(
    run_id: str,
    seq: int,
    type: str,
    actor: str,
    payload: dict[str, Any],
    prev_hash: str | None,
    tenant: str,
    trace_id: str | None,
    span_id: str | None,
    idempotency_key: str | None,
    model: str | None,
    seed: int | None,
    ts: str | None,
    event_id: str | None,
    salt: bytes | None,
    payload_bytes: bytes | None,
) -> Event:
    """:func:`new_event` with ``checked=True``, its arguments in order (positional: the
    recorder builds every event this way, and 16 keywords cost more than the call's hashing
    of a small payload). The caller has checked run id, tenant, actor and type."""
    if builtins_type(seq) is not int or seq < 0:
        raise EventError(f"seq {seq!r} must be a non-negative integer", field="seq", value=seq)
    if (prev_hash is None) != (seq == 0):
        raise EventError(
            "prev_hash must be null exactly when seq is 0", field="prev_hash", value=prev_hash
        )
    if trace_id is not None and (
        builtins_type(trace_id) is not str or not _TRACE.fullmatch(trace_id) or trace_id == "0" * 32
    ):
        raise EventError(f"trace_id {trace_id!r} is not a W3C trace id", field="trace_id")
    if span_id is not None and (
        builtins_type(span_id) is not str or not _SPAN.fullmatch(span_id) or span_id == "0" * 16
    ):
        raise EventError(f"span_id {span_id!r} is not a W3C span id", field="span_id")
    if seed is not None and (builtins_type(seed) is not int or abs(seed) > 2**53 - 1):
        raise EventError(f"seed {seed!r} must be an integer within ±(2**53 - 1)", field="seed")
    # A key and a model are usually given and ASCII: the test for that is inline, no call.
    if idempotency_key is not None:
        if builtins_type(idempotency_key) is not str:
            raise EventError("idempotency_key must be a string", field="idempotency_key")
        if not idempotency_key.isascii():
            _check_unicode("idempotency_key", idempotency_key)
    if model is not None:
        if builtins_type(model) is not str:
            raise EventError("model must be a string", field="model")
        if not model.isascii():
            _check_unicode("model", model)
    if ts is not None and (builtins_type(ts) is not str or not _TS.fullmatch(ts)):
        raise EventError(
            f"ts {ts!r} must be UTC 'YYYY-MM-DDTHH:MM:SS.ffffffZ'", field="ts", value=ts
        )
    if event_id is not None and (
        builtins_type(event_id) is not str or not _ULID.fullmatch(event_id)
    ):
        raise EventError(
            f"event_id {event_id!r} is not a ULID (26 Crockford base32 characters)",
            field="event_id",
            value=event_id,
        )
    if salt is not None and (builtins_type(salt) is not bytes or len(salt) != 16):
        raise EventError("salt must be 16 bytes", field="salt")
    if builtins_type(payload) is not dict:
        raise EventError(
            f"payload must be a JSON object (dict), not {builtins_type(payload).__name__}",
            field="payload",
        )
    jcs = canonical(payload, "payload")
    if (
        _native_fresh is not None
        and payload_bytes is None
        and salt is None
        and ts is None
        and event_id is None
    ):
        # the steps below, compiled (tests/test_native.py holds it to them)
        try:
            drawn = _SALTS.popleft()  # random_bytes(16), without its frame
        except IndexError:
            drawn = random_bytes(16)
        made = _native_fresh(
            tenant,
            run_id,
            seq,
            type,
            actor,
            trace_id,
            span_id,
            idempotency_key,
            model,
            seed,
            prev_hash,
            payload,
            jcs,
            drawn,
        )
        if made is not None:
            return made
    if payload_bytes is None:
        # Stored as given (key order kept), so a replay serves back what the world returned;
        # the digest is over the canonical bytes.
        payload_bytes = _NOTHING.join((orjson.dumps(payload), _NOTHING))
    if salt is None:
        salt = random_bytes(16)
    if ts is None or event_id is None:
        ns = time.time_ns()
        if ts is None:
            ts = _format_ts(ns)
        if event_id is None:
            event_id = _ULIDS.next(ns // 1_000_000)
    digest = digest_payload(salt, jcs)
    env = envelope_bytes(
        FORMAT_VERSION,
        tenant,
        run_id,
        seq,
        event_id,
        ts,
        type,
        actor,
        trace_id,
        span_id,
        idempotency_key,
        model,
        seed,
        digest,
        prev_hash,
    )
    return stored_event(
        FORMAT_VERSION,
        tenant,
        run_id,
        seq,
        event_id,
        ts,
        type,
        actor,
        trace_id,
        span_id,
        idempotency_key,
        model,
        seed,
        digest,
        prev_hash,
        hash_envelope(env),
        payload,
        salt.hex(),
        payload_bytes,
    )


def event_from_line(line: dict[str, Any]) -> Event:
    """Build an :class:`Event` from a line that has already been checked (SPEC section 8)."""
    return Event(
        line["v"],
        line["tenant"],
        line["run_id"],
        line["seq"],
        line["event_id"],
        line["ts"],
        line["type"],
        line["actor"],
        line["trace_id"],
        line["span_id"],
        line["idempotency_key"],
        line["model"],
        line["seed"],
        line["payload_digest"],
        line["prev_hash"],
        line["hash"],
        line["payload"],
        line["salt"],
    )


# Patterns shared with the verifier.
PATTERNS: Final = {
    "tenant": _TENANT,
    "run_id": _RUN_ID,
    "type": _TYPE,
    "event_id": _ULID,
    "ts": _TS,
    "trace_id": _TRACE,
    "span_id": _SPAN,
    "digest": _DIGEST,
    "salt": _SALT,
}

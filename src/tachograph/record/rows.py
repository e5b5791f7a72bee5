"""The engine-neutral forms a store hands to verification: one stored row, one run summary.

Every store engine yields :class:`StoredRow` values from ``Store.read_rows`` and answers
``Store.run_info`` with something shaped like :class:`RunSummary`; :func:`verify_run
<tachograph.record.verify.verify_run>` reads nothing else, so it never depends on how an
engine lays out its tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from .event import Event

__all__ = ["RunSummary", "StoredRow"]


class StoredRow(NamedTuple):
    """One event as a store keeps it: the envelope, the stored hash, payload bytes and salt.

    The envelope's ``v`` is not carried: format version 1 is the only one a store accepts.
    ``payload_bytes`` is the payload exactly as stored (JSON, any key order) and ``None`` once
    erased, like ``salt``. Nothing here is trusted: a tampered engine may hand over a value of
    any type in any field, and verification reports it (check 1) instead of failing on it.

    A named tuple, not a dataclass, because verification streams millions of these: building
    one costs a tuple, and an engine whose driver returns tuples in this order (SQLite does)
    makes each with ``StoredRow._make(raw)``.
    """

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
    payload_bytes: bytes | None
    salt: str | None

    @classmethod
    def of(cls, event: Event, payload_bytes: bytes | None = None) -> StoredRow:
        """The row that stores ``event``; ``payload_bytes`` overrides the event's own."""
        body = payload_bytes if payload_bytes is not None else event.payload_bytes
        return cls(
            event.tenant,
            event.run_id,
            event.seq,
            event.event_id,
            event.ts,
            event.type,
            event.actor,
            event.trace_id,
            event.span_id,
            event.idempotency_key,
            event.model,
            event.seed,
            event.payload_digest,
            event.prev_hash,
            event.hash,
            body,
            event.salt,
        )


class RunSummary(Protocol):
    """What verification reads of a store's run summary (``RunInfo`` is one).

    A store writes the summary in the same transaction as every append, so it exposes a tail
    that was cut or replaced behind the store's back, which the chain alone cannot.
    """

    @property
    def tenant(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    @property
    def events(self) -> int:
        """How many events the run holds."""

    @property
    def head_hash(self) -> str:
        """The hash of the run's last event."""

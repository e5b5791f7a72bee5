"""The store audit: a hash chain of what was done to the store, beside the runs.

Every erasure, deletion, retention override and purpose-scoped read is appended here, in the
same transaction as the change it records (an engine writes the record itself, so no erasure
can happen without one). The chain is its own: one per store, record ``seq`` 0, 1, 2, ...,
each record's ``prev_hash`` the ``hash`` of the one before, and

``hash = "sha256:" + hex(SHA-256(JCS(body)))`` over the record's fields without ``hash``,

with the same canonical bytes and SHA-256 as the event chain (SPEC sections 2 and 3).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import EventError, ProfileError
from ..record.canonical import canonical, check_profile
from ..record.event import check_tenant, now_ts

__all__ = [
    "AUDIT_VERSION",
    "READ_ACTIONS",
    "AuditEntry",
    "AuditRecord",
    "chain_audit",
    "link_problems",
]

AUDIT_VERSION = 1
"""Version of the audit record layout (``v`` in each record)."""

READ_ACTIONS = frozenset({"read", "read.denied"})
"""The actions of the records of reads (purpose-scoped reads, docs/privacy.md): a record of
what was read, which changes nothing that a read returns."""


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """What a caller asks to record: who did what, why, to which tenant's data.

    ``detail`` holds the action's own facts (run, seqs, reason, purpose); it must be in the
    JSON profile and must not hold the erased data itself.
    """

    action: str
    actor: str
    tenant: str = "default"
    detail: Mapping[str, Any] = field(default_factory=dict)
    ts: str | None = None
    """UTC time of the action in the record format; ``None``: now, when it is recorded."""

    def __post_init__(self) -> None:
        check_tenant(self.tenant)
        if not self.action or not self.actor:
            raise EventError("an audit entry needs an action and an actor", field="action")
        check_profile(dict(self.detail), "detail")


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One record of the store audit, as stored and as listed by ``tacho audit``."""

    seq: int
    ts: str
    tenant: str
    actor: str
    action: str
    detail: dict[str, Any]
    prev_hash: str | None
    hash: str
    unreadable: str | None = field(default=None, compare=False)
    """What of the stored record could not be read as written, or ``None``: only a store
    changed behind its engine's back has such a record (a ``detail`` that is not a JSON
    object, text that is not UTF-8, shown with lone surrogates for its bad bytes); it fails
    the chain (:func:`link_problems`)."""

    def body(self) -> dict[str, Any]:
        """The hashed fields (everything but ``hash``)."""
        return {
            "v": AUDIT_VERSION,
            "seq": self.seq,
            "ts": self.ts,
            "tenant": self.tenant,
            "actor": self.actor,
            "action": self.action,
            "detail": self.detail,
            "prev_hash": self.prev_hash,
        }

    def recomputed_hash(self) -> str:
        """The hash these fields should have."""
        return "sha256:" + hashlib.sha256(canonical(self.body(), "audit")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the body and the hash."""
        return {**self.body(), "hash": self.hash}


def chain_audit(entry: AuditEntry, *, seq: int, prev_hash: str | None) -> AuditRecord:
    """The record ``entry`` becomes at position ``seq`` after ``prev_hash`` (engines call this
    inside the transaction that reads the audit head, so positions never collide)."""
    unsigned = AuditRecord(
        seq=seq,
        ts=entry.ts or now_ts(),
        tenant=entry.tenant,
        actor=entry.actor,
        action=entry.action,
        detail=dict(entry.detail),
        prev_hash=prev_hash,
        hash="",
    )
    return AuditRecord(**{**_fields(unsigned), "hash": unsigned.recomputed_hash()})


def _fields(record: AuditRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in AuditRecord.__slots__}


def link_problems(records: Iterable[AuditRecord]) -> list[tuple[int, str]]:
    """``(position, problem)`` for each record that breaks the audit chain; empty when sound."""
    problems: list[tuple[int, str]] = []
    prev: str | None = None
    for position, record in enumerate(records):
        if record.seq != position:
            problems.append((position, f"seq {record.seq} where {position} was expected"))
        if record.unreadable is not None:
            problems.append((position, f"the stored record cannot be read: {record.unreadable}"))
        try:
            recomputed = record.recomputed_hash()
        except ProfileError as exc:  # a field no record can hold (a lone surrogate, a float)
            problems.append((position, f"its fields cannot be hashed: {exc}"))
            recomputed = record.hash  # the next record is held to the hash as stored
        if record.hash != recomputed:
            problems.append((position, f"hash {record.hash} but the fields hash to {recomputed}"))
        if record.prev_hash != prev:
            problems.append(
                (position, f"prev_hash {record.prev_hash} but the record before hashes to {prev}")
            )
        prev = recomputed
    return problems

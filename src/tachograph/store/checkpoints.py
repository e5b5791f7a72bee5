"""Issuing a signed checkpoint over a tenant's seal log kept in a store (SPEC section 9).

The Merkle math is :mod:`tachograph.record.merkle` and the note format
:mod:`tachograph.record.checkpoint`; this module only ties them to the rows a store keeps, so
that both the recorder's writer (which seals every recording) and
:class:`tachograph.sealing.SealLog` issue checkpoints the same way.

Issuing starts from the latest checkpoint the store keeps: its signature must verify with the
issuer's key and the frontier kept beside it must lead to its root, or nothing is issued ("a
checkpoint is never issued over an inconsistent tree"). The new tree is that frontier plus the
leaves appended since, so issuing costs O(log n + new leaves), however large the log is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import SealingError
from ..record.checkpoint import Checkpoint, Note, SigningKey
from ..record.merkle import Frontier, leaf_hash
from .base import CheckpointRow, Store

__all__ = [
    "DEFAULT_LOG_NAME",
    "LOG_NAME_ENV",
    "SIGNING_KEY_ENV",
    "Issued",
    "issue_checkpoint",
    "latest_frontier",
    "load_signing_key",
    "origin_for",
]

SIGNING_KEY_ENV = "TACHOGRAPH_SIGNING_KEY"
"""The path of the signing key file, when no option names one."""
LOG_NAME_ENV = "TACHOGRAPH_LOG_NAME"
"""The host-like name in checkpoint origins, when no option names one."""
DEFAULT_LOG_NAME = "tachograph.localhost"


def origin_for(tenant: str, log_name: str | None = None) -> str:
    """``<host-like name>/tachograph/<tenant>``."""
    name = log_name or os.environ.get(LOG_NAME_ENV) or DEFAULT_LOG_NAME
    return f"{name}/tachograph/{tenant}"


def load_signing_key(path: str | os.PathLike[str] | None = None) -> SigningKey | None:
    """The key in ``path``, else in the file ``TACHOGRAPH_SIGNING_KEY`` names, else ``None``."""
    target = path if path is not None else os.environ.get(SIGNING_KEY_ENV)
    return SigningKey.load(target) if target else None


@dataclass(frozen=True, slots=True)
class Issued:
    """A checkpoint just issued: its ``note``, the tree it extended (``old``) and the leaf
    hashes appended since (what a consistency proof for a witness is built from)."""

    note: Note
    old: Frontier
    new_hashes: tuple[bytes, ...]
    frontier: Frontier


def latest_frontier(
    store: Store,
    tenant: str,
    *,
    origin: str,
    key: SigningKey | None,
    trusted: Issued | None = None,
) -> tuple[Frontier, Note | None]:
    """The frontier of ``tenant``'s latest kept checkpoint, checked (see the module text).

    ``trusted`` is a checkpoint this process issued itself: when the store's latest is that
    very note, its signature and frontier were checked when it was made and are not checked
    again (what keeps a checkpoint per batch of seals cheap for the recorder).
    """
    row = store.latest_checkpoint(tenant)
    if row is None:
        return Frontier(0), None
    if (
        trusted is not None
        and row.size == trusted.frontier.size
        and row.note == trusted.note.to_bytes().decode()
    ):
        return trusted.frontier, trusted.note
    note = Note.parse(row.note)
    cp = Checkpoint.parse(note.text)
    if cp.origin != origin:
        raise SealingError(
            f"the latest checkpoint is for {cp.origin!r}, this log is {origin!r}",
            what="checkpoint",
        )
    if key is not None and not note.verified_by([key.verifier]):
        raise SealingError(
            f"the latest checkpoint (size {cp.size}) is not signed by {key.name}: "
            "refusing to extend it",
            what="signature",
        )
    try:
        frontier = Frontier.decode(row.frontier)
    except (ValueError, IndexError):
        raise SealingError("the stored frontier is unreadable", what="consistency") from None
    if frontier.size != cp.size or frontier.root() != cp.root:
        raise SealingError(
            f"the stored frontier does not lead to the root of checkpoint {cp.size}: "
            "refusing to issue a checkpoint over an inconsistent tree",
            what="consistency",
        )
    return frontier, note


def issue_checkpoint(
    store: Store,
    tenant: str,
    key: SigningKey,
    *,
    origin: str,
    trusted: Issued | None = None,
) -> Issued | None:
    """Sign, and keep in ``store``, a checkpoint over every seal of ``tenant`` appended so far.

    Returns ``None`` when the latest checkpoint already covers every seal. When another process
    kept a larger checkpoint meanwhile, that one is returned (with no new hashes).
    """
    frontier, old_note = latest_frontier(store, tenant, origin=origin, key=key, trusted=trusted)
    count = store.seal_count(tenant)
    if count < frontier.size:
        raise SealingError(
            f"the seal log holds fewer seals ({count}) than checkpoint {frontier.size} "
            "covers: refusing to issue a checkpoint over an inconsistent tree",
            what="consistency",
        )
    if old_note is not None and count == frontier.size:
        return None
    rows = store.read_seals(tenant, frontier.size, count)
    if [r.index for r in rows] != list(range(frontier.size, count)):
        raise SealingError(
            f"the seal log skips or repeats an index between {frontier.size} and {count}",
            what="consistency",
        )
    new_hashes = tuple(leaf_hash(r.leaf) for r in rows)
    new = frontier.append_hashes(new_hashes)
    note = Checkpoint(origin, new.size, new.root()).note(key)
    store.put_checkpoint(CheckpointRow(tenant, new.size, note.to_bytes().decode(), new.encode()))
    latest = store.latest_checkpoint(tenant)
    if latest is not None and latest.size > new.size:
        # Another process issued a larger one meanwhile: that is the latest now.
        # (Its frontier is not ``trusted`` next time: it was not checked here.)
        return Issued(Note.parse(latest.note), new, (), new)
    return Issued(note, frontier, new_hashes, new)

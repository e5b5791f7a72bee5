"""The store contract: what every engine must do, and nothing more.

A store keeps rows, enforces order and uniqueness, and answers queries. It knows nothing of
verification: hashing, canonical bytes and checks happen in the core before a store sees an
event, and :func:`~tachograph.record.verify.verify_run` checks what a store hands back
(:class:`~tachograph.record.rows.StoredRow` values and the run summary). Every engine runs the
same conformance suite (:mod:`tachograph.testing.conformance`) and is opened from a URL through
the registry (:mod:`tachograph.store.registry`).
"""

from __future__ import annotations

import abc
import bisect
import difflib
import itertools
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import AppendRefused, DuplicateConflict, RunNotFound, SequenceConflict, StoreError
from ..record.bulk import collector_paused
from ..record.event import Event
from ..record.rows import StoredRow
from .audit import AuditEntry, AuditRecord

if TYPE_CHECKING:
    from ..record.verify import VerifyReport

__all__ = [
    "DEFAULT_TENANT",
    "NEIGHBOURS",
    "CheckpointRow",
    "Receipt",
    "RunInfo",
    "SealRow",
    "Store",
    "StoredRow",
    "not_found",
    "prefix_bound",
    "row_event",
    "subject_forms",
    "suggest",
]

DEFAULT_TENANT = "default"
"""The tenant of what is recorded when neither the caller nor the store names one."""


@dataclass(frozen=True, slots=True)
class Receipt:
    """What an append returns per event. ``duplicate`` is true when nothing was written."""

    event_id: str
    tenant: str
    run_id: str
    seq: int
    hash: str
    duplicate: bool = False


class _ReceiptDraft:
    """A :class:`Receipt` being filled in by :func:`receipt`: the same slots, not frozen (the
    layout ``__class__`` assignment requires)."""

    __slots__ = Receipt.__slots__


def receipt(
    event_id: str,
    tenant: str,
    run_id: str,
    seq: int,
    hash: str,
    duplicate: bool = False,
    *,
    _new: Any = object.__new__,
    _draft: type[_ReceiptDraft] = _ReceiptDraft,
    _cls: type[Receipt] = Receipt,
) -> Receipt:
    """``Receipt(...)`` with the same arguments, for an append's every event: the frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__`` (0.7 us here);
    this fills an unfrozen draft of the same layout and assigns its class (0.2 us), as
    ``record.event.stored_event`` does for events. A test holds the two equal."""
    r: Any = _new(_draft)
    r.event_id = event_id
    r.tenant = tenant
    r.run_id = run_id
    r.seq = seq
    r.hash = hash
    r.duplicate = duplicate
    r.__class__ = _cls
    return r  # type: ignore[no-any-return]


# -- an append's refusals, in the same words on every engine ------------------------------


def seq_taken(ev: Event, expected: str | None) -> DuplicateConflict:
    """``ev``'s run already holds another event at its seq (``expected``: that one's hash)."""
    return DuplicateConflict(
        f"run {ev.run_id!r} already has a different event at seq {ev.seq}",
        run_id=ev.run_id,
        tenant=ev.tenant,
        seq=ev.seq,
        expected=expected,
        actual=ev.hash,
    )


def out_of_sequence(ev: Event, count: int, head: str | None) -> SequenceConflict:
    """``ev`` is not its run's next event (``count`` events, ``head`` the last one's hash)."""
    return SequenceConflict(
        f"run {ev.run_id!r}: event expected at seq {count} after head "
        f"{head}, got seq {ev.seq} after {ev.prev_hash}",
        run_id=ev.run_id,
        tenant=ev.tenant,
        seq=ev.seq,
        expected={"seq": count, "prev_hash": head},
        actual={"seq": ev.seq, "prev_hash": ev.prev_hash},
    )


def id_taken(
    event_id: str,
    run_id: str,
    seq: int,
    actual: str,
    at: tuple[str, int],
    expected: str | None,
    *,
    tenant: str | None = None,
) -> DuplicateConflict:
    """The event ``event_id`` of ``run_id`` (of ``tenant``) at ``seq`` (hash ``actual``) has
    an id the event stored ``at`` (run, seq), of hash ``expected``, already holds."""
    return DuplicateConflict(
        f"event_id {event_id} is already stored at {at[0]!r} seq {at[1]}",
        run_id=run_id,
        tenant=tenant,
        seq=seq,
        expected=expected,
        actual=actual,
    )


def run_deleted(
    tenant: str, run_id: str, at: str | None = None, *, location: str | None = None
) -> AppendRefused:
    """``run_id`` of ``tenant`` was deleted by retention (``at``, when known)."""
    return AppendRefused(
        f"run {run_id!r} of tenant {tenant!r} was deleted by retention"
        + (f" at {at}" if at else "")
        + "; its id cannot be used again",
        run_id=run_id,
        tenant=tenant,
        **({"location": location} if location is not None else {}),
    )


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A summary row for one run."""

    tenant: str
    run_id: str
    actor: str
    started_at: str
    last_at: str
    events: int
    head_hash: str
    status: str | None
    """``ok``, ``error`` or ``aborted`` from ``run.finished``; ``None`` while unfinished."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "tenant": self.tenant,
            "run_id": self.run_id,
            "actor": self.actor,
            "started_at": self.started_at,
            "last_at": self.last_at,
            "events": self.events,
            "head_hash": self.head_hash,
            "status": self.status,
        }


@dataclass(frozen=True, slots=True)
class SealRow:
    """One leaf of a tenant's seal log (SPEC section 9), as a store keeps it.

    ``leaf`` is the logged bytes; ``run_id`` and ``seq`` repeat two of its fields so that a
    store can find a run's seals without parsing them. ``index`` is the leaf's position in the
    tenant's log (``-1`` before it is appended).
    """

    run_id: str
    seq: int
    leaf: bytes
    index: int = -1


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    """A signed checkpoint of a tenant's seal log: its tree ``size``, the signed ``note``
    (UTF-8 text) and the ``frontier`` it was computed from (opaque text for the store)."""

    tenant: str
    size: int
    note: str
    frontier: str


class Store(abc.ABC):
    """The contract every engine implements.

    Appends are atomic per batch and enforce the chain; duplicates of stored events are
    acknowledged without writing; reads stream in constant memory. An engine registered
    under a URL scheme (entry point group ``tachograph.stores``) is opened with
    :meth:`from_url`.
    """

    url: str
    seals_with_events: bool = False
    """Whether :meth:`append_sealed` stores the seals in the batch's own transaction."""
    tenant: str | None = None
    """The one tenant this store is confined to (``?tenant=T`` of its URL), or ``None``."""
    hides_other_tenants: bool = False
    """Whether the database itself hides other tenants' rows from a store confined to one
    (PostgreSQL's row-level security): its store audit then has gaps that are no break."""

    def scoped_tenant(self, tenant: str | None = None, *, run_id: str | None = None) -> str | None:
        """The tenant an operation is for: ``tenant``, else the store's own (:attr:`tenant`),
        else ``None`` (any tenant). A tenant other than the store's raises
        :class:`~tachograph.errors.StoreError` naming both: a store confined to one tenant
        never reads or writes another."""
        scope = self.tenant
        if scope is None or tenant is None or tenant == scope:
            return scope if tenant is None else tenant
        raise StoreError(
            f"tenant {tenant!r} was asked of {self.url}, which is confined to tenant "
            f"{scope!r}: leave tenant unset, or open the store for tenant {tenant!r}",
            location=self.url,
            run_id=run_id,
            expected=scope,
            actual=tenant,
        )

    def writing_tenant(self, tenant: str | None = None, *, run_id: str | None = None) -> str:
        """The tenant a run recorded into this store gets: ``tenant``, else the store's own,
        else ``"default"`` (see :meth:`scoped_tenant`); where every recording asks."""
        return self.scoped_tenant(tenant, run_id=run_id) or DEFAULT_TENANT

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> Store:
        """Open the store ``url`` names (``scheme://...``); engines in the registry implement it.

        With ``create=False`` a store that does not exist raises
        :class:`~tachograph.errors.StoreNotFound` instead of being made.
        """
        raise StoreError(f"{cls.__name__} cannot be opened from a URL ({url})", location=url)

    @abc.abstractmethod
    def append(self, events: Sequence[Event], *, durable: bool = True) -> list[Receipt]:
        """Append a batch atomically. Refuse the whole batch on any conflict.

        Each event's ``seq`` must be its run's next and its ``prev_hash`` the run's head hash,
        else :class:`~tachograph.errors.SequenceConflict`. An event already stored with the
        same bytes gets its original receipt (``duplicate=True``); the same ``event_id`` or
        ``(run, seq)`` with other content raises :class:`~tachograph.errors.DuplicateConflict`.
        """

    def append_all(
        self,
        batches: Iterable[Sequence[Event]],
        *,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[int, int]:
        """Append several batches as ONE atomic unit: all of them are stored, or none.

        What an import needs (a file is stored whole or not at all, whatever fails and
        wherever the process is killed). Returns ``(written, duplicates)``. This default is
        atomic because :meth:`append` is: it joins the batches into one batch (memory grows
        with the file). Engines that can hold one transaction over several batches override
        it to keep memory flat (SQLite does).
        """
        joined = [event for batch in batches for event in batch]
        receipts = self.append(joined)
        if progress is not None:
            progress(len(joined))
        duplicates = sum(1 for r in receipts if r.duplicate)
        return len(receipts) - duplicates, duplicates

    @abc.abstractmethod
    def head(self, run_id: str, *, tenant: str | None = None) -> tuple[int, str] | None:
        """The last ``(seq, hash)`` of a run, or ``None`` if it has no events; without
        ``tenant``, of the run in :meth:`writing_tenant` (the store's tenant, else
        ``default``)."""

    @abc.abstractmethod
    def read_rows(
        self, run_id: str, *, tenant: str | None = None, from_seq: int = 0
    ) -> Iterator[StoredRow]:
        """Stream a run's rows in seq order from ``from_seq``, in constant memory, exactly as
        stored (nothing decoded, nothing checked): what verification and export read.

        Without ``tenant`` the run id must be unique across tenants (else
        :class:`~tachograph.errors.StoreError`); a run that is not there raises
        :class:`~tachograph.errors.RunNotFound` with close matches, never reads as empty.
        """

    @abc.abstractmethod
    def runs(
        self,
        *,
        actor: str | None = None,
        tenant: str | None = None,
        status: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int | None = None,
        prefix: str | None = None,
    ) -> list[RunInfo]:
        """Runs, newest first, filtered by actor, tenant, status (``unfinished`` for none),
        start time (ISO 8601 strings compared lexically) and the beginning of the run id
        (``prefix``, compared character by character: no pattern)."""

    @abc.abstractmethod
    def run_info(self, run_id: str, *, tenant: str | None = None) -> RunInfo:
        """The summary of one run; raises :class:`RunNotFound` with close matches."""

    def close_matches(self, run_id: str, *, tenant: str | None = None) -> list[str]:
        """Up to five run ids close to ``run_id``, of ``tenant`` (else the store's own, else
        any): ids it begins first, then similar spellings among the :data:`NEIGHBOURS` ids on
        each side of it in sorted order (see :func:`suggest`). What an unknown run's
        :class:`RunNotFound` offers. This default lists the tenant's runs; the engines read
        just the neighbours from an index."""
        tenant = self.scoped_tenant(tenant, run_id=run_id)
        return suggest(run_id, [info.run_id for info in self.runs(tenant=tenant)])

    @abc.abstractmethod
    def count_events(self) -> int:
        """How many events the store holds."""

    # -- the seal log (SPEC section 9): rows only; the Merkle math is tachograph.record.merkle

    @abc.abstractmethod
    def append_seals(self, tenant: str, seals: Sequence[SealRow]) -> int:
        """Append leaves to ``tenant``'s seal log atomically; return the first one's index.

        Indices are 0, 1, 2, ... per tenant, with no gaps, in the order given; concurrent
        appenders each get a contiguous range. Leaves are never changed or removed.
        """

    def append_sealed(
        self, events: Sequence[Event], seals: Mapping[str, Sequence[SealRow]]
    ) -> list[Receipt]:
        """Append a batch and seals (per tenant) that name events of it or stored before it.

        Engines with ``seals_with_events`` do both in one transaction, so that a seal is
        never stored without its events nor lost with them; this default appends the events,
        then the seals (a crash between the two leaves those events unsealed, never a seal
        ahead of its events).
        """
        receipts = self.append(events)
        for tenant, rows in seals.items():
            self.append_seals(tenant, rows)
        return receipts

    @abc.abstractmethod
    def read_seals(self, tenant: str, start: int = 0, end: int | None = None) -> list[SealRow]:
        """The leaves with ``start <= index < end`` (``end`` default: all), in index order."""

    @abc.abstractmethod
    def seal_count(self, tenant: str) -> int:
        """How many leaves ``tenant``'s seal log holds."""

    @abc.abstractmethod
    def seals_for_run(self, tenant: str, run_id: str) -> list[SealRow]:
        """The leaves that seal one run, in index order."""

    @abc.abstractmethod
    def put_checkpoint(self, checkpoint: CheckpointRow) -> bool:
        """Keep a checkpoint; ``False`` (and nothing written) if one of that tenant and size
        is already kept. Checkpoints are never changed or removed."""

    @abc.abstractmethod
    def latest_checkpoint(self, tenant: str) -> CheckpointRow | None:
        """The kept checkpoint of ``tenant`` with the largest size, or ``None``."""

    # -- data lifecycle: erasure, deletion, the store audit, data subjects -------------------

    @abc.abstractmethod
    def erase(
        self,
        tenant: str,
        run_id: str,
        seqs: Iterable[int],
        *,
        audit: AuditEntry,
        unlink: str | Sequence[str] | None = None,
    ) -> int:
        """Erase the payloads and salts of ``seqs`` of a run (SPEC section 4); return how many
        were erased now (already erased ones, and seqs the run does not have, count 0).

        The envelopes stay, so the chain still verifies, reporting the seqs as erased. Each
        payload and its salt go together in one transaction with the audit record (written
        only when something was erased, so erasing twice records once). Afterwards the
        plaintext must be gone from the engine's files (journals and free space included).

        With ``unlink`` (a data subject's id, or the several forms it is linked under), that
        subject's links to ``seqs`` of the run go in the same transaction (the subject's
        erasure: the link names the person), and the one audit record, whose detail then also
        says ``"unlinked": n``, is written when a payload was erased or a link removed
        (:func:`subject_forms` reads ``unlink``).
        """

    def scrub(self) -> None:  # noqa: B027 - only engines that keep old copies need one
        """Finish removing erased data from the engine's files, where an erasure leaves old
        copies until then (SQLite's ``-wal``); :meth:`erase` does it, and raises
        :class:`~tachograph.errors.StoreUnavailable` when it could not finish. Nothing to
        do by default."""

    @abc.abstractmethod
    def delete_run(self, tenant: str, run_id: str, *, audit: AuditEntry) -> int:
        """Delete a whole run (retention only); return how many events were deleted.

        The run's summary and subject links go with it, the audit record is written in the
        same transaction, and the run id stays taken: appending to it again is refused.
        """

    @abc.abstractmethod
    def append_audit(self, entry: AuditEntry) -> AuditRecord:
        """Append one record to the store audit (hash-chained, see :mod:`.audit`)."""

    @abc.abstractmethod
    def read_audit(self, *, from_seq: int = 0) -> Iterator[AuditRecord]:
        """Stream the store audit in ``seq`` order."""

    def audit_of(self, action: str, *, tenant: str | None = None) -> Iterator[AuditRecord]:
        """The store audit's records of one ``action`` (of one ``tenant``), in ``seq`` order.

        Engines ask their database for just those (the audit also holds a record of every
        audited read, so it grows with use); this default filters :meth:`read_audit`."""
        for record in self.read_audit():
            if record.action == action and (tenant is None or record.tenant == tenant):
                yield record

    @abc.abstractmethod
    def link_subjects(self, tenant: str, run_id: str, links: Iterable[tuple[int, str]]) -> int:
        """Record that event ``seq`` of a run holds data of subject ``id``, for each
        ``(seq, id)``; return how many links are new (linking twice is harmless)."""

    @abc.abstractmethod
    def subject_events(self, tenant: str, subject: str) -> list[tuple[str, int]]:
        """``(run_id, seq)`` of every event linked to ``subject`` in ``tenant``, in order."""

    @abc.abstractmethod
    def run_subjects(self, tenant: str, run_id: str) -> list[tuple[int, str]]:
        """``(seq, subject)`` of every subject link of one run, by seq then subject: what
        :meth:`link_subjects` was given for it (``tacho migrate`` copies them)."""

    def subject_key_ids(self, tenant: str) -> frozenset[str] | None:
        """The key ids of the keyed tokens (``pii1:<key id>:<hex>``) data subjects are linked
        under in ``tenant``: an erasure by subject without a key would not find those links,
        and says so. ``None`` when the engine cannot tell (this default)."""
        return None

    def run_keys(self) -> list[tuple[str, str]]:
        """Every ``(tenant, run_id)`` in the store, in that order (code point by code point, as
        Python sorts them); engines also list orphaned events' runs. ``verify_all`` reports
        in this order, so that two verifications of a store list their runs alike."""
        return sorted((info.tenant, info.run_id) for info in self.runs())

    def seal_tenants(self) -> list[str]:
        """The tenants whose seal log holds a seal (within the store's tenant, if scoped).

        Engines answer from their seal tables; this default names the tenants of the runs
        the store lists and its own (or ``default``), which misses a tenant whose every run is
        gone."""
        tenants = {tenant for tenant, _ in self.run_keys()}
        tenants.add(self.tenant or "default")
        return sorted(t for t in tenants if self.seal_count(t))

    def change_token(self) -> Hashable | None:
        """A value equal to an earlier one only if nothing in the store can have changed
        between the two calls (a write by this object, another connection or another
        process) but the store-audit records of reads, which every audited read appends
        (:data:`~tachograph.store.audit.READ_ACTIONS`), so that what is derived from the
        store may be kept in this process meanwhile (a tenant's seal-log audit,
        :mod:`tachograph.sealing.verdict`). ``None``, the default: not known, derive it again
        each time."""
        return None

    def close(self) -> None:  # noqa: B027 - optional for engines without resources
        """Release the engine's resources. Closing twice is harmless."""

    def detached(self) -> str | None:
        """Why what this store wrote is no longer where it is read from (its file removed or
        replaced since it was opened), or None. Engines without a file never are."""
        return None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (engines without resources are never closed)."""
        return False

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- derived operations, the same for every engine ------------------------------------

    def read(
        self,
        run_id: str,
        *,
        tenant: str | None = None,
        from_seq: int = 0,
        decode: bool = True,
    ) -> Iterator[Event]:
        """Stream a run's events in seq order from ``from_seq``, in constant memory.

        With ``decode=False`` payloads are left as the stored bytes in ``payload_bytes``
        (``payload`` is ``None``); decoded events carry both.
        """
        for r in self.read_rows(run_id, tenant=tenant, from_seq=from_seq):
            yield row_event(r, decode=decode)

    def rows_containing(
        self, run_id: str, needles: Sequence[bytes], *, tenant: str | None = None
    ) -> Iterator[StoredRow]:
        """The rows of :meth:`read_rows` whose stored payload is bytes holding any of
        ``needles``, in seq order: what a scan for a marker needs (``check_stored_blobs`` and
        ``tacho doctor`` look for blob references this way). An engine may filter in the
        database; this one filters the rows it reads. Raises as :meth:`read_rows` does for a
        run that is not there."""
        for row in self.read_rows(run_id, tenant=tenant):
            body = row.payload_bytes
            if type(body) is bytes and any(n in body for n in needles):
                yield row

    def events(self, run_id: str, *, tenant: str | None = None) -> list[Event]:
        """All events of a run, decoded, as a list (use :meth:`read` for large runs)."""
        with collector_paused():  # the whole run is held: see record/bulk.py
            return list(self.read(run_id, tenant=tenant))

    def resolve(self, run_id: str, *, tenant: str | None = None) -> RunInfo:
        """Alias of :meth:`run_info`, for readability at call sites."""
        return self.run_info(run_id, tenant=tenant)

    # -- conveniences: verification is not the store's, these only call it -----------------

    def verify(self, run_id: str, *, tenant: str | None = None, workers: int = 1) -> VerifyReport:
        """``tachograph.store.verify_stored(self, run_id, tenant=tenant, workers=workers)``."""
        from .verify import verify_stored

        return verify_stored(self, run_id, tenant=tenant, workers=workers)

    def verify_all(
        self,
        *,
        tenant: str | None = None,
        progress: Callable[[int], None] | None = None,
        workers: int = 1,
    ) -> Iterator[VerifyReport]:
        """``tachograph.store.verify_all(self, tenant=tenant, progress=progress, workers=...)``."""
        from .verify import verify_all

        return verify_all(self, tenant=tenant, progress=progress, workers=workers)


def row_event(r: StoredRow, *, decode: bool = True) -> Event:
    """The :class:`Event` a stored row holds; ``decode=False`` leaves ``payload`` as ``None``."""
    body = r.payload_bytes
    return Event(
        1,
        r.tenant,
        r.run_id,
        r.seq,
        r.event_id,
        r.ts,
        r.type,
        r.actor,
        r.trace_id,
        r.span_id,
        r.idempotency_key,
        r.model,
        r.seed,
        r.payload_digest,
        r.prev_hash,
        r.hash,
        # Stored bodies are orjson's output for a payload checked against the profile at
        # write time: no integer literal beyond 2^53 can occur, so no widening pass (a regex
        # over the bytes cost ten times the parse). Tampered bytes fail check 5.
        orjson.loads(body) if decode and body is not None else None,
        r.salt,
        body,
    )


def prefix_bound(prefix: str) -> str | None:
    """The least string above every string that begins with ``prefix``, in code point order
    (UTF-8's byte order, SQLite's BINARY collation); ``None`` when there is none (a prefix
    of U+10FFFF alone). With it, the strings that begin with ``prefix`` are a range:
    ``prefix <= s < prefix_bound(prefix)``."""
    while prefix:
        last = ord(prefix[-1]) + 1
        if last <= 0x10FFFF:
            if 0xD800 <= last <= 0xDFFF:  # no string holds a surrogate: skip them
                last = 0xE000
            return prefix[:-1] + chr(last)
        prefix = prefix[:-1]
    return None


_SUGGESTIONS = 5

NEIGHBOURS = 100
"""Similar spellings of an unknown run id are looked for among this many ids on each side of
it in sorted order, and no others: difflib over every id of a store took seconds (1.9 s for
300,000 runs) and grew with the store. A store reads just these ids, two ranges of an index,
whatever its size."""


def suggest(run_id: str, candidates: Iterable[str]) -> list[str]:
    """Close matches for an unknown run id, at most five: ids it begins first, in code point
    order, then similar spellings among the :data:`NEIGHBOURS` distinct ids on each side of
    it in that order. Given just those neighbours, the answer is the one every id of the
    store would give, in whatever order the candidates come."""
    asked: object = run_id  # an id from an untyped caller may be an int: no text is near it
    if not isinstance(asked, str):
        return []
    # a tampered row may hold another type than text
    ordered = sorted({c for c in candidates if isinstance(c, str)})
    at = bisect.bisect_left(ordered, run_id)
    # the ids run_id begins are a range from ``at`` on
    prefixed = itertools.takewhile(
        lambda c: c.startswith(run_id), (ordered[i] for i in range(at, len(ordered)))
    )
    near = ordered[max(0, at - NEIGHBOURS) : at + NEIGHBOURS]
    close = difflib.get_close_matches(run_id, near, n=_SUGGESTIONS, cutoff=0.6)
    seen: list[str] = []
    for c in itertools.chain(prefixed, close):
        # stop at five: a short id may prefix every run of the store (the list grew to all
        # of them, each checked against the list so far: minutes for 100,000 runs)
        if c not in seen:
            seen.append(c)
            if len(seen) == _SUGGESTIONS:
                break
    return seen


def not_found(
    run_id: str,
    candidates: Iterable[str],
    where: str,
    *,
    tenant: str | None = None,
    elsewhere: Sequence[str] = (),
    matches: Sequence[str] | None = None,
) -> RunNotFound:
    """A :class:`RunNotFound` that lists close matches among ``candidates`` (the ids of the
    tenant looked in, when there was one), or, when the run was looked up in ``tenant`` but
    exists in the tenants ``elsewhere``, names those. A store confined to one tenant passes
    no ``elsewhere``: it names no other tenant, nor any id of one. ``matches``, when given,
    are the close matches already found (:meth:`Store.close_matches`), and ``candidates``
    are not looked at."""
    if tenant is not None and elsewhere:
        tenants = list(elsewhere)
        return RunNotFound(
            f"no run {run_id!r} in tenant {tenant!r} of {where}; it exists in tenant "
            + ", ".join(repr(t) for t in tenants),
            run_id=run_id,
            tenant=tenant,
            suggestions=[],
            location=where,
            tenants=tenants,
        )
    matches = list(matches) if matches is not None else suggest(run_id, candidates)
    hint = f"; did you mean {', '.join(matches)}?" if matches else ""
    within = f"tenant {tenant!r} of " if tenant is not None else ""
    return RunNotFound(
        f"no run {run_id!r} in {within}{where}{hint}",
        run_id=run_id,
        tenant=tenant,
        suggestions=matches,
        location=where,
    )


def subject_forms(unlink: str | Sequence[str] | None) -> tuple[str, ...]:
    """The subject ids an erasure's ``unlink`` names: one id, or several (never the
    characters of one)."""
    if unlink is None:
        return ()
    if isinstance(unlink, str):
        return (unlink,)
    return tuple(dict.fromkeys(str(u) for u in unlink))

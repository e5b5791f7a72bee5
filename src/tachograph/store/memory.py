"""The reference engine: the whole store contract in memory, in the fewest lines that do it.

It is what the contract means when an engine's own behaviour is in doubt, and a store for
tests and short-lived tools (``memory://``). ``memory://NAME`` names an instance shared by
every store opened with that URL in this process: what one appends, another sees, until the
process ends or :meth:`MemoryStore.discard` drops it. Nothing is ever written to disk.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import orjson

from ..errors import (
    StoreError,
    StoreNotFound,
    StoreUnavailable,
)
from ..record.event import Event, EventType
from ..record.rows import StoredRow
from .audit import AuditEntry, AuditRecord, chain_audit
from .base import (
    CheckpointRow,
    Receipt,
    RunInfo,
    SealRow,
    Store,
    id_taken,
    not_found,
    out_of_sequence,
    receipt,
    run_deleted,
    seq_taken,
    subject_forms,
    suggest,
)

__all__ = ["MemoryStore"]

_SCHEME = "memory://"
# Read per event: a constant, as ``EventType.X.value`` is an enum property (~1 us on 3.11).
_RUN_FINISHED = EventType.RUN_FINISHED.value


@dataclass
class _Runs:
    """What one memory store holds. Rows are immutable and lists only grow, so a reader may
    walk a list while a writer appends to it."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    rows: dict[tuple[str, str], list[StoredRow]] = field(default_factory=dict)
    summaries: dict[tuple[str, str], RunInfo] = field(default_factory=dict)
    by_event_id: dict[str, StoredRow] = field(default_factory=dict)
    count: int = 0
    seals: dict[str, list[SealRow]] = field(default_factory=dict)
    checkpoints: dict[tuple[str, int], CheckpointRow] = field(default_factory=dict)
    audit: list[AuditRecord] = field(default_factory=list)
    subjects: dict[tuple[str, str], set[tuple[str, int]]] = field(default_factory=dict)
    deleted: set[tuple[str, str]] = field(default_factory=set)


_shared: dict[str, _Runs] = {}
_shared_lock = threading.Lock()


class MemoryStore(Store):
    """A store in this process's memory: private (``memory://``) or shared by name."""

    def __init__(self, name: str | None = None, *, create: bool = True) -> None:
        self.name = name or None
        self.url = _SCHEME + (self.name or "")
        if self.name is None:
            if not create:
                raise StoreNotFound(
                    "memory:// is a new, empty store each time it is opened; name one "
                    "(memory://NAME) to open it again",
                    location=self.url,
                )
            self._data: _Runs | None = _Runs()
            return
        with _shared_lock:
            data = _shared.get(self.name)
            if data is None:
                if not create:
                    raise StoreNotFound(
                        f"no memory store named {self.name!r} in this process", location=self.url
                    )
                data = _shared[self.name] = _Runs()
        self._data = data

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> MemoryStore:
        """``memory://`` (private) or ``memory://NAME`` (shared within the process)."""
        if not url.startswith(_SCHEME):
            raise StoreError(f"not a memory store URL: {url!r}", location=url)
        return cls(url[len(_SCHEME) :], create=create)

    @staticmethod
    def discard(name: str) -> None:
        """Forget the shared store ``name`` (stores still open on it keep what they hold)."""
        with _shared_lock:
            _shared.pop(name, None)

    def close(self) -> None:
        """Detach from the data; a private store's data is freed."""
        self._data = None

    @property
    def closed(self) -> bool:
        """Whether the store was closed."""
        return self._data is None

    def _open(self) -> _Runs:
        data = self._data
        if data is None:
            raise StoreUnavailable(f"{self.url} is closed", location=self.url)
        return data

    # -- writing ---------------------------------------------------------------------------

    def append(self, events: Sequence[Event], *, durable: bool = True) -> list[Receipt]:
        """Append a batch atomically (see :meth:`Store.append`): staged, then applied whole."""
        if not events:
            return []
        data = self._open()
        with data.lock:
            pending: dict[tuple[str, str], list[StoredRow]] = {}
            new_ids: dict[str, StoredRow] = {}
            receipts: list[Receipt] = []
            for ev in events:
                key = (ev.tenant, ev.run_id)
                if key in data.deleted:
                    raise run_deleted(ev.tenant, ev.run_id)
                stored = data.rows.get(key, [])
                staged = pending.setdefault(key, [])
                count = len(stored) + len(staged)
                if ev.seq < count:
                    there = stored[ev.seq] if ev.seq < len(stored) else staged[ev.seq - len(stored)]
                    if there.event_id == ev.event_id and there.hash == ev.hash:
                        receipts.append(
                            receipt(ev.event_id, ev.tenant, ev.run_id, ev.seq, ev.hash, True)
                        )
                        continue
                    raise seq_taken(ev, there.hash)
                head = (staged or stored)[-1].hash if count else None
                if ev.seq != count or ev.prev_hash != head:
                    raise out_of_sequence(ev, count, head)
                other = data.by_event_id.get(ev.event_id) or new_ids.get(ev.event_id)
                if other is not None:
                    at = (other.run_id, other.seq)
                    raise id_taken(
                        ev.event_id, ev.run_id, ev.seq, ev.hash, at, other.hash, tenant=ev.tenant
                    )
                body = ev.payload_bytes
                if body is None and ev.payload is not None:
                    body = orjson.dumps(ev.payload)
                row = StoredRow.of(ev, body)
                staged.append(row)
                new_ids[ev.event_id] = row
                receipts.append(receipt(ev.event_id, ev.tenant, ev.run_id, ev.seq, ev.hash))
            # Nothing above raised: apply the whole batch.
            finished = {e.event_id: e for e in events if e.type == _RUN_FINISHED}
            for key, staged in pending.items():
                if staged:
                    self._apply(data, key, staged, finished)
            data.by_event_id.update(new_ids)
            data.count += len(new_ids)
        return receipts

    @staticmethod
    def _apply(
        data: _Runs, key: tuple[str, str], staged: list[StoredRow], finished: dict[str, Event]
    ) -> None:
        rows = data.rows.setdefault(key, [])
        rows.extend(staged)
        before = data.summaries.get(key)
        status = before.status if before is not None else None
        for row in staged:
            event = finished.get(row.event_id)
            if event is not None and isinstance(event.payload, dict):
                found = event.payload.get("status")
                status = found if isinstance(found, str) else None
        first, last = rows[0], rows[-1]
        data.summaries[key] = RunInfo(
            key[0], key[1], first.actor, first.ts, last.ts, len(rows), last.hash, status
        )

    # -- reading ---------------------------------------------------------------------------

    def head(self, run_id: str, *, tenant: str | None = None) -> tuple[int, str] | None:
        """The last ``(seq, hash)`` of a run, from its summary."""
        info = self._open().summaries.get((self.writing_tenant(tenant), run_id))
        return None if info is None else (info.events - 1, info.head_hash)

    def _tenant_of(self, data: _Runs, run_id: str, tenant: str | None) -> str:
        if tenant is not None:
            if (tenant, run_id) not in data.rows:
                elsewhere = sorted(t for t, r in data.rows if r == run_id)
                ids = (r for t, r in data.rows if t == tenant)  # close matches in the tenant
                raise not_found(run_id, ids, self.url, tenant=tenant, elsewhere=elsewhere)
            return tenant
        tenants = sorted(t for t, r in data.rows if r == run_id)
        if not tenants:
            raise not_found(run_id, (r for _, r in data.rows), self.url)
        if len(tenants) > 1:
            raise StoreError(
                f"run id {run_id!r} exists under several tenants; name one with tenant=",
                run_id=run_id,
                several_tenants=True,
            )
        return tenants[0]

    def read_rows(
        self, run_id: str, *, tenant: str | None = None, from_seq: int = 0
    ) -> Iterator[StoredRow]:
        """Stream the rows stored when the read began, in seq order."""
        data = self._open()
        with data.lock:
            key = (self._tenant_of(data, run_id, tenant), run_id)
            rows = data.rows[key]
            end = len(rows)
        # No copy: the list only grows, and rows before ``end`` never change.
        return itertools.islice(rows, max(from_seq, 0), end)

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
        """Runs, newest first (then by run id), filtered."""
        data = self._open()
        with data.lock:
            infos = list(data.summaries.values())
        found = [
            info
            for info in infos
            if (actor is None or info.actor == actor)
            and (tenant is None or info.tenant == tenant)
            and (
                status is None
                or (info.status is None if status == "unfinished" else info.status == status)
            )
            and (since is None or info.started_at >= since)
            and (until is None or info.started_at < until)
            and (prefix is None or info.run_id.startswith(prefix))
        ]
        found.sort(key=lambda info: info.run_id)
        found.sort(key=lambda info: info.started_at, reverse=True)  # stable: run ids stay sorted
        # As SQL's LIMIT: a negative limit is no limit.
        return found if limit is None or limit < 0 else found[:limit]

    def run_info(self, run_id: str, *, tenant: str | None = None) -> RunInfo:
        """The summary of one run."""
        data = self._open()
        with data.lock:
            return data.summaries[(self._tenant_of(data, run_id, tenant), run_id)]

    def close_matches(self, run_id: str, *, tenant: str | None = None) -> list[str]:
        """Close matches (:meth:`Store.close_matches`) among the run ids of ``tenant``."""
        tenant = self.scoped_tenant(tenant, run_id=run_id)
        data = self._open()
        with data.lock:
            ids = [r for t, r in data.rows if tenant in (None, t)]
        return suggest(run_id, ids)

    def run_keys(self) -> list[tuple[str, str]]:
        """Every ``(tenant, run_id)``, in that order."""
        data = self._open()
        with data.lock:
            return sorted(data.rows)

    def count_events(self) -> int:
        """How many events the store holds."""
        return self._open().count

    # -- the seal log ----------------------------------------------------------------------

    def append_seals(self, tenant: str, seals: Sequence[SealRow]) -> int:
        """Append leaves atomically; the first one's index."""
        data = self._open()
        with data.lock:
            log = data.seals.setdefault(tenant, [])
            first = len(log)
            log.extend(
                SealRow(s.run_id, s.seq, bytes(s.leaf), first + i) for i, s in enumerate(seals)
            )
            return first

    def read_seals(self, tenant: str, start: int = 0, end: int | None = None) -> list[SealRow]:
        """Leaves ``start <= index < end`` in index order."""
        data = self._open()
        with data.lock:
            log = data.seals.get(tenant, [])
            return list(log[max(start, 0) : len(log) if end is None else max(end, 0)])

    def seal_tenants(self) -> list[str]:
        """The tenants whose seal log holds a seal (within the store's tenant, if scoped)."""
        data = self._open()
        with data.lock:
            held = [t for t, seals in data.seals.items() if seals]
        return sorted(t for t in held if self.tenant in (None, t))

    def seal_count(self, tenant: str) -> int:
        """How many leaves the tenant's log holds."""
        data = self._open()
        with data.lock:
            return len(data.seals.get(tenant, []))

    def seals_for_run(self, tenant: str, run_id: str) -> list[SealRow]:
        """The leaves sealing one run, in index order."""
        data = self._open()
        with data.lock:
            return [s for s in data.seals.get(tenant, []) if s.run_id == run_id]

    def put_checkpoint(self, checkpoint: CheckpointRow) -> bool:
        """Keep a checkpoint unless one of that size is kept."""
        data = self._open()
        with data.lock:
            key = (checkpoint.tenant, checkpoint.size)
            if key in data.checkpoints:
                return False
            data.checkpoints[key] = checkpoint
            return True

    def latest_checkpoint(self, tenant: str) -> CheckpointRow | None:
        """The largest checkpoint kept for the tenant."""
        data = self._open()
        with data.lock:
            kept = [c for (t, _), c in data.checkpoints.items() if t == tenant]
        return max(kept, key=lambda c: c.size) if kept else None

    # -- data lifecycle ----------------------------------------------------------------------

    def _audit_locked(self, data: _Runs, entry: AuditEntry) -> AuditRecord:
        prev = data.audit[-1].hash if data.audit else None
        record = chain_audit(entry, seq=len(data.audit), prev_hash=prev)
        data.audit.append(record)
        return record

    def append_audit(self, entry: AuditEntry) -> AuditRecord:
        """Append one record to the store audit."""
        data = self._open()
        with data.lock:
            return self._audit_locked(data, entry)

    def read_audit(self, *, from_seq: int = 0) -> Iterator[AuditRecord]:
        """The store audit in seq order."""
        data = self._open()
        with data.lock:
            records = list(data.audit[max(from_seq, 0) :])
        return iter(records)

    def erase(
        self,
        tenant: str,
        run_id: str,
        seqs: Iterable[int],
        *,
        audit: AuditEntry,
        unlink: str | Sequence[str] | None = None,
    ) -> int:
        """Null payload and salt of ``seqs`` (and drop ``unlink``'s links to them) together
        with the audit record."""
        self.scoped_tenant(tenant, run_id=run_id)
        forms = subject_forms(unlink)
        data = self._open()
        with data.lock:
            rows = data.rows.get((tenant, run_id), [])
            wanted = sorted({int(s) for s in seqs})
            hit = [
                s
                for s in wanted
                if 0 <= s < len(rows)
                and (rows[s].payload_bytes is not None or rows[s].salt is not None)
            ]
            picked = {(run_id, s) for s in wanted}
            gone = {f: picked & data.subjects.get((tenant, f), set()) for f in forms}
            unlinked = sum(len(g) for g in gone.values())
            if not hit and not unlinked:
                return 0
            for s in hit:
                erased = rows[s]._replace(payload_bytes=None, salt=None)
                rows[s] = erased
                data.by_event_id[erased.event_id] = erased
            for form, links in gone.items():
                if links:
                    left = data.subjects[(tenant, form)]
                    left -= links
                    if not left:
                        del data.subjects[(tenant, form)]
            detail = {**audit.detail, "run_id": run_id, "seqs": hit}
            if forms:
                detail["unlinked"] = unlinked
            self._audit_locked(data, dataclasses.replace(audit, tenant=tenant, detail=detail))
            return len(hit)

    def delete_run(self, tenant: str, run_id: str, *, audit: AuditEntry) -> int:
        """Delete a run whole, keeping its id taken."""
        self.scoped_tenant(tenant, run_id=run_id)
        data = self._open()
        with data.lock:
            key = (tenant, run_id)
            rows = data.rows.get(key)
            if rows is None and key not in data.summaries:
                return 0
            count = len(rows or [])
            detail = {**audit.detail, "run_id": run_id, "events": count}
            self._audit_locked(data, dataclasses.replace(audit, tenant=tenant, detail=detail))
            for row in rows or []:
                data.by_event_id.pop(row.event_id, None)
            data.rows.pop(key, None)
            data.summaries.pop(key, None)
            data.count -= count
            data.deleted.add(key)
            for (t, _), links in data.subjects.items():
                if t == tenant:
                    links.difference_update({link for link in links if link[0] == run_id})
            return count

    def link_subjects(self, tenant: str, run_id: str, links: Iterable[tuple[int, str]]) -> int:
        """Link events to data-subject ids; linking twice is harmless."""
        self.scoped_tenant(tenant, run_id=run_id)
        data = self._open()
        added = 0
        with data.lock:
            for seq, subject in links:
                bucket = data.subjects.setdefault((tenant, str(subject)), set())
                if (run_id, int(seq)) not in bucket:
                    bucket.add((run_id, int(seq)))
                    added += 1
        return added

    def subject_events(self, tenant: str, subject: str) -> list[tuple[str, int]]:
        """``(run_id, seq)`` linked to ``subject``, by run and seq."""
        self.scoped_tenant(tenant)
        data = self._open()
        with data.lock:
            return sorted(data.subjects.get((tenant, subject), set()))

    def run_subjects(self, tenant: str, run_id: str) -> list[tuple[int, str]]:
        """``(seq, subject)`` of one run's subject links, by seq then subject."""
        self.scoped_tenant(tenant, run_id=run_id)
        data = self._open()
        with data.lock:
            return sorted(
                (seq, subject)
                for (t, subject), linked in data.subjects.items()
                if t == tenant
                for run, seq in linked
                if run == run_id
            )

    def subject_key_ids(self, tenant: str) -> frozenset[str] | None:
        """The key ids of the tokens subjects are linked under in ``tenant``."""
        self.scoped_tenant(tenant)
        data = self._open()
        with data.lock:
            return frozenset(
                s.split(":")[1]
                for (t, s), links in data.subjects.items()
                if t == tenant and links and s.startswith("pii1:") and s.count(":") >= 2
            )

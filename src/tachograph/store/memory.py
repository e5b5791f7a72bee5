"""The reference engine: the whole store contract in memory, in the fewest lines that do it.

It is what the contract means when an engine's own behaviour is in doubt, and a store for
tests and short-lived tools (``memory://``). ``memory://NAME`` names an instance shared by
every store opened with that URL in this process: what one appends, another sees, until the
process ends or :meth:`MemoryStore.discard` drops it. Nothing is ever written to disk.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import orjson

from ..errors import (
    DuplicateConflict,
    SequenceConflict,
    StoreError,
    StoreNotFound,
    StoreUnavailable,
)
from ..record.event import Event
from ..record.rows import StoredRow
from .base import Receipt, RunInfo, Store, not_found

__all__ = ["MemoryStore"]

_SCHEME = "memory://"


@dataclass
class _Runs:
    """What one memory store holds. Rows are immutable and lists only grow, so a reader may
    walk a list while a writer appends to it."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    rows: dict[tuple[str, str], list[StoredRow]] = field(default_factory=dict)
    summaries: dict[tuple[str, str], RunInfo] = field(default_factory=dict)
    by_event_id: dict[str, StoredRow] = field(default_factory=dict)
    count: int = 0


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
                stored = data.rows.get(key, [])
                staged = pending.setdefault(key, [])
                count = len(stored) + len(staged)
                if ev.seq < count:
                    there = stored[ev.seq] if ev.seq < len(stored) else staged[ev.seq - len(stored)]
                    if there.event_id == ev.event_id and there.hash == ev.hash:
                        receipts.append(
                            Receipt(ev.event_id, ev.tenant, ev.run_id, ev.seq, ev.hash, True)
                        )
                        continue
                    raise DuplicateConflict(
                        f"run {ev.run_id!r} already has a different event at seq {ev.seq}",
                        run_id=ev.run_id,
                        seq=ev.seq,
                        expected=there.hash,
                        actual=ev.hash,
                    )
                head = (staged or stored)[-1].hash if count else None
                if ev.seq != count or ev.prev_hash != head:
                    raise SequenceConflict(
                        f"run {ev.run_id!r}: event expected at seq {count} after head "
                        f"{head}, got seq {ev.seq} after {ev.prev_hash}",
                        run_id=ev.run_id,
                        seq=ev.seq,
                        expected={"seq": count, "prev_hash": head},
                        actual={"seq": ev.seq, "prev_hash": ev.prev_hash},
                    )
                other = data.by_event_id.get(ev.event_id) or new_ids.get(ev.event_id)
                if other is not None:
                    raise DuplicateConflict(
                        f"event_id {ev.event_id} is already stored at {other.run_id!r} "
                        f"seq {other.seq}",
                        run_id=ev.run_id,
                        seq=ev.seq,
                        expected=other.hash,
                        actual=ev.hash,
                    )
                body = ev.payload_bytes
                if body is None and ev.payload is not None:
                    body = orjson.dumps(ev.payload)
                row = StoredRow.of(ev, body)
                staged.append(row)
                new_ids[ev.event_id] = row
                receipts.append(Receipt(ev.event_id, ev.tenant, ev.run_id, ev.seq, ev.hash))
            # Nothing above raised: apply the whole batch.
            finished = {e.event_id: e for e in events if e.type == "run.finished"}
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

    def head(self, run_id: str, *, tenant: str = "default") -> tuple[int, str] | None:
        """The last ``(seq, hash)`` of a run, from its summary."""
        info = self._open().summaries.get((tenant, run_id))
        return None if info is None else (info.events - 1, info.head_hash)

    def _tenant_of(self, data: _Runs, run_id: str, tenant: str | None) -> str:
        if tenant is not None:
            if (tenant, run_id) not in data.rows:
                elsewhere = sorted(t for t, r in data.rows if r == run_id)
                raise not_found(
                    run_id, (r for _, r in data.rows), self.url, tenant=tenant, elsewhere=elsewhere
                )
            return tenant
        tenants = sorted(t for t, r in data.rows if r == run_id)
        if not tenants:
            raise not_found(run_id, (r for _, r in data.rows), self.url)
        if len(tenants) > 1:
            raise StoreError(
                f"run id {run_id!r} exists under several tenants; name one with tenant=",
                run_id=run_id,
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

    def run_keys(self) -> list[tuple[str, str]]:
        """Every ``(tenant, run_id)``."""
        data = self._open()
        with data.lock:
            return list(data.rows)

    def count_events(self) -> int:
        """How many events the store holds."""
        return self._open().count

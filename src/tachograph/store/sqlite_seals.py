"""The seal log of :class:`~tachograph.store.sqlite.SQLiteStore` (SPEC section 9): rows only.

Two append-only tables: ``seals`` (one row per Merkle leaf, numbered per tenant) and
``checkpoints`` (the signed notes issued over them). Triggers refuse UPDATE and DELETE, as
they do for events; the Merkle math lives in :mod:`tachograph.record.merkle`.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

from ..errors import StoreUnavailable
from .base import CheckpointRow, SealRow

__all__ = ["SEAL_SCHEMA", "SQLiteSealLog", "insert_seals"]

SEAL_SCHEMA = """
CREATE TABLE IF NOT EXISTS seals (
    tenant TEXT NOT NULL,
    idx INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    leaf BLOB NOT NULL,
    PRIMARY KEY (tenant, idx)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS seals_run ON seals (tenant, run_id, idx);
CREATE TABLE IF NOT EXISTS checkpoints (
    tenant TEXT NOT NULL,
    size INTEGER NOT NULL,
    note TEXT NOT NULL,
    frontier TEXT NOT NULL,
    PRIMARY KEY (tenant, size)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS seals_append_only_update BEFORE UPDATE ON seals
BEGIN SELECT RAISE(ABORT, 'tachograph: seals are append-only'); END;
CREATE TRIGGER IF NOT EXISTS seals_append_only_delete BEFORE DELETE ON seals
BEGIN SELECT RAISE(ABORT, 'tachograph: seals are append-only'); END;
CREATE TRIGGER IF NOT EXISTS checkpoints_append_only_update BEFORE UPDATE ON checkpoints
BEGIN SELECT RAISE(ABORT, 'tachograph: checkpoints are append-only'); END;
CREATE TRIGGER IF NOT EXISTS checkpoints_append_only_delete BEFORE DELETE ON checkpoints
BEGIN SELECT RAISE(ABORT, 'tachograph: checkpoints are append-only'); END;
"""


def _next_index(db: sqlite3.Connection, tenant: str) -> int:
    # Indices have no gaps, so the next one is max + 1: a seek in the primary key, where
    # count(*) would walk every leaf of the tenant.
    row = db.execute("SELECT max(idx) FROM seals WHERE tenant=?", (tenant,)).fetchone()
    return 0 if row[0] is None else int(row[0]) + 1


def insert_seals(db: sqlite3.Connection, tenant: str, seals: Sequence[SealRow]) -> int:
    """Insert leaves after the tenant's last one, inside the caller's transaction."""
    first = _next_index(db, tenant)
    db.executemany(
        "INSERT INTO seals (tenant, idx, run_id, seq, leaf) VALUES (?,?,?,?,?)",
        [(tenant, first + i, s.run_id, s.seq, s.leaf) for i, s in enumerate(seals)],
    )
    return first


class SQLiteSealLog:
    """The seal-log half of the SQLite store (mixed into it)."""

    path: str
    tenant: str | None
    _db: sqlite3.Connection
    _lock: threading.RLock

    def _retry(self, action: Any) -> Any:  # provided by SQLiteStore
        raise NotImplementedError

    def _using(
        self, what: str, run_id: str | None = None
    ) -> contextlib.AbstractContextManager[sqlite3.Connection]:  # provided by SQLiteStore
        raise NotImplementedError

    def _write(self, action: Any) -> Any:
        def run() -> Any:
            with self._lock:
                db = self._db
                db.execute("BEGIN IMMEDIATE")
                try:
                    result = action(db)
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
                return result

        try:
            return self._retry(run)
        except sqlite3.DatabaseError as exc:
            raise StoreUnavailable(
                f"writing the seal log of {self.path} failed: {exc}", location=self.path
            ) from exc

    def append_seals(self, tenant: str, seals: Sequence[SealRow]) -> int:
        """Append leaves atomically; the first one's index (see :meth:`Store.append_seals`)."""
        return int(self._write(lambda db: insert_seals(db, tenant, seals)))

    def _rows(self, sql: str, args: tuple[Any, ...]) -> list[SealRow]:
        with self._lock:
            try:
                rows = self._db.execute(sql, args).fetchall()
            except sqlite3.DatabaseError as exc:
                raise StoreUnavailable(
                    f"reading the seal log of {self.path} failed: {exc}", location=self.path
                ) from exc
        return [SealRow(str(r[0]), int(r[1]), bytes(r[2]), int(r[3])) for r in rows]

    def read_seals(self, tenant: str, start: int = 0, end: int | None = None) -> list[SealRow]:
        """Leaves ``start <= index < end`` in index order."""
        stop = -1 if end is None else end
        return self._rows(
            "SELECT run_id, seq, leaf, idx FROM seals WHERE tenant=? AND idx>=? "
            "AND (? < 0 OR idx<?) ORDER BY idx",
            (tenant, start, stop, stop),
        )

    def seal_tenants(self) -> list[str]:
        """The tenants whose seal log holds a seal (within the store's tenant, if scoped)."""
        with self._using("reading the seal log of") as db:
            rows = db.execute("SELECT DISTINCT tenant FROM seals ORDER BY tenant").fetchall()
        return [str(r[0]) for r in rows if self.tenant in (None, r[0])]

    def seal_count(self, tenant: str) -> int:
        """How many leaves the tenant's log holds."""
        with self._using("reading the seal log of") as db:
            return _next_index(db, tenant)

    def seals_for_run(self, tenant: str, run_id: str) -> list[SealRow]:
        """The leaves sealing one run, in index order."""
        return self._rows(
            "SELECT run_id, seq, leaf, idx FROM seals WHERE tenant=? AND run_id=? ORDER BY idx",
            (tenant, run_id),
        )

    def put_checkpoint(self, checkpoint: CheckpointRow) -> bool:
        """Keep a checkpoint unless one of that size is kept."""

        def action(db: sqlite3.Connection) -> bool:
            cur = db.execute(
                "INSERT OR IGNORE INTO checkpoints (tenant, size, note, frontier) VALUES (?,?,?,?)",
                (checkpoint.tenant, checkpoint.size, checkpoint.note, checkpoint.frontier),
            )
            return cur.rowcount == 1

        return bool(self._write(action))

    def latest_checkpoint(self, tenant: str) -> CheckpointRow | None:
        """The largest checkpoint kept for the tenant."""
        with self._using("reading the checkpoints of") as db:
            row = db.execute(
                "SELECT tenant, size, note, frontier FROM checkpoints WHERE tenant=? "
                "ORDER BY size DESC LIMIT 1",
                (tenant,),
            ).fetchone()
        return None if row is None else CheckpointRow(str(row[0]), int(row[1]), row[2], row[3])

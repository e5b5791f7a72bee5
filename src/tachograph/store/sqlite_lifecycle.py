"""The SQLite engine's data-lifecycle rows: erasure, deletion, the store audit, data subjects.

Kept beside :mod:`.sqlite` (which mixes :class:`SQLiteLifecycle` into its store) so that the
engine's append and read path stays one module. Plaintext removal: the erasing connection
runs with ``PRAGMA secure_delete = ON`` (SQLite then zeroes the bytes it frees, in the page and
in freed overflow pages), and after the commit a ``wal_checkpoint(TRUNCATE)`` copies the new
pages into the database and cuts the ``-wal`` file to zero bytes, where the old page images
(with the plaintext) would otherwise linger until overwritten.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import StoreUnavailable
from .audit import READ_ACTIONS, AuditEntry, AuditRecord, chain_audit
from .base import run_deleted, subject_forms

__all__ = ["DELETED_RUN_REFUSAL", "LIFECYCLE_MIGRATION", "SQLiteLifecycle", "lenient_fetch"]

DELETED_RUN_REFUSAL = "tachograph: this run was deleted by retention"
"""What the trigger ``events_no_append_to_deleted`` of the migration below aborts an insert
with (stores made by it carry this very text; a test holds the two the same)."""

LIFECYCLE_MIGRATION = """
CREATE TABLE store_audit (
    seq INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    ts TEXT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    detail BLOB NOT NULL,
    prev_hash TEXT,
    hash TEXT NOT NULL
);
CREATE TRIGGER store_audit_append_only_update BEFORE UPDATE ON store_audit
BEGIN SELECT RAISE(ABORT, 'tachograph: the store audit is append-only'); END;
CREATE TRIGGER store_audit_append_only_delete BEFORE DELETE ON store_audit
BEGIN SELECT RAISE(ABORT, 'tachograph: the store audit is append-only'); END;
CREATE TABLE subjects (
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (tenant, subject, run_id, seq)
) WITHOUT ROWID;
CREATE INDEX subjects_run ON subjects (tenant, run_id);
CREATE TABLE deleted_runs (
    tenant TEXT NOT NULL,
    run_id TEXT NOT NULL,
    deleted_at TEXT NOT NULL,
    audit_seq INTEGER NOT NULL,
    PRIMARY KEY (tenant, run_id)
) WITHOUT ROWID;
CREATE TRIGGER deleted_runs_final BEFORE DELETE ON deleted_runs
BEGIN SELECT RAISE(ABORT, 'tachograph: a deleted run stays deleted'); END;
CREATE TRIGGER events_no_append_to_deleted BEFORE INSERT ON events
WHEN EXISTS (SELECT 1 FROM deleted_runs d WHERE d.tenant = NEW.tenant AND d.run_id = NEW.run_id)
BEGIN SELECT RAISE(ABORT, 'tachograph: this run was deleted by retention'); END;
DROP TRIGGER events_append_only_delete;
CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
WHEN NOT EXISTS (
    SELECT 1 FROM deleted_runs d WHERE d.tenant = OLD.tenant AND d.run_id = OLD.run_id
)
BEGIN SELECT RAISE(ABORT, 'tachograph: events are append-only'); END;
DROP TRIGGER payloads_no_delete;
CREATE TRIGGER payloads_no_delete BEFORE DELETE ON payloads
WHEN NOT EXISTS (
    SELECT 1 FROM events e JOIN deleted_runs d ON d.tenant = e.tenant AND d.run_id = e.run_id
    WHERE e.id = OLD.id
)
BEGIN SELECT RAISE(ABORT, 'tachograph: payload rows are never deleted; erase instead'); END;
"""
"""Schema step "lifecycle": the store audit, data subjects, and retention's deletions.

Events of a run can be deleted only once the run is listed in ``deleted_runs`` (which only
:meth:`SQLiteLifecycle.delete_run` writes, with its audit record); everything else stays
append-only, as before."""

_CHUNK = 500  # seqs per statement (SQLite's default limit on parameters is far above)
_SCRUB_DEADLINE = 60.0


class SQLiteLifecycle:
    """Erasure, deletion, audit and subject rows for :class:`~tachograph.store.SQLiteStore`."""

    path: str
    _db: sqlite3.Connection
    _lock: threading.RLock
    _read_records: int

    def _retry(self, action: Any) -> Any:  # provided by the store
        raise NotImplementedError

    def _using(
        self, what: str, run_id: str | None = None
    ) -> contextlib.AbstractContextManager[sqlite3.Connection]:  # provided by the store
        raise NotImplementedError

    if TYPE_CHECKING:  # Store's, which follows this mixin in the store's bases

        def scoped_tenant(
            self, tenant: str | None = None, *, run_id: str | None = None
        ) -> str | None: ...

    # -- the store audit -------------------------------------------------------------------

    def _audit_locked(self, db: sqlite3.Connection, entry: AuditEntry) -> AuditRecord:
        head = db.execute("SELECT seq, hash FROM store_audit ORDER BY seq DESC LIMIT 1").fetchone()
        seq, prev = (0, None) if head is None else (head[0] + 1, head[1])
        record = chain_audit(entry, seq=seq, prev_hash=prev)
        db.execute(
            "INSERT INTO store_audit (seq, tenant, ts, actor, action, detail, prev_hash, hash) "
            "VALUES (?,?,?,?,?,?,?,?)",
            (
                record.seq,
                record.tenant,
                record.ts,
                record.actor,
                record.action,
                orjson.dumps(record.detail),
                record.prev_hash,
                record.hash,
            ),
        )
        return record

    def _in_transaction(self, work: Any, *, secure: bool = False) -> Any:
        def action() -> Any:
            with self._lock:
                db = self._db
                if secure:
                    db.execute("PRAGMA secure_delete = ON")
                db.execute("BEGIN IMMEDIATE")
                try:
                    result = work(db)
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
                return result

        try:
            return self._retry(action)
        except sqlite3.DatabaseError as exc:
            raise StoreUnavailable(f"{self.path}: {exc}", location=self.path) from exc

    def append_audit(self, entry: AuditEntry) -> AuditRecord:
        """Append one record to the store audit."""

        def work(db: sqlite3.Connection) -> AuditRecord:
            before = db.total_changes
            record = self._audit_locked(db, entry)
            if entry.action in READ_ACTIONS:
                # the record of a read changes nothing read from the store: not a change
                # (change_token), so that each audited replay does not void what was kept
                self._read_records += db.total_changes - before
            return record

        record: AuditRecord = self._in_transaction(work)
        return record

    def read_audit(self, *, from_seq: int = 0) -> Iterator[AuditRecord]:
        """Stream the store audit in seq order, page by page."""
        return self._audit_pages("", (), from_seq)

    def audit_of(self, action: str, *, tenant: str | None = None) -> Iterator[AuditRecord]:
        """The store audit's records of one action (of one tenant), in seq order, page by
        page: filtered by SQLite, not decoded record by record here."""
        if tenant is None:
            return self._audit_pages("action = ? AND ", (action,), 0)
        return self._audit_pages("action = ? AND tenant = ? AND ", (action, tenant), 0)

    def _audit_pages(self, where: str, args: tuple[str, ...], seq: int) -> Iterator[AuditRecord]:
        """The store audit's records from ``seq`` on that also meet ``where`` (conditions
        ending in ``AND``, with their ``args``), a thousand to a statement."""
        sql = (
            "SELECT seq, ts, tenant, actor, action, detail, prev_hash, hash "
            f"FROM store_audit WHERE {where}seq >= ? ORDER BY seq LIMIT 1000"
        )
        while True:
            with self._using("reading the store audit of") as db:
                rows = lenient_fetch(db, sql, (*args, seq))
            for r in rows:
                yield _audit_record(r)
            if len(rows) < 1000:
                return
            seq = rows[-1][0] + 1

    # -- erasure and deletion --------------------------------------------------------------

    def erase(
        self,
        tenant: str,
        run_id: str,
        seqs: Iterable[int],
        *,
        audit: AuditEntry,
        unlink: str | Sequence[str] | None = None,
    ) -> int:
        """Null payload and salt of ``seqs`` (and drop ``unlink``'s links to them) with the
        audit record, then scrub the files."""
        self.scoped_tenant(tenant, run_id=run_id)  # a store confined to a tenant erases no other's
        wanted = sorted({int(s) for s in seqs})
        forms = subject_forms(unlink)

        def work(db: sqlite3.Connection) -> int:
            targets: list[tuple[int, int]] = []
            for start in range(0, len(wanted), _CHUNK):
                chunk = wanted[start : start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                targets += db.execute(
                    f"SELECT e.id, e.seq FROM events e JOIN payloads p ON p.id = e.id "
                    f"WHERE e.tenant=? AND e.run_id=? AND e.seq IN ({marks}) "
                    "AND (p.body IS NOT NULL OR p.salt IS NOT NULL) ORDER BY e.seq",
                    (tenant, run_id, *chunk),
                ).fetchall()
            before = db.total_changes
            for form in forms:
                for start in range(0, len(wanted), _CHUNK):
                    chunk = wanted[start : start + _CHUNK]
                    marks = ",".join("?" * len(chunk))
                    db.execute(
                        f"DELETE FROM subjects WHERE tenant=? AND subject=? AND run_id=? "
                        f"AND seq IN ({marks})",
                        (tenant, form, run_id, *chunk),
                    )
            unlinked = db.total_changes - before
            if not targets and not unlinked:
                return 0
            ids = [t[0] for t in targets]
            for start in range(0, len(ids), _CHUNK):
                chunk = ids[start : start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                # One statement sets both: the erase-only trigger refuses one without the other.
                db.execute(
                    f"UPDATE payloads SET body = NULL, salt = NULL WHERE id IN ({marks})", chunk
                )
            detail = {**audit.detail, "run_id": run_id, "seqs": [t[1] for t in targets]}
            if forms:
                detail["unlinked"] = unlinked
            self._audit_locked(db, dataclasses.replace(audit, tenant=tenant, detail=detail))
            return len(targets)

        erased: int = self._in_transaction(work, secure=True)
        self.scrub()
        return erased

    def delete_run(self, tenant: str, run_id: str, *, audit: AuditEntry) -> int:
        """Delete a run's events, payloads, summary and subject links; keep a tombstone."""
        self.scoped_tenant(tenant, run_id=run_id)

        def work(db: sqlite3.Connection) -> int:
            count = int(
                db.execute(
                    "SELECT count(*) FROM events WHERE tenant=? AND run_id=?", (tenant, run_id)
                ).fetchone()[0]
            )
            summary = db.execute(
                "SELECT 1 FROM runs WHERE tenant=? AND run_id=?", (tenant, run_id)
            ).fetchone()
            if count == 0 and summary is None:
                return 0
            detail = {**audit.detail, "run_id": run_id, "events": count}
            record = self._audit_locked(
                db, dataclasses.replace(audit, tenant=tenant, detail=detail)
            )
            db.execute(
                "INSERT OR IGNORE INTO deleted_runs VALUES (?,?,?,?)",
                (tenant, run_id, record.ts, record.seq),
            )
            key = (tenant, run_id)
            db.execute(
                "DELETE FROM payloads WHERE id IN "
                "(SELECT id FROM events WHERE tenant=? AND run_id=?)",
                key,
            )
            db.execute("DELETE FROM events WHERE tenant=? AND run_id=?", key)
            db.execute("DELETE FROM runs WHERE tenant=? AND run_id=?", key)
            db.execute("DELETE FROM subjects WHERE tenant=? AND run_id=?", key)
            return count

        deleted: int = self._in_transaction(work, secure=True)
        self.scrub()
        return deleted

    def _refuse_deleted(self, db: sqlite3.Connection, tenant: str, run_id: str) -> None:
        """Called by append for a run it has no summary of: a deleted run stays deleted."""
        gone = db.execute(
            "SELECT deleted_at FROM deleted_runs WHERE tenant=? AND run_id=?", (tenant, run_id)
        ).fetchone()
        if gone is not None:
            raise run_deleted(tenant, run_id, gone[0])

    def scrub(self) -> None:
        """Copy every committed page into the database file and cut the ``-wal`` to zero
        bytes, so that no earlier page image (with erased plaintext) survives in it.

        Waits for readers of older snapshots; raises :class:`StoreUnavailable` if they hold
        on past the deadline (the erasure is committed; running it again finishes the scrub).
        """
        if self.path == ":memory:":
            return
        deadline = time.monotonic() + _SCRUB_DEADLINE
        while True:
            with self._lock:
                try:
                    row = self._retry(
                        lambda: self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                    )
                except sqlite3.Error as exc:
                    # The disk failed (EIO, ENOSPC) while copying pages back: the erasure
                    # itself is committed; the -wal may still hold old page images.
                    raise StoreUnavailable(
                        f"{self.path}: the erasure is committed, but cutting the write-ahead "
                        f"log failed ({exc}): old page images may remain in the -wal file "
                        "(run the erasure again to finish it)",
                        location=self.path,
                        stored=True,
                    ) from exc
            if row is None or row[0] == 0:
                return
            if time.monotonic() > deadline:
                raise StoreUnavailable(
                    f"{self.path}: readers kept the write-ahead log busy; the erasure is "
                    "committed but old page images may remain in the -wal file until the "
                    "next checkpoint (run the erasure again to finish it)",
                    location=self.path,
                )
            time.sleep(0.05)

    # -- data subjects ---------------------------------------------------------------------

    def link_subjects(self, tenant: str, run_id: str, links: Iterable[tuple[int, str]]) -> int:
        """Link events to data-subject ids (``INSERT OR IGNORE``: linking twice is harmless)."""
        self.scoped_tenant(tenant, run_id=run_id)
        rows = [(tenant, str(subject), run_id, int(seq)) for seq, subject in links]
        if not rows:
            return 0

        def work(db: sqlite3.Connection) -> int:
            before = db.total_changes
            db.executemany("INSERT OR IGNORE INTO subjects VALUES (?,?,?,?)", rows)
            return db.total_changes - before

        added: int = self._in_transaction(work)
        return added

    def subject_events(self, tenant: str, subject: str) -> list[tuple[str, int]]:
        """``(run_id, seq)`` linked to ``subject``, by run and seq."""
        self.scoped_tenant(tenant)
        with self._using("reading the data subjects of") as db:
            rows = db.execute(
                "SELECT run_id, seq FROM subjects WHERE tenant=? AND subject=? "
                "ORDER BY run_id, seq",
                (tenant, subject),
            ).fetchall()
        return [(str(r), int(s)) for r, s in rows]

    def run_subjects(self, tenant: str, run_id: str) -> list[tuple[int, str]]:
        """``(seq, subject)`` of one run's subject links, by seq then subject."""
        self.scoped_tenant(tenant, run_id=run_id)
        with self._using("reading the data subjects of") as db:
            rows = db.execute(
                "SELECT seq, subject FROM subjects WHERE tenant=? AND run_id=? "
                "ORDER BY seq, subject",
                (tenant, run_id),
            ).fetchall()
        return [(int(s), str(subject)) for s, subject in rows]

    def subject_key_ids(self, tenant: str) -> frozenset[str] | None:
        """The key ids of the tokens subjects are linked under in ``tenant`` (a range of the
        subjects' primary key: ``pii1:`` up to ``pii1;``)."""
        self.scoped_tenant(tenant)
        with self._using("reading the data subjects of") as db:
            rows = db.execute(
                "SELECT DISTINCT substr(subject, 6, instr(substr(subject, 6), ':') - 1) "
                "FROM subjects WHERE tenant=? AND subject >= 'pii1:' AND subject < 'pii1;'",
                (tenant,),
            ).fetchall()
        return frozenset(str(k) for (k,) in rows if k)


def lenient_fetch(db: sqlite3.Connection, sql: str, args: Sequence[Any] = ()) -> list[Any]:
    """``db.execute(sql, args).fetchall()``; a TEXT value that is not UTF-8 (only a file
    changed behind the store's back has one) is read with lone surrogates standing for its
    bad bytes (``surrogateescape``) instead of failing the whole read."""
    try:
        return db.execute(sql, args).fetchall()
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc).lower():
            raise
    db.text_factory = _lenient_text
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.text_factory = str


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _audit_record(row: Sequence[Any]) -> AuditRecord:
    """One stored audit record. The store writes only records that read back as written; a
    record changed behind its back (a detail that is not a JSON object, text that is not
    UTF-8) is returned with what could be read and ``unreadable`` saying what could not, for
    :func:`~tachograph.store.audit.link_problems` to report."""
    seq, ts, tenant, actor, action, body, prev_hash, stored_hash = row
    problems: list[str] = []
    texts = {"ts": ts, "tenant": tenant, "actor": actor, "action": action, "hash": stored_hash}
    if prev_hash is not None:
        texts["prev_hash"] = prev_hash
    for name, value in texts.items():
        if isinstance(value, str) and not _is_utf8(value):
            problems.append(f"{name} is not valid UTF-8")
    try:
        detail = orjson.loads(body)
    except (orjson.JSONDecodeError, TypeError):
        detail = None
    if not isinstance(detail, dict):
        problems.append(f"detail is not a JSON object: {_as_bytes(body)[:80]!r}")
        detail = {}
    return AuditRecord(
        seq,
        str(ts),
        str(tenant),
        str(actor),
        str(action),
        detail,
        None if prev_hash is None else str(prev_hash),
        str(stored_hash),
        unreadable="; ".join(problems) or None,
    )


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return str(value).encode()

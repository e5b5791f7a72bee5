"""The embedded default store: one SQLite file, WAL, ``synchronous=FULL``, append-only.

Envelope fields live in ``events`` (one column each); payloads and salts live beside them in
``payloads``, keyed by the event's row, so that a payload can later be erased without touching
the hashed envelope. Triggers refuse UPDATE and DELETE of events, and any change to a payload
other than erasing it (setting both body and salt to NULL).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import random
import sqlite3
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import orjson

from ..errors import (
    AppendRefused,
    DuplicateConflict,
    FormatError,
    SchemaVersionError,
    StoreError,
    StoreNotFound,
    StoreUnavailable,
)
from ..record.event import Event, EventType, stored_event
from ..record.rows import StoredRow
from . import forks
from .base import (
    NEIGHBOURS,
    Receipt,
    RunInfo,
    SealRow,
    Store,
    id_taken,
    not_found,
    out_of_sequence,
    prefix_bound,
    receipt,
    run_deleted,
    seq_taken,
    suggest,
)
from .sqlite_lifecycle import (
    DELETED_RUN_REFUSAL,
    LIFECYCLE_MIGRATION,
    SQLiteLifecycle,
    lenient_fetch,
)
from .sqlite_seals import SEAL_SCHEMA, SQLiteSealLog, insert_seals

__all__ = ["SCHEMA_VERSION", "SQLiteStore", "interrupt_waits", "sqlite_file_of"]

SCHEMA_VERSION = 8

_SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    event_id TEXT NOT NULL UNIQUE,
    ts TEXT NOT NULL,
    type TEXT NOT NULL,
    actor TEXT NOT NULL,
    trace_id TEXT,
    span_id TEXT,
    idempotency_key TEXT,
    model TEXT,
    seed INTEGER,
    payload_digest TEXT NOT NULL,
    prev_hash TEXT,
    hash TEXT NOT NULL,
    UNIQUE (tenant, run_id, seq)
);
CREATE TABLE payloads (
    id INTEGER PRIMARY KEY REFERENCES events (id),
    salt TEXT,
    body BLOB
);
CREATE TABLE runs (
    tenant TEXT NOT NULL,
    run_id TEXT NOT NULL,
    actor TEXT NOT NULL,
    started_at TEXT NOT NULL,
    last_at TEXT NOT NULL,
    events INTEGER NOT NULL,
    head_hash TEXT NOT NULL,
    status TEXT,
    PRIMARY KEY (tenant, run_id)
) WITHOUT ROWID;
CREATE INDEX runs_started ON runs (started_at);
CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'tachograph: events are append-only'); END;
CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'tachograph: events are append-only'); END;
CREATE TRIGGER payloads_erase_only BEFORE UPDATE ON payloads
WHEN NEW.id IS NOT OLD.id OR NEW.body IS NOT NULL OR NEW.salt IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'tachograph: a payload can only be erased, never changed'); END;
CREATE TRIGGER payloads_no_delete BEFORE DELETE ON payloads
BEGIN SELECT RAISE(ABORT, 'tachograph: payload rows are never deleted; erase instead'); END;
"""

# Migrations from version N to N+1, in order. Each runs inside one transaction.
MIGRATIONS: dict[int, str] = {
    # 1 -> 2: find a run by id without its tenant, and list runs newest first, by index
    # (both were table scans, which grew with the store).
    1: """
CREATE INDEX runs_run_id ON runs (run_id);
CREATE INDEX runs_started_run ON runs (started_at, run_id);
DROP INDEX runs_started;
""",
    # 2 -> 3: the seal log (SPEC section 9): one append-only Merkle leaf list per tenant, and
    # the signed checkpoints issued over it.
    2: SEAL_SCHEMA,
    # 3 -> 4, step "lifecycle": the store audit, data subjects and retention's deletions
    # (see sqlite_lifecycle.py).
    3: LIFECYCLE_MIGRATION,
    # 4 -> 5: list one tenant's runs newest first by index (a store scoped to a tenant, or
    # runs(tenant=...)): the primary key found the tenant's runs and sorted all of them for
    # each page, 46 ms a page for 270,000 runs against 0.07 ms unscoped.
    4: """
CREATE INDEX runs_tenant_started ON runs (tenant, started_at DESC, run_id);
""",
    # 5 -> 6: list one actor's runs newest first by index (`tacho runs --actor NAME`): SQLite
    # read every run and sorted the actor's, 22 ms for a page of 20 among 200,000 runs and
    # 93 ms for an actor with one run. A run's actor and start never change: one entry a run.
    5: """
CREATE INDEX runs_actor_started ON runs (actor, started_at DESC, run_id);
""",
    # 6 -> 7: the store audit's records of one action in seq order by index (audit_of; what
    # verification asks for a tenant whose sealed runs retention deleted): SQLite read the
    # whole audit, which every audited read lengthens, 52 ms a call for 1,000,000 records.
    6: """
CREATE INDEX store_audit_action ON store_audit (action, seq);
""",
    # 7 -> 8: list the runs of one status newest first by index (`tacho runs --status
    # error`, or `unfinished` for the crashed ones to resume): SQLite read every run and
    # sorted those of the status, 31 ms for a page among 200,000 runs. An append sets the
    # status only when a run.finished changes it: the entry moves once a run.
    7: """
CREATE INDEX runs_status_started ON runs (status, started_at DESC, run_id);
""",
}

_COLUMNS = (
    "e.tenant, e.run_id, e.seq, e.event_id, e.ts, e.type, e.actor, e.trace_id, e.span_id, "
    "e.idempotency_key, e.model, e.seed, e.payload_digest, e.prev_hash, e.hash, p.body, p.salt"
)
_READ_COLUMNS = _COLUMNS.removeprefix("e.tenant, e.run_id, ")
"""What :meth:`SQLiteStore.read` selects: the page's query names the tenant and run, and
every row's two values are equal to them as text (SQLite's binary comparison), so for a
tenant and run id of type ``str`` the driver need not make two new strings a row for them,
nor a held run keep them once an event."""
_PAGE = 2000
# A driver tuple of the _COLUMNS, which are StoredRow's fields in order, as a StoredRow: the
# tuple constructor itself, half the cost of StoredRow._make (whose length check cannot fail).
_as_row: Callable[[tuple[Any, ...]], StoredRow] = functools.partial(tuple.__new__, StoredRow)
_LOCK_DEADLINE = 120.0  # seconds a writer keeps retrying a locked database before giving up
_BUSY_SLICE = 0.1  # seconds SQLite itself waits on a lock before _retry takes over
_ANNOUNCE_AFTER = 1.0  # a wait longer than this says what it waits for
# Read per event: a constant, as ``EventType.X.value`` is an enum property (~1 us on 3.11).
_RUN_FINISHED = EventType.RUN_FINISHED.value

_EVENT_COLUMNS = (
    "id, tenant, run_id, seq, event_id, ts, type, actor, trace_id, span_id, idempotency_key, "
    "model, seed, payload_digest, prev_hash, hash"
)
_PAYLOAD_COLUMNS = "id, salt, body"


@functools.cache
def _insert_sql(table: str, columns: str, rows: int) -> str:
    """``INSERT INTO table (columns) VALUES (?,..),(?,..)...`` for ``rows`` rows."""
    one = "(" + ",".join("?" * (columns.count(",") + 1)) + ")"
    return f"INSERT INTO {table} ({columns}) VALUES " + ",".join([one] * rows)


_flat = itertools.chain.from_iterable
"""The rows of a many-row INSERT as its one list of parameters (twice as fast as a nested
comprehension)."""
_HEAD = "SELECT events, head_hash, actor, started_at, status FROM runs WHERE tenant=? AND run_id=?"
_HEAD_AND_LAST_ID = (
    "SELECT r.events, r.head_hash, r.actor, r.started_at, r.status, "
    "(SELECT max(id) FROM events) FROM (SELECT 1) LEFT JOIN runs r "
    "ON r.tenant=? AND r.run_id=?"
)
"""A run's summary (no row for a new run), and with it the largest event id: the first query
of a batch of more than one event, whose ids count on from there (NULL summary columns for a
new run)."""


def _rows_per_insert(db: sqlite3.Connection) -> int:
    """The rows one INSERT of events carries (16 parameters each): the largest power of two
    up to 512 within the connection's limit on parameters (999 before SQLite 3.32)."""
    getlimit = getattr(db, "getlimit", None)  # Python 3.11+
    if getlimit is not None:
        limit = int(getlimit(getattr(sqlite3, "SQLITE_LIMIT_VARIABLE_NUMBER", 9)))
    else:
        limit = 32766 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999
    # Before SQLite 3.8.8 the rows of a VALUES clause counted against the 500 terms of a
    # compound SELECT.
    rows = 512 if sqlite3.sqlite_version_info >= (3, 8, 8) else 256
    while rows > 1 and rows * 16 > limit:
        rows //= 2
    return rows


def _id_conflict(
    db: sqlite3.Connection, row: tuple[Any, ...], exc: sqlite3.IntegrityError
) -> DuplicateConflict | AppendRefused:
    """The conflict of an event row the table refused: its id stored elsewhere (named), a
    deleted run's (in the words of the check made before the insert), or another trigger's
    refusal (quoted)."""
    other = db.execute(
        "SELECT tenant, run_id, seq, hash FROM events WHERE event_id=?", (row[4],)
    ).fetchone()
    if other is None and str(exc) == DELETED_RUN_REFUSAL:
        # The trigger of sqlite_lifecycle, reached when the run's summary outlived its
        # deletion (append checks deleted_runs itself only for a run with no summary).
        gone = db.execute(
            "SELECT deleted_at FROM deleted_runs WHERE tenant=? AND run_id=?", (row[1], row[2])
        ).fetchone()
        return run_deleted(row[1], row[2], gone[0] if gone else None)
    if other is not None:
        at = (other[1], other[2])
        return id_taken(row[4], row[2], row[3], row[15], at, other[3], tenant=row[1])
    return DuplicateConflict(
        f"event_id {row[4]} is already stored: {exc}",
        run_id=row[2],
        tenant=row[1],
        seq=row[3],
        expected=None,
        actual=row[15],
    )


_INTERRUPTED = threading.Event()


def interrupt_waits() -> None:
    """Make every wait for a lock in this process give up now (the CLI calls this on Ctrl-C,
    so that the writer thread does not keep the process alive waiting out the lock)."""
    _INTERRUPTED.set()


def _announce(message: str) -> None:
    """Tell the person at the terminal why nothing happens (stderr: never mixed with data)."""
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # pragma: no cover - stderr closed
        pass


def _writable(target: Path) -> bool:
    """Whether SQLite can write beside ``target``: the file (if it exists) and its folder,
    which must hold the ``-wal`` and ``-shm`` files."""
    folder = target.parent if str(target.parent) else Path(".")
    if target.exists() and not os.access(target, os.W_OK):
        return False
    return os.access(folder, os.W_OK)


def _statements(script: str) -> list[str]:
    """Split a schema script into single statements (triggers keep their inner ``;``)."""
    statements: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip():
        statements.append(pending.strip())
    return statements


def _driver_message(exc: Exception) -> str:
    """The driver's message. SQLite's own may hold bytes of the file that are not UTF-8 (a
    damaged schema: ``malformed database schema (p\\x8dyloads)``), which Python's driver then
    raises as a :class:`UnicodeDecodeError` of that message instead of its error."""
    if isinstance(exc, UnicodeDecodeError) and isinstance(exc.object, bytes):
        return exc.object.decode("utf-8", "replace") + " (the database file is damaged)"
    return str(exc)


def _parse_url(url: str) -> tuple[str, dict[str, str]]:
    """``sqlite:///rel/path.db``, ``sqlite:////abs/path.db``, ``sqlite:///:memory:``, or a path."""
    query: dict[str, str] = {}
    if "?" in url:
        url, _, qs = url.partition("?")
        for part in qs.split("&"):
            if part:
                key, _, value = part.partition("=")
                query[key] = value
    if url.startswith("sqlite://"):
        path = url[len("sqlite://") :]
        if path.startswith("/"):
            path = path[1:]
        if not path:
            raise StoreError(f"store URL {url!r} names no file", location=url)
        return _absolute_if_meant(path), query
    return url, query


def sqlite_file_of(url: str) -> Path | None:
    """The database file a store URL names when it is a SQLite store, resolved as opening
    it resolves it (``sqlite:///srv/runs.db`` is ``/srv/runs.db`` when there is no ``./srv``;
    a ``?tenant=`` query is not part of the path); ``None`` for another engine or an
    in-memory database."""
    if "://" not in url:
        path = url  # a plain path: opened as it is written
    elif url.split("://", 1)[0].lower() == "sqlite":
        try:
            path, _ = _parse_url(url)
        except StoreError:
            return None
    else:
        return None
    if path == ":memory:" or not path.strip():
        return None
    return Path(path)


def _create_private(target: Path) -> None:
    """Create the database file 0600 (and the folders it needs 0700) before SQLite opens it:
    SQLite gives its ``-wal`` and ``-shm`` files the mode of the database file, so the log,
    which holds what customers told an agent, is readable by its owner only."""
    missing: list[Path] = []
    parent = target.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:  # created meanwhile by another process
            continue
        os.chmod(folder, 0o700)  # mkdir's mode is masked by the umask
    try:
        fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    if hasattr(os, "fchmod"):  # exactly 0600, whatever the umask took away
        os.fchmod(fd, 0o600)
    os.close(fd)


def _decode_body(body: Any, run_id: str, seq: Any) -> Any:
    """A stored payload, decoded. Bytes the store wrote always decode; tampered ones raise a
    :class:`FormatError` naming the run and seq (verification reports them as check 5)."""
    try:
        return orjson.loads(body)
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise FormatError(
            f"run {run_id!r} seq {seq}: the stored payload is not valid JSON ({exc}); "
            "the store was changed behind tachograph's back: run tacho verify",
            run_id=run_id,
            seq=seq,
        ) from None


def _absolute_if_meant(path: str) -> str:
    """``sqlite:///x/y.db`` is ``x/y.db`` relative to the current folder (SQLAlchemy's rule;
    ``sqlite:////x/y.db`` is absolute), unless ``x`` does not exist here but ``/x`` does:
    then the URL was written the way ``file:///x/y.db`` reads, and means the absolute path
    (``sqlite:///srv/runs.db`` is ``/srv/runs.db`` when there is no ``./srv``)."""
    if path.startswith("/") or path == ":memory:":
        return path
    first = Path(path).parts[0]
    if first in (".", "..") or Path(first).exists():
        return path
    return "/" + path if Path("/" + first).exists() else path


_RUN_KEYS = """
WITH RECURSIVE keys(tenant, run_id) AS (
    SELECT tenant, run_id FROM (SELECT tenant, run_id FROM events ORDER BY tenant, run_id LIMIT 1)
    UNION ALL
    SELECT n.tenant, n.run_id FROM keys k JOIN events n ON n.id = coalesce(
        (SELECT e.id FROM events e WHERE e.tenant = k.tenant AND e.run_id > k.run_id
         ORDER BY e.run_id LIMIT 1),
        (SELECT e.id FROM events e WHERE e.tenant > k.tenant ORDER BY e.tenant, e.run_id LIMIT 1))
)
SELECT tenant, run_id FROM runs UNION SELECT tenant, run_id FROM keys ORDER BY tenant, run_id
"""
"""Every ``(tenant, run_id)`` with a summary or with events. The runs with events are found
by skipping through the unique index on ``(tenant, run_id, seq)``, one search a run, from
each run to the next (the next run of its tenant, else the first of the next tenant),
instead of reading every entry of the index: 2 ms for 200 runs of 2,500 events, where
``SELECT DISTINCT`` over the events took 110-180 ms, all of it before ``verify --all``
hands its workers anything."""


_ORPHAN_TENANTS = """
WITH RECURSIVE tenants(t) AS (
    SELECT (SELECT min(tenant) FROM events)
    UNION ALL
    SELECT (SELECT min(tenant) FROM events WHERE tenant > t) FROM tenants WHERE t IS NOT NULL
)
SELECT t FROM tenants
WHERE t IS NOT NULL AND EXISTS (SELECT 1 FROM events WHERE tenant = t AND run_id = ?)
LIMIT 2
"""
"""The tenants (at most two) whose events hold a run id: each tenant of the events in turn
(the next one a seek of the ``(tenant, run_id, seq)`` index), probed for the run id. The
events have no index that leads with the run id, and ``WHERE run_id=?`` read every event of
the store: 50 ms for 150,000 events, for every unknown id."""


class SQLiteStore(SQLiteSealLog, SQLiteLifecycle, Store):
    """A store in one SQLite file.

    ``synchronous="full"`` (the default) makes every committed batch survive power loss;
    ``"normal"`` is faster and may lose the last transactions on power loss (never on a
    process crash): an explicit opt-in, as the URL ``sqlite:///x.db?synchronous=normal``.

    ``tenant`` (the URL's ``?tenant=T``) confines the store to one tenant, as a PostgreSQL
    store's is: what is recorded into it is of that tenant when none is named, reads and
    listings default to it, and an operation naming another tenant raises
    :class:`StoreError`. Unlike PostgreSQL's row-level security this is no access control:
    whoever can read the file can open it without the scope.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        synchronous: str = "full",
        busy_timeout: float = 30.0,
        tenant: str | None = None,
    ) -> None:
        self.path = str(path)
        self.tenant = tenant or None
        self.url = f"sqlite:///{self.path}"
        if self.tenant is not None:
            self.url += "?tenant=" + urllib.parse.quote(self.tenant, safe="")
        sync = synchronous.upper()
        if sync not in ("FULL", "NORMAL", "EXTRA"):
            raise StoreError(
                f"synchronous={synchronous!r}: expected 'full', 'normal' or 'extra'",
                location=self.url,
            )
        self.synchronous = sync.lower()
        memory = self.path == ":memory:"
        if not self.path.strip():
            # SQLite would open a temporary database for "": an unset variable in
            # ``--store "$S"`` must not record into (or read) a store that vanishes
            raise StoreError("the store path is empty: name a file", location=self.url)
        if memory and not create:
            raise StoreNotFound(
                f"{self.url} is a new, empty store each time it is opened; name a file",
                location=self.url,
            )
        if not memory:
            target = Path(self.path)
            if not target.exists():
                if not create:
                    raise StoreNotFound(
                        f"no tachograph store at {target.resolve()} (looked there because of "
                        "--store, TACHOGRAPH_STORE or the default ./.tachograph/tachograph.db)",
                        location=str(target.resolve()),
                    )
                try:
                    _create_private(target)
                except OSError as exc:  # a folder on the way is a file; no permission; ...
                    raise StoreError(
                        f"cannot create a store at {target}: {exc.strerror or exc}",
                        location=str(target),
                    ) from exc
            elif not create and target.is_file() and target.stat().st_size == 0:
                # SQLite would take an empty file for an empty database and write a schema
                # into it: a read must never turn someone's file into a store.
                raise StoreNotFound(
                    f"{target.resolve()} is an empty file, not a tachograph store",
                    location=str(target.resolve()),
                )
        self._lock = threading.RLock()
        # rows this object wrote only to record reads in the store audit (see change_token)
        self._read_records = 0
        self._busy_deadline = max(float(busy_timeout), _LOCK_DEADLINE)
        self.read_only = False
        self._closed = False
        try:
            if not memory and not _writable(Path(self.path)):
                self._open_read_only()
            else:
                self._open_read_write(memory)
        except BaseException as exc:
            if hasattr(self, "_db"):
                self._db.close()
            if isinstance(exc, (sqlite3.DatabaseError, UnicodeDecodeError)):
                raise StoreUnavailable(
                    f"cannot open {self.path}: {_driver_message(exc)}", location=self.path
                ) from exc
            raise
        self._pid = os.getpid()
        forks.track(self)

    def _after_fork(self) -> None:
        """In a forked child (see :mod:`tachograph.store.forks`). The connection came along,
        but SQLite's connections must not cross a fork: the parent's is set aside, and this
        copy of the store refuses to be used, saying so. (Not opened again here: another
        thread of the parent may have been inside SQLite at the fork, holding a mutex that a
        new connection would wait on for good.)"""
        if self._closed or self.path == ":memory:":  # an in-memory copy is the child's own
            return
        self._db = forks.set_aside(
            self._db,
            self.url,
            self._pid,
            "SQLite's connections must not cross a fork",
            "SQLiteStore(path)",
        )

    def _connect(self, target: str, *, uri: bool = False) -> sqlite3.Connection:
        # A short busy timeout inside SQLite, and the waiting done by _retry in Python: a
        # wait inside SQLite's C code cannot be interrupted by Ctrl-C, and says nothing.
        db = sqlite3.connect(
            target, isolation_level=None, check_same_thread=False, timeout=_BUSY_SLICE, uri=uri
        )
        db.execute(f"PRAGMA busy_timeout = {int(_BUSY_SLICE * 1000)}")
        self._rows_per_insert = _rows_per_insert(db)
        # which connection: its counts below start again (see change_token)
        self._connections = getattr(self, "_connections", 0) + 1
        return db

    def detached(self) -> str | None:
        """Why the store file this store writes to is no longer at its path (removed, or
        another file put there), or None. SQLite goes on writing to a removed file's inode:
        everything appended after, and the WAL it was folded from, is lost with it."""
        identity = getattr(self, "_identity", None)
        if identity is None:
            return None
        where, device, inode = identity  # made absolute at open: a chdir moves it not
        try:
            stat = os.stat(where)
        except FileNotFoundError:
            return f"the store file {where} was removed while it was open"
        except OSError:
            return None
        if (stat.st_dev, stat.st_ino) != (device, inode):
            return f"the store file {where} was replaced by another while it was open"
        return None

    def _open_read_write(self, memory: bool) -> None:
        self._db = self._connect(self.path)
        if not memory:
            with contextlib.suppress(OSError):
                # the file SQLite opened: it follows a symbolic link (and puts the WAL beside
                # the link's target), so a link pointed elsewhere leaves this file in place
                where = os.path.realpath(self.path)
                stat = os.stat(where)
                self._identity = (where, stat.st_dev, stat.st_ino)
        try:
            if not memory:
                mode = self._retry(lambda: self._db.execute("PRAGMA journal_mode").fetchone())
                if str(mode[0]).lower() != "wal":
                    self._retry(lambda: self._db.execute("PRAGMA journal_mode = WAL"))
            self._db.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            self._retry(self._migrate)
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if memory or ("readonly" not in text and "read-only" not in text):
                raise
            # The file or its folder cannot be written after all (a read-only mount that
            # access() did not reveal): read it without writing anything.
            self._db.close()
            self._open_read_only()

    def _open_read_only(self) -> None:
        """Open for reading only: every read command works on a store in a read-only file or
        folder. A WAL store needs its shared-memory file; where that cannot be created, the
        file is read as immutable (nobody can be writing to a read-only medium)."""
        self.read_only = True
        absolute = Path(self.path).resolve().as_posix()
        base = "file:" + urllib.parse.quote(absolute)
        try:
            self._db = self._connect(base + "?mode=ro", uri=True)
            self._check_version()
        except sqlite3.OperationalError:
            if hasattr(self, "_db"):
                self._db.close()
            self._db = self._connect(base + "?mode=ro&immutable=1", uri=True)
            self._check_version()

    def _check_version(self) -> int:
        db = self._db
        has_meta = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"
        ).fetchone()
        version = 0
        if has_meta:
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.path} has schema version {version}; this tachograph reads up to "
                f"{SCHEMA_VERSION}: upgrade tachograph",
                location=self.path,
                expected=SCHEMA_VERSION,
                actual=version,
            )
        if self.read_only and version == 0:
            raise StoreUnavailable(
                f"{self.path} is read-only and holds no tachograph store", location=self.path
            )
        return version

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> SQLiteStore:
        """Open the store a ``sqlite:`` URL names."""
        path, query = _parse_url(url)
        return cls(
            path,
            create=create,
            synchronous=query.get("synchronous", "full"),
            tenant=urllib.parse.unquote(query.get("tenant", "")) or None,
        )

    # -- plumbing --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _using(self, what: str, run_id: str | None = None) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock, with the driver's errors translated at the door."""
        with self._lock:
            if self._closed:
                raise StoreUnavailable(f"{self.url} is closed", location=self.path, run_id=run_id)
            try:
                yield self._db
            except (sqlite3.Error, UnicodeDecodeError) as exc:
                raise StoreUnavailable(
                    f"{what} {self.path} failed: {_driver_message(exc)}",
                    location=self.path,
                    run_id=run_id,
                ) from exc

    def _retry(self, action: Any) -> Any:
        """Run ``action`` and retry while the database is locked by another process.

        Waits in Python, in short sleeps, so that Ctrl-C stops it; a wait longer than
        :data:`_ANNOUNCE_AFTER` seconds says once, on stderr, what it waits for.
        """
        start = time.monotonic()
        deadline = start + self._busy_deadline
        delay = 0.001
        announced = False
        while True:
            try:
                return action()
            except sqlite3.OperationalError as exc:
                text = str(exc).lower()
                if "locked" not in text and "busy" not in text:
                    raise
                now = time.monotonic()
                if _INTERRUPTED.is_set():
                    raise StoreUnavailable(
                        f"interrupted while waiting for the write lock on {self.path}",
                        location=self.path,
                    ) from exc
                if now > deadline:
                    raise StoreUnavailable(
                        f"{self.path} stayed locked for {self._busy_deadline:.0f}s: {exc}",
                        location=self.path,
                    ) from exc
                if not announced and now - start > _ANNOUNCE_AFTER:
                    announced = True
                    _announce(
                        f"tachograph: waiting for the write lock on {self.path}: another "
                        f"process is writing to it (giving up after "
                        f"{self._busy_deadline:.0f}s; Ctrl-C to stop)"
                    )
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.05)

    def _migrate(self) -> None:
        with self._lock:
            db = self._db
            # Read the version first: an up-to-date store is opened without taking the write
            # lock, so readers never queue behind a writer (WAL readers do not block).
            if self._check_version() == SCHEMA_VERSION:
                return
            db.execute("BEGIN IMMEDIATE")
            try:
                has_meta = db.execute(
                    "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"
                ).fetchone()
                version = 0
                if has_meta:
                    row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                    version = int(row[0]) if row else 0
                if version > SCHEMA_VERSION:
                    raise SchemaVersionError(
                        f"{self.path} has schema version {version}; this tachograph reads up to "
                        f"{SCHEMA_VERSION}: upgrade tachograph",
                        location=self.path,
                        expected=SCHEMA_VERSION,
                        actual=version,
                    )
                # Statement by statement inside this transaction, never executescript (which
                # commits first): the schema appears whole or not at all, even when several
                # processes open a new store at once or one is killed while creating it.
                if version == 0:
                    for statement in _statements(_SCHEMA_V1):
                        db.execute(statement)
                    db.execute(
                        "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?), "
                        "('format_version', '1')",
                        ("1",),
                    )
                    version = 1  # a new store is built as version 1, then migrated like any
                while version < SCHEMA_VERSION:
                    for statement in _statements(MIGRATIONS[version]):
                        db.execute(statement)
                    version += 1
                    db.execute(
                        "UPDATE meta SET value=? WHERE key='schema_version'", (str(version),)
                    )
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    def change_token(self) -> tuple[int, int, int]:
        """The connection, SQLite's ``data_version`` (which changes when another connection,
        in this process or another, commits to the file) and the rows this connection has
        changed (``total_changes``, which counts its own writes, even those rolled back),
        less the store-audit records of its reads: the same three only if the database is as
        it was, but for the record of the reads made since."""
        with self._using("reading") as db:
            (version,) = db.execute("PRAGMA data_version").fetchone()
            return (self._connections, int(version), db.total_changes - self._read_records)

    def _refuse_read_only(self) -> None:
        if self.read_only:
            raise StoreUnavailable(
                f"{self.path} is read-only (the file or its folder cannot be written): "
                "nothing was written",
                location=self.path,
            )

    current_schema_version: ClassVar[int] = SCHEMA_VERSION
    """The schema version this tachograph writes (an older file is upgraded on open)."""
    upgrade_advice: ClassVar[str] = (
        "Open it once with write access (any recording command) to upgrade it."
    )

    @property
    def schema_version(self) -> int:
        """The schema version recorded in the database."""
        with self._using("reading the schema version of") as db:
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        return int(row[0])

    def close(self) -> None:
        """Close the connection (closing again is harmless)."""
        with self._lock:
            self._closed = True
            self._db.close()

    @property
    def closed(self) -> bool:
        """Whether the connection was closed."""
        return self._closed

    # -- writing ---------------------------------------------------------------------------

    def append(
        self,
        events: Sequence[Event],
        *,
        durable: bool = True,
        seals: Mapping[str, Sequence[SealRow]] | None = None,
    ) -> list[Receipt]:
        """Append a batch atomically (see :meth:`Store.append`), with ``seals`` (per tenant)
        in the same transaction."""
        if not events:
            return []
        if self._closed:
            raise StoreUnavailable(f"{self.url} is closed", location=self.path)
        self._refuse_read_only()
        try:
            return list(self._retry(lambda: self._append(events, seals)))
        except sqlite3.DatabaseError as exc:
            stored = self._reconcile(events[-1])
            if stored is None:
                outcome = "whether the batch was stored is unknown: run tacho verify"
            elif stored:
                outcome = (
                    "the batch IS in the store, but the disk reported an error while making "
                    "it durable: it may not survive a power loss"
                )
            else:
                outcome = "nothing of the batch was stored"
            raise StoreUnavailable(
                f"append to {self.path} failed: {exc}; {outcome}",
                location=self.path,
                stored=stored,
            ) from exc

    def _reconcile(self, last: Event) -> bool | None:
        """After a failed commit, whether the batch is in the store after all.

        An fsync that fails after SQLite wrote the WAL frames leaves a transaction that WAL
        recovery brings back on the next open: so the answer comes from a fresh connection
        (which runs that recovery when it is the only one), not from the failed one.
        """
        if self.path == ":memory:":
            return False
        with self._lock:
            try:
                self._db.close()
            except sqlite3.Error:  # pragma: no cover - closing a broken connection
                pass
            try:
                self._db = self._connect(self.path)
                self._db.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
                row = self._db.execute(
                    "SELECT 1 FROM events WHERE event_id=?", (last.event_id,)
                ).fetchone()
            except sqlite3.Error:
                return None
        return row is not None

    seals_with_events = True

    def append_sealed(
        self, events: Sequence[Event], seals: Mapping[str, Sequence[SealRow]]
    ) -> list[Receipt]:
        """Append a batch and its seals in one transaction (see :meth:`Store.append_sealed`)."""
        return self.append(events, seals=seals)

    def _append(
        self, events: Sequence[Event], seals: Mapping[str, Sequence[SealRow]] | None = None
    ) -> list[Receipt]:
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                receipts = self._append_locked(db, events)
                for tenant, rows in (seals or {}).items():
                    insert_seals(db, tenant, rows)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            return receipts

    def append_all(
        self,
        batches: Iterable[Sequence[Event]],
        *,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[int, int]:
        """Append every batch inside one transaction (see :meth:`Store.append_all`).

        A conflict, an I/O error (a full disk) or a kill anywhere before COMMIT leaves the
        store as it was: SQLite rolls the transaction back, or recovery drops it on reopen.
        """
        if self._closed:
            raise StoreUnavailable(f"{self.url} is closed", location=self.path)
        try:
            result: tuple[int, int] = self._retry(lambda: self._append_all(batches, progress))
        except sqlite3.DatabaseError as exc:
            raise StoreUnavailable(
                f"import into {self.path} failed, nothing stored: {exc}", location=self.path
            ) from exc
        return result

    def _append_all(
        self, batches: Iterable[Sequence[Event]], progress: Callable[[int], None] | None
    ) -> tuple[int, int]:
        written = duplicates = 0
        self._refuse_read_only()
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                for batch in batches:
                    for receipt in self._append_locked(db, batch):
                        if receipt.duplicate:
                            duplicates += 1
                        else:
                            written += 1
                    if progress is not None:
                        progress(len(batch))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return written, duplicates

    def _append_locked(self, db: sqlite3.Connection, events: Sequence[Event]) -> list[Receipt]:
        heads: dict[tuple[str, str], list[Any]] = {}
        finished: set[tuple[str, str]] = set()  # the runs whose status this batch changes
        receipts: list[Receipt] = []
        # The rows go in many to a statement (see _insert_rows), their ids given, counting on
        # from the largest in the table as SQLite would: this transaction holds the write
        # lock, so no other writer takes them. A batch of one (an intent) lets SQLite pick.
        pending: list[tuple[Any, ...]] = []
        bodies: list[tuple[Any, ...]] = []
        next_id: int | None = None  # read with the first run's summary, in a batch of several
        try:
            for ev in events:
                key = (ev.tenant, ev.run_id)
                state = heads.get(key)
                if state is None:
                    if self.tenant is not None:
                        self.scoped_tenant(ev.tenant, run_id=ev.run_id)  # the whole batch refused
                    if next_id is None and len(events) > 1:
                        # the batch's first run: the largest id comes with its summary
                        row = db.execute(_HEAD_AND_LAST_ID, key).fetchone()
                        next_id = (row[5] or 0) + 1
                        if row[0] is None:
                            row = None
                    else:
                        row = db.execute(_HEAD, key).fetchone()
                    if row is None:
                        self._refuse_deleted(db, ev.tenant, ev.run_id)
                        state = [0, None, ev.actor, ev.ts, None, False]
                    else:
                        state = [row[0], row[1], row[2], row[3], row[4], True]
                    heads[key] = state
                count, head_hash = state[0], state[1]
                if ev.seq < count:
                    if pending:  # the stored event may be one of this batch's, not yet inserted
                        self._insert_rows(db, pending, bodies)
                    stored = db.execute(
                        "SELECT event_id, hash FROM events WHERE tenant=? AND run_id=? AND seq=?",
                        (ev.tenant, ev.run_id, ev.seq),
                    ).fetchone()
                    if stored is not None and stored[0] == ev.event_id and stored[1] == ev.hash:
                        receipts.append(
                            receipt(ev.event_id, ev.tenant, ev.run_id, ev.seq, ev.hash, True)
                        )
                        continue
                    raise seq_taken(ev, stored[1] if stored else None)
                if ev.seq != count or ev.prev_hash != head_hash:
                    raise out_of_sequence(ev, count, head_hash)
                pending.append(
                    (
                        next_id,
                        ev.tenant,
                        ev.run_id,
                        ev.seq,
                        ev.event_id,
                        ev.ts,
                        ev.type,
                        ev.actor,
                        ev.trace_id,
                        ev.span_id,
                        ev.idempotency_key,
                        ev.model,
                        ev.seed,
                        ev.payload_digest,
                        ev.prev_hash,
                        ev.hash,
                    )
                )
                body = ev.payload_bytes
                if body is None and ev.payload is not None:
                    body = orjson.dumps(ev.payload)
                bodies.append((next_id, ev.salt, body))
                if next_id is not None:
                    next_id += 1
                state[0] = count + 1
                state[1] = ev.hash
                if ev.type == _RUN_FINISHED and isinstance(ev.payload, dict):
                    status = ev.payload.get("status")
                    status = status if isinstance(status, str) else None
                    if status != state[4]:
                        state[4] = status
                        finished.add(key)
                state.append(ev.ts)  # last_at, read below
                receipts.append(receipt(ev.event_id, ev.tenant, ev.run_id, ev.seq, ev.hash))
        except Exception:
            # A refusal found in Python (a gap, a wrong head, a deleted run, another tenant)
            # comes after any the table has for the rows before it, as row by row.
            if pending:
                self._insert_rows(db, pending, bodies)
            raise
        if pending:
            self._insert_rows(db, pending, bodies)
        for (tenant, run_id), state in heads.items():
            last_at = state[-1] if len(state) > 6 else None
            if last_at is None:
                continue  # only duplicates in this batch
            if state[5] and (tenant, run_id) in finished:
                db.execute(
                    "UPDATE runs SET events=?, head_hash=?, last_at=?, status=? "
                    "WHERE tenant=? AND run_id=?",
                    (state[0], state[1], last_at, state[4], tenant, run_id),
                )
            elif state[5]:
                # status left out: its index (schema 8) is then not touched by the append
                db.execute(
                    "UPDATE runs SET events=?, head_hash=?, last_at=? WHERE tenant=? AND run_id=?",
                    (state[0], state[1], last_at, tenant, run_id),
                )
            else:
                db.execute(
                    "INSERT INTO runs (tenant, run_id, actor, started_at, last_at, events, "
                    "head_hash, status) VALUES (?,?,?,?,?,?,?,?)",
                    (tenant, run_id, state[2], state[3], last_at, state[0], state[1], state[4]),
                )
        return receipts

    def _insert_rows(
        self, db: sqlite3.Connection, rows: list[tuple[Any, ...]], bodies: list[tuple[Any, ...]]
    ) -> None:
        """Insert the event rows and their payload rows (each led by its id), then empty both
        lists, inserted or refused: a refusal ends the append (its transaction is rolled
        back), and the caller's insert of what is pending on its way out must not insert the
        same rows again and report their clash with themselves instead of the refusal.

        Many rows to a statement: Python's sqlite3 lets go of the GIL for every statement it
        steps and must take it back after, which costs up to the interpreter's switch interval
        (5 ms) whenever another thread is busy in Python: one statement per row let an agent
        busy in Python slow this thread a hundredfold (measured).
        """
        try:
            self._insert_rows_now(db, rows, bodies)
        finally:
            rows.clear()
            bodies.clear()

    def _insert_rows_now(
        self, db: sqlite3.Connection, rows: list[tuple[Any, ...]], bodies: list[tuple[Any, ...]]
    ) -> None:
        if rows[0][0] is None:  # one row, its id picked by SQLite
            try:
                cur = db.execute(_insert_sql("events", _EVENT_COLUMNS, 1), rows[0])
            except sqlite3.IntegrityError as exc:
                raise _id_conflict(db, rows[0], exc) from exc
            db.execute(
                _insert_sql("payloads", _PAYLOAD_COLUMNS, 1), (cur.lastrowid, *bodies[0][1:])
            )
            return
        step = self._rows_per_insert
        done = 0
        while done < len(rows):
            size = step
            while size > len(rows) - done:
                size //= 2
            part = rows[done : done + size]
            try:
                db.execute(_insert_sql("events", _EVENT_COLUMNS, size), list(_flat(part)))
            except sqlite3.OperationalError as exc:
                # A SQLite built with a lower limit than its version suggests (Python 3.10
                # cannot ask): refused before any row went in; take half as many.
                if size == 1 or "too many SQL variables" not in str(exc):
                    raise
                self._rows_per_insert = step = size // 2
                continue
            except sqlite3.IntegrityError:
                # The statement is undone as a whole; row by row names the one refused.
                for row in part:
                    try:
                        db.execute(_insert_sql("events", _EVENT_COLUMNS, 1), row)
                    except sqlite3.IntegrityError as exc:
                        raise _id_conflict(db, row, exc) from exc
                raise
            db.execute(
                _insert_sql("payloads", _PAYLOAD_COLUMNS, size),
                list(_flat(bodies[done : done + size])),
            )
            done += size

    # -- reading ---------------------------------------------------------------------------

    def head(self, run_id: str, *, tenant: str | None = None) -> tuple[int, str] | None:
        """The last ``(seq, hash)`` of a run (in the store's tenant, else ``default``, unless
        ``tenant`` is named).

        Read from the run summary, which every append updates in the same transaction as the
        events (and which appends already rely on): one small table, so the answer costs the
        same in a store of a million events as in one of ten thousand. ``verify`` is what
        checks the events themselves.
        """
        tenant = self.writing_tenant(tenant, run_id=run_id)
        with self._using("reading") as db:
            row = db.execute(
                "SELECT events - 1, head_hash FROM runs WHERE tenant=? AND run_id=?",
                (tenant, run_id),
            ).fetchone()
        return (row[0], row[1]) if row else None

    def _resolve_tenant(self, run_id: str, tenant: str | None) -> str:
        tenant = self.scoped_tenant(tenant, run_id=run_id)  # the store's own by default
        if tenant is not None:
            return tenant
        with self._using("reading", run_id) as db:
            rows = db.execute(
                "SELECT tenant FROM runs WHERE run_id=? LIMIT 2", (run_id,)
            ).fetchall()
        if not rows:
            # an orphan run (events without a summary row) still resolves
            with self._using("reading", run_id) as db:
                rows = db.execute(_ORPHAN_TENANTS, (run_id,)).fetchall()
        if not rows:
            raise self._not_found(run_id)
        if len(rows) > 1:
            raise StoreError(
                f"run id {run_id!r} exists under several tenants; name one with tenant=",
                run_id=run_id,
                several_tenants=True,
            )
        return str(rows[0][0])

    def _not_found(self, run_id: str, tenant: str | None = None) -> Exception:
        # Close matches of the tenant asked or the store's own; other tenants are named only
        # by a store confined to none.
        matches = self.close_matches(run_id, tenant=tenant)
        elsewhere: list[str] = []
        if self.tenant is None and tenant is not None:
            with self._using("reading", run_id) as db:
                rows = db.execute("SELECT tenant FROM runs WHERE run_id=?", (run_id,))
                elsewhere = [str(r[0]) for r in rows]
        return not_found(run_id, (), self.path, tenant=tenant, elsewhere=elsewhere, matches=matches)

    def close_matches(self, run_id: str, *, tenant: str | None = None) -> list[str]:
        """Close matches (:meth:`Store.close_matches`) from the ids next to ``run_id`` in the
        run id index (the primary key within a tenant): two ranges of it, whatever the size
        of the store."""
        within = self.scoped_tenant(tenant, run_id=run_id)
        asked: object = run_id
        if not isinstance(asked, str):  # another type has no neighbours among text ids
            return []
        where, args = ("tenant=? AND ", [within]) if within is not None else ("", [])
        near = "SELECT DISTINCT run_id FROM runs WHERE {}run_id {} ? ORDER BY run_id {} LIMIT ?"
        with self._using("reading", run_id) as db:
            below = db.execute(near.format(where, "<", "DESC"), (*args, run_id, NEIGHBOURS))
            ids = [r[0] for r in below][::-1]
            above = db.execute(near.format(where, ">=", "ASC"), (*args, run_id, NEIGHBOURS))
            ids += [r[0] for r in above]
        return suggest(run_id, ids)

    def read(
        self,
        run_id: str,
        *,
        tenant: str | None = None,
        from_seq: int = 0,
        decode: bool = True,
    ) -> Iterator[Event]:
        """Stream events in pages (keyset pagination: constant memory, no long-lived cursor)."""
        # From the driver's tuples, not through StoredRow: replay reads every event this way.
        loads = orjson.loads
        tenant = self._resolve_tenant(run_id, tenant)
        if type(run_id) is not str or type(tenant) is not str:
            # A str subclass or another type the query still matches (an int run id, by the
            # column's text affinity): each event takes the tenant and run id as stored.
            yield from super().read(run_id, tenant=tenant, from_seq=from_seq, decode=decode)
            return
        last_hash = None
        for page in self._pages(run_id, tenant, from_seq, _READ_COLUMNS, 0):
            for r in page:
                (seq, event_id, ts, kind, actor, trace_id, span_id, key, model, seed, digest,
                 prev_hash, stored_hash, body, salt) = r  # fmt: skip
                if prev_hash == last_hash:  # the link: one string for two events
                    prev_hash = last_hash
                last_hash = stored_hash
                try:
                    # Stored bodies are orjson's output for a payload checked against the
                    # profile at write time: no integer literal beyond 2^53 can occur, so no
                    # widening pass (a regex over the bytes cost ten times the parse).
                    payload = loads(body) if decode and body is not None else None
                except (orjson.JSONDecodeError, TypeError):
                    # Tampered bytes: a typed error naming the run and seq (check 5 in verify).
                    payload = _decode_body(body, run_id, seq)
                yield stored_event(
                    1, tenant, run_id, seq, event_id, ts, kind, actor, trace_id, span_id, key,
                    model, seed, digest, prev_hash, stored_hash, payload, salt, body,
                )  # fmt: skip

    def read_rows(
        self, run_id: str, *, tenant: str | None = None, from_seq: int = 0
    ) -> Iterator[StoredRow]:
        """Stream a run's rows as stored (see :meth:`Store.read_rows`), a page at a time."""
        where = self._resolve_tenant(run_id, tenant)
        for page in self._pages(run_id, where, from_seq, _COLUMNS, 2):
            yield from map(_as_row, page)

    def rows_containing(
        self, run_id: str, needles: Sequence[bytes], *, tenant: str | None = None
    ) -> Iterator[StoredRow]:
        """:meth:`Store.rows_containing`, filtered by SQLite (``instr`` over each stored BLOB):
        the rows holding none of ``needles`` never reach Python."""
        if not needles:  # no filter to give SQLite: nothing matches, a missing run raises
            yield from super().rows_containing(run_id, needles, tenant=tenant)
            return
        where = self._resolve_tenant(run_id, tenant)
        for page in self._pages(run_id, where, 0, _COLUMNS, 2, tuple(needles)):
            yield from map(_as_row, page)

    def _pages(
        self,
        run_id: str,
        tenant: str,
        from_seq: int,
        columns: str,
        seq_at: int,
        needles: tuple[bytes, ...] = (),
    ) -> Iterator[list[Any]]:
        # Pages of the driver's tuples of ``columns`` (_COLUMNS: StoredRow's fields in
        # order), ``seq`` the one at ``seq_at``, for a tenant already resolved; with
        # ``needles``, only the rows whose payload is a BLOB holding one of them.
        seq = from_seq
        first = True
        while True:
            rows = self._page(tenant, run_id, seq, columns, needles)
            if first and not rows and not self._exists(tenant, run_id):
                # With an explicit tenant nothing was resolved: a missing run must not read
                # (and verify) as an empty one.
                raise self._not_found(run_id, tenant)
            first = False
            yield rows
            if len(rows) < _PAGE:
                return
            seq = rows[-1][seq_at] + 1

    def _exists(self, tenant: str, run_id: str) -> bool:
        with self._using("reading", run_id) as db:
            row = db.execute(
                "SELECT 1 FROM runs WHERE tenant=? AND run_id=? "
                "UNION ALL SELECT 1 FROM events WHERE tenant=? AND run_id=? LIMIT 1",
                (tenant, run_id, tenant, run_id),
            ).fetchone()
        return row is not None

    def _page(
        self, tenant: str, run_id: str, seq: int, columns: str, needles: tuple[bytes, ...] = ()
    ) -> list[Any]:
        match = ""
        if needles:
            any_of = " OR ".join(["instr(p.body, ?) > 0"] * len(needles))
            match = f"AND typeof(p.body)='blob' AND ({any_of}) "
        sql = (
            f"SELECT {columns} FROM events e JOIN payloads p ON p.id = e.id "
            f"WHERE e.tenant=? AND e.run_id=? AND e.seq>=? {match}ORDER BY e.seq LIMIT ?"
        )
        args = (tenant, run_id, seq, *needles, _PAGE)
        with self._using(f"reading run {run_id!r} from", run_id) as db:
            # A TEXT value that is not UTF-8 is read with lone surrogates standing for the
            # bad bytes, so that verification reports the row instead of failing to read it.
            return lenient_fetch(db, sql, args)

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
        """Runs, newest first, filtered (to the store's tenant when it has one)."""
        tenant = self.scoped_tenant(tenant)
        where: list[str] = []
        args: list[Any] = []
        for column, value in (("actor", actor), ("tenant", tenant)):
            if value is not None:
                where.append(f"{column}=?")
                args.append(value)
        if status == "unfinished":
            where.append("status IS NULL")
        elif status is not None:
            where.append("status=?")
            args.append(status)
        if since is not None:
            where.append("started_at>=?")
            args.append(since)
        if until is not None:
            where.append("started_at<?")
            args.append(until)
        if prefix:
            # exactly a range of the run id index: TEXT compares as UTF-8 bytes, in code point
            # order (and a number sorts below any text, a BLOB above)
            where.append("run_id>=?")
            args.append(prefix)
            above = prefix_bound(prefix)
            if above is not None:
                where.append("run_id<?")
                args.append(above)
        sql = (
            "SELECT tenant, run_id, actor, started_at, last_at, events, head_hash, status FROM runs"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started_at DESC, run_id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._using("listing runs of") as db:
            # a summary changed behind the store's back (text that is not UTF-8) is listed
            # with lone surrogates for its bad bytes, not the end of the listing
            rows = lenient_fetch(db, sql, args)
        return [RunInfo(*row) for row in rows]

    def run_info(self, run_id: str, *, tenant: str | None = None) -> RunInfo:
        """The summary of one run."""
        tenant = self._resolve_tenant(run_id, tenant)
        with self._using("reading", run_id) as db:
            rows = lenient_fetch(
                db,
                "SELECT tenant, run_id, actor, started_at, last_at, events, head_hash, status "
                "FROM runs WHERE tenant=? AND run_id=?",
                (tenant, run_id),
            )
        if not rows:
            raise self._not_found(run_id, tenant)
        return RunInfo(*rows[0])

    def run_keys(self) -> list[tuple[str, str]]:
        """Every ``(tenant, run_id)`` that has events or a summary row, including orphans."""
        with self._using("listing runs of") as db:
            rows = lenient_fetch(db, _RUN_KEYS)
        return [(str(t), str(r)) for t, r in rows if self.tenant in (None, t)]

    def count_events(self) -> int:
        """How many events the store holds."""
        with self._using("counting events of") as db:
            if self.tenant is not None:
                sql, args = "SELECT count(*) FROM events WHERE tenant=?", [self.tenant]
            else:
                sql, args = "SELECT count(*) FROM events", []
            return int(db.execute(sql, args).fetchone()[0])

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` result (``"ok"`` when sound)."""
        with self._using("checking") as db:
            return str(db.execute("PRAGMA integrity_check").fetchone()[0])

    def raw_payload(self, event_id: str) -> bytes | None:
        """The stored canonical payload bytes of one event."""
        with self._using("reading") as db:
            row = db.execute(
                "SELECT p.body FROM events e JOIN payloads p ON p.id=e.id WHERE e.event_id=?",
                (event_id,),
            ).fetchone()
        return None if row is None else row[0]

"""A store in PostgreSQL (psycopg 3): ``postgresql://user@host/db[?tenant=T&purpose=P]``.

The schema (:mod:`tachograph.store.postgres_schema`) enforces the chain, append-only, and
tenants (each login holds to the tenants ``grant_login`` bound it to) in the database, for
every client, and applies the read policy of the purpose the client declares; this engine
adds precise errors (which seq, which head) and dedupe of re-sent events, as every engine
does.

Each operation is one short transaction that first sets the transaction-local
``tachograph.tenant`` (the store's tenant, the run's tenant, or ``*`` for listings across
tenants, which only members of ``tachograph_all_tenants`` see) and ``tachograph.purpose``.
A store opened with ``?tenant=T`` never sets any other tenant: what is recorded into it is
of tenant T when no tenant is named, reads and listings default to T, and an operation that
names another tenant is refused with a :class:`StoreError` before anything is sent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, ClassVar

import orjson
import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from ..errors import (
    AppendRefused,
    DuplicateConflict,
    PurposeDenied,
    SchemaVersionError,
    SequenceConflict,
    StoreError,
    StoreNotFound,
    StoreUnavailable,
    TachographError,
)
from ..record.event import Event, EventType
from ..record.rows import StoredRow
from . import forks
from . import postgres_migrations as migrations
from . import postgres_schema as schema
from .audit import AuditEntry, AuditRecord, chain_audit
from .base import (
    NEIGHBOURS,
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

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

SCHEMA_VERSION = schema.SCHEMA_VERSION
SCHEMES = ("postgresql", "postgres")

_log = logging.getLogger("tachograph")
_PAGE = 2000
_CONFLICT_RETRIES = 5  # a head moved by a concurrent writer: re-check against the new head
_OPTIONS = ("tenant", "purpose")  # query parameters of the URL that are ours, not libpq's
# Read per event: a constant, as ``EventType.X.value`` is an enum property (~1 us on 3.11).
_RUN_FINISHED = EventType.RUN_FINISHED.value

# A page is two range scans of one run (envelopes, then their payloads), merged here: no join
# for the planner to get wrong on a table it has no statistics for yet.
_PAGE_SQL = (
    "SELECT tenant, run_id, seq, event_id, ts, type, actor, trace_id, span_id, "
    "idempotency_key, model, seed, payload_digest, prev_hash, hash FROM tachograph.events "
    "WHERE tenant = %s AND run_id = %s AND seq >= %s ORDER BY seq LIMIT %s"
)
_PAYLOAD_PAGE_SQL = (
    "SELECT seq, body, salt FROM tachograph.payloads "
    "WHERE tenant = %s AND run_id = %s AND seq >= %s AND seq <= %s"
)
# Arrays go in binary (%b): no quoting and escaping of every element on the client, no text
# parsing of every element (and hex decoding of every payload) on the server.
_INSERT_EVENTS = (
    "INSERT INTO tachograph.events (tenant, run_id, seq, event_id, ts, type, actor, trace_id, "
    "span_id, idempotency_key, model, seed, payload_digest, prev_hash, hash, status) "
    "SELECT * FROM unnest(%b::text[], %b::text[], %b::bigint[], %b::text[], %b::text[], "
    "%b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::bigint[], "
    "%b::text[], %b::text[], %b::text[], %b::text[])"
)
_INSERT_PAYLOADS = (
    "INSERT INTO tachograph.payloads (tenant, run_id, seq, type, salt, body) "
    "SELECT * FROM unnest(%b::text[], %b::text[], %b::bigint[], %b::text[], %b::text[], "
    "%b::bytea[])"
)
_RUN_COLUMNS = "tenant, run_id, actor, started_at, last_at, events, head_hash, status"
# The first event id of a batch that is stored anywhere in the tenant (one is enough to refuse
# or to leave the optimistic path). ORDER BY event_id LIMIT 1 makes it a merge of index scans
# of events_event_id (event_id leads), one probe per id and partition: the cost follows the
# batch, not the store. A bare `event_id = ANY(...)` was planned as a read of all the
# tenant's rows (the primary key's tenant prefix, or sequential scans) until statistics
# caught up with a growing table. On Citus it is one multi-shard query, merged.
EVENT_ID_LOOKUP = (
    "SELECT event_id, run_id, seq, hash FROM tachograph.events "
    "WHERE event_id = ANY(%b::text[]) AND tenant = %s ORDER BY event_id LIMIT 1"
)


_EVENT_IDS_STORED = (
    "SELECT event_id, run_id, seq, hash FROM tachograph.events "
    "WHERE event_id = ANY(%s::text[]) AND tenant = %s"
)
"""Every stored event holding one of the ids (the precise path's check: it reports the
batch's first clash, where the optimistic path only needs to know of one)."""


class _Declined(Exception):
    """The optimistic append found a stored event id: roll back, take the precise path."""


def _continues_in_order(events: Sequence[Event]) -> bool:
    """One tenant, distinct event ids, and each run's events consecutive and linked (the
    first of each run is the database's to hold against the run's head)."""
    tenant = events[0].tenant
    last: dict[str, Event] = {}
    ids: set[str] = set()
    for ev in events:
        before = last.get(ev.run_id)
        if ev.tenant != tenant or ev.event_id in ids:
            return False
        if before is not None and (ev.seq != before.seq + 1 or ev.prev_hash != before.hash):
            return False
        last[ev.run_id] = ev
        ids.add(ev.event_id)
    return True


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """The libpq connection string of ``url`` and the options that are tachograph's."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise StoreError(f"not a PostgreSQL URL: {redact(url)!r}", location=redact(url))
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in _OPTIONS}
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k not in _OPTIONS])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), ours


_SECRET_PARAMETERS = frozenset({"password", "sslpassword", "passfile", "sslkey"})
"""libpq connection parameters a URL's query may carry that must not be printed."""


def redact(url: str) -> str:
    """``url`` without its password (``user:***@host``, and ``password=***`` and the other
    libpq parameters that hold or name a secret in its query), for messages and
    ``Store.url``."""
    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    netloc = parts.netloc
    if password is not None:
        host = netloc.rsplit("@", 1)[1]
        netloc = f"{parts.username or ''}:***@{host}"
    query = parts.query
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        if any(k.lower() in _SECRET_PARAMETERS for k, _ in pairs):
            query = "&".join(
                f"{urllib.parse.quote(k, safe='')}="
                + ("***" if k.lower() in _SECRET_PARAMETERS else urllib.parse.quote(v, safe=""))
                for k, v in pairs
            )
    if netloc == parts.netloc and query == parts.query:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


class PostgresStore(Store):
    """A store in a PostgreSQL database holding the ``tachograph`` schema.

    ``tenant`` confines every operation to one tenant (row-level security then holds the
    connection to it; a login not bound to it is refused as the store opens); ``purpose`` is
    what payloads are read for, checked against the database's ``read_policy`` (a refused
    read raises :class:`PurposeDenied` and is audited).
    With ``create=True`` a database without the schema gets it, when the role may install it.
    """

    hides_other_tenants = True

    def __init__(
        self,
        url: str,
        *,
        tenant: str | None = None,
        purpose: str | None = None,
        create: bool = True,
        partitions: int = 8,
    ) -> None:
        conninfo, options = split_url(url)
        self.url = redact(url)
        self.tenant = tenant if tenant is not None else options.get("tenant") or None
        self.purpose = purpose if purpose is not None else options.get("purpose") or "default"
        self._lock = threading.RLock()
        self._conninfo = conninfo
        self._connection: Any = self._connect()
        try:
            self._open(create=create, partitions=partitions)
        except BaseException:
            self._connection.close()
            raise
        self._pid = os.getpid()
        forks.track(self)

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10)
        except psycopg.OperationalError as exc:
            text = str(exc)
            if "does not exist" in text and "database" in text:
                raise StoreNotFound(
                    f"no database for {self.url}: {text.strip()}", location=self.url
                ) from exc
            raise StoreUnavailable(
                f"cannot connect to {self.url}: {text.strip()}", location=self.url
            ) from exc

    @property
    def _conn(self) -> psycopg.Connection[Any]:
        """The session, connected again when the last one was lost (the server restarted, a
        backend was killed, the network dropped): the call that met the loss failed
        (:class:`StoreUnavailable`), and the next one gets a new session, rather than every
        later call failing for the life of the store. A store closed by :meth:`close` stays
        closed; what was not committed was not written, and an append that is sent again
        finds what did commit (appends dedupe)."""
        connection = self._connection
        if getattr(connection, "broken", False):
            with contextlib.suppress(Exception):
                connection.close()
            self._connection = connection = self._connect()
        return connection  # type: ignore[no-any-return] # or the stand-in of a forked child

    def _after_fork(self) -> None:
        """In a forked child (see :mod:`tachograph.store.forks`). The connection came along:
        a session's socket, shared with the parent. A child that used it interleaved its
        messages with the parent's, and both sessions failed or read each other's answers.
        The parent's connection is set aside (psycopg does not close it when a child frees
        it either), and this copy of the store refuses to be used, saying so."""
        if self._connection.closed:
            return
        self._connection = forks.set_aside(
            self._connection,
            self.url,
            self._pid,
            "a PostgreSQL session must not cross a fork",
            "PostgresStore(url)",
        )

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> PostgresStore:
        """Open the store a ``postgresql:`` URL names."""
        return cls(url, create=create)

    # -- installing --------------------------------------------------------------------------

    @classmethod
    def install_schema(cls, admin_url: str, *, partitions: int = 8) -> bool:
        """Install roles and schema through ``admin_url`` (a superuser); False if present
        (an older version is then upgraded in place, see :mod:`.postgres_migrations`)."""
        conninfo, _ = split_url(admin_url)
        try:
            with psycopg.connect(conninfo, autocommit=True) as conn:
                created = schema.install(conn, partitions=partitions)
                if not created:
                    migrations.upgrade(conn)
                return created
        except psycopg.Error as exc:  # a driver's error never escapes a store
            raise StoreUnavailable(
                f"cannot install the tachograph schema through {redact(admin_url)}: "
                f"{str(exc).strip()}",
                location=redact(admin_url),
            ) from exc

    @classmethod
    def grant_login(
        cls,
        admin_url: str,
        name: str,
        *,
        tenants: Iterable[str] | None = None,
        writer: bool = True,
        reader: bool = True,
        privacy: bool = False,
        all_tenants: bool = False,
        password: str | None = None,
    ) -> None:
        """Create login role ``name`` (if absent), grant it the chosen tachograph roles and
        bind it to ``tenants``: the tenants it may act for in this database, which the
        database holds it to whatever tenant the client sets. ``tenants`` is required unless
        ``all_tenants`` (membership of ``tachograph_all_tenants``: every tenant, and listings
        across them). Granting again adds tenants; :meth:`revoke_login` takes them away.

        The roles are cluster-wide; the bindings are kept in this database's schema (install
        or upgrade it first), so a login is bound separately in each tachograph database."""
        bound = list(tenants or ())
        if not bound and not all_tenants:
            raise ValueError(
                f"grant_login({name!r}) needs tenants=[...], the tenants the login may act "
                "for, or all_tenants=True"
            )
        roles = [
            role
            for role, wanted in (
                (schema.WRITER, writer),
                (schema.READER, reader),
                (schema.PRIVACY, privacy),
                (schema.ALL_TENANTS, all_tenants),
            )
            if wanted
        ]
        statements = schema.login_sql(name, roles, password=password, tenants=bound)
        cls._administer(admin_url, statements)

    @classmethod
    def revoke_login(
        cls, admin_url: str, name: str, *, tenants: Iterable[str] | None = None
    ) -> None:
        """Unbind login ``name`` from ``tenants`` in this database; with no ``tenants``, from
        every tenant, and revoke its membership of the tachograph roles (writer, reader,
        privacy, all tenants: cluster-wide, as :meth:`grant_login` granted them). The role
        itself stays (``DROP ROLE`` is the administrator's). A login that is a member of
        ``tachograph_all_tenants`` may act for every tenant whatever it is bound to:
        unbinding some of its tenants is refused with a :class:`StoreError` saying so."""
        listed = None if tenants is None else list(tenants)
        if listed is not None:
            with cls._admin(admin_url) as conn:
                row = conn.execute(
                    "SELECT pg_has_role(rolname, %s, 'MEMBER') FROM pg_roles WHERE rolname = %s",
                    (schema.ALL_TENANTS, name),
                ).fetchone()
            if row is not None and row[0]:
                raise StoreError(
                    f"login {name!r} may act for every tenant (it is a superuser or a member "
                    f"of {schema.ALL_TENANTS}): unbinding tenants changes nothing; "
                    f"revoke_login(ADMIN_URL, {name!r}) revokes its roles",
                    location=redact(admin_url),
                )
        cls._administer(admin_url, schema.revoke_sql(name, tenants=listed))

    @classmethod
    @contextlib.contextmanager
    def _admin(cls, admin_url: str) -> Iterator[psycopg.Connection[Any]]:
        """An administrator's connection; driver errors as a store's errors."""
        conninfo, _ = split_url(admin_url)
        where = redact(admin_url)
        try:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
                yield conn
        except pg_errors.UndefinedTable as exc:
            raise StoreError(
                f"the tachograph schema in {where} predates logins bound to tenants (version "
                f"7): upgrade it first with PostgresStore.install_schema(ADMIN_URL)",
                location=where,
            ) from exc
        except psycopg.Error as exc:
            raise StoreUnavailable(f"{where} failed: {str(exc).strip()}", location=where) from exc

    @classmethod
    def _administer(cls, admin_url: str, statements: Sequence[str]) -> None:
        """Run ``statements`` in one transaction as the administrator."""
        with cls._admin(admin_url) as conn, conn.transaction():
            for statement in statements:
                conn.execute(statement)

    def _open(self, *, create: bool, partitions: int) -> None:
        cur = self._conn.cursor()
        cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        row = cur.fetchone()
        may_install = create and row is not None and bool(row[0])
        cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema.SCHEMA,))
        if cur.fetchone() is not None:
            if may_install:
                migrations.upgrade(self._conn)  # a no-op at the current version
        else:
            if may_install:
                schema.install(self._conn, partitions=partitions)
            else:
                raise StoreNotFound(
                    f"no tachograph schema in {self.url}: install it once as a superuser "
                    "with PostgresStore.install_schema(ADMIN_URL)",
                    location=self.url,
                )
        try:
            cur.execute("SELECT value FROM tachograph.meta WHERE key = 'schema_version'")
            row = cur.fetchone()
        except pg_errors.InsufficientPrivilege as exc:
            raise StoreError(
                f"role cannot read the tachograph schema in {self.url}: grant it "
                f"{schema.WRITER} or {schema.READER}",
                location=self.url,
            ) from exc
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.url} has schema version {version}; this tachograph reads up to "
                f"{SCHEMA_VERSION}: upgrade tachograph",
                location=self.url,
                expected=SCHEMA_VERSION,
                actual=version,
            )
        if self.tenant is None and version >= 7:
            # A login bound to one tenant that names none would see nothing of any tenant
            # (listings are of every tenant, which it may not read): runs, verify --all and a
            # migration read "no runs" and exit 0, an empty backup. It is that tenant's
            # store. A login bound to several names each call's tenant; to none, it can do
            # nothing, which is said at once.
            cur.execute("SELECT session_user, every, tenants FROM tachograph.login_tenants()")
            login, every, tenants = cur.fetchone() or ("", True, [])
            if not every and len(tenants) == 1:
                self.tenant = str(tenants[0])
            elif not every and not tenants:
                raise StoreError(
                    f"login {login!r} is bound to no tenant in {self.url}: an administrator "
                    f"binds it with PostgresStore.grant_login(ADMIN_URL, {login!r}, "
                    "tenants=[...])",
                    location=self.url,
                )
        elif self.tenant is not None and version >= 7:
            # Said at once: the database would show this login nothing of the tenant and
            # refuse every write there.
            cur.execute("SELECT session_user, tachograph.may_act_for(%s)", (self.tenant,))
            login, allowed = cur.fetchone() or ("", False)
            if not allowed:
                raise StoreError(
                    f"login {login!r} may not act for tenant {self.tenant!r} in {self.url}: "
                    "an administrator binds it with PostgresStore.grant_login(ADMIN_URL, "
                    f"{login!r}, tenants=[{self.tenant!r}])",
                    tenant=self.tenant,
                    location=self.url,
                )

    current_schema_version: ClassVar[int] = SCHEMA_VERSION
    """The schema version this tachograph writes."""
    upgrade_advice: ClassVar[str] = (
        "Upgrade it once as its administrator: PostgresStore.install_schema(ADMIN_URL)."
    )

    @property
    def schema_version(self) -> int:
        """The schema version recorded in the database."""
        row = self._conn.execute(
            "SELECT value FROM tachograph.meta WHERE key = 'schema_version'"
        ).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._connection.close()

    # -- plumbing ----------------------------------------------------------------------------

    def _scope(self, cur: psycopg.Cursor[Any], tenant: str | None) -> None:
        """Set this transaction's tenant and purpose (the keys of row-level security): the
        store's tenant when it has one (a tenant other than it is refused, as a superuser's
        connection, which row-level security does not hold, would reach it), else the
        operation's, else ``*``."""
        effective = self.scoped_tenant(tenant) or "*"
        cur.execute(
            "SELECT set_config('tachograph.tenant', %s, true), "
            "set_config('tachograph.purpose', %s, true)",
            (effective, self.purpose),
        )

    def _query(self, tenant: str | None, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        """One statement in its own scoped transaction; driver errors translated."""
        with self._lock:
            try:
                with self._conn.transaction():
                    cur = self._conn.cursor()
                    self._scope(cur, tenant)
                    cur.execute(sql, args)
                    return cur.fetchall()
            except psycopg.Error as exc:
                raise self._translate(exc) from exc

    def _translate(
        self, exc: psycopg.Error, run_id: str | None = None, tenant: str | None = None
    ) -> TachographError:
        # run_id and tenant: the run the statement was about, when it was about one
        about = {"run_id": run_id, "tenant": tenant}
        if exc.sqlstate == "TG004":
            return PurposeDenied(
                f"{exc.diag.message_primary} ({self.url})", purpose=self.purpose, **about
            )
        if exc.sqlstate == "TG006":
            return AppendRefused(
                f"{exc.diag.message_primary} ({self.url})", location=self.url, **about
            )
        if exc.sqlstate in ("42501", "TG005"):  # a row-level security policy, a privilege
            return StoreError(f"refused by {self.url}: {exc.diag.message_primary}", **about)
        return StoreUnavailable(
            f"{self.url} failed: {str(exc).strip()}", location=self.url, **about
        )

    # -- writing -----------------------------------------------------------------------------

    def append(self, events: Sequence[Event], *, durable: bool = True) -> list[Receipt]:
        """Append a batch atomically (see :meth:`Store.append`).

        ``durable=False`` commits with ``synchronous_commit = off``: a server crash may lose
        the last batches, a client crash never does.
        """
        if not events:
            return []
        if self.tenant is not None:
            for tenant in {ev.tenant for ev in events}:  # refused before anything is sent
                self.scoped_tenant(tenant, run_id=events[0].run_id)
        with self._lock:
            receipts = self._append_optimistic(events, durable)
            if receipts is not None:
                return receipts
            for attempt in range(_CONFLICT_RETRIES + 1):
                try:
                    with self._conn.transaction():
                        return self._append_txn(events, durable)
                except psycopg.Error as exc:
                    if exc.sqlstate in ("TG001", "23505") and attempt < _CONFLICT_RETRIES:
                        # A concurrent writer moved a head after our checks (the trigger's
                        # compare-and-set or the primary key caught it): check again against
                        # the new head, which makes it a precise conflict or a duplicate.
                        continue
                    if exc.sqlstate in ("TG001", "23505"):
                        raise SequenceConflict(
                            f"run heads kept moving under this append: {exc.diag.message_primary}",
                            run_id=events[0].run_id,
                            tenant=events[0].tenant,
                            seq=events[0].seq,
                        ) from exc
                    if isinstance(exc, pg_errors.InsufficientPrivilege):
                        raise StoreError(
                            f"append refused by {self.url}: {exc.diag.message_primary}",
                            run_id=events[0].run_id,
                            tenant=events[0].tenant,
                            location=self.url,
                        ) from exc
                    # the run the database refused, where the batch has only one
                    if len({(ev.tenant, ev.run_id) for ev in events}) == 1:
                        raise self._translate(exc, events[0].run_id, events[0].tenant) from exc
                    raise self._translate(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _append_optimistic(self, events: Sequence[Event], durable: bool) -> list[Receipt] | None:
        """The usual batch (new events of one tenant, each run's in order and linked) in one
        pipeline: scope, the cross-run event-id lookup and both inserts are sent at once, and
        the transaction commits only if the lookup found none of the ids. The chain trigger
        holds each run's first event against its head. Anything else (a re-sent event, a
        head that moved, any error) rolls everything back and returns None: the precise path
        then says exactly what is wrong, or dedupes."""
        if not _continues_in_order(events):
            return None
        conn = self._conn
        tenant = events[0].tenant
        clear = False
        try:
            # BEGIN and COMMIT by hand, and every failure caught inside the pipeline: psycopg
            # logs a warning for a pipeline left with an error in flight (transaction() in a
            # pipeline does so for every failed statement), and failing is how this declines.
            with conn.pipeline() as pipeline:
                try:
                    cur = conn.cursor()
                    cur.execute("BEGIN")
                    if not durable:
                        cur.execute("SET LOCAL synchronous_commit = off")
                    self._scope(cur, tenant)
                    lookup = conn.cursor()
                    lookup.execute(EVENT_ID_LOOKUP, ([ev.event_id for ev in events], tenant))
                    self._insert(cur, events)
                    pipeline.sync()
                    clear = not lookup.fetchall()
                    if clear:
                        cur.execute("COMMIT")
                except psycopg.Error:
                    clear = False
        except psycopg.Error:  # the commit failed, or the connection did
            clear = False
        finally:
            if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    conn.rollback()  # declined or interrupted: never leave a transaction open
        if not clear:
            return None
        return [receipt(ev.event_id, ev.tenant, ev.run_id, ev.seq, ev.hash) for ev in events]

    def _append_txn(self, events: Sequence[Event], durable: bool) -> list[Receipt]:
        """The precise path: every tenant's events checked (under its own scope), and the
        batch's first refused event reported, as the other engines report it; only then
        the rows inserted."""
        cur = self._conn.cursor()
        if not durable:
            cur.execute("SET LOCAL synchronous_commit = off")
        by_tenant: dict[str, list[int]] = {}
        for index, ev in enumerate(events):
            by_tenant.setdefault(ev.tenant, []).append(index)
        receipts: list[Receipt | None] = [None] * len(events)
        faults: list[tuple[int, TachographError]] = []
        accepted: dict[str, list[Event]] = {}
        for tenant, indexes in by_tenant.items():
            self._scope(cur, tenant)
            fresh, fault = self._check_tenant(
                cur, tenant, [events[i] for i in indexes], indexes, receipts
            )
            if fault is not None:
                faults.append(fault)
            accepted[tenant] = fresh
        if faults:
            raise min(faults, key=lambda fault: fault[0])[1]
        for tenant, fresh in accepted.items():
            if fresh:
                self._scope(cur, tenant)
                self._insert(cur, fresh)
        return [r for r in receipts if r is not None]

    def _check_tenant(
        self,
        cur: psycopg.Cursor[Any],
        tenant: str,
        events: list[Event],
        indexes: list[int],
        receipts: list[Receipt | None],
    ) -> tuple[list[Event], tuple[int, TachographError] | None]:
        """One tenant's events (at ``indexes`` in the batch), in order, against the store:
        the new ones to insert, and the first refused one with its refusal (its index in
        the batch), as the memory store checks them one by one: a deleted run, a stored seq
        (a re-sent event is a duplicate), the run's head, then its event id."""
        run_ids = sorted({ev.run_id for ev in events})
        cur.execute(
            "SELECT run_id, events, head_hash FROM tachograph.runs "
            "WHERE tenant = %s AND run_id = ANY(%s)",
            (tenant, run_ids),
        )
        heads: dict[str, list[Any]] = {r[0]: [r[1], r[2]] for r in cur.fetchall()}
        stored_counts = {run_id: head[0] for run_id, head in heads.items()}
        # A run without a summary may be one retention deleted: refused in its own words (a
        # gap "expected at seq 0" would send its writer to start it again, refused anyway).
        deleted: dict[str, Any] = {}
        unknown = [run_id for run_id in run_ids if run_id not in heads]
        if unknown:
            cur.execute(
                "SELECT run_id, to_char(deleted_at AT TIME ZONE 'UTC', "
                '\'YYYY-MM-DD"T"HH24:MI:SS.US"Z"\') FROM tachograph.deleted_runs '
                "WHERE tenant = %s AND run_id = ANY(%s)",
                (tenant, unknown),
            )
            deleted = {r[0]: r[1] for r in cur.fetchall()}
        # Events at a seq the store already holds: fetch what is there, to dedupe or refuse.
        old = [ev for ev in events if ev.seq < stored_counts.get(ev.run_id, 0)]
        stored: dict[tuple[str, int], tuple[str, str]] = {}
        if old:
            cur.execute(
                "SELECT e.run_id, e.seq, e.event_id, e.hash FROM tachograph.events e "
                "JOIN unnest(%s::text[], %s::bigint[]) AS k(run_id, seq) "
                "ON e.run_id = k.run_id AND e.seq = k.seq WHERE e.tenant = %s",
                ([ev.run_id for ev in old], [ev.seq for ev in old], tenant),
            )
            stored = {(r[0], r[1]): (r[2], r[3]) for r in cur.fetchall()}
        fresh: list[Event] = []
        fresh_at: list[int] = []
        in_batch: dict[tuple[str, int], Event] = {}
        fault: tuple[int, TachographError] | None = None
        for ev, index in zip(events, indexes, strict=True):
            if ev.run_id in deleted:
                fault = index, run_deleted(tenant, ev.run_id, deleted[ev.run_id], location=self.url)
                break
            count, head_hash = heads.get(ev.run_id, [0, None])
            if ev.seq < count:
                have = stored.get((ev.run_id, ev.seq))
                if have is None and (ev.run_id, ev.seq) in in_batch:
                    twin = in_batch[(ev.run_id, ev.seq)]
                    have = (twin.event_id, twin.hash)
                if have is not None and have == (ev.event_id, ev.hash):
                    receipts[index] = receipt(
                        ev.event_id, ev.tenant, ev.run_id, ev.seq, ev.hash, True
                    )
                    continue
                fault = index, seq_taken(ev, have[1] if have else None)
                break
            if ev.seq != count or ev.prev_hash != head_hash:
                fault = index, out_of_sequence(ev, count, head_hash)
                break
            heads[ev.run_id] = [count + 1, ev.hash]
            in_batch[(ev.run_id, ev.seq)] = ev
            fresh.append(ev)
            fresh_at.append(index)
            receipts[index] = receipt(ev.event_id, ev.tenant, ev.run_id, ev.seq, ev.hash)
        # The events before a refusal went in, as the other engines check them: an event id
        # among them stored elsewhere, or used twice, may be the batch's first refusal.
        clash = self._first_id_clash(cur, tenant, fresh, fresh_at)
        if clash is not None and (fault is None or clash[0] < fault[0]):
            fault = clash
        return fresh, fault

    def _first_id_clash(
        self, cur: psycopg.Cursor[Any], tenant: str, fresh: list[Event], fresh_at: list[int]
    ) -> tuple[int, DuplicateConflict] | None:
        """The first of ``fresh`` (at ``fresh_at`` in the batch) whose event id is stored
        elsewhere in the tenant or taken by an earlier event of the batch, with its conflict.

        Unique keys include ``run_id`` (so that the schema distributes); across runs this is a
        lookup, exact for one writer, and under concurrency the per-run unique key holds.
        """
        first: dict[str, tuple[int, Event]] = {}
        found: tuple[int, DuplicateConflict] | None = None
        for ev, index in zip(fresh, fresh_at, strict=True):
            taken = first.setdefault(ev.event_id, (index, ev))[1]
            if taken is not ev and found is None:  # the batch's order: the first repeat
                at = (taken.run_id, taken.seq)
                found = (
                    index,
                    id_taken(
                        ev.event_id, ev.run_id, ev.seq, ev.hash, at, taken.hash, tenant=ev.tenant
                    ),
                )
        if not first:
            return found
        cur.execute(_EVENT_IDS_STORED, (list(first), tenant))
        for event_id, run_id, seq, digest in cur.fetchall():
            index, ev = first[event_id]
            if found is None or index < found[0]:
                at = (run_id, seq)
                found = (
                    index,
                    id_taken(event_id, ev.run_id, ev.seq, ev.hash, at, digest, tenant=ev.tenant),
                )
        return found

    @staticmethod
    def _insert(cur: psycopg.Cursor[Any], fresh: Sequence[Event]) -> None:
        columns: list[list[Any]] = [[] for _ in range(16)]
        bodies: list[bytes | None] = []
        for ev in fresh:
            status = None
            if ev.type == _RUN_FINISHED and isinstance(ev.payload, dict):
                found = ev.payload.get("status")
                status = found if isinstance(found, str) else None
            elif ev.type == _RUN_FINISHED and ev.payload is None and ev.payload_bytes:
                found = orjson.loads(ev.payload_bytes).get("status")
                status = found if isinstance(found, str) else None
            row = (
                ev.tenant, ev.run_id, ev.seq, ev.event_id, ev.ts, ev.type, ev.actor,
                ev.trace_id, ev.span_id, ev.idempotency_key, ev.model, ev.seed,
                ev.payload_digest, ev.prev_hash, ev.hash, status,
            )  # fmt: skip
            for column, value in zip(columns, row, strict=True):
                column.append(value)
            body = ev.payload_bytes
            if body is None and ev.payload is not None:
                body = orjson.dumps(ev.payload)
            bodies.append(body)
        cur.execute(_INSERT_EVENTS, columns)
        cur.execute(
            _INSERT_PAYLOADS,
            (columns[0], columns[1], columns[2], columns[5], [ev.salt for ev in fresh], bodies),
        )

    # -- reading -----------------------------------------------------------------------------

    def head(self, run_id: str, *, tenant: str | None = None) -> tuple[int, str] | None:
        """The last ``(seq, hash)`` of a run, from its summary row (one index lookup)."""
        tenant = self.writing_tenant(tenant, run_id=run_id)
        rows = self._query(
            tenant,
            "SELECT events - 1, head_hash FROM tachograph.runs WHERE tenant = %s AND run_id = %s",
            (tenant, run_id),
        )
        return (int(rows[0][0]), str(rows[0][1])) if rows else None

    def _resolve_tenant(self, run_id: str, tenant: str | None) -> str:
        tenant = self.scoped_tenant(tenant, run_id=run_id)  # the store's own by default
        if tenant is not None:
            return tenant
        rows = self._query(
            None, "SELECT tenant FROM tachograph.runs WHERE run_id = %s LIMIT 2", (run_id,)
        )
        if not rows:
            # An orphan run (events without a summary row) still resolves. Asked only when no
            # summary row answers: the events have no index that leads with the run id, and
            # each lookup of a run read its partition's whole primary key (2 ms for 300,000
            # events, growing with them).
            rows = self._query(
                None,
                "SELECT DISTINCT tenant FROM tachograph.events WHERE run_id = %s LIMIT 2",
                (run_id,),
            )
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
            elsewhere = [
                str(r[0])
                for r in self._query(
                    None, "SELECT tenant FROM tachograph.runs WHERE run_id = %s", (run_id,)
                )
            ]
        return not_found(run_id, (), self.url, tenant=tenant, elsewhere=elsewhere, matches=matches)

    def close_matches(self, run_id: str, *, tenant: str | None = None) -> list[str]:
        """Close matches (:meth:`Store.close_matches`) from the ids next to ``run_id`` in the
        run id index (the primary key within a tenant): two ranges of it. The database's
        collation orders them, so that the index serves; in any other than ``C`` the
        neighbours may differ from code point order's (the matches are a hint)."""
        within = self.scoped_tenant(tenant, run_id=run_id)
        asked: object = run_id
        if not isinstance(asked, str):  # another type has no neighbours (nor compares with text)
            return []
        where, args = ("tenant = %s AND ", [within]) if within is not None else ("", [])
        near = (
            "SELECT DISTINCT run_id FROM tachograph.runs WHERE {}run_id {} %s "
            "ORDER BY run_id {} LIMIT %s"
        )
        below = self._query(within, near.format(where, "<", "DESC"), (*args, run_id, NEIGHBOURS))
        above = self._query(within, near.format(where, ">=", "ASC"), (*args, run_id, NEIGHBOURS))
        return suggest(run_id, [r[0] for r in reversed(below)] + [r[0] for r in above])

    def read_rows(
        self, run_id: str, *, tenant: str | None = None, from_seq: int = 0
    ) -> Iterator[StoredRow]:
        """Stream a run's rows in pages (keyset pagination: constant memory, short
        transactions); a purpose that may not read some of its payloads is refused first."""
        tenant = self._resolve_tenant(run_id, tenant)
        denied = self._authorize(run_id, tenant, from_seq)
        if denied:
            # Recorded in its own committed transaction: the refusal stays in the audit.
            detail = {"run_id": run_id, "from_seq": from_seq, "purpose": self.purpose}
            self.append_audit(
                AuditEntry(
                    action="read.denied",
                    actor=self._db_user(),
                    tenant=tenant,
                    detail={**detail, "types": denied},
                )
            )
            raise PurposeDenied(
                f"purpose {self.purpose!r} may not read payloads of type "
                f"{', '.join(denied)} in run {run_id!r} (refusal recorded in the store audit)",
                run_id=run_id,
                tenant=tenant,
                purpose=self.purpose,
                what="payloads of type " + ", ".join(denied),
            )
        seq = from_seq
        first = True
        while True:
            rows = self._page(tenant, run_id, seq)
            if first and not rows and not self._exists(tenant, run_id):
                raise self._not_found(run_id, tenant)
            first = False
            yield from rows
            if len(rows) < _PAGE:
                return
            seq = rows[-1][2] + 1

    def _page(self, tenant: str, run_id: str, seq: int) -> list[StoredRow]:
        with self._lock:
            try:
                with self._conn.transaction():
                    cur = self._conn.cursor()
                    self._scope(cur, tenant)
                    cur.execute(_PAGE_SQL, (tenant, run_id, seq, _PAGE))
                    envelopes = cur.fetchall()
                    if not envelopes:
                        return []
                    cur.execute(_PAYLOAD_PAGE_SQL, (tenant, run_id, seq, envelopes[-1][2]))
                    payloads = {r[0]: (r[1], r[2]) for r in cur.fetchall()}
            except psycopg.Error as exc:
                raise self._translate(exc, run_id, tenant) from exc
        missing = (None, None)
        make = StoredRow._make
        return [make((*row, *payloads.get(row[2], missing))) for row in envelopes]

    def _authorize(self, run_id: str, tenant: str, from_seq: int) -> list[str]:
        # Its own transaction, committed: the audit of a refusal must survive the refusal.
        rows = self._query(tenant, "SELECT tachograph.authorize_read(%s, %s)", (run_id, from_seq))
        return list(rows[0][0] or [])

    def _exists(self, tenant: str, run_id: str) -> bool:
        return bool(
            self._query(
                tenant,
                "SELECT 1 FROM tachograph.runs WHERE tenant = %s AND run_id = %s "
                "UNION ALL SELECT 1 FROM tachograph.events WHERE tenant = %s AND run_id = %s "
                "LIMIT 1",
                (tenant, run_id, tenant, run_id),
            )
        )

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
                where.append(f"{column} = %s")
                args.append(value)
        if status == "unfinished":
            where.append("status IS NULL")
        elif status is not None:
            where.append("status = %s")
            args.append(status)
        if since is not None:
            where.append("started_at >= %s")
            args.append(since)
        if until is not None:
            where.append("started_at < %s")
            args.append(until)
        if prefix:
            where.append("starts_with(run_id, %s)")  # character by character, no pattern
            args.append(prefix)
        sql = f"SELECT {_RUN_COLUMNS} FROM tachograph.runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started_at DESC, run_id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [RunInfo(*row) for row in self._query(tenant, sql, args)]

    def run_info(self, run_id: str, *, tenant: str | None = None) -> RunInfo:
        """The summary of one run."""
        tenant = self._resolve_tenant(run_id, tenant)
        rows = self._query(
            tenant,
            f"SELECT {_RUN_COLUMNS} FROM tachograph.runs WHERE tenant = %s AND run_id = %s",
            (tenant, run_id),
        )
        if not rows:
            raise self._not_found(run_id, tenant)
        return RunInfo(*rows[0])

    def run_keys(self) -> list[tuple[str, str]]:
        """Every ``(tenant, run_id)`` that has events or a summary row, in that order (byte
        order, the ``C`` collation: the order of the other engines, whatever the database's
        collation)."""
        rows = self._query(
            None,
            "SELECT tenant, run_id FROM (SELECT tenant, run_id FROM tachograph.runs "
            "UNION SELECT DISTINCT tenant, run_id FROM tachograph.events) AS k "
            'ORDER BY tenant COLLATE "C", run_id COLLATE "C"',
        )
        return [(str(t), str(r)) for t, r in rows if self.tenant in (None, t)]

    def count_events(self) -> int:
        """How many events the store holds (that this connection may see)."""
        if self.tenant is not None:
            sql, args = "SELECT count(*) FROM tachograph.events WHERE tenant = %s", [self.tenant]
        else:
            sql, args = "SELECT count(*) FROM tachograph.events", []
        return int(self._query(None, sql, args)[0][0])

    # -- the seal log (SPEC section 9): per tenant, keyed (tenant, idx) -------------------------

    def _write(self, tenant: str, work: Any) -> Any:
        """``work(cursor)`` in one scoped transaction; driver errors translated."""
        with self._lock:
            try:
                with self._conn.transaction():
                    cur = self._conn.cursor()
                    self._scope(cur, tenant)
                    return work(cur)
            except psycopg.Error as exc:
                raise self._translate(exc) from exc

    def append_seals(self, tenant: str, seals: Sequence[SealRow]) -> int:
        """Append leaves atomically; the first one's index (see :meth:`Store.append_seals`).

        Appenders of one tenant queue on a transaction lock, so each gets a contiguous range;
        the database refuses a gap (``seals_contiguous``) and a reused index (the key).
        """

        def work(cur: psycopg.Cursor[Any]) -> int:
            cur.execute(
                "SELECT pg_advisory_xact_lock(hashtext('tachograph.seals'), hashtext(%s))",
                (tenant,),
            )
            cur.execute(
                "SELECT coalesce(max(idx) + 1, 0) FROM tachograph.seals WHERE tenant = %s",
                (tenant,),
            )
            row = cur.fetchone()
            first = int(row[0]) if row else 0
            if seals:
                cur.execute(
                    "INSERT INTO tachograph.seals (tenant, idx, run_id, seq, leaf) "
                    "SELECT %s, * FROM unnest(%s::bigint[], %s::text[], %s::bigint[], "
                    "%s::bytea[])",
                    (
                        tenant,
                        [first + i for i in range(len(seals))],
                        [s.run_id for s in seals],
                        [s.seq for s in seals],
                        [bytes(s.leaf) for s in seals],
                    ),
                )
            return first

        return int(self._write(tenant, work))

    def _seal_rows(self, tenant: str, sql: str, args: Sequence[Any]) -> list[SealRow]:
        rows = self._query(tenant, sql, args)
        return [SealRow(str(r[0]), int(r[1]), bytes(r[2]), int(r[3])) for r in rows]

    def read_seals(self, tenant: str, start: int = 0, end: int | None = None) -> list[SealRow]:
        """Leaves ``start <= index < end`` in index order."""
        sql = "SELECT run_id, seq, leaf, idx FROM tachograph.seals WHERE tenant = %s AND idx >= %s"
        args: list[Any] = [tenant, start]
        if end is not None:
            sql += " AND idx < %s"
            args.append(end)
        return self._seal_rows(tenant, sql + " ORDER BY idx", args)

    def seal_count(self, tenant: str) -> int:
        """How many leaves the tenant's log holds (its indices have no gaps)."""
        rows = self._query(
            tenant,
            "SELECT coalesce(max(idx) + 1, 0) FROM tachograph.seals WHERE tenant = %s",
            (tenant,),
        )
        return int(rows[0][0])

    def seals_for_run(self, tenant: str, run_id: str) -> list[SealRow]:
        """The leaves sealing one run, in index order."""
        return self._seal_rows(
            tenant,
            "SELECT run_id, seq, leaf, idx FROM tachograph.seals "
            "WHERE tenant = %s AND run_id = %s ORDER BY idx",
            (tenant, run_id),
        )

    def put_checkpoint(self, checkpoint: CheckpointRow) -> bool:
        """Keep a checkpoint unless one of that tenant and size is kept."""
        rows = self._query(
            checkpoint.tenant,
            "INSERT INTO tachograph.checkpoints (tenant, size, note, frontier) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1",
            (checkpoint.tenant, checkpoint.size, checkpoint.note, checkpoint.frontier),
        )
        return bool(rows)

    def latest_checkpoint(self, tenant: str) -> CheckpointRow | None:
        """The largest checkpoint kept for the tenant."""
        rows = self._query(
            tenant,
            "SELECT tenant, size, note, frontier FROM tachograph.checkpoints "
            "WHERE tenant = %s ORDER BY size DESC LIMIT 1",
            (tenant,),
        )
        if not rows:
            return None
        return CheckpointRow(str(rows[0][0]), int(rows[0][1]), rows[0][2], rows[0][3])

    # -- the data lifecycle: through the database's SECURITY DEFINER functions ---------------

    def _db_user(self) -> str:
        return str(self._query(None, "SELECT session_user")[0][0])

    @staticmethod
    def _audit_in(cur: psycopg.Cursor[Any], entry: AuditEntry) -> AuditRecord:
        """Chain ``entry`` to the audit head inside the caller's transaction (which holds the
        audit's lock from ``audit_head`` until it ends)."""
        cur.execute("SELECT seq, hash FROM tachograph.audit_head()")
        head = cur.fetchone()
        seq, prev = (int(head[0]), head[1]) if head else (-1, None)
        record = chain_audit(entry, seq=seq + 1, prev_hash=prev)
        cur.execute(
            "SELECT tachograph.audit_append(%s, %s, %s, %s, %s, %s, %s, %s)",
            (
                record.seq,
                record.ts,
                record.tenant,
                record.actor,
                record.action,
                orjson.dumps(record.detail),
                record.prev_hash,
                record.hash,
            ),
        )
        return record

    def append_audit(self, entry: AuditEntry) -> AuditRecord:
        """Append one record to the store audit (in the entry's tenant: a store opened for one
        tenant may record only for that tenant)."""
        record: AuditRecord = self._write(entry.tenant, lambda cur: self._audit_in(cur, entry))
        return record

    def read_audit(self, *, from_seq: int = 0) -> Iterator[AuditRecord]:
        """Stream the store audit in seq order, page by page: the records of the tenants this
        connection may see (all of them for ``tachograph_all_tenants`` and no ``?tenant=``)."""
        return self._audit_pages(None, "", (), from_seq)

    def audit_of(self, action: str, *, tenant: str | None = None) -> Iterator[AuditRecord]:
        """The store audit's records of one action (of one tenant), in seq order, page by
        page: filtered by the database. Read in ``tenant``'s scope when one is named (a
        tenant this store is not confined to is refused, as by every read), else in the
        store's (the tenants this connection may see)."""
        if tenant is None:
            return self._audit_pages(None, "action = %s AND ", (action,), 0)
        return self._audit_pages(tenant, "action = %s AND tenant = %s AND ", (action, tenant), 0)

    def _audit_pages(
        self, scope: str | None, where: str, args: tuple[str, ...], seq: int
    ) -> Iterator[AuditRecord]:
        """The store audit's records from ``seq`` on that also meet ``where`` (conditions
        ending in ``AND``, with their ``args``), read in ``scope`` a page at a time."""
        while True:
            rows = self._query(
                scope,
                "SELECT seq, ts, tenant, actor, action, detail, prev_hash, hash "
                f"FROM tachograph.store_audit WHERE {where}seq >= %s ORDER BY seq LIMIT %s",
                (*args, seq, _PAGE),
            )
            for r in rows:
                yield AuditRecord(int(r[0]), r[1], r[2], r[3], r[4], orjson.loads(r[5]), r[6], r[7])
            if len(rows) < _PAGE:
                return
            seq = int(rows[-1][0]) + 1

    def erase(
        self,
        tenant: str,
        run_id: str,
        seqs: Iterable[int],
        *,
        audit: AuditEntry,
        unlink: str | Sequence[str] | None = None,
    ) -> int:
        """Erase payloads and salts through ``erase_payloads`` (and a subject's links through
        ``unlink_subject``) with the audit record, in one transaction (the database refuses
        to commit an erasure without one). Needs a role granted ``tachograph_privacy``. Dead
        row versions go at the next VACUUM.

        A schema older than version 6 has no ``unlink_subject``: the payloads are erased and
        the links stay, with a warning, until the schema is upgraded and the subject erased
        again."""
        wanted = sorted({int(s) for s in seqs})
        forms = subject_forms(unlink)
        if not wanted:
            return 0
        if forms and self.schema_version < 6:
            _log.warning(
                "%s: schema version %d cannot remove a data subject's links (version 6 "
                "can): the payloads are erased, the links stay until the schema is upgraded "
                "(PostgresStore.install_schema(ADMIN_URL)) and the subject erased again",
                self.url,
                self.schema_version,
            )
            forms = ()

        def work(cur: psycopg.Cursor[Any]) -> int:
            cur.execute("SELECT seq FROM tachograph.audit_head()")  # the lock, before erasing
            cur.execute("SELECT tachograph.erase_payloads(%s, %s)", (run_id, wanted))
            row = cur.fetchone()
            erased = [int(s) for s in (row[0] if row else None) or []]
            unlinked = 0
            for form in forms:
                cur.execute("SELECT tachograph.unlink_subject(%s, %s, %s)", (run_id, form, wanted))
                got = cur.fetchone()
                unlinked += int(got[0]) if got else 0
            if erased or unlinked:
                detail = {**audit.detail, "run_id": run_id, "seqs": erased}
                if forms:
                    detail["unlinked"] = unlinked
                self._audit_in(cur, dataclasses.replace(audit, tenant=tenant, detail=detail))
            return len(erased)

        return int(self._write(tenant, work))

    def delete_run(self, tenant: str, run_id: str, *, audit: AuditEntry) -> int:
        """Delete a whole run through ``delete_run_rows`` with the audit record (retention)."""

        def work(cur: psycopg.Cursor[Any]) -> int:
            cur.execute("SELECT seq FROM tachograph.audit_head()")
            cur.execute("SELECT tachograph.delete_run_rows(%s)", (run_id,))
            row = cur.fetchone()
            if row is None or row[0] is None:
                return 0
            count = int(row[0])
            detail = {**audit.detail, "run_id": run_id, "events": count}
            self._audit_in(cur, dataclasses.replace(audit, tenant=tenant, detail=detail))
            return count

        return int(self._write(tenant, work))

    def link_subjects(self, tenant: str, run_id: str, links: Iterable[tuple[int, str]]) -> int:
        """Link events to data-subject ids (linking twice is harmless)."""
        pairs = [(int(seq), str(subject)) for seq, subject in links]
        if not pairs:
            return 0
        rows = self._query(
            tenant,
            "INSERT INTO tachograph.subjects (tenant, run_id, seq, subject) "
            "SELECT %s, %s, * FROM unnest(%s::bigint[], %s::text[]) ON CONFLICT DO NOTHING "
            "RETURNING 1",
            (tenant, run_id, [p[0] for p in pairs], [p[1] for p in pairs]),
        )
        return len(rows)

    def subject_events(self, tenant: str, subject: str) -> list[tuple[str, int]]:
        """``(run_id, seq)`` linked to ``subject``, by run and seq."""
        rows = self._query(
            tenant,
            "SELECT run_id, seq FROM tachograph.subjects WHERE tenant = %s AND subject = %s "
            "ORDER BY run_id, seq",
            (tenant, subject),
        )
        return [(str(r), int(q)) for r, q in rows]

    def run_subjects(self, tenant: str, run_id: str) -> list[tuple[int, str]]:
        """``(seq, subject)`` of one run's subject links, by seq then subject."""
        rows = self._query(
            tenant,
            "SELECT seq, subject FROM tachograph.subjects WHERE tenant = %s AND run_id = %s "
            'ORDER BY seq, subject COLLATE "C"',
            (tenant, run_id),
        )
        return [(int(q), str(s)) for q, s in rows]

    def subject_key_ids(self, tenant: str) -> frozenset[str] | None:
        """The key ids of the tokens subjects are linked under in ``tenant``."""
        rows = self._query(
            tenant,
            "SELECT DISTINCT split_part(subject, ':', 2) FROM tachograph.subjects "
            "WHERE tenant = %s AND subject LIKE 'pii1:%%'",
            (tenant,),
        )
        return frozenset(str(k) for (k,) in rows if k)

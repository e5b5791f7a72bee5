"""The PostgreSQL schema's checks once per statement, its upgrade from version 1, and the
append's event-id lookup on its index.

Payloads are held to their events by a statement trigger (a foreign key probed the partitioned
events row by row); these tests show it refuses what the key refused, for every role, and that
retention and a payload insert cannot interleave into an orphan.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tachograph.errors import DuplicateConflict, SequenceConflict, StoreError
from tachograph.lifecycle.erasure import erase
from tachograph.store import postgres_schema as schema
from tachograph.store import verify_stored
from tachograph.store.audit import AuditEntry, chain_audit
from tachograph.store.base import SealRow
from tachograph.store.postgres import EVENT_ID_LOOKUP, SCHEMA_VERSION, PostgresStore
from tachograph.store.postgres_migrations import upgrade
from tachograph.testing import build_run

from .conftest import ACME_APP, APP, PRIVACY_ROLE, TENANT_ROLE, PgCluster

EVENT_COLUMNS = "tenant, run_id, seq, event_id, ts, type, actor, payload_digest, prev_hash, hash"
PARTITIONS = [f"payloads_p{i}" for i in range(8)]


def _version_6_policies() -> list[str]:
    """The tenant policies of version 6, keyed by the tenant the client sets alone."""
    old = {
        "_TENANT_EQ": "tenant = current_setting('tachograph.tenant', true)",
        "_TENANT_VISIBLE": "tachograph.tenant_visible(tenant)",
        "_PAYLOAD_READABLE": schema._PAYLOAD_READABLE.replace(
            schema._TENANT_VISIBLE, "tachograph.tenant_visible(tenant)"
        ),
    }
    new = {name: getattr(schema, name) for name in old}
    out: list[str] = []
    try:
        for name, value in old.items():
            setattr(schema, name, value)
        for table in (*schema.RUN_TABLES, *schema.TENANT_TABLES, *schema.STORE_TABLES):
            parts = [] if table == "store_audit" else [f"{table}_p{i}" for i in range(8)]
            for target in (table, *parts):
                out += schema.tenant_policies(target, replace=True)
    finally:
        for name, value in new.items():
            setattr(schema, name, value)
    return out


# What version 6 had and version 7 has not: no login bound to a tenant.
V6_SHAPE = [
    """CREATE OR REPLACE FUNCTION tachograph.tenant_visible(t text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT t = current_setting('tachograph.tenant', true)
        OR (current_setting('tachograph.tenant', true) = '*'
            AND pg_has_role(current_user, 'tachograph_all_tenants', 'MEMBER'))
$$""",
    """CREATE OR REPLACE FUNCTION tachograph.one_tenant() RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE t text := current_setting('tachograph.tenant', true);
BEGIN
    IF t IS NULL OR t = '' OR t = '*' THEN
        RAISE EXCEPTION 'tachograph: this needs one tenant in tachograph.tenant'
            USING ERRCODE = 'TG005';
    END IF;
    RETURN t;
END $$""",
    """CREATE OR REPLACE FUNCTION tachograph.audit_append(
    p_seq bigint, p_ts text, p_tenant text, p_actor text, p_action text, p_detail bytea,
    p_prev_hash text, p_hash text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
DECLARE h record;
BEGIN
    IF p_tenant IS DISTINCT FROM tachograph.one_tenant() THEN
        RAISE EXCEPTION 'tachograph: an audit record of tenant % in a transaction of tenant %',
            quote_literal(p_tenant), quote_literal(tachograph.one_tenant())
            USING ERRCODE = 'TG005';
    END IF;
    SELECT * INTO h FROM tachograph.audit_head();
    IF p_seq <> h.seq + 1 OR p_prev_hash IS DISTINCT FROM h.hash THEN
        RAISE EXCEPTION 'tachograph: audit record % does not follow the audit head %',
            p_seq, h.seq USING ERRCODE = 'TG001';
    END IF;
    INSERT INTO tachograph.store_audit (seq, tenant, ts, actor, action, detail, prev_hash, hash)
    VALUES (p_seq, p_tenant, p_ts, p_actor, p_action, p_detail, p_prev_hash, p_hash);
END $$""",
    *_version_6_policies(),
    "DROP POLICY tenant_read ON tachograph.read_policy",
    "DROP POLICY owner_all ON tachograph.read_policy",
    "ALTER TABLE tachograph.read_policy NO FORCE ROW LEVEL SECURITY",
    "ALTER TABLE tachograph.read_policy DISABLE ROW LEVEL SECURITY",
    "DROP FUNCTION tachograph.may_act_for(text)",
    "DROP TABLE tachograph.tenant_logins",
    "GRANT EXECUTE ON FUNCTION tachograph.run_deleted(text, text) TO PUBLIC",
]

# What version 1 had and version 2 has not: built from an installed version 2, as the owner.
V1_SHAPE = [
    *V6_SHAPE,
    *(f"DROP TRIGGER payloads_have_events ON tachograph.{t}" for t in ("payloads", *PARTITIONS)),
    "ALTER TABLE tachograph.events DROP CONSTRAINT events_event_id",
    "ALTER TABLE tachograph.events ADD UNIQUE (tenant, run_id, event_id)",
    "ALTER TABLE tachograph.events ADD UNIQUE (tenant, run_id, seq, type)",
    "CREATE INDEX events_event_id ON tachograph.events (event_id, run_id)",
    "ALTER TABLE tachograph.payloads ADD FOREIGN KEY (tenant, run_id, seq, type) "
    "REFERENCES tachograph.events (tenant, run_id, seq, type)",
    "DROP INDEX tachograph.runs_actor_started",  # version 3's
    "DROP INDEX tachograph.store_audit_action",  # version 4's
    "DROP INDEX tachograph.runs_status_started",  # version 5's
    # version 6's: a subject's erasure removes its links
    *(f"DROP TRIGGER erasure_audited ON tachograph.subjects_p{i}" for i in range(8)),
    "DROP FUNCTION tachograph.unlink_subject(text, text, bigint[])",
    """CREATE OR REPLACE FUNCTION tachograph.refuse_but_retention() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
BEGIN
    IF TG_OP = 'DELETE' AND tachograph.run_deleted(OLD.tenant, OLD.run_id) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'tachograph: % on %.% is refused: the log is append-only',
        TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = 'TG003';
END $$""",
    "UPDATE tachograph.meta SET value = '1' WHERE key = 'schema_version'",
]


@pytest.fixture
def db(pg_cluster: PgCluster, pg_database: str) -> str:
    return pg_database


@pytest.fixture
def app(pg_cluster: PgCluster, db: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_cluster.url(db, APP), create=False)
    yield store
    store.close()


def _raw(cluster: PgCluster, db: str, role: str) -> psycopg.Connection[Any]:
    return psycopg.connect(cluster.url(db, role), autocommit=True)


def _in_tenant(conn: psycopg.Connection[Any], tenant: str, sql: str, *args: Any) -> list[Any]:
    with conn.transaction():
        conn.execute("SELECT set_config('tachograph.tenant', %s, true)", (tenant,))
        cur = conn.execute(sql, args)
        return cur.fetchall() if cur.description else []


def _event_row(ev: Any) -> tuple[Any, ...]:
    return (ev.tenant, ev.run_id, ev.seq, ev.event_id, ev.ts, ev.type, ev.actor,
            ev.payload_digest, ev.prev_hash, ev.hash)  # fmt: skip


def _insert_event(conn: psycopg.Connection[Any], ev: Any) -> None:
    _in_tenant(
        conn, ev.tenant, f"INSERT INTO tachograph.events ({EVENT_COLUMNS}) VALUES "
        "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", *_event_row(ev),
    )  # fmt: skip


_INSERT_PAYLOAD = (
    "INSERT INTO tachograph.payloads (tenant, run_id, seq, type, body) "
    "VALUES ('acme', 'run-a', %s, %s, '\\x7b7d')"
)


# -- payloads are held to their events, once per statement --------------------------------------


@pytest.mark.parametrize("who", [APP, "superuser in replica mode", "owner"])
def test_a_payload_without_its_event_or_of_another_type_is_refused(
    pg_cluster: PgCluster, db: str, app: PostgresStore, who: str
) -> None:
    events = build_run("run-a", 3, tenant="acme")
    app.append(events[:2])
    _insert_event(_raw(pg_cluster, db, APP), events[2])  # an event without its payload row
    with _raw(pg_cluster, db, "postgres" if who != APP else APP) as conn:
        for seq, kind in ((7, "decision"), (2, "run.finished"), (1, "decision")):
            # no event at 7; the event at 2 is a decision; 1 has its payload (primary key)
            with pytest.raises(psycopg.errors.IntegrityError) as info, conn.transaction():
                if who == "owner":
                    conn.execute("SET LOCAL ROLE tachograph_owner")
                elif who != APP:  # replica mode skips ordinary triggers, not ALWAYS ones
                    conn.execute("SET LOCAL session_replication_role = replica")
                conn.execute("SELECT set_config('tachograph.tenant', 'acme', true)")
                conn.execute(_INSERT_PAYLOAD, (seq, kind))
            expected = "23505" if seq == 1 else "23503"
            assert info.value.sqlstate == expected, info.value
        # one statement with a good row and a bad one is refused whole
        with pytest.raises(psycopg.errors.ForeignKeyViolation, match="seq 9"):
            _in_tenant(
                conn, "acme", "INSERT INTO tachograph.payloads (tenant, run_id, seq, type) "
                "VALUES ('acme', 'run-a', 2, 'decision'), ('acme', 'run-a', 9, 'decision')",
            )  # fmt: skip
        _in_tenant(conn, "acme", _INSERT_PAYLOAD, 2, "decision")  # the right one goes in
    assert [e.seq for e in app.read("run-a")] == [0, 1, 2]


def test_the_check_is_one_trigger_per_table_named_by_a_statement(
    pg_cluster: PgCluster, db: str
) -> None:
    with _raw(pg_cluster, db, "postgres") as conn:
        triggers = conn.execute(
            "SELECT tgrelid::regclass::text, tgenabled FROM pg_trigger "
            "WHERE tgname = 'payloads_have_events' ORDER BY 1"
        ).fetchall()
        assert triggers == [(f"tachograph.{t}", "A") for t in sorted(["payloads", *PARTITIONS])]
        assert conn.execute(
            "SELECT count(*) FROM pg_constraint WHERE contype = 'f' "
            "AND connamespace = 'tachograph'::regnamespace"
        ).fetchone() == (0,)


def _wait_until_blocked(conn: psycopg.Connection[Any], pid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        if row == ("Lock",):
            return
        time.sleep(0.02)
    raise AssertionError(f"backend {pid} never waited for a lock")


@pytest.mark.parametrize("what", ["payload", "event"])
def test_retention_and_a_concurrent_insert_leave_no_orphan(
    pg_cluster: PgCluster, db: str, app: PostgresStore, what: str
) -> None:
    """Retention locks the run's summary row first: an insert into that run waits for it,
    then fails (no payload beside deleted events, no event in a deleted run)."""
    events = build_run("run-a", 5, tenant="acme")
    app.append(events[:4])
    writer = _raw(pg_cluster, db, APP)
    if what == "payload":
        _insert_event(writer, events[4])  # its payload comes later, in another transaction
    pid = writer.execute("SELECT pg_backend_pid()").fetchone()
    assert pid is not None
    failures: list[BaseException] = []

    def insert() -> None:
        try:
            if what == "payload":
                _in_tenant(writer, "acme", _INSERT_PAYLOAD, 4, "decision")
            else:
                _insert_event(writer, events[4])
        except BaseException as exc:  # the expected outcome, checked below
            failures.append(exc)

    with _raw(pg_cluster, db, PRIVACY_ROLE) as officer, _raw(pg_cluster, db, "postgres") as ops:
        with officer.transaction():
            officer.execute("SELECT set_config('tachograph.tenant', 'acme', true)")
            officer.execute("SELECT seq FROM tachograph.audit_head()")
            assert officer.execute("SELECT tachograph.delete_run_rows('run-a')").fetchone() == (
                4 if what == "event" else 5,
            )
            thread = threading.Thread(target=insert)
            thread.start()
            _wait_until_blocked(ops, pid[0])
            record = chain_audit(
                AuditEntry(action="retention.delete", actor="t", tenant="acme"),
                seq=0,
                prev_hash=None,
            )
            officer.execute(
                "SELECT tachograph.audit_append(%s, %s, %s, %s, %s, %s, %s, %s)",
                (record.seq, record.ts, record.tenant, record.actor, record.action, b"{}",
                 record.prev_hash, record.hash),
            )  # fmt: skip
        thread.join(30)
    writer.close()
    [failure] = failures
    assert isinstance(failure, psycopg.DatabaseError)
    assert failure.sqlstate == ("23503" if what == "payload" else "TG006"), failure
    with _raw(pg_cluster, db, APP) as conn:
        for table in ("events", "payloads", "runs"):
            rows = _in_tenant(conn, "acme", f"SELECT count(*) FROM tachograph.{table}")
            assert rows == [(0,)], table


# -- the event-id lookup ----------------------------------------------------------------------


def test_the_event_id_lookup_probes_its_index(
    pg_cluster: PgCluster, db: str, app: PostgresStore
) -> None:
    """A batch's ids are looked up by index, not by reading the tenant's rows."""
    for r in range(20):
        app.append(build_run(f"run-{r}", 100, tenant="acme"))
    probe = build_run("new", 100, tenant="acme")
    with _raw(pg_cluster, db, APP) as conn, conn.transaction():
        conn.execute("SELECT set_config('tachograph.tenant', 'acme', true)")
        plan = conn.execute(
            "EXPLAIN (ANALYZE, COSTS OFF, SUMMARY OFF, TIMING OFF) " + EVENT_ID_LOOKUP,
            ([e.event_id for e in probe], "acme"),
        ).fetchall()
    text = "\n".join(r[0] for r in plan)
    assert "Seq Scan" not in text, text
    assert "Rows Removed by Filter" not in text, text
    probes = [line for line in text.splitlines() if "Index Scan using" in line]
    assert len(probes) == 8, text  # one per partition, each probing the 100 ids
    assert all("event_id_run_id_tenant_key" in line for line in probes), text


# -- the upgrade from version 1 ---------------------------------------------------------------


def _shape(conn: psycopg.Connection[Any]) -> dict[str, list[Any]]:
    """What distinguishes one schema from another: constraints, indexes, triggers, functions."""
    return {
        "constraints": conn.execute(
            "SELECT conrelid::regclass::text, contype, pg_get_constraintdef(oid) "
            "FROM pg_constraint WHERE connamespace = 'tachograph'::regnamespace ORDER BY 1, 2, 3"
        ).fetchall(),
        "indexes": conn.execute(
            "SELECT tablename, indexdef FROM pg_indexes WHERE schemaname = 'tachograph' "
            "ORDER BY 1, 2"
        ).fetchall(),
        "triggers": conn.execute(
            "SELECT tgrelid::regclass::text, tgname, tgenabled FROM pg_trigger t "
            "JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE c.relnamespace = 'tachograph'::regnamespace ORDER BY 1, 2"
        ).fetchall(),
        "functions": conn.execute(
            "SELECT proname, prosecdef, md5(prosrc), proacl::text FROM pg_proc "
            "WHERE pronamespace = 'tachograph'::regnamespace ORDER BY 1"
        ).fetchall(),
        "policies": conn.execute(
            "SELECT tablename, policyname, cmd, roles::text, qual, with_check FROM pg_policies "
            "WHERE schemaname = 'tachograph' ORDER BY 1, 2"
        ).fetchall(),
        "tables": conn.execute(
            "SELECT relname, relrowsecurity, relforcerowsecurity, relacl::text FROM pg_class "
            "WHERE relnamespace = 'tachograph'::regnamespace AND relkind IN ('r', 'p') "
            "ORDER BY 1"
        ).fetchall(),
    }


def test_a_version_1_store_works_then_upgrades_to_what_a_new_install_is(
    pg_cluster: PgCluster, db: str
) -> None:
    admin = pg_cluster.url(db)
    with _raw(pg_cluster, db, "postgres") as conn:
        fresh = _shape(conn)
        with conn.transaction():
            conn.execute("SET LOCAL ROLE tachograph_owner")
            for statement in V1_SHAPE:
                conn.execute(statement)
        assert _shape(conn) != fresh
    old = build_run("run-a", 120, tenant="acme")
    with PostgresStore(pg_cluster.url(db, APP), create=False) as store:
        assert isinstance(store, PostgresStore)
        assert store.schema_version == 1  # read and written as it is by roles that cannot upgrade
        store.append(old[:60])
        store.append(old[60:])
    assert PostgresStore.install_schema(admin) is False  # present: upgraded in place
    with _raw(pg_cluster, db, "postgres") as conn:
        assert _shape(conn) == fresh
        assert upgrade(conn) == SCHEMA_VERSION  # again: nothing to do
    with PostgresStore(pg_cluster.url(db, APP), create=False) as store:
        assert isinstance(store, PostgresStore)
        assert store.schema_version == SCHEMA_VERSION == 7
        assert list(store.read("run-a")) == old
        more = build_run("run-a", 5, tenant="acme", after=(119, old[-1].hash))
        store.append(more)
        assert verify_stored(store, "run-a").ok
        assert store.run_info("run-a").events == 125


def test_a_subjects_erasure_on_an_older_schema_erases_and_says_the_links_stay(
    pg_cluster: PgCluster, db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A role that may not upgrade still erases a person's payloads on a schema without
    ``unlink_subject``; the links stay, with a warning that says how to remove them, and
    erasing the subject again after the upgrade does."""
    with _raw(pg_cluster, db, "postgres") as conn, conn.transaction():
        conn.execute("SET LOCAL ROLE tachograph_owner")
        for statement in V1_SHAPE:
            conn.execute(statement)
    events = build_run("run-a", 4, tenant="acme")
    with PostgresStore(pg_cluster.url(db, APP), create=False) as store:
        assert isinstance(store, PostgresStore)
        store.append(events)
        store.link_subjects("acme", "run-a", [(1, "cust-9")])
        with caplog.at_level("WARNING", logger="tachograph"):
            report = erase(store, subject="cust-9", tenant="acme", reason="art. 17")
        assert report.erased == 2  # run.started (its key secret) and the linked event
        assert "schema version 1 cannot remove a data subject's links" in caplog.text
        assert "install_schema" in caplog.text
        assert store.subject_events("acme", "cust-9") == [("run-a", 1)]
    assert PostgresStore.install_schema(pg_cluster.url(db)) is False  # upgraded in place
    with PostgresStore(pg_cluster.url(db, APP), create=False) as store:
        again = erase(store, subject="cust-9", tenant="acme", reason="art. 17")
        assert again.erased == 0
        assert store.subject_events("acme", "cust-9") == []
        records = list(store.audit_of("erase"))
        assert [r.detail.get("unlinked") for r in records] == [None, 1]


def test_the_upgrade_to_version_7_binds_each_login_to_the_tenants_it_could_reach(
    pg_cluster: PgCluster, db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Version 6 held no login to a tenant. The upgrade binds every login of the tachograph
    roles to every tenant the store holds (and logs it), so existing logins keep working;
    a tenant that comes later is the administrator's to bind, and a login of all tenants
    needs no binding."""
    with _raw(pg_cluster, db, "postgres") as conn, conn.transaction():
        conn.execute("SET LOCAL ROLE tachograph_owner")
        for statement in V6_SHAPE:
            conn.execute(statement)
        conn.execute("UPDATE tachograph.meta SET value = '6' WHERE key = 'schema_version'")
    acme, globex = build_run("a1", 3, tenant="acme"), build_run("g1", 3, tenant="globex")
    with PostgresStore(pg_cluster.url(db, APP), create=False) as app:
        app.append(acme + globex)
        app.append_seals("initech", [SealRow("i1", 0, b"leaf")])  # a tenant of seals alone
    with PostgresStore(pg_cluster.url(db, ACME_APP) + "?tenant=globex", create=False) as old:
        assert old.schema_version == 6
        assert [r.run_id for r in old.runs()] == ["g1"]  # what version 7 closes
    with caplog.at_level("WARNING", logger="tachograph"):
        assert PostgresStore.install_schema(pg_cluster.url(db)) is False  # upgraded
    assert f"{ACME_APP} -> acme, globex, initech" in caplog.text
    assert "revoke_login" in caplog.text
    with _raw(pg_cluster, db, "postgres") as conn:
        bound = conn.execute("SELECT role, tenant FROM tachograph.tenant_logins").fetchall()
    assert {t for r, t in bound if r == ACME_APP} == {"acme", "globex", "initech"}
    assert {t for r, t in bound if r == TENANT_ROLE} == {"acme", "globex", "initech"}
    assert APP not in {r for r, _ in bound}  # all tenants: no binding needed
    for events in (acme, globex):
        tenant, run_id = events[0].tenant, events[0].run_id
        url = pg_cluster.url(db, ACME_APP) + f"?tenant={tenant}"
        with PostgresStore(url, create=False) as store:
            assert store.schema_version == 7
            store.append(build_run(run_id, 2, tenant=tenant, after=(2, events[-1].hash)))
            assert verify_stored(store, run_id).ok
            assert [r.run_id for r in store.runs()] == [run_id]
    with PostgresStore(pg_cluster.url(db, APP), create=False) as app:
        assert {(r.tenant, r.events) for r in app.runs()} == {("acme", 5), ("globex", 5)}
    with pytest.raises(StoreError, match="may not act for tenant 'umbrella'"):
        PostgresStore(pg_cluster.url(db, ACME_APP) + "?tenant=umbrella", create=False)


# -- the optimistic append ------------------------------------------------------------------


def test_a_refused_pipelined_append_says_exactly_why_and_leaves_the_connection_clean(
    pg_cluster: PgCluster, db: str, app: PostgresStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch in order is sent in one pipeline; when the database refuses it (a head that
    moved, an id stored elsewhere) nothing is kept, the precise path names the conflict, and
    psycopg has nothing to warn about."""
    events = build_run("run-a", 4, tenant="acme")
    app.append(events[:2])
    other = build_run("run-b", 2, tenant="acme")
    with caplog.at_level(logging.WARNING, logger="psycopg"):
        with pytest.raises(DuplicateConflict):  # seq 1 is stored with other content
            app.append([dataclasses.replace(other[1], run_id="run-a", seq=1)])
        with pytest.raises(SequenceConflict):  # seq 3 after a head at 1: a gap
            app.append(events[3:])
        twin = dataclasses.replace(events[1], run_id="run-b", seq=0, prev_hash=None)
        with pytest.raises(DuplicateConflict, match="already stored"):  # run-a's seq 1's id
            app.append([twin])
        assert app.append(events[:2])[0].duplicate  # re-sent: the original receipts
        assert [r.seq for r in app.append(events[2:], durable=False)] == [2, 3]
    assert [r for r in caplog.records if r.name.startswith("psycopg")] == []
    assert app._conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert [e.seq for e in app.read("run-a")] == [0, 1, 2, 3]
    assert verify_stored(app, "run-a").ok


def test_install_schema_turns_a_driver_error_into_a_store_error() -> None:
    """docs/stores.md: a database driver's errors never escape a store; install_schema let
    psycopg's through (an unreachable server, a bad password), with the URL as given."""
    from tachograph.errors import StoreUnavailable

    with pytest.raises(StoreUnavailable, match="cannot install the tachograph schema") as info:
        PostgresStore.install_schema("postgresql://admin:CANARYpw@127.0.0.1:1/db")
    assert "CANARYpw" not in str(info.value)

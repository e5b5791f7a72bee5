"""What the PostgreSQL schema enforces by itself: append-only, the chain, roles, tenants and
purposes, and a layout that distributes by run_id.

Every client here connects as a login role that is neither the owner, nor a superuser, nor
BYPASSRLS (checked first): row-level security would prove nothing otherwise. Only the tests
that show the triggers hold even against the owner and a superuser connect as one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tachograph.errors import AppendRefused, PurposeDenied, RunNotFound, StoreError
from tachograph.record.event import new_event
from tachograph.store import verify_stored
from tachograph.store.audit import AuditEntry, link_problems
from tachograph.store.base import CheckpointRow, SealRow
from tachograph.store.postgres import PostgresStore
from tachograph.testing import build_run

from .conftest import APP, PRIVACY_ROLE, READER_ROLE, TENANT_ROLE, PgCluster


@pytest.fixture
def db(pg_cluster: PgCluster, pg_database: str) -> str:
    return pg_database


def _url(cluster: PgCluster, db: str, role: str, **query: str) -> str:
    url = cluster.url(db, role)
    if query:
        url += "?" + "&".join(f"{k}={v}" for k, v in query.items())
    return url


@pytest.fixture
def open_as(pg_cluster: PgCluster, db: str) -> Iterator[Any]:
    opened: list[PostgresStore] = []

    def opener(role: str, **query: str) -> PostgresStore:
        store = PostgresStore(_url(pg_cluster, db, role, **query), create=False)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()


def _raw(cluster: PgCluster, db: str, role: str) -> psycopg.Connection[Any]:
    return psycopg.connect(cluster.url(db, role), autocommit=True)


def _in_tenant(conn: psycopg.Connection[Any], tenant: str, sql: str, *args: Any) -> list[Any]:
    with conn.transaction():
        conn.execute("SELECT set_config('tachograph.tenant', %s, true)", (tenant,))
        cur = conn.execute(sql, args)
        return cur.fetchall() if cur.description else []


# -- the roles the tests connect as -----------------------------------------------------------


@pytest.mark.parametrize("role", [APP, TENANT_ROLE, PRIVACY_ROLE, READER_ROLE])
def test_clients_are_not_owner_superuser_or_bypassrls(
    pg_cluster: PgCluster, db: str, role: str
) -> None:
    with _raw(pg_cluster, db, role) as conn:
        row = conn.execute(
            "SELECT rolsuper, rolbypassrls, pg_has_role(current_user, 'tachograph_owner', "
            "'MEMBER') FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        assert row == (False, False, False)
        owners = conn.execute(
            "SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class "
            "WHERE relnamespace = 'tachograph'::regnamespace"
        ).fetchall()
        assert owners == [("tachograph_owner",)]
        owner = conn.execute(
            "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'tachograph_owner'"
        ).fetchone()
        assert owner == (False,)  # NOLOGIN


def test_the_writer_may_insert_and_select_only(pg_cluster: PgCluster, db: str) -> None:
    with _raw(pg_cluster, db, "postgres") as conn:
        for table, allowed in {
            "events": {"INSERT", "SELECT"},
            "payloads": {"INSERT", "SELECT"},
            "runs": {"SELECT"},
            "store_audit": {"SELECT"},
            "deleted_runs": {"SELECT"},
            "subjects": {"INSERT", "SELECT"},
            "seals": {"INSERT", "SELECT"},
            "checkpoints": {"INSERT", "SELECT"},
        }.items():
            granted = {
                p
                for p in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES")
                if conn.execute(
                    "SELECT has_table_privilege('tachograph_writer', %s, %s)",
                    (f"tachograph.{table}", p),
                ).fetchone()
                == (True,)
            }
            assert granted == allowed, table


# -- append-only ------------------------------------------------------------------------------


@pytest.fixture
def filled(open_as: Any) -> list[Any]:
    store = open_as(APP)
    events = build_run("run-a", 4, tenant="acme", status="ok")
    store.append(events)
    return events


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE tachograph.events SET actor = 'mallory' WHERE seq = 1",
        "UPDATE tachograph.events SET hash = hash",
        "DELETE FROM tachograph.events WHERE seq = 3",
        "TRUNCATE tachograph.events CASCADE",
        "TRUNCATE tachograph.events_p0 CASCADE",
        "UPDATE tachograph.payloads SET body = '\\x7b7d'::bytea WHERE seq = 1",
        "UPDATE tachograph.payloads SET body = NULL WHERE seq = 1",  # half an erasure
        "DELETE FROM tachograph.payloads WHERE seq = 1",
        "UPDATE tachograph.runs SET events = 2",
        "DELETE FROM tachograph.runs",
        "TRUNCATE tachograph.store_audit",
        "UPDATE tachograph.store_audit SET actor = 'mallory'",
        "DELETE FROM tachograph.store_audit",
        "UPDATE tachograph.seals SET leaf = '\\x00'::bytea",
        "DELETE FROM tachograph.seals",
        "TRUNCATE tachograph.checkpoints",
    ],
)
@pytest.mark.parametrize("who", ["superuser", "superuser in replica mode", "owner"])
def test_triggers_refuse_changes_even_to_the_owner_and_a_superuser(
    pg_cluster: PgCluster, db: str, filled: list[Any], open_as: Any, sql: str, who: str
) -> None:
    app = open_as(APP)
    app.append_audit(AuditEntry(action="read", actor="t", tenant="acme"))  # rows to refuse
    app.append_seals("acme", [SealRow("run-a", 3, b"leaf")])
    app.put_checkpoint(CheckpointRow("acme", 1, "note", "1 x"))
    with _raw(pg_cluster, db, "postgres") as conn:
        try:
            with conn.transaction():
                if who == "owner":
                    conn.execute("SET LOCAL ROLE tachograph_owner")
                elif who != "superuser":  # replica mode skips ordinary triggers, not ALWAYS
                    conn.execute("SET LOCAL session_replication_role = replica")
                conn.execute("SELECT set_config('tachograph.tenant', 'acme', true)")
                changed = conn.execute(sql).rowcount
        except psycopg.DatabaseError as exc:
            refused: psycopg.DatabaseError | None = exc
        else:
            refused = None
        if refused is not None:
            assert refused.sqlstate == "TG003"
            assert "tachograph: " in str(refused)
        else:
            # The owner is held by FORCE ROW LEVEL SECURITY too: with no policy for UPDATE or
            # DELETE of events it sees no row to change. A superuser always meets the trigger.
            assert who == "owner", f"{who} was not refused"
            assert changed in (0, -1)
    store = open_as(APP)
    assert store.verify("run-a").ok
    assert store.count_events() == 4
    assert list(store.read("run-a")) == filled


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE tachograph.events SET actor = 'mallory'",
        "DELETE FROM tachograph.events",
        "TRUNCATE tachograph.events",
        "UPDATE tachograph.payloads SET body = NULL, salt = NULL",
        "UPDATE tachograph.runs SET events = 9",
        "SELECT tachograph.erase_payloads('run-a', '{1}')",
        "SELECT tachograph.delete_run_rows('run-a')",
        "INSERT INTO tachograph.store_audit (seq, tenant, ts, actor, action, detail, hash) "
        "VALUES (0, 'acme', 'x', 'x', 'x', '\\x7b7d', 'x')",
    ],
)
def test_the_writer_has_no_right_to_change_anything(
    pg_cluster: PgCluster, db: str, filled: list[Any], sql: str
) -> None:
    with (
        _raw(pg_cluster, db, TENANT_ROLE) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        _in_tenant(conn, "acme", sql)


def test_the_database_enforces_the_chain_for_raw_inserts(
    pg_cluster: PgCluster, db: str, filled: list[Any]
) -> None:
    ev = build_run("run-a", 6, tenant="acme")[5]  # seq 5 after a head at seq 3: a gap
    columns = "tenant, run_id, seq, event_id, ts, type, actor, payload_digest, prev_hash, hash"
    values = (ev.tenant, ev.run_id, ev.seq, ev.event_id, ev.ts, ev.type, ev.actor,
              ev.payload_digest, ev.prev_hash, ev.hash)  # fmt: skip
    with _raw(pg_cluster, db, APP) as conn:
        with pytest.raises(psycopg.DatabaseError, match="does not follow") as info:
            _in_tenant(
                conn, "acme", f"INSERT INTO tachograph.events ({columns}) VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", *values,
            )  # fmt: skip
        assert info.value.sqlstate == "TG001"
        forged = (*values[:2], 4, *values[3:8], filled[2].hash, values[9])  # seq 4, wrong link
        with pytest.raises(psycopg.DatabaseError, match="does not follow"):
            _in_tenant(
                conn, "acme", f"INSERT INTO tachograph.events ({columns}) VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", *forged,
            )  # fmt: skip


# -- erasure and retention: only through the SECURITY DEFINER functions, audited ---------------


def _entry(action: str = "erase") -> AuditEntry:
    return AuditEntry(action=action, actor="officer 7", tenant="acme", detail={"reason": "r17"})


def test_erasure_through_the_privacy_role_nulls_payload_and_salt_and_is_audited(
    open_as: Any, filled: list[Any]
) -> None:
    officer = open_as(PRIVACY_ROLE, tenant="acme")
    assert officer.erase("acme", "run-a", [1], audit=_entry()) == 1
    assert officer.erase("acme", "run-a", [1], audit=_entry()) == 0  # nothing left to erase
    report = verify_stored(officer, "run-a")
    assert report.ok, report.render()
    assert report.erased == (1,)
    stored = list(officer.read("run-a"))
    assert (stored[1].payload, stored[1].salt) == (None, None)
    assert stored[2].payload == filled[2].payload
    [record] = list(officer.read_audit())
    assert (record.action, record.actor, record.tenant) == ("erase", "officer 7", "acme")
    assert record.detail == {"reason": "r17", "run_id": "run-a", "seqs": [1]}
    assert link_problems([record]) == []
    with pytest.raises(StoreError):
        open_as(TENANT_ROLE, tenant="acme").erase("acme", "run-a", [2], audit=_entry())
    with pytest.raises(StoreError):  # a store opened for acme erases nothing elsewhere
        officer.erase("globex", "run-a", [2], audit=_entry())


def test_a_subjects_links_go_only_through_unlink_subject_and_only_with_a_record(
    pg_cluster: PgCluster, db: str, open_as: Any, filled: list[Any]
) -> None:
    """The links name the person: a subject's erasure removes them (``unlink_subject``, the
    privacy role's alone), only links to erased events (a link is never dropped to hide a
    person's data from a later erasure), and the database commits their removal only beside
    a record of the store audit, as it does an erasure."""
    writer = open_as(APP, tenant="acme")
    writer.link_subjects("acme", "run-a", [(1, "cust-9"), (2, "cust-9")])
    officer = open_as(PRIVACY_ROLE, tenant="acme")

    def unlink_beside_a_read_record(cur: Any) -> Any:
        officer._audit_in(cur, _entry("read"))
        cur.execute("SELECT tachograph.unlink_subject('run-a', 'cust-9', '{1, 2}')")
        return cur.fetchone()

    assert officer._write("acme", unlink_beside_a_read_record) == (0,)  # payloads still there
    assert officer.erase("acme", "run-a", [1], audit=_entry()) == 1  # no unlink asked
    with _raw(pg_cluster, db, PRIVACY_ROLE) as conn:
        with pytest.raises(psycopg.DatabaseError, match="without a record") as info:
            _in_tenant(conn, "acme", "SELECT tachograph.unlink_subject('run-a', 'cust-9', '{1}')")
        assert info.value.sqlstate == "TG003"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _in_tenant(conn, "acme", "DELETE FROM tachograph.subjects")
    with _raw(pg_cluster, db, TENANT_ROLE) as conn:  # a writer without the privacy role
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _in_tenant(conn, "acme", "SELECT tachograph.unlink_subject('run-a', 'cust-9', '{1}')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _in_tenant(conn, "acme", "DELETE FROM tachograph.subjects")
    with _raw(pg_cluster, db, "postgres") as conn:  # the owner's mistake, not only a role's
        for sql in ("DELETE FROM tachograph.subjects", "UPDATE tachograph.subjects SET seq = 9"):
            with pytest.raises(psycopg.DatabaseError, match="append-only"):
                conn.execute(sql)
    assert writer.subject_events("acme", "cust-9") == [("run-a", 1), ("run-a", 2)]
    assert officer.erase("acme", "run-a", [1], audit=_entry(), unlink="cust-9") == 0
    assert writer.subject_events("acme", "cust-9") == [("run-a", 2)]
    records = list(officer.audit_of("erase"))
    assert [r.detail for r in records] == [
        {"reason": "r17", "run_id": "run-a", "seqs": [1]},
        {"reason": "r17", "run_id": "run-a", "seqs": [], "unlinked": 1},
    ]


def test_an_erasure_without_its_audit_record_does_not_commit(
    pg_cluster: PgCluster, db: str, filled: list[Any]
) -> None:
    with _raw(pg_cluster, db, PRIVACY_ROLE) as conn:
        with pytest.raises(psycopg.DatabaseError, match="without a record") as info:
            _in_tenant(conn, "acme", "SELECT tachograph.erase_payloads('run-a', '{1, 2}')")
        assert info.value.sqlstate == "TG003"
        with pytest.raises(psycopg.DatabaseError, match="without a record"):
            _in_tenant(conn, "acme", "SELECT tachograph.delete_run_rows('run-a')")
        with pytest.raises(psycopg.DatabaseError, match="does not follow the audit head"):
            _in_tenant(
                conn, "acme", "SELECT tachograph.audit_append(5, 't', 'acme', 'a', 'erase', "
                "'\\x7b7d', NULL, 'h')",
            )  # fmt: skip
        # a record of a read (or of another tenant) in the same transaction does not
        # stand for the erasure's record
        with pytest.raises(psycopg.DatabaseError, match="without a record"):  # noqa: SIM117
            with conn.transaction():
                conn.execute("SELECT set_config('tachograph.tenant', 'acme', true)")
                seq, head = conn.execute("SELECT seq, hash FROM tachograph.audit_head()").fetchone()
                conn.execute(
                    "SELECT tachograph.audit_append(%s, 't', 'acme', 'a', 'read', '\\x7b7d', "
                    "%s, 'h')",
                    (seq + 1, head),
                )
                conn.execute("SELECT tachograph.erase_payloads('run-a', '{1}')")
    with _raw(pg_cluster, db, APP) as conn:
        _in_tenant(conn, "acme", "SELECT 1")
        rows = _in_tenant(
            conn, "acme", "SELECT count(*) FROM tachograph.payloads WHERE body IS NULL"
        )
        assert rows == [(0,)]


def test_retention_deletes_a_run_audited_and_its_id_stays_taken(open_as: Any) -> None:
    app = open_as(APP)
    app.append(build_run("old", 3, tenant="acme") + build_run("old", 3, tenant="globex"))
    app.link_subjects("acme", "old", [(1, "p")])
    officer = open_as(PRIVACY_ROLE, tenant="acme")
    assert officer.delete_run("acme", "old", audit=_entry("retention.delete")) == 3
    with pytest.raises(RunNotFound):
        app.run_info("old", tenant="acme")
    assert verify_stored(app, "old", tenant="globex").ok
    assert app.subject_events("acme", "p") == []
    with pytest.raises(AppendRefused, match="deleted by retention"):
        app.append(build_run("old", 1, tenant="acme"))
    [record] = list(app.read_audit())
    assert (record.action, record.detail["events"]) == ("retention.delete", 3)
    # audit_of reads in the named tenant's scope: a role bound to the tenant it sets sees
    # acme's deletion through a store not confined to any tenant (in the scope '*' it would
    # see nothing, and the seal verdict would call the deleted run removed) ...
    assert list(app.audit_of("retention.delete", tenant="acme")) == [record]
    assert list(app.audit_of("retention.delete", tenant="globex")) == []
    tenant_role = open_as(TENANT_ROLE)
    assert list(tenant_role.audit_of("retention.delete", tenant="acme")) == [record]
    assert list(tenant_role.audit_of("retention.delete", tenant="globex")) == []
    # ... and a store confined to another tenant is refused, as by every read.
    with pytest.raises(StoreError, match="confined to tenant 'globex'"):
        list(open_as(TENANT_ROLE, tenant="globex").audit_of("retention.delete", tenant="acme"))


def test_seal_logs_are_per_tenant_and_gapless(pg_cluster: PgCluster, db: str, open_as: Any) -> None:
    acme = open_as(TENANT_ROLE, tenant="acme")
    assert acme.append_seals("acme", [SealRow("r", 0, b"a"), SealRow("r", 1, b"b")]) == 0
    globex = open_as(TENANT_ROLE, tenant="globex")
    assert globex.seal_count("globex") == 0
    with pytest.raises(StoreError, match="confined to tenant 'globex'"):
        globex.seal_count("acme")  # the store names no other tenant than its own
    with _raw(pg_cluster, db, TENANT_ROLE) as conn:
        assert _in_tenant(conn, "globex", "SELECT count(*) FROM tachograph.seals") == [(0,)]
        with pytest.raises(psycopg.DatabaseError, match="gap") as info:
            _in_tenant(conn, "acme", "INSERT INTO tachograph.seals VALUES ('acme', 3, 'r', 3, 'x')")
        assert info.value.sqlstate == "TG001"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # row-level security
            _in_tenant(
                conn, "acme", "INSERT INTO tachograph.seals VALUES ('globex', 0, 'r', 0, 'x')"
            )
    assert acme.seal_count("acme") == 2


# -- tenants ----------------------------------------------------------------------------------


def test_a_cross_tenant_read_returns_nothing(pg_cluster: PgCluster, db: str, open_as: Any) -> None:
    acme = open_as(TENANT_ROLE, tenant="acme")
    acme.append(build_run("secret", 3, tenant="acme"))
    globex = open_as(TENANT_ROLE, tenant="globex")
    assert globex.runs() == []
    assert globex.count_events() == 0
    with pytest.raises(RunNotFound):
        list(globex.read("secret"))
    with pytest.raises(StoreError, match="confined to tenant 'globex'"):
        list(globex.read("secret", tenant="acme"))  # the store never sets another tenant
    assert [i.run_id for i in acme.runs()] == ["secret"]
    with _raw(pg_cluster, db, TENANT_ROLE) as conn:
        for table, rows in (("events", 3), ("payloads", 3), ("runs", 1)):
            sql = f"SELECT count(*) FROM tachograph.{table}"
            assert _in_tenant(conn, "globex", sql) == [(0,)]
            assert _in_tenant(conn, "*", sql) == [(0,)]  # '*' needs tachograph_all_tenants
            assert _in_tenant(conn, "acme", sql) == [(rows,)]
        with conn.transaction():  # no tenant set at all: nothing
            assert conn.execute("SELECT count(*) FROM tachograph.events").fetchone() == (0,)


def test_a_cross_tenant_write_fails(pg_cluster: PgCluster, db: str, open_as: Any) -> None:
    globex = open_as(TENANT_ROLE, tenant="globex")
    with pytest.raises(StoreError, match="confined to tenant 'globex'"):
        globex.append(build_run("intrusion", 2, tenant="acme"))  # refused before it is sent
    assert open_as(APP).count_events() == 0
    ev = build_run("intrusion", 1, tenant="acme")[0]
    with (
        _raw(pg_cluster, db, TENANT_ROLE) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"),
    ):
        if True:
            _in_tenant(
                conn, "globex",
                "INSERT INTO tachograph.events (tenant, run_id, seq, event_id, ts, type, actor, "
                "payload_digest, hash) VALUES (%s, %s, 0, %s, %s, %s, %s, %s, %s)",
                ev.tenant, ev.run_id, ev.event_id, ev.ts, ev.type, ev.actor,
                ev.payload_digest, ev.hash,
            )  # fmt: skip


# -- purposes ---------------------------------------------------------------------------------


@pytest.fixture
def purposes(pg_cluster: PgCluster, db: str) -> None:
    with _raw(pg_cluster, db, "postgres") as conn:
        conn.execute(
            "INSERT INTO tachograph.read_policy (tenant, purpose, type) VALUES "
            "('*', 'analytics', 'decision'), ('*', 'analytics', 'run.finished'), "
            "('*', 'analytics', 'run.started'), ('acme', 'support', '*')"
        )


def test_a_read_for_a_denied_purpose_is_refused_and_audited(
    pg_cluster: PgCluster, db: str, open_as: Any, purposes: None
) -> None:
    app = open_as(APP)
    app.append(build_run("r1", 4, tenant="acme", status="ok"))
    model = build_run("r2", 2, tenant="acme")
    app.append(model)
    analytics = open_as(TENANT_ROLE, tenant="acme", purpose="analytics")
    assert analytics.verify("r1").ok  # every type of r1 is granted to analytics
    assert len(list(analytics.read("r1"))) == 4
    marketing = open_as(TENANT_ROLE, tenant="acme", purpose="marketing")
    with pytest.raises(PurposeDenied) as info:
        list(marketing.read("r1"))
    err = info.value
    assert (err.run_id, err.tenant, err.purpose) == ("r1", "acme", "marketing")
    assert err.what == "payloads of type decision, run.finished, run.started"
    assert isinstance(err, StoreError)
    with pytest.raises(PurposeDenied):
        marketing.verify("r1")
    # The envelopes stay readable (listing, heads); only payloads are refused.
    assert marketing.run_info("r1").events == 4
    audit = list(open_as(PRIVACY_ROLE, tenant="acme").read_audit())
    assert [(a.action, a.detail["purpose"], a.actor) for a in audit] == [
        ("read.denied", "marketing", TENANT_ROLE),
        ("read.denied", "marketing", TENANT_ROLE),
    ]
    assert audit[0].detail["types"] == ["decision", "run.finished", "run.started"]
    assert link_problems(audit) == []
    # support may read everything in acme, but not in globex
    assert open_as(TENANT_ROLE, tenant="acme", purpose="support").verify("r2").ok
    app.append(build_run("g1", 2, tenant="globex"))
    with pytest.raises(PurposeDenied):
        list(open_as(TENANT_ROLE, tenant="globex", purpose="support").read("g1"))


def test_raw_sql_reads_of_denied_payloads_are_errors_not_gaps(
    pg_cluster: PgCluster, db: str, open_as: Any, purposes: None
) -> None:
    open_as(APP).append(build_run("r1", 3, tenant="acme"))

    def payloads(purpose: str) -> list[Any]:
        with _raw(pg_cluster, db, TENANT_ROLE) as conn, conn.transaction():
            conn.execute("SELECT set_config('tachograph.tenant', 'acme', true)")
            conn.execute("SELECT set_config('tachograph.purpose', %s, true)", (purpose,))
            return conn.execute("SELECT seq FROM tachograph.payloads ORDER BY seq").fetchall()

    assert payloads("analytics") == [(0,), (1,), (2,)]
    with pytest.raises(psycopg.DatabaseError, match="may not read") as info:
        payloads("marketing")
    assert info.value.sqlstate == "TG004"


# -- a schema that distributes ------------------------------------------------------------------


def test_every_unique_key_and_index_includes_run_id_and_tables_are_partitioned(
    pg_cluster: PgCluster, db: str
) -> None:
    """Per-run tables are keyed and partitioned by run_id; the seal log by tenant; the store
    audit and the logins' tenants are small tables (reference tables in Citus)."""
    with _raw(pg_cluster, db, "postgres") as conn:
        indexes = conn.execute(
            "SELECT c.relname, i.relname, pg_get_indexdef(x.indexrelid) FROM pg_index x "
            "JOIN pg_class c ON c.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid "
            "WHERE c.relnamespace = 'tachograph'::regnamespace "
            "AND c.relname NOT IN ('meta', 'read_policy', 'tenant_logins')"
        ).fetchall()
        assert len(indexes) > 20
        for table, index, definition in indexes:
            if table.startswith(("seals", "checkpoints")):
                assert "(tenant," in definition, (table, index, definition)
            elif not table.startswith("store_audit"):
                assert "run_id" in definition, (table, index, definition)
        keys = conn.execute(
            "SELECT c.relname, pg_get_partkeydef(c.oid) FROM pg_partitioned_table p "
            "JOIN pg_class c ON c.oid = p.partrelid ORDER BY 1"
        ).fetchall()
        assert keys == [
            ("checkpoints", "HASH (tenant)"),
            ("deleted_runs", "HASH (run_id)"),
            ("events", "HASH (run_id)"),
            ("payloads", "HASH (run_id)"),
            ("runs", "HASH (run_id)"),
            ("seals", "HASH (tenant)"),
            ("subjects", "HASH (run_id)"),
        ]
        for (definition,) in conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE contype = 'f' "
            "AND connamespace = 'tachograph'::regnamespace"
        ).fetchall():
            left, right = definition.split("REFERENCES")
            assert "run_id" in left, definition
            assert "run_id" in right, definition
        assert conn.execute(
            "SELECT count(*) FROM pg_sequences WHERE schemaname = 'tachograph'"
        ).fetchone() == (0,)
        types = dict(
            conn.execute(
                "SELECT table_name || '.' || column_name, data_type "
                "FROM information_schema.columns WHERE table_schema = 'tachograph' "
                "AND table_name IN ('events', 'payloads')"
            ).fetchall()
        )
        assert types["payloads.body"] == "bytea"
        assert "jsonb" not in types.values()


def test_payload_bytes_are_kept_exactly(open_as: Any) -> None:
    store = open_as(APP)
    raw = b'{"zeta":1,"alpha":{"b":2,"a":1}}'  # not sorted: jsonb would reorder it
    first = new_event(
        run_id="run-a", seq=0, type="run.started", actor="agent",
        payload={"zeta": 1, "alpha": {"b": 2, "a": 1}}, prev_hash=None,
    )  # fmt: skip
    first = dataclasses.replace(first, payload_bytes=raw)
    store.append([first])
    [stored] = list(store.read("run-a", decode=False))
    assert stored.payload_bytes == raw
    assert store.verify("run-a").ok

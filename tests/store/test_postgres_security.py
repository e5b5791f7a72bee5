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

from tachograph.errors import PurposeDenied, RunNotFound, StoreError
from tachograph.events import new_event
from tachograph.store.postgres import PostgresStore
from tachograph.testing import build_run, fixed_ts

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
    ],
)
@pytest.mark.parametrize("who", ["superuser", "superuser in replica mode", "owner"])
def test_triggers_refuse_changes_even_to_the_owner_and_a_superuser(
    pg_cluster: PgCluster, db: str, filled: list[Any], open_as: Any, sql: str, who: str
) -> None:
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
        "SELECT tachograph.erase_payload('run-a', 1, 'no right to')",
    ],
)
def test_the_writer_has_no_right_to_change_anything(
    pg_cluster: PgCluster, db: str, filled: list[Any], sql: str
) -> None:
    with _raw(pg_cluster, db, APP) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
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


def test_erasure_through_the_privacy_role_nulls_payload_and_salt_and_is_audited(
    open_as: Any, filled: list[Any]
) -> None:
    officer = open_as(PRIVACY_ROLE, tenant="acme")
    assert officer.erase("run-a", 1, reason="subject request 17") is True
    assert officer.erase("run-a", 1, reason="again") is False  # nothing left to erase
    report = officer.verify("run-a")
    assert report.ok, report.render()
    assert report.erased == (1,)
    stored = list(officer.read("run-a"))
    assert (stored[1].payload, stored[1].salt) == (None, None)
    assert stored[2].payload == filled[2].payload
    audit = officer.audit(run_id="run-a")
    assert [(a["action"], a["seq"], a["detail"]["erased"]) for a in audit] == [
        ("erase", 1, 1),
        ("erase", 1, 0),
    ]
    assert audit[0]["detail"]["reason"] == "subject request 17"
    assert audit[0]["actor"] == PRIVACY_ROLE
    with pytest.raises(StoreError):
        open_as(APP, tenant="acme").erase("run-a", 2, reason="the writer may not")


def test_retention_erases_old_payloads_of_one_tenant(open_as: Any) -> None:
    app = open_as(APP)
    old = build_run("old", 3, tenant="acme", ts=fixed_ts)
    new = build_run("new", 3, tenant="acme", ts=lambda seq: fixed_ts(3600 + seq))
    other = build_run("other", 3, tenant="globex", ts=fixed_ts)
    app.append(old + new + other)
    officer = open_as(PRIVACY_ROLE, tenant="acme")
    assert officer.apply_retention(fixed_ts(1800), tenant="acme", reason="30 days") == 3
    assert app.verify("old", tenant="acme").erased == (0, 1, 2)
    assert app.verify("new", tenant="acme").erased == ()
    assert app.verify("other", tenant="globex").erased == ()
    [entry] = officer.audit(tenant="acme")
    assert (entry["action"], entry["detail"]["erased"]) == ("retention", 3)


# -- tenants ----------------------------------------------------------------------------------


def test_a_cross_tenant_read_returns_nothing(pg_cluster: PgCluster, db: str, open_as: Any) -> None:
    acme = open_as(TENANT_ROLE, tenant="acme")
    acme.append(build_run("secret", 3, tenant="acme"))
    globex = open_as(TENANT_ROLE, tenant="globex")
    assert globex.runs() == []
    assert globex.count_events() == 0
    with pytest.raises(RunNotFound):
        list(globex.read("secret"))
    with pytest.raises(RunNotFound):
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
    with pytest.raises(StoreError, match="row-level security"):
        globex.append(build_run("intrusion", 2, tenant="acme"))
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
    assert set(err.types) == {"decision", "run.finished", "run.started"}
    assert isinstance(err, StoreError)
    with pytest.raises(PurposeDenied):
        marketing.verify("r1")
    # The envelopes stay readable (listing, heads); only payloads are refused.
    assert marketing.run_info("r1").events == 4
    audit = open_as(PRIVACY_ROLE, tenant="acme").audit(run_id="r1")
    assert [(a["action"], a["purpose"], a["actor"]) for a in audit] == [
        ("read.denied", "marketing", TENANT_ROLE),
        ("read.denied", "marketing", TENANT_ROLE),
    ]
    assert audit[0]["detail"]["types"] == ["decision", "run.finished", "run.started"]
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
    with _raw(pg_cluster, db, "postgres") as conn:
        indexes = conn.execute(
            "SELECT c.relname, i.relname, pg_get_indexdef(x.indexrelid) FROM pg_index x "
            "JOIN pg_class c ON c.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid "
            "WHERE c.relnamespace = 'tachograph'::regnamespace "
            "AND c.relname NOT IN ('meta', 'read_policy')"
        ).fetchall()
        assert len(indexes) > 20
        for table, index, definition in indexes:
            assert "run_id" in definition, (table, index, definition)
        keys = conn.execute(
            "SELECT c.relname, pg_get_partkeydef(c.oid) FROM pg_partitioned_table p "
            "JOIN pg_class c ON c.oid = p.partrelid ORDER BY 1"
        ).fetchall()
        assert keys == [
            ("events", "HASH (run_id)"),
            ("payloads", "HASH (run_id)"),
            ("runs", "HASH (run_id)"),
            ("store_audit", "HASH (run_id)"),
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

"""The database binds logins to tenants: a login bound to acme reaches nothing of globex,
whatever tenant it sets (the ``tachograph.tenant`` setting in raw SQL, ``?tenant=`` in the
URL, ``tenant=`` of a call), with its own privileges; its own tenant works, and a login of
all tenants works across them. ``grant_login`` binds and ``revoke_login`` unbinds.

Every client connects as a login that is neither owner nor superuser nor BYPASSRLS (see
test_postgres_security.py); the data of both tenants is written by the all-tenants login.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tachograph.errors import RunNotFound, StoreError
from tachograph.store import verify_stored
from tachograph.store.audit import AuditEntry, link_problems
from tachograph.store.base import CheckpointRow, SealRow
from tachograph.store.postgres import PostgresStore
from tachograph.testing import build_run

from .conftest import ACME_APP, ACME_OFFICER, APP, OPS, READER_ROLE, PgCluster

TACHO = [sys.executable, "-c", "import sys; from tachograph.cli import main; main(sys.argv[1:])"]
COLUMNS = "tenant, run_id, seq, event_id, ts, type, actor, payload_digest, prev_hash, hash"


@pytest.fixture
def db(pg_cluster: PgCluster, pg_database: str) -> str:
    return pg_database


@pytest.fixture
def open_as(pg_cluster: PgCluster, db: str) -> Iterator[Any]:
    opened: list[PostgresStore] = []

    def opener(role: str, query: str = "") -> PostgresStore:
        store = PostgresStore(pg_cluster.url(db, role) + query, create=False)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()


@pytest.fixture
def two_tenants(open_as: Any) -> dict[str, list[Any]]:
    """A run in acme and one in globex, each with a subject link and a record in the store
    audit; globex's with a seal and a checkpoint."""
    app = open_as(APP)
    made = {}
    for tenant in ("acme", "globex"):
        events = build_run(f"run-{tenant}", 4, tenant=tenant, status="ok")
        app.append(events)
        app.link_subjects(tenant, events[0].run_id, [(1, f"cust-{tenant}")])
        if tenant == "globex":  # (a leaf that is not JSON fails verification: not acme's)
            app.append_seals(tenant, [SealRow(events[0].run_id, 3, b"leaf")])
            app.put_checkpoint(CheckpointRow(tenant, 1, "note", "1 x"))
        app.append_audit(AuditEntry(action="read", actor="t", tenant=tenant))
        made[tenant] = events
    return made


def _raw(cluster: PgCluster, db: str, role: str) -> psycopg.Connection[Any]:
    return psycopg.connect(cluster.url(db, role), autocommit=True)


def _in_tenant(conn: psycopg.Connection[Any], tenant: str, sql: str, *args: Any) -> list[Any]:
    with conn.transaction():
        conn.execute("SELECT set_config('tachograph.tenant', %s, true)", (tenant,))
        cur = conn.execute(sql, args)
        return cur.fetchall() if cur.description else []


def _globex_untouched(open_as: Any, made: dict[str, list[Any]]) -> None:
    app = open_as(APP)
    assert list(app.read("run-globex", tenant="globex")) == made["globex"]
    assert verify_stored(app, "run-globex", tenant="globex").ok
    assert app.seal_count("globex") == 1
    latest = app.latest_checkpoint("globex")
    assert latest is not None
    assert latest.note == "note"
    assert app.subject_events("globex", "cust-globex") == [("run-globex", 1)]
    assert [r.tenant for r in app.read_audit()] == ["acme", "globex"]
    assert {(r.tenant, r.run_id) for r in app.runs()} == {
        ("acme", "run-acme"),
        ("globex", "run-globex"),
    }


TABLES = (
    "events", "payloads", "runs", "subjects", "deleted_runs", "seals", "checkpoints",
    "store_audit",
)  # fmt: skip


# -- raw SQL, with the login's own privileges ---------------------------------------------------


@pytest.mark.parametrize("tenant", ["globex", "*", "", "nobody"])
@pytest.mark.parametrize("role", [ACME_APP, ACME_OFFICER, READER_ROLE])
def test_a_login_bound_to_acme_sees_nothing_elsewhere_whatever_tenant_it_sets(
    pg_cluster: PgCluster, db: str, two_tenants: dict[str, list[Any]], role: str, tenant: str
) -> None:
    with _raw(pg_cluster, db, role) as conn:
        for table in TABLES:
            sql = f"SELECT count(*) FROM tachograph.{table}"
            assert _in_tenant(conn, tenant, sql) == [(0,)], table
        assert _in_tenant(conn, "acme", "SELECT count(*) FROM tachograph.events") == [(4,)]
        assert _in_tenant(conn, "acme", "SELECT count(*) FROM tachograph.store_audit") == [(1,)]
        with conn.transaction():  # no tenant set at all
            assert conn.execute("SELECT count(*) FROM tachograph.runs").fetchone() == (0,)


def test_a_login_bound_to_acme_writes_nothing_in_globex(
    pg_cluster: PgCluster, db: str, open_as: Any, two_tenants: dict[str, list[Any]]
) -> None:
    [forged] = build_run("run-globex", 1, tenant="globex", after=(3, two_tenants["globex"][3].hash))
    event = (forged.tenant, forged.run_id, forged.seq, forged.event_id, forged.ts, forged.type,
             forged.actor, forged.payload_digest, forged.prev_hash, forged.hash)  # fmt: skip
    writes = [
        (f"INSERT INTO tachograph.events ({COLUMNS}) VALUES "
         "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", event),
        ("INSERT INTO tachograph.events (" + COLUMNS + ") VALUES "
         "(%s, 'run-new', 0, 'ev-new', %s, 'run.started', 'x', %s, NULL, 'h')",
         ("globex", forged.ts, forged.payload_digest)),
        ("INSERT INTO tachograph.subjects VALUES ('globex', 'run-globex', 2, 'p')", ()),
        ("INSERT INTO tachograph.seals VALUES ('globex', 1, 'run-globex', 3, 'bogus')", ()),
        ("INSERT INTO tachograph.checkpoints VALUES ('globex', 3, 'bogus', 'x')", ()),
    ]  # fmt: skip
    with _raw(pg_cluster, db, ACME_APP) as conn:
        for sql, args in writes:
            for tenant in ("globex", "acme", "*"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level"):
                    _in_tenant(conn, tenant, sql, *args)
    _globex_untouched(open_as, two_tenants)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT tachograph.erase_payloads('run-globex', '{1, 2}')",
        "SELECT tachograph.delete_run_rows('run-globex')",
        "SELECT tachograph.unlink_subject('run-globex', 'cust-globex', '{1}')",
        "SELECT tachograph.authorize_read('run-globex', 0)",
        "SELECT tachograph.audit_append(2, 't', 'globex', 'globex-dpo', 'erase', '\\x7b7d', "
        "%s, 'h')",
    ],
)
def test_the_definer_functions_refuse_a_tenant_the_login_may_not_act_for(
    pg_cluster: PgCluster, db: str, open_as: Any, two_tenants: dict[str, list[Any]], sql: str
) -> None:
    with _raw(pg_cluster, db, "postgres") as conn:
        head = conn.execute("SELECT hash FROM tachograph.store_audit WHERE seq = 1").fetchone()
    args = (head[0],) if "%s" in sql else ()
    with (
        _raw(pg_cluster, db, ACME_OFFICER) as conn,  # the privacy role, bound to acme
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not act for"),
        conn.transaction(),
    ):
        conn.execute("SELECT set_config('tachograph.tenant', 'globex', true)")
        conn.execute("SELECT seq FROM tachograph.audit_head()")
        conn.execute(sql, args)
    _globex_untouched(open_as, two_tenants)


def test_other_tenants_deletions_and_read_policies_are_not_shown(
    pg_cluster: PgCluster, db: str, open_as: Any, two_tenants: dict[str, list[Any]]
) -> None:
    open_as(OPS, "?tenant=globex").delete_run(
        "globex", "run-globex", audit=AuditEntry(action="retention.delete", actor="ops")
    )
    with _raw(pg_cluster, db, "postgres") as conn:
        conn.execute(
            "INSERT INTO tachograph.read_policy VALUES ('globex', 'support', '*'), "
            "('acme', 'support', 'decision')"
        )
    with _raw(pg_cluster, db, ACME_APP) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _in_tenant(conn, "acme", "SELECT tachograph.run_deleted('globex', 'run-globex')")
        policy = _in_tenant(conn, "acme", "SELECT tenant, purpose FROM tachograph.read_policy")
        assert sorted(policy) == [("*", "default"), ("acme", "support")]


def test_a_login_without_the_privacy_role_records_reads_alone(
    open_as: Any, two_tenants: dict[str, list[Any]]
) -> None:
    for role in (ACME_APP, READER_ROLE):
        store = open_as(role, "?tenant=acme")
        assert store.append_audit(AuditEntry(action="read", actor="x", tenant="acme")).seq > 0
        store.append_audit(AuditEntry(action="read.denied", actor="x", tenant="acme"))
        for action in ("erase", "retention.delete", "retention.override"):
            with pytest.raises(StoreError, match="may record reads only"):
                store.append_audit(AuditEntry(action=action, actor="dpo@acme", tenant="acme"))
    officer = open_as(ACME_OFFICER, "?tenant=acme")
    officer.append_audit(AuditEntry(action="retention.override", actor="dpo", tenant="acme"))
    actions = [r.action for r in open_as(APP).read_audit()]
    assert actions.count("retention.override") == 1
    assert "erase" not in actions
    assert "retention.delete" not in actions


# -- through the library ----------------------------------------------------------------------


def test_a_store_opened_for_a_tenant_the_login_may_not_act_for_is_refused(
    pg_cluster: PgCluster, open_as: Any, two_tenants: dict[str, list[Any]]
) -> None:
    for role in (ACME_APP, ACME_OFFICER, READER_ROLE):
        with pytest.raises(StoreError, match=f"login '{role}' may not act for tenant 'globex'"):
            open_as(role, "?tenant=globex")
        assert [r.run_id for r in open_as(role, "?tenant=acme").runs()] == ["run-acme"]


def test_naming_another_tenant_in_a_call_reaches_nothing(
    open_as: Any, two_tenants: dict[str, list[Any]]
) -> None:
    """A store opened with no tenant passes each call's tenant to the database, which holds
    the login to its own."""
    acme = open_as(ACME_APP)
    officer = open_as(ACME_OFFICER)
    # a login bound to one tenant that names none is that tenant's store (its listings
    # would otherwise be empty: '*' is for logins of all tenants) ...
    assert (acme.tenant, officer.tenant) == ("acme", "acme")
    assert [r.run_id for r in acme.runs()] == ["run-acme"]
    with pytest.raises(StoreError, match="confined to tenant 'acme'"):
        acme.runs(tenant="globex")
    # ... and a client that does not hold itself to it reaches nothing more: the database
    # holds the login to its tenant
    acme.tenant = officer.tenant = None
    gx = two_tenants["globex"]
    assert acme.runs(tenant="globex") == []
    assert acme.runs() == []
    with pytest.raises(RunNotFound):
        acme.run_info("run-globex", tenant="globex")
    with pytest.raises(StoreError):  # authorize_read refuses the tenant
        list(acme.read("run-globex", tenant="globex"))
    assert acme.read_seals("globex") == []
    assert acme.latest_checkpoint("globex") is None
    assert acme.subject_events("globex", "cust-globex") == []
    assert [r.tenant for r in acme.audit_of("read", tenant="globex")] == []
    refused = [
        lambda: acme.append(build_run("run-globex", 1, tenant="globex", after=(3, gx[3].hash))),
        lambda: acme.append(build_run("run-forged", 2, tenant="globex")),
        lambda: acme.append_seals("globex", [SealRow("run-globex", 3, b"bogus")]),
        lambda: acme.put_checkpoint(CheckpointRow("globex", 3, "bogus", "x")),
        lambda: acme.link_subjects("globex", "run-globex", [(2, "p")]),
        lambda: acme.append_audit(AuditEntry(action="read", actor="x", tenant="globex")),
        lambda: officer.erase(
            "globex", "run-globex", [1, 2], audit=AuditEntry(action="erase", actor="x")
        ),
        lambda: officer.delete_run(
            "globex", "run-globex", audit=AuditEntry(action="retention.delete", actor="x")
        ),
    ]
    for call in refused:
        with pytest.raises(StoreError):
            call()
    _globex_untouched(open_as, two_tenants)
    # its own tenant works, erasure included
    own = open_as(ACME_OFFICER, "?tenant=acme")
    own.append(build_run("run-acme", 1, tenant="acme", after=(3, two_tenants["acme"][3].hash)))
    assert own.erase("acme", "run-acme", [1], audit=AuditEntry(action="erase", actor="x")) == 1
    assert verify_stored(own, "run-acme").ok


def test_a_login_of_all_tenants_works_across_them(
    open_as: Any, two_tenants: dict[str, list[Any]]
) -> None:
    ops = open_as(OPS)
    assert {(r.tenant, r.run_id) for r in ops.runs()} == {
        ("acme", "run-acme"),
        ("globex", "run-globex"),
    }
    for tenant in ("acme", "globex"):
        store = open_as(OPS, f"?tenant={tenant}")
        erased = store.erase(
            tenant, f"run-{tenant}", [1], audit=AuditEntry(action="erase", actor="ops")
        )
        assert erased == 1
        assert verify_stored(store, f"run-{tenant}").erased == (1,)
    assert [r.action for r in ops.read_audit()] == ["read", "read", "erase", "erase"]


# -- granting and revoking ----------------------------------------------------------------------


@pytest.fixture
def login(pg_cluster: PgCluster, db: str) -> Iterator[str]:
    name = f"tacho_login_{uuid.uuid4().hex[:8]}"
    yield name
    with psycopg.connect(pg_cluster.admin, autocommit=True) as conn:
        conn.execute(f'DROP OWNED BY "{name}"; DROP ROLE IF EXISTS "{name}"')


def test_grant_and_revoke_bind_and_unbind_tenants(
    pg_cluster: PgCluster, db: str, open_as: Any, two_tenants: dict[str, list[Any]], login: str
) -> None:
    admin = pg_cluster.url(db)
    with pytest.raises(ValueError, match="needs tenants="):
        PostgresStore.grant_login(admin, login)
    with pytest.raises(ValueError, match="not a tenant"):
        PostgresStore.grant_login(admin, login, tenants=["*"])
    PostgresStore.grant_login(admin, login, tenants=["acme"])
    assert [r.run_id for r in open_as(login, "?tenant=acme").runs()] == ["run-acme"]
    with pytest.raises(StoreError, match="may not act for tenant 'globex'"):
        open_as(login, "?tenant=globex")
    PostgresStore.grant_login(admin, login, tenants=["globex"])  # adds a tenant
    assert [r.run_id for r in open_as(login, "?tenant=globex").runs()] == ["run-globex"]
    # bound to two tenants and naming none: each call names its tenant
    both = open_as(login)
    assert both.tenant is None
    assert [r.run_id for r in both.runs(tenant="acme")] == ["run-acme"]
    PostgresStore.revoke_login(admin, login, tenants=["acme"])
    with pytest.raises(StoreError, match="may not act for tenant 'acme'"):
        open_as(login, "?tenant=acme")
    globex = open_as(login, "?tenant=globex")
    assert [r.run_id for r in globex.runs()] == ["run-globex"]
    # bound to one and naming none: that tenant's store, whose listings are not empty
    assert open_as(login).tenant == "globex"
    PostgresStore.revoke_login(admin, login, tenants=["globex"])
    with pytest.raises(StoreError, match="is bound to no tenant"):
        open_as(login)  # its roles kept, no tenant: it could do nothing, said at once
    PostgresStore.revoke_login(admin, login)  # every tenant, and the roles
    with pytest.raises(StoreError):
        open_as(login, "?tenant=globex")
    with pytest.raises(StoreError, match="grant it tachograph_writer or tachograph_reader"):
        open_as(login)
    # a login of all tenants is not narrowed by unbinding: said, not silently ignored
    PostgresStore.grant_login(admin, login, all_tenants=True)
    with pytest.raises(StoreError, match="may act for every tenant"):
        PostgresStore.revoke_login(admin, login, tenants=["acme"])
    assert len(open_as(login).runs()) == 2


def test_a_login_is_bound_in_each_database_of_its_own(
    pg_cluster: PgCluster, db: str, open_as: Any, login: str
) -> None:
    other = pg_cluster.new_database()  # a copy of the template: the login is not bound there
    PostgresStore.grant_login(pg_cluster.url(db), login, tenants=["acme"])
    open_as(login, "?tenant=acme").append(build_run("r", 2, tenant="acme"))
    with pytest.raises(StoreError, match="may not act for tenant 'acme'"):
        PostgresStore(pg_cluster.url(other, login) + "?tenant=acme", create=False)


def test_the_audit_chain_stays_whole_across_refusals(
    open_as: Any, two_tenants: dict[str, list[Any]]
) -> None:
    """A refused record leaves the audit's head where it was: the next one chains on."""
    acme = open_as(ACME_APP, "?tenant=acme")
    with pytest.raises(StoreError):
        acme.append_audit(AuditEntry(action="erase", actor="x", tenant="acme"))
    with pytest.raises(StoreError):
        acme.append_audit(AuditEntry(action="read", actor="x", tenant="globex"))
    assert acme.append_audit(AuditEntry(action="read", actor="x", tenant="acme")).seq == 2
    records = list(open_as(APP).read_audit())
    assert [r.seq for r in records] == [0, 1, 2]
    assert link_problems(records) == []


# -- through tacho ----------------------------------------------------------------------------


def _tacho(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TACHO, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def test_tacho_with_acmes_login_and_another_tenant_in_the_url_is_refused(
    tmp_path: Path,
    child_env: dict[str, str],
    pg_cluster: PgCluster,
    db: str,
    open_as: Any,
    two_tenants: dict[str, list[Any]],
) -> None:
    base = pg_cluster.url(db, ACME_OFFICER)
    globex = ["--store", base + "?tenant=globex"]
    for args in (
        ("runs",),
        ("show", "run-globex"),
        ("verify", "--all"),
        ("export", "run-globex", "-o", str(tmp_path / "x.jsonl")),
        ("erase", "run-globex", "--seq", "1", "--reason", "x"),
    ):
        done = _tacho(child_env, tmp_path, *globex, *args)
        assert done.returncode != 0, (args, done.stdout)
        assert "may not act for tenant 'globex'" in done.stderr, (args, done.stderr)
        assert "run-globex" not in done.stdout
    # no tenant in the URL: a login bound to acme alone is acme's store, and globex named on
    # the command line is refused as another tenant is by any confined store
    anywhere = ["--store", base]
    listed = _tacho(child_env, tmp_path, *anywhere, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["run_id"] for r in json.loads(listed.stdout)["runs"]] == ["run-acme"]
    for args in (("runs", "--tenant", "globex"), ("show", "run-globex", "--tenant", "globex")):
        other = _tacho(child_env, tmp_path, *anywhere, *args)
        assert other.returncode == 3, other.stderr
        assert "confined to tenant 'acme'" in other.stderr
    _globex_untouched(open_as, two_tenants)
    # its own tenant works
    acme = ["--store", base + "?tenant=acme"]
    own = _tacho(child_env, tmp_path, *acme, "runs", "--json")
    assert own.returncode == 0, own.stderr
    assert [r["run_id"] for r in json.loads(own.stdout)["runs"]] == ["run-acme"]
    exported = _tacho(child_env, tmp_path, *acme, "export", "run-acme", "-o", "acme.jsonl")
    assert exported.returncode == 0, exported.stderr
    assert len((tmp_path / "acme.jsonl").read_text().splitlines()) == 4

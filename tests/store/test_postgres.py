"""The PostgreSQL store: the conformance suite, as a role that is not the owner."""

from __future__ import annotations

from pathlib import Path

import pytest

from tachograph.store import Store, open_store
from tachograph.testing.conformance import StoreConformance

from .conftest import APP, PgCluster, database_for


class TestPostgresStore(StoreConformance):
    stream_events = 50_000

    @pytest.fixture(autouse=True)
    def _cluster(self, pg_cluster: PgCluster) -> None:
        self.cluster = pg_cluster

    def make_store(self, tmp_path: Path) -> Store:
        return open_store(self.cluster.url(database_for(self.cluster, tmp_path), APP))


def test_runs_are_listed_in_byte_order_whatever_the_database_collation(
    pg_cluster: PgCluster,
) -> None:
    """In a database whose collation is a language's (ICU ``en-US``: case and punctuation
    weigh last), the runs are still listed, and verified, in the byte order of the other
    engines and of Python's ``sorted``."""
    import random
    import uuid

    import psycopg

    from tachograph.store import verify_all
    from tachograph.store.postgres import PostgresStore
    from tachograph.testing import build_run

    name = f"tacho_icu_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_cluster.admin, autocommit=True) as conn:
        if conn.info.server_version < 150000:
            pytest.skip("a database's ICU collation needs PostgreSQL 15")
        conn.execute(
            f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' "
            "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.utf8'"
        )
    pg_cluster.created.append(name)
    url = pg_cluster.url(name)
    PostgresStore.install_schema(url, partitions=2)
    ids = ["r-10", "r-9", "R-1", "r.2", "r:3", "a-b"]
    keys = [(tenant, run_id) for tenant in ("t-b", "T-a") for run_id in ids]
    with psycopg.connect(url) as conn:  # the database's own order is not byte order
        listed = [k for (k,) in conn.execute("SELECT unnest(%s::text[]) AS k ORDER BY k", [ids])]
    assert listed != sorted(ids)
    with PostgresStore(url) as store:
        for tenant, run_id in random.Random(5).sample(keys, len(keys)):
            store.append(build_run(run_id, 2, tenant=tenant))
        assert store.run_keys() == sorted(keys)
        assert [(r.tenant, r.run_id) for r in verify_all(store)] == sorted(keys)


def test_an_orphan_run_is_found_by_its_id_alone(pg_cluster: PgCluster, tmp_path: Path) -> None:
    """A run whose summary row is gone (its events kept) still resolves without its tenant:
    the events are asked when no summary row answers (and only then); an id two tenants
    hold so is ambiguous."""
    import psycopg

    from tachograph.errors import RunNotFound, StoreError
    from tachograph.testing import build_run

    db = database_for(pg_cluster, tmp_path)
    with open_store(pg_cluster.url(db, APP)) as store:
        store.append(build_run("run-o", 3, tenant="acme"))
        for tenant in ("acme", "globex"):
            store.append(build_run("run-two", 2, tenant=tenant))
    with psycopg.connect(pg_cluster.url(db, "postgres"), autocommit=True) as conn:
        # a superuser behind the store's back: its triggers keep summaries from going away
        tables = conn.execute(
            "SELECT oid::regclass::text FROM pg_class WHERE relkind IN ('r', 'p') "
            "AND relnamespace = 'tachograph'::regnamespace AND relname ~ '^runs(_p[0-9]+)?$'"
        ).fetchall()
        for (table,) in tables:
            conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
        conn.execute("DELETE FROM tachograph.runs WHERE run_id IN ('run-o', 'run-two')")
    with open_store(pg_cluster.url(db, APP)) as store:
        events = list(store.read("run-o"))
        assert [(e.tenant, e.seq) for e in events] == [("acme", 0), ("acme", 1), ("acme", 2)]
        with pytest.raises(StoreError, match="several tenants"):
            list(store.read("run-two"))
        with pytest.raises(RunNotFound):
            list(store.read("run-x"))


def test_a_store_connects_again_after_its_session_was_lost(
    pg_cluster: PgCluster, tmp_path: Path
) -> None:
    """A backend killed (a server restart, a dropped network): the call that met the loss
    fails, StoreUnavailable; the next one gets a new session. Every later call failed, and a
    service holding one store stopped recording after one blip of its database."""
    import psycopg

    from tachograph.errors import StoreUnavailable
    from tachograph.store.postgres import PostgresStore
    from tachograph.testing import build_run

    url = pg_cluster.url(database_for(pg_cluster, tmp_path), APP)
    with PostgresStore(url) as store:
        events = build_run("r-1", 6)
        store.append(events[:3])
        (pid,) = store._conn.execute("SELECT pg_backend_pid()").fetchone()
        with psycopg.connect(pg_cluster.admin, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        try:  # the call that meets the loss fails, unless the loss was seen before it
            store.append(events[3:])
        except StoreUnavailable:
            store.append(events[3:])  # a new session: the append goes through
        (again,) = store._conn.execute("SELECT pg_backend_pid()").fetchone()
        assert again != pid
        assert list(store.read("r-1")) == events
        assert store.verify("r-1").ok
    closed = PostgresStore(url)
    closed.close()
    with pytest.raises(Exception, match="closed"):  # closed by its owner: stays closed
        closed.runs()

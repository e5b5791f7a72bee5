"""A PostgreSQL server for the PostgreSQL store tests.

``TACHOGRAPH_TEST_PG`` (an admin DSN, a superuser: CI sets it) names a server to use; without
it a throwaway cluster is started on 127.0.0.1 when the server binaries are installed; else
the tests skip, saying why. Each test gets its own database, cloned from a template holding
the schema, and connects as a login role that is neither owner nor superuser nor BYPASSRLS.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from tachograph.store.postgres import PostgresStore  # noqa: E402
from tachograph.testing.pgserver import PgServer, find_bindir  # noqa: E402

APP = "tacho_app"  # writer, reader, privacy, all tenants: what the conformance suite needs
TENANT_ROLE = "tacho_tenant"  # writer + reader, bound to tenants acme and globex
PRIVACY_ROLE = "tacho_privacy_officer"  # reader + privacy (erasure, retention), bound to acme
READER_ROLE = "tacho_reader"  # reader only, bound to acme
ACME_APP = "tacho_acme_app"  # writer + reader, bound to acme alone
ACME_OFFICER = "tacho_acme_officer"  # writer, reader + privacy, bound to acme alone
OPS = "tacho_ops"  # reader + privacy for every tenant (all_tenants), bound to none


@dataclass
class PgCluster:
    admin: str
    """Superuser DSN of database ``postgres``."""
    template: str
    created: list[str]

    def url(self, database: str, user: str = "postgres") -> str:
        base = self.admin.rsplit("/", 1)[0]
        scheme, rest = base.split("://", 1)
        host = rest.rsplit("@", 1)[-1]
        return f"{scheme}://{user}@{host}/{database}"

    def new_database(self) -> str:
        name = f"tacho_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {self.template}")
        self.created.append(name)
        return name


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """The server, with the schema template and the login roles in place."""
    dsn = os.environ.get("TACHOGRAPH_TEST_PG")
    server = None
    if not dsn:
        if find_bindir() is None:
            pytest.skip(
                "no PostgreSQL: set TACHOGRAPH_TEST_PG to an admin DSN, or install the server "
                "binaries (initdb) so that the tests start a throwaway cluster"
            )
        # In a new directory of the system's temporary area, not under pytest's (mode 700):
        # the server may run as another, unprivileged user who must reach its files.
        server = PgServer.start()
        dsn = server.dsn
    # One template per session: parallel sessions (xdist workers sharing a CI server) each
    # install their own, and drop only what they created.
    template = f"tacho_template_{uuid.uuid4().hex[:8]}"
    cluster = PgCluster(dsn, template, [template])
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {template}")
        PostgresStore.install_schema(cluster.url(template), partitions=8)
        admin = cluster.url(template)
        PostgresStore.grant_login(admin, APP, all_tenants=True, privacy=True)
        PostgresStore.grant_login(admin, TENANT_ROLE, tenants=["acme", "globex"])
        PostgresStore.grant_login(admin, PRIVACY_ROLE, tenants=["acme"], writer=False, privacy=True)
        PostgresStore.grant_login(admin, READER_ROLE, tenants=["acme"], writer=False)
        PostgresStore.grant_login(admin, ACME_APP, tenants=["acme"])
        PostgresStore.grant_login(admin, ACME_OFFICER, tenants=["acme"], privacy=True)
        PostgresStore.grant_login(admin, OPS, writer=False, privacy=True, all_tenants=True)
        yield cluster
    finally:
        if server is not None:
            server.stop()
        else:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for name in cluster.created:
                    conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def pg_database(pg_cluster: PgCluster) -> str:
    """A fresh database holding the schema."""
    return pg_cluster.new_database()


@pytest.fixture
def pg_url(pg_cluster: PgCluster, pg_database: str) -> str:
    """The URL of a fresh store, as the all-tenants application role."""
    return pg_cluster.url(pg_database, APP)


def database_for(pg_cluster: PgCluster, tmp_path: Path) -> str:
    """The database kept for ``tmp_path``: the same one each time it is asked for."""
    marker = tmp_path / "pg-database"
    if marker.exists():
        return marker.read_text()
    name = pg_cluster.new_database()
    marker.write_text(name)
    return name

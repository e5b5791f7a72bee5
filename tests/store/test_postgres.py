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

"""The SQLite store: the conformance suite, then what only SQLite does (pragmas, triggers, files)."""

from __future__ import annotations

from pathlib import Path

from tachograph.store import SQLiteStore, Store
from tachograph.testing.conformance import StoreConformance


class TestSQLiteStore(StoreConformance):
    def make_store(self, tmp_path: Path) -> Store:
        return SQLiteStore(tmp_path / "store.db")

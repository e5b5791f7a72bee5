"""Fixtures for the data-lifecycle tests: real SQLite stores, demo runs, planted plaintext."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import tachograph
from tachograph.demo import agent as demo
from tachograph.store import SQLiteStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "runs.db")
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def demo_run(store: SQLiteStore) -> str:
    """A recorded demo run (15 events: models, tools, guardrails, decisions)."""
    result = tachograph.record_run(demo.billing_agent, "Order A-4471 arrived damaged.", store=store)
    return result.run_id

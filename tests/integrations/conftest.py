"""Fixtures for the SDK integration tests: a fake provider server and a store per test."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tachograph
from fakes.llm_server import FakeLLMServer

from .agents import REFUNDS


@pytest.fixture
def srv() -> Iterator[FakeLLMServer]:
    """The fake OpenAI + Anthropic server on 127.0.0.1, with its scripted refund agent."""
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A fresh SQLite store."""
    return str(tmp_path / "runs.db")


@pytest.fixture(autouse=True)
def _no_refunds() -> Iterator[None]:
    REFUNDS.clear()
    yield
    REFUNDS.clear()


def events(db: str, run_id: str) -> list[tachograph.Event]:
    """The recorded run, after checking that its chain verifies."""
    recorded = tachograph.open_store(db).events(run_id)
    assert tachograph.verify_events(recorded).ok
    return recorded


def types(recorded: list[tachograph.Event]) -> list[str]:
    return [e.type for e in recorded]


def seqs(recorded: list[tachograph.Event], type_: str) -> list[int]:
    return [e.seq for e in recorded if e.type == type_]


def payload_text(recorded: list[tachograph.Event]) -> str:
    """Every payload as one lower-cased JSON text, to search for what must not be recorded."""
    return json.dumps([e.payload for e in recorded]).lower()


def stop(srv: FakeLLMServer) -> int:
    """Stop the server (so that any request that leaks fails) and return its request count."""
    count = srv.request_count
    srv.stop()
    return count


def change_paths(report: tachograph.ReplayReport) -> dict[str, Any]:
    assert report.first is not None
    return {c.path: (c.old, c.new) for c in report.first.changes}

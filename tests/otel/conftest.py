"""Shared fixtures for the OpenTelemetry bridge tests: a real SDK provider and a real store."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tachograph.otel as tgo
from tachograph.store import SQLiteStore

TESTS = Path(__file__).resolve().parent.parent
if str(TESTS) not in sys.path:  # for tests/fakes (the OTLP receiver)
    sys.path.insert(0, str(TESTS))

GOLDEN = TESTS / "golden" / "otel"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    """Finished spans land here."""
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    """A dedicated (non-global) provider exporting synchronously to ``exporter``."""
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp
    tp.shutdown()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    """A real SQLite store in a temporary directory."""
    st = SQLiteStore(tmp_path / "runs.db")
    yield st
    st.close()


@pytest.fixture(autouse=True)
def _no_leftover_instrumentation() -> Iterator[None]:
    yield
    tgo.uninstrument()

"""An exception message leaves the process through OpenTelemetry only with content capture
on, and then only as recorded (after the processors): tested with the real SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tachograph
import tachograph.otel as tgo

from .planted import STRIPE


@tachograph.tool(effect="read")
def fetch_profile(user: str) -> dict[str, str]:
    raise PermissionError(f"key {STRIPE} was refused for {user}")


def _run(db: Path) -> None:
    with pytest.raises(PermissionError), tachograph.record(db, actor="profiles"):
        fetch_profile("u1")


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    yield InMemorySpanExporter()
    tgo.uninstrument()


def _provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _statuses(exporter: InMemorySpanExporter) -> dict[str, str | None]:
    return {s.name: s.status.description for s in exporter.get_finished_spans()}


def test_content_off_sends_the_error_type_only(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    tgo.instrument(_provider(exporter), capture_content=False)
    _run(tmp_path / "runs.db")
    statuses = _statuses(exporter)
    assert statuses == {
        "execute_tool fetch_profile": "PermissionError",
        "invoke_agent profiles": "PermissionError",
    }
    events = [e for s in exporter.get_finished_spans() for e in s.events]
    assert events
    assert all("refused" not in str(dict(e.attributes or {})) for e in events)


def test_content_on_sends_the_processed_message(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    tgo.instrument(_provider(exporter), capture_content=True)
    _run(tmp_path / "runs.db")
    for description in _statuses(exporter).values():
        assert description == "PermissionError: key [redacted:secret:stripe] was refused for u1"


def test_export_of_a_stored_run_follows_the_same_rule(tmp_path: Path) -> None:
    from fakes.otlp_receiver import OTLPReceiver
    from tachograph.otel.export import export_run

    db = tmp_path / "runs.db"
    _run(db)
    with tachograph.open_store(db) as store:
        run_id = store.runs()[0].run_id
        statuses = []
        for content in (False, True):
            with OTLPReceiver() as receiver:
                url = receiver.traces_url
                assert export_run(store, run_id, endpoint=url, capture_content=content).ok
                received = receiver.spans
                assert STRIPE not in json.dumps(received)
                statuses.append(sorted(str(s["status"].get("message")) for s in received))
    off, on = statuses
    assert off == ["PermissionError", "PermissionError"]
    assert on == ["PermissionError: key [redacted:secret:stripe] was refused for u1"] * 2

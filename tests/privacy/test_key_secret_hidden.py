"""The run's key secret (SPEC section 5) stays in the log, and nowhere else: processors (with
or without a recorder), observers, ``tacho show`` and OpenTelemetry spans (live and exported,
content capture on) never see it, while the stored payload keeps it (its digest commits to
it) and an export carries it (a replay derives its keys with it)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tachograph
import tachograph.otel as tgo
from tachograph.capture.recorder import Observer, Recorder
from tachograph.capture.session import Session
from tachograph.cli.app import cli
from tachograph.otel.export import build_spans
from tachograph.record.jsonl import export_run
from tachograph.record.seal import KEY_SECRET_FIELD

SECRET = os.urandom(16).hex()


@tachograph.tool(effect="read")
def look_up(ref: str) -> dict[str, Any]:
    return {"ref": ref}


class Seen:
    """A processor, an observer and a listener that keep every text they were shown."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []

    def processor(self, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
        self.texts.append(("processor " + type_, json.dumps(payload)))
        return payload

    def leaks(self) -> list[str]:
        return [who for who, text in self.texts if SECRET in text]


class Watching(Observer):
    def __init__(self, seen: Seen) -> None:
        self.seen = seen

    def before(
        self,
        recorder: Recorder,
        type: str,
        payload: dict[str, Any],
        *,
        idempotency_key: str | None,
        model: str | None,
    ) -> None:
        self.seen.texts.append(("observer " + type, json.dumps(payload)))


def _spans_text(spans: Any) -> str:
    parts = []
    for span in spans:
        parts.append(json.dumps(dict(span.attributes or {}), default=str))
        parts.extend(json.dumps(dict(e.attributes or {}), default=str) for e in span.events)
    return "\n".join(parts)


def test_the_key_secret_reaches_no_processor_observer_span_or_screen(tmp_path: Path) -> None:
    seen = Seen()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    bridge = tgo.instrument(provider, capture_content=True)
    path = tmp_path / "runs.db"
    store = tachograph.open_store(path, create=True)
    try:
        with tachograph.record(
            store,
            actor="desk",
            input="ref 7",
            key_secret=SECRET,
            processors=[seen.processor],
            observers=[Watching(seen), bridge],
        ) as run:
            look_up("ref-7")
    finally:
        tgo.uninstrument()
    assert seen.texts  # they did see the run
    assert seen.leaks() == []
    assert SECRET not in _spans_text(exporter.get_finished_spans())

    events = store.events(run.run_id)
    assert events[0].payload is not None
    assert events[0].payload[KEY_SECRET_FIELD] == SECRET  # kept in the log
    exported = io.BytesIO()
    export_run(store, run.run_id, exported)
    assert SECRET.encode() in exported.getvalue()  # and in the interchange file
    spans = build_spans(events, capture_content=True)
    assert "ref-7" in _spans_text(spans)  # content did go on the spans
    assert SECRET not in _spans_text(spans)

    # a session that processes without a recorder (replay's live side) hides it as well
    replaying = Session(mode="replay", run_id="r", actor="a", processors=[seen.processor])
    started = {"input": "x", KEY_SECRET_FIELD: SECRET}
    assert replaying.process("run.started", started) == started
    assert seen.leaks() == []

    # what a person reads
    store.close()
    runner = CliRunner()
    for extra in ([], ["--full"], ["--json"], ["--full", "--json"]):
        result = runner.invoke(cli, ["--store", str(path), "show", run.run_id, *extra])
        assert result.exit_code == 0, result.output
        assert SECRET not in result.output, extra
    full = json.loads(
        runner.invoke(cli, ["--store", str(path), "show", run.run_id, "--full", "--json"]).output
    )
    assert full["events"][0]["payload"][KEY_SECRET_FIELD] == "[hidden]"

"""tachograph's own export imported back: what the trace says survives, and nothing more.

Crashed runs are recorded for real (the shop agent in a child process, SIGKILLed inside its
irreversible ``issue_refund`` after the refund went through), exported with the real
OpenTelemetry SDK (to the OTLP receiver fake, and encoded as the SDK's OTLP/JSON) and
imported into a second real store."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from otel_weather import weather_agent

import tachograph as tg
from fakes.otlp_receiver import OTLPReceiver, ReceivedSpan
from shop_agents import shop
from shop_agents.fixtures import run_child
from shop_agents.ledger import Ledger
from tachograph.capture.recorder import Recorder
from tachograph.capture.runtime import registered_models
from tachograph.cli.app import cli
from tachograph.otel import TachographSpanObserver, import_otlp
from tachograph.otel.export import export_run
from tachograph.store import SQLiteStore


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as running:
        yield running


@pytest.fixture(autouse=True)
def _no_content_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)


def _tacho(db: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--store", str(db), *args], catch_exceptions=False)


def _crashed_shop_run(tmp_path: Path) -> tuple[Path, str, Path]:
    """A shop run killed inside ``issue_refund`` after the payments API applied the refund."""
    db, books = tmp_path / "runs.db", tmp_path / "books.db"
    run_child(db, "crashed-shop", hang_in="issue_refund", books=books, tmp_path=tmp_path)
    return db, "crashed-shop", books


def _exported_json(store: SQLiteStore, run_id: str, path: Path) -> Path:
    """The run exported through ``export_run`` (the real SDK), written as OTLP/JSON."""
    spans = InMemorySpanExporter()
    assert export_run(store, run_id, exporter=spans, capture_content=True).ok
    path.write_text(json_format.MessageToJson(encode_spans(spans.get_finished_spans())))
    return path


def test_a_crashed_run_is_imported_unfinished_with_its_intent_open(tmp_path: Path) -> None:
    db, run_id, books = _crashed_shop_run(tmp_path)
    ledger = Ledger(str(books))
    try:  # the refund went through before the process died
        assert len(ledger.applied("refund")) == 1
    finally:
        ledger.close()
    with SQLiteStore(db) as store:
        native = store.events(run_id)
        document = _exported_json(store, run_id, tmp_path / "crashed.json")
    assert native[-1].type == "tool.requested"
    assert native[-1].payload["tool"] == "issue_refund"

    imported_db = tmp_path / "imported.db"
    done = _tacho(imported_db, "otel", "import", str(document), "--json")
    assert done.exit_code == 0, done.output
    (imported_id,) = [r["run_id"] for r in json.loads(done.stdout)["runs"]]
    with SQLiteStore(imported_db) as other:
        events = other.events(imported_id)
        assert other.verify(imported_id).ok
    types = [e.type for e in events]
    # No claim the trace does not make: the refund did not fail, the run did not finish.
    assert "run.finished" not in types
    assert "tool.failed" not in types
    assert types[-1] == "tool.requested"
    assert events[-1].payload["tool"] == "issue_refund"
    assert events[-1].payload["effect"] == "irreversible"
    # each tool keeps the effect it was recorded with (read, pure, write, irreversible)
    effects = [
        (e.payload["tool"], e.payload["effect"]) for e in events if e.type == "tool.requested"
    ]
    assert effects == [
        (e.payload["tool"], e.payload["effect"]) for e in native if e.type == "tool.requested"
    ]
    assert {effect for _, effect in effects} == {"read", "pure", "write", "irreversible"}
    # every call the native run completed is completed in the import, the open one is open
    native_calls = [e.type for e in native if e.type.startswith(("model.", "tool."))]
    assert [t for t in types if t.startswith(("model.", "tool."))] == native_calls

    listed = _tacho(imported_db, "runs", "--json")
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.stdout)["runs"]
    assert row["status"] is None  # unfinished, as the native run is
    unfinished = _tacho(imported_db, "runs", "--status", "unfinished", "--json")
    assert [r["run_id"] for r in json.loads(unfinished.stdout)["runs"]] == [imported_id]


def test_the_open_call_and_the_run_are_marked_unfinished_on_the_wire(
    tmp_path: Path, receiver: OTLPReceiver
) -> None:
    db, run_id, _ = _crashed_shop_run(tmp_path)
    done = _tacho(db, "otel", "export", run_id, "--endpoint", receiver.traces_url)
    assert done.exit_code == 0, done.output
    spans = {s["name"]: s for s in receiver.wait_for_spans(2)}
    refund = spans["execute_tool issue_refund"]
    assert refund["status"]["code_name"] == "ERROR"
    assert refund["status"]["message"] == "no completion was recorded"
    assert refund["attributes"]["tachograph.status"] == "unfinished"
    assert spans["invoke_agent support"]["attributes"]["tachograph.status"] == "unfinished"


def _sdk_json(exporter: InMemorySpanExporter) -> bytes:
    return json_format.MessageToJson(encode_spans(exporter.get_finished_spans())).encode()


def test_a_trace_exported_before_the_attribute_keeps_its_intent_open(
    store: SQLiteStore,
) -> None:
    """Traces exported by earlier versions mark the open call only by its status message."""
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = tp.get_tracer("tachograph")
    root = tracer.start_span(
        "invoke_agent billing",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "billing",
            "tachograph.run_id": "run-1",
            "tachograph.status": "unfinished",
        },
    )
    from opentelemetry import trace

    with trace.use_span(root, end_on_exit=True):
        tool = tracer.start_span(
            "execute_tool issue_refund",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "issue_refund",
                "tachograph.effect": "irreversible",
            },
        )
        tool.set_status(Status(StatusCode.ERROR, "no completion was recorded"))
        tool.end()
    tp.shutdown()
    (run,) = import_otlp(store, _sdk_json(exporter)).runs
    assert [e.type for e in store.events(run.run_id)] == ["run.started", "tool.requested"]


def test_an_aborted_run_is_imported_aborted_and_a_finished_run_with_an_open_call(
    store: SQLiteStore, tmp_path: Path
) -> None:
    recorder = Recorder(store, run_id="aborted-run", actor="billing")
    recorder.append("run.started", {"input": "refund A-1", "env": {}})
    recorder.append(
        "tool.requested",
        {"tool": "issue_refund", "args": {"order_id": "A-1"}, "effect": "irreversible"},
        idempotency_key="aborted-run:issue_refund:A-1",
        durable=True,
    )
    recorder.append(
        "run.finished", {"status": "aborted", "error": {"type": "Cancelled", "message": "stop"}}
    )
    recorder.flush()  # the writer thread has stored every event
    document = _exported_json(store, "aborted-run", tmp_path / "aborted.json")
    other = SQLiteStore(tmp_path / "imported.db")
    try:
        (run,) = import_otlp(other, document).runs
        events = other.events(run.run_id)
    finally:
        other.close()
    assert [e.type for e in events] == ["run.started", "tool.requested", "run.finished"]
    assert events[-1].payload["status"] == "aborted"
    assert events[-1].payload["error"]["type"] == "Cancelled"


def test_a_call_open_when_a_traced_run_finished_stays_open(
    store: SQLiteStore, tmp_path: Path
) -> None:
    """The live bridge ends a call still open at run.finished with status ERROR; its import
    has the intent and no completion, as the record has."""
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    recorder = Recorder(
        store, run_id="left-open", actor="billing", observers=[TachographSpanObserver(tp)]
    )
    recorder.append("run.started", {"input": "refund A-1", "env": {}})
    recorder.append(
        "tool.requested",
        {"tool": "charge_card", "args": {"order_id": "A-1"}, "effect": "irreversible"},
        idempotency_key="left-open:charge_card:A-1",
        durable=True,
    )
    recorder.append(
        "run.finished", {"status": "error", "error": {"type": "ValueError", "message": "x"}}
    )
    recorder.flush()
    tp.shutdown()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert spans["execute_tool charge_card"].attributes["tachograph.status"] == "unfinished"
    other = SQLiteStore(tmp_path / "imported.db")
    try:
        (run,) = import_otlp(other, _sdk_json(exporter)).runs
        events = other.events(run.run_id)
    finally:
        other.close()
    assert [e.type for e in events] == ["run.started", "tool.requested", "run.finished"]
    assert events[-1].payload["status"] == "error"


def test_effects_and_the_original_run_id_survive_a_round_trip(
    store: SQLiteStore, tmp_path: Path
) -> None:
    native = tg.record_run(
        weather_agent, "What's the weather in Paris?", store=store, actor="weather_agent"
    )
    document = _exported_json(store, native.run_id, tmp_path / "weather.json")
    other = SQLiteStore(tmp_path / "imported.db")
    try:
        (run,) = import_otlp(other, document).runs
        events = other.events(run.run_id)
    finally:
        other.close()
    (requested,) = [e for e in events if e.type == "tool.requested"]
    assert requested.payload["effect"] == "read"  # as recorded, not "irreversible"
    labels = events[0].payload["labels"]
    assert labels["tachograph.original_run_id"] == native.run_id
    assert events[-1].payload["status"] == "ok"


def test_an_effect_that_is_not_one_of_the_four_is_not_believed(store: SQLiteStore) -> None:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    with tp.get_tracer("other").start_as_current_span(
        "execute_tool x",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "x",
            "tachograph.effect": "harmless",
        },
    ):
        pass
    tp.shutdown()
    (run,) = import_otlp(store, _sdk_json(exporter)).runs
    (requested,) = [e for e in store.events(run.run_id) if e.type == "tool.requested"]
    assert requested.payload["effect"] == "irreversible"


def _chat_providers(spans: list[ReceivedSpan]) -> list[Any]:
    return [
        s["attributes"].get("gen_ai.provider.name")
        for s in sorted(spans, key=lambda s: s["start_time_unix_nano"])
        if s["name"].startswith("chat ")
    ]


def test_export_is_a_function_of_the_record_not_of_the_loaded_agents(
    tmp_path: Path, receiver: OTLPReceiver
) -> None:
    """The same run exported by ``tacho`` (a process that never loaded the shop agent) and
    from Python next to the agent (whose ``@tg.model`` declares ``provider="scripted"``)."""
    assert registered_models()[shop.MODEL_ID].provider == "scripted"  # loaded here
    db, run_id, _ = _crashed_shop_run(tmp_path)
    tacho = Path(sys.executable).parent / "tacho"
    exe = str(tacho) if tacho.exists() else shutil.which("tacho")
    assert exe is not None
    child = subprocess.run(
        [exe, "--store", str(db), "otel", "export", run_id, "--endpoint", receiver.traces_url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    from_cli = receiver.wait_for_spans(1)
    count = len(from_cli)
    with SQLiteStore(db) as store:
        assert export_run(store, run_id, endpoint=receiver.traces_url).ok
    from_python = receiver.wait_for_spans(2 * count)[count:]
    assert len(from_cli) == len(from_python)

    def shape(spans: list[ReceivedSpan]) -> list[tuple[str, dict[str, Any]]]:
        return sorted((s["span_id"], s["attributes"]) for s in spans)

    assert shape(from_cli) == shape(from_python)
    # The record does not name the declared provider (nor can the model family or an HTTP
    # path tell it), so neither export claims one.
    assert _chat_providers(from_python) == [None]
    assert all("gen_ai.provider.name" not in s["attributes"] for s in from_python)


@tg.model("acme-chat-2026-01-01", provider="acme")
def _acme(request: dict[str, Any]) -> dict[str, Any]:
    return {"id": "a-1", "model": "acme-chat-2026-01-01", "choices": []}


def _acme_agent(question: str) -> str:
    _acme({"model": "acme-chat-2026-01-01", "messages": [{"role": "user", "content": question}]})
    return "done"


def test_the_declared_provider_is_on_live_spans_only(store: SQLiteStore) -> None:
    """The live bridge runs where ``@tg.model`` declared the provider; the record does not
    hold it, so an export (from anywhere) does not claim it."""
    live = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(live))
    run = tg.record_run(
        _acme_agent, "hi", store=store, actor="acme", observers=[TachographSpanObserver(tp)]
    )
    tp.shutdown()
    (chat,) = [s for s in live.get_finished_spans() if s.name.startswith("chat ")]
    assert chat.attributes["gen_ai.provider.name"] == "acme"
    exported = InMemorySpanExporter()
    assert export_run(store, run.run_id, exporter=exported).ok
    assert all("gen_ai.provider.name" not in s.attributes for s in exported.get_finished_spans())


def test_a_round_trip_keeps_the_calls_and_drops_what_the_docs_say(tmp_path: Path) -> None:
    """docs/otel.md, "A round trip": the calls and the run's ends are kept; the other events
    (clock, random, plan, guardrail, ...) and the environment fingerprint are not."""
    db, run_id, _ = _crashed_shop_run(tmp_path)
    with SQLiteStore(db) as store:
        native = store.events(run_id)
        document = _exported_json(store, run_id, tmp_path / "crashed.json")
    other = SQLiteStore(tmp_path / "imported.db")
    try:
        (run,) = import_otlp(other, document).runs
        imported = other.events(run.run_id)
    finally:
        other.close()
    kept = [e.type for e in native if e.type.startswith(("run.", "model.", "tool."))]
    assert [e.type for e in imported] == kept
    dropped = {e.type for e in native} - set(kept)
    assert {"clock.read", "random.value", "plan.selected", "guardrail.tripwire"} <= dropped
    env = imported[0].payload["env"]
    assert (env["code_version"], env["runtime"], env["tools"]) == (None, None, {})
    assert native[0].payload["env"]["code_version"] == "shop-1"
    assert imported[0].payload["labels"]["tachograph.original_run_id"] == run_id

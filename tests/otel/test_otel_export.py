"""After-the-fact export, against a real OTLP/HTTP receiver on 127.0.0.1 (protobuf decoded)."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_weather import MODEL, weather_agent

import tachograph as tg
import tachograph.otel as tgo
from fakes.otlp_receiver import OTLPReceiver, ReceivedSpan
from tachograph.capture.recorder import Recorder
from tachograph.cli.app import cli
from tachograph.otel.export import (
    DEFAULT_ENDPOINT,
    build_spans,
    export_run,
    resolve_endpoint,
    ts_to_ns,
)
from tachograph.store import SQLiteStore


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    """A real OTLP/HTTP receiver, stopped after the test."""
    with OTLPReceiver() as running:
        yield running


@pytest.fixture(autouse=True)
def _no_content_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)


def _record(store: SQLiteStore, **options: Any) -> str:
    return tg.record_run(
        weather_agent, "What's the weather in Paris?", store=store, actor="weather_agent", **options
    ).run_id


def _names(spans: list[ReceivedSpan]) -> dict[str, list[ReceivedSpan]]:
    out: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        out.setdefault(span["name"], []).append(span)
    return out


def test_untraced_run_arrives_with_recorded_times_and_derived_ids(
    store: SQLiteStore, receiver: OTLPReceiver
) -> None:
    run_id = _record(store)
    events = store.events(run_id)
    assert all(e.trace_id is None for e in events)  # recorded without any tracing

    result = export_run(store, run_id, endpoint=receiver.traces_url)
    assert result.ok
    assert (result.spans, result.span_events) == (4, len(events))
    assert not result.recorded_ids
    spans = receiver.wait_for_spans(4)
    assert receiver.request_count == 1  # one request per run
    assert receiver.requests[0].content_type == "application/x-protobuf"

    by_name = _names(spans)
    (root,) = by_name["invoke_agent weather_agent"]
    chats = sorted(by_name["chat " + MODEL], key=lambda s: s["start_time_unix_nano"])
    (tool,) = by_name["execute_tool get_weather"]
    assert root["kind_name"] == "INTERNAL"
    assert root["parent_span_id"] is None
    assert [c["kind_name"] for c in chats] == ["CLIENT", "CLIENT"]
    assert tool["kind_name"] == "INTERNAL"
    assert {s["trace_id"] for s in spans} == {result.trace_id}
    assert all(s["parent_span_id"] == root["span_id"] for s in [*chats, tool])
    assert root["resource_attributes"]["service.name"] == "tachograph"
    assert root["attributes"]["gen_ai.conversation.id"] == run_id

    # Recorded timestamps, exactly (microseconds, as recorded).
    assert root["start_time_unix_nano"] == ts_to_ns(events[0].ts)
    assert root["end_time_unix_nano"] == ts_to_ns(events[-1].ts)
    requests = [e for e in events if e.type == "model.request"]
    responses = [e for e in events if e.type == "model.response"]
    for chat, req, resp in zip(chats, requests, responses, strict=True):
        assert chat["start_time_unix_nano"] == ts_to_ns(req.ts)
        assert chat["end_time_unix_nano"] == ts_to_ns(resp.ts)
        assert chat["attributes"]["gen_ai.response.model"] == MODEL
        assert chat["attributes"]["gen_ai.request.model"] == MODEL
    assert chats[0]["attributes"]["gen_ai.usage.input_tokens"] == 86
    assert chats[1]["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]
    tool_key = next(e.idempotency_key for e in events if e.type == "tool.requested")
    assert tool["attributes"]["gen_ai.tool.call.id"] == "call_1"
    assert tool["attributes"]["tachograph.idempotency_key"] == tool_key

    # Every event is a span event, at its recorded time, on its span.
    received = {
        ev["attributes"]["tachograph.seq"]: (span["name"], ev)
        for span in spans
        for ev in span["events"]
    }
    assert sorted(received) == [e.seq for e in events]
    for event in events:
        name, ev = received[event.seq]
        assert ev["name"] == event.type
        assert ev["time_unix_nano"] == ts_to_ns(event.ts)
        assert ev["attributes"]["tachograph.hash"] == event.hash
        assert ev["attributes"]["tachograph.event_id"] == event.event_id
        expected_span = {
            "model": "chat " + MODEL,
            "tool": "execute_tool get_weather",
        }.get(event.type.split(".")[0], "invoke_agent weather_agent")
        assert name == expected_span
    # No content by default.
    assert "gen_ai.input.messages" not in chats[0]["attributes"]

    # Exporting again sends the same ids: the same trace, not a new one.
    receiver.clear()
    again = export_run(store, run_id, endpoint=receiver.traces_url)
    assert again.trace_id == result.trace_id
    assert {s["span_id"] for s in receiver.wait_for_spans(4)} == {s["span_id"] for s in spans}


def test_bridged_run_exports_its_recorded_ids(
    store: SQLiteStore,
    receiver: OTLPReceiver,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    tgo.instrument(provider, capture_content=False)
    run_id = _record(store)
    tgo.uninstrument()
    live = {
        (f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}"): s.name
        for s in exporter.get_finished_spans()
    }
    result = export_run(store, run_id, endpoint=receiver.traces_url)
    assert result.ok
    assert result.recorded_ids
    spans = receiver.wait_for_spans(4)
    assert {(s["trace_id"], s["span_id"]): s["name"] for s in spans} == live
    for event in store.events(run_id):
        assert any(s["span_id"] == event.span_id for s in spans)


def test_run_recorded_inside_a_span_is_exported_into_that_trace(
    store: SQLiteStore, receiver: OTLPReceiver, provider: TracerProvider
) -> None:
    tracer = provider.get_tracer("the-agent")
    with tracer.start_as_current_span("request handler") as outer:
        run_id = _record(store)  # no bridge: the events take the current span's ids
    ctx = outer.get_span_context()
    result = export_run(store, run_id, endpoint=receiver.traces_url)
    assert result.ok
    assert not result.recorded_ids
    by_name = _names(receiver.wait_for_spans(4))
    (root,) = by_name["invoke_agent weather_agent"]
    assert root["trace_id"] == f"{ctx.trace_id:032x}"
    assert root["parent_span_id"] == f"{ctx.span_id:016x}"
    assert root["flags"] & 0x200  # the parent is remote


def test_content_only_when_asked(store: SQLiteStore, receiver: OTLPReceiver) -> None:
    run_id = _record(store)
    assert export_run(store, run_id, endpoint=receiver.traces_url, capture_content=True).ok
    by_name = _names(receiver.wait_for_spans(4))
    chat = min(by_name["chat " + MODEL], key=lambda s: s["start_time_unix_nano"])
    messages = json.loads(chat["attributes"]["gen_ai.input.messages"])
    assert messages[-1] == {
        "role": "user",
        "parts": [{"type": "text", "content": "What's the weather in Paris?"}],
    }
    (tool,) = by_name["execute_tool get_weather"]
    assert json.loads(tool["attributes"]["gen_ai.tool.call.arguments"]) == {"city": "Paris"}


def test_unfinished_run_marks_the_open_call(store: SQLiteStore, receiver: OTLPReceiver) -> None:
    recorder = Recorder(store, run_id="crashed-run", actor="billing_agent")
    recorder.append("run.started", {"input": "refund A-1", "env": {}})
    recorder.append(
        "tool.requested",
        {"tool": "issue_refund", "args": {"order_id": "A-1"}, "effect": "irreversible"},
        idempotency_key="crashed-run:issue_refund:A-1",
        durable=True,
    )
    assert export_run(store, "crashed-run", endpoint=receiver.traces_url).ok
    by_name = _names(receiver.wait_for_spans(2))
    (tool,) = by_name["execute_tool issue_refund"]
    (root,) = by_name["invoke_agent billing_agent"]
    assert tool["status"]["code_name"] == "ERROR"
    assert tool["status"]["message"] == "no completion was recorded"
    assert root["attributes"]["tachograph.status"] == "unfinished"


def test_refused_export_is_reported_and_logged(
    store: SQLiteStore, receiver: OTLPReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    run_id = _record(store)
    receiver.fail_next(1, status=400)
    with caplog.at_level(logging.ERROR):
        result = export_run(store, run_id, endpoint=receiver.traces_url)
    assert not result.ok
    assert receiver.rejected_count == 1
    assert receiver.spans == []
    assert caplog.records


def test_retryable_failure_then_success(store: SQLiteStore, receiver: OTLPReceiver) -> None:
    run_id = _record(store)
    receiver.fail_next(2, status=503, retry_after=0)
    assert export_run(store, run_id, endpoint=receiver.traces_url).ok
    assert receiver.request_count == 3
    assert len(receiver.spans) == 4


@pytest.mark.parametrize(
    ("given", "env", "expected"),
    [
        (
            "http://a:1/x",
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b/v1/traces"},
            "http://a:1/x",
        ),
        (
            None,
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/custom"},
            "http://b:4318/custom",
        ),
        (
            None,
            {
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b/t",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c",
            },
            "http://b/t",
        ),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "http://c:4318/v1/traces"),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, "http://c:4318/v1/traces"),
        (None, {}, DEFAULT_ENDPOINT),
    ],
)
def test_endpoint_resolution(given: str | None, env: dict[str, str], expected: str) -> None:
    assert resolve_endpoint(given, env) == expected


def test_endpoint_from_the_environment_is_used(
    store: SQLiteStore, receiver: OTLPReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _record(store)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    result = export_run(store, run_id)
    assert result.ok
    assert result.endpoint == receiver.traces_url
    assert len(receiver.wait_for_spans(4)) == 4


def test_build_spans_refuses_a_run_without_start(store: SQLiteStore) -> None:
    with pytest.raises(ValueError, match=r"run\.started"):
        build_spans([])


# -- the CLI ------------------------------------------------------------------------------------


def _tacho(db: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--store", str(db), *args], catch_exceptions=False)


def test_cli_export(tmp_path: Path, store: SQLiteStore, receiver: OTLPReceiver) -> None:
    run_id = _record(store)
    db = tmp_path / "runs.db"
    done = _tacho(db, "otel", "export", run_id, "--endpoint", receiver.traces_url, "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert report["spans"] == 4
    assert report["run_id"] == run_id
    assert len(receiver.wait_for_spans(4)) == 4

    text = _tacho(
        db, "otel", "export", run_id, "--endpoint", receiver.traces_url, "--header", "x-team=a"
    )
    assert text.exit_code == 0
    assert "exported " + run_id in text.output
    assert receiver.requests[-1].headers["x-team"] == "a"

    receiver.fail_next(1, status=400)
    refused = _tacho(db, "otel", "export", run_id, "--endpoint", receiver.traces_url)
    assert refused.exit_code == 1
    assert "did not accept" in refused.stderr

    missing = _tacho(db, "otel", "export", "no-such-run", "--endpoint", receiver.traces_url)
    assert missing.exit_code == 3

    bad = _tacho(db, "otel", "export", run_id, "--header", "nonsense")
    assert bad.exit_code == 2


def test_cli_help_documents_the_commands() -> None:
    for args in (["otel", "--help"], ["otel", "export", "--help"], ["otel", "import", "--help"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0
    export_help = CliRunner().invoke(cli, ["otel", "export", "--help"]).output
    assert "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in export_help
    assert "--content / --no-content" in export_help


def test_a_failed_export_logs_no_credential_of_its_endpoint(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    # the exporter logs its failed attempts with the URL's path and query as given
    run_id = _record(store)
    url = "http://otel:CANARYpw1@127.0.0.1:1/v1/traces?api_key=CANARYkey1&x=1"
    with caplog.at_level(logging.WARNING):
        # long enough for a retry, whose warning names the URL's path and query
        result = tgo.export_run(store, run_id, endpoint=url, timeout=3.0)
    assert not result.ok
    assert "CANARY" not in result.endpoint
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "api_key=***" in logged, logged  # the line that named the URL, hidden
    assert "CANARY" not in logged, logged


def _tamper(db: Path, run_id: str) -> int:
    """Change the city of the run's tool request behind the store's back (its append-only
    triggers dropped); the seq changed."""
    con = sqlite3.connect(db)
    con.execute("DROP TRIGGER payloads_erase_only")
    seq, pid = con.execute(
        "SELECT seq, id FROM events WHERE run_id=? AND type='tool.requested'", (run_id,)
    ).fetchone()
    (body,) = con.execute("SELECT body FROM payloads WHERE id=?", (pid,)).fetchone()
    edited = bytes(body).replace(b"Paris", b"Rome")
    assert edited != bytes(body)
    con.execute("UPDATE payloads SET body=? WHERE id=?", (edited, pid))
    con.commit()
    con.close()
    return int(seq)


def test_cli_export_refuses_a_run_that_does_not_verify(
    tmp_path: Path, store: SQLiteStore, receiver: OTLPReceiver
) -> None:
    run_id = _record(store)
    intact = _record(store)
    db = tmp_path / "runs.db"
    seq = _tamper(db, run_id)
    send = ("otel", "export", "--endpoint", receiver.traces_url, "--content")
    refused = _tacho(db, *send, run_id)
    assert refused.exit_code == 1
    assert refused.stdout == ""
    assert refused.stderr.startswith(
        f"Error: refusing to export a run that does not verify: {run_id}: FAILED at seq {seq}, "
        "check 5 (payload digest)"
    )
    assert "--allow-unverified" in refused.stderr
    assert refused.exit_code == _tacho(db, *send, run_id, "--json").exit_code
    assert receiver.requests == []  # nothing was sent

    allowed = _tacho(db, *send, run_id, "--allow-unverified", "--json")
    assert allowed.exit_code == 0, allowed.output
    assert allowed.stderr.startswith(f"TAMPERED: {run_id}: FAILED at seq {seq}, check 5")
    report = json.loads(allowed.stdout)
    assert report["ok"] is True
    assert report["verification"]["status"] == "failed"
    assert [f["seq"] for f in report["verification"]["failures"]] == [seq]
    assert len(receiver.requests) == 1

    done = _tacho(db, *send, intact, "--json")
    assert done.exit_code == 0, done.output
    assert "TAMPERED" not in done.stderr
    assert json.loads(done.stdout)["verification"]["status"] == "verified"
    assert len(receiver.requests) == 2


def test_cli_export_gives_a_run_whose_seal_fails_the_status_verify_gives_it(
    tmp_path: Path, store: SQLiteStore, receiver: OTLPReceiver
) -> None:
    run_id = _record(store)
    assert store.seals_for_run("default", run_id)  # sealed as recorded (the default)
    db = tmp_path / "runs.db"
    # Its last event cut, with the run summary made to agree: the chain alone verifies, the
    # final seal shows the cut.
    con = sqlite3.connect(db, isolation_level=None)
    for trigger in ("events_append_only_delete", "payloads_no_delete"):
        con.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    (last,) = con.execute("SELECT max(seq) FROM events WHERE run_id=?", (run_id,)).fetchone()
    (head,) = con.execute(
        "SELECT hash FROM events WHERE run_id=? AND seq=?", (run_id, last - 1)
    ).fetchone()
    con.execute(
        "DELETE FROM payloads WHERE id IN (SELECT id FROM events WHERE run_id=? AND seq=?)",
        (run_id, last),
    )
    con.execute("DELETE FROM events WHERE run_id=? AND seq=?", (run_id, last))
    con.execute("UPDATE runs SET events=?, head_hash=? WHERE run_id=?", (last, head, run_id))
    con.close()
    send = ("otel", "export", "--endpoint", receiver.traces_url, "--allow-unverified")
    allowed = _tacho(db, *send, run_id, "--json")
    assert allowed.exit_code == 0, allowed.output
    assert allowed.stderr.startswith("SEAL FAILED: ")
    report = json.loads(allowed.stdout)
    assert report["seal"]["status"] == "failed"
    assert report["verification"]["first_failure"] is None  # the chain verifies
    assert report["verification"]["status"] == "failed"  # as tacho verify has it

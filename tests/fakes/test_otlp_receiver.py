"""Tests for the fake OTLP/HTTP traces receiver, driven by the real OpenTelemetry SDK exporter."""

from __future__ import annotations

import base64
import gzip
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from .otlp_receiver import OTLPReceiver, ReceivedSpan, decode_otlp_json

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden" / "otel"
GOLDEN_FILES = sorted(p.name for p in GOLDEN_DIR.glob("*.json") if p.name != "expected.json")


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    """A running receiver, stopped after the test."""
    with OTLPReceiver() as running:
        yield running


def make_provider(
    exporter: SpanExporter,
    *,
    batch: bool = False,
    id_generator: IdGenerator | None = None,
) -> TracerProvider:
    """A dedicated (non-global) provider exporting to ``exporter``."""
    provider = TracerProvider(
        resource=Resource({"service.name": "receiver-test", "deployment.environment.name": "ci"}),
        id_generator=id_generator,
    )
    processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    return provider


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
    """POST raw bytes; return (status, content type, body) also for error statuses."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


def emit_agent_run(provider: TracerProvider) -> None:
    """Emit a small GenAI-shaped trace: agent -> chat (with events) -> tool."""
    tracer = provider.get_tracer("tachograph.test", "1.2.3")
    with tracer.start_as_current_span(
        "invoke_agent weather_agent",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather_agent"},
    ):
        with tracer.start_as_current_span(
            "chat gpt-4o-mini",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.usage.input_tokens": 86,
                "gen_ai.request.temperature": 0.2,
                "gen_ai.request.stream": False,
                "gen_ai.response.finish_reasons": ["tool_calls"],
                "test.ints": [1, 2, 3],
                "test.floats": [0.5, 1.5],
                "test.bools": [True, False],
                "test.unicode": "14 °C, 東京",
            },
        ) as chat:
            chat.add_event(
                "gen_ai.user.message",
                {"gen_ai.event.content": '{"content": "hi"}', "index": 0},
                timestamp=1_764_426_193_600_000_000,
            )
            chat.add_event("gen_ai.choice")
        with tracer.start_as_current_span(
            "execute_tool get_weather",
            attributes={"gen_ai.tool.name": "get_weather", "gen_ai.tool.call.id": "call_1"},
        ) as tool:
            tool.set_status(Status(StatusCode.ERROR, "city not found"))


def assert_agent_run(spans: list[ReceivedSpan]) -> None:
    """Check names, kinds, parentage, attributes and events of ``emit_agent_run``'s trace."""
    by_name = {span["name"]: span for span in spans}
    assert set(by_name) == {
        "invoke_agent weather_agent",
        "chat gpt-4o-mini",
        "execute_tool get_weather",
    }
    agent = by_name["invoke_agent weather_agent"]
    chat = by_name["chat gpt-4o-mini"]
    tool = by_name["execute_tool get_weather"]

    assert agent["parent_span_id"] is None
    assert chat["parent_span_id"] == agent["span_id"]
    assert tool["parent_span_id"] == agent["span_id"]
    assert len({agent["trace_id"], chat["trace_id"], tool["trace_id"]}) == 1
    assert len(agent["trace_id"]) == 32
    assert len(agent["span_id"]) == 16
    assert agent["trace_id"] == agent["trace_id"].lower()

    assert (agent["kind"], agent["kind_name"]) == (1, "INTERNAL")
    assert (chat["kind"], chat["kind_name"]) == (3, "CLIENT")

    assert chat["attributes"] == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": 86,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.stream": False,
        "gen_ai.response.finish_reasons": ["tool_calls"],
        "test.ints": [1, 2, 3],
        "test.floats": [0.5, 1.5],
        "test.bools": [True, False],
        "test.unicode": "14 °C, 東京",
    }
    assert isinstance(chat["attributes"]["gen_ai.usage.input_tokens"], int)
    assert isinstance(chat["attributes"]["gen_ai.request.temperature"], float)

    first, second = chat["events"]
    assert first["name"] == "gen_ai.user.message"
    assert first["time_unix_nano"] == 1_764_426_193_600_000_000
    assert first["attributes"] == {"gen_ai.event.content": '{"content": "hi"}', "index": 0}
    assert second["name"] == "gen_ai.choice"
    assert second["attributes"] == {}
    assert chat["start_time_unix_nano"] <= second["time_unix_nano"] <= chat["end_time_unix_nano"]

    assert tool["status"] == {"code": 2, "code_name": "ERROR", "message": "city not found"}
    assert agent["status"]["code_name"] == "UNSET"

    for span in spans:
        assert span["scope_name"] == "tachograph.test"
        assert span["scope_version"] == "1.2.3"
        assert span["resource_attributes"]["service.name"] == "receiver-test"
        assert span["resource_attributes"]["deployment.environment.name"] == "ci"
        assert 0 < span["start_time_unix_nano"] <= span["end_time_unix_nano"]


def test_simple_processor_protobuf_round_trip(receiver: OTLPReceiver) -> None:
    exporter = OTLPSpanExporter(endpoint=receiver.traces_url)
    provider = make_provider(exporter)
    emit_agent_run(provider)
    provider.shutdown()

    spans = receiver.wait_for_spans(3)
    assert_agent_run(spans)
    # SimpleSpanProcessor exports each span as it ends: children first, one request each.
    assert [span["name"] for span in spans][-1] == "invoke_agent weather_agent"
    assert receiver.request_count == 3
    assert receiver.accepted_count == 3
    request = receiver.requests[0]
    assert request.content_type == "application/x-protobuf"
    assert request.content_encoding == ""
    assert request.headers["user-agent"].startswith("OTel-OTLP-Exporter-Python")


def test_batch_processor_force_flush_sends_one_request(receiver: OTLPReceiver) -> None:
    provider = make_provider(OTLPSpanExporter(endpoint=receiver.traces_url), batch=True)
    emit_agent_run(provider)
    assert receiver.spans == []  # still buffered
    assert provider.force_flush(timeout_millis=5_000)

    assert_agent_run(receiver.wait_for_spans(3))
    assert receiver.request_count == 1
    assert receiver.requests[0].span_count == 3
    provider.shutdown()


@pytest.mark.parametrize(
    ("compression", "encoding"),
    [(Compression.Gzip, "gzip"), (Compression.Deflate, "deflate")],
)
def test_compressed_exports(
    receiver: OTLPReceiver, compression: Compression, encoding: str
) -> None:
    exporter = OTLPSpanExporter(endpoint=receiver.traces_url, compression=compression)
    provider = make_provider(exporter, batch=True)
    emit_agent_run(provider)
    provider.shutdown()

    assert_agent_run(receiver.wait_for_spans(3))
    assert {request.content_encoding for request in receiver.requests} == {encoding}


def test_links_are_decoded(receiver: OTLPReceiver) -> None:
    provider = make_provider(OTLPSpanExporter(endpoint=receiver.traces_url))
    tracer = provider.get_tracer("tachograph.test")
    with tracer.start_as_current_span("first") as first:
        first_context = first.get_span_context()
    with tracer.start_as_current_span(
        "second", links=[Link(first_context, {"link.reason": "replay-of"})]
    ):
        pass
    provider.shutdown()

    receiver.wait_for_spans(2)
    second = receiver.find("second")
    assert second["links"] == [
        {
            "trace_id": f"{first_context.trace_id:032x}",
            "span_id": f"{first_context.span_id:016x}",
            "trace_state": "",
            "attributes": {"link.reason": "replay-of"},
        }
    ]


class RecordedIds(IdGenerator):
    """Replays recorded ids: span ids are requested in span start order."""

    def __init__(self, trace_id: int, span_ids: list[int]) -> None:
        self._trace_ids = [trace_id]
        self._span_ids = list(span_ids)

    def generate_trace_id(self) -> int:
        return self._trace_ids.pop(0)

    def generate_span_id(self) -> int:
        return self._span_ids.pop(0)


def test_recorded_ids_and_timestamps_arrive_unchanged(receiver: OTLPReceiver) -> None:
    trace_id = 0x4BF92F3577B34DA6A3CE929D0E0E4736
    root_id, child_id = 0x00F067AA0BA902B7, 0x53995C3F42CD8AD8
    t0 = 1_764_426_193_512_304_123
    provider = make_provider(
        OTLPSpanExporter(endpoint=receiver.traces_url),
        id_generator=RecordedIds(trace_id, [root_id, child_id]),
    )
    tracer = provider.get_tracer("tachograph.otel")
    root = tracer.start_span("invoke_agent weather_agent", start_time=t0)
    child = tracer.start_span(
        "chat gpt-4o-mini",
        context=trace.set_span_in_context(root),
        kind=SpanKind.CLIENT,
        start_time=t0 + 1_000,
    )
    child.add_event("gen_ai.choice", {"index": 0}, timestamp=t0 + 2_000)
    child.end(end_time=t0 + 3_000)
    root.end(end_time=t0 + 4_000)
    provider.shutdown()

    receiver.wait_for_spans(2)
    root_span = receiver.find("invoke_agent weather_agent")
    child_span = receiver.find("chat gpt-4o-mini")
    assert root_span["trace_id"] == child_span["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert root_span["span_id"] == "00f067aa0ba902b7"
    assert child_span["span_id"] == "53995c3f42cd8ad8"
    assert child_span["parent_span_id"] == "00f067aa0ba902b7"
    assert (root_span["start_time_unix_nano"], root_span["end_time_unix_nano"]) == (
        t0,
        t0 + 4_000,
    )
    assert (child_span["start_time_unix_nano"], child_span["end_time_unix_nano"]) == (
        t0 + 1_000,
        t0 + 3_000,
    )
    assert child_span["events"][0]["time_unix_nano"] == t0 + 2_000


def test_transient_503_is_retried_then_accepted(receiver: OTLPReceiver) -> None:
    receiver.fail_next(2)
    exporter = OTLPSpanExporter(endpoint=receiver.traces_url)
    provider = make_provider(exporter)
    with provider.get_tracer("tachograph.test").start_as_current_span("retried"):
        pass

    assert receiver.wait_for_spans(1)[0]["name"] == "retried"
    assert [request.status for request in receiver.requests] == [503, 503, 200]
    assert receiver.request_count == 3
    assert receiver.rejected_count == 2
    assert receiver.requests[0].headers["content-type"] == "application/x-protobuf"
    provider.shutdown()


def test_persistent_503_makes_export_fail(receiver: OTLPReceiver) -> None:
    receiver.fail_next(100)
    exporter = OTLPSpanExporter(endpoint=receiver.traces_url, timeout=5)
    provider = TracerProvider()  # no processor: the test drives the exporter itself
    span = provider.get_tracer("tachograph.test").start_span("lost")
    span.end()

    result = exporter.export([span])  # type: ignore[list-item]

    assert result is SpanExportResult.FAILURE
    assert receiver.spans == []
    # 503 is retryable: the exporter retried (Retry-After: 0) until it gave up.
    assert receiver.request_count > 1
    assert {request.status for request in receiver.requests} == {503}
    exporter.shutdown()


def test_non_retryable_status_fails_immediately(receiver: OTLPReceiver) -> None:
    receiver.fail_next(1, status=400)
    exporter = OTLPSpanExporter(endpoint=receiver.traces_url)
    provider = make_provider(exporter)
    span = provider.get_tracer("tachograph.test").start_span("rejected")
    span.end()
    assert receiver.request_count == 1
    assert receiver.requests[0].status == 400
    assert receiver.spans == []
    # The next export goes through again.
    assert exporter.export([span]) is SpanExportResult.SUCCESS  # type: ignore[list-item]
    assert receiver.find("rejected")["name"] == "rejected"
    provider.shutdown()


def test_response_is_an_export_trace_service_response(receiver: OTLPReceiver) -> None:
    request = trace_service_pb2.ExportTraceServiceRequest()
    status, content_type, body = post(
        receiver.traces_url,
        request.SerializeToString(),
        {"Content-Type": "application/x-protobuf"},
    )
    assert (status, content_type) == (200, "application/x-protobuf")
    response = trace_service_pb2.ExportTraceServiceResponse()
    response.ParseFromString(body)
    assert not response.HasField("partial_success")


def otlp_json_document(trace_id: str, span_id: str, parent_id: str) -> dict[str, Any]:
    """A hand-written OTLP/JSON request with one span."""
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "json-client"}}]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "json.scope", "version": "0.1"},
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": span_id,
                                "parentSpanId": parent_id,
                                "name": "chat gpt-4o-mini",
                                "kind": 3,
                                "startTimeUnixNano": "1764426193514146000",
                                "endTimeUnixNano": 1764426194424681000,
                                "attributes": [
                                    {"key": "s", "value": {"stringValue": "x"}},
                                    {"key": "i", "value": {"intValue": "86"}},
                                    {"key": "j", "value": {"intValue": 17}},
                                    {"key": "d", "value": {"doubleValue": 0.2}},
                                    {"key": "b", "value": {"boolValue": True}},
                                    {"key": "bytes", "value": {"bytesValue": "AAEC"}},
                                    {
                                        "key": "arr",
                                        "value": {
                                            "arrayValue": {
                                                "values": [
                                                    {"stringValue": "stop"},
                                                    {"intValue": "2"},
                                                ]
                                            }
                                        },
                                    },
                                    {
                                        "key": "kv",
                                        "value": {
                                            "kvlistValue": {
                                                "values": [
                                                    {"key": "k", "value": {"stringValue": "v"}}
                                                ]
                                            }
                                        },
                                    },
                                    {"key": "empty", "value": {}},
                                ],
                                "events": [
                                    {
                                        "timeUnixNano": "1764426193600000000",
                                        "name": "gen_ai.choice",
                                        "attributes": [
                                            {"key": "index", "value": {"intValue": "0"}}
                                        ],
                                    }
                                ],
                                "status": {"code": 1},
                            }
                        ],
                    }
                ],
            }
        ]
    }


@pytest.mark.parametrize("id_encoding", ["hex", "base64"])
def test_otlp_json_request(receiver: OTLPReceiver, id_encoding: str) -> None:
    trace_hex, span_hex, parent_hex = (
        "5b8efff798038103d269b633813fc60c",
        "eee19b7ec3c1b174",
        "eee19b7ec3c1b173",
    )

    def encode(hex_id: str) -> str:
        if id_encoding == "hex":
            return hex_id.upper() if len(hex_id) == 16 else hex_id  # hex is case-insensitive
        return base64.b64encode(bytes.fromhex(hex_id)).decode()

    document = otlp_json_document(encode(trace_hex), encode(span_hex), encode(parent_hex))
    status, content_type, body = post(
        receiver.traces_url,
        json.dumps(document).encode(),
        {"Content-Type": "application/json"},
    )
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body) == {}

    (span,) = receiver.spans
    assert (span["trace_id"], span["span_id"], span["parent_span_id"]) == (
        trace_hex,
        span_hex,
        parent_hex,
    )
    assert (span["kind"], span["kind_name"]) == (3, "CLIENT")
    assert span["start_time_unix_nano"] == 1764426193514146000
    assert span["end_time_unix_nano"] == 1764426194424681000
    assert span["attributes"] == {
        "s": "x",
        "i": 86,
        "j": 17,
        "d": 0.2,
        "b": True,
        "bytes": b"\x00\x01\x02",
        "arr": ["stop", 2],
        "kv": {"k": "v"},
        "empty": None,
    }
    assert span["events"][0]["name"] == "gen_ai.choice"
    assert span["events"][0]["attributes"] == {"index": 0}
    assert span["status"]["code_name"] == "OK"
    assert span["scope_name"] == "json.scope"
    assert span["resource_attributes"] == {"service.name": "json-client"}


def test_gzipped_json_request(receiver: OTLPReceiver) -> None:
    document = otlp_json_document("5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174", "")
    status, _, _ = post(
        receiver.traces_url,
        gzip.compress(json.dumps(document).encode()),
        {"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert status == 200
    assert receiver.find("chat gpt-4o-mini")["parent_span_id"] is None


@pytest.mark.parametrize(
    ("path", "headers", "body", "expected_status"),
    [
        ("/v1/metrics", {"Content-Type": "application/x-protobuf"}, b"", 404),
        ("/v1/traces", {"Content-Type": "text/plain"}, b"hello", 415),
        ("/v1/traces", {"Content-Type": "application/x-protobuf"}, b"\xff\xff\xff", 400),
        ("/v1/traces", {"Content-Type": "application/json"}, b"{not json", 400),
        (
            "/v1/traces",
            {"Content-Type": "application/json"},
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}',
            400,
        ),
        (
            "/v1/traces",
            {"Content-Type": "application/x-protobuf", "Content-Encoding": "br"},
            b"x",
            400,
        ),
    ],
)
def test_bad_requests_are_rejected(
    receiver: OTLPReceiver,
    path: str,
    headers: dict[str, str],
    body: bytes,
    expected_status: int,
) -> None:
    status, _, _ = post(receiver.url + path, body, headers)
    assert status == expected_status
    assert receiver.requests[-1].status == expected_status
    assert receiver.spans == []


def test_clear_and_wait_timeout(receiver: OTLPReceiver) -> None:
    receiver.fail_next(3)
    receiver.clear()
    provider = make_provider(OTLPSpanExporter(endpoint=receiver.traces_url))
    with provider.get_tracer("tachograph.test").start_as_current_span("kept"):
        pass
    provider.shutdown()
    assert [request.status for request in receiver.requests] == [200]
    receiver.clear()
    assert receiver.spans == []
    assert receiver.requests == []
    with pytest.raises(TimeoutError):
        receiver.wait_for_spans(1, timeout=0.05)


def test_receiver_lifecycle() -> None:
    receiver = OTLPReceiver()
    with pytest.raises(RuntimeError):
        _ = receiver.url
    with receiver:
        assert receiver.url.startswith("http://127.0.0.1:")
        assert receiver.traces_url == receiver.url + "/v1/traces"
        assert receiver.port > 0
    receiver.stop()  # idempotent


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_golden_otlp_json_files_are_accepted(receiver: OTLPReceiver, name: str) -> None:
    """Each golden import file is valid OTLP/JSON and matches expected.json's span ids/times."""
    expected = json.loads((GOLDEN_DIR / "expected.json").read_text(encoding="utf-8"))["files"][name]
    body = (GOLDEN_DIR / name).read_bytes()
    status, _, _ = post(receiver.traces_url, body, {"Content-Type": "application/json"})
    assert status == 200

    spans = receiver.wait_for_spans(expected["span_count"])
    assert spans == decode_otlp_json(body)
    assert {span["trace_id"] for span in spans} == {expected["trace_id"]}
    by_id = {span["span_id"]: span for span in spans}
    for step in expected["steps"]:
        span = by_id[step["span_id"]]
        assert span["name"] == step["span_name"]
        assert span["parent_span_id"] == step["parent_span_id"]
        assert span["start_time_unix_nano"] == step["start_ns"]
        assert span["end_time_unix_nano"] == step["end_ns"]
    starts = [step["start_ns"] for step in expected["steps"]]
    assert starts == sorted(starts)

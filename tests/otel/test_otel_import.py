"""Import of GenAI traces, on the golden OTLP/JSON files of tests/golden/otel/ (five dialects)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from otel_weather import weather_agent

import tachograph as tg
import tachograph.otel as tgo
from conftest import GOLDEN
from tachograph.cli.app import cli
from tachograph.errors import FormatError
from tachograph.otel.dialects import detect_dialect, extract_steps
from tachograph.otel.export import build_spans, ts_to_ns
from tachograph.otel.importer import import_otlp
from tachograph.otel.otlp_json import parse_otlp_json
from tachograph.store import SQLiteStore

EXPECTED: dict[str, Any] = json.loads((GOLDEN / "expected.json").read_text())["files"]
FILES = sorted(EXPECTED)


def test_the_five_dialects_are_all_here() -> None:
    assert FILES == [
        "genai_current.json",
        "genai_legacy_events.json",
        "genai_no_content.json",
        "openinference.json",
        "openllmetry.json",
    ]


@pytest.mark.parametrize("name", FILES)
def test_extraction_matches_expected(name: str) -> None:
    expected = EXPECTED[name]
    spans = parse_otlp_json((GOLDEN / name).read_bytes())
    assert len(spans) == expected["span_count"]
    assert {s.trace_id for s in spans} == {expected["trace_id"]}
    assert detect_dialect(spans) == expected["dialect"]
    # params and tools are extra keys of the model steps (not in expected.json)
    steps = [
        {k: v for k, v in s.items() if k not in ("params", "tools")} for s in extract_steps(spans)
    ]
    assert steps == expected["steps"]


def _ns(ts: str) -> int:
    return ts_to_ns(ts)


@pytest.mark.parametrize("name", FILES)
def test_import_records_a_verified_labelled_run(name: str, store: SQLiteStore) -> None:
    expected = EXPECTED[name]
    steps = expected["steps"]
    agent, models, tools = (
        steps[0],
        [s for s in steps if s["kind"] == "model"],
        [s for s in steps if s["kind"] == "tool"],
    )
    result = import_otlp(store, GOLDEN / name)
    (run,) = result.runs
    assert run.run_id == f"otel-{expected['trace_id']}"
    assert run.dialect == expected["dialect"]
    events = store.events(run.run_id)
    assert store.verify(run.run_id).ok
    assert [e.type for e in events] == [
        "run.started",
        "model.request",
        "model.response",
        "tool.requested",
        "tool.completed",
        "model.request",
        "model.response",
        "run.finished",
    ]
    # Ids from the trace are kept on the events.
    assert {e.trace_id for e in events} == {expected["trace_id"]}
    assert [e.span_id for e in events] == [
        agent["span_id"],
        models[0]["span_id"],
        models[0]["span_id"],
        tools[0]["span_id"],
        tools[0]["span_id"],
        models[1]["span_id"],
        models[1]["span_id"],
        agent["span_id"],
    ]
    # ts: when it happened (span start for intents, span end for completions), to the us.
    assert [_ns(e.ts) for e in events] == [
        ns // 1000 * 1000
        for ns in (
            agent["start_ns"],
            models[0]["start_ns"],
            models[0]["end_ns"],
            tools[0]["start_ns"],
            tools[0]["end_ns"],
            models[1]["start_ns"],
            models[1]["end_ns"],
            agent["end_ns"],
        )
    ]
    started = events[0].payload
    assert started["labels"]["tachograph.imported"] == "otlp"
    assert started["labels"]["tachograph.dialect"] == expected["dialect"]
    assert started["labels"]["tachograph.source"] == name
    assert (
        started["labels"]["tachograph.content_captured"]
        == str(expected["content_captured"]).lower()
    )
    assert events[0].actor == "weather_agent"

    request, response = events[1], events[2]
    assert request.model == models[0]["request_model"]
    assert response.model == models[0]["model"]
    assert request.idempotency_key == response.idempotency_key
    choice = response.payload["response"]["choices"][0]
    assert response.payload["response"]["id"] == models[0]["response_id"]
    assert choice["finish_reason"] == models[0]["finish_reason"]
    assert response.payload["usage"] == {
        "input_tokens": models[0]["input_tokens"],
        "output_tokens": models[0]["output_tokens"],
    }
    tool_req, tool_done = events[3], events[4]
    assert tool_req.payload["tool"] == "get_weather"
    assert tool_req.payload["call_id"] == tools[0]["tool_call_id"]
    assert tool_req.idempotency_key == tool_done.idempotency_key

    state = tg.fold(events)
    assert state.status == "ok"
    assert len(state.model_exchanges) == 2
    assert len(state.observations) == 1

    if expected["content_captured"]:
        assert request.payload["request"]["messages"] == models[0]["input_messages"]
        assert choice["message"]["tool_calls"] == models[0]["tool_calls"]
        assert tool_req.payload["args"] == {"city": "Paris"}
        assert tool_done.payload["result"] == tools[0]["tool_result"]
        final = events[6].payload["response"]["choices"][0]["message"]["content"]
        assert final == "It's 14 °C with light rain in Paris right now."
        # tools are recorded only where the trace has their definitions
        tools_seen = "tools" in request.payload["request"]
        assert request.payload.get("not_captured", []) == ([] if tools_seen else ["tools"])
    else:  # missing is recorded as missing, never as empty
        assert "messages" not in request.payload["request"]
        assert request.payload["not_captured"] == ["messages", "tools"]
        assert "message" not in choice
        assert response.payload["not_captured"] == ["message"]
        assert tool_req.payload["not_captured"] == ["args"]
        assert tool_done.payload["not_captured"] == ["result"]
        assert tool_done.payload["result"] is None
    if agent["input_text"] is None:
        assert started["input"] is None
        assert started["not_captured"] == ["input"]
    else:
        assert started["input"] == agent["input_text"]
        assert events[-1].payload["output"] == agent["output_text"]


def test_dialects_with_content_agree_on_what_happened(tmp_path: Path) -> None:
    """The same run in four dialects imports to the same model and tool content."""
    seen = []
    for name in (
        "genai_current.json",
        "genai_legacy_events.json",
        "openinference.json",
        "openllmetry.json",
    ):
        store = SQLiteStore(tmp_path / f"{name}.db")
        (run,) = import_otlp(store, GOLDEN / name).runs
        state = tg.fold(store.events(run.run_id))
        seen.append(
            (
                [x["request"]["messages"] for x in state.model_exchanges],
                [x["response"]["choices"][0]["message"] for x in state.model_exchanges],
                state.observations[0]["result"]
                if "result" in state.observations[0]
                else state.observations[0],
            )
        )
        store.close()
    assert all(s == seen[0] for s in seen[1:])


def test_importing_twice_is_harmless(store: SQLiteStore) -> None:
    first = import_otlp(store, GOLDEN / "openllmetry.json")
    again = import_otlp(store, GOLDEN / "openllmetry.json")
    assert first.written == 8
    assert again.written == 0
    assert again.runs[0].skipped
    assert len(store.events(first.runs[0].run_id)) == 8


def test_json_lines_numbers_and_snake_case(store: SQLiteStore) -> None:
    """One document per line (the Collector's file exporter), int64 as numbers, snake_case."""
    doc = json.loads((GOLDEN / "genai_current.json").read_text())

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                if key in ("startTimeUnixNano", "endTimeUnixNano", "timeUnixNano", "intValue"):
                    value = int(value)
                snake = "".join("_" + c.lower() if c.isupper() else c for c in key)
                out[snake if key.endswith(("UnixNano", "Id")) else key] = rewrite(value)
            return out
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    lines = [json.dumps({"resourceSpans": [rewrite(rs)]}) for rs in doc["resourceSpans"]]
    data = ("\n".join(lines) + "\n").encode()
    spans = parse_otlp_json(data)
    steps = [
        {k: v for k, v in s.items() if k not in ("params", "tools")} for s in extract_steps(spans)
    ]
    assert steps == EXPECTED["genai_current.json"]["steps"]
    (run,) = import_otlp(store, data).runs
    assert store.verify(run.run_id).ok


@pytest.mark.parametrize(
    "data",
    [
        b"not json at all\n",
        b'{"hello": 1}',
        b"[1, 2]",
        b'{"resourceSpans": [{"scopeSpans": '
        b'[{"spans": [{"traceId": "xyz", "spanId": "00f067aa0ba902b7"}]}]}]}',
    ],
)
def test_not_otlp_json_is_refused(data: bytes, store: SQLiteStore) -> None:
    with pytest.raises(FormatError):
        import_otlp(store, data)


def _sdk_json(spans: Any) -> bytes:
    """Spans as the SDK's own OTLP encoder writes them, in protobuf's generic JSON mapping."""
    return json_format.MessageToJson(encode_spans(spans)).encode()


def test_round_trip_native_run_to_trace_and_back(
    store: SQLiteStore, tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A native run, traced live with content, exported as OTLP/JSON and imported again."""
    tgo.instrument(provider, capture_content=True)
    native = tg.record_run(
        weather_agent, "What's the weather in Paris?", store=store, actor="weather_agent"
    )
    tgo.uninstrument()
    data = _sdk_json(exporter.get_finished_spans())
    other = SQLiteStore(tmp_path / "imported.db")
    (run,) = import_otlp(other, data).runs
    assert run.dialect == "otel-genai-current"
    native_events = store.events(native.run_id)
    imported = other.events(run.run_id)
    assert {e.trace_id for e in imported} == {native_events[0].trace_id}
    assert imported[0].span_id == native_events[0].span_id
    a, b = tg.fold(native_events), tg.fold(imported)
    assert b.output == a.output == "It's 14 °C in Paris."
    assert b.input == a.input
    assert b.observations[0]["result"] == a.observations[0]["result"]
    assert [x["response"]["id"] for x in b.model_exchanges] == ["chatcmpl-1", "chatcmpl-2"]
    # The after-the-fact export of the imported run reproduces the trace's ids.
    rebuilt = build_spans(imported)
    assert {(s.context.trace_id, s.context.span_id) for s in rebuilt} == {
        (s.context.trace_id, s.context.span_id) for s in exporter.get_finished_spans()
    }
    other.close()


def test_two_agents_in_one_trace_and_failures(store: SQLiteStore) -> None:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    tp.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = tp.get_tracer("some-framework")
    with tracer.start_as_current_span("workflow"):
        for agent in ("planner", "writer"):
            with (
                tracer.start_as_current_span(
                    f"invoke_agent {agent}",
                    attributes={
                        "gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.name": agent,
                    },
                ),
                tracer.start_as_current_span(
                    "chat m-1",
                    kind=SpanKind.CLIENT,
                    attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": "openai",
                        "gen_ai.request.model": "m-1",
                    },
                ) as chat,
            ):
                if agent == "writer":
                    chat.set_attribute("error.type", "RateLimitError")
                    chat.set_status(Status(StatusCode.ERROR, "slow down"))
    tp.shutdown()
    result = import_otlp(store, _sdk_json(exporter.get_finished_spans()))
    assert sorted(r.events[0].actor for r in result.runs) == ["planner", "writer"]
    assert len({r.run_id for r in result.runs}) == 2
    writer = next(r for r in result.runs if r.events[0].actor == "writer")
    types = [e.type for e in store.events(writer.run_id)]
    assert types == ["run.started", "model.request", "model.failed", "run.finished"]
    failed = store.events(writer.run_id)[2].payload
    assert failed["error"] == {"type": "RateLimitError", "message": "slow down"}
    for run in result.runs:
        assert store.verify(run.run_id).ok


def test_a_trace_without_genai_spans_imports_nothing(store: SQLiteStore) -> None:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    tp.add_span_processor(SimpleSpanProcessor(exporter))
    with tp.get_tracer("web").start_as_current_span("GET /health"):
        pass
    tp.shutdown()
    assert import_otlp(store, _sdk_json(exporter.get_finished_spans())).runs == ()


def test_cli_import(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    runner = CliRunner()
    done = runner.invoke(
        cli, ["--store", str(db), "otel", "import", str(GOLDEN / "openinference.json"), "--json"]
    )
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert report["written"] == 8
    assert report["runs"][0]["dialect"] == "openinference"
    again = runner.invoke(
        cli, ["--store", str(db), "otel", "import", str(GOLDEN / "openinference.json")]
    )
    assert again.exit_code == 0
    assert "already present, skipped" in again.output
    junk = tmp_path / "junk.json"
    junk.write_text('{"hello": 1}')
    refused = runner.invoke(cli, ["--store", str(db), "otel", "import", str(junk)])
    assert refused.exit_code == 1
    missing = runner.invoke(cli, ["--store", str(db), "otel", "import", str(tmp_path / "nope")])
    assert missing.exit_code == 2
    stdin = runner.invoke(
        cli,
        ["--store", str(db), "otel", "import", "-", "--json"],
        input=(GOLDEN / "genai_no_content.json").read_bytes(),
    )
    assert stdin.exit_code == 0
    assert json.loads(stdin.stdout)["written"] == 8


def test_reimport_joined_otherwise_is_refused_not_reported_skipped(tmp_path: Path) -> None:
    """The same file imported again is skipped; imported again with its traces joined by
    ``gap`` (a run of the same id with other steps), it is refused and writes nothing."""
    from tachograph.errors import FormatError
    from tachograph.store import SQLiteStore

    path = Path(__file__).parent.parent / "golden" / "otel" / "producers" / "openai-v2.json"
    store = SQLiteStore(tmp_path / "otel.db")
    first = tgo.import_otlp(store, path)
    assert len(first.runs) > 1  # several traces: a gap can join them
    again = tgo.import_otlp(store, path)
    assert all(r.skipped for r in again.runs)
    assert again.written == 0
    before = {i.run_id: i.events for i in store.runs(limit=0)}
    with pytest.raises(FormatError, match="already in the store"):
        tgo.import_otlp(store, path, gap=3600.0)
    assert {i.run_id: i.events for i in store.runs(limit=0)} == before

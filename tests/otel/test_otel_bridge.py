"""The live bridge, with the real OpenTelemetry SDK and InMemorySpanExporter."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from otel_weather import MODEL, declared_agent, failing_agent, weather_agent

import tachograph as tg
import tachograph.otel as tgo
from tachograph.otel.spans import attribute_value, capture_content_from_env
from tachograph.store import SQLiteStore


def _by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


def _hex_ids(span: ReadableSpan) -> tuple[str, str]:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def _record(store: SQLiteStore, agent: Any = declared_agent, **options: Any) -> tg.RunResult:
    return tg.record_run(
        agent, "What's the weather in Paris?", store=store, actor="weather_agent", **options
    )


def test_genai_spans_names_kinds_parentage_and_attributes(
    provider: TracerProvider, exporter: InMemorySpanExporter, store: SQLiteStore
) -> None:
    tgo.instrument(provider, capture_content=False)
    result = _record(store)
    spans = _by_name(exporter.get_finished_spans())
    assert sorted(spans) == [
        "chat " + MODEL,
        "execute_tool get_weather",
        "invoke_agent weather_agent",
    ]
    (root,) = spans["invoke_agent weather_agent"]
    chats = sorted(spans["chat " + MODEL], key=lambda s: s.start_time or 0)
    (tool,) = spans["execute_tool get_weather"]
    assert len(chats) == 2

    assert root.kind is SpanKind.INTERNAL
    assert root.parent is None
    assert all(c.kind is SpanKind.CLIENT for c in chats)
    assert tool.kind is SpanKind.INTERNAL
    root_trace, root_span = _hex_ids(root)
    for child in [*chats, tool]:
        assert child.parent is not None
        assert f"{child.parent.span_id:016x}" == root_span
        assert _hex_ids(child)[0] == root_trace

    assert dict(root.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "weather_agent",
        "gen_ai.conversation.id": result.run_id,
        "gen_ai.provider.name": "openai",
        "tachograph.run_id": result.run_id,
        "tachograph.status": "ok",
    }
    first = dict(chats[0].attributes or {})
    assert first == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": MODEL,
        "gen_ai.conversation.id": result.run_id,
        "gen_ai.request.seed": 7,
        "gen_ai.request.temperature": 0,
        "gen_ai.response.model": MODEL,
        "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.usage.input_tokens": 86,
        "gen_ai.usage.output_tokens": 17,
    }
    assert dict(chats[1].attributes or {})["gen_ai.response.id"] == "chatcmpl-2"
    assert dict(chats[1].attributes or {})["gen_ai.usage.input_tokens"] == 121
    events = store.events(result.run_id)
    tool_key = next(e.idempotency_key for e in events if e.type == "tool.requested")
    assert dict(tool.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "get_weather",
        # the model's own call id; tachograph's key is its own attribute
        "gen_ai.tool.call.id": "call_1",
        "tachograph.idempotency_key": tool_key,
        "gen_ai.tool.type": "function",
        "tachograph.effect": "read",
    }
    # No content without the opt-in.
    for span in [root, *chats, tool]:
        assert not any("messages" in k or "arguments" in k for k in (span.attributes or {}))
        for ev in span.events:
            assert not any(k.endswith((".request", ".response", ".input")) for k in ev.attributes)


def test_every_event_is_a_span_event_and_carries_its_spans_ids(
    provider: TracerProvider, exporter: InMemorySpanExporter, store: SQLiteStore
) -> None:
    tgo.instrument(provider, capture_content=False)
    result = _record(store)
    events = store.events(result.run_id)
    spans = exporter.get_finished_spans()
    by_span_id = {_hex_ids(s)[1]: s for s in spans}
    trace_ids = {_hex_ids(s)[0] for s in spans}
    assert len(trace_ids) == 1

    span_events = {
        (ev.attributes or {})["tachograph.seq"]: (span, ev) for span in spans for ev in span.events
    }
    assert sorted(span_events) == [e.seq for e in events]  # each event exactly once
    for event in events:
        span, ev = span_events[event.seq]
        assert ev.name == event.type
        attrs = dict(ev.attributes or {})
        assert attrs["tachograph.run_id"] == event.run_id
        assert attrs["tachograph.event_id"] == event.event_id
        assert attrs["tachograph.hash"] == event.hash
        # The event records the ids of the span its span event sits on.
        assert (event.trace_id, event.span_id) == _hex_ids(span)
        assert by_span_id[event.span_id] is span

    kinds = {e.type: by_span_id[e.span_id].name for e in events}
    assert kinds["run.started"] == kinds["run.finished"] == "invoke_agent weather_agent"
    assert kinds["decision"] == "invoke_agent weather_agent"
    assert kinds["model.request"] == kinds["model.response"] == "chat " + MODEL
    assert kinds["tool.requested"] == kinds["tool.completed"] == "execute_tool get_weather"
    # Requests and completions are matched by idempotency key: same span.
    for key in {e.idempotency_key for e in events if e.idempotency_key}:
        assert len({e.span_id for e in events if e.idempotency_key == key}) == 1
    # Safe payload fields ride along; nested ones as JSON strings.
    tool_ev = span_events[next(e.seq for e in events if e.type == "tool.requested")][1]
    assert tool_ev.attributes["tachograph.payload.tool"] == "get_weather"
    assert tool_ev.attributes["tachograph.payload.effect"] == "read"
    response_ev = span_events[next(e.seq for e in events if e.type == "model.response")][1]
    usage = json.loads(str(response_ev.attributes["tachograph.payload.usage"]))
    assert usage == {"prompt_tokens": 86, "completion_tokens": 17, "total_tokens": 103}
    assert "tachograph.payload.response" not in response_ev.attributes  # content: opt-in
    assert tg.verify_events(events).ok


def test_content_only_with_the_opt_in(
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    store: SQLiteStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    observer = tgo.instrument(provider)
    assert observer.capture_content is True
    _record(store)
    spans = _by_name(exporter.get_finished_spans())
    chats = sorted(spans["chat " + MODEL], key=lambda s: s.start_time or 0)
    first = dict(chats[0].attributes or {})
    inputs = json.loads(str(first["gen_ai.input.messages"]))
    assert inputs == [
        {
            "role": "system",
            "parts": [{"type": "text", "content": inputs[0]["parts"][0]["content"]}],
        },
        {"role": "user", "parts": [{"type": "text", "content": "What's the weather in Paris?"}]},
    ]
    outputs = json.loads(str(first["gen_ai.output.messages"]))
    assert outputs == [
        {
            "role": "assistant",
            "finish_reason": "tool_call",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "call_1",
                    "name": "get_weather",
                    "arguments": {"city": "Paris"},
                }
            ],
        }
    ]
    second_in = json.loads(str(dict(chats[1].attributes or {})["gen_ai.input.messages"]))
    assert second_in[-1]["parts"][0]["type"] == "tool_call_response"
    assert second_in[-1]["parts"][0]["id"] == "call_1"
    (tool,) = spans["execute_tool get_weather"]
    tool_attrs = dict(tool.attributes or {})
    assert json.loads(str(tool_attrs["gen_ai.tool.call.arguments"])) == {"city": "Paris"}
    assert json.loads(str(tool_attrs["gen_ai.tool.call.result"]))["temperature_c"] == 14
    (root,) = spans["invoke_agent weather_agent"]
    finished = next(e for e in root.events if e.name == "run.finished")
    assert finished.attributes["tachograph.payload.output"] == "It's 14 °C in Paris."


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("SPAN_ONLY", True),
        ("span_and_event", True),
        ("false", False),
        ("NO_CONTENT", False),
        ("EVENT_ONLY", False),
        ("", False),
        ("bogus", False),
    ],
)
def test_capture_content_env_values(value: str, expected: bool) -> None:
    env = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": value}
    assert capture_content_from_env(env) is expected


def test_nested_and_mixed_values_become_json_strings() -> None:
    assert attribute_value("x") == "x"
    assert attribute_value(3) == 3
    assert attribute_value(True) is True
    assert attribute_value([1, 2]) == [1, 2]
    assert attribute_value(["a", "b"]) == ["a", "b"]
    assert attribute_value([1, "a"]) == '[1,"a"]'
    assert attribute_value({"a": [1, {"b": None}]}) == '{"a":[1,{"b":null}]}'
    assert attribute_value([[1], [2]]) == "[[1],[2]]"
    assert attribute_value([]) == "[]"
    assert attribute_value(None) is None


def test_tool_failure_sets_error_status(
    provider: TracerProvider, exporter: InMemorySpanExporter, store: SQLiteStore
) -> None:
    tgo.instrument(provider, capture_content=False)
    with pytest.raises(LookupError):
        _record(store, failing_agent)
    spans = _by_name(exporter.get_finished_spans())
    (tool,) = spans["execute_tool get_weather"]
    (root,) = spans["invoke_agent weather_agent"]
    assert tool.status.status_code is StatusCode.ERROR
    assert (tool.attributes or {})["error.type"] == "LookupError"
    assert root.status.status_code is StatusCode.ERROR
    assert (root.attributes or {})["tachograph.status"] == "error"


def test_span_events_on_the_agents_own_span_without_genai_spans(
    provider: TracerProvider, exporter: InMemorySpanExporter, store: SQLiteStore
) -> None:
    tgo.instrument(provider, genai_spans=False)
    tracer = provider.get_tracer("the-agent")
    with tracer.start_as_current_span("my agent step") as mine:
        result = _record(store)
    (span,) = exporter.get_finished_spans()
    assert span.name == "my agent step"
    events = store.events(result.run_id)
    assert [ev.name for ev in span.events] == [e.type for e in events]
    ctx = mine.get_span_context()
    assert {(e.trace_id, e.span_id) for e in events} == {
        (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
    }


def test_agent_spans_nest_under_invoke_agent(
    provider: TracerProvider, exporter: InMemorySpanExporter, store: SQLiteStore
) -> None:
    tgo.instrument(provider)
    tracer = provider.get_tracer("the-agent")

    def agent(question: str) -> str:
        with tracer.start_as_current_span("plan step"):
            tg.decide("route", "weather")
            return weather_agent(question)

    result = _record(store, agent)
    spans = _by_name(exporter.get_finished_spans())
    (root,) = spans["invoke_agent weather_agent"]
    (step,) = spans["plan step"]
    assert step.parent is not None
    assert step.parent.span_id == root.context.span_id
    for chat in spans["chat " + MODEL]:  # children of the current span, in the run's trace
        assert chat.parent is not None
        assert chat.parent.span_id == step.context.span_id
    decision = next(e for e in store.events(result.run_id) if e.type == "decision")
    assert decision.span_id == _hex_ids(step)[1]
    assert [ev.name for ev in step.events] == ["decision", "decision"]


def test_observer_passed_to_one_run_only(
    provider: TracerProvider, exporter: InMemorySpanExporter, store: SQLiteStore
) -> None:
    observer = tgo.TachographSpanObserver(provider, capture_content=False)
    traced = _record(store, observers=[observer])
    plain = _record(store)
    assert all(e.trace_id is not None for e in store.events(traced.run_id))
    assert all(e.trace_id is None for e in store.events(plain.run_id))
    assert len(exporter.get_finished_spans()) == 4


def test_uninstrument_stops_tracing(
    provider: TracerProvider, exporter: InMemorySpanExporter, store: SQLiteStore
) -> None:
    tgo.instrument(provider)
    tgo.uninstrument()
    result = _record(store)
    assert exporter.get_finished_spans() == ()
    assert all(e.trace_id is None and e.span_id is None for e in store.events(result.run_id))


def test_replay_emits_nothing(
    provider: TracerProvider, exporter: InMemorySpanExporter, store: SQLiteStore
) -> None:
    result = _record(store)
    tgo.instrument(provider)
    report = tg.replay(store, result.run_id, declared_agent)
    assert report.reproduced
    assert exporter.get_finished_spans() == ()


def test_fork_emits_only_its_live_steps_unless_asked(
    provider: TracerProvider, exporter: InMemorySpanExporter, store: SQLiteStore
) -> None:
    result = _record(store)
    events = store.events(result.run_id)
    # Fork at the tool's completion: the first model call and the tool are served.
    at = next(e.seq for e in events if e.type == "tool.completed")
    tgo.instrument(provider, capture_content=False)
    report = tg.fork(store, result.run_id, at, declared_agent)
    fork_events = store.events(report.new_run_id or "")
    spans = _by_name(exporter.get_finished_spans())
    assert sorted(spans) == ["chat " + MODEL, "invoke_agent weather_agent"]
    assert len(spans["chat " + MODEL]) == 1  # only the live second call
    (root,) = spans["invoke_agent weather_agent"]
    assert root.attributes["tachograph.fork_of"] == result.run_id
    assert root.attributes["tachograph.parent_seq"] == at
    seqs = sorted(
        ev.attributes["tachograph.seq"]
        for spans_ in spans.values()
        for s in spans_
        for ev in s.events
    )
    assert seqs == [0] + [e.seq for e in fork_events if e.seq > at]
    # The served steps still carry the fork's trace.
    assert {e.trace_id for e in fork_events} == {_hex_ids(root)[0]}

    exporter.clear()
    tgo.instrument(provider, capture_content=False, replayed=True)
    again = tg.fork(store, result.run_id, at, declared_agent)
    spans = _by_name(exporter.get_finished_spans())
    assert len(spans["chat " + MODEL]) == 2
    assert len(spans["execute_tool get_weather"]) == 1
    total = sum(len(s.events) for group in spans.values() for s in group)
    assert total == len(store.events(again.new_run_id or ""))


def test_exporter_failure_is_logged_not_raised(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    from fakes.otlp_receiver import OTLPReceiver

    with OTLPReceiver() as receiver:
        tp = TracerProvider()
        tp.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.traces_url, timeout=2))
        )
        tgo.instrument(tp, capture_content=False)
        receiver.fail_next(100, status=500)  # not retryable: fails at once
        with caplog.at_level(logging.ERROR):
            result = _record(store)
        assert result.status == "ok"
        assert result.output == "It's 14 °C in Paris."
        assert receiver.rejected_count == 4  # one export per span, each refused
        assert any("500" in r.getMessage() or "export" in r.getMessage() for r in caplog.records)
        assert tg.verify_events(store.events(result.run_id)).ok
        tp.shutdown()


def test_closed_port_is_logged_not_raised(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    from fakes.otlp_receiver import OTLPReceiver

    with OTLPReceiver() as receiver:
        url = receiver.traces_url
    # The receiver is stopped: nothing listens on its port any more.
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=url, timeout=0.5)))
    tgo.instrument(tp, capture_content=False)
    with caplog.at_level(logging.ERROR):
        result = _record(store)
    assert result.status == "ok"
    assert len(store.events(result.run_id)) == 9
    assert caplog.records, "the exporter's failure should be logged"
    tp.shutdown()


def test_a_broken_bridge_never_breaks_the_agent(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(tgo.TachographSpanObserver):
        def _before(self, *args: Any) -> Any:
            raise RuntimeError("boom before")

        def _after(self, *args: Any) -> Any:
            raise RuntimeError("boom after")

    observer = Broken(TracerProvider())
    with caplog.at_level(logging.ERROR, logger="tachograph.otel"):
        result = _record(store, observers=[observer])
    assert result.status == "ok"
    assert (
        sum("could not trace" in r.getMessage() for r in caplog.records) == 18
    )  # 9 events, before and after


def test_resume_emits_its_live_steps_under_a_resumed_root(
    provider: TracerProvider, exporter: InMemorySpanExporter, store: SQLiteStore
) -> None:
    from otel_weather import SYSTEM, chat

    question = "What's the weather in Paris?"
    # A run that stops without run.finished (as if the process had died after the first call).
    with (
        pytest.raises(GeneratorExit),
        tg.record(store, actor="weather_agent", input=question, models=[MODEL]) as run,
    ):
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": question},
        ]
        chat({"model": MODEL, "messages": messages, "temperature": 0, "seed": 7})
        run.flush()  # durable, as a crashed run's events are once written
        raise GeneratorExit
    (info,) = store.runs()
    before = len(store.events(info.run_id))
    tgo.instrument(provider, capture_content=False)
    report = tg.resume(store, info.run_id, declared_agent)
    assert report.output == "It's 14 °C in Paris."
    spans = _by_name(exporter.get_finished_spans())
    (root,) = spans["invoke_agent weather_agent"]
    assert root.attributes["tachograph.resumed"] is True
    assert root.attributes["tachograph.resumed_at_seq"] == before
    assert len(spans["chat " + MODEL]) == 1  # the served first call is not emitted again
    assert len(spans["execute_tool get_weather"]) == 1
    live = [e for e in store.events(info.run_id) if e.seq >= before]
    emitted = sorted(
        ev.attributes["tachograph.seq"] for g in spans.values() for s in g for ev in s.events
    )
    assert emitted == [e.seq for e in live]
    assert {e.trace_id for e in live} == {_hex_ids(root)[0]}


@tg.tool(effect="read", name="otel_slow_echo")
async def slow_echo(value: int, delay: float) -> int:
    """Completes in the reverse order of its calls when the first delay is longer."""
    import asyncio

    await asyncio.sleep(delay)
    return value


def test_concurrent_calls_are_matched_to_their_own_spans(
    provider: TracerProvider, exporter: InMemorySpanExporter, store: SQLiteStore
) -> None:
    import asyncio

    async def agent(question: str) -> list[int]:
        return list(await asyncio.gather(slow_echo(1, 0.05), slow_echo(2, 0.0)))

    tgo.instrument(provider, capture_content=True)
    result = tg.record_run(agent, "go", store=store, actor="gatherer")
    assert result.output == [1, 2]
    events = store.events(result.run_id)
    completions = [e for e in events if e.type == "tool.completed"]
    assert [e.payload["result"] for e in completions] == [2, 1]  # out of call order
    spans = _by_name(exporter.get_finished_spans())
    tools = spans["execute_tool otel_slow_echo"]
    assert len(tools) == 2
    for span in tools:
        attrs = dict(span.attributes or {})
        args = json.loads(str(attrs["gen_ai.tool.call.arguments"]))
        assert json.loads(str(attrs["gen_ai.tool.call.result"])) == args["value"]
        names = [ev.name for ev in span.events]
        assert names == ["tool.requested", "tool.completed"]
        seqs = [ev.attributes["tachograph.seq"] for ev in span.events]
        keys = {events[s].idempotency_key for s in seqs}
        assert len(keys) == 1
        assert {events[s].span_id for s in seqs} == {_hex_ids(span)[1]}

"""The Anthropic SDK recorded at its transport and replayed with the server gone."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import httpx2
import pytest

import tachograph
from fakes.llm_server import FakeLLMServer
from tachograph.integrations.anthropic import instrument

from .agents import (
    ANTHROPIC_MODEL,
    ANTHROPIC_SNAPSHOT,
    ANTHROPIC_TOOLS,
    PROMPT,
    REFUNDS,
    SYSTEM,
    async_messages_agent,
    declared,
    messages_agent,
    plain,
)
from .conftest import change_paths, events, payload_text, seqs, stop, types

LOOP = [
    "run.started",
    "model.request",
    "model.response",
    "tool.requested",
    "tool.completed",
    "model.request",
    "model.response",
    "tool.requested",
    "tool.completed",
    "model.request",
    "model.response",
    "run.finished",
]


def _client(srv: FakeLLMServer, **options: Any) -> anthropic.Anthropic:
    return instrument(anthropic.Anthropic(base_url=srv.base_url, api_key="sk-ant-test", **options))


def test_a_messages_agent_is_recorded_and_replayed_offline(srv: FakeLLMServer, db: str) -> None:
    client = _client(srv)
    agent = declared(messages_agent(client), "billing")
    result = tachograph.record_run(agent, PROMPT, store=db)

    assert result.output["answer"].startswith("Refund of 19.99 issued for order B-2002.")
    recorded = events(db, result.run_id)
    assert types(recorded) == LOOP
    request = recorded[1].payload
    assert request["http"] == {"method": "POST", "path": "/v1/messages"}
    assert request["request"]["system"] == SYSTEM
    assert request["request"]["tools"] == ANTHROPIC_TOOLS
    assert request["request"]["max_tokens"] == 512
    assert request["prompt_hash"] == tachograph.capture.runtime.sha256_text(SYSTEM)
    answer = recorded[2]
    assert answer.model == ANTHROPIC_SNAPSHOT
    body = answer.payload["response"]["body"]
    assert body["stop_reason"] == "tool_use"
    assert body["content"][0]["type"] == "tool_use"
    assert answer.payload["usage"]["output_tokens"] == body["usage"]["output_tokens"] > 0
    assert answer.payload["response"]["headers"]["request-id"] == "req_fake_000001"
    text = payload_text(recorded)
    for secret in ("sk-ant-test", "authorization", "x-api-key", "anthropic-version", "x-stainless"):
        assert secret not in text
    count = stop(srv)

    report = tachograph.replay(db, result.run_id, agent)

    assert report.reproduced, report.render()
    assert not report.simulation
    assert report.output == result.output
    assert srv.request_count == count == 3
    assert len(REFUNDS) == 1


def test_a_changed_word_in_the_system_prompt_diverges_at_its_seq(
    srv: FakeLLMServer, db: str
) -> None:
    client = _client(srv)
    result = tachograph.record_run(declared(messages_agent(client), "billing"), PROMPT, store=db)
    recorded = events(db, result.run_id)
    count = stop(srv)
    edited = SYSTEM.replace("refund it", "refuse it")

    report = tachograph.replay(
        db, result.run_id, declared(messages_agent(client, system=edited), "billing"), collect=True
    )

    assert [d.kind for d in report.divergences] == [tachograph.DivergenceKind.REQUEST_CHANGED] * 3
    assert [d.seq for d in report.divergences] == seqs(recorded, "model.request")
    assert change_paths(report)["$.payload.request.system"] == (SYSTEM, edited)
    assert srv.request_count == count


def test_the_stream_helper_replays_the_same_events(srv: FakeLLMServer, db: str) -> None:
    client = _client(srv)
    agent = declared(messages_agent(client, stream=True), "billing")
    result = tachograph.record_run(agent, PROMPT, store=db)
    assert result.output["streamed"] == [
        word + " " for word in result.output["answer"].split(" ")[:-1]
    ] + [result.output["answer"].split(" ")[-1]]
    recorded = events(db, result.run_id)
    assert types(recorded) == LOOP
    first = recorded[2]
    kinds = [event["event"] for event in first.payload["response"]["events"]]
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert "input_json_delta" in str(first.payload["response"]["events"])
    assert first.model == ANTHROPIC_SNAPSHOT  # named by message_start
    # Usage merged across the stream: message_start's input tokens, message_delta's output.
    delta_usage = first.payload["response"]["events"][-2]["data"]["usage"]
    assert first.payload["usage"]["output_tokens"] == delta_usage["output_tokens"] > 1
    assert first.payload["usage"]["input_tokens"] > 0
    count = stop(srv)

    report = tachograph.replay(db, result.run_id, agent)

    assert report.reproduced, report.render()
    assert report.output == result.output
    assert srv.request_count == count


def test_async_streaming_agent(srv: FakeLLMServer, db: str) -> None:
    client = instrument(anthropic.AsyncAnthropic(base_url=srv.base_url, api_key="sk-ant-test"))
    agent = declared(async_messages_agent(client), "billing")
    result = tachograph.record_run(agent, PROMPT, store=db)
    assert result.output["model"] == ANTHROPIC_SNAPSHOT
    assert types(events(db, result.run_id)) == LOOP
    count = stop(srv)

    report = tachograph.replay(db, result.run_id, agent)
    assert report.reproduced, report.render()
    assert report.output == result.output

    async def inside_a_loop() -> tachograph.ReplayReport:
        return await tachograph.areplay(db, result.run_id, agent)

    assert asyncio.run(inside_a_loop()).output == result.output
    assert srv.request_count == count


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(529, "anthropic.OverloadedError"), (429, "anthropic.RateLimitError")],
)
def test_an_error_then_retry_replays_the_same_attempts(
    srv: FakeLLMServer, db: str, status: int, error_type: str
) -> None:
    attempts: list[tuple[int, int]] = []

    def observe(request: anthropic.APIRequest, call_next: Any) -> Any:
        response = call_next(request)
        attempts.append((request.retries_taken, response.status_code))
        return response

    client = instrument(
        anthropic.Anthropic(
            base_url=srv.base_url, api_key="sk-ant-test", max_retries=2, middleware=[observe]
        )
    )

    def run(prompt: str) -> str:
        message = client.messages.create(
            model=ANTHROPIC_MODEL, max_tokens=64, messages=[{"role": "user", "content": prompt}]
        )
        block = message.content[0]
        assert block.type == "text"
        return block.text

    srv.fail_next(1, status)
    result = tachograph.record_run(plain(run), "hi", store=db)
    live = list(attempts)
    assert live == [(0, status), (1, 200)]
    recorded = events(db, result.run_id)
    (failed,) = [e for e in recorded if e.type == "model.failed"]
    assert failed.payload["error"]["type"] == error_type
    assert failed.payload["error"]["status"] == status
    count = stop(srv)

    attempts.clear()
    report = tachograph.replay(db, result.run_id, plain(run))

    assert report.reproduced, report.render()
    assert report.output == result.output == "Hello! You said: hi"
    assert attempts == live  # the SDK met the same error and retried the same way
    assert srv.request_count == count == 2


def test_an_error_the_agent_handles_is_the_same_exception_in_replay(
    srv: FakeLLMServer, db: str
) -> None:
    client = _client(srv, max_retries=0)

    def run(prompt: str) -> list[Any]:
        try:
            client.messages.create(
                model=ANTHROPIC_MODEL, max_tokens=64, messages=[{"role": "user", "content": prompt}]
            )
        except anthropic.APIStatusError as exc:
            return [type(exc).__name__, exc.status_code, exc.request_id, exc.body]
        return []

    srv.fail_next(1, 529)
    result = tachograph.record_run(plain(run), "hi", store=db)
    assert result.output[:3] == ["OverloadedError", 529, "req_fake_000001"]
    stop(srv)

    report = tachograph.replay(db, result.run_id, plain(run))
    assert report.reproduced, report.render()
    assert report.output == result.output


def test_beta_headers_are_part_of_the_request(srv: FakeLLMServer, db: str) -> None:
    client = _client(srv)

    def agent_with(beta: str) -> Any:
        def run(prompt: str) -> str:
            message = client.messages.create(
                model=ANTHROPIC_MODEL,
                max_tokens=64,
                messages=[{"role": "user", "content": prompt}],
                extra_headers={"anthropic-beta": beta},
            )
            return message.id

        return run

    result = tachograph.record_run(agent_with("tools-2026-01-01"), "hi", store=db)
    recorded = events(db, result.run_id)
    assert recorded[1].payload["http"]["headers"] == {"anthropic-beta": "tools-2026-01-01"}
    stop(srv)

    assert tachograph.replay(db, result.run_id, agent_with("tools-2026-01-01")).reproduced
    report = tachograph.replay(db, result.run_id, agent_with("tools-2026-06-01"))
    assert report.first is not None
    assert report.first.seq == 1
    assert change_paths(report) == {
        '$.payload.http.headers["anthropic-beta"]': ("tools-2026-01-01", "tools-2026-06-01")
    }


def test_an_error_event_inside_a_stream_is_a_failure_replayed_as_the_same_exception(
    db: str,
) -> None:
    # The fake server cannot send an error event inside a 200 stream; this provider can.
    sent: list[int] = []
    stream = (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1",'
        b'"type":"message","role":"assistant","model":"claude-sonnet-5-20260930",'
        b'"content":[],"stop_reason":null,"stop_sequence":null,'
        b'"usage":{"input_tokens":5,"output_tokens":1}}}\n\n'
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
        b'"message":"Overloaded"}}\n\n'
    )

    def provider(request: httpx2.Request) -> httpx2.Response:
        sent.append(1)
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=stream)

    http = httpx2.Client(transport=httpx2.MockTransport(provider))
    client = instrument(
        anthropic.Anthropic(base_url="http://provider.test", api_key="k", http_client=http)
    )

    def run(prompt: str) -> list[Any]:
        try:
            with client.messages.stream(
                model=ANTHROPIC_MODEL, max_tokens=64, messages=[{"role": "user", "content": prompt}]
            ) as live:
                return [event.type for event in live]
        except anthropic.APIStatusError as exc:
            return [type(exc).__name__, exc.status_code, exc.type]

    result = tachograph.record_run(plain(run), "hi", store=db)
    assert result.output == ["APIStatusError", 200, "overloaded_error"]
    recorded = events(db, result.run_id)
    (failed,) = [e for e in recorded if e.type == "model.failed"]
    assert failed.payload["error"] == {
        "type": "anthropic.APIStatusError",
        "message": "Overloaded",
        "status": 200,
    }
    assert failed.model == ANTHROPIC_SNAPSHOT
    assert "incomplete" not in failed.payload["response"]
    assert [e["event"] for e in failed.payload["response"]["events"]] == ["message_start", "error"]

    report = tachograph.replay(db, result.run_id, plain(run))
    assert report.reproduced, report.render()
    assert report.output == result.output
    assert sent == [1]

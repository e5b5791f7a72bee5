"""The OpenAI SDK recorded at its transport and replayed with the server gone.

Every test drives the real ``openai`` client against the fake server on 127.0.0.1, records a
run, stops the server, and replays the same agent code: the server's request counter must not
move, and a refused connection would fail the replay if anything leaked.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import tachograph
from fakes.llm_server import FakeLLMServer
from tachograph.integrations.openai import instrument, is_instrumented, uninstrument

from .agents import (
    CHAT_TOOLS,
    OPENAI_MODEL,
    OPENAI_SNAPSHOT,
    PROMPT,
    REFUNDS,
    SYSTEM,
    async_chat_agent,
    chat_agent,
    declared,
    plain,
    responses_agent,
    streaming_chat_agent,
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


def _client(srv: FakeLLMServer, **options: Any) -> openai.OpenAI:
    return instrument(openai.OpenAI(base_url=srv.openai_base_url, api_key="sk-test", **options))


def _async_client(srv: FakeLLMServer, **options: Any) -> openai.AsyncOpenAI:
    client = openai.AsyncOpenAI(base_url=srv.openai_base_url, api_key="sk-test", **options)
    return instrument(client)


# -- chat completions: record, replay offline, diverge ----------------------------------------


def test_a_chat_agent_is_recorded_in_one_line_as_sent_and_whole(
    srv: FakeLLMServer, db: str
) -> None:
    agent = declared(chat_agent(_client(srv)), "billing")

    result = tachograph.record_run(agent, PROMPT, store=db)

    assert result.status == "ok"
    assert result.output["answer"].startswith("Refund of 19.99 issued for order B-2002.")
    recorded = events(db, result.run_id)
    assert types(recorded) == LOOP
    first = recorded[1]
    request = first.payload["request"]
    assert request["model"] == OPENAI_MODEL
    assert request["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": PROMPT},
    ]
    assert request["tools"] == CHAT_TOOLS
    assert (request["temperature"], request["seed"]) == (0.2, 7)
    assert first.payload["http"] == {"method": "POST", "path": "/v1/chat/completions"}
    assert first.payload["prompt_hash"].startswith("sha256:")
    assert (first.model, first.seed) == (OPENAI_MODEL, 7)
    # The answer is whole, and the exact model that answered is pinned on the event.
    answer = recorded[2]
    assert answer.idempotency_key == first.idempotency_key
    assert answer.model == OPENAI_SNAPSHOT
    assert answer.payload["response"]["status"] == 200
    body = answer.payload["response"]["body"]
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "lookup_order"
    assert answer.payload["response"]["headers"]["x-request-id"] == "req_fake_000001"
    assert answer.payload["usage"] == body["usage"]
    assert answer.payload["usage"]["total_tokens"] > 0
    # Credentials and the SDK's volatile headers never reach the record.
    text = payload_text(recorded)
    for secret in ("sk-test", "authorization", "x-stainless", "user-agent"):
        assert secret not in text
    assert len(REFUNDS) == 1


def test_replay_answers_from_the_record_with_the_server_stopped(
    srv: FakeLLMServer, db: str
) -> None:
    client = _client(srv)
    agent = declared(chat_agent(client), "billing")
    result = tachograph.record_run(agent, PROMPT, store=db)
    count = stop(srv)

    report = tachograph.replay(db, result.run_id, agent)

    assert report.reproduced, report.render()
    assert not report.simulation
    assert report.served == report.events == len(LOOP)
    assert report.output == result.output
    assert srv.request_count == count == 3
    assert len(REFUNDS) == 1  # the refund was served from the record, not issued again


def test_one_changed_word_in_the_prompt_is_a_divergence_at_that_request(
    srv: FakeLLMServer, db: str
) -> None:
    client = _client(srv)
    result = tachograph.record_run(declared(chat_agent(client), "billing"), PROMPT, store=db)
    recorded = events(db, result.run_id)
    count = stop(srv)
    edited = SYSTEM.replace("careful", "careless")
    agent = declared(chat_agent(client, system=edited), "billing")

    report = tachograph.replay(db, result.run_id, agent)

    assert not report.reproduced
    first = report.first
    assert first is not None
    assert first.kind is tachograph.DivergenceKind.REQUEST_CHANGED
    assert first.seq == seqs(recorded, "model.request")[0] == 1
    changes = change_paths(report)
    assert changes["$.payload.request.messages[0].content"] == (SYSTEM, edited)
    assert "$.payload.prompt_hash" in changes
    assert len(changes) == 2  # nothing else about the request changed

    # Collecting goes on: each of the three requests carries the edited system prompt.
    report = tachograph.replay(db, result.run_id, agent, collect=True)
    assert [d.seq for d in report.divergences] == seqs(recorded, "model.request")
    assert srv.request_count == count


@pytest.mark.parametrize(
    ("change", "path", "old", "new"),
    [
        ({"temperature": 0.7}, "$.payload.request.temperature", 0.2, 0.7),
        ({"tools": CHAT_TOOLS[:1]}, "$.payload.request.tools[1]", CHAT_TOOLS[1], None),
    ],
    ids=["temperature", "tool-list"],
)
def test_another_setting_or_tool_list_is_a_divergence_with_the_field(
    srv: FakeLLMServer, db: str, change: dict[str, Any], path: str, old: Any, new: Any
) -> None:
    client = _client(srv)
    result = tachograph.record_run(declared(chat_agent(client), "billing"), PROMPT, store=db)
    stop(srv)

    report = tachograph.replay(db, result.run_id, declared(chat_agent(client, **change), "billing"))

    assert report.first is not None
    assert report.first.kind is tachograph.DivergenceKind.REQUEST_CHANGED
    assert report.first.seq == 1
    recorded_value, now = change_paths(report)[path]
    assert recorded_value == old
    assert (now if new is not None else None) == new or repr(now) == "<missing>"


def test_async_client_records_and_replays(srv: FakeLLMServer, db: str) -> None:
    client = _async_client(srv)
    agent = declared(async_chat_agent(client), "billing")
    result = tachograph.record_run(agent, PROMPT, store=db)
    recorded = events(db, result.run_id)
    assert types(recorded) == LOOP
    assert {e.model for e in recorded if e.type == "model.response"} == {OPENAI_SNAPSHOT}
    count = stop(srv)

    report = tachograph.replay(db, result.run_id, agent)
    assert report.reproduced, report.render()
    assert report.output == result.output
    edited = declared(async_chat_agent(client, system=SYSTEM + " Be terse."), "billing")
    diverged = tachograph.replay(db, result.run_id, edited)
    assert diverged.first is not None
    assert diverged.first.seq == 1
    assert "$.payload.request.messages[0].content" in change_paths(diverged)
    assert srv.request_count == count


def test_async_replay_inside_a_running_loop(srv: FakeLLMServer, db: str) -> None:
    client = _async_client(srv)
    agent = declared(async_chat_agent(client), "billing")

    async def main() -> tuple[tachograph.RunResult, tachograph.ReplayReport, int]:
        result = await tachograph.arecord_run(agent, PROMPT, store=db)
        count = stop(srv)
        return result, await tachograph.areplay(db, result.run_id, agent), count

    result, report, count = asyncio.run(main())
    assert report.reproduced, report.render()
    assert report.output == result.output
    assert srv.request_count == count


def test_fork_overrides_a_recorded_answer_in_its_recorded_shape(
    srv: FakeLLMServer, db: str
) -> None:
    client = _client(srv)
    agent = declared(chat_agent(client), "billing")
    result = tachograph.record_run(agent, PROMPT, store=db)
    recorded = events(db, result.run_id)
    second = recorded[6]
    assert second.type == "model.response"
    answer = json.loads(json.dumps(second.payload["response"]))
    answer["body"]["choices"][0]["message"] = {"role": "assistant", "content": "No refund."}
    answer["body"]["choices"][0]["finish_reason"] = "stop"
    count = srv.request_count

    report = tachograph.fork(db, result.run_id, second.seq, agent, override=answer)

    assert report.output["answer"] == "No refund."
    assert srv.request_count == count  # everything up to the override was served
    forked = events(db, report.new_run_id or "")
    assert types(forked) == [*LOOP[:7], "run.finished"]
    assert forked[6].payload["overridden"] is True
    assert len(REFUNDS) == 1  # only the recording refunded


# -- streaming -------------------------------------------------------------------------------


def test_a_stream_is_recorded_chunk_by_chunk_and_replayed_as_the_same_stream(
    srv: FakeLLMServer, db: str
) -> None:
    client = _client(srv)
    live: list[Any] = []
    result = tachograph.record_run(
        declared(streaming_chat_agent(client, live), "billing"), PROMPT, store=db
    )
    recorded = events(db, result.run_id)
    assert types(recorded) == LOOP
    answer = recorded[2]
    stream = answer.payload["response"]
    assert stream["headers"]["content-type"].startswith("text/event-stream")
    data = [event["data"] for event in stream["events"]]
    assert data[-1] == "[DONE]"
    assert "incomplete" not in stream  # the SDK stopped at [DONE]: the stream was whole
    assert all(d["object"] == "chat.completion.chunk" for d in data[:-1])
    assert answer.model == OPENAI_SNAPSHOT  # named by the chunks
    assert answer.payload["usage"]["total_tokens"] > 0  # from the include_usage chunk
    first_turn = sum(1 for d in data if d != "[DONE]")
    assert first_turn > 3
    count = stop(srv)

    replayed: list[Any] = []
    report = tachograph.replay(
        db, result.run_id, declared(streaming_chat_agent(client, replayed), "billing")
    )

    assert report.reproduced, report.render()
    assert replayed == live  # the same chunks, one by one, as the SDK's own objects
    assert report.output == result.output
    assert srv.request_count == count


def test_a_stream_read_after_its_run_finished_warns_and_does_not_break(
    srv: FakeLLMServer, db: str
) -> None:
    client = _client(srv)
    with tachograph.record(db, actor="lazy") as run:
        stream = client.chat.completions.create(
            model=OPENAI_MODEL, messages=[{"role": "user", "content": "later"}], stream=True
        )
        run.output = "returned before reading"
    with pytest.warns(RuntimeWarning, match="after its run"):
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Hello! You said: later"
    # what the run read of it, at its end: nothing (a call with no answer left the run
    # unreplayable, taken for a process that died inside the call)
    recorded = events(db, run.run_id)
    assert types(recorded) == ["run.started", "model.request", "model.response", "run.finished"]
    assert recorded[2].payload["response"]["incomplete"] is True

    def lazy(_task: Any) -> str:
        client.chat.completions.create(
            model=OPENAI_MODEL, messages=[{"role": "user", "content": "later"}], stream=True
        )
        return "returned before reading"

    report = tachograph.replay(db, run.run_id, plain(lazy))
    assert report.reproduced, report.render()


def test_a_stream_broken_out_of_without_closing_is_recorded_and_replays(
    srv: FakeLLMServer, db: str
) -> None:
    # ``break`` out of a ``for`` over the stream, no ``with``: the answer was recorded only on
    # close, which came after the run (or never); the run could not be replayed
    client = _client(srv)

    def agent(task: str) -> str:
        stream = client.chat.completions.create(
            model=OPENAI_MODEL, messages=[{"role": "user", "content": task}], stream=True
        )
        first = ""
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                first = chunk.choices[0].delta.content
                break
        again = client.chat.completions.create(
            model=OPENAI_MODEL, messages=[{"role": "user", "content": "second " + first}]
        )
        return again.choices[0].message.content or ""

    result = tachograph.record_run(plain(agent), "hello there", store=db)
    recorded = events(db, result.run_id)
    assert types(recorded).count("model.response") == 2
    assert recorded[-1].type == "run.finished"
    sent = srv.request_count
    report = tachograph.replay(db, result.run_id, plain(agent))
    assert report.reproduced, report.render()
    assert report.output == result.output
    assert srv.request_count == sent


def test_a_stream_abandoned_early_replays_the_same_prefix(srv: FakeLLMServer, db: str) -> None:
    client = _client(srv)

    def first_words(prompt: str) -> list[str]:
        words: list[str] = []
        with client.chat.completions.create(
            model=OPENAI_MODEL, messages=[{"role": "user", "content": prompt}], stream=True
        ) as stream:
            for chunk in stream:
                words.append(chunk.choices[0].delta.content or "")
                if len(words) == 3:
                    break
        return words

    result = tachograph.record_run(plain(first_words), "one two three four five six", store=db)
    recorded = events(db, result.run_id)
    answer = recorded[2].payload["response"]
    assert answer["incomplete"] is True
    assert len(answer["events"]) < 8
    stop(srv)

    report = tachograph.replay(db, result.run_id, plain(first_words))
    assert report.reproduced, report.render()
    assert report.output == result.output == ["", "Hello! ", "You "]


def test_the_chat_stream_helper_replays(srv: FakeLLMServer, db: str) -> None:
    client = _client(srv)

    def run(prompt: str) -> dict[str, Any]:
        with client.chat.completions.stream(
            model=OPENAI_MODEL, messages=[{"role": "user", "content": prompt}]
        ) as stream:
            pieces = [event.delta for event in stream if event.type == "content.delta"]
            final = stream.get_final_completion()
        return {"pieces": pieces, "final": final.choices[0].message.content}

    result = tachograph.record_run(plain(run), "hello stream helper", store=db)
    assert len(result.output["pieces"]) > 1
    count = stop(srv)
    report = tachograph.replay(db, result.run_id, plain(run))
    assert report.reproduced, report.render()
    assert report.output == result.output
    assert srv.request_count == count


def test_concurrent_calls_replay_by_key(srv: FakeLLMServer, db: str) -> None:
    client = _async_client(srv)

    async def fan_out(prompt: str) -> list[str]:
        async def ask(text: str) -> str:
            completion = await client.chat.completions.create(
                model=OPENAI_MODEL, messages=[{"role": "user", "content": text}]
            )
            return completion.choices[0].message.content or ""

        return list(await asyncio.gather(*(ask(f"{prompt} {i}") for i in range(4))))

    result = tachograph.record_run(plain(fan_out), "part", store=db)
    assert result.output == [f"Hello! You said: part {i}" for i in range(4)]
    count = stop(srv)
    report = tachograph.replay(db, result.run_id, plain(fan_out), match="key")
    assert report.reproduced, report.render()
    assert report.output == result.output
    assert srv.request_count == count


def test_a_call_the_recording_never_made_stops_the_replay_without_network(
    srv: FakeLLMServer, db: str
) -> None:
    client = _client(srv)

    def once(prompt: str) -> str:
        completion = client.chat.completions.create(
            model=OPENAI_MODEL, messages=[{"role": "user", "content": prompt}]
        )
        return completion.choices[0].message.content or ""

    def twice(prompt: str) -> str:
        once(prompt)
        return once(prompt + "!")

    result = tachograph.record_run(plain(once), "hi", store=db)
    count = stop(srv)
    report = tachograph.replay(db, result.run_id, plain(twice))
    assert report.first is not None
    assert report.first.kind is tachograph.DivergenceKind.EXTRA_CALL
    assert report.first.seq == 3  # where run.finished was recorded
    assert srv.request_count == count


# -- the responses API ----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream-helper"])
def test_responses_api_agent(srv: FakeLLMServer, db: str, stream: bool) -> None:
    client = _client(srv)
    agent = declared(responses_agent(client, stream=stream), "billing")
    result = tachograph.record_run(agent, PROMPT, store=db)
    recorded = events(db, result.run_id)
    assert types(recorded) == LOOP
    request = recorded[1].payload
    assert request["http"]["path"] == "/v1/responses"
    assert request["request"]["instructions"] == SYSTEM
    assert request["prompt_hash"] == tachograph.capture.runtime.sha256_text(SYSTEM)
    answers = [e for e in recorded if e.type == "model.response"]
    assert {e.model for e in answers} == {OPENAI_SNAPSHOT}
    assert all(e.payload["usage"]["total_tokens"] > 0 for e in answers)
    if stream:
        kinds = [ev["event"] for ev in answers[0].payload["response"]["events"]]
        assert kinds[0] == "response.created"
        assert kinds[-1] == "response.completed"
        assert "response.function_call_arguments.delta" in kinds
        assert result.output["events"].count("response.completed") == 3
    count = stop(srv)

    report = tachograph.replay(db, result.run_id, agent)
    assert report.reproduced, report.render()
    assert report.output == result.output
    edited = declared(
        responses_agent(client, stream=stream, system=SYSTEM.replace("briefly", "fully")),
        "billing",
    )
    diverged = tachograph.replay(db, result.run_id, edited)
    assert diverged.first is not None
    assert diverged.first.seq == 1
    assert change_paths(diverged)["$.payload.request.instructions"][1].endswith("fully.")
    assert srv.request_count == count


# -- errors and retries ----------------------------------------------------------------------


def _raw_agent(client: openai.OpenAI) -> Any:
    def run(prompt: str) -> dict[str, Any]:
        raw = client.chat.completions.with_raw_response.create(
            model=OPENAI_MODEL, messages=[{"role": "user", "content": prompt}]
        )
        completion = raw.parse()
        return {
            "answer": completion.choices[0].message.content,
            "retries": raw.retries_taken,
            "request_id": raw.headers["x-request-id"],
        }

    return run


def test_a_rate_limit_then_retry_inside_the_sdk_replays_identically(
    srv: FakeLLMServer, db: str
) -> None:
    client = _client(srv, max_retries=2)
    srv.fail_next(1, 429)
    result = tachograph.record_run(plain(_raw_agent(client)), "hi", store=db)
    assert result.output == {
        "answer": "Hello! You said: hi",
        "retries": 1,
        "request_id": "req_fake_000002",
    }
    recorded = events(db, result.run_id)
    assert types(recorded) == [
        "run.started",
        "model.request",
        "model.failed",
        "model.request",
        "model.response",
        "run.finished",
    ]
    failed = recorded[2]
    assert failed.payload["error"]["type"] == "openai.RateLimitError"
    assert failed.payload["error"]["status"] == 429
    assert "Rate limit reached" in failed.payload["error"]["message"]
    assert failed.payload["response"]["body"]["error"]["code"] == "rate_limit_exceeded"
    # Each attempt is its own call; the retry's key is the same key, repeated.
    assert recorded[3].idempotency_key == f"{recorded[1].idempotency_key}#1"
    assert recorded[1].payload == recorded[3].payload  # the retry count header is not in it
    count = stop(srv)

    report = tachograph.replay(db, result.run_id, plain(_raw_agent(client)))
    assert report.reproduced, report.render()
    assert report.output == result.output
    assert srv.request_count == count == 2


def test_agent_retry_logic_sees_the_same_exceptions_in_replay(srv: FakeLLMServer, db: str) -> None:
    client = _client(srv, max_retries=0)

    def patient(prompt: str) -> dict[str, Any]:
        seen: list[Any] = []
        for _ in range(4):
            try:
                completion = client.chat.completions.create(
                    model=OPENAI_MODEL, messages=[{"role": "user", "content": prompt}]
                )
            except openai.APIStatusError as exc:
                seen.append([type(exc).__name__, exc.status_code, exc.request_id, str(exc)])
                continue
            return {"answer": completion.choices[0].message.content, "errors": seen}
        raise RuntimeError("gave up")

    srv.fail_next(1, 500)
    srv.fail_next(1, 429)
    result = tachograph.record_run(plain(patient), "hi", store=db)
    errors = result.output["errors"]
    assert [e[:3] for e in errors] == [
        ["InternalServerError", 500, "req_fake_000001"],
        ["RateLimitError", 429, "req_fake_000002"],
    ]
    recorded = events(db, result.run_id)
    failures = [e.payload["error"]["type"] for e in recorded if e.type == "model.failed"]
    assert failures == ["openai.InternalServerError", "openai.RateLimitError"]
    count = stop(srv)

    report = tachograph.replay(db, result.run_id, plain(patient))
    assert report.reproduced, report.render()
    assert report.output == result.output
    assert srv.request_count == count == 3


def test_replayed_retry_delays_are_shortened_only_when_asked(srv: FakeLLMServer, db: str) -> None:
    delays: list[str | None] = []

    def hook(response: httpx2.Response) -> None:
        if response.status_code == 429:
            delays.append(response.headers.get("retry-after-ms"))

    client = _client(srv, max_retries=1)
    client._client.event_hooks["response"].append(hook)
    srv.fail_next(1, 429, headers={"retry-after-ms": "20"})
    result = tachograph.record_run(plain(_raw_agent(client)), "hi", store=db)
    stop(srv)

    fast = tachograph.replay(db, result.run_id, plain(_raw_agent(client)))
    uninstrument(client)
    instrument(client, fast_retries=False)
    slow = tachograph.replay(db, result.run_id, plain(_raw_agent(client)))

    assert fast.reproduced
    assert slow.reproduced
    assert fast.output == slow.output == result.output
    assert delays == ["20", "1", "20"]  # live, replayed fast, replayed as recorded


def test_a_delay_the_sdk_refuses_to_wait_for_is_served_as_recorded(
    srv: FakeLLMServer, db: str
) -> None:
    # openai gives up at once when told to wait more than two minutes; shortening that
    # delay in replay would make it retry, a call the recording never made.
    client = _client(srv, max_retries=2)

    def run(prompt: str) -> list[Any]:
        try:
            client.chat.completions.create(
                model=OPENAI_MODEL, messages=[{"role": "user", "content": prompt}]
            )
        except openai.RateLimitError as exc:
            return [exc.status_code, exc.response.headers.get("retry-after-ms")]
        return []

    srv.fail_next(1, 429, headers={"retry-after-ms": "600000", "retry-after": "600"})
    result = tachograph.record_run(plain(run), "hi", store=db)
    assert result.output == [429, "600000"]
    count = stop(srv)
    assert count == 1

    report = tachograph.replay(db, result.run_id, plain(run))
    assert report.reproduced, report.render()
    assert report.output == result.output
    assert srv.request_count == count


def test_async_rate_limit_then_retry_replays(srv: FakeLLMServer, db: str) -> None:
    client = _async_client(srv, max_retries=2)

    async def run(prompt: str) -> dict[str, Any]:
        raw = await client.chat.completions.with_raw_response.create(
            model=OPENAI_MODEL, messages=[{"role": "user", "content": prompt}], stream=True
        )
        text = ""
        async for chunk in raw.parse():
            text += chunk.choices[0].delta.content or "" if chunk.choices else ""
        return {"answer": text, "retries": raw.retries_taken}

    srv.fail_next(2, 503)
    result = tachograph.record_run(plain(run), "hi", store=db)
    assert result.output == {"answer": "Hello! You said: hi", "retries": 2}
    recorded = events(db, result.run_id)
    assert types(recorded).count("model.failed") == 2
    count = stop(srv)

    report = tachograph.replay(db, result.run_id, plain(run))
    assert report.reproduced, report.render()
    assert report.output == result.output
    assert srv.request_count == count == 3


def test_a_connection_failure_is_recorded_and_raised_again(db: str) -> None:
    with FakeLLMServer() as gone:
        base_url = gone.openai_base_url
    client = instrument(openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=1))

    def run(prompt: str) -> str:
        try:
            client.chat.completions.create(
                model=OPENAI_MODEL, messages=[{"role": "user", "content": prompt}]
            )
        except openai.APIConnectionError as exc:
            return type(exc).__name__
        return "connected"

    result = tachograph.record_run(plain(run), "hi", store=db)
    assert result.output == "APIConnectionError"
    recorded = events(db, result.run_id)
    failures = [e.payload["error"]["type"] for e in recorded if e.type == "model.failed"]
    assert failures == ["httpx2.ConnectError", "httpx2.ConnectError"]  # two attempts
    report = tachograph.replay(db, result.run_id, plain(run))
    assert report.reproduced, report.render()
    assert report.output == "APIConnectionError"


def test_an_error_chunk_inside_a_stream_is_a_failure_replayed_as_the_same_exception(
    db: str,
) -> None:
    # The fake server cannot send an error inside a 200 stream; this provider can.
    sent: list[int] = []
    chunk = (
        '{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-5.6-2026-09-30",'
        '"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}'
    )
    body = f'data: {chunk}\n\ndata: {{"error":{{"message":"boom","type":"server_error"}}}}\n\n'

    def provider(request: httpx2.Request) -> httpx2.Response:
        sent.append(1)
        return httpx2.Response(
            200, headers={"content-type": "text/event-stream"}, content=body.encode()
        )

    http = httpx2.Client(transport=httpx2.MockTransport(provider))
    client = instrument(
        openai.OpenAI(base_url="http://provider.test/v1", api_key="k", http_client=http)
    )

    def run(prompt: str) -> list[Any]:
        seen: list[Any] = []
        try:
            for part in client.chat.completions.create(
                model=OPENAI_MODEL, messages=[{"role": "user", "content": prompt}], stream=True
            ):
                seen.append(part.choices[0].delta.content)
        except openai.APIError as exc:
            seen.append([type(exc).__name__, str(exc)])
        return seen

    result = tachograph.record_run(plain(run), "hi", store=db)
    assert result.output == ["Hel", ["APIError", "boom"]]
    recorded = events(db, result.run_id)
    (failed,) = [e for e in recorded if e.type == "model.failed"]
    assert failed.payload["error"] == {"type": "openai.APIError", "message": "boom", "status": 200}
    assert failed.model == OPENAI_SNAPSHOT

    report = tachograph.replay(db, result.run_id, plain(run))
    assert report.reproduced, report.render()
    assert report.output == result.output
    assert sent == [1]


# -- the client itself -----------------------------------------------------------------------


def test_outside_a_run_the_client_is_untouched(srv: FakeLLMServer, db: str) -> None:
    client = _client(srv)
    completion = client.chat.completions.create(
        model=OPENAI_MODEL, messages=[{"role": "user", "content": "hi"}]
    )
    assert completion.choices[0].message.content == "Hello! You said: hi"
    assert srv.request_count == 1
    assert srv.requests[0].headers["authorization"] == "Bearer sk-test"


def test_instrument_is_in_place_idempotent_and_covers_copies(srv: FakeLLMServer, db: str) -> None:
    original = openai.OpenAI(base_url=srv.openai_base_url, api_key="sk-test")
    copy_before = original.with_options(timeout=30)
    client = instrument(original)
    assert client is original
    assert instrument(client) is client
    assert is_instrumented(client)
    assert is_instrumented(copy_before)
    inner = client._client._transport.inner
    assert not isinstance(inner, type(client._client._transport))

    def run(prompt: str) -> str:
        completion = copy_before.chat.completions.create(
            model=OPENAI_MODEL, messages=[{"role": "user", "content": prompt}]
        )
        return completion.choices[0].message.content or ""

    result = tachograph.record_run(plain(run), "hi", store=db)
    assert types(events(db, result.run_id)).count("model.response") == 1

    uninstrument(client)
    assert not is_instrumented(client)
    assert client._client._transport is inner


def test_instrument_refuses_other_clients(srv: FakeLLMServer) -> None:
    with pytest.raises(TypeError, match=r"openai\.OpenAI"):
        instrument(anthropic.Anthropic(base_url=srv.base_url, api_key="k"))
    with pytest.raises(TypeError):
        instrument(object())


def test_importing_tachograph_imports_no_sdk() -> None:
    code = (
        "import sys, tachograph, tachograph.integrations; "
        "sdks = ('openai', 'anthropic', 'httpx2'); "
        "print(json.dumps(sorted(m for m in sdks if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", "import json; " + code],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out) == []


def test_an_upload_replays_although_its_multipart_boundary_is_new_each_time(
    srv: FakeLLMServer, db: str
) -> None:
    # the SDK draws a new multipart boundary for every request: the recorded digest of the
    # body never matched a replay's, so the same upload of the same bytes always diverged
    client = _client(srv)

    def upload(data: bytes) -> str:
        try:
            return client.files.create(file=("a.txt", data), purpose="assistants").id
        except openai.NotFoundError as exc:  # the fake server has no files route
            return f"NotFoundError {exc.status_code}"

    result = tachograph.record_run(plain(lambda _t: upload(b"hello world")), None, store=db)
    request = events(db, result.run_id)[1].payload["request"]
    assert "tachograph-boundary" in request["content_type"]
    sent = srv.request_count
    same = tachograph.replay(db, result.run_id, plain(lambda _t: upload(b"hello world")))
    assert same.reproduced, same.render()
    other = tachograph.replay(db, result.run_id, plain(lambda _t: upload(b"other bytes")))
    assert not other.reproduced  # other bytes are another request
    assert srv.request_count == sent


def test_a_64_bit_seed_keeps_the_request_readable(srv: FakeLLMServer, db: str) -> None:
    """OpenAI takes a 64-bit seed, past the record's integers (2^53 - 1): the request was
    then kept as a digest alone, without its model, messages or parameters, and a changed
    prompt could not be named. The seed is written as its text, and the path says so."""
    client = _client(srv)
    big = 2**62 + 1

    def agent(prompt: str, *, temperature: float = 0.2) -> str:
        completion = client.chat.completions.create(
            model=OPENAI_MODEL,
            messages=[{"role": "user", "content": prompt}],
            seed=big,
            temperature=temperature,
        )
        return completion.choices[0].message.content or ""

    result = tachograph.record_run(agent, PROMPT, store=db)
    recorded = events(db, result.run_id)
    request = next(e for e in recorded if e.type == "model.request")
    assert request.model == OPENAI_MODEL
    assert request.payload["request"]["seed"] == str(big)
    assert request.payload["request"]["messages"][0]["content"] == PROMPT
    assert request.payload["http"]["numbers_as_text"] == ["$.seed"]
    assert request.seed is None  # the envelope's seed is an integer of the profile
    stop(srv)
    assert tachograph.replay(db, result.run_id, agent).reproduced
    report = tachograph.replay(db, result.run_id, lambda p: agent(p, temperature=0.9))
    assert report.first is not None
    assert report.first.kind is tachograph.DivergenceKind.REQUEST_CHANGED
    assert "$.payload.request.temperature" in change_paths(report)


def test_credentials_in_the_recorded_query_under_short_names_are_redacted(
    srv: FakeLLMServer, db: str, tmp_path: Any
) -> None:
    """``http.query`` is the query's text without its "?": a ``key=`` at its start was
    stored as given (``api_key=`` was redacted, its name says what it is)."""
    secrets = {"key": "V0x7Qm3Rt9Zp0", "sig": "V5x7Qm3Rt9Zp5", "code": "V6x7Qm3Rt9Zp6"}
    client = _client(srv, default_query={**secrets, "api-version": "2024-10-21"})
    agent = declared(chat_agent(client), "billing")

    result = tachograph.record_run(agent, PROMPT, store=db)

    assert result.status == "ok"
    recorded = events(db, result.run_id)
    marker = "[redacted:secret:password]"
    assert recorded[1].payload["http"]["query"] == (
        f"key={marker}&sig={marker}&code={marker}&api-version=2024-10-21"
    )
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("runs.db*"))
    for value in secrets.values():
        assert value.encode() not in stored
    stop(srv)
    report = tachograph.replay(db, result.run_id, agent)
    assert report.reproduced, report.render()

"""Answers the network broke: a stream cut off mid-event, a body cut short, a call cancelled,
a stream abandoned and read further in replay.

The real ``openai`` and ``anthropic`` clients talk to a server on 127.0.0.1 that answers badly
on purpose (:mod:`.broken`); each run is recorded, the server stopped, and the same code
replayed: it must meet the same exception, or a divergence saying why it cannot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

import tachograph
from tachograph.integrations.anthropic import instrument as instrument_anthropic
from tachograph.integrations.openai import instrument as instrument_openai
from tachograph.providers.http import parse_sse

from .agents import plain
from .broken import Answer, broken_server, chat_chunks, message_events
from .conftest import events

SSE = "text/event-stream"


def _failed(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__name__}"


def _openai_stream(url: str, is_async: bool) -> Callable[[str], Any]:
    if is_async:
        aclient = instrument_openai(
            openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        )

        async def read_async(prompt: str) -> list[Any]:
            seen: list[Any] = []
            try:
                stream = await aclient.chat.completions.create(
                    model="gpt-5.6", messages=[{"role": "user", "content": prompt}], stream=True
                )
                async for chunk in stream:
                    seen.append(chunk.choices[0].delta.content)
            except Exception as exc:
                seen.append(_failed(exc))
            return seen

        return read_async
    client = instrument_openai(openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0))

    def read(prompt: str) -> list[Any]:
        seen: list[Any] = []
        try:
            for chunk in client.chat.completions.create(
                model="gpt-5.6", messages=[{"role": "user", "content": prompt}], stream=True
            ):
                seen.append(chunk.choices[0].delta.content)
        except Exception as exc:
            seen.append(_failed(exc))
        return seen

    return read


def _anthropic_stream(url: str, is_async: bool) -> Callable[[str], Any]:
    request: dict[str, Any] = {"model": "claude-sonnet-5", "max_tokens": 64}
    if is_async:
        aclient = instrument_anthropic(
            anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0)
        )

        async def read_async(prompt: str) -> list[Any]:
            seen: list[Any] = []
            try:
                async with aclient.messages.stream(
                    **request, messages=[{"role": "user", "content": prompt}]
                ) as stream:
                    async for text in stream.text_stream:
                        seen.append(text)
            except Exception as exc:
                seen.append(_failed(exc))
            return seen

        return read_async
    client = instrument_anthropic(anthropic.Anthropic(base_url=url, api_key="k", max_retries=0))

    def read(prompt: str) -> list[Any]:
        seen: list[Any] = []
        try:
            with client.messages.stream(
                **request, messages=[{"role": "user", "content": prompt}]
            ) as stream:
                seen.extend(stream.text_stream)
        except Exception as exc:
            seen.append(_failed(exc))
        return seen

    return read


# -- a stream cut off in the middle of an event ---------------------------------------------


def test_an_unfinished_last_event_is_not_an_event() -> None:
    whole = b'data: {"a":1}\n\n'
    assert parse_sse(whole + b'data: {"b":') == [{"data": {"a": 1}}]
    assert parse_sse(whole + b'data: {"b":2}\n') == [{"data": {"a": 1}}]  # no blank line yet
    assert parse_sse(whole + b'data: {"b":2}\n\n') == [{"data": {"a": 1}}, {"data": {"b": 2}}]
    assert parse_sse(b"event: ping\r\ndata: x\r\n\r\nevent: pi") == [{"event": "ping", "data": "x"}]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_stream_cut_mid_event_replays_the_same_connection_error(
    db: str, provider: str, is_async: bool
) -> None:
    if provider == "openai":
        pieces, make, expected = chat_chunks(["Hel", "lo", "!"]), _openai_stream, "Hel"
    else:
        pieces, make, expected = message_events(["Hel", "lo"]), _anthropic_stream, "Hel"
    half = pieces[-1][:40]  # the next event, cut off inside its JSON
    with broken_server(Answer(content_type=SSE, pieces=[*pieces, half], cut=True)) as server:
        agent = make(server.url, is_async)
        result = tachograph.record_run(plain(agent), "hi", store=db)
        sent = len(server.requests)
    error = f"{provider}.APIConnectionError"
    assert result.output[0] == expected
    assert result.output[-1] == error
    (failed,) = [e for e in events(db, result.run_id) if e.type == "model.failed"]
    recorded = failed.payload["response"]
    assert recorded["incomplete"] is True
    assert len(recorded["events"]) == len(pieces)  # the half event is not one

    report = tachograph.replay(db, result.run_id, plain(agent))

    assert report.reproduced, report.render()
    assert report.output == result.output
    assert sent == 1

"""Answers the network broke: a stream cut off mid-event, a body cut short, a call cancelled,
a stream abandoned and read further in replay.

The real ``openai`` and ``anthropic`` clients talk to a server on 127.0.0.1 that answers badly
on purpose (:mod:`.broken`); each run is recorded, the server stopped, and the same code
replayed: it must meet the same exception, or a divergence saying why it cannot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

import tachograph
from tachograph.capture import boundary
from tachograph.integrations.anthropic import instrument as instrument_anthropic
from tachograph.integrations.openai import instrument as instrument_openai
from tachograph.providers.http import parse_sse

from .agents import plain
from .broken import (
    Answer,
    broken_server,
    chat_body,
    chat_chunks,
    message_body,
    message_events,
)
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


# -- a body cut short after its headers -----------------------------------------------------

TRUNCATED = Answer(length=1000, pieces=[b'{"id": "chatcmpl-1", "obj'], cut=True)


def _openai_call(url: str, is_async: bool, **options: Any) -> Callable[[str], Any]:
    if is_async:
        aclient = instrument_openai(
            openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", **options)
        )

        async def ask_async(prompt: str) -> str:
            try:
                answer = await aclient.chat.completions.create(
                    model="gpt-5.6", messages=[{"role": "user", "content": prompt}]
                )
            except Exception as exc:
                return _failed(exc)
            return answer.choices[0].message.content or ""

        return ask_async
    client = instrument_openai(openai.OpenAI(base_url=url + "/v1", api_key="k", **options))

    def ask(prompt: str) -> str:
        try:
            answer = client.chat.completions.create(
                model="gpt-5.6", messages=[{"role": "user", "content": prompt}]
            )
        except Exception as exc:
            return _failed(exc)
        return answer.choices[0].message.content or ""

    return ask


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_body_cut_short_is_a_recorded_failure_the_sdk_retries_again(
    db: str, is_async: bool
) -> None:
    with broken_server(TRUNCATED, Answer(pieces=[chat_body("second try")])) as server:
        agent = _openai_call(server.url, is_async, max_retries=1)
        result = tachograph.record_run(plain(agent), "hi", store=db)
        assert len(server.requests) == 2
    assert result.output == "second try"
    recorded = events(db, result.run_id)
    assert [e.type for e in recorded] == [
        "run.started",
        "model.request",
        "model.failed",
        "model.request",
        "model.response",
        "run.finished",
    ]
    failed = recorded[2]
    assert failed.idempotency_key == recorded[1].idempotency_key
    assert failed.payload["error"]["type"] == "httpx2.RemoteProtocolError"
    assert set(failed.payload["error"]) == {"type", "message"}

    report = tachograph.replay(db, result.run_id, plain(agent))

    assert report.reproduced, report.render()
    assert report.output == result.output


def test_a_body_cut_short_raises_the_same_sdk_error_in_replay(db: str) -> None:
    with broken_server(Answer(length=1000, pieces=[message_body()[:30]], cut=True)) as server:
        client = instrument_anthropic(
            anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0)
        )

        def ask(prompt: str) -> str:
            try:
                client.messages.create(
                    model="claude-sonnet-5",
                    max_tokens=64,
                    messages=[{"role": "user", "content": prompt}],
                )
            except Exception as exc:
                return _failed(exc)
            return "answered"

        result = tachograph.record_run(plain(ask), "hi", store=db)
    assert result.output == "anthropic.APIConnectionError"
    report = tachograph.replay(db, result.run_id, plain(ask))
    assert report.reproduced, report.render()
    assert report.output == result.output


def test_a_read_timeout_inside_the_body_replays_as_the_sdk_timeout(db: str) -> None:
    stalled = Answer(length=1000, pieces=[b'{"id"'], stall=2.0)
    with broken_server(stalled) as server:
        agent = _openai_call(server.url, False, max_retries=0, timeout=0.3)
        result = tachograph.record_run(plain(agent), "hi", store=db)
    assert result.output == "openai.APITimeoutError"
    (failed,) = [e for e in events(db, result.run_id) if e.type == "model.failed"]
    assert failed.payload["error"]["type"] == "httpx2.ReadTimeout"

    report = tachograph.replay(db, result.run_id, plain(agent))

    assert report.reproduced, report.render()
    assert report.output == result.output


# -- a call the agent cancelled -------------------------------------------------------------


def _impatient(url: str, patience: float) -> Callable[[str], Any]:
    """Asks with a deadline (``asyncio.wait_for``), then asks another model when it passed."""
    client = instrument_openai(openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0))

    async def ask(prompt: str) -> list[str]:
        said: list[str] = []
        try:
            answer = await asyncio.wait_for(
                client.chat.completions.create(
                    model="gpt-5.6", messages=[{"role": "user", "content": prompt}]
                ),
                patience,
            )
            said.append(answer.choices[0].message.content or "")
        except asyncio.TimeoutError:
            said.append("timed out")
        fallback = await client.chat.completions.create(
            model="gpt-5.6-mini", messages=[{"role": "user", "content": prompt}]
        )
        said.append(fallback.choices[0].message.content or "")
        return said

    return ask


def test_a_cancelled_call_is_recorded_failed_and_waits_to_be_cancelled_in_replay(
    db: str,
) -> None:
    slow = Answer(pieces=[chat_body("late")], delay=3.0)
    with broken_server(slow, Answer(pieces=[chat_body("quick")])) as server:
        agent = _impatient(server.url, 0.3)
        result = tachograph.record_run(plain(agent), "hi", store=db)
        url = server.url
    assert result.output == ["timed out", "quick"]
    recorded = events(db, result.run_id)
    assert [e.type for e in recorded][1:5] == [
        "model.request",
        "model.failed",
        "model.request",
        "model.response",
    ]
    cancelled = recorded[2]
    assert cancelled.idempotency_key == recorded[1].idempotency_key
    assert cancelled.payload["error"] == {
        "type": "asyncio.exceptions.CancelledError",
        "message": "",
    }

    report = tachograph.replay(db, result.run_id, plain(agent))

    # reproduced: the agent's own 0.3 s deadline cancelled the served call (had the wait
    # run out first, the call would be an unreplayable divergence)
    assert report.reproduced, report.render()
    assert report.output == result.output
    assert not report.notes  # the cancellation is rebuilt, not a RecordedError
    # the agent code no longer cancels the call: a divergence, not a hang
    patient = _impatient(url, 60)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(boundary, "CANCELLED_WAIT", 0.2)
        diverged = tachograph.replay(db, result.run_id, plain(patient))
    assert not diverged.reproduced
    assert diverged.first is not None
    assert (diverged.first.kind, diverged.first.seq) == ("unreplayable", cancelled.seq)
    assert "cancelled" in diverged.first.explanation


def test_a_stream_cancelled_while_read_replays_its_events_then_waits_to_be_cancelled(
    db: str,
) -> None:
    stalled = Answer(content_type=SSE, pieces=chat_chunks(["Hel", "lo"]), stall=3.0)
    with broken_server(stalled) as server:
        client = instrument_openai(
            openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
        )

        async def read(prompt: str) -> list[str]:
            seen: list[str] = []

            async def words() -> None:
                stream = await client.chat.completions.create(
                    model="gpt-5.6", messages=[{"role": "user", "content": prompt}], stream=True
                )
                async with stream:
                    async for chunk in stream:
                        seen.append(chunk.choices[0].delta.content or "")

            try:
                await asyncio.wait_for(words(), 0.5)
            except asyncio.TimeoutError:
                seen.append("timed out")
            return seen

        result = tachograph.record_run(plain(read), "hi", store=db)
    assert result.output == ["Hel", "lo", "timed out"]
    (failed,) = [e for e in events(db, result.run_id) if e.type == "model.failed"]
    assert failed.payload["error"]["type"] == "asyncio.exceptions.CancelledError"
    assert failed.payload["response"]["incomplete"] is True
    assert len(failed.payload["response"]["events"]) == 2

    report = tachograph.replay(db, result.run_id, plain(read))

    assert report.reproduced, report.render()
    assert report.output == result.output
    assert not report.notes


# -- a stream abandoned early, read further in replay ----------------------------------------


def _first_words(url: str, is_async: bool, wanted: dict[str, int]) -> Callable[[str], Any]:
    """Reads a stream until it has ``wanted["n"]`` words, then breaks out of it."""
    if is_async:
        aclient = instrument_openai(
            openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        )

        async def read_async(prompt: str) -> list[str]:
            words: list[str] = []
            try:
                stream = await aclient.chat.completions.create(
                    model="gpt-5.6", messages=[{"role": "user", "content": prompt}], stream=True
                )
                async with stream:
                    async for chunk in stream:
                        words.append(chunk.choices[0].delta.content or "")
                        if len(words) == wanted["n"]:
                            break
            except tachograph.Unreplayable as exc:
                words.append(f"unreplayable: {exc}")
            return words

        return read_async
    client = instrument_openai(openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0))

    def read(prompt: str) -> list[str]:
        words: list[str] = []
        try:
            with client.chat.completions.create(
                model="gpt-5.6", messages=[{"role": "user", "content": prompt}], stream=True
            ) as stream:
                for chunk in stream:
                    words.append(chunk.choices[0].delta.content or "")
                    if len(words) == wanted["n"]:
                        break
        except tachograph.Unreplayable as exc:
            words.append(f"unreplayable: {exc}")
        return words

    return read


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_reading_an_abandoned_stream_past_its_recorded_events_is_a_divergence(
    db: str, is_async: bool
) -> None:
    whole = Answer(
        content_type=SSE, pieces=[*chat_chunks(["a", "b", "c", "d"]), b"data: [DONE]\n\n"]
    )
    wanted = {"n": 2}
    with broken_server(whole) as server:
        agent = _first_words(server.url, is_async, wanted)
        result = tachograph.record_run(plain(agent), "hi", store=db)
    assert result.output == ["a", "b"]
    answer = events(db, result.run_id)[2]
    assert answer.type == "model.response"
    assert answer.payload["response"]["incomplete"] is True
    assert len(answer.payload["response"]["events"]) == 2
    # the same code reads the same prefix
    assert tachograph.replay(db, result.run_id, plain(agent)).reproduced

    wanted["n"] = 100  # the code now reads the whole stream
    report = tachograph.replay(db, result.run_id, plain(agent))

    assert not report.reproduced
    assert report.first is not None
    assert (report.first.kind, report.first.seq) == ("unreplayable", answer.seq)
    assert "incomplete" in report.first.explanation
    # collecting, the replay goes on: the agent meets the error
    collected = tachograph.replay(db, result.run_id, plain(agent), collect=True)
    assert not collected.reproduced
    assert [d.kind for d in collected.divergences][:1] == ["unreplayable"]
    assert collected.output is not None
    assert collected.output[:2] == ["a", "b"]
    assert collected.output[2].startswith("unreplayable: The stream answering 'gpt-5.6'")


def test_reading_an_abandoned_anthropic_stream_further_is_a_divergence(db: str) -> None:
    pieces = message_events(["a", "b", "c"])
    wanted = {"n": 1}
    with broken_server(Answer(content_type=SSE, pieces=pieces)) as server:
        client = instrument_anthropic(
            anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0)
        )

        def read(prompt: str) -> list[str]:
            words: list[str] = []
            with client.messages.stream(
                model="claude-sonnet-5",
                max_tokens=64,
                messages=[{"role": "user", "content": prompt}],
            ) as stream:
                for text in stream.text_stream:
                    words.append(text)
                    if len(words) == wanted["n"]:
                        break
            return words

        result = tachograph.record_run(plain(read), "hi", store=db)
    assert result.output == ["a"]
    assert tachograph.replay(db, result.run_id, plain(read)).reproduced
    wanted["n"] = 100
    report = tachograph.replay(db, result.run_id, plain(read))
    assert not report.reproduced
    assert report.first is not None
    assert report.first.kind == "unreplayable"


def test_a_deadline_longer_than_the_grace_replays_at_its_own_time(db: str) -> None:
    """The replay waits for the agent's own deadline as long as the recorded call waited
    (twice that, plus the grace): a deadline past the grace was taken for one the agent no
    longer kept, and every such run diverged."""
    slow = Answer(pieces=[chat_body("late")], delay=4.0)
    with broken_server(slow, Answer(pieces=[chat_body("quick")])) as server:
        agent = _impatient(server.url, 1.2)
        result = tachograph.record_run(plain(agent), "hi", store=db)
    assert result.output == ["timed out", "quick"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(boundary, "CANCELLED_WAIT", 0.2)  # a grace shorter than the deadline
        report = tachograph.replay(db, result.run_id, plain(agent))
    # reproduced: the served call waited for the agent's own 1.2 s deadline (a wait of the
    # grace alone would have run out first, an unreplayable divergence)
    assert report.reproduced, report.render()


def test_a_call_the_runs_own_cancellation_ended_is_where_the_record_ends(db: str) -> None:
    """A run cancelled from outside (a server shutting a job down) while a call was under
    way: the agent's code did not cancel the call, and will not in the replay; the record
    ends inside it, which the replay says at once rather than after a wait."""
    with broken_server(Answer(pieces=[chat_body("late")], delay=3.0)) as server:
        client = instrument_openai(
            openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
        )

        async def agent(prompt: str) -> str:
            answer = await client.chat.completions.create(
                model="gpt-5.6", messages=[{"role": "user", "content": prompt}]
            )
            return answer.choices[0].message.content or ""

        async def cancelled_from_outside() -> None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(
                    tachograph.arecord_run(agent, "hi", store=db, run_id="aborted"), 0.5
                )

        asyncio.run(cancelled_from_outside())
    recorded = events(db, "aborted")
    assert recorded[-1].payload["status"] == "aborted"
    report = tachograph.replay(db, "aborted", agent)
    assert report.first is not None
    assert report.first.kind == "unreplayable"
    # at once: the explanation of a call nothing cancelled after the wait is another one
    assert "cancelled from outside" in report.first.explanation
    assert "nothing cancelled it" not in report.first.explanation

"""The fake LLM server, exercised through the real `openai` and `anthropic` SDK clients."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from .llm_server import ErrorReply, FakeLLMServer, Reply, ScriptRequest, ToolCall, resolve_model

OPENAI_MODEL = "gpt-5.6"
OPENAI_SNAPSHOT = "gpt-5.6-2026-09-30"
ANTHROPIC_MODEL = "claude-sonnet-5"
ANTHROPIC_SNAPSHOT = "claude-sonnet-5-20260930"
PROMPT = "Please refund order B-2002, it arrived broken."

CHAT_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Look up an order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "issue_refund",
            "description": "Refund an order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                "required": ["order_id", "amount"],
            },
        },
    },
]
RESPONSES_TOOLS: list[Any] = [{"type": "function", **tool["function"]} for tool in CHAT_TOOLS]
ANTHROPIC_TOOLS: list[Any] = [
    {
        "name": tool["function"]["name"],
        "description": tool["function"]["description"],
        "input_schema": tool["function"]["parameters"],
    }
    for tool in CHAT_TOOLS
]


def run_tool(name: str, arguments: dict[str, Any]) -> str:
    """Deterministic local implementations of the two agent tools."""
    if name == "lookup_order":
        return json.dumps(
            {"order_id": arguments["order_id"], "status": "delivered", "total": 19.99}
        )
    if name == "issue_refund":
        return json.dumps(
            {"refund_id": "rf_1", "order_id": arguments["order_id"], "amount": arguments["amount"]}
        )
    raise AssertionError(f"unexpected tool {name}")


@pytest.fixture
def srv() -> Iterator[FakeLLMServer]:
    """A running fake server with the default script."""
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def oai(srv: FakeLLMServer) -> Iterator[openai.OpenAI]:
    """A sync OpenAI client pointed at the fake server."""
    with openai.OpenAI(base_url=srv.openai_base_url, api_key="test", max_retries=2) as client:
        yield client


@pytest.fixture
def claude(srv: FakeLLMServer) -> Iterator[anthropic.Anthropic]:
    """A sync Anthropic client pointed at the fake server."""
    with anthropic.Anthropic(base_url=srv.base_url, api_key="test", max_retries=2) as client:
        yield client


# --------------------------------------------------------------------------------------
# OpenAI chat completions
# --------------------------------------------------------------------------------------


def test_chat_completion_tool_agent_loop(srv: FakeLLMServer, oai: openai.OpenAI) -> None:
    messages: list[Any] = [{"role": "user", "content": PROMPT}]
    calls: list[tuple[str, dict[str, Any]]] = []
    for _ in range(5):
        completion = oai.chat.completions.create(
            model=OPENAI_MODEL, messages=messages, tools=CHAT_TOOLS
        )
        assert completion.object == "chat.completion"
        assert completion.model == OPENAI_SNAPSHOT
        assert completion.usage is not None
        assert completion.usage.total_tokens > 0
        choice = completion.choices[0]
        if not choice.message.tool_calls:
            assert choice.finish_reason == "stop"
            break
        assert choice.finish_reason == "tool_calls"
        messages.append(choice.message.model_dump(exclude_none=True))
        for call in choice.message.tool_calls:
            assert call.type == "function"
            arguments = json.loads(call.function.arguments)
            calls.append((call.function.name, arguments))
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": run_tool(call.function.name, arguments),
                }
            )

    assert calls == [
        ("lookup_order", {"order_id": "B-2002"}),
        ("issue_refund", {"order_id": "B-2002", "amount": 19.99}),
    ]
    assert choice.message.content is not None
    assert choice.message.content.startswith("Refund of 19.99 issued for order B-2002.")
    assert srv.request_count == 3
    method, path, body, headers = srv.requests[0]
    assert (method, path, body["model"]) == ("POST", "/v1/chat/completions", OPENAI_MODEL)
    assert headers["authorization"] == "Bearer test"


def test_chat_completion_is_a_deterministic_function_of_the_request(oai: openai.OpenAI) -> None:
    first = oai.chat.completions.create(
        model=OPENAI_MODEL, messages=[{"role": "user", "content": "hi"}]
    )
    again = oai.chat.completions.create(
        model=OPENAI_MODEL, messages=[{"role": "user", "content": "hi"}]
    )
    other = oai.chat.completions.create(
        model=OPENAI_MODEL, messages=[{"role": "user", "content": "ho"}]
    )
    assert first.to_dict() == again.to_dict()
    assert first.id != other.id
    assert first.choices[0].message.content == "Hello! You said: hi"


def test_chat_completion_stream_with_tool_call_deltas_and_usage(oai: openai.OpenAI) -> None:
    stream = oai.chat.completions.create(
        model=OPENAI_MODEL,
        messages=[{"role": "user", "content": PROMPT}],
        tools=CHAT_TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert {chunk.model for chunk in chunks} == {OPENAI_SNAPSHOT}
    deltas = [
        call
        for chunk in chunks
        if chunk.choices
        for call in chunk.choices[0].delta.tool_calls or []
    ]
    assert deltas[0].id is not None
    assert deltas[0].function is not None
    assert deltas[0].function.name == "lookup_order"
    assert len(deltas) > 2
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function is not None)
    assert json.loads(arguments) == {"order_id": "B-2002"}
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1] == "tool_calls"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens > 0


def test_chat_completion_stream_helper_accumulates_text(oai: openai.OpenAI) -> None:
    with oai.chat.completions.stream(
        model=OPENAI_MODEL, messages=[{"role": "user", "content": "hello world"}]
    ) as stream:
        pieces = [event.delta for event in stream if event.type == "content.delta"]
        final = stream.get_final_completion()
    assert len(pieces) > 1
    assert "".join(pieces) == final.choices[0].message.content == "Hello! You said: hello world"


# --------------------------------------------------------------------------------------
# OpenAI responses
# --------------------------------------------------------------------------------------


def test_responses_tool_agent_loop(srv: FakeLLMServer, oai: openai.OpenAI) -> None:
    items: list[Any] = [{"role": "user", "content": PROMPT}]
    calls: list[tuple[str, dict[str, Any]]] = []
    for _ in range(5):
        response = oai.responses.create(model=OPENAI_MODEL, input=items, tools=RESPONSES_TOOLS)
        assert response.object == "response"
        assert response.status == "completed"
        assert response.model == OPENAI_SNAPSHOT
        function_calls = [item for item in response.output if item.type == "function_call"]
        if not function_calls:
            break
        for call in function_calls:
            arguments = json.loads(call.arguments)
            calls.append((call.name, arguments))
            items.append(call.model_dump(exclude_none=True))
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": call.call_id,
                    "output": run_tool(call.name, arguments),
                }
            )

    assert [name for name, _ in calls] == ["lookup_order", "issue_refund"]
    assert calls[1][1] == {"order_id": "B-2002", "amount": 19.99}
    assert response.output_text.startswith("Refund of 19.99 issued for order B-2002.")
    assert response.usage is not None
    assert response.usage.total_tokens > 0
    assert srv.request_count == 3
    assert {request.path for request in srv.requests} == {"/v1/responses"}


def test_responses_raw_stream_events(oai: openai.OpenAI) -> None:
    stream = oai.responses.create(model=OPENAI_MODEL, input="stream me", stream=True)
    events = list(stream)
    types = [event.type for event in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert "response.output_text.delta" in types
    assert "response.output_text.done" in types
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert text == "Hello! You said: stream me"
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == text
    assert completed.response.model == OPENAI_SNAPSHOT


def test_responses_stream_helper_with_function_call(oai: openai.OpenAI) -> None:
    with oai.responses.stream(model=OPENAI_MODEL, input=PROMPT, tools=RESPONSES_TOOLS) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in types
    assert "response.function_call_arguments.done" in types
    (call,) = final.output
    assert call.type == "function_call"
    assert call.name == "lookup_order"
    assert json.loads(call.arguments) == {"order_id": "B-2002"}


# --------------------------------------------------------------------------------------
# Anthropic messages
# --------------------------------------------------------------------------------------


def test_messages_tool_agent_loop(srv: FakeLLMServer, claude: anthropic.Anthropic) -> None:
    messages: list[Any] = [{"role": "user", "content": PROMPT}]
    calls: list[tuple[str, Any]] = []
    for _ in range(5):
        message = claude.messages.create(
            model=ANTHROPIC_MODEL, max_tokens=256, messages=messages, tools=ANTHROPIC_TOOLS
        )
        assert message.type == "message"
        assert message.role == "assistant"
        assert message.model == ANTHROPIC_SNAPSHOT
        assert message.usage.input_tokens > 0
        assert message.usage.output_tokens > 0
        tool_uses = [block for block in message.content if block.type == "tool_use"]
        if not tool_uses:
            assert message.stop_reason == "end_turn"
            break
        assert message.stop_reason == "tool_use"
        messages.append(
            {
                "role": "assistant",
                "content": [block.model_dump(exclude_none=True) for block in message.content],
            }
        )
        results: list[Any] = []
        for block in tool_uses:
            calls.append((block.name, block.input))
            assert isinstance(block.input, dict)
            output = run_tool(block.name, block.input)
            results.append({"type": "tool_result", "tool_use_id": block.id, "content": output})
        messages.append({"role": "user", "content": results})

    assert calls == [
        ("lookup_order", {"order_id": "B-2002"}),
        ("issue_refund", {"order_id": "B-2002", "amount": 19.99}),
    ]
    text = message.content[0]
    assert text.type == "text"
    assert text.text.startswith("Refund of 19.99 issued for order B-2002.")
    assert srv.request_count == 3
    assert srv.requests[0].path == "/v1/messages"
    assert "anthropic-version" in srv.requests[0].headers


def test_messages_raw_stream_events(claude: anthropic.Anthropic) -> None:
    stream = claude.messages.create(
        model=ANTHROPIC_MODEL,
        max_tokens=256,
        messages=[{"role": "user", "content": PROMPT}],
        tools=ANTHROPIC_TOOLS,
        stream=True,
    )
    events = list(stream)
    types = [event.type for event in events]
    assert types[0] == "message_start"
    assert types[-2:] == ["message_delta", "message_stop"]
    assert types.count("content_block_start") == types.count("content_block_stop") == 1
    first = events[0]
    assert first.type == "message_start"
    assert first.message.model == ANTHROPIC_SNAPSHOT
    partial = "".join(
        event.delta.partial_json
        for event in events
        if event.type == "content_block_delta" and event.delta.type == "input_json_delta"
    )
    assert json.loads(partial) == {"order_id": "B-2002"}
    delta = events[-2]
    assert delta.type == "message_delta"
    assert delta.delta.stop_reason == "tool_use"


def test_messages_stream_helper_text_and_final_message(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model=ANTHROPIC_MODEL, max_tokens=256, messages=[{"role": "user", "content": "hello there"}]
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 1
    assert "".join(pieces) == "Hello! You said: hello there"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 1


def test_messages_stream_helper_accumulates_tool_input(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model=ANTHROPIC_MODEL,
        max_tokens=256,
        messages=[{"role": "user", "content": PROMPT}],
        tools=ANTHROPIC_TOOLS,
    ) as stream:
        final = stream.get_final_message()
    (block,) = final.content
    assert block.type == "tool_use"
    assert (block.name, block.input) == ("lookup_order", {"order_id": "B-2002"})
    assert final.stop_reason == "tool_use"


# --------------------------------------------------------------------------------------
# Async clients
# --------------------------------------------------------------------------------------


def test_async_openai_chat_and_responses(srv: FakeLLMServer) -> None:
    async def main() -> tuple[str | None, str, list[str]]:
        async with openai.AsyncOpenAI(base_url=srv.openai_base_url, api_key="test") as client:
            completion = await client.chat.completions.create(
                model=OPENAI_MODEL, messages=[{"role": "user", "content": PROMPT}], tools=CHAT_TOOLS
            )
            tool_calls = completion.choices[0].message.tool_calls or []
            names = [call.function.name for call in tool_calls if call.type == "function"]

            stream = await client.chat.completions.create(
                model=OPENAI_MODEL, messages=[{"role": "user", "content": "async"}], stream=True
            )
            text = "".join(
                [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
            )

            async with client.responses.stream(
                model=OPENAI_MODEL, input="async responses"
            ) as events:
                async for _ in events:
                    pass
                final = await events.get_final_response()
            return text, final.output_text, names

    text, output_text, names = asyncio.run(main())
    assert text == "Hello! You said: async"
    assert output_text == "Hello! You said: async responses"
    assert names == ["lookup_order"]
    assert srv.request_count == 3
    assert len(list(srv.iter_requests("chat.completions"))) == 2
    assert len(list(srv.iter_requests("responses"))) == 1
    assert srv.requests[0].headers["x-stainless-async"].startswith("async:")


def test_async_anthropic_messages(srv: FakeLLMServer) -> None:
    async def main() -> tuple[anthropic.types.Message, str]:
        async with anthropic.AsyncAnthropic(base_url=srv.base_url, api_key="test") as client:
            message = await client.messages.create(
                model=ANTHROPIC_MODEL,
                max_tokens=64,
                messages=[{"role": "user", "content": PROMPT}],
                tools=ANTHROPIC_TOOLS,
            )
            async with client.messages.stream(
                model=ANTHROPIC_MODEL,
                max_tokens=64,
                messages=[{"role": "user", "content": "async"}],
            ) as stream:
                text = "".join([piece async for piece in stream.text_stream])
            return message, text

    message, text = asyncio.run(main())
    assert message.stop_reason == "tool_use"
    assert [block.type for block in message.content] == ["tool_use"]
    assert text == "Hello! You said: async"


# --------------------------------------------------------------------------------------
# Error injection and SDK retries
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500])
def test_openai_retries_injected_error_then_succeeds(
    srv: FakeLLMServer, oai: openai.OpenAI, status: int
) -> None:
    srv.fail_next(1, status=status)
    completion = oai.chat.completions.create(
        model=OPENAI_MODEL, messages=[{"role": "user", "content": "retry"}]
    )
    assert completion.choices[0].message.content == "Hello! You said: retry"
    assert srv.request_count == 2
    assert [request.headers["x-stainless-retry-count"] for request in srv.requests] == ["0", "1"]
    assert srv.requests[0].body == srv.requests[1].body


@pytest.mark.parametrize("status", [429, 500])
def test_anthropic_retries_injected_error_then_succeeds(
    srv: FakeLLMServer, claude: anthropic.Anthropic, status: int
) -> None:
    srv.fail_next(1, status=status)
    message = claude.messages.create(
        model=ANTHROPIC_MODEL, max_tokens=64, messages=[{"role": "user", "content": "retry"}]
    )
    assert message.stop_reason == "end_turn"
    assert srv.request_count == 2
    assert [request.headers["x-stainless-retry-count"] for request in srv.requests] == ["0", "1"]


def test_openai_rate_limit_error_after_exhausting_retries(
    srv: FakeLLMServer, oai: openai.OpenAI
) -> None:
    srv.fail_next(3, status=429)
    with pytest.raises(openai.RateLimitError) as caught:
        oai.responses.create(model=OPENAI_MODEL, input="x")
    assert srv.request_count == 3
    error = caught.value
    assert error.status_code == 429
    assert error.code == "rate_limit_exceeded"
    assert error.response.headers["retry-after-ms"] == "1"
    assert error.request_id == "req_fake_000003"


def test_anthropic_error_classes(srv: FakeLLMServer, claude: anthropic.Anthropic) -> None:
    srv.fail_next(3, status=429)
    with pytest.raises(anthropic.RateLimitError) as rate_limited:
        claude.messages.create(
            model=ANTHROPIC_MODEL, max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
    assert rate_limited.value.type == "rate_limit_error"
    assert srv.request_count == 3

    srv.fail_next(1, status=529)
    with pytest.raises(anthropic.OverloadedError):
        claude.with_options(max_retries=0).messages.create(
            model=ANTHROPIC_MODEL, max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
    srv.fail_next(1, status=500)
    with pytest.raises(anthropic.InternalServerError) as internal:
        claude.with_options(max_retries=0).messages.create(
            model=ANTHROPIC_MODEL, max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
    assert internal.value.type == "api_error"
    assert internal.value.request_id == "req_fake_000005"


def test_streaming_request_is_retried_before_the_stream_starts(
    srv: FakeLLMServer, oai: openai.OpenAI
) -> None:
    srv.fail_next(2, status=429)
    stream = oai.chat.completions.create(
        model=OPENAI_MODEL, messages=[{"role": "user", "content": "s"}], stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "Hello! You said: s"
    assert srv.request_count == 3


# --------------------------------------------------------------------------------------
# Scripts
# --------------------------------------------------------------------------------------


def test_list_script_is_consumed_in_order_and_renders_per_api(
    srv: FakeLLMServer, oai: openai.OpenAI
) -> None:
    srv.script = [
        Reply(
            text="Let me check.",
            tool_calls=[ToolCall("lookup_order", {"order_id": "Z-1"}, call_id="call_fixed")],
        ),
        ErrorReply(status=400, message="bad things"),
        Reply(text="done"),
    ]
    first = oai.chat.completions.create(
        model=OPENAI_MODEL, messages=[{"role": "user", "content": "a"}]
    )
    message = first.choices[0].message
    assert message.content == "Let me check."
    assert message.tool_calls is not None
    assert message.tool_calls[0].id == "call_fixed"

    with pytest.raises(openai.BadRequestError, match="bad things"):
        oai.chat.completions.create(model=OPENAI_MODEL, messages=[{"role": "user", "content": "b"}])

    with anthropic.Anthropic(base_url=srv.base_url, api_key="test") as claude:
        last = claude.messages.create(
            model="claude-x-20250101", max_tokens=8, messages=[{"role": "user", "content": "c"}]
        )
    assert last.content[0].type == "text"
    assert last.content[0].text == "done"
    assert last.model == "claude-x-20250101"

    with pytest.raises(openai.InternalServerError, match="fake script failed"):
        oai.chat.completions.create(model=OPENAI_MODEL, messages=[{"role": "user", "content": "d"}])
    assert srv.request_count == 4  # x-should-retry: false stopped the SDK retrying
    assert isinstance(srv.script_errors[0], IndexError)


def test_callable_script_sees_parsed_request() -> None:
    seen: list[ScriptRequest] = []

    def script(request: ScriptRequest) -> Reply:
        seen.append(request)
        return Reply(text=f"{request.api}:{request.index}:{','.join(request.tools)}")

    aliases = {"fast": "fast-model-2026-01-01"}
    with (
        FakeLLMServer(script, model_aliases=aliases) as server,
        openai.OpenAI(base_url=server.openai_base_url, api_key="test") as client,
    ):
        response = client.responses.create(model="fast", input="hi", tools=RESPONSES_TOOLS[:1])
    assert response.output_text == "responses:0:lookup_order"
    assert response.model == "fast-model-2026-01-01"
    assert seen[0].user_text == "hi"
    assert seen[0].stream is False


def test_resolve_model() -> None:
    assert resolve_model("gpt-5.6", "chat.completions") == "gpt-5.6-2026-09-30"
    assert resolve_model("gpt-5.6-2026-09-30", "responses") == "gpt-5.6-2026-09-30"
    assert resolve_model("claude-sonnet-5", "messages") == "claude-sonnet-5-20260930"
    assert resolve_model("claude-sonnet-5-20250514", "messages") == "claude-sonnet-5-20250514"


def test_server_lifecycle() -> None:
    server = FakeLLMServer()
    with pytest.raises(RuntimeError):
        _ = server.base_url
    server.start()
    try:
        assert server.base_url.startswith("http://127.0.0.1:")
        assert server.openai_base_url == server.base_url + "/v1"
    finally:
        server.stop()
    server.stop()

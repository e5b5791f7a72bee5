"""A deterministic fake of the OpenAI and Anthropic HTTP APIs, for tests.

`FakeLLMServer` is a small threaded HTTP server (stdlib only) bound to 127.0.0.1 on an
ephemeral port. It speaks enough of three endpoints for the official SDKs to parse its
replies as if they were live:

* OpenAI ``POST /v1/chat/completions`` (JSON, and SSE when ``stream: true``),
* OpenAI ``POST /v1/responses`` (JSON, and SSE with the typed ``response.*`` events),
* Anthropic ``POST /v1/messages`` (JSON, and SSE with ``message_start`` ... ``message_stop``).

What the "model" answers is decided by a *script*: a callable that maps a parsed
`ScriptRequest` to a behaviour (`Reply` or `ErrorReply`), or a list of behaviours
consumed one per request. The behaviour is provider-neutral; the server renders it in the
wire format of whichever API was called. `default_script` drives a small tool-using agent
(``lookup_order`` then ``issue_refund`` then a final answer) purely from the request
contents, so replies are deterministic functions of the request.

`FakeLLMServer.fail_next` makes the next requests fail with a provider-shaped 429 or 5xx
error carrying ``retry-after-ms: 1`` so the SDKs' retry loops run in milliseconds.

Example::

    with FakeLLMServer() as srv:
        client = openai.OpenAI(base_url=srv.openai_base_url, api_key="test")
        completion = client.chat.completions.create(model="gpt-5.6", messages=[...], tools=[...])
        assert srv.request_count == 1
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, NamedTuple, TypeAlias

__all__ = [
    "ANTHROPIC_SNAPSHOT_SUFFIX",
    "CREATED",
    "OPENAI_SNAPSHOT_SUFFIX",
    "Api",
    "Behaviour",
    "ErrorReply",
    "FakeLLMServer",
    "RecordedRequest",
    "Reply",
    "Script",
    "ScriptRequest",
    "ToolCall",
    "ToolResult",
    "default_script",
    "resolve_model",
]

Api: TypeAlias = Literal["chat.completions", "responses", "messages"]

CREATED = 1_790_000_000
"""Fixed Unix timestamp used for every ``created`` / ``created_at`` field."""

OPENAI_SNAPSHOT_SUFFIX = "-2026-09-30"
"""Appended to an OpenAI model alias to form the dated snapshot id the server reports."""

ANTHROPIC_SNAPSHOT_SUFFIX = "-20260930"
"""Appended to an Anthropic model alias to form the dated snapshot id the server reports."""

_DATED_MODEL = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")
_ORDER_ID = re.compile(r"\b[A-Z]{1,3}-\d{3,}\b")
_RETRYABLE_STATUSES = frozenset({408, 409, 429})
_PATHS: dict[str, Api] = {
    "/v1/chat/completions": "chat.completions",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
}


# --------------------------------------------------------------------------------------
# Public data types
# --------------------------------------------------------------------------------------


class RecordedRequest(NamedTuple):
    """One HTTP request as the server received it (including ones answered with an error)."""

    method: str
    path: str
    body: Any
    """The parsed JSON body, or ``None`` when the body was empty or not JSON."""
    headers: dict[str, str]
    """Request headers with lower-cased names."""


@dataclass(frozen=True)
class ToolCall:
    """A tool call the scripted model makes."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    call_id: str | None = None
    """Explicit call id; derived deterministically from the request when ``None``."""


@dataclass(frozen=True)
class Reply:
    """A successful model turn: optional text followed by zero or more tool calls."""

    text: str | None = None
    tool_calls: Sequence[ToolCall] = ()


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error answer, rendered in the called provider's error shape.

    ``body`` replaces the provider-shaped JSON body when given. Retryable statuses (408,
    409, 429 and 5xx) get ``retry-after-ms: 1`` and ``retry-after: 0`` unless ``headers``
    overrides them.
    """

    status: int = 500
    message: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None


Behaviour: TypeAlias = Reply | ErrorReply


@dataclass(frozen=True)
class ToolResult:
    """A tool result found in the conversation, matched to the call that asked for it."""

    name: str
    """The tool's name, or ``""`` if the matching call is not in the conversation."""
    call_id: str
    output: str


@dataclass(frozen=True)
class ScriptRequest:
    """A provider-neutral view of a model request, handed to the script."""

    api: Api
    body: Mapping[str, Any]
    headers: Mapping[str, str]
    model: str
    stream: bool
    tools: tuple[str, ...]
    """Names of the function tools offered in the request."""
    user_text: str
    """Text of the last user message that has any text (``""`` if none)."""
    tool_results: tuple[ToolResult, ...]
    """Tool results already present in the conversation, in order."""
    index: int
    """Zero-based position of this request among those handed to the script."""

    def result_for(self, tool_name: str) -> ToolResult | None:
        """Return the last result of ``tool_name`` in the conversation, if any."""
        for result in reversed(self.tool_results):
            if result.name == tool_name:
                return result
        return None


ScriptStep: TypeAlias = Behaviour | Callable[[ScriptRequest], Behaviour]
# A script is either one callable consulted for every request, or a sequence consumed one
# step per request (a step is a behaviour or a callable returning one). Note that an
# `ErrorReply` step with a retryable status makes the SDK retry, and the retry consumes
# the next step; use `FakeLLMServer.fail_next` for errors that should not advance a list.
Script: TypeAlias = Callable[[ScriptRequest], Behaviour] | Sequence[ScriptStep]


# --------------------------------------------------------------------------------------
# The default script
# --------------------------------------------------------------------------------------


def default_script(request: ScriptRequest) -> Behaviour:
    """Drive a refund agent deterministically from the request contents.

    * No ``lookup_order`` / ``issue_refund`` tool offered: answer with text echoing the
      last user message.
    * ``lookup_order`` offered and not yet answered: call it with the order id found in
      the user text (pattern ``AB-123``, default ``A-1001``).
    * ``issue_refund`` offered and not yet answered: call it with the order id and the
      ``total`` (or ``amount``) from the lookup result's JSON (default ``42.0``).
    * Otherwise: a final text answer summarising the tool results.
    """
    offered = set(request.tools)
    if not offered & {"lookup_order", "issue_refund"}:
        return Reply(text=f"Hello! You said: {request.user_text}")

    match = _ORDER_ID.search(request.user_text)
    order_id = match.group(0) if match else "A-1001"
    lookup = request.result_for("lookup_order")
    refund = request.result_for("issue_refund")

    if "lookup_order" in offered and lookup is None:
        return Reply(tool_calls=[ToolCall("lookup_order", {"order_id": order_id})])

    amount = _amount_from(lookup.output) if lookup is not None else 42.0
    if "issue_refund" in offered and refund is None:
        return Reply(
            tool_calls=[ToolCall("issue_refund", {"order_id": order_id, "amount": amount})]
        )

    if refund is not None:
        return Reply(
            text=f"Refund of {amount:.2f} issued for order {order_id}. Result: {refund.output}"
        )
    assert lookup is not None
    return Reply(text=f"Order {order_id}: {lookup.output}")


def _amount_from(output: str) -> float:
    """Read ``total`` or ``amount`` from a JSON tool output, defaulting to 42.0."""
    try:
        data = json.loads(output)
    except ValueError:
        return 42.0
    if isinstance(data, dict):
        for key in ("total", "amount"):
            value = data.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                return float(value)
    return 42.0


# --------------------------------------------------------------------------------------
# Helpers shared by the renderers
# --------------------------------------------------------------------------------------


def resolve_model(requested: str, api: Api, aliases: Mapping[str, str] | None = None) -> str:
    """Map a requested model name to the exact dated snapshot id the server reports.

    An explicit alias wins; a name already ending in a date is kept; otherwise the
    provider's snapshot suffix is appended (``gpt-5.6`` -> ``gpt-5.6-2026-09-30``,
    ``claude-sonnet-5`` -> ``claude-sonnet-5-20260930``).
    """
    if aliases and requested in aliases:
        return aliases[requested]
    if _DATED_MODEL.search(requested):
        return requested
    suffix = ANTHROPIC_SNAPSHOT_SUFFIX if api == "messages" else OPENAI_SNAPSHOT_SUFFIX
    return f"{requested}{suffix}"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value).encode()).hexdigest()


def _token_count(value: Any) -> int:
    """A deterministic stand-in for a tokenizer: one token per four characters."""
    return max(1, len(_canonical(value)) // 4)


def _text_pieces(text: str) -> list[str]:
    """Split text into word-sized deltas (each keeps its trailing whitespace)."""
    return re.findall(r"\S+\s*|\s+", text) or [text]


def _json_pieces(text: str, parts: int = 3) -> list[str]:
    """Split a JSON string into up to ``parts`` partial fragments."""
    size = max(1, math.ceil(len(text) / parts))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _text_of(content: Any, text_types: tuple[str, ...]) -> str:
    """Flatten message content (a string or a list of typed parts) into plain text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") in text_types
            and isinstance(part.get("text"), str)
        ]
        return "".join(texts)
    return ""


def _output_text(output: Any) -> str:
    """Turn a tool result payload into a string."""
    if isinstance(output, str):
        return output
    text = _text_of(output, ("text", "input_text", "output_text"))
    return text if text else _compact(output)


def _sse(data: Any, event: str | None = None) -> bytes:
    """Encode one server-sent event."""
    payload = data if isinstance(data, str) else _compact(data)
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {payload}\n\n".encode()


@dataclass
class _Ids:
    """Deterministic ids for one reply, derived from the request body."""

    digest: str

    def call_id(self, call: ToolCall, index: int, prefix: str) -> str:
        return call.call_id or f"{prefix}{self.digest[:20]}{index}"


@dataclass
class _HttpReply:
    status: int
    headers: dict[str, str]
    body: bytes = b""
    chunks: list[bytes] | None = None
    """SSE events to send with chunked transfer encoding instead of ``body``."""


# --------------------------------------------------------------------------------------
# Request parsing (wire format -> ScriptRequest)
# --------------------------------------------------------------------------------------


def _parse_chat(body: Mapping[str, Any]) -> tuple[tuple[str, ...], str, tuple[ToolResult, ...]]:
    tools = tuple(
        tool["function"]["name"]
        for tool in body.get("tools") or []
        if isinstance(tool, dict)
        and isinstance(tool.get("function"), dict)
        and "name" in tool["function"]
    )
    names: dict[str, str] = {}
    user_text = ""
    results: list[ToolResult] = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "user":
            text = _text_of(message.get("content"), ("text",))
            if text:
                user_text = text
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                names[str(call.get("id"))] = str(function.get("name", ""))
        elif role == "tool":
            call_id = str(message.get("tool_call_id", ""))
            results.append(
                ToolResult(names.get(call_id, ""), call_id, _output_text(message.get("content")))
            )
    return tools, user_text, tuple(results)


def _parse_responses(
    body: Mapping[str, Any],
) -> tuple[tuple[str, ...], str, tuple[ToolResult, ...]]:
    tools = tuple(
        str(tool["name"])
        for tool in body.get("tools") or []
        if isinstance(tool, dict) and tool.get("type") == "function" and "name" in tool
    )
    items = body.get("input")
    if isinstance(items, str):
        return tools, items, ()
    names: dict[str, str] = {}
    user_text = ""
    results: list[ToolResult] = []
    for item in items or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "user":
            text = _text_of(item.get("content"), ("input_text", "text"))
            if text:
                user_text = text
        elif kind == "function_call":
            names[str(item.get("call_id"))] = str(item.get("name", ""))
        elif kind == "function_call_output":
            call_id = str(item.get("call_id", ""))
            results.append(
                ToolResult(names.get(call_id, ""), call_id, _output_text(item.get("output")))
            )
    return tools, user_text, tuple(results)


def _parse_messages(body: Mapping[str, Any]) -> tuple[tuple[str, ...], str, tuple[ToolResult, ...]]:
    tools = tuple(
        str(tool["name"])
        for tool in body.get("tools") or []
        if isinstance(tool, dict) and "name" in tool
    )
    names: dict[str, str] = {}
    user_text = ""
    results: list[ToolResult] = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if message.get("role") == "user":
            text = _text_of(content, ("text",))
            if text:
                user_text = text
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    call_id = str(block.get("tool_use_id", ""))
                    output = _output_text(block.get("content", ""))
                    results.append(ToolResult(names.get(call_id, ""), call_id, output))
        elif message.get("role") == "assistant":
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    names[str(block.get("id"))] = str(block.get("name", ""))
    return tools, user_text, tuple(results)


_PARSERS: dict[
    Api, Callable[[Mapping[str, Any]], tuple[tuple[str, ...], str, tuple[ToolResult, ...]]]
] = {
    "chat.completions": _parse_chat,
    "responses": _parse_responses,
    "messages": _parse_messages,
}


# --------------------------------------------------------------------------------------
# Renderers (Reply -> wire format)
# --------------------------------------------------------------------------------------


def _json_reply(payload: Any, headers: Mapping[str, str], status: int = 200) -> _HttpReply:
    return _HttpReply(
        status, {"content-type": "application/json", **headers}, body=_compact(payload).encode()
    )


def _stream_reply(chunks: list[bytes], headers: Mapping[str, str]) -> _HttpReply:
    stream_headers = {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache",
        **headers,
    }
    return _HttpReply(200, stream_headers, chunks=chunks)


def _render_chat(
    req: ScriptRequest, reply: Reply, model: str, ids: _Ids, headers: Mapping[str, str]
) -> _HttpReply:
    completion_id = f"chatcmpl-{ids.digest[:24]}"
    calls: list[dict[str, Any]] = [
        {
            "id": ids.call_id(call, i, "call_"),
            "type": "function",
            "function": {"name": call.name, "arguments": _compact(dict(call.arguments))},
        }
        for i, call in enumerate(reply.tool_calls)
    ]
    finish_reason = "tool_calls" if calls else "stop"
    prompt_tokens = _token_count(req.body.get("messages"))
    completion_tokens = _token_count([reply.text, calls])
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    base = {
        "id": completion_id,
        "created": CREATED,
        "model": model,
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }
    if not req.stream:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.text,
            "refusal": None,
            "annotations": [],
        }
        if calls:
            message["tool_calls"] = calls
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        return _json_reply(
            {**base, "object": "chat.completion", "choices": [choice], "usage": usage}, headers
        )

    stream_options = req.body.get("stream_options")
    include_usage = isinstance(stream_options, dict) and bool(stream_options.get("include_usage"))
    chunk_base = {**base, "object": "chat.completion.chunk"}
    if include_usage:
        chunk_base["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _sse({**chunk_base, "choices": [choice]})

    chunks = [chunk({"role": "assistant", "content": "", "refusal": None})]
    chunks += (
        [chunk({"content": piece}) for piece in _text_pieces(reply.text)] if reply.text else []
    )
    for index, call in enumerate(calls):
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        opening = {"index": index, "id": call["id"], "type": "function"}
        opening["function"] = {"name": name, "arguments": ""}
        chunks.append(chunk({"tool_calls": [opening]}))
        for piece in _json_pieces(arguments):
            fragment = {"index": index, "function": {"arguments": piece}}
            chunks.append(chunk({"tool_calls": [fragment]}))
    chunks.append(chunk({}, finish_reason))
    if include_usage:
        chunks.append(_sse({**chunk_base, "choices": [], "usage": usage}))
    chunks.append(_sse("[DONE]"))
    return _stream_reply(chunks, headers)


def _render_responses(
    req: ScriptRequest, reply: Reply, model: str, ids: _Ids, headers: Mapping[str, str]
) -> _HttpReply:
    response_id = f"resp_{ids.digest[:32]}"
    message_id = f"msg_{ids.digest[:32]}"
    output: list[dict[str, Any]] = []
    if reply.text is not None:
        part = {"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}
        output.append(
            {
                "type": "message",
                "id": message_id,
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    for i, call in enumerate(reply.tool_calls):
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{ids.digest[:20]}{i}",
                "call_id": ids.call_id(call, i, "call_"),
                "name": call.name,
                "arguments": _compact(dict(call.arguments)),
                "status": "completed",
            }
        )
    input_tokens = _token_count(req.body.get("input"))
    output_tokens = _token_count(output)
    body = req.body
    response: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": CREATED,
        "status": "completed",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
        "user": None,
        "metadata": body.get("metadata") or {},
    }
    if not req.stream:
        return _json_reply(response, headers)

    events: list[bytes] = []

    def emit(event_type: str, **fields: Any) -> None:
        events.append(
            _sse({"type": event_type, "sequence_number": len(events), **fields}, event=event_type)
        )

    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    emit("response.created", response=pending)
    emit("response.in_progress", response=pending)
    for index, item in enumerate(output):
        if item["type"] == "message":
            part = item["content"][0]
            text = part["text"]
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            emit("response.content_part.added", **where, part={**part, "text": ""})
            for piece in _text_pieces(text) if text else []:
                emit("response.output_text.delta", **where, delta=piece, logprobs=[])
            emit("response.output_text.done", **where, text=text, logprobs=[])
            emit("response.content_part.done", **where, part=part)
        else:
            where = {"item_id": item["id"], "output_index": index}
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            for piece in _json_pieces(item["arguments"]):
                emit("response.function_call_arguments.delta", **where, delta=piece)
            emit(
                "response.function_call_arguments.done",
                **where,
                name=item["name"],
                arguments=item["arguments"],
            )
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.completed", response=response)
    return _stream_reply(events, headers)


def _render_messages(
    req: ScriptRequest, reply: Reply, model: str, ids: _Ids, headers: Mapping[str, str]
) -> _HttpReply:
    content: list[dict[str, Any]] = []
    if reply.text is not None:
        content.append({"type": "text", "text": reply.text, "citations": None})
    for i, call in enumerate(reply.tool_calls):
        content.append(
            {
                "type": "tool_use",
                "id": ids.call_id(call, i, "toolu_"),
                "name": call.name,
                "input": dict(call.arguments),
            }
        )
    stop_reason = "tool_use" if reply.tool_calls else "end_turn"
    input_tokens = _token_count([req.body.get("system"), req.body.get("messages")])
    output_tokens = _token_count(content)
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "service_tier": "standard",
    }
    message: dict[str, Any] = {
        "id": f"msg_{ids.digest[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }
    if not req.stream:
        return _json_reply(message, headers)

    events: list[bytes] = []

    def emit(event_type: str, **fields: Any) -> None:
        events.append(_sse({"type": event_type, **fields}, event=event_type))

    start_usage = {**usage, "output_tokens": 1}
    emit(
        "message_start",
        message={**message, "content": [], "stop_reason": None, "usage": start_usage},
    )
    emit("ping")
    for index, block in enumerate(content):
        if block["type"] == "text":
            emit("content_block_start", index=index, content_block={**block, "text": ""})
            for piece in _text_pieces(block["text"]) if block["text"] else []:
                emit(
                    "content_block_delta", index=index, delta={"type": "text_delta", "text": piece}
                )
        else:
            emit("content_block_start", index=index, content_block={**block, "input": {}})
            for piece in _json_pieces(_compact(block["input"])):
                emit(
                    "content_block_delta",
                    index=index,
                    delta={"type": "input_json_delta", "partial_json": piece},
                )
        emit("content_block_stop", index=index)
    delta = {
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "stop_details": None,
        "container": None,
    }
    final_usage = {key: value for key, value in usage.items() if key != "service_tier"}
    emit("message_delta", delta=delta, usage=final_usage)
    emit("message_stop")
    return _stream_reply(events, headers)


_RENDERERS: dict[
    Api, Callable[[ScriptRequest, Reply, str, _Ids, Mapping[str, str]], _HttpReply]
] = {
    "chat.completions": _render_chat,
    "responses": _render_responses,
    "messages": _render_messages,
}

_OPENAI_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request (fake)."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided (fake)."),
    403: ("invalid_request_error", "unsupported_country_region_territory", "Forbidden (fake)."),
    404: ("invalid_request_error", "unknown_url", "Unknown request URL (fake)."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests (fake)."),
    500: ("server_error", None, "The server had an error while processing your request (fake)."),
    503: ("server_error", None, "The engine is currently overloaded (fake)."),
}

_ANTHROPIC_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request (fake)."),
    401: ("authentication_error", "invalid x-api-key (fake)."),
    403: ("permission_error", "Forbidden (fake)."),
    404: ("not_found_error", "Not found (fake)."),
    413: ("request_too_large", "Request exceeds the maximum allowed size (fake)."),
    429: ("rate_limit_error", "Number of requests has exceeded your rate limit (fake)."),
    500: ("api_error", "Internal server error (fake)."),
    529: ("overloaded_error", "Overloaded (fake)."),
}


def _render_error(error: ErrorReply, anthropic: bool, request_id: str) -> _HttpReply:
    headers: dict[str, str] = {}
    if error.status in _RETRYABLE_STATUSES or error.status >= 500:
        headers = {"retry-after-ms": "1", "retry-after": "0"}
    headers.update({("request-id" if anthropic else "x-request-id"): request_id})
    headers.update({name.lower(): value for name, value in error.headers.items()})
    body = error.body
    if body is None and anthropic:
        kind, message = _ANTHROPIC_ERRORS.get(
            error.status, ("api_error", f"HTTP {error.status} (fake).")
        )
        body = {
            "type": "error",
            "error": {"type": kind, "message": error.message or message},
            "request_id": request_id,
        }
    elif body is None:
        fallback = ("server_error", None, f"HTTP {error.status} (fake).")
        kind, code, message = _OPENAI_ERRORS.get(error.status, fallback)
        body = {
            "error": {
                "message": error.message or message,
                "type": kind,
                "param": None,
                "code": code,
            }
        }
    return _json_reply(body, headers, status=error.status)


# --------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    """Reads one request, asks the owning `FakeLLMServer` for the reply, writes it."""

    protocol_version = "HTTP/1.1"
    server: _HTTPServer
    timeout = 10
    # The headers and the body go out in two writes; with Nagle on, the body waits for the
    # client's delayed ACK of the headers: some 40 ms per request on Linux, which real model
    # servers (TCP_NODELAY) do not add and which drowned the adapter benchmarks' figures.
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        self._serve()

    def do_GET(self) -> None:
        self._serve()

    def _read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            data = b""
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                data += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return data
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _serve(self) -> None:
        raw = self._read_body()
        headers = {name.lower(): value for name, value in self.headers.items()}
        reply = self.server.fake._handle(self.command, self.path, raw, headers)
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.chunks is None:
            self.send_header("content-length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
            return
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for chunk in reply.chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], fake: FakeLLMServer) -> None:
        self.fake = fake
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore clients dropping idle keep-alive connections; report anything else."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class FakeLLMServer:
    """A scripted fake of the OpenAI (chat completions, responses) and Anthropic (messages) APIs.

    Args:
        script: What the model answers; see `Script`. Defaults to `default_script`. A
            list is consumed one step per scripted request; running past its end answers
            HTTP 500 with ``x-should-retry: false``.
        host: Interface to bind, ``127.0.0.1`` by default.
        port: Port to bind; ``0`` picks a free ephemeral port.
        model_aliases: Exact model ids to report for given requested names; other names
            go through `resolve_model`.

    Use it as a context manager, or call `start` and `stop`.
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model_aliases: Mapping[str, str] | None = None,
    ) -> None:
        self._script: Script = default_script if script is None else script
        self._address = (host, port)
        self._aliases = dict(model_aliases or {})
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._failures: deque[ErrorReply] = deque()
        self._cursor = 0
        self._script_errors: list[BaseException] = []
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> FakeLLMServer:
        """Bind the socket and serve in a daemon thread; returns ``self``."""
        if self._httpd is not None:
            return self
        self._httpd = _HTTPServer(self._address, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="FakeLLMServer",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket. Safe to call twice."""
        httpd, thread = self._httpd, self._thread
        self._httpd = self._thread = None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- inspection --------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` (no trailing slash); use as the Anthropic base URL."""
        if self._httpd is None:
            raise RuntimeError(
                "FakeLLMServer is not running; call start() or use it as a context manager"
            )
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        """``base_url + "/v1"``, the base URL the OpenAI SDK expects."""
        return f"{self.base_url}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def request_count(self) -> int:
        """How many requests the server has received (including failed ones)."""
        with self._lock:
            return len(self._requests)

    @property
    def script_errors(self) -> list[BaseException]:
        """Exceptions raised by the script (each was answered with HTTP 500)."""
        with self._lock:
            return list(self._script_errors)

    def iter_requests(self, api: Api | None = None) -> Iterator[RecordedRequest]:
        """Iterate recorded requests, optionally only those for one API."""
        for recorded in self.requests:
            if api is None or _PATHS.get(recorded.path.split("?", 1)[0]) == api:
                yield recorded

    # -- control -----------------------------------------------------------------------

    @property
    def script(self) -> Script:
        """The current script. Assigning a new one restarts list scripts at their first step."""
        return self._script

    @script.setter
    def script(self, script: Script) -> None:
        with self._lock:
            self._script = script
            self._cursor = 0

    def fail_next(
        self,
        count: int = 1,
        status: int = 429,
        *,
        message: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer the next ``count`` requests with a provider-shaped ``status`` error.

        Retryable statuses carry ``retry-after-ms: 1`` / ``retry-after: 0`` (override via
        ``headers``), so SDK retries happen after about a millisecond. Failures are
        consumed before the script runs and do not advance list scripts.
        """
        error = ErrorReply(status=status, message=message, headers=dict(headers or {}))
        with self._lock:
            self._failures.extend([error] * count)

    def reset(self) -> None:
        """Forget recorded requests, pending failures and script errors; rewind list scripts."""
        with self._lock:
            self._requests.clear()
            self._failures.clear()
            self._script_errors.clear()
            self._cursor = 0

    # -- request handling (called from handler threads) --------------------------------

    def _handle(self, method: str, path: str, raw: bytes, headers: dict[str, str]) -> _HttpReply:
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        route = path.split("?", 1)[0]
        api = _PATHS.get(route)
        anthropic = api == "messages" or (api is None and "anthropic-version" in headers)
        with self._lock:
            self._requests.append(RecordedRequest(method, path, body, headers))
            request_id = f"req_fake_{len(self._requests):06d}"
            failure = self._failures.popleft() if self._failures else None
        id_header = {("request-id" if anthropic else "x-request-id"): request_id}

        if failure is not None:
            return _render_error(failure, anthropic, request_id)
        if api is None or method != "POST":
            return _render_error(
                ErrorReply(404, f"No fake route for {method} {route}"), anthropic, request_id
            )
        if not isinstance(body, dict):
            return _render_error(
                ErrorReply(400, "Request body must be a JSON object"), anthropic, request_id
            )

        try:
            request, behaviour = self._run_script(api, body, headers)
        except Exception as exc:  # a broken script must not kill the server thread
            with self._lock:
                self._script_errors.append(exc)
            message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            error = ErrorReply(
                500, f"fake script failed: {message}", headers={"x-should-retry": "false"}
            )
            return _render_error(error, anthropic, request_id)

        if isinstance(behaviour, ErrorReply):
            return _render_error(behaviour, anthropic, request_id)
        model = resolve_model(request.model, api, self._aliases)
        return _RENDERERS[api](request, behaviour, model, _Ids(_digest(body)), id_header)

    def _run_script(
        self, api: Api, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[ScriptRequest, Behaviour]:
        tools, user_text, results = _PARSERS[api](body)
        with self._lock:
            script = self._script
            index = self._cursor
            self._cursor += 1
        request = ScriptRequest(
            api=api,
            body=body,
            headers=headers,
            model=str(body.get("model", "")),
            stream=bool(body.get("stream")),
            tools=tools,
            user_text=user_text,
            tool_results=results,
            index=index,
        )
        step: ScriptStep
        if callable(script):
            step = script
        elif index < len(script):
            step = script[index]
        else:
            raise IndexError(f"script has {len(script)} steps; request #{index} has none")
        behaviour = step(request) if callable(step) else step
        if not isinstance(behaviour, Reply | ErrorReply):
            raise TypeError(f"script returned {behaviour!r}; expected Reply or ErrorReply")
        return request, behaviour

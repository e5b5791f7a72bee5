"""The tool calls a model answer asks for, in each provider's wire shape.

* OpenAI chat completions: ``choices[].message.tool_calls[]`` (``function.name``, ``id``);
* OpenAI responses: ``output[]`` items of type ``function_call`` (``name``, ``call_id``);
* Anthropic messages: ``content[]`` blocks of type ``tool_use`` (``name``, ``id``);
* Google Gemini: ``candidates[].content.parts[].functionCall`` (``function_call`` in the
  Python SDK's own dump) (``name``, ``id``);
* Amazon Bedrock Converse: ``output.message.content[].toolUse`` (``name``, ``toolUseId``);
* Ollama chat: ``message.tool_calls[].function.name``.

A recorded ``response`` may be an HTTP envelope (the SDK integrations), a stream (assembled
first) or the body itself (a ``@model`` function's return value, an imported answer): all
three are read through :func:`.http.response_body`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .http import response_body

__all__ = ["RequestedCall", "requested_tool_calls"]

# A recorded payload is plain dicts: ``dict`` first spares the ABC check of ``Mapping`` (an
# answer is looked through for tool calls as each event is appended).
_MAPS = (dict, Mapping)


@dataclass(frozen=True, slots=True)
class RequestedCall:
    """One tool call a model asked for."""

    tool: str
    call_id: str | None


def _id(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _chat(body: Mapping[str, Any]) -> list[RequestedCall]:
    out: list[RequestedCall] = []
    for choice in body.get("choices") or ():
        message = choice.get("message") if isinstance(choice, _MAPS) else None
        if not isinstance(message, _MAPS):
            continue
        for call in message.get("tool_calls") or ():
            if not isinstance(call, _MAPS):
                continue
            function = call.get("function")
            name = function.get("name") if isinstance(function, _MAPS) else call.get("name")
            if isinstance(name, str) and name:
                out.append(RequestedCall(name, _id(call.get("id"))))
    return out


def _responses(body: Mapping[str, Any]) -> list[RequestedCall]:
    out: list[RequestedCall] = []
    for item in body.get("output") or ():
        if not isinstance(item, _MAPS) or item.get("type") != "function_call":
            continue
        name = item.get("name")
        if isinstance(name, str) and name:
            out.append(RequestedCall(name, _id(item.get("call_id")) or _id(item.get("id"))))
    return out


def _messages(body: Mapping[str, Any]) -> list[RequestedCall]:
    out: list[RequestedCall] = []
    for block in body.get("content") or ():
        if not isinstance(block, _MAPS) or block.get("type") != "tool_use":
            continue
        name = block.get("name")
        if isinstance(name, str) and name:
            out.append(RequestedCall(name, _id(block.get("id"))))
    return out


def _gemini(body: Mapping[str, Any]) -> list[RequestedCall]:
    out: list[RequestedCall] = []
    for candidate in body.get("candidates") or ():
        content = candidate.get("content") if isinstance(candidate, _MAPS) else None
        parts = content.get("parts") if isinstance(content, _MAPS) else None
        for part in parts if isinstance(parts, list) else ():
            if not isinstance(part, _MAPS):
                continue
            call = part.get("functionCall") or part.get("function_call")
            name = call.get("name") if isinstance(call, _MAPS) else None
            if isinstance(call, _MAPS) and isinstance(name, str) and name:
                out.append(RequestedCall(name, _id(call.get("id"))))
    return out


def _converse(output: Mapping[str, Any]) -> list[RequestedCall]:
    out: list[RequestedCall] = []
    message = output.get("message")
    blocks = message.get("content") if isinstance(message, _MAPS) else None
    for block in blocks if isinstance(blocks, list) else ():
        use = block.get("toolUse") if isinstance(block, _MAPS) else None
        name = use.get("name") if isinstance(use, _MAPS) else None
        if isinstance(use, _MAPS) and isinstance(name, str) and name:
            out.append(RequestedCall(name, _id(use.get("toolUseId"))))
    return out


def requested_tool_calls(response: Any) -> tuple[RequestedCall, ...]:
    """The tool calls a recorded model ``response`` asks the agent to make, in order.

    Unknown shapes ask for nothing: this never raises on what a provider sent.
    """
    try:
        body = response_body(response)
    except Exception:  # a malformed stream is not a reason to fail a recording
        return ()
    if not isinstance(body, _MAPS):
        return ()
    calls: list[RequestedCall] = []
    if isinstance(body.get("choices"), list):
        calls.extend(_chat(body))
    if isinstance(body.get("output"), list):
        calls.extend(_responses(body))
    if isinstance(body.get("content"), list):
        calls.extend(_messages(body))
    if isinstance(body.get("candidates"), list):
        calls.extend(_gemini(body))
    output = body.get("output")
    if isinstance(output, _MAPS):
        calls.extend(_converse(output))
    message = body.get("message")
    if isinstance(message, _MAPS) and isinstance(message.get("tool_calls"), list):
        calls.extend(_chat({"choices": [{"message": message}]}))  # Ollama: one message
    return tuple(calls)

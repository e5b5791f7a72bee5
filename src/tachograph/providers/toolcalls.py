"""The tool calls a model answer asks for, in each provider's wire shape.

* OpenAI chat completions: ``choices[].message.tool_calls[]`` (``function.name``, ``id``);
* OpenAI responses: ``output[]`` items of type ``function_call`` (``name``, ``call_id``);
* Anthropic messages: ``content[]`` blocks of type ``tool_use`` (``name``, ``id``).

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
        message = choice.get("message") if isinstance(choice, Mapping) else None
        if not isinstance(message, Mapping):
            continue
        for call in message.get("tool_calls") or ():
            if not isinstance(call, Mapping):
                continue
            function = call.get("function")
            name = function.get("name") if isinstance(function, Mapping) else call.get("name")
            if isinstance(name, str) and name:
                out.append(RequestedCall(name, _id(call.get("id"))))
    return out


def _responses(body: Mapping[str, Any]) -> list[RequestedCall]:
    out: list[RequestedCall] = []
    for item in body.get("output") or ():
        if not isinstance(item, Mapping) or item.get("type") != "function_call":
            continue
        name = item.get("name")
        if isinstance(name, str) and name:
            out.append(RequestedCall(name, _id(item.get("call_id")) or _id(item.get("id"))))
    return out


def _messages(body: Mapping[str, Any]) -> list[RequestedCall]:
    out: list[RequestedCall] = []
    for block in body.get("content") or ():
        if not isinstance(block, Mapping) or block.get("type") != "tool_use":
            continue
        name = block.get("name")
        if isinstance(name, str) and name:
            out.append(RequestedCall(name, _id(block.get("id"))))
    return out


def requested_tool_calls(response: Any) -> tuple[RequestedCall, ...]:
    """The tool calls a recorded model ``response`` asks the agent to make, in order.

    Unknown shapes ask for nothing: this never raises on what a provider sent.
    """
    try:
        body = response_body(response)
    except Exception:  # a malformed stream is not a reason to fail a recording
        return ()
    if not isinstance(body, Mapping):
        return ()
    calls: list[RequestedCall] = []
    if isinstance(body.get("choices"), list):
        calls.extend(_chat(body))
    if isinstance(body.get("output"), list):
        calls.extend(_responses(body))
    if isinstance(body.get("content"), list):
        calls.extend(_messages(body))
    return tuple(calls)

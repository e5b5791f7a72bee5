"""The provider-neutral normal form of a model request, and of an answer.

A model request is recorded in one of two forms:

* ``http``: the JSON body as the SDK sent it (``{"request": <body>, "http": {"path", ...}}``),
  by the SDK integrations;
* ``provider``: what a trace said about the call (``{"request": {"model", "messages"?,
  "tools"?, <sampling parameters>?}, "provider"?, "not_captured"?}``), by the OTLP importer,
  messages in the normalized ``{"role", "content", "tool_calls"?, "tool_call_id"?}`` form.

Comparing two requests in different forms compares their normal forms: ``model``,
``messages`` (system instructions first, as a ``system`` message; content as text; tool call
arguments parsed), ``tools`` (name, description, parameters) and the sampling parameters in
:data:`PARAMETERS`. A field the ``provider`` side does not have was not captured by the trace:
it is reported as such, never taken for a match or a mismatch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import anthropic, genai, openai

__all__ = [
    "PARAMETERS",
    "Comparison",
    "compare_requests",
    "is_http_form",
    "neutral_answer",
    "normal_request",
]

PARAMETERS: tuple[str, ...] = (
    "temperature",
    "top_p",
    "max_tokens",
    "seed",
    "stop",
    "frequency_penalty",
    "presence_penalty",
)
"""Sampling parameters compared when both sides have them."""

_MAX_TOKENS_ALIASES = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def is_http_form(payload: Mapping[str, Any]) -> bool:
    return isinstance(payload.get("http"), Mapping)


def _parsed(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _content_text(content: Any) -> Any:
    """Text content as one string (lists of text blocks joined); other content as is."""
    if isinstance(content, list):
        texts = []
        for block in content:
            if isinstance(block, str):
                texts.append(block)
            elif isinstance(block, Mapping) and block.get("type") in (
                "text",
                "input_text",
                "output_text",
            ):
                texts.append(str(block.get("text", "")))
            else:
                return content
        return "".join(texts)
    return content


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    base = genai.normalized_from_openai(message)
    out: dict[str, Any] = {"role": base.get("role"), "content": _content_text(base.get("content"))}
    calls = [
        {"id": c.get("id"), "name": c.get("name"), "arguments": _parsed(c.get("arguments"))}
        for c in base.get("tool_calls") or ()
    ]
    if calls:
        out["tool_calls"] = calls
        if out["content"] == "":
            out["content"] = None
    if base.get("tool_call_id") is not None:
        out["tool_call_id"] = base["tool_call_id"]
    return out


def _anthropic_messages(messages: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages or ():
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        if isinstance(content, str):
            out.append({"role": message.get("role"), "content": content})
            continue
        texts, calls = [], []
        for block in content or ():
            if not isinstance(block, Mapping):
                continue
            if block.get("type") == "text":
                texts.append(str(block.get("text", "")))
            elif block.get("type") == "tool_use":
                calls.append(
                    {
                        "id": block.get("id"),
                        "name": block.get("name"),
                        "arguments": block.get("input"),
                    }
                )
            elif block.get("type") == "tool_result":
                out.append(
                    {
                        "role": "tool",
                        "content": _content_text(block.get("content")),
                        "tool_call_id": block.get("tool_use_id"),
                    }
                )
        if texts or calls:
            item: dict[str, Any] = {"role": message.get("role"), "content": "".join(texts) or None}
            if calls:
                item["tool_calls"] = calls
            out.append(item)
    return out


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if not isinstance(tools, list):
        return None
    defs = genai.tool_definitions({"tools": tools})
    return [{k: d.get(k) for k in ("name", "description", "parameters")} for d in defs]


def normal_request(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The normal form of a ``model.request`` payload, in either form. Keys that the payload
    does not hold are absent (never ``None`` for "unknown")."""
    request = payload.get("request")
    if not isinstance(request, Mapping):
        return {}
    out: dict[str, Any] = {}
    if isinstance(request.get("model"), str):
        out["model"] = request["model"]
    http = payload.get("http")
    path = http.get("path") if isinstance(http, Mapping) else None
    if "messages" in request or "input" in request:
        if anthropic.is_messages_path(path) and not openai.is_chat_path(path):
            messages = _anthropic_messages(request.get("messages"))
            system = _content_text(request.get("system"))
            if system:
                messages.insert(0, {"role": "system", "content": system})
        elif openai.is_responses_path(path):
            messages = []
            if request.get("instructions"):
                messages.append({"role": "system", "content": request["instructions"]})
            raw = request.get("input")
            if isinstance(raw, str):
                messages.append({"role": "user", "content": raw})
            else:
                for item in raw or ():
                    if isinstance(item, Mapping):
                        part = genai.normalized_from_semconv(genai.message_parts(item))
                        messages.append(_message(part))
        else:
            messages = [
                _message(m) for m in request.get("messages") or () if isinstance(m, Mapping)
            ]
        out["messages"] = messages
    tools = _tools(request.get("tools"))
    if tools is not None:
        out["tools"] = tools
    for name in PARAMETERS:
        names = _MAX_TOKENS_ALIASES if name == "max_tokens" else (name,)
        for alias in names:
            if request.get(alias) is not None:
                out[name] = request[alias]
                break
    return out


@dataclass(frozen=True)
class Comparison:
    """Two requests compared in normal form."""

    changes: tuple[tuple[str, Any, Any], ...]
    """``(path, recorded, now)`` for each difference in what both sides have."""
    not_captured: tuple[str, ...] = field(default=())
    """Fields the agent's request has and the recorded (imported) one did not capture."""


def _numbers_equal(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return bool(a == b)


def compare_requests(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> Comparison:
    """Compare a recorded ``model.request`` payload with the agent's, in normal form."""
    before, after = normal_request(recorded), normal_request(now)
    declared = recorded.get("not_captured")
    missing = {str(x) for x in declared} if isinstance(declared, list) else set()
    changes: list[tuple[str, Any, Any]] = []
    not_captured: list[str] = []
    for name in ("model", "messages", "tools", *PARAMETERS):
        if name not in before or name in missing:
            if name in after:
                not_captured.append(name)
            continue
        if name not in after:
            changes.append((f"$.request.{name}", before[name], None))
            continue
        if name == "messages":
            changes.extend(_message_changes(before[name], after[name]))
        elif not _numbers_equal(before[name], after[name]):
            changes.append((f"$.request.{name}", before[name], after[name]))
    return Comparison(tuple(changes), tuple(not_captured))


def _message_changes(before: list[Any], after: list[Any]) -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = []
    for i in range(max(len(before), len(after))):
        path = f"$.request.messages[{i}]"
        if i >= len(before) or i >= len(after):
            out.append(
                (path, before[i] if i < len(before) else None, after[i] if i < len(after) else None)
            )
            continue
        b, a = before[i], after[i]
        for key in sorted(set(b) | set(a)):
            left, right = b.get(key), a.get(key)
            if key == "content":
                left, right = _parsed(left), _parsed(right)
            if left != right:
                out.append((f"{path}.{key}", b.get(key), a.get(key)))
    return out


def neutral_answer(response: Any) -> dict[str, Any] | None:
    """An answer in neutral form (``id``, ``model``, ``text``, ``tool_calls``,
    ``finish_reason``, ``usage``) from a chat-completions-shaped body (what the importer
    records), or ``None`` when the answer's message was not captured."""
    if not isinstance(response, Mapping):
        return None
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, Mapping):
        return None
    normalized = genai.normalized_from_openai(message)
    return {
        "id": response.get("id"),
        "model": response.get("model"),
        "text": normalized.get("content"),
        "tool_calls": normalized.get("tool_calls") or [],
        "finish_reason": choice.get("finish_reason"),
        "usage": response.get("usage"),
    }

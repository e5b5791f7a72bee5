"""OpenAI's wire shapes: chat completions and the responses API.

Requests and answers as the HTTP API has them (``/chat/completions``, ``/responses``),
streams assembled into the body a non-streaming call returns, and answers built back from the
provider-neutral form (:mod:`.normal`) for a replay of a run imported from a trace.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "CHAT_PATH_SUFFIX",
    "RESPONSES_PATH_SUFFIX",
    "assemble_chat_stream",
    "assemble_responses_stream",
    "chat_completion",
    "chat_stream_events",
    "is_chat_path",
    "is_responses_path",
]

CHAT_PATH_SUFFIX = "/chat/completions"
RESPONSES_PATH_SUFFIX = "/responses"


def is_chat_path(path: Any) -> bool:
    return isinstance(path, str) and path.rstrip("/").endswith(CHAT_PATH_SUFFIX)


def is_responses_path(path: Any) -> bool:
    return isinstance(path, str) and path.rstrip("/").endswith(RESPONSES_PATH_SUFFIX)


def assemble_chat_stream(chunks: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``chat.completion.chunk`` objects merged into the ``chat.completion`` they stand for."""
    out: dict[str, Any] = {"object": "chat.completion"}
    choices: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for key in ("id", "model", "created", "system_fingerprint", "service_tier"):
            if chunk.get(key) is not None and key not in out:
                out[key] = chunk[key]
        if isinstance(chunk.get("usage"), dict):
            out["usage"] = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            index = int(choice.get("index") or 0)
            slot = choices.setdefault(
                index,
                {"index": index, "message": {"role": "assistant", "content": None}, "_calls": {}},
            )
            if choice.get("finish_reason") is not None:
                slot["finish_reason"] = choice["finish_reason"]
            raw_delta = choice.get("delta")
            delta: dict[str, Any] = raw_delta if isinstance(raw_delta, dict) else {}
            message = slot["message"]
            if isinstance(delta.get("content"), str):
                message["content"] = (message["content"] or "") + delta["content"]
            for part in delta.get("tool_calls") or ():
                if not isinstance(part, dict):
                    continue
                call = slot["_calls"].setdefault(
                    int(part.get("index") or 0),
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] = part.get("id") or call["id"]
                raw_function = part.get("function")
                function: dict[str, Any] = raw_function if isinstance(raw_function, dict) else {}
                call["function"]["name"] += function.get("name") or ""
                call["function"]["arguments"] += function.get("arguments") or ""
    listed = []
    for index in sorted(choices):
        slot = choices[index]
        calls = slot.pop("_calls")
        if calls:
            slot["message"]["tool_calls"] = [calls[i] for i in sorted(calls)]
        slot.setdefault("finish_reason", None)
        listed.append(slot)
    out["choices"] = listed
    return out


def assemble_responses_stream(events: Iterable[Mapping[str, Any]]) -> Any:
    """The final ``response`` object of a responses-API stream (``response.completed`` or the
    last ``response.*`` event that carries one)."""
    final: Any = None
    for event in events:
        if isinstance(event.get("response"), dict):
            final = event["response"]
    return final


# -- answers from the provider-neutral form ------------------------------------------------


def _arguments_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# Finish reasons in the conventions' vocabulary (what some instrumentations record, e.g.
# OpenLLMetry 0.62) back in chat completions' own.
_FINISH_FROM_SEMCONV = {"tool_call": "tool_calls"}


def chat_completion(neutral: Mapping[str, Any], *, model: str | None) -> dict[str, Any]:
    """A ``chat.completion`` body from a neutral answer (see :func:`.normal.neutral_answer`)."""
    message: dict[str, Any] = {"role": "assistant", "content": neutral.get("text")}
    calls = [
        {
            "id": call.get("id"),
            "type": "function",
            "function": {
                "name": call.get("name"),
                "arguments": _arguments_text(call.get("arguments")),
            },
        }
        for call in neutral.get("tool_calls") or ()
    ]
    if calls:
        message["tool_calls"] = calls
    reason = neutral.get("finish_reason")
    body: dict[str, Any] = {
        "id": neutral.get("id") or "chatcmpl-imported",
        "object": "chat.completion",
        "created": 0,
        "model": neutral.get("model") or model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _FINISH_FROM_SEMCONV.get(str(reason), reason),
            }
        ],
    }
    usage = neutral.get("usage")
    if isinstance(usage, Mapping):
        prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
        body["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": (prompt or 0) + (completion or 0),
        }
    return body


def chat_stream_events(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The SSE events (``{"data": ...}``) that stream ``body`` (a ``chat.completion``)."""
    base = {k: body.get(k) for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    events: list[dict[str, Any]] = []
    for choice in body.get("choices") or ():
        message = choice.get("message") or {}
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            delta["tool_calls"] = [
                {"index": i, **call} for i, call in enumerate(message["tool_calls"])
            ]
        events.append(
            {"data": {**base, "choices": [{"index": choice.get("index", 0), "delta": delta}]}}
        )
        events.append(
            {
                "data": {
                    **base,
                    "choices": [
                        {
                            "index": choice.get("index", 0),
                            "delta": {},
                            "finish_reason": choice.get("finish_reason"),
                        }
                    ],
                }
            }
        )
    if body.get("usage") is not None:
        events.append({"data": {**base, "choices": [], "usage": body["usage"]}})
    events.append({"data": "[DONE]"})
    return events

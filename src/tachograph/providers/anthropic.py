"""Anthropic's wire shapes: the messages API (``/v1/messages``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["MESSAGES_PATH_SUFFIX", "assemble_stream", "is_messages_path", "message"]

MESSAGES_PATH_SUFFIX = "/messages"


def is_messages_path(path: Any) -> bool:
    return isinstance(path, str) and path.rstrip("/").endswith(MESSAGES_PATH_SUFFIX)


def assemble_stream(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``message_start`` ... ``message_stop`` event data merged into the message they stand
    for (text and ``input_json_delta`` pieces joined, usage merged)."""
    out: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    pending_json: dict[int, str] = {}
    for event in events:
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            out = {k: v for k, v in event["message"].items() if k != "content"}
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            blocks[int(event.get("index") or 0)] = dict(event["content_block"])
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            index = int(event.get("index") or 0)
            block = blocks.setdefault(index, {"type": "text", "text": ""})
            delta = event["delta"]
            if delta.get("type") == "text_delta":
                block["text"] = str(block.get("text") or "") + str(delta.get("text") or "")
            elif delta.get("type") == "input_json_delta":
                pending_json[index] = pending_json.get(index, "") + str(
                    delta.get("partial_json") or ""
                )
            elif delta.get("type") == "thinking_delta":
                block["thinking"] = str(block.get("thinking") or "") + str(
                    delta.get("thinking") or ""
                )
        elif kind == "message_delta":
            if isinstance(event.get("delta"), dict):
                out.update({k: v for k, v in event["delta"].items() if v is not None})
            if isinstance(event.get("usage"), dict):
                usage = dict(out.get("usage") or {})
                usage.update({k: v for k, v in event["usage"].items() if v is not None})
                out["usage"] = usage
    import json

    for index, text in pending_json.items():
        try:
            blocks[index]["input"] = json.loads(text) if text else {}
        except ValueError:
            blocks[index]["input"] = text
    out["content"] = [blocks[i] for i in sorted(blocks)]
    return out


_STOP_FROM_NEUTRAL = {
    "tool_calls": "tool_use",
    "tool_call": "tool_use",
    "stop": "end_turn",
    "length": "max_tokens",
}


def message(neutral: Mapping[str, Any], *, model: str | None) -> dict[str, Any]:
    """A messages-API body from a neutral answer (see :func:`.normal.neutral_answer`)."""
    content: list[dict[str, Any]] = []
    if neutral.get("text"):
        content.append({"type": "text", "text": neutral["text"]})
    for call in neutral.get("tool_calls") or ():
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id"),
                "name": call.get("name"),
                "input": call.get("arguments"),
            }
        )
    reason = neutral.get("finish_reason")
    body: dict[str, Any] = {
        "id": neutral.get("id") or "msg_imported",
        "type": "message",
        "role": "assistant",
        "model": neutral.get("model") or model,
        "content": content,
        "stop_reason": _STOP_FROM_NEUTRAL.get(str(reason), reason),
        "stop_sequence": None,
    }
    usage = neutral.get("usage")
    if isinstance(usage, Mapping):
        body["usage"] = {
            "input_tokens": usage.get("input_tokens"),
            "output_tokens": usage.get("output_tokens"),
        }
    return body

"""Serving a recorded answer in the wire shape the agent's SDK asks for.

A run imported from a trace records each answer in the provider-neutral form (an OpenAI
chat-completions-shaped body: id, model, one choice with the message and finish reason,
usage). An agent replayed through an SDK integration asks over HTTP, so the answer is served
as the HTTP answer its API would have sent: a chat completion, a stream of chunks when the
request streams, or an Anthropic message.
"""

from __future__ import annotations

from typing import Any

from . import anthropic, openai
from .normal import neutral_answer

__all__ = ["served_answer"]


def served_answer(recorded: dict[str, Any], path: str, request: Any) -> dict[str, Any] | None:
    """The HTTP answer record (``{"status", "headers", "body" | "events"}``) for a recorded
    neutral answer, for a request to ``path``; ``None`` when the trace did not capture the
    answer's message (nothing can be served then) or the API is not one known here."""
    neutral = neutral_answer(recorded)
    if neutral is None:
        return None
    model = request.get("model") if isinstance(request, dict) else None
    streaming = isinstance(request, dict) and request.get("stream") is True
    if anthropic.is_messages_path(path) and not openai.is_chat_path(path):
        return {
            "status": 200,
            "headers": {"content-type": "application/json"},
            "body": anthropic.message(neutral, model=model),
        }
    if not openai.is_chat_path(path):
        return None
    body = openai.chat_completion(neutral, model=model)
    if streaming:
        return {
            "status": 200,
            "headers": {"content-type": "text/event-stream"},
            "events": openai.chat_stream_events(body),
        }
    return {"status": 200, "headers": {"content-type": "application/json"}, "body": body}

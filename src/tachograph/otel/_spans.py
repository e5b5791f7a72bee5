"""What a tachograph event looks like as OpenTelemetry data, shared by the live bridge and export.

Only plain Python here (no OpenTelemetry import): span names, attribute dicts, and the GenAI
message form of recorded requests and responses.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from ..events import Event
from . import attributes as A

AttributeValue = str | bool | int | float | list[str] | list[bool] | list[int] | list[float]

# Payload keys that never hold message content: always put on span events. Every other key
# (input, output, args, result, request, response, reason, chosen, value, ...) only with the
# content opt-in, because it can hold prompts, answers and personal data.
SAFE_PAYLOAD_KEYS = frozenset(
    {
        "tool",
        "effect",
        "status",
        "schema_version",
        "guardrail",
        "stage",
        "blocked",
        "by",
        "from",
        "to",
        "name",
        "source",
        "prompt_hash",
        "dry_run",
        "overridden",
        "usage",
        "seed",
        "parent",
        "labels",
    }
)

REQUEST_TYPES = frozenset({"model.request", "tool.requested"})
COMPLETION_TYPES = frozenset({"model.response", "model.failed", "tool.completed", "tool.failed"})


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def to_json(value: Any) -> str:
    """Compact JSON text of a recorded value (the profile guarantees it serializes)."""
    return orjson.dumps(value).decode("utf-8")


def attribute_value(value: Any) -> AttributeValue | None:
    """An OpenTelemetry attribute value for ``value``; ``None`` when it should be left out.

    Attributes are primitives or homogeneous arrays of primitives; anything nested or mixed
    becomes a JSON string.
    """
    if value is None:
        return None
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, list) and value:
        kinds = {type(item) for item in value}
        if len(kinds) == 1 and kinds <= {str, bool, int, float}:
            return list(value)
    return to_json(value)


def put(attrs: dict[str, AttributeValue], key: str, value: Any) -> None:
    """Set ``attrs[key]`` to the attribute form of ``value``, unless it is ``None``."""
    converted = attribute_value(value)
    if converted is not None:
        attrs[key] = converted


def event_attributes(event: Event, *, content: bool) -> dict[str, AttributeValue]:
    """The attributes of the span event for ``event`` (``tachograph.*``)."""
    attrs: dict[str, AttributeValue] = {
        A.TACHO_RUN_ID: event.run_id,
        A.TACHO_SEQ: event.seq,
        A.TACHO_EVENT_ID: event.event_id,
        A.TACHO_HASH: event.hash,
        A.TACHO_ACTOR: event.actor,
    }
    if event.tenant != "default":
        attrs[A.TACHO_TENANT] = event.tenant
    put(attrs, A.TACHO_IDEMPOTENCY_KEY, event.idempotency_key)
    put(attrs, A.TACHO_MODEL, event.model)
    payload = event.payload if isinstance(event.payload, dict) else {}
    for key, value in payload.items():
        if content or key in SAFE_PAYLOAD_KEYS:
            put(attrs, f"{A.TACHO_PAYLOAD}.{key}", value)
    error = payload.get("error")
    if isinstance(error, dict):
        put(attrs, A.ERROR_TYPE, error.get("type"))
    return attrs


def capture_content_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` asks for content on spans.

    ``true`` (the instrumentations' default mode) and the util-genai modes ``SPAN_ONLY`` and
    ``SPAN_AND_EVENT`` do; anything else (unset, ``false``, ``NO_CONTENT``, ``EVENT_ONLY``) does
    not.
    """
    env = os.environ if environ is None else environ
    value = env.get(A.CAPTURE_CONTENT_ENV, "").strip().lower()
    return value in ("true", "1", "yes", "on", "span_only", "span_and_event")


# -- spans ---------------------------------------------------------------------------------------


def agent_span_name(actor: str) -> str:
    """``invoke_agent {actor}``."""
    return f"{A.OP_INVOKE_AGENT} {actor}"


def chat_span_name(model: str | None) -> str:
    """``chat {model}`` (or just ``chat``)."""
    return f"{A.OP_CHAT} {model}" if model else A.OP_CHAT


def tool_span_name(tool: str | None) -> str:
    """``execute_tool {name}`` (or just ``execute_tool``)."""
    return f"{A.OP_EXECUTE_TOOL} {tool}" if tool else A.OP_EXECUTE_TOOL


def provider_of(model: str | None) -> str | None:
    """The provider declared with ``@tachograph.model(..., provider=...)`` for ``model``."""
    if model is None:
        return None
    from ..runtime import registered_models

    spec = registered_models().get(model)
    return spec.provider if spec is not None else None


def _text_message(role: str, value: Any) -> str:
    text = value if isinstance(value, str) else to_json(value)
    return to_json([{"role": role, "parts": [{"type": "text", "content": text}]}])


def agent_start_attributes(event: Event, *, content: bool = False) -> dict[str, AttributeValue]:
    """Attributes of the ``invoke_agent`` span, from ``run.started``."""
    attrs: dict[str, AttributeValue] = {
        A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT,
        A.GEN_AI_AGENT_NAME: event.actor,
        A.GEN_AI_CONVERSATION_ID: event.run_id,
        A.TACHO_RUN_ID: event.run_id,
    }
    payload = event.payload if isinstance(event.payload, dict) else {}
    env = payload.get("env") if isinstance(payload.get("env"), dict) else {}
    models = env.get("models") if isinstance(env, dict) else None
    providers = {provider_of(m) for m in models or ()} - {None}
    if len(providers) == 1:
        put(attrs, A.GEN_AI_PROVIDER_NAME, providers.pop())
    parent = payload.get("parent")
    if isinstance(parent, dict):
        put(attrs, A.TACHO_FORK_OF, parent.get("run_id"))
        put(attrs, A.TACHO_PARENT_SEQ, parent.get("seq"))
    if content and payload.get("input") is not None:
        attrs[A.GEN_AI_INPUT_MESSAGES] = _text_message("user", payload["input"])
    return attrs


def agent_end_attributes(event: Event, *, content: bool = False) -> dict[str, AttributeValue]:
    """Attributes added to the ``invoke_agent`` span by ``run.finished``."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    attrs: dict[str, AttributeValue] = {}
    put(attrs, A.TACHO_STATUS, payload.get("status"))
    if content and payload.get("output") is not None:
        attrs[A.GEN_AI_OUTPUT_MESSAGES] = _text_message("assistant", payload["output"])
    error = payload.get("error")
    if isinstance(error, dict):
        put(attrs, A.ERROR_TYPE, error.get("type"))
    return attrs


def _request_param(request: Any, *names: str) -> Any:
    if not isinstance(request, dict):
        return None
    for name in names:
        value = request.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    return None


def chat_start_attributes(
    event_type: str,
    payload: Mapping[str, Any],
    *,
    run_id: str,
    model: str | None,
    seed: int | None,
    content: bool,
) -> dict[str, AttributeValue]:
    """Attributes of a ``chat`` span, known when the request is made."""
    attrs: dict[str, AttributeValue] = {A.GEN_AI_OPERATION_NAME: A.OP_CHAT}
    put(attrs, A.GEN_AI_PROVIDER_NAME, provider_of(model))
    put(attrs, A.GEN_AI_REQUEST_MODEL, model)
    attrs[A.GEN_AI_CONVERSATION_ID] = run_id
    request = payload.get("request")
    put(attrs, A.GEN_AI_REQUEST_SEED, seed)
    put(attrs, A.GEN_AI_REQUEST_TEMPERATURE, _request_param(request, "temperature"))
    put(attrs, A.GEN_AI_REQUEST_TOP_P, _request_param(request, "top_p"))
    put(
        attrs,
        A.GEN_AI_REQUEST_MAX_TOKENS,
        _request_param(request, "max_tokens", "max_completion_tokens", "max_output_tokens"),
    )
    if content:
        messages, system = input_messages(request)
        if messages:
            attrs[A.GEN_AI_INPUT_MESSAGES] = to_json(messages)
        if system:
            attrs[A.GEN_AI_SYSTEM_INSTRUCTIONS] = to_json(system)
    return attrs


def chat_end_attributes(event: Event, *, content: bool) -> dict[str, AttributeValue]:
    """Attributes added to a ``chat`` span by ``model.response`` or ``model.failed``."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    attrs: dict[str, AttributeValue] = {}
    if event.type == "model.failed":
        error = payload.get("error")
        if isinstance(error, dict):
            put(attrs, A.ERROR_TYPE, error.get("type"))
        return attrs
    response = payload.get("response")
    put(attrs, A.GEN_AI_RESPONSE_MODEL, event.model)
    if isinstance(response, dict):
        put(attrs, A.GEN_AI_RESPONSE_ID, response.get("id"))
    reasons = finish_reasons(response)
    if reasons:
        attrs[A.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
    usage = payload.get("usage")
    if not isinstance(usage, dict) and isinstance(response, dict):
        usage = response.get("usage")
    if isinstance(usage, dict):
        put(attrs, A.GEN_AI_USAGE_INPUT_TOKENS, _int(usage, "input_tokens", "prompt_tokens"))
        put(attrs, A.GEN_AI_USAGE_OUTPUT_TOKENS, _int(usage, "output_tokens", "completion_tokens"))
    if content:
        messages = output_messages(response)
        if messages:
            attrs[A.GEN_AI_OUTPUT_MESSAGES] = to_json(messages)
    return attrs


def _int(mapping: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = mapping.get(name)
        if type(value) is int:
            return value
    return None


def tool_start_attributes(
    payload: Mapping[str, Any], *, key: str | None, content: bool
) -> dict[str, AttributeValue]:
    """Attributes of an ``execute_tool`` span, from ``tool.requested``."""
    attrs: dict[str, AttributeValue] = {A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL}
    put(attrs, A.GEN_AI_TOOL_NAME, payload.get("tool"))
    put(attrs, A.GEN_AI_TOOL_CALL_ID, key)
    attrs[A.GEN_AI_TOOL_TYPE] = "function"
    put(attrs, A.TACHO_EFFECT, payload.get("effect"))
    if content and "args" in payload:
        attrs[A.GEN_AI_TOOL_CALL_ARGUMENTS] = to_json(payload.get("args"))
    return attrs


def tool_end_attributes(event: Event, *, content: bool) -> dict[str, AttributeValue]:
    """Attributes added to an ``execute_tool`` span by its completion or failure."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    attrs: dict[str, AttributeValue] = {}
    if event.type == "tool.failed":
        error = payload.get("error")
        if isinstance(error, dict):
            put(attrs, A.ERROR_TYPE, error.get("type"))
    elif content and "result" in payload:
        attrs[A.GEN_AI_TOOL_CALL_RESULT] = to_json(payload.get("result"))
    return attrs


def error_message(event: Event, *, content: bool) -> str | None:
    """The span status description of a failure event: the error type, and with the content
    opt-in its recorded message. An exception's message can hold whatever the agent handled
    (a key, an address), so it leaves the process only when content is captured, and then as
    recorded, that is after the recording's processors (redaction)."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    error = payload.get("error")
    if isinstance(error, dict):
        message = error.get("message") if content else None
        kind = error.get("type")
        return f"{kind}: {message}" if message else str(kind) if kind else None
    return None


# -- GenAI message form ("parts") ----------------------------------------------------------------


def _text_parts(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    if isinstance(content, list):
        parts: list[dict[str, Any]] = []
        for block in content:
            parts.extend(_block_parts(block))
        return parts
    return [{"type": "text", "content": to_json(content)}]


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def _block_parts(block: Any) -> list[dict[str, Any]]:
    if isinstance(block, str):
        return [{"type": "text", "content": block}]
    if not isinstance(block, dict):
        return [{"type": "text", "content": to_json(block)}]
    kind = block.get("type")
    if kind in ("text", "input_text", "output_text"):
        return [{"type": "text", "content": block.get("text")}]
    if kind == "tool_use":  # Anthropic
        return [
            {
                "type": "tool_call",
                "id": block.get("id"),
                "name": block.get("name"),
                "arguments": block.get("input"),
            }
        ]
    if kind == "tool_result":  # Anthropic
        return [
            {
                "type": "tool_call_response",
                "id": block.get("tool_use_id"),
                "response": block.get("content"),
            }
        ]
    if kind in ("thinking", "reasoning"):
        return [{"type": "reasoning", "content": block.get("thinking") or block.get("text")}]
    return [{"type": str(kind or "unknown"), **{k: v for k, v in block.items() if k != "type"}}]


def _tool_call_parts(calls: Iterable[Any]) -> list[dict[str, Any]]:
    parts = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        function = _as_dict(call.get("function"))
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name", call.get("name")),
                "arguments": _arguments(function.get("arguments", call.get("arguments"))),
            }
        )
    return parts


def message_parts(message: Mapping[str, Any]) -> dict[str, Any]:
    """One OpenAI- or Anthropic-style message in the GenAI ``{"role", "parts"}`` form."""
    role = str(message.get("role") or "user")
    if role == "tool":
        parts: list[dict[str, Any]] = [
            {
                "type": "tool_call_response",
                "id": message.get("tool_call_id"),
                "response": message.get("content"),
            }
        ]
    else:
        parts = _text_parts(message.get("content"))
        parts.extend(_tool_call_parts(message.get("tool_calls") or ()))
    out: dict[str, Any] = {"role": role, "parts": parts}
    if isinstance(message.get("name"), str):
        out["name"] = message["name"]
    return out


def input_messages(request: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The request's messages and system instructions in the GenAI parts form (best effort)."""
    if not isinstance(request, dict):
        return [], []
    system: list[dict[str, Any]] = []
    for key in ("system", "instructions"):
        if key in request:
            system = _text_parts(request[key])
    raw = request.get("messages")
    if raw is None:
        raw = request.get("input")
    if isinstance(raw, str):
        return [{"role": "user", "parts": [{"type": "text", "content": raw}]}], system
    messages = [message_parts(m) for m in raw or () if isinstance(m, dict)]
    return messages, system


def output_messages(response: Any) -> list[dict[str, Any]]:
    """The response's output messages in the GenAI parts form (best effort)."""
    if not isinstance(response, dict):
        return [] if response is None else [_assistant(_text_parts(response), None)]
    choices = response.get("choices")
    if isinstance(choices, list):  # OpenAI chat completions
        out = []
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            message = _as_dict(choice.get("message"))
            parts = _text_parts(message.get("content"))
            parts.extend(_tool_call_parts(message.get("tool_calls") or ()))
            out.append(_assistant(parts, choice.get("finish_reason")))
        return out
    if isinstance(response.get("message"), dict):  # one message (imported runs, Ollama)
        message = message_parts(response["message"])
        return [_assistant(message["parts"], response.get("finish_reason"))]
    if isinstance(response.get("content"), list):  # Anthropic messages
        return [_assistant(_text_parts(response["content"]), response.get("stop_reason"))]
    if isinstance(response.get("output"), list):  # OpenAI responses
        parts = []
        for item in response["output"]:
            if isinstance(item, dict) and item.get("type") == "message":
                parts.extend(_text_parts(item.get("content")))
            elif isinstance(item, dict) and item.get("type") == "function_call":
                parts.extend(
                    _tool_call_parts(
                        [{"id": item.get("call_id"), "name": item.get("name"), **item}]
                    )
                )
        return [_assistant(parts, response.get("status"))]
    if isinstance(response.get("content"), str):
        return [_assistant(_text_parts(response["content"]), response.get("finish_reason"))]
    return [_assistant([{"type": "text", "content": to_json(response)}], None)]


def _assistant(parts: list[dict[str, Any]], finish: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "parts": parts}
    if isinstance(finish, str):
        message["finish_reason"] = finish
    return message


def finish_reasons(response: Any) -> list[str]:
    """Why the model stopped, per choice (OpenAI ``finish_reason``, Anthropic ``stop_reason``)."""
    if not isinstance(response, dict):
        return []
    choices = response.get("choices")
    if isinstance(choices, list):
        return [
            c["finish_reason"]
            for c in choices
            if isinstance(c, dict) and isinstance(c.get("finish_reason"), str)
        ]
    for key in ("stop_reason", "finish_reason"):
        if isinstance(response.get(key), str):
            return [response[key]]
    return []

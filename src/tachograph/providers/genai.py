"""The OpenTelemetry GenAI semantic conventions' content forms, from and to provider shapes.

* messages in the ``{"role", "parts": [...]}`` form of ``gen_ai.input.messages``,
  ``gen_ai.output.messages`` and ``gen_ai.system_instructions`` (schemas
  ``gen-ai-*-messages.json`` of the conventions), built from OpenAI chat/responses and
  Anthropic messages requests and answers, whether recorded as an HTTP envelope or as the
  provider body;
* ``gen_ai.tool.definitions`` from a request's tools;
* finish reasons: the provider's own values (``gen_ai.response.finish_reasons``) and the
  conventions' (``finish_reason`` of an output message, required by the schema);
* provider names (``gen_ai.provider.name``);
* the tool calls an answer asks for, with the model's own call ids;
* the reverse: GenAI (and OpenAI-style) messages in the normalized
  ``{"role", "content", "tool_calls"?, "tool_call_id"?}`` form the importer records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from . import anthropic, openai
from .http import response_body

__all__ = [
    "UNKNOWN_FINISH_REASON",
    "finish_reasons",
    "input_messages",
    "message_parts",
    "normalized_from_openai",
    "normalized_from_semconv",
    "output_messages",
    "provider_name",
    "response_id",
    "semconv_finish_reason",
    "text_of_parts",
    "tool_calls_of",
    "tool_definitions",
]

UNKNOWN_FINISH_REASON = "unknown"
"""An output message's ``finish_reason`` when the answer names none: the schema requires the
field, and a tool that validates it (Phoenix) drops every output message when one lacks it."""

_SEMCONV_REASON = {
    # OpenAI chat completions
    "tool_calls": "tool_call",
    "function_call": "tool_call",
    # Anthropic messages
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_call",
    "max_tokens": "length",
    "refusal": "content_filter",
    "pause_turn": "stop",
    # OpenAI responses (status)
    "completed": "stop",
    "incomplete": "length",
    "failed": "error",
}


def _to_json(value: Any) -> str:
    return orjson.dumps(value).decode("utf-8")


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _loads(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def semconv_finish_reason(reason: Any) -> str:
    """A provider's finish reason in the conventions' vocabulary (``stop``, ``length``,
    ``content_filter``, ``tool_call``, ``error``); other strings pass through, and a missing
    one is :data:`UNKNOWN_FINISH_REASON`."""
    if not isinstance(reason, str) or not reason:
        return UNKNOWN_FINISH_REASON
    return _SEMCONV_REASON.get(reason, reason)


# -- provider names ------------------------------------------------------------------------

_MODEL_PREFIXES = (
    (("gpt-", "o1", "o3", "o4", "chatgpt-", "text-embedding-", "davinci", "babbage"), "openai"),
    (("claude",), "anthropic"),
    (("gemini",), "gcp.gemini"),
    (("mistral", "mixtral", "codestral"), "mistral_ai"),
    (("command",), "cohere"),
    (("grok",), "x_ai"),
    (("deepseek",), "deepseek"),
)

_ALIASES = {"az.ai.inference": "azure.ai.inference", "openai": "openai", "anthropic": "anthropic"}


def provider_name(
    *,
    declared: str | None = None,
    recorded: Any = None,
    path: Any = None,
    model: str | None = None,
) -> str | None:
    """``gen_ai.provider.name`` for a model call: the provider declared with
    ``@tachograph.model``, else the one an imported run recorded, else the API the HTTP call
    went to (``.../chat/completions`` and ``.../responses`` are OpenAI's,
    ``.../messages`` Anthropic's), else the model family, else ``None``."""
    if declared:
        return declared
    if isinstance(recorded, str) and recorded:
        return _ALIASES.get(recorded.lower(), recorded.lower())
    if openai.is_chat_path(path) or openai.is_responses_path(path):
        return "openai"
    if anthropic.is_messages_path(path):
        return "anthropic"
    if isinstance(model, str):
        lowered = model.lower()
        for prefixes, name in _MODEL_PREFIXES:
            if lowered.startswith(prefixes):
                return name
    return None


# -- parts ---------------------------------------------------------------------------------


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
    return [{"type": "text", "content": _to_json(content)}]


def _call_part(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "tool_call", "name": str(name or "")}
    if isinstance(call_id, str) and call_id:
        part["id"] = call_id
    if arguments is not None:
        part["arguments"] = _loads(arguments)
    return part


def _response_part(call_id: Any, response: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "tool_call_response", "response": response}
    if isinstance(call_id, str) and call_id:
        part["id"] = call_id
    return part


def _block_parts(block: Any) -> list[dict[str, Any]]:
    if isinstance(block, str):
        return [{"type": "text", "content": block}]
    if not isinstance(block, dict):
        return [{"type": "text", "content": _to_json(block)}]
    kind = block.get("type")
    if kind in ("text", "input_text", "output_text"):
        text = block.get("text", block.get("content"))
        return [{"type": "text", "content": text if isinstance(text, str) else _to_json(text)}]
    if kind == "tool_use":  # Anthropic
        return [_call_part(block.get("id"), block.get("name"), block.get("input"))]
    if kind == "tool_result":  # Anthropic
        return [_response_part(block.get("tool_use_id"), block.get("content"))]
    if kind == "function_call":  # OpenAI responses
        return [_call_part(block.get("call_id"), block.get("name"), block.get("arguments"))]
    if kind == "function_call_output":  # OpenAI responses
        return [_response_part(block.get("call_id"), block.get("output"))]
    if kind in ("thinking", "reasoning"):
        text = block.get("thinking") or block.get("text") or ""
        return [{"type": "reasoning", "content": str(text)}]
    return [{"type": str(kind or "unknown"), **{k: v for k, v in block.items() if k != "type"}}]


def _tool_call_parts(calls: Iterable[Any]) -> list[dict[str, Any]]:
    parts = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        function = _as_dict(call.get("function"))
        arguments = function.get("arguments", call.get("arguments", call.get("args")))
        parts.append(_call_part(call.get("id"), function.get("name", call.get("name")), arguments))
    return parts


def message_parts(message: Mapping[str, Any]) -> dict[str, Any]:
    """One OpenAI- or Anthropic-style message in the GenAI ``{"role", "parts"}`` form."""
    role = str(message.get("role") or "user")
    if role == "tool":
        parts = [_response_part(message.get("tool_call_id"), message.get("content"))]
    elif message.get("type") in ("function_call", "function_call_output"):
        parts = _block_parts(message)
        role = "assistant" if message.get("type") == "function_call" else "tool"
    else:
        parts = _text_parts(message.get("content"))
        parts.extend(_tool_call_parts(message.get("tool_calls") or ()))
    out: dict[str, Any] = {"role": role, "parts": parts}
    if isinstance(message.get("name"), str):
        out["name"] = message["name"]
    return out


def text_of_parts(parts: Any) -> str | None:
    """The text of a list of GenAI parts, or ``None`` when it has none."""
    if not isinstance(parts, list):
        return None
    texts = [
        p["content"]
        for p in parts
        if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("content"), str)
    ]
    return "".join(texts) if texts else None


def input_messages(request: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A request's messages and system instructions in the GenAI parts form.

    OpenAI chat ``messages`` (system messages stay in the list, as the OpenAI
    instrumentation keeps them), OpenAI responses ``input`` + ``instructions``, Anthropic
    ``messages`` + ``system``.
    """
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


def _assistant(parts: list[dict[str, Any]], finish: Any) -> dict[str, Any]:
    return {"role": "assistant", "parts": parts, "finish_reason": semconv_finish_reason(finish)}


def output_messages(response: Any) -> list[dict[str, Any]]:
    """The answer's output messages in the GenAI parts form, each with a ``finish_reason``.

    ``response`` is what a ``model.response`` records: an HTTP envelope (the body, or a stream
    assembled), an OpenAI or Anthropic body, an imported chat-completions-shaped answer, or a
    function model's return value.
    """
    response = response_body(response)
    if not isinstance(response, dict):
        return [] if response is None else [_assistant(_text_parts(response), None)]
    choices = response.get("choices")
    if isinstance(choices, list):  # OpenAI chat completions (and imported answers)
        out = []
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            message = _as_dict(choice.get("message"))
            parts = _text_parts(message.get("content"))
            parts.extend(_tool_call_parts(message.get("tool_calls") or ()))
            out.append(_assistant(parts, choice.get("finish_reason")))
        return out
    if isinstance(response.get("message"), dict):  # one message (Ollama-like, the demo)
        message = message_parts(response["message"])
        return [_assistant(message["parts"], response.get("finish_reason"))]
    if isinstance(response.get("content"), list):  # Anthropic messages
        return [_assistant(_text_parts(response["content"]), response.get("stop_reason"))]
    if isinstance(response.get("output"), list):  # OpenAI responses
        parts = []
        for item in response["output"]:
            if isinstance(item, dict) and item.get("type") == "message":
                parts.extend(_text_parts(item.get("content")))
            elif isinstance(item, dict):
                parts.extend(_block_parts(item))
        return [_assistant(parts, response.get("status"))]
    if isinstance(response.get("content"), str):
        return [_assistant(_text_parts(response["content"]), response.get("finish_reason"))]
    return [_assistant([{"type": "text", "content": _to_json(response)}], None)]


def finish_reasons(response: Any) -> list[str]:
    """Why the model stopped, per choice, as the provider said it (OpenAI ``finish_reason``,
    Anthropic ``stop_reason``, responses ``status``)."""
    response = response_body(response)
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
    if isinstance(response.get("output"), list) and isinstance(response.get("status"), str):
        return [response["status"]]
    return []


def response_id(response: Any) -> str | None:
    """The provider's id of an answer (``chatcmpl-...``, ``msg_...``, ``resp_...``)."""
    body = response_body(response)
    value = body.get("id") if isinstance(body, dict) else None
    return value if isinstance(value, str) and value else None


def tool_calls_of(response: Any) -> list[dict[str, Any]]:
    """The tool calls an answer asks for: ``{"id"?, "name", "arguments"?}`` each, ``id`` the
    model's own call id."""
    calls: list[dict[str, Any]] = []
    for message in output_messages(response):
        for part in message["parts"]:
            if part.get("type") == "tool_call":
                calls.append({k: v for k, v in part.items() if k != "type"})
    return calls


def tool_definitions(request: Any) -> list[dict[str, Any]]:
    """A request's tools in the ``gen_ai.tool.definitions`` form."""
    if not isinstance(request, dict) or not isinstance(request.get("tools"), list):
        return []
    out: list[dict[str, Any]] = []
    for tool in request["tools"]:
        if not isinstance(tool, dict):
            continue
        function = _as_dict(tool.get("function")) or tool
        name = function.get("name")
        if not isinstance(name, str):
            continue
        definition: dict[str, Any] = {"type": "function", "name": name}
        if isinstance(function.get("description"), str):
            definition["description"] = function["description"]
        parameters = function.get("parameters", function.get("input_schema"))
        if isinstance(parameters, dict):
            definition["parameters"] = parameters
        out.append(definition)
    return out


# -- back to the normalized message form ---------------------------------------------------


def _normal_call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": _loads(arguments)}


def normalized_from_semconv(message: Mapping[str, Any]) -> dict[str, Any]:
    """A GenAI ``{"role", "parts"}`` message in the normalized form."""
    raw = message.get("parts")
    parts: list[Any] = raw if isinstance(raw, list) else []
    out: dict[str, Any] = {"role": message.get("role"), "content": text_of_parts(parts)}
    calls = [
        _normal_call(p.get("id"), p.get("name"), p.get("arguments"))
        for p in parts
        if isinstance(p, dict) and p.get("type") == "tool_call"
    ]
    if calls:
        out["tool_calls"] = calls
    responses = [p for p in parts if isinstance(p, dict) and p.get("type") == "tool_call_response"]
    if responses:
        first = responses[0]
        out["content"] = first.get("response", first.get("result"))
        out["tool_call_id"] = first.get("id")
    return out


def normalized_from_openai(message: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI-style message (``tool_calls[].function``) in the normalized form."""
    out: dict[str, Any] = {"role": message.get("role"), "content": message.get("content")}
    calls = []
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict):
            nested = call.get("function")
            function: dict[str, Any] = nested if isinstance(nested, dict) else call
            calls.append(
                _normal_call(call.get("id"), function.get("name"), function.get("arguments"))
            )
    if calls:
        out["tool_calls"] = calls
    if message.get("tool_call_id"):
        out["tool_call_id"] = message["tool_call_id"]
    return out

"""What a tachograph event looks like as OpenTelemetry data, shared by the live bridge and export.

Only plain Python here (no OpenTelemetry import): span names, attribute dicts, and the GenAI
message form of recorded requests and responses.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from ..providers import genai
from ..providers.genai import finish_reasons, input_messages, output_messages
from ..providers.http import response_body
from ..record.event import Event, EventType
from ..record.seal import KEY_SECRET_FIELD
from . import attributes as A

__all__ = ["finish_reasons", "input_messages", "output_messages"]

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

REQUEST_TYPES = frozenset({EventType.MODEL_REQUEST.value, EventType.TOOL_REQUESTED.value})
COMPLETION_TYPES = frozenset(
    {
        EventType.MODEL_RESPONSE.value,
        EventType.MODEL_FAILED.value,
        EventType.TOOL_COMPLETED.value,
        EventType.TOOL_FAILED.value,
    }
)


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
        if key == KEY_SECRET_FIELD and event.type == EventType.RUN_STARTED.value:
            continue  # SPEC section 5: it stays in the log, never in telemetry
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
    """The provider declared with ``@tachograph.model(..., provider=...)`` for ``model`` in
    this process. Process state, not the record: only the live bridge reads it (it runs where
    the models were declared); export reads the record alone (see :func:`run_provider`)."""
    if model is None:
        return None
    from ..capture.runtime import registered_models

    spec = registered_models().get(model)
    return spec.provider if spec is not None else None


def _text_message(role: str, value: Any, finish_reason: str | None = None) -> str:
    text = value if isinstance(value, str) else to_json(value)
    message: dict[str, Any] = {"role": role, "parts": [{"type": "text", "content": text}]}
    if finish_reason is not None:  # required on output messages
        message["finish_reason"] = finish_reason
    return to_json([message])


def declared_run_provider(event: Event) -> str | None:
    """The one provider declared (in this process) for the models ``run.started`` names in its
    fingerprint, if they have exactly one; the live bridge's ``invoke_agent`` provider."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    env = payload.get("env") if isinstance(payload.get("env"), dict) else {}
    models = env.get("models") if isinstance(env, dict) else None
    providers = {provider_of(m) for m in models or () if isinstance(m, str)} - {None}
    return providers.pop() if len(providers) == 1 else None


def run_provider(events: Iterable[Event]) -> str | None:
    """The one provider the record gives for every model call of a run (see
    :func:`chat_provider`, without a declared provider), if they have exactly one; export's
    ``invoke_agent`` provider."""
    found: set[str | None] = set()
    for event in events:
        if event.type == EventType.MODEL_REQUEST.value:
            found.add(chat_provider(_as_dict(event.payload), event.model))
    return found.pop() if len(found) == 1 else None


def agent_start_attributes(
    event: Event, *, content: bool = False, provider: str | None = None
) -> dict[str, AttributeValue]:
    """Attributes of the ``invoke_agent`` span, from ``run.started`` (and the run's
    ``provider``, when the caller knows it has one)."""
    attrs: dict[str, AttributeValue] = {
        A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT,
        A.GEN_AI_AGENT_NAME: event.actor,
        A.GEN_AI_CONVERSATION_ID: event.run_id,
        A.TACHO_RUN_ID: event.run_id,
    }
    put(attrs, A.GEN_AI_PROVIDER_NAME, provider)
    payload = event.payload if isinstance(event.payload, dict) else {}
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
        # the run returned its output: the agent's generation stopped normally
        attrs[A.GEN_AI_OUTPUT_MESSAGES] = _text_message("assistant", payload["output"], "stop")
        if not isinstance(payload["output"], str):
            # written as a text part, the output is JSON: say so, so that it is read back as
            # JSON rather than as a string of JSON
            attrs[A.GEN_AI_OUTPUT_TYPE] = A.OUTPUT_TYPE_JSON
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
    declared_provider: str | None = None,
) -> dict[str, AttributeValue]:
    """Attributes of a ``chat`` span, known when the request is made (``declared_provider``:
    the live bridge's :func:`provider_of`; export passes none)."""
    attrs: dict[str, AttributeValue] = {A.GEN_AI_OPERATION_NAME: A.OP_CHAT}
    put(attrs, A.GEN_AI_PROVIDER_NAME, chat_provider(payload, model, declared=declared_provider))
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
        tools = genai.tool_definitions(request)
        if tools:
            attrs[A.GEN_AI_TOOL_DEFINITIONS] = to_json(tools)
    return attrs


def chat_provider(
    payload: Mapping[str, Any], model: str | None, *, declared: str | None = None
) -> str | None:
    """``gen_ai.provider.name`` of a model call: ``declared`` (given by the live bridge
    only), else from the record: imported, from the HTTP path, or from the model family (see
    :func:`tachograph.providers.genai.provider_name`)."""
    http = payload.get("http")
    return genai.provider_name(
        declared=declared,
        recorded=payload.get("provider"),
        path=http.get("path") if isinstance(http, dict) else None,
        model=model,
    )


def chat_end_attributes(event: Event, *, content: bool) -> dict[str, AttributeValue]:
    """Attributes added to a ``chat`` span by ``model.response`` or ``model.failed``."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    attrs: dict[str, AttributeValue] = {}
    if event.type == EventType.MODEL_FAILED.value:
        error = payload.get("error")
        if isinstance(error, dict):
            put(attrs, A.ERROR_TYPE, error.get("type"))
        return attrs
    response = payload.get("response")
    put(attrs, A.GEN_AI_RESPONSE_MODEL, event.model)
    put(attrs, A.GEN_AI_RESPONSE_ID, genai.response_id(response))
    reasons = finish_reasons(response)
    if reasons:
        attrs[A.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
    usage = payload.get("usage")
    body = response_body(response)
    if not isinstance(usage, dict) and isinstance(body, dict):
        usage = body.get("usage")
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


def _uncaptured(payload: Mapping[str, Any], name: str) -> bool:
    """An imported run's placeholder for what its trace did not capture is not content: it
    is left out rather than sent as an empty value."""
    listed = payload.get("not_captured")
    return isinstance(listed, list) and name in listed


def tool_start_attributes(
    payload: Mapping[str, Any],
    *,
    key: str | None,
    content: bool,
    call_id: str | None = None,
) -> dict[str, AttributeValue]:
    """Attributes of an ``execute_tool`` span, from ``tool.requested``.

    ``gen_ai.tool.call.id`` is the model's call id (recorded by an import, or ``call_id``
    found by :class:`ToolCallIds`); tachograph's idempotency key is its own attribute."""
    attrs: dict[str, AttributeValue] = {A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL}
    put(attrs, A.GEN_AI_TOOL_NAME, payload.get("tool"))
    recorded = payload.get("call_id")
    put(attrs, A.GEN_AI_TOOL_CALL_ID, recorded if isinstance(recorded, str) else call_id)
    put(attrs, A.TACHO_IDEMPOTENCY_KEY, key)
    attrs[A.GEN_AI_TOOL_TYPE] = "function"
    put(attrs, A.TACHO_EFFECT, payload.get("effect"))
    if content and "args" in payload and not _uncaptured(payload, "args"):
        attrs[A.GEN_AI_TOOL_CALL_ARGUMENTS] = to_json(payload.get("args"))
    return attrs


def tool_end_attributes(event: Event, *, content: bool) -> dict[str, AttributeValue]:
    """Attributes added to an ``execute_tool`` span by its completion or failure."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    attrs: dict[str, AttributeValue] = {}
    if event.type == EventType.TOOL_FAILED.value:
        error = payload.get("error")
        if isinstance(error, dict):
            put(attrs, A.ERROR_TYPE, error.get("type"))
    elif content and "result" in payload and not _uncaptured(payload, "result"):
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


class ToolCallIds:
    """The model's call ids for the tools a run executes: each ``tool.requested`` takes the
    first unclaimed call of the same tool (same arguments preferred) that an earlier model
    answer asked for. Used by export and by the live bridge alike."""

    def __init__(self) -> None:
        self._open: list[dict[str, Any]] = []

    def answered(self, response: Any) -> None:
        """A model answer was recorded: remember the calls it asks for."""
        self._open.extend(c for c in genai.tool_calls_of(response) if c.get("id"))

    def claim(self, tool: Any, args: Any) -> str | None:
        """The call id of the call that a ``tool.requested`` of ``tool`` with ``args`` runs."""
        same = [c for c in self._open if c.get("name") == tool]
        exact = [c for c in same if c.get("arguments") == args]
        for call in exact or same:
            self._open.remove(call)
            value = call.get("id")
            return value if isinstance(value, str) else None
        return None

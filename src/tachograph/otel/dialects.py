"""What GenAI spans say, whatever dialect they speak: agent, model and tool steps.

Dialects read (see docs/otel.md for the attribute names of each):

* ``otel-genai-current``: the current OpenTelemetry GenAI conventions, content (if captured) in
  ``gen_ai.input.messages`` / ``gen_ai.output.messages`` / ``gen_ai.tool.call.*`` as JSON;
  ``otel-genai-current-no-content`` is the same with content capture off (the default);
* ``otel-genai-legacy-span-events``: ``gen_ai.system`` and one span event per message
  (``gen_ai.user.message``, ..., ``gen_ai.choice``) with ``gen_ai.event.content``;
* ``openinference``: ``openinference.span.kind`` and ``llm.input_messages.N.message.*``;
* ``openllmetry``: ``traceloop.*`` decorator spans and ``gen_ai.prompt.N.*`` /
  ``gen_ai.completion.N.*``.

A step is a plain dict (the shape of ``tests/golden/otel/expected.json``). ``None`` always
means "not recorded in this trace", never "empty".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from ..providers import genai
from . import attributes as A
from .otlp_json import OtlpSpan

__all__ = ["classify", "detect_dialect", "extract_steps"]

Step = dict[str, Any]


def loads(value: Any) -> Any:
    """Parse a JSON string; anything else (or text that is not JSON) is returned as is."""
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def typed(a: Mapping[str, Any], key: str, mime_key: str, *, guess: bool) -> Any:
    """An OpenInference value as its ``*.mime_type`` says: JSON when it says
    ``application/json`` (so JSON stays JSON, not a string of it), the text as it is when it
    says ``text/plain``; without a mime type, parsed as JSON when it is JSON if ``guess``."""
    value = a.get(key)
    mime = a.get(mime_key)
    if isinstance(mime, str) and mime.strip():
        return loads(value) if "json" in mime.lower() else value
    return loads(value) if guess else value


def classify(span: OtlpSpan) -> str | None:
    """``"agent"``, ``"model"``, ``"tool"``, or ``None`` for a span that is none of these."""
    a = span.attributes
    op = a.get(A.GEN_AI_OPERATION_NAME)
    if op in A.MODEL_OPERATIONS:
        return "model"
    if op == A.OP_EXECUTE_TOOL:
        return "tool"
    if op in (A.OP_INVOKE_AGENT, "create_agent", "invoke_workflow"):
        return "agent"
    kind = a.get(A.OI_SPAN_KIND) or a.get(A.TL_SPAN_KIND)
    if kind == "LLM" or a.get(A.TL_REQUEST_TYPE) in ("chat", "completion"):
        return "model"
    if kind in ("TOOL", "tool"):
        return "tool"
    if kind in ("AGENT", "agent", "workflow"):
        return "agent"
    return None


def detect_dialect(spans: Sequence[OtlpSpan]) -> str:
    """The dialect the spans of one trace speak (see the module docstring)."""
    attrs = [s.attributes for s in spans]
    if any(A.OI_SPAN_KIND in a for a in attrs):
        return "openinference"
    if any(A.TL_SPAN_KIND in a or A.TL_REQUEST_TYPE in a for a in attrs):
        return "openllmetry"
    if any(
        e.name.startswith("gen_ai.") and A.GEN_AI_EVENT_CONTENT in e.attributes
        for s in spans
        for e in s.events
    ) or (
        any(A.GEN_AI_SYSTEM in a for a in attrs)
        and not any(A.GEN_AI_PROVIDER_NAME in a for a in attrs)
    ):
        return "otel-genai-legacy-span-events"
    content_keys = (
        A.GEN_AI_INPUT_MESSAGES,
        A.GEN_AI_OUTPUT_MESSAGES,
        A.GEN_AI_TOOL_CALL_ARGUMENTS,
        A.GEN_AI_TOOL_CALL_RESULT,
    )
    if any(k in a for a in attrs for k in content_keys):
        return "otel-genai-current"
    return "otel-genai-current-no-content"


# -- message forms ------------------------------------------------------------------------------


_text_of = genai.text_of_parts
semconv_message = genai.normalized_from_semconv
openai_message = genai.normalized_from_openai


def _call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": loads(arguments)}


def indexed(attrs: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Unflatten ``prefix.N.rest`` attributes into a list of ``{rest: value}`` rows."""
    rows: dict[int, dict[str, Any]] = {}
    pattern = re.compile(re.escape(prefix) + r"\.(\d+)\.(.+)$")
    for key, value in attrs.items():
        match = pattern.match(key)
        if match:
            rows.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return [rows[i] for i in sorted(rows)]


def _flat_message(row: Mapping[str, Any], p: str, call: str) -> dict[str, Any]:
    """One flattened message row (OpenInference ``p="message."``, OpenLLMetry ``p=""``)."""
    out: dict[str, Any] = {"role": row.get(f"{p}role"), "content": row.get(f"{p}content")}
    calls = [
        _call(
            t.get(f"{call}id"),
            t.get(f"{call}{'function.' if call else ''}name"),
            t.get(f"{call}{'function.' if call else ''}arguments"),
        )
        for t in indexed(row, f"{p}tool_calls")
    ]
    if calls:
        out["tool_calls"] = calls
    if row.get(f"{p}tool_call_id"):
        out["tool_call_id"] = row[f"{p}tool_call_id"]
    return out


# -- steps --------------------------------------------------------------------------------------


def _base(span: OtlpSpan, kind: str) -> Step:
    return {
        "kind": kind,
        "span_id": span.span_id,
        "parent_span_id": span.parent_span_id,
        "span_name": span.name,
        "start_ns": span.start_ns,
        "end_ns": span.end_ns,
    }


def _agent_step(span: OtlpSpan) -> Step:
    a = span.attributes
    input_text: Any = None
    output_text: Any = None
    if A.GEN_AI_INPUT_MESSAGES in a or A.GEN_AI_OUTPUT_MESSAGES in a:
        inputs = loads(a.get(A.GEN_AI_INPUT_MESSAGES))
        outputs = loads(a.get(A.GEN_AI_OUTPUT_MESSAGES))
        if isinstance(inputs, list) and inputs and isinstance(inputs[-1], dict):
            input_text = _text_of(inputs[-1].get("parts"))
        if isinstance(outputs, list) and outputs and isinstance(outputs[0], dict):
            output_text = _text_of(outputs[0].get("parts"))
            if a.get(A.GEN_AI_OUTPUT_TYPE) == A.OUTPUT_TYPE_JSON:
                output_text = loads(output_text)  # the output is JSON, written as text
    elif A.OI_SPAN_KIND in a:
        input_text = typed(a, A.OI_INPUT_VALUE, A.OI_INPUT_MIME_TYPE, guess=False)
        output_text = typed(a, A.OI_OUTPUT_VALUE, A.OI_OUTPUT_MIME_TYPE, guess=False)
    elif A.TL_SPAN_KIND in a:
        entity_input = loads(a.get(A.TL_ENTITY_INPUT))
        if isinstance(entity_input, dict):
            args, kwargs = entity_input.get("args") or [], entity_input.get("kwargs") or {}
            input_text = args[0] if len(args) == 1 and not kwargs else (kwargs or args or None)
        output_text = loads(a.get(A.TL_ENTITY_OUTPUT))
    name = a.get(A.GEN_AI_AGENT_NAME) or a.get(A.OI_AGENT_NAME) or a.get(A.TL_ENTITY_NAME)
    return {
        **_base(span, "agent"),
        "agent_name": name or span.name,
        "input_text": input_text,
        "output_text": output_text,
    }


def _first(a: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if a.get(key) is not None:
            return a[key]
    return None


def _model_step(span: OtlpSpan) -> Step:
    a = span.attributes
    params = loads(a.get(A.OI_INVOCATION_PARAMETERS))
    reasons = a.get(A.GEN_AI_RESPONSE_FINISH_REASONS)
    step: Step = {
        **_base(span, "model"),
        "provider": _first(a, A.GEN_AI_PROVIDER_NAME, A.GEN_AI_SYSTEM, A.OI_PROVIDER, A.OI_SYSTEM),
        "request_model": a.get(A.GEN_AI_REQUEST_MODEL)
        or (params.get("model") if isinstance(params, dict) else None),
        "model": _first(a, A.GEN_AI_RESPONSE_MODEL, A.OI_MODEL_NAME),
        "response_id": a.get(A.GEN_AI_RESPONSE_ID),
        "input_messages": None,
        "output_text": None,
        "tool_calls": None,
        "finish_reason": reasons[0]
        if isinstance(reasons, list) and reasons
        else _first(a, f"{A.TL_COMPLETION}.0.finish_reason", "llm.finish_reason"),
        "input_tokens": _first(
            a, A.GEN_AI_USAGE_INPUT_TOKENS, A.GEN_AI_USAGE_PROMPT_TOKENS, A.OI_PROMPT_TOKENS
        ),
        "output_tokens": _first(
            a,
            A.GEN_AI_USAGE_OUTPUT_TOKENS,
            A.GEN_AI_USAGE_COMPLETION_TOKENS,
            A.OI_COMPLETION_TOKENS,
        ),
    }
    step["params"] = _params(a, params)
    step["tools"] = _tools(a)
    message_events = [e for e in span.events if A.GEN_AI_EVENT_CONTENT in e.attributes]
    if A.GEN_AI_INPUT_MESSAGES in a or A.GEN_AI_OUTPUT_MESSAGES in a:
        inputs = loads(a.get(A.GEN_AI_INPUT_MESSAGES))
        system = loads(a.get(A.GEN_AI_SYSTEM_INSTRUCTIONS))
        if isinstance(inputs, list):
            messages = [semconv_message(m) for m in inputs if isinstance(m, dict)]
            if isinstance(system, list) and _text_of(system) is not None:
                messages.insert(0, {"role": "system", "content": _text_of(system)})
            step["input_messages"] = messages
        outputs = loads(a.get(A.GEN_AI_OUTPUT_MESSAGES))
        if isinstance(outputs, list) and outputs and isinstance(outputs[0], dict):
            out = semconv_message(outputs[0])
            step["output_text"] = out["content"]
            step["tool_calls"] = out.get("tool_calls", [])
    elif message_events:
        inputs = []
        for event in message_events:
            content = loads(event.attributes.get(A.GEN_AI_EVENT_CONTENT))
            if not isinstance(content, dict):
                continue
            if event.name == A.GEN_AI_CHOICE_EVENT:
                nested = content.get("message")
                message: dict[str, Any] = nested if isinstance(nested, dict) else {}
                out = openai_message({"role": "assistant", **message})
                step["output_text"] = out["content"]
                step["tool_calls"] = out.get("tool_calls", [])
                if step["finish_reason"] is None:
                    step["finish_reason"] = content.get("finish_reason")
            else:
                role = content.get("role") or event.name.removeprefix("gen_ai.").split(".")[0]
                inputs.append(openai_message({**content, "role": role}))
        step["input_messages"] = inputs
    elif a.get(A.OI_SPAN_KIND) == "LLM":
        output = loads(a.get(A.OI_OUTPUT_VALUE))
        if isinstance(output, dict):
            step["response_id"] = step["response_id"] or output.get("id")
            choices = output.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], dict):
                step["finish_reason"] = step["finish_reason"] or choices[0].get("finish_reason")
        rows = indexed(a, A.OI_INPUT_MESSAGES)
        if rows:
            step["input_messages"] = [_flat_message(r, "message.", "tool_call.") for r in rows]
        outputs = indexed(a, A.OI_OUTPUT_MESSAGES)
        if outputs:
            out = _flat_message(outputs[0], "message.", "tool_call.")
            step["output_text"] = out["content"]
            step["tool_calls"] = out.get("tool_calls", [])
    elif any(k.startswith((f"{A.TL_PROMPT}.", f"{A.TL_COMPLETION}.")) for k in a):
        rows = indexed(a, A.TL_PROMPT)
        if rows:
            step["input_messages"] = [_flat_message(r, "", "") for r in rows]
        outputs = indexed(a, A.TL_COMPLETION)
        if outputs:
            out = _flat_message(outputs[0], "", "")
            step["output_text"] = out["content"]
            step["tool_calls"] = out.get("tool_calls", [])
    return step


_PARAMS = (
    ("temperature", A.GEN_AI_REQUEST_TEMPERATURE),
    ("top_p", A.GEN_AI_REQUEST_TOP_P),
    ("max_tokens", A.GEN_AI_REQUEST_MAX_TOKENS),
    ("seed", A.GEN_AI_REQUEST_SEED),
)


def _params(a: Mapping[str, Any], invocation: Any) -> dict[str, Any]:
    """The sampling parameters the span recorded (GenAI attributes, OpenInference
    ``llm.invocation_parameters``); a parameter it does not have was not captured."""
    out: dict[str, Any] = {}
    for name, key in _PARAMS:
        if a.get(key) is not None:
            out[name] = a[key]
    if isinstance(invocation, dict):
        for name in ("temperature", "top_p", "max_tokens", "seed"):
            if name not in out and invocation.get(name) is not None:
                out[name] = invocation[name]
        if "max_tokens" not in out and invocation.get("max_completion_tokens") is not None:
            out["max_tokens"] = invocation["max_completion_tokens"]
    return out


def _tools(a: Mapping[str, Any]) -> list[Any] | None:
    """The tools offered to the model, when the span recorded them: GenAI
    ``gen_ai.tool.definitions``, OpenInference ``llm.tools.N.tool.json_schema``, OpenLLMetry
    ``llm.request.functions.N.*``."""
    defined = loads(a.get(A.GEN_AI_TOOL_DEFINITIONS))
    if isinstance(defined, list):
        return defined
    rows = indexed(a, "llm.tools")
    if rows:
        return [loads(r.get("tool.json_schema")) for r in rows]
    functions = indexed(a, "llm.request.functions")
    if functions:
        return [
            {
                "type": "function",
                "name": f.get("name"),
                **({"description": f["description"]} if "description" in f else {}),
                **({"parameters": loads(f["parameters"])} if "parameters" in f else {}),
            }
            for f in functions
        ]
    return None


def _tool_step(span: OtlpSpan) -> Step:
    a = span.attributes
    step: Step = {
        **_base(span, "tool"),
        "tool_name": _first(a, A.GEN_AI_TOOL_NAME, A.OI_TOOL_NAME, A.TL_ENTITY_NAME) or span.name,
        "tool_call_id": _first(a, A.GEN_AI_TOOL_CALL_ID, "tool.id", "tool_call.id"),
        "tool_args": None,
        "tool_result": None,
    }
    if A.GEN_AI_TOOL_CALL_ARGUMENTS in a or A.GEN_AI_TOOL_CALL_RESULT in a:
        step["tool_args"] = loads(a.get(A.GEN_AI_TOOL_CALL_ARGUMENTS))
        step["tool_result"] = loads(a.get(A.GEN_AI_TOOL_CALL_RESULT))
    elif a.get(A.OI_SPAN_KIND) == "TOOL":
        step["tool_args"] = typed(a, A.OI_INPUT_VALUE, A.OI_INPUT_MIME_TYPE, guess=True)
        step["tool_result"] = typed(a, A.OI_OUTPUT_VALUE, A.OI_OUTPUT_MIME_TYPE, guess=True)
    elif a.get(A.TL_SPAN_KIND) == "tool":
        entity_input = loads(a.get(A.TL_ENTITY_INPUT))
        if isinstance(entity_input, dict):
            step["tool_args"] = entity_input.get("kwargs")
        step["tool_result"] = loads(a.get(A.TL_ENTITY_OUTPUT))
    return step


def _link_tools(steps: Iterable[Step]) -> None:
    """Fill in tool call ids, arguments and results that only the model spans carry."""
    calls: list[dict[str, Any]] = []
    results: dict[Any, Any] = {}
    used: set[Any] = set()
    ordered = list(steps)
    for step in ordered:
        if step["kind"] == "model":
            calls.extend(step["tool_calls"] or [])
            for message in step["input_messages"] or []:
                if message.get("role") == "tool" and message.get("tool_call_id") is not None:
                    results[message["tool_call_id"]] = message.get("content")
    by_id = {c.get("id"): c for c in calls if c.get("id") is not None}
    for step in ordered:
        if step["kind"] == "tool" and step["tool_call_id"] is not None:
            used.add(step["tool_call_id"])
    for step in ordered:
        if step["kind"] != "tool":
            continue
        if step["tool_call_id"] is None:
            for call in calls:
                if call.get("name") == step["tool_name"] and call.get("id") not in used:
                    step["tool_call_id"] = call.get("id")
                    used.add(call.get("id"))
                    break
        call_id = step["tool_call_id"]
        if step["tool_args"] is None and call_id in by_id:
            step["tool_args"] = by_id[call_id].get("arguments")
        if step["tool_result"] is None and call_id in results:
            step["tool_result"] = loads(results[call_id])


def extract_steps(spans: Iterable[OtlpSpan]) -> list[Step]:
    """The agent, model and tool steps of some spans, in start order, tools linked to calls."""
    steps: list[Step] = []
    for span in sorted(spans, key=lambda s: (s.start_ns, s.end_ns)):
        kind = classify(span)
        if kind == "agent":
            steps.append(_agent_step(span))
        elif kind == "model":
            steps.append(_model_step(span))
        elif kind == "tool":
            steps.append(_tool_step(span))
    _link_tools(steps)
    return steps

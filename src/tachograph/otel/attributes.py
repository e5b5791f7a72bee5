"""Attribute names and values of the OpenTelemetry GenAI semantic conventions, and our own.

The GenAI conventions are still in "Development" status and the Python constants for them in
``opentelemetry-semantic-conventions`` are deprecated, so the names the bridge emits and the
importer reads are defined here, as plain strings. Older names (``gen_ai.system``, the
OpenInference and OpenLLMetry dialects) are only read, never written.
"""

from __future__ import annotations

from typing import Final

# -- current GenAI conventions (written and read) ------------------------------------------------

GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_OUTPUT_TYPE: Final = "gen_ai.output.type"
"""The content type of the output (``text``, ``json``, ...): on ``invoke_agent``, ``json``
says the run's output, written as a text part, is JSON."""
OUTPUT_TYPE_JSON: Final = "json"
GEN_AI_AGENT_ID: Final = "gen_ai.agent.id"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_REQUEST_SEED: Final = "gen_ai.request.seed"
GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TOP_P: Final = "gen_ai.request.top_p"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
GEN_AI_TOOL_DEFINITIONS: Final = "gen_ai.tool.definitions"
ERROR_TYPE: Final = "error.type"

OP_CHAT: Final = "chat"
OP_EXECUTE_TOOL: Final = "execute_tool"
OP_INVOKE_AGENT: Final = "invoke_agent"
MODEL_OPERATIONS: Final = frozenset({"chat", "text_completion", "generate_content"})

# -- older GenAI conventions (read only) ---------------------------------------------------------

GEN_AI_SYSTEM: Final = "gen_ai.system"
"""Renamed to ``gen_ai.provider.name`` in semantic conventions v1.37."""
GEN_AI_EVENT_CONTENT: Final = "gen_ai.event.content"
GEN_AI_CHOICE_EVENT: Final = "gen_ai.choice"
GEN_AI_USAGE_PROMPT_TOKENS: Final = "gen_ai.usage.prompt_tokens"
GEN_AI_USAGE_COMPLETION_TOKENS: Final = "gen_ai.usage.completion_tokens"

# -- OpenInference (read only) -------------------------------------------------------------------

OI_SPAN_KIND: Final = "openinference.span.kind"
OI_AGENT_NAME: Final = "agent.name"
OI_INPUT_VALUE: Final = "input.value"
OI_OUTPUT_VALUE: Final = "output.value"
OI_INPUT_MIME_TYPE: Final = "input.mime_type"
OI_OUTPUT_MIME_TYPE: Final = "output.mime_type"
OI_MODEL_NAME: Final = "llm.model_name"
OI_PROVIDER: Final = "llm.provider"
OI_SYSTEM: Final = "llm.system"
OI_INVOCATION_PARAMETERS: Final = "llm.invocation_parameters"
OI_INPUT_MESSAGES: Final = "llm.input_messages"
OI_OUTPUT_MESSAGES: Final = "llm.output_messages"
OI_PROMPT_TOKENS: Final = "llm.token_count.prompt"
OI_COMPLETION_TOKENS: Final = "llm.token_count.completion"
OI_TOOL_NAME: Final = "tool.name"

# -- OpenLLMetry / Traceloop (read only) ---------------------------------------------------------

TL_SPAN_KIND: Final = "traceloop.span.kind"
TL_ENTITY_NAME: Final = "traceloop.entity.name"
TL_ENTITY_INPUT: Final = "traceloop.entity.input"
TL_ENTITY_OUTPUT: Final = "traceloop.entity.output"
TL_REQUEST_TYPE: Final = "llm.request.type"
TL_PROMPT: Final = "gen_ai.prompt"
TL_COMPLETION: Final = "gen_ai.completion"

# -- tachograph's own attributes -----------------------------------------------------------------

TACHO_PREFIX: Final = "tachograph."
TACHO_RUN_ID: Final = "tachograph.run_id"
TACHO_SEQ: Final = "tachograph.seq"
TACHO_EVENT_ID: Final = "tachograph.event_id"
TACHO_HASH: Final = "tachograph.hash"
TACHO_TENANT: Final = "tachograph.tenant"
TACHO_ACTOR: Final = "tachograph.actor"
TACHO_IDEMPOTENCY_KEY: Final = "tachograph.idempotency_key"
TACHO_MODEL: Final = "tachograph.model"
TACHO_PAYLOAD: Final = "tachograph.payload"
TACHO_FORK_OF: Final = "tachograph.fork_of"
TACHO_PARENT_SEQ: Final = "tachograph.parent_seq"
TACHO_RESUMED: Final = "tachograph.resumed"
TACHO_RESUMED_AT: Final = "tachograph.resumed_at_seq"
TACHO_REPLAYED: Final = "tachograph.replayed"
TACHO_EFFECT: Final = "tachograph.effect"
TACHO_STATUS: Final = "tachograph.status"
STATUS_UNFINISHED: Final = "unfinished"
"""``tachograph.status`` of a span whose events have no end in the record: the run (no
``run.finished``) or a call (an intent with no completion). Import keeps them open."""
NO_COMPLETION_MESSAGES: Final = frozenset(
    {"no completion was recorded", "the run finished before the call did"}
)
"""The status messages tachograph writes on a call span with no completion (export, live
bridge); read on traces written before ``tachograph.status=unfinished`` marked them."""

LABEL_IMPORTED: Final = "tachograph.imported"
LABEL_DIALECT: Final = "tachograph.dialect"
LABEL_IMPORTED_AT: Final = "tachograph.imported_at"
LABEL_SOURCE: Final = "tachograph.source"
LABEL_CONTENT_CAPTURED: Final = "tachograph.content_captured"
LABEL_ORIGINAL_RUN_ID: Final = "tachograph.original_run_id"
"""On a run imported from tachograph's own spans: the run id they name (``tachograph.run_id``
on the agent span), the run the trace was made from."""
EFFECTS: Final = ("pure", "read", "write", "irreversible")
"""The values of ``tachograph.effect`` (SPEC section 6); import believes no other."""

CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""``true``/``false``, or the util-genai modes ``NO_CONTENT``, ``SPAN_ONLY``, ``EVENT_ONLY``,
``SPAN_AND_EVENT`` (case-insensitive)."""

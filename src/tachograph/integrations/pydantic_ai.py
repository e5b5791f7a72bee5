"""Record and replay pydantic-ai agents (``pip install 'tachograph[pydantic-ai]'``).

One line, where the agent is built::

    from tachograph.integrations.pydantic_ai import Tachograph

    agent = Agent(model, tools=[...], capabilities=[Tachograph(effects={"lookup_order": "read"})])

``Tachograph`` is a pydantic-ai capability (``AbstractCapability``); it uses the hooks the
framework provides for wrapping calls, so no tool and no model is decorated:

* **model calls** (``wrap_model_request``): ``model.request`` holds the messages, tool
  definitions and settings as pydantic-ai sends them to any model (OpenAI, Anthropic, Gemini,
  a ``FunctionModel``), minus what changes on every run (timestamps, pydantic-ai's own run and
  conversation ids, the provider's URL, the
  ``model_id`` stamp); ``model.response`` holds the whole ``ModelResponse``.
  In replay the recorded ``ModelResponse`` is handed back and the model is not called.
* **tools** (``wrap_tool_execute``): ``tool.requested`` with the validated arguments and the
  tool's effect, then ``tool.completed`` with the result as JSON. In replay the recorded
  result is returned and the tool does not run. ``effects`` maps tool names to effects (or is
  a callable); a tool it does not name is ``irreversible``, so its intent is durable before it
  runs. A ``ModelRetry`` the tool raises is recorded as ``tool.failed`` and raised again in
  replay, so the model's retry is replayed too. A tool named in ``delegates`` runs another
  agent (agent delegation): it is not a call of its own but runs in replay too, so that the
  inner agent's model calls and tools are served from the record one by one.
* **decisions**: each agent run starts with ``pydantic_ai.agent.started`` ``{"agent"}``; an
  agent run started inside another one (agent delegation: a tool that runs another agent)
  is a ``handoff`` from the outer agent to the inner one; the outcome of output processing
  (output validators, structured output) is ``output.accepted`` (``by`` the agent, with the
  output) or ``output.rejected`` (with the reason sent back to the model).

A model call or tool the agent cancels (an ``asyncio.wait_for`` around the run that times
out, a cancelled task) is recorded ``model.failed`` / ``tool.failed`` with
``asyncio.CancelledError``, and its replay answers nothing until the agent cancels it again.
A tool's own ``timeout`` is not a cancellation here: pydantic-ai turns it into the
``ModelRetry`` it sends the model, and it is recorded as that.

Outside a tachograph run the capability passes everything through. Limits: a tool's result is
recorded as its JSON form (``pydantic_core.to_jsonable_python``), and replay returns that
form (a pydantic model comes back as a dict, which the model sees as the same JSON);
streamed runs (``run_stream``) are recorded like others but need the response whole, which
pydantic-ai builds only after the stream: record streamed agents through the provider's
client instead (:func:`tachograph.integrations.openai.instrument`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Collection, Mapping
from typing import Any

try:
    import pydantic_core
    from pydantic import TypeAdapter
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import ModelRetry, ToolRetryError
    from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse
    from pydantic_ai.models import ModelRequestParameters
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "tachograph.integrations.pydantic_ai needs pydantic-ai: "
        "pip install 'tachograph[pydantic-ai]'"
    ) from exc

from pydantic import ValidationError

from ..capture.boundary import CallKind, begin_call, ends_call
from ..capture.runtime import accept_output, emit, handoff, reject_output
from ..capture.session import current_session
from ..record.event import Effect

__all__ = ["AGENT_STARTED", "EffectRule", "Tachograph", "model_request"]

AGENT_STARTED = "pydantic_ai.agent.started"
"""The event recorded each time an agent run starts (a dotted type of our own)."""

EffectRule = Mapping[str, "Effect | str"] | Callable[[str], "Effect | str | None"]
"""Tool name -> effect, as a table or a callable (``None``: the default)."""

_VOLATILE = frozenset({"timestamp", "run_id", "conversation_id", "provider_url", "model_id"})
"""Keys whose values change on every run although the conversation is the same (``model_id``
is stamped on a response in the history by the live request path only)."""

_PARAMETERS = TypeAdapter(ModelRequestParameters)

_RUNNING: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tachograph_pydantic_ai_agent", default=None
)
"""The name of the agent whose run is in progress in this context (for delegation)."""


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _json(value: Any) -> Any:
    return pydantic_core.to_jsonable_python(value, fallback=repr)


def model_request(request_context: Any) -> dict[str, Any]:
    """The ``request`` recorded for a pydantic-ai ``ModelRequestContext`` (stable across runs)."""
    messages = ModelMessagesTypeAdapter.dump_python(request_context.messages, mode="json")
    # Defaults left out: a pydantic-ai release that adds a field at its default (2.75 added
    # a tool's "durable" and "deferred_capabilities") asks the same model the same thing,
    # and a run recorded before it must still replay as the same request.
    parameters = _PARAMETERS.dump_python(
        request_context.model_request_parameters, mode="json", exclude_defaults=True
    )
    return {
        "messages": _stable(messages),
        "parameters": _stable(parameters),
        "settings": _json(request_context.model_settings or {}),
    }


def _agent_name(ctx: Any) -> str:
    agent = getattr(ctx, "agent", None)
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) and name else "agent"


class Tachograph(AbstractCapability[Any]):
    """The pydantic-ai capability that records (and replays) an agent's run.

    ``effects`` classifies the tools by name (a table or a callable); ``default_effect`` is
    the effect of a tool it does not name. ``delegates`` names the tools that run another
    agent (they run in replay too, their inner calls are served). ``decisions=False``
    records calls only.
    """

    def __init__(
        self,
        *,
        effects: EffectRule | None = None,
        default_effect: Effect | str = Effect.IRREVERSIBLE,
        delegates: Collection[str] = (),
        decisions: bool = True,
    ) -> None:
        self.effects = effects
        self.delegates = frozenset(delegates)
        self.default_effect = Effect.parse(default_effect)
        self.decisions = decisions
        if isinstance(effects, Mapping):
            for value in effects.values():
                Effect.parse(value)  # fail now, not at the first tool call

    def effect_of(self, name: str) -> Effect:
        """The effect recorded for the tool ``name``."""
        chosen: Effect | str | None = None
        if callable(self.effects):
            chosen = self.effects(name)
        elif self.effects is not None:
            chosen = self.effects.get(name)
        return self.default_effect if chosen is None else Effect.parse(chosen)

    # -- the run: agent starts and delegation ---------------------------------------------

    async def wrap_run(self, ctx: Any, *, handler: Any) -> Any:
        name = _agent_name(ctx)
        if self.decisions and current_session() is not None:
            outer = _RUNNING.get()
            if outer is not None:
                handoff(name, from_=outer, reason="delegation")
            emit(AGENT_STARTED, {"agent": name})
        token = _RUNNING.set(name)
        try:
            return await handler()
        finally:
            _RUNNING.reset(token)

    # -- model calls ----------------------------------------------------------------------

    async def wrap_model_request(self, ctx: Any, *, request_context: Any, handler: Any) -> Any:
        if current_session() is None:
            return await handler(request_context)
        model = request_context.model
        name = str(getattr(model, "model_name", None) or request_context.model_id or "model")
        ticket = begin_call(CallKind.MODEL, name, model_request(request_context), model=name)
        assert ticket is not None
        if ticket.served:
            # a call recorded as cancelled waits until the agent cancels it again
            recorded = await ticket.answer_async()
            return ModelMessagesTypeAdapter.validate_python([recorded])[0]
        try:
            response = await handler(request_context)
        except BaseException as exc:
            if ends_call(exc):  # a cancellation too: the agent's code ended the call
                ticket.fail(exc)
            raise
        if isinstance(response, ModelResponse):
            body = ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]
            ticket.complete(body, model=response.model_name or name)
        else:  # pragma: no cover - pydantic-ai always answers a ModelResponse
            ticket.complete(_json(response), model=name)
        return response

    # -- tools ----------------------------------------------------------------------------

    async def wrap_tool_execute(
        self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        name = str(tool_def.name)
        if current_session() is None or name in self.delegates:
            return await handler(args)
        arguments = _json(args)
        if not isinstance(arguments, dict):
            arguments = {"input": arguments}
        ticket = begin_call(CallKind.TOOL, name, arguments, effect=self.effect_of(name))
        assert ticket is not None
        if ticket.served:
            return await ticket.answer_async()
        if ticket.dry_run:
            simulated = {"dry_run": True, "status": "simulated", "tool": name}
            ticket.complete(simulated)
            return simulated
        try:
            result = await handler(args)
        except ToolRetryError as exc:
            # The tool raised ModelRetry (pydantic-ai wraps it): record it as that, so that
            # replay raises ModelRetry again and pydantic-ai sends the model the same retry.
            content = getattr(exc.tool_retry, "content", None)
            message = content if isinstance(content, str) else str(exc)
            ticket.fail(info={"type": "pydantic_ai.exceptions.ModelRetry", "message": message})
            raise
        except BaseException as exc:
            if ends_call(exc):
                ticket.fail(exc)
            raise
        ticket.complete(_json(result))
        return result

    # -- output processing ----------------------------------------------------------------

    async def wrap_output_process(
        self, ctx: Any, *, output_context: Any, output: Any, handler: Any
    ) -> Any:
        if not self.decisions or current_session() is None or getattr(ctx, "partial_output", False):
            return await handler(output)
        by = _agent_name(ctx)
        try:
            result = await handler(output)
        except (ModelRetry, ValidationError) as exc:
            reject_output(by, output=_json(output), reason=str(exc))
            raise
        accept_output(by, output=_json(result))
        return result

"""Record and replay agents built on the OpenAI Agents SDK (``pip install 'tachograph[agents]'``).

One line, before the run::

    from tachograph.integrations.openai_agents import instrument

    instrument(triage_agent, client=AsyncOpenAI(), effects={"lookup_order": "read"})

What it does, for the agent and every agent it can hand off to:

* **model calls**: ``client`` is recorded at its HTTP transport
  (:func:`tachograph.integrations.openai.instrument`) and made the SDK's default client, so
  every ``model.request`` / ``model.response`` is the Responses (or Chat Completions) call as
  sent and as answered; in replay the SDK parses the recorded bytes.
* **tools**: each ``FunctionTool``'s ``on_invoke_tool`` is wrapped (no decorator on the tool
  functions): ``tool.requested`` with the arguments the model gave and the tool's effect,
  then ``tool.completed``. In replay the recorded result is handed to the SDK and the tool
  does not run. ``effects`` maps tool names to effects (or is a callable); a tool it does not
  name is ``irreversible``, so its intent is durable before it runs. A tool cancelled before
  it answered (the SDK's own ``timeout_seconds``, which then tells the model it timed out; the
  agent's ``asyncio.wait_for``) is ``tool.failed`` with ``asyncio.CancelledError``, and its
  replay answers nothing until it is cancelled again.
* **guardrails**: every input and output guardrail's verdict is a ``guardrail.passed`` or a
  ``guardrail.tripwire`` (``blocked: true``, since the SDK stops the run) event.
* **handoffs** are ``handoff`` events (``from``, ``to``); each time an agent starts,
  ``openai_agents.agent.started`` ``{"agent": name}`` is recorded.

The agent objects are changed in place (tools and guardrails replaced by wrapping copies, a
chaining ``hooks`` set); instrumenting twice changes nothing more. Outside a tachograph run
everything behaves as before. Limits: a tool's non-string result reaches the model as
``str(result)`` (what the SDK does); it is recorded as ``{"value", "text"}`` and replay hands
the SDK the text. Input guardrails run in parallel with the first model call by default
(``run_in_parallel``): when a guardrail itself calls a model, the two calls may interleave
differently from run to run; set ``run_in_parallel=False`` on such guardrails.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

try:
    import agents as _agents
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "tachograph.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'tachograph[agents]'"
    ) from exc

from ..capture.boundary import CallKind, begin_call, ends_call
from ..capture.runtime import emit, guardrail, handoff
from ..capture.session import current_session
from ..errors import ProfileError
from ..record.canonical import canonical
from ..record.event import Effect

__all__ = ["AGENT_STARTED", "EffectRule", "instrument", "is_instrumented"]

A = TypeVar("A")

AGENT_STARTED = "openai_agents.agent.started"
"""The event recorded each time an agent of the graph starts (a dotted type of our own)."""

EffectRule = Mapping[str, "Effect | str"] | Callable[[str], "Effect | str | None"]
"""Tool name -> effect, as a table or a callable (``None``: the default)."""

_MARK = "__tachograph_wrapped__"


def _effect_of(name: str, effects: EffectRule | None, default: Effect) -> Effect:
    chosen: Effect | str | None = None
    if callable(effects):
        chosen = effects(name)
    elif effects is not None:
        chosen = effects.get(name)
    return default if chosen is None else Effect.parse(chosen)


def _jsonable(value: Any) -> Any:
    """``value`` if it is inside the record's JSON profile, else its pydantic dump, else None."""
    dump = getattr(value, "model_dump", None)
    candidate = dump(mode="json") if callable(dump) else value
    try:
        canonical(candidate)
    except (ProfileError, TypeError, ValueError):
        return None
    return candidate


def _arguments(raw: str) -> dict[str, Any]:
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return {"input": raw}
    return parsed if isinstance(parsed, dict) else {"input": parsed}


def _wrap_tool(tool: Any, effect: Effect) -> Any:
    """A copy of the ``FunctionTool`` whose invocation crosses the capture boundary."""
    original = tool.on_invoke_tool
    if getattr(original, _MARK, False):
        return tool
    name = str(tool.name)

    async def on_invoke_tool(ctx: Any, raw: str) -> Any:
        if current_session() is None:
            return await original(ctx, raw)
        ticket = begin_call(CallKind.TOOL, name, _arguments(raw), effect=effect)
        assert ticket is not None
        if ticket.served:
            # a call recorded as cancelled (the SDK's own timeout_seconds, the agent's
            # wait_for) waits until it is cancelled again
            return _served(await ticket.answer_async())
        if ticket.dry_run:
            simulated = {"dry_run": True, "status": "simulated", "tool": name}
            ticket.complete(simulated)
            return json.dumps(simulated, separators=(",", ":"))
        try:
            output = await original(ctx, raw)
        except BaseException as exc:
            if ends_call(exc):  # a cancellation too: the agent's code ended the call
                ticket.fail(exc)
            raise
        if isinstance(output, str):
            ticket.complete(output)
        else:
            # The model sees str(output); keep both what the tool returned and that text.
            ticket.complete({"value": _jsonable(output), "text": str(output)})
        return output

    setattr(on_invoke_tool, _MARK, True)
    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


def _served(recorded: Any) -> Any:
    if isinstance(recorded, dict) and isinstance(recorded.get("text"), str):
        return recorded["text"]
    return recorded


def _wrap_guardrail(item: Any, stage: str) -> Any:
    function = item.guardrail_function
    if getattr(function, _MARK, False):
        return item
    name = item.get_name()

    async def guardrail_function(ctx: Any, agent: Any, data: Any) -> Any:
        verdict = function(ctx, agent, data)
        if hasattr(verdict, "__await__"):
            verdict = await verdict
        info = getattr(verdict, "output_info", None)
        reason = info if isinstance(info, str) else None
        if getattr(verdict, "tripwire_triggered", False):
            guardrail(name, stage=stage, blocked=True, reason=reason)
        else:
            guardrail(name, stage=stage, passed=True, reason=reason)
        return verdict

    setattr(guardrail_function, _MARK, True)
    guardrail_function.__name__ = name
    return dataclasses.replace(item, guardrail_function=guardrail_function, name=name)


class _Hooks(_agents.AgentHooks[Any]):
    """Records agent starts and handoffs, then calls the agent's own hooks (if any)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def on_start(self, context: Any, agent: Any) -> None:
        if current_session() is not None:
            emit(AGENT_STARTED, {"agent": str(agent.name)})
        if self.inner is not None:
            await self.inner.on_start(context, agent)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        if self.inner is not None:
            await self.inner.on_end(context, agent, output)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        if current_session() is not None:
            handoff(str(agent.name), from_=str(source.name))
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, source)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)

    async def on_llm_start(
        self, context: Any, agent: Any, system_prompt: Any, input_items: Any
    ) -> None:
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)


def _agents_of(root: Any) -> list[Any]:
    """The agent and every ``Agent`` reachable through its handoffs, once each."""
    seen: dict[int, Any] = {}
    todo = [root]
    while todo:
        agent = todo.pop()
        if id(agent) in seen:
            continue
        seen[id(agent)] = agent
        for target in agent.handoffs:
            if isinstance(target, _agents.Agent):
                todo.append(target)
    return list(seen.values())


def instrument(
    agent: A,
    *,
    client: Any = None,
    effects: EffectRule | None = None,
    default_effect: Effect | str = Effect.IRREVERSIBLE,
) -> A:
    """Record (and replay) an Agents SDK agent and every agent it hands off to; returns it.

    ``client`` (an ``openai.AsyncOpenAI``) is instrumented and made the SDK's default client
    (``set_default_openai_client(client, use_for_tracing=False)``); pass ``None`` when the
    models' clients are instrumented otherwise. ``effects`` classifies the tools by name;
    ``default_effect`` is the effect of a tool it does not name.
    """
    if not isinstance(agent, _agents.Agent):
        raise TypeError(f"instrument() expects an agents.Agent, got {type(agent).__name__}")
    default = Effect.parse(default_effect)
    if isinstance(effects, Mapping):
        for value in effects.values():
            Effect.parse(value)  # fail now, not at the first tool call
    if client is not None:
        from .openai import instrument as instrument_client

        _agents.set_default_openai_client(instrument_client(client), use_for_tracing=False)
    for each in _agents_of(agent):
        each.tools = [
            _wrap_tool(t, _effect_of(t.name, effects, default))
            if isinstance(t, _agents.FunctionTool)
            else t
            for t in each.tools
        ]
        each.input_guardrails = [_wrap_guardrail(g, "input") for g in each.input_guardrails]
        each.output_guardrails = [_wrap_guardrail(g, "output") for g in each.output_guardrails]
        if not isinstance(each.hooks, _Hooks):
            each.hooks = _Hooks(each.hooks)
    return agent


def is_instrumented(agent: Any) -> bool:
    """Whether ``agent`` records through tachograph."""
    return isinstance(getattr(agent, "hooks", None), _Hooks)

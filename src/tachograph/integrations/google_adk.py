"""Record and replay Google ADK agents (``pip install 'tachograph[google-adk]'``).

One line, where the runner is built::

    from tachograph.integrations.google_adk import TachographPlugin

    plugins = [TachographPlugin(effects={"lookup_order": "read"})]
    runner = InMemoryRunner(app=App(name="shop", root_agent=root, plugins=plugins))

``TachographPlugin`` is an ADK plugin (``BasePlugin``): the runner calls it around every model
call and tool of every agent it runs, so no tool and no agent is changed.

* **model calls** (``before_model_callback`` / ``after_model_callback``): ``model.request``
  holds the ``LlmRequest`` as ADK hands it to the model (model, contents, system instruction,
  tool declarations, config), whatever the model class (Gemini, Claude, LiteLLM);
  ``model.response`` the whole ``LlmResponse``. In replay ``before_model_callback`` returns
  the recorded ``LlmResponse``, which ADK documents as skipping the model call.
* **tools** (``before_tool_callback`` / ``after_tool_callback`` / ``on_tool_error_callback``):
  ``tool.requested`` with the arguments and the tool's effect, then ``tool.completed`` with
  the result ADK passes on (a dict). In replay ``before_tool_callback`` returns the recorded
  result, which skips the tool. ``effects`` maps tool names to effects (or is a callable); a
  tool it does not name is ``irreversible``, so its intent is durable before it runs.
* **decisions**: each agent start is ``google_adk.agent.started`` ``{"agent"}``; a transfer
  (``transfer_to_agent``, or any tool that sets ``actions.transfer_to_agent``) is a ``handoff``
  ``{from, to, reason?}``; an ``AgentTool`` call is a ``handoff`` with reason ``agent_tool``.

A call cancelled before it answered (the agent's ``asyncio.wait_for`` around the runner)
reaches the plugin only through ADK, which hands the ``asyncio.CancelledError`` to
``on_tool_error_callback`` (and, in recent releases, ``on_model_error_callback``) for clean-up:
it is recorded ``tool.failed`` / ``model.failed``, and in replay the before-callback answers
nothing until the agent cancels the call again. (Served at once, the cancellation ended the
turn quietly with no answer: ADK took it for the runner's own.) An ADK that does not hand the
plugin a cancelled model call leaves that call with no completion, as a crash would.

ADK's own control tools (``transfer_to_agent``, ``exit_loop``) and ``AgentTool`` (which runs
another agent) are not calls of their own: they only steer the run, so they run in replay too,
and the inner agent's model calls and tools are served one by one. Outside a tachograph run the
plugin does nothing. Limits: ADK turns any exception a plugin raises into a ``RuntimeError``
("Error in plugin ...") chained to it, so a recorded tool failure is served in replay as that
``RuntimeError`` whose ``__cause__`` is the recorded error (live, ADK's node failure has the
tool's error as its cause too); the ``id`` ADK invents for a function call the model did not
number (``adk-...``) is left out of the recorded request, since it changes on every run;
streamed responses (``StreamingMode.SSE``) are not covered by the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

try:
    from google.adk.models.llm_response import LlmResponse
    from google.adk.plugins.base_plugin import BasePlugin
    from google.adk.tools.agent_tool import AgentTool
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "tachograph.integrations.google_adk needs Google ADK: pip install 'tachograph[google-adk]'"
    ) from exc

from ..capture.boundary import CallKind, CallTicket, begin_call
from ..capture.runtime import emit, handoff
from ..capture.session import current_session
from ..record.event import Effect

__all__ = ["AGENT_STARTED", "CONTROL_TOOLS", "EffectRule", "TachographPlugin", "model_request"]

AGENT_STARTED = "google_adk.agent.started"
"""The event recorded each time an agent starts (a dotted type of our own)."""

CONTROL_TOOLS = frozenset({"transfer_to_agent", "exit_loop"})
"""ADK's tools that only steer the run: never served, so that they steer replay too."""

EffectRule = Mapping[str, "Effect | str"] | Callable[[str], "Effect | str | None"]
"""Tool name -> effect, as a table or a callable (``None``: the default)."""

_DROPPED = frozenset({"live_connect_config", "http_options"})
"""Request fields that are transport settings, not what the model is asked."""


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _stable(v)
            for k, v in value.items()
            if k not in _DROPPED and not (k == "id" and str(v).startswith("adk-"))
        }
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def model_request(llm_request: Any) -> dict[str, Any]:
    """The ``request`` recorded for an ADK ``LlmRequest`` (stable across runs)."""
    dumped = llm_request.model_dump(mode="json", exclude_none=True)
    stable: dict[str, Any] = _stable(dumped)
    return stable


def _model_key(context: Any) -> tuple[str, str, str]:
    branch = getattr(context, "branch", None)
    return (str(context.invocation_id), str(context.agent_name), str(branch or ""))


class TachographPlugin(BasePlugin):  # type: ignore[misc,unused-ignore]  # untyped without ADK
    """The ADK plugin that records (and replays) every agent a runner runs.

    ``effects`` classifies the tools by name (a table or a callable); ``default_effect`` is
    the effect of a tool it does not name; ``decisions=False`` records calls only.
    """

    def __init__(
        self,
        *,
        effects: EffectRule | None = None,
        default_effect: Effect | str = Effect.IRREVERSIBLE,
        decisions: bool = True,
        name: str = "tachograph",
    ) -> None:
        super().__init__(name=name)
        self.effects = effects
        self.default_effect = Effect.parse(default_effect)
        self.decisions = decisions
        if isinstance(effects, Mapping):
            for value in effects.values():
                Effect.parse(value)  # fail now, not at the first tool call
        # A call's ticket lives from its before- to its after-callback: model calls of one
        # agent are sequential (keyed by invocation, agent, branch), tools by call id.
        self._models: dict[tuple[str, str, str], CallTicket] = {}
        self._tools: dict[str, CallTicket] = {}

    def effect_of(self, name: str) -> Effect:
        """The effect recorded for the tool ``name``."""
        chosen: Effect | str | None = None
        if callable(self.effects):
            chosen = self.effects(name)
        elif self.effects is not None:
            chosen = self.effects.get(name)
        return self.default_effect if chosen is None else Effect.parse(chosen)

    # -- agents ---------------------------------------------------------------------------

    async def before_agent_callback(self, *, agent: Any, callback_context: Any) -> Any:
        if self.decisions and current_session() is not None:
            emit(AGENT_STARTED, {"agent": str(agent.name)})
        return None

    # -- model calls ----------------------------------------------------------------------

    async def before_model_callback(self, *, callback_context: Any, llm_request: Any) -> Any:
        if current_session() is None:
            return None
        name = str(llm_request.model or "model")
        ticket = begin_call(CallKind.MODEL, name, model_request(llm_request), model=name)
        assert ticket is not None
        if ticket.served:
            # the agent cancelled it live: no answer until it cancels it again
            await ticket.cancelled_again()
            return LlmResponse.model_validate(ticket.answer())
        self._models[_model_key(callback_context)] = ticket
        return None

    async def after_model_callback(self, *, callback_context: Any, llm_response: Any) -> Any:
        ticket = self._models.pop(_model_key(callback_context), None)
        if ticket is not None:
            body = llm_response.model_dump(mode="json", exclude_none=True)
            ticket.complete(body, model=llm_response.model_version or ticket.model)
        return None

    async def on_model_error_callback(
        self, *, callback_context: Any, llm_request: Any, error: BaseException
    ) -> Any:
        ticket = self._models.pop(_model_key(callback_context), None)
        if ticket is not None:
            ticket.fail(error)
        return None

    # -- tools ----------------------------------------------------------------------------

    async def before_tool_callback(self, *, tool: Any, tool_args: Any, tool_context: Any) -> Any:
        if current_session() is None:
            return None
        name = str(tool.name)
        if isinstance(tool, AgentTool):
            if self.decisions:
                handoff(
                    str(tool.agent.name), from_=str(tool_context.agent_name), reason="agent_tool"
                )
            return None
        if name in CONTROL_TOOLS:
            return None
        arguments = dict(tool_args) if isinstance(tool_args, Mapping) else {"input": tool_args}
        ticket = begin_call(CallKind.TOOL, name, arguments, effect=self.effect_of(name))
        assert ticket is not None
        if ticket.served:
            recorded = await ticket.answer_async()
            # ADK hands a tool's non-dict result to the model as {"result": value}.
            return recorded if isinstance(recorded, dict) else {"result": recorded}
        if ticket.dry_run:
            simulated = {"dry_run": True, "status": "simulated", "tool": name}
            ticket.complete(simulated)
            return simulated
        self._tools[str(tool_context.function_call_id)] = ticket
        return None

    async def after_tool_callback(
        self, *, tool: Any, tool_args: Any, tool_context: Any, result: Any
    ) -> Any:
        ticket = self._tools.pop(str(tool_context.function_call_id), None)
        if ticket is not None:
            ticket.complete(result)
        target = getattr(getattr(tool_context, "actions", None), "transfer_to_agent", None)
        if target and self.decisions and current_session() is not None:
            reason = getattr(tool_context.actions, "transfer_reason", None)
            handoff(str(target), from_=str(tool_context.agent_name), reason=reason or None)
        return None

    async def on_tool_error_callback(
        self, *, tool: Any, tool_args: Any, tool_context: Any, error: BaseException
    ) -> Any:
        ticket = self._tools.pop(str(tool_context.function_call_id), None)
        if ticket is not None:
            ticket.fail(error)
        return None

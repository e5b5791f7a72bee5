"""Record and replay LangChain agents and LangGraph graphs (extra ``tachograph[langchain]``).

One line for an agent made with ``create_agent``::

    from tachograph.integrations.langchain import TachographMiddleware

    agent = create_agent(llm, tools, middleware=[TachographMiddleware(effects={"x": "read"})])

and, for a graph of your own, the same object on its ``ToolNode`` and its chat model::

    recorder = TachographMiddleware(effects={"lookup_order": "read"})
    llm = recorder.instrument_model(ChatOpenAI(model="gpt-5.6"))
    tools = ToolNode([lookup_order, issue_refund], wrap_tool_call=recorder.wrap_tool_call,
                     awrap_tool_call=recorder.awrap_tool_call)

What it records, inside a tachograph run (outside one everything behaves as before):

* **model calls**: the chat model is recorded where every LangChain call of it funnels
  (``_generate_with_cache`` / ``_agenerate_with_cache`` of the model object, which the
  middleware instruments on first use): ``model.request`` is the messages (without their
  ``id``, which LangGraph draws at random), the tools offered in OpenAI's function format and
  the call's other settings; ``model.response`` is the generations as LangChain parsed them,
  with the exact model id the provider names pinned on the event. In replay the recorded
  answer is handed back to LangChain: no provider client is touched (``llm.root_client``
  stays as it is), and ``create_agent``'s own handling of the answer (structured output,
  tool routing) runs as it did.
* **tools**: ``wrap_tool_call`` / ``awrap_tool_call`` record each tool call the model asked
  for (``tool.requested`` with the arguments and the tool's effect, then ``tool.completed``
  with the ``ToolMessage``); in replay the recorded message is served and the tool does not
  run. The idempotency key carries the model's tool-call id. ``effects`` maps tool names to
  effects (or is a callable); a tool it does not name takes the effect of its
  ``@tachograph.tool`` function when it has one (that function then records itself), else
  ``default_effect``, ``write``: never re-run in replay, intent durable before it runs.
* **resuming a graph**: with :class:`~tachograph.integrations.langgraph.TachographSaver` as the
  graph's checkpointer, a model or tool call that LangGraph runs again after resuming from a
  checkpoint (the node an ``interrupt()`` stopped, the node a crash cut short) is answered
  from the log, and ``langgraph.answer.reused`` names where the answer was recorded.

A model call or tool the agent cancels (an ``asyncio.wait_for`` around ``ainvoke`` that
times out, a cancelled task) is recorded ``model.failed`` / ``tool.failed`` with
``asyncio.CancelledError``; its replay answers nothing until the agent cancels it again, and a
synchronous run (``invoke``), which cannot cancel it, is an ``unreplayable`` divergence there.

Limits: ``llm.stream()`` called directly (not through ``invoke`` or a graph) is not recorded;
streamed tokens are not replayed one by one (a served answer arrives whole). A tool that
returns a ``Command`` is recorded, but replay cannot rebuild it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import BaseMessage, ToolMessage, messages_from_dict
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langgraph.errors import GraphInterrupt
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Interrupt
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "tachograph.integrations.langchain needs langchain 1.x and langgraph: "
        "pip install 'tachograph[langchain]'"
    ) from exc

from ..capture.boundary import (
    CallKind,
    CallTicket,
    begin_call,
    ends_call,
    recorded_as_cancelled,
)
from ..capture.runtime import emit
from ..capture.session import current_session
from ..errors import ProfileError
from ..record.canonical import canonical
from ..record.event import Effect
from .langgraph import TachographSaver

__all__ = [
    "ANSWER_REUSED",
    "EffectRule",
    "TachographMiddleware",
    "TachographSaver",
    "instrument_model",
    "is_instrumented",
    "model_identity",
    "tool_identity",
]

M = TypeVar("M")

ANSWER_REUSED = "langgraph.answer.reused"
"""Recorded before a call that a resumed graph made again and the log answered."""

EffectRule = Mapping[str, "Effect | str"] | Callable[[str], "Effect | str | None"]
"""Tool name -> effect, as a table or a callable (``None``: the default)."""

_MARK = "__tachograph_chat_model__"
_CHECKPOINTER_KEY = "__pregel_checkpointer"  # where LangGraph puts the graph's checkpointer


# -- values ------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    """``value`` inside the record's JSON profile: its pydantic dump, else a JSON round trip,
    else a ``{"$repr": type}`` marker (a Python class given as a schema, a client object)."""
    dump = getattr(value, "model_dump", None)
    candidate = dump(mode="json") if callable(dump) and not isinstance(value, type) else value
    try:
        canonical(candidate)
        return candidate
    except (ProfileError, TypeError, ValueError):
        pass
    try:
        candidate = json.loads(json.dumps(candidate, allow_nan=False))
        canonical(candidate)
        return candidate
    except (ProfileError, TypeError, ValueError):
        return {"$repr": type(value).__qualname__}


def _message(message: BaseMessage, *, keep_id: bool) -> dict[str, Any]:
    data = _jsonable(message)
    if not isinstance(data, dict):
        data = {"content": str(message.content)}
    if not keep_id:
        data.pop("id", None)  # add_messages gives id-less messages random ids
    return {"type": message.type, "data": data}


def _from_recorded(recorded: dict[str, Any]) -> BaseMessage:
    return messages_from_dict([recorded])[0]


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()


def _effect_of(name: str, effects: EffectRule | None) -> Effect | None:
    chosen: Effect | str | None = None
    if callable(effects):
        chosen = effects(name)
    elif effects is not None:
        chosen = effects.get(name)
    return None if chosen is None else Effect.parse(chosen)


def _decorated_effect(tool: Any) -> Effect | None:
    """The effect of a ``@tachograph.tool`` function behind a LangChain tool, if any."""
    for fn in (getattr(tool, "func", None), getattr(tool, "coroutine", None)):
        spec = getattr(fn, "__tachograph_tool__", None)
        effect = getattr(spec, "effect", None)
        if isinstance(effect, Effect):
            return effect
    return None


# -- where a resumed graph finds recorded answers -----------------------------------------


def model_identity(request: Any) -> str:
    """What identifies a model call for reuse: the digest of its recorded request."""
    return "model:" + _digest(request)


def tool_identity(name: str, args: Any, key: str | None, run_id: str) -> str | None:
    """What identifies a tool call for reuse: its name and the model's tool-call id, read
    back from a recorded idempotency key ``{run_id}:{name}:{call id}[#n]``."""
    prefix = f"{run_id}:{name}:"
    if key is None or not key.startswith(prefix):
        return None
    return f"tool:{name}:{key[len(prefix) :].split('#', 1)[0]}"


def _graph_config() -> Any:
    try:
        from langgraph.config import get_config

        return get_config()
    except (ImportError, RuntimeError, KeyError):
        return None


def _answers(config: Any) -> tuple[Any, str] | None:
    """``(saver, thread_id)`` when the graph running this call checkpoints into the log."""
    if not isinstance(config, Mapping):
        return None
    configurable = config.get("configurable") or {}
    saver = configurable.get(_CHECKPOINTER_KEY)
    thread = configurable.get("thread_id")
    if saver is None or thread is None or not hasattr(saver, "recall"):
        return None
    return saver, str(thread)


def _reuse(found: tuple[Any, str] | None, identity: str | None) -> Any:
    """The recorded answer a resumed graph may take for ``identity``, or None."""
    if found is None or identity is None:
        return None
    saver, thread = found
    hit = saver.recall(thread, identity)
    if hit is None:
        return None
    answer, source = hit
    emit(ANSWER_REUSED, {"identity": identity, "from": source})
    return answer


def _remember(found: tuple[Any, str] | None, identity: str | None, answer: Any) -> None:
    session = current_session()
    if found is not None and session is not None and identity is not None:
        found[0].remember(found[1], identity, answer, {"run_id": session.run_id})


# -- models --------------------------------------------------------------------------------


def _model_name(model: Any) -> str:
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


# Invocation parameters that are the request's other fields, or LangChain's bookkeeping.
_NOT_SETTINGS = frozenset({"tools", "model", "model_name", "_type", "stop"})


def _settings(model: Any, stop: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """What the call is asked with besides its messages and tools: the model's own settings
    (``temperature``, ``max_tokens``, ``streaming``, ``model_kwargs``...), as LangChain hands
    them to its callbacks as ``invocation_params``, with the call's arguments over them. The
    arguments alone missed every setting held on the model object, so that a changed
    temperature replayed as reproduced."""
    params: dict[str, Any] = dict(kwargs)
    invocation = getattr(model, "_get_invocation_params", None)
    if callable(invocation):
        try:
            params = {**invocation(stop=stop, **kwargs), **kwargs}
        except Exception:  # a model that cannot say: its call's arguments, as before
            params = dict(kwargs)
    settings = {
        k: _jsonable(v)
        for k, v in sorted(params.items())
        if k not in _NOT_SETTINGS and v is not None
    }
    if stop is not None:
        settings["stop"] = _jsonable(stop)
    return settings


def _request(
    model: Any, messages: list[BaseMessage], stop: Any, kwargs: dict[str, Any]
) -> dict[str, Any]:
    settings = _settings(model, stop, kwargs)
    request: dict[str, Any] = {
        "model": _model_name(model),
        "messages": [_message(m, keep_id=False) for m in messages],
    }
    if kwargs.get("tools") is not None:
        request["tools"] = _jsonable(kwargs["tools"])
    if settings:
        request["settings"] = settings
    return request


def _result_of(result: ChatResult) -> dict[str, Any]:
    generations = []
    for generation in result.generations:
        item: dict[str, Any] = {"message": _message(generation.message, keep_id=True)}
        if generation.generation_info:
            item["generation_info"] = _jsonable(generation.generation_info)
        generations.append(item)
    body: dict[str, Any] = {"generations": generations}
    if result.llm_output:
        body["llm_output"] = _jsonable(result.llm_output)
    return body


def _chat_result(recorded: Any) -> ChatResult:
    generations = [
        ChatGeneration(
            message=_from_recorded(item["message"]),
            generation_info=item.get("generation_info"),
        )
        for item in recorded["generations"]
    ]
    return ChatResult(generations=generations, llm_output=recorded.get("llm_output"))


def _answered_model(recorded: dict[str, Any]) -> str | None:
    for item in recorded.get("generations", ()):
        meta = (item.get("message") or {}).get("data", {}).get("response_metadata") or {}
        name = meta.get("model_name") or meta.get("model")
        if isinstance(name, str):
            return name
    return None


def _usage(recorded: dict[str, Any]) -> Any:
    for item in recorded.get("generations", ()):
        usage = (item.get("message") or {}).get("data", {}).get("usage_metadata")
        if usage is not None:
            return usage
    return None


def _model_ticket(
    model: Any, messages: Any, stop: Any, kwargs: dict[str, Any]
) -> tuple[CallTicket | None, tuple[Any, str] | None, str]:
    request = _request(model, list(messages), stop, kwargs)
    identity = model_identity(request)
    found = _answers(_graph_config())
    reused = _reuse(found, identity)
    ticket = begin_call(CallKind.MODEL, request["model"], request, model=request["model"])
    if ticket is not None and reused is not None and not ticket.served:
        _finish_model(ticket, reused)
        ticket.served, ticket.value = True, reused
    return ticket, found, identity


def _finish_model(ticket: CallTicket, body: dict[str, Any]) -> None:
    ticket.complete(body, model=_answered_model(body), usage=_usage(body))


def instrument_model(model: M) -> M:
    """Record (and replay) every call of a LangChain chat model; returns the same object.

    The model is changed in place (its copies made by ``bind_tools`` or ``with_config`` share
    it); instrumenting twice changes nothing more.
    """
    if not isinstance(model, BaseChatModel):
        raise TypeError(
            f"instrument_model() expects a LangChain chat model (BaseChatModel), got "
            f"{type(model).__name__}"
        )
    if getattr(model, _MARK, False):
        return model
    generate = model._generate_with_cache
    agenerate = model._agenerate_with_cache

    def recorded(messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        if current_session() is None:
            return generate(messages, stop, run_manager, **kwargs)
        ticket, found, identity = _model_ticket(model, messages, stop, kwargs)
        if ticket is None:
            return generate(messages, stop, run_manager, **kwargs)
        ticket.not_cancellable()  # one recorded cancelled by an async run: the agent changed
        if not ticket.served:
            try:
                result = generate(messages, stop, run_manager, **kwargs)
            except Exception as exc:
                ticket.fail(exc)
                raise
            body = _result_of(result)
            _finish_model(ticket, body)
            ticket.value = body
        _remember(found, identity, ticket.answer())
        return _chat_result(ticket.answer())

    async def arecorded(
        messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        if current_session() is None:
            return await agenerate(messages, stop, run_manager, **kwargs)
        ticket, found, identity = _model_ticket(model, messages, stop, kwargs)
        if ticket is None:
            return await agenerate(messages, stop, run_manager, **kwargs)
        # the agent cancelled it live: no answer until it cancels it again
        await ticket.cancelled_again()
        if not ticket.served:
            try:
                result = await agenerate(messages, stop, run_manager, **kwargs)
            except BaseException as exc:
                if ends_call(exc):  # a cancellation too: the agent's code ended the call
                    ticket.fail(exc)
                raise
            body = _result_of(result)
            _finish_model(ticket, body)
            ticket.value = body
        _remember(found, identity, ticket.answer())
        return _chat_result(ticket.answer())

    # A pydantic model refuses unknown attributes through setattr; these shadow the methods
    # on this one instance only.
    object.__setattr__(model, "_generate_with_cache", recorded)
    object.__setattr__(model, "_agenerate_with_cache", arecorded)
    object.__setattr__(model, _MARK, True)
    return model


def is_instrumented(model: Any) -> bool:
    """Whether the chat model records through tachograph."""
    return bool(getattr(model, _MARK, False))


# -- tools ---------------------------------------------------------------------------------


def _tool_message(recorded: Any, call: Mapping[str, Any]) -> Any:
    if isinstance(recorded, dict) and isinstance(recorded.get("type"), str):
        return _from_recorded(recorded)
    return ToolMessage(content=str(recorded), name=call.get("name"), tool_call_id=call.get("id"))


def _tool_result(output: Any) -> Any:
    if isinstance(output, BaseMessage):
        return _message(output, keep_id=False)
    return {"type": "command", "data": {"value": _jsonable(output)}}


class TachographMiddleware(AgentMiddleware[Any, Any]):
    """Records a LangChain agent's model and tool calls; serves them in replay.

    Pass it in ``create_agent(..., middleware=[...])``; for a graph of your own, give its
    :meth:`wrap_tool_call` and :meth:`awrap_tool_call` to ``ToolNode`` and its chat model to
    :meth:`instrument_model`.
    """

    def __init__(
        self,
        *,
        effects: EffectRule | None = None,
        default_effect: Effect | str = Effect.WRITE,
    ) -> None:
        super().__init__()
        if isinstance(effects, Mapping):
            for value in effects.values():
                Effect.parse(value)  # fail now, not at the first tool call
        self.effects = effects
        self.default_effect = Effect.parse(default_effect)

    @property
    def name(self) -> str:
        return "tachograph"

    instrument_model = staticmethod(instrument_model)

    # -- models ------------------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> Any:
        instrument_model(request.model)
        return handler(request)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Any:
        instrument_model(request.model)
        return await handler(request)

    # -- tools -------------------------------------------------------------------------

    def _begin(self, request: ToolCallRequest) -> tuple[CallTicket | None, Any]:
        """The tool call's ticket (None: run it as it is), or a served ToolMessage."""
        if current_session() is None or _decorated_effect(request.tool) is not None:
            return None, None  # no run, or the @tachograph.tool function records itself
        call = request.tool_call
        name = str(call.get("name"))
        args = call.get("args") or {}
        call_id = call.get("id")
        effect = _effect_of(name, self.effects) or self.default_effect
        found = _answers(getattr(request.runtime, "config", None))
        identity = f"tool:{name}:{call_id}" if call_id else None
        reused = _reuse(found, identity)
        key = (lambda _args: str(call_id)) if call_id else None
        ticket = begin_call(CallKind.TOOL, name, dict(args), effect=effect, key=key)
        if ticket is None:
            return None, None
        if not ticket.served and reused is not None:
            ticket.complete(reused)
            ticket.served, ticket.value = True, reused
        if ticket.served:
            if recorded_as_cancelled(ticket.error):
                return ticket, _CANCELLED  # the caller waits (async) or reports it (sync)
            _raise_interrupt(ticket)
            message = _tool_message(ticket.answer(), call)
            _remember(found, identity, ticket.value)
            return ticket, message
        return ticket, (found, identity)

    def _done(self, ticket: CallTicket, state: Any, output: Any) -> Any:
        body = _tool_result(output)
        if ticket.dry_run:
            body["data"]["dry_run"] = True
        ticket.complete(body)
        found, identity = state
        _remember(found, identity, body)
        return output

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]
    ) -> Any:
        ticket, state = self._begin(request)
        if ticket is None:
            return handler(request)
        if state is _CANCELLED:  # recorded by awrap_tool_call: the agent changed
            ticket.not_cancelled("a synchronous call cannot be cancelled")
        if ticket.served:
            return state
        if ticket.dry_run:
            return self._done(ticket, state, _simulated(request))
        try:
            output = handler(request)
        except Exception as exc:
            _fail(ticket, exc)
            raise
        return self._done(ticket, state, output)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> Any:
        ticket, state = self._begin(request)
        if ticket is None:
            return await handler(request)
        if state is _CANCELLED:
            # the agent cancelled it live: no answer until it cancels it again
            await ticket.until_cancelled("it was cancelled before it answered")
        if ticket.served:
            return state
        if ticket.dry_run:
            return self._done(ticket, state, _simulated(request))
        try:
            output = await handler(request)
        except BaseException as exc:
            if ends_call(exc):  # a cancellation too: the agent's code ended the call
                _fail(ticket, exc)
            raise
        return self._done(ticket, state, output)


_INTERRUPT = "langgraph.errors.GraphInterrupt"

_CANCELLED = object()
"""What :meth:`TachographMiddleware._begin` hands back for a served call recorded as
cancelled, in place of its message."""


def _fail(ticket: CallTicket, exc: BaseException) -> None:
    """Record a failed tool call; an ``interrupt()`` keeps what it asked, so that replay
    stops the graph at the same question."""
    if not isinstance(exc, GraphInterrupt):
        ticket.fail(exc)
        return
    pending = exc.args[0] if exc.args else ()
    asked = [{"value": _jsonable(i.value), "id": i.id} for i in pending]
    ticket.fail(exc, info={"type": _INTERRUPT, "message": json.dumps(asked, sort_keys=True)})


def _raise_interrupt(ticket: CallTicket) -> None:
    completion = ticket.completion
    error = (completion.payload or {}).get("error") if completion is not None else None
    if isinstance(error, dict) and error.get("type") == _INTERRUPT:
        asked = json.loads(str(error.get("message") or "[]"))
        raise GraphInterrupt(tuple(Interrupt(value=i["value"], id=i["id"]) for i in asked))


def _simulated(request: ToolCallRequest) -> ToolMessage:
    call = request.tool_call
    text = json.dumps({"dry_run": True, "status": "simulated", "tool": call.get("name")})
    return ToolMessage(content=text, name=call.get("name"), tool_call_id=call.get("id"))

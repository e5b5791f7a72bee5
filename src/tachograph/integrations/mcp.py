"""Record and replay MCP client sessions (``pip install 'tachograph[mcp]'``).

One line, on the client the agent already builds::

    from mcp import Client
    from tachograph.integrations.mcp import instrument

    client = instrument(Client(StdioServerParameters(command="shop-server")))

(or ``Client("http://127.0.0.1:8000/mcp")``, or an in-process ``MCPServer``). For a
hand-built ``ClientSession``, hand it a recording dispatcher over the transport instead of
the transport's streams::

    async with ClientSession(dispatcher=dispatcher(stdio_client(params))) as session: ...

Why at the dispatcher: every request a ``ClientSession`` sends, the handshake included, goes
through one call, ``Dispatcher.send_raw_request(method, params)``, which returns the raw
result dict that the session then validates into its own types. Recording there keeps the
SDK's parsing, validation and result types exact on replay, and, because the dispatcher is
what the transport is opened for, a replay can skip the transport altogether: **in replay the
stdio server process is not spawned and no HTTP connection is made.** Patching
``call_tool``/``list_tools`` on a session would be too late for that (the session exists only
once the transport is open).

Inside a run:

* ``tools/call`` is a tool call: ``tool.requested`` ``{"tool", "args", "effect", "meta"?,
  "server"?}`` (made durable before the request leaves when the effect is ``write`` or
  ``irreversible``), then ``tool.completed`` with the raw ``CallToolResult`` (a failing tool
  is ``{"isError": true, ...}``, as MCP answers it), or ``tool.failed`` when the server
  answered with a JSON-RPC error (replay raises the same ``MCPError``) or when the agent
  cancelled the call (``asyncio.CancelledError``: an ``asyncio.wait_for`` that timed out;
  replay answers nothing until the agent cancels it again);
* every other request (``server/discover``, ``initialize``, ``tools/list``,
  ``resources/read``, ``prompts/get``, ...) is an ``external.read`` ``{"source": "mcp",
  "key": <method>, "request"?: <params>, "meta"?}`` whose ``value`` is the raw result (or
  ``{"jsonrpc_error": {"code", "message", "data"?}}`` when the server refused it);
* notifications the client sends are passed on live and not recorded.

``meta`` holds the request's ``_meta`` (protocol stamps, a ``traceparent`` a caller passed):
recorded, never compared, and never part of the idempotency key.

Effects come from the tool annotations the server listed (hints, so untrusted) unless the
``effects`` table (or callable) names the tool: ``readOnlyHint`` -> ``read``;
``destructiveHint`` (true by default in MCP) and not ``idempotentHint``, or a tool whose
annotations were never listed -> ``irreversible``; otherwise ``write``. ``readOnlyHint`` maps to
``read`` rather than ``pure`` on purpose: a pure tool may be re-run in replay, which would
need the server.

Limits: server-to-client requests during a call (sampling, elicitation) are not recorded and
do not happen in replay; ``subscriptions/listen`` streams are not supported inside a run.
In a fork or resume the server is started (the calls after the fork point need it) and the
served calls never reach it; so it is in a replay with ``rerun_pure=True``, which calls the
``pure`` tools again to compare their answers (allow the server with ``allow_network``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias, TypeVar

try:
    import anyio
    from mcp import Client, ClientSession
    from mcp.shared.exceptions import MCPError
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "tachograph.integrations.mcp needs the MCP Python SDK 2.x: pip install 'tachograph[mcp]'"
    ) from exc

from ..capture.boundary import (
    CallKind,
    CallTicket,
    begin_call,
    ends_call,
)
from ..capture.session import Session, current_session
from ..record.event import Effect, EventType
from .mcp_server import RecordingMiddleware, effect_from_annotations

__all__ = [
    "ERROR_FIELD",
    "SOURCE",
    "EffectRule",
    "RecordingDispatcher",
    "RecordingMiddleware",
    "dispatcher",
    "effect_from_annotations",
    "instrument",
    "is_instrumented",
]

T = TypeVar("T")

SOURCE = "mcp"
"""The ``source`` of the ``external.read`` events of MCP requests other than tool calls."""

EffectRule: TypeAlias = (
    Mapping[str, "Effect | str"] | Callable[[str, "dict[str, Any] | None"], "Effect | str | None"]
)
"""Tool name -> effect, as a table or a callable ``(name, annotations) -> effect | None``
(``None``: derive it from the annotations)."""

ERROR_FIELD = "jsonrpc_error"
"""An ``external.read`` whose value is ``{"jsonrpc_error": {"code", "message", "data"?}}``
records a request the server refused (replay raises the same ``MCPError``)."""

_HANDSHAKE = frozenset({"initialize", "server/discover"})


def _check_rule(effects: EffectRule | None) -> None:
    if isinstance(effects, Mapping):
        for value in effects.values():
            Effect.parse(value)  # fail now, not at the first tool call


def _split(params: Mapping[str, Any] | None) -> tuple[dict[str, Any], Any]:
    """``(params without _meta, _meta or None)``."""
    body = dict(params or {})
    meta = body.pop("_meta", None)
    return body, meta


def _replaying(session: Session | None) -> bool:
    """Whether the record answers everything: a replay, which has nothing to record into
    (a fork or resume has, and goes live later, so it needs the server), and which does not
    re-run ``pure`` tools to compare their answers (``rerun_pure=True`` needs the server)."""
    if session is None or session.recorder is not None or not session.serving():
        return False
    return not getattr(session.engine, "rerun_pure", False)


class RecordingDispatcher:
    """A ``Dispatcher`` that records each request of a session and serves it in replay.

    ``inner`` is the live dispatcher (``None`` in replay: nothing is connected). Outside a
    run every call goes straight to ``inner``.
    """

    def __init__(
        self,
        inner: Any,
        *,
        effects: EffectRule | None = None,
        server: str | None = None,
    ) -> None:
        _check_rule(effects)
        self.inner = inner
        self.effects = effects
        self.server = server
        self.annotations: dict[str, dict[str, Any] | None] = {}
        """The annotations of each tool, from the listings this session received."""

    # -- the Dispatcher protocol -----------------------------------------------------------

    async def run(
        self,
        on_request: Any,
        on_notify: Any,
        on_notify_intercept: Any = None,
        *,
        task_status: Any = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        if self.inner is None:
            # Replay: no peer. Stay up until the session cancels us, as a quiet peer would.
            task_status.started()
            await anyio.sleep_forever()
        await self.inner.run(on_request, on_notify, on_notify_intercept, task_status=task_status)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: Any = None) -> None:
        if self.inner is not None:
            await self.inner.notify(method, params, opts)

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: Any = None
    ) -> dict[str, Any]:
        session = current_session()
        if session is None:
            return await self._live(method, params, opts)
        if method == "tools/call":
            return await self._tool(method, params, opts)
        return await self._read(session, method, params, opts)

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()

    def __getattr__(self, name: str) -> Any:
        # Anything else a session asks of its dispatcher (hooks, flags) is the live one's.
        if name == "inner":
            raise AttributeError(name)
        if self.inner is None:
            raise AttributeError(name)
        return getattr(self.inner, name)

    # -- requests --------------------------------------------------------------------------

    async def _live(
        self, method: str, params: Mapping[str, Any] | None, opts: Any
    ) -> dict[str, Any]:
        if self.inner is None:
            raise MCPError(
                code=-32000,
                message=f"{method}: the MCP server is not connected (the session was opened "
                "in a replay, which serves every request from the record)",
            )
        result: dict[str, Any] = await self.inner.send_raw_request(method, params, opts)
        return result

    async def _read(
        self, session: Session, method: str, params: Mapping[str, Any] | None, opts: Any
    ) -> dict[str, Any]:
        body, meta = _split(params)
        payload: dict[str, Any] = {"source": SOURCE, "key": method}
        if self.server is not None:
            payload["server"] = self.server
        if body:
            payload["request"] = body
        if meta is not None:
            payload["meta"] = meta
        served, value = session.serve_value(EventType.EXTERNAL_READ.value, payload)
        if served:
            if method in _HANDSHAKE and self.inner is not None:
                # A fork talks to a live server after its recorded part: it must have been
                # greeted, whatever the record answers.
                await self.inner.send_raw_request(method, params, opts)
            result = value if isinstance(value, dict) else {}
            error = result.get(ERROR_FIELD) if len(result) == 1 else None
            if isinstance(error, dict) and isinstance(error.get("code"), int):
                raise MCPError(
                    code=error["code"],
                    message=str(error.get("message", "")),
                    data=error.get("data"),
                )
        else:
            try:
                result = await self._live(method, params, opts)
            except MCPError as exc:
                # The server's refusal is what the world supplied: replay raises it again.
                info = _error_info(exc)
                info.pop("type")
                session.record_value(EventType.EXTERNAL_READ.value, payload, {ERROR_FIELD: info})
                raise
            session.record_value(EventType.EXTERNAL_READ.value, payload, result)
        if method == "tools/list":
            self._absorb(result)
        return result

    def _absorb(self, listing: Mapping[str, Any]) -> None:
        for tool in listing.get("tools") or ():
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                annotations = tool.get("annotations")
                self.annotations[tool["name"]] = (
                    annotations if isinstance(annotations, dict) else None
                )

    def effect_of(self, name: str) -> Effect:
        """The effect recorded for tool ``name``: the user's rule, else the annotations."""
        annotations = self.annotations.get(name)
        chosen: Effect | str | None = None
        if callable(self.effects):
            chosen = self.effects(name, annotations)
        elif self.effects is not None:
            chosen = self.effects.get(name)
        if chosen is not None:
            return Effect.parse(chosen)
        return effect_from_annotations(annotations)

    async def _tool(
        self, method: str, params: Mapping[str, Any] | None, opts: Any
    ) -> dict[str, Any]:
        body, meta = _split(params)
        name = str(body.get("name", ""))
        arguments = body.get("arguments")
        args = dict(arguments) if isinstance(arguments, dict) else {}
        extra: dict[str, Any] = {}
        rest = {k: v for k, v in body.items() if k not in ("name", "arguments")}
        if rest:
            extra["request"] = rest  # input responses, request state: compared
        if self.server is not None:
            extra["server"] = self.server
        if meta is not None:
            extra["meta"] = meta
        ticket = begin_call(
            CallKind.TOOL, name, args, effect=self.effect_of(name), extra=extra or None
        )
        assert ticket is not None  # only called inside a run
        if ticket.served:
            # the agent cancelled it live: no answer until it cancels it again
            await ticket.cancelled_again()
            return _served(ticket)
        if ticket.dry_run:
            simulated = {"dry_run": True, "status": "simulated", "tool": name}
            return dict(
                ticket.complete(
                    {
                        "content": [{"type": "text", "text": json.dumps(simulated)}],
                        "structuredContent": simulated,
                        "isError": False,
                    }
                )
            )
        try:
            result = await self._live(method, params, opts)
        except MCPError as exc:
            ticket.fail(exc, info=_error_info(exc))
            raise
        except BaseException as exc:
            if ends_call(exc):  # a cancellation too: the agent's code ended the call
                ticket.fail(exc)
            raise
        return dict(ticket.complete(result))


def _error_info(exc: MCPError) -> dict[str, Any]:
    info: dict[str, Any] = {"type": "mcp.shared.exceptions.MCPError", "message": exc.error.message}
    info["code"] = exc.error.code
    if exc.error.data is not None:
        info["data"] = exc.error.data
    return info


def _served(ticket: CallTicket) -> dict[str, Any]:
    if ticket.error is not None:
        completion = ticket.completion
        error = (completion.payload or {}).get("error") if completion is not None else None
        if isinstance(error, dict) and isinstance(error.get("code"), int):
            raise MCPError(
                code=error["code"], message=str(error.get("message", "")), data=error.get("data")
            )
        raise ticket.error
    value = ticket.value
    return dict(value) if isinstance(value, dict) else {"content": [], "isError": False}


class _TransportDispatcher(RecordingDispatcher):
    """A recording dispatcher that opens its transport only when it runs live."""

    def __init__(self, transport: Any, **options: Any) -> None:
        super().__init__(None, **options)
        self.transport = transport

    async def run(
        self,
        on_request: Any,
        on_notify: Any,
        on_notify_intercept: Any = None,
        *,
        task_status: Any = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        if _replaying(current_session()):
            await super().run(on_request, on_notify, on_notify_intercept, task_status=task_status)
            return
        async with self.transport as (read_stream, write_stream):
            self.inner = JSONRPCDispatcher(read_stream, write_stream)
            await self.inner.run(
                on_request, on_notify, on_notify_intercept, task_status=task_status
            )


def dispatcher(
    transport: Any, *, effects: EffectRule | None = None, server: str | None = None
) -> RecordingDispatcher:
    """A recording ``Dispatcher`` over an MCP client transport, for ``ClientSession(dispatcher=)``.

    ``transport`` is what ``stdio_client(params)`` or ``streamable_http_client(url)`` return;
    it is opened when the session starts, except in replay, where it is never opened.
    """
    return _TransportDispatcher(transport, effects=effects, server=server)


_MARK = "__tachograph_mcp__"


def instrument(target: T, *, effects: EffectRule | None = None, server: str | None = None) -> T:
    """Record (and replay) an ``mcp.Client`` (not yet entered) or a ``ClientSession``.

    The object is changed in place and returned. For a ``Client`` the connection is made
    through a :class:`RecordingDispatcher`, and not at all in replay. A ``ClientSession``
    built on streams already has its transport open, so in replay its server still starts
    (and the network guard reports it): build it with :func:`dispatcher` instead to keep
    the server off. ``effects`` overrides the effect of tools by name; ``server`` names the
    server in the record (to tell apart two servers with tools of the same name).
    """
    _check_rule(effects)
    if isinstance(target, Client):
        client: Any = target
        if getattr(client, _MARK, False):
            return target
        connect = client._connect

        async def recording_connect(exit_stack: Any, mode: Any, raise_exceptions: bool) -> Any:
            if _replaying(current_session()):
                return RecordingDispatcher(None, effects=effects, server=server)
            inner = await connect(exit_stack, mode, raise_exceptions)
            return RecordingDispatcher(inner, effects=effects, server=server)

        client._connect = recording_connect
        object.__setattr__(client, _MARK, True)
        return target
    if isinstance(target, ClientSession):
        session: Any = target
        if not isinstance(session._dispatcher, RecordingDispatcher):
            session._dispatcher = RecordingDispatcher(
                session._dispatcher, effects=effects, server=server
            )
        return target
    raise TypeError(
        f"instrument() expects an mcp.Client or an mcp.ClientSession, got {type(target).__name__}"
    )


def is_instrumented(target: Any) -> bool:
    """Whether an ``mcp.Client`` or ``ClientSession`` records through tachograph."""
    if isinstance(target, Client):
        return bool(getattr(target, _MARK, False))
    return isinstance(getattr(target, "_dispatcher", None), RecordingDispatcher)

"""Record the tool calls an MCP server handles (for those who own the server).

::

    from mcp.server.mcpserver import MCPServer
    from tachograph.integrations.mcp import RecordingMiddleware

    server = MCPServer("shop")
    server.middleware.append(RecordingMiddleware("runs.db", server=server))

``RecordingMiddleware`` is an MCP 2.x ``ServerMiddleware`` (``(ctx, call_next)``). Each
``tools/call`` the server handles becomes a ``tool.requested`` / ``tool.completed`` pair (or
``tool.failed`` when the handler raised, or was cancelled: ``asyncio.CancelledError`` when the
client cancelled the request) in a tachograph run:

* ``per="request"`` (the default): one run per tool call, ``run.started`` ``{"input":
  {"tool", "arguments"}}`` ... ``run.finished`` with the result as output. Each run is
  complete on its own, whatever the transport.
* ``per="session"``: one run per client session (the streamable HTTP ``mcp-session-id``, or
  the connection for stdio and handshake-era clients), started at the session's first tool
  call. A client of the stateless 2026 protocol has no session: each request is its own.
  A session has no end the middleware can see, so its run is finished by
  :meth:`RecordingMiddleware.close` (call it when the server stops, in its lifespan for
  instance); until then it reads as still running.

While the handler runs, its run is the current tachograph run: tools decorated with
``@tachograph.tool`` and instrumented clients inside the handler record into it too.
The effect of a tool is the ``effects`` table's, else what the server's own annotations say
(``server=``, anything with an async ``list_tools()`` such as ``MCPServer``), else
``irreversible``. Other requests (listings, reads, the handshake) are not recorded.
"""

from __future__ import annotations

import contextvars
import enum
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..capture.agent import record
from ..capture.boundary import CURRENT_SESSION, CallKind, begin_call, ends_call
from ..errors import RecordingError
from ..record.event import Effect
from ..store import Store, open_store

__all__ = ["RecordingMiddleware", "RunPer", "effect_from_annotations"]


class RunPer(str, enum.Enum):
    """What one run of the server middleware covers."""

    REQUEST = "request"
    SESSION = "session"

    @classmethod
    def parse(cls, value: str | RunPer) -> RunPer:
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(repr(m.value) for m in cls)
            raise RecordingError(f"unknown per={value!r}; expected one of {valid}") from None


def effect_from_annotations(annotations: Mapping[str, Any] | None) -> Effect:
    """The effect MCP tool annotations suggest (MCP defaults for the hints left out)."""
    if annotations is None:
        return Effect.IRREVERSIBLE
    if annotations.get("readOnlyHint") is True:
        return Effect.READ
    destructive = annotations.get("destructiveHint", True) is not False
    idempotent = annotations.get("idempotentHint", False) is True
    if destructive and not idempotent:
        return Effect.IRREVERSIBLE
    return Effect.WRITE


def _dump(result: Any) -> Any:
    dump = getattr(result, "model_dump", None)
    if callable(dump):
        return dump(by_alias=True, mode="json", exclude_none=True)
    return result


def _annotations_of(tool: Any) -> dict[str, Any] | None:
    value = getattr(tool, "annotations", None)
    if value is None:
        return None
    dumped = _dump(value)
    return dumped if isinstance(dumped, dict) else None


class RecordingMiddleware:
    """An MCP ``ServerMiddleware`` recording each tool call as a tool event of a run."""

    def __init__(
        self,
        store: Store | str,
        *,
        per: RunPer | str = RunPer.REQUEST,
        actor: str = "mcp-server",
        effects: Mapping[str, Effect | str] | None = None,
        server: Any = None,
    ) -> None:
        self.store = store if isinstance(store, Store) else open_store(store)
        self.per = RunPer.parse(per)
        self.actor = actor
        self.effects = {k: Effect.parse(v) for k, v in (effects or {}).items()}
        self.server = server
        self._annotations: dict[str, dict[str, Any] | None] | None = None
        self._sessions: dict[Any, tuple[record, contextvars.Context]] = {}
        self.run_ids: list[str] = []
        """The runs this middleware started, in order."""

    async def _effect(self, name: str) -> Effect:
        if name in self.effects:
            return self.effects[name]
        if self._annotations is None and self.server is not None:
            listed = await self.server.list_tools()
            self._annotations = {str(t.name): _annotations_of(t) for t in listed}
        annotations = (self._annotations or {}).get(name)
        return effect_from_annotations(annotations)

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if ctx.method != "tools/call" or ctx.request_id is None:
            return await call_next(ctx)
        params = dict(ctx.params or {})
        name = str(params.get("name", ""))
        arguments = params.get("arguments")
        args = dict(arguments) if isinstance(arguments, dict) else {}
        effect = await self._effect(name)
        if self.per is RunPer.SESSION:
            return await self._in_session(ctx, call_next, name, args, effect)
        async with record(
            self.store, actor=self.actor, input={"tool": name, "arguments": args}, tools=()
        ) as run:
            self.run_ids.append(run.run_id)
            result = await self._call(ctx, call_next, name, args, effect)
            run.output = _dump(result)
        return result

    async def _call(
        self,
        ctx: Any,
        call_next: Callable[[Any], Awaitable[Any]],
        name: str,
        args: Any,
        effect: Effect,
    ) -> Any:
        ticket = begin_call(CallKind.TOOL, name, args, effect=effect)
        assert ticket is not None  # called inside a run
        try:
            result = await call_next(ctx)
        except BaseException as exc:
            # a cancellation too: the client cancelled the request (notifications/cancelled)
            if ends_call(exc):
                ticket.fail(exc)
            raise
        ticket.complete(_dump(result))
        return result

    def _session_key(self, ctx: Any) -> Any:
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        if headers is not None:
            sid = headers.get("mcp-session-id")
            if sid:
                return ("http", sid)
        # A ServerSession is made per request; the connection under it lives as long as
        # the client's session (a stdio process, a handshake-era connection).
        connection = getattr(ctx.session, "_connection", ctx.session)
        return ("connection", id(connection))

    async def _in_session(
        self,
        ctx: Any,
        call_next: Callable[[Any], Awaitable[Any]],
        name: str,
        args: Any,
        effect: Effect,
    ) -> Any:
        key = self._session_key(ctx)
        entry = self._sessions.get(key)
        if entry is None:
            recording = record(self.store, actor=self.actor, input={"session": str(key[1])})
            # The run outlives this request: bind it in a context of its own, entered by
            # each request of the session for the length of its handler.
            context = contextvars.copy_context()
            run = context.run(recording.start)
            self.run_ids.append(run.run_id)
            entry = (recording, context)
            self._sessions[key] = entry
        session = entry[1].run(CURRENT_SESSION.get)
        token = CURRENT_SESSION.set(session)
        try:
            return await self._call(ctx, call_next, name, args, effect)
        finally:
            CURRENT_SESSION.reset(token)

    def close(self) -> None:
        """Finish the runs of the sessions still open (``per="session"``)."""
        sessions, self._sessions = self._sessions, {}
        for recording, context in sessions.values():
            context.run(recording.__exit__, None, None, None)

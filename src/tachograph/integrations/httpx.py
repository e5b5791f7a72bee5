"""Record and replay the HTTP calls of an ``httpx`` or ``httpx2`` client (one line).

::

    import httpx
    from tachograph.integrations.httpx import instrument

    http = instrument(httpx.Client())

Inside a run, every request the client sends is one step of the record:

* a **read** (``GET``, ``HEAD`` and ``OPTIONS`` by default) is an ``external.read``:
  ``{"source": "http", "key": "GET https://...", "value": <the answer>}``, or ``"value":
  {"error": {"type", "message"}}`` when no answer came (raised again in replay);
* anything else (``POST``, ``PUT``, ``PATCH``, ``DELETE``) is a tool call:
  ``tool.requested`` ``{"tool": "http.post", "args": {"method", "url", "body"?, "headers"?},
  "effect": "write"}``, made durable before the request leaves, then ``tool.completed`` with
  the answer, or ``tool.failed`` when no answer came (connection refused, timeout, an async
  request the agent cancelled: ``asyncio.CancelledError``, whose replay answers nothing until
  the agent cancels it again; a sync client, which cannot, is told ``unreplayable``).

A request body that is not JSON is recorded as ``text`` (``body_sha256`` when it is not
UTF-8); a multipart body with its boundary, drawn at random for every request, replaced by a
fixed one, so that the same upload is the same request in a replay.

An answer is ``{"status", "headers", "body"}``: ``body`` is the parsed JSON of an answer whose
content type says JSON; any other body is ``text`` (``base64`` when it is not UTF-8), kept as
sent (a ``text/plain`` "3.10" is not the number 3.1). Live, the client gets the body exactly
as sent; in replay a JSON body is re-encoded (key order and number spelling may differ, never
its meaning). In replay the inner transport is never called: the recorded answer is handed back
as the client's own ``Response``, and a request that differs from the recorded one (another
URL, another body) is a divergence at its seq. ``rules`` classifies requests: a callable
``(method, url) -> effect | "external" | None`` or a table ``{(method, url_glob): effect or
"external"}`` (``"*"`` matches any method; the first matching row wins; unmatched requests
fall back to the defaults).

Only the request headers named in ``request_headers`` are recorded (none by default):
credentials, cookies and tracing headers never reach the record. Response framing headers,
``set-cookie`` and ``date`` are dropped (the client gets the headers as recorded, live too).
The body is read whole, so a streamed download is recorded (and served) in one piece.
"""

from __future__ import annotations

import base64
import fnmatch
import functools
import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from ..capture.boundary import (
    CallKind,
    CallTicket,
    begin_call,
    ends_call,
    error_info,
)
from ..capture.session import Session, current_session
from ..errors import RecordingError
from ..providers.http import body_bytes, body_fields, digest, json_or_none, without_boundary
from ..record.event import Effect, EventType
from ..replay.engine import rebuild_error

__all__ = [
    "DEFAULT_READS",
    "EXTERNAL",
    "HttpRule",
    "instrument",
    "is_instrumented",
    "uninstrument",
]

C = TypeVar("C")

EXTERNAL = "external"
"""A rule's answer for requests recorded as ``external.read`` rather than as a tool."""

DEFAULT_READS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods recorded as ``external.read`` when no rule says otherwise."""

HttpRule: TypeAlias = (
    Callable[[str, str], "Effect | str | None"] | Mapping[tuple[str, str], "Effect | str"]
)
"""``(method, url) -> effect | "external" | None``, or ``{(method, url_glob): effect}``."""

# Framing of the live exchange (the body is recorded decoded, so these would lie on replay),
# session secrets, which a record must not keep, and the server's clock: ``date`` changes
# every second, so a ``pure`` request re-sent by ``rerun_pure`` would always differ from its
# record although the server's answer did not change.
_RESPONSE_DROP = frozenset(
    {"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"}
    | {"set-cookie", "date"}
)

# The value of an ``external.read`` that got no answer: ``{"error": {"type", "message"}}``
# (an answer always has a ``status``, so the two cannot be confused).
_READ_ERROR = "error"


@dataclass(frozen=True)
class _Options:
    rules: HttpRule | None
    request_headers: frozenset[str]
    default_effect: Effect

    def classify(self, method: str, url: str) -> Effect | str:
        """``"external"`` or the effect of a request, from the rules then the defaults."""
        chosen: Effect | str | None = None
        rules = self.rules
        if callable(rules):
            chosen = rules(method, url)
        elif rules is not None:
            for (rule_method, pattern), effect in rules.items():
                if rule_method in ("*", method.upper()) and fnmatch.fnmatchcase(url, pattern):
                    chosen = effect
                    break
        if chosen is None:
            return EXTERNAL if method.upper() in DEFAULT_READS else self.default_effect
        if chosen == EXTERNAL:
            return EXTERNAL
        return Effect.parse(chosen)


def _is_json(content_type: str | None) -> bool:
    """Whether a content type says JSON (``application/json``, ``application/*+json``) in
    UTF-8 (no charset, or ``utf-8``): served back, the body is re-encoded as UTF-8, so one
    in another charset is kept as sent."""
    media, _, params = (content_type or "").partition(";")
    media = media.strip().lower()
    if not (media in ("application/json", "text/json") or media.endswith("+json")):
        return False
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').lower() in ("utf-8", "utf8")
    return True


def _body(data: bytes, content_type: str | None) -> dict[str, Any]:
    """An answer's body as record fields. Parsed (``body``) only when its content type says
    JSON: serving it back re-encodes it, which may change key order and number spelling,
    never what it means as JSON. Any other body is kept as sent (``text``, else ``base64``):
    as text, "3.10" is not the number 3.1."""
    if not data or _is_json(content_type):
        return body_fields(data)
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def _headers(headers: Any, *, head: bool = False) -> dict[str, str]:
    """The headers an answer is recorded with. A ``HEAD`` answer keeps its
    ``content-length`` (the size of what a ``GET`` would get: the answer's own subject,
    since it has no body); any other answer's is dropped, as its body may be served back
    re-encoded."""
    out: dict[str, str] = {}
    for name, value in headers.multi_items():
        key = name.lower()
        if key in _RESPONSE_DROP and not (head and key == "content-length"):
            continue
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


class _Exchange:
    """One request: what is recorded for it, and the answer the client gets."""

    def __init__(self, lib: Any, request: Any, options: _Options, session: Session) -> None:
        self.lib = lib
        self.request = request
        self.session = session
        method = str(request.method).upper()
        url = str(request.url)
        self.method = method
        self.url = url
        self.kind = options.classify(method, url)
        args: dict[str, Any] = {"method": method, "url": url}
        # a multipart body's boundary is drawn at random for every request: recorded with a
        # fixed one, so that the same upload is the same request (and key) in every replay
        content_type, content = without_boundary(
            request.headers.get("content-type"), request.content
        )
        if content:
            ok, value = json_or_none(content)
            if ok:
                args["body"] = value
            else:
                try:
                    args["text"] = content.decode("utf-8")
                except UnicodeDecodeError:
                    args["body_sha256"] = digest(content)
        kept = {
            name.lower(): value
            for name, value in request.headers.items()
            if name.lower() in options.request_headers
        }
        if "content-type" in kept and content_type is not None:
            kept["content-type"] = content_type
        if kept:
            args["headers"] = dict(sorted(kept.items()))
        self.args = args

    # -- external reads ------------------------------------------------------------------

    def read_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"source": "http", "key": f"{self.method} {self.url}"}
        extra = {k: v for k, v in self.args.items() if k not in ("method", "url")}
        if extra:
            payload["request"] = extra
        return payload

    def read_failed(self, payload: dict[str, Any], exc: BaseException) -> None:
        """Record a read that got no answer (connection refused, timeout): its value is
        ``{"error": {type, message}}``, the failure a write records as ``tool.failed``."""
        self.session.record_value(
            EventType.EXTERNAL_READ.value, payload, {_READ_ERROR: error_info(exc)}
        )

    def served_read(self, value: Any) -> Any:
        """The recorded answer to a read; a recorded failure is raised again."""
        if isinstance(value, dict) and len(value) == 1 and isinstance(value.get(_READ_ERROR), dict):
            raise rebuild_error(value[_READ_ERROR])
        return self.rebuild(value)

    # -- tools ---------------------------------------------------------------------------

    def begin_tool(self) -> CallTicket:
        assert isinstance(self.kind, Effect)
        ticket = begin_call(
            CallKind.TOOL, f"http.{self.method.lower()}", self.args, effect=self.kind
        )
        assert ticket is not None  # only called inside a run
        return ticket

    # -- answers -------------------------------------------------------------------------

    def answer(self, live: Any, data: bytes) -> dict[str, Any]:
        headers = _headers(live.headers, head=self.method == "HEAD")
        record: dict[str, Any] = {"status": live.status_code, "headers": headers}
        record.update(_body(data, live.headers.get("content-type")))
        return record

    def delivered(self, record: dict[str, Any], data: bytes) -> Any:
        """The live answer the client gets: the status and headers as recorded, the body
        exactly as the server sent it (a JSON body is not re-encoded)."""
        return self.lib.Response(
            int(record["status"]), headers=record["headers"], content=data, request=self.request
        )

    def rebuild(self, record: Any) -> Any:
        if not isinstance(record, dict) or "status" not in record:
            raise RecordingError(
                f"the recorded answer to {self.method} {self.url} is not an HTTP answer"
            )
        headers = {str(k): str(v) for k, v in (record.get("headers") or {}).items()}
        return self.lib.Response(
            int(record["status"]),
            headers=headers,
            content=body_bytes(record),
            request=self.request,
        )

    def simulated(self, ticket: CallTicket) -> dict[str, Any]:
        """The answer of a dry run: nothing leaves the process."""
        body = {"dry_run": True, "status": "simulated", "idempotency_key": ticket.key}
        return {"status": 200, "headers": {"content-type": "application/json"}, "body": body}


def _sync_transport(lib: Any) -> type:
    class RecordingTransport(lib.BaseTransport):  # type: ignore[misc]
        """Records each request of a sync client inside a run; passes through outside."""

        def __init__(self, inner: Any, options: _Options) -> None:
            self.inner = inner
            self.options = options

        def handle_request(self, request: Any) -> Any:
            session = current_session()
            if session is None:
                return self.inner.handle_request(request)
            request.read()
            ex = _Exchange(lib, request, self.options, session)
            if ex.kind == EXTERNAL:
                payload = ex.read_payload()
                served, value = session.serve_value(EventType.EXTERNAL_READ.value, payload)
                if served:
                    return ex.served_read(value)
                try:
                    live = self.inner.handle_request(request)
                    data = live.read()
                except Exception as exc:
                    ex.read_failed(payload, exc)
                    raise
                record = ex.answer(live, data)
                session.record_value(EventType.EXTERNAL_READ.value, payload, record)
                return ex.delivered(record, data)
            ticket = ex.begin_tool()
            if ticket.served:
                ticket.not_cancellable()  # one an async client's agent cancelled
                return ex.rebuild(ticket.answer())
            if ticket.dry_run:
                return ex.rebuild(ticket.complete(ex.simulated(ticket)))
            try:
                live = self.inner.handle_request(request)
                data = live.read()
            except Exception as exc:
                ticket.fail(exc)
                raise
            return ex.delivered(ticket.complete(ex.answer(live, data)), data)

        def close(self) -> None:
            self.inner.close()

    return RecordingTransport


def _async_transport(lib: Any) -> type:
    class AsyncRecordingTransport(lib.AsyncBaseTransport):  # type: ignore[misc]
        """The async form: records each request of an async client inside a run."""

        def __init__(self, inner: Any, options: _Options) -> None:
            self.inner = inner
            self.options = options

        async def handle_async_request(self, request: Any) -> Any:
            session = current_session()
            if session is None:
                return await self.inner.handle_async_request(request)
            await request.aread()
            ex = _Exchange(lib, request, self.options, session)
            if ex.kind == EXTERNAL:
                payload = ex.read_payload()
                served, value = session.serve_value(EventType.EXTERNAL_READ.value, payload)
                if served:
                    return ex.served_read(value)
                try:
                    live = await self.inner.handle_async_request(request)
                    data = await live.aread()
                except Exception as exc:
                    ex.read_failed(payload, exc)
                    raise
                record = ex.answer(live, data)
                session.record_value(EventType.EXTERNAL_READ.value, payload, record)
                return ex.delivered(record, data)
            ticket = ex.begin_tool()
            if ticket.served:
                # a call recorded as cancelled waits until the agent cancels it again
                return ex.rebuild(await ticket.answer_async())
            if ticket.dry_run:
                return ex.rebuild(ticket.complete(ex.simulated(ticket)))
            try:
                live = await self.inner.handle_async_request(request)
                data = await live.aread()
            except BaseException as exc:
                if ends_call(exc):  # a cancellation too: the agent's code ended the call
                    ticket.fail(exc)
                raise
            return ex.delivered(ticket.complete(ex.answer(live, data)), data)

        async def aclose(self) -> None:
            await self.inner.aclose()

    return AsyncRecordingTransport


@functools.cache
def _transports(lib_name: str) -> tuple[Any, type, type]:
    lib = importlib.import_module(lib_name)
    return lib, _sync_transport(lib), _async_transport(lib)


def _library(client: Any) -> tuple[str, bool]:
    """``(library name, is_async)`` of an httpx or httpx2 client, else a TypeError."""
    for name in ("httpx2", "httpx"):
        lib = sys.modules.get(name)
        if lib is None:
            continue
        if isinstance(client, lib.AsyncClient):
            return name, True
        if isinstance(client, lib.Client):
            return name, False
    hint = ""
    if hasattr(client, "_client") and type(client).__module__.split(".")[0] in (
        "openai",
        "anthropic",
    ):
        hint = "; for an SDK client use tachograph.integrations.openai (or .anthropic).instrument"
    raise TypeError(
        f"instrument() expects an httpx or httpx2 Client or AsyncClient, got "
        f"{type(client).__name__}{hint}"
    )


def _wrappers(lib_name: str) -> tuple[type, type]:
    _, sync, asyn = _transports(lib_name)
    return sync, asyn


def instrument(
    client: C,
    *,
    rules: HttpRule | None = None,
    request_headers: Iterable[str] = (),
    default_effect: Effect | str = Effect.WRITE,
) -> C:
    """Record (and replay) every request of an ``httpx``/``httpx2`` client; returns it.

    The client is changed in place (its transport and its mounts are wrapped); outside a run
    it behaves exactly as before. ``rules`` classifies requests (see the module docs);
    ``default_effect`` is the effect of a non-read request no rule names (``write``).
    Instrumenting twice keeps the first installation.
    """
    lib_name, is_async = _library(client)
    options = _Options(
        rules=rules,
        request_headers=frozenset(h.lower() for h in request_headers),
        default_effect=Effect.parse(default_effect),
    )
    if isinstance(options.rules, Mapping):
        for rule_effect in options.rules.values():
            if rule_effect != EXTERNAL:
                Effect.parse(rule_effect)  # fail now, not at the first request
    sync, asyn = _wrappers(lib_name)
    cls = asyn if is_async else sync

    def wrap(inner: Any) -> Any:
        return inner if isinstance(inner, (sync, asyn)) else cls(inner, options)

    http: Any = client
    http._transport = wrap(http._transport)
    # Mounts (proxies) bypass the default transport; None means "use the default".
    http._mounts = {p: (t if t is None else wrap(t)) for p, t in http._mounts.items()}
    return client


def uninstrument(client: C) -> C:
    """Undo :func:`instrument`: put back the transports it wrapped; returns ``client``."""
    lib_name, _ = _library(client)
    wrappers = _wrappers(lib_name)

    def unwrap(transport: Any) -> Any:
        wrapped: Any = transport
        return wrapped.inner if isinstance(transport, wrappers) else transport

    http: Any = client
    http._transport = unwrap(http._transport)
    http._mounts = {p: (t if t is None else unwrap(t)) for p, t in http._mounts.items()}
    return client


def is_instrumented(client: Any) -> bool:
    """Whether ``client`` records through tachograph."""
    try:
        lib_name, _ = _library(client)
    except TypeError:
        return False
    return isinstance(getattr(client, "_transport", None), _wrappers(lib_name))

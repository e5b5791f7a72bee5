"""Record and replay at the HTTP transport of an SDK client built on ``httpx2``.

Every HTTP attempt the SDK makes is one model call of the current run:

* ``model.request``: ``{"request": <the JSON body as sent>, "http": {"method", "path",
  "query"?, "headers"?}, "prompt_hash"?}``. Only the request headers named in
  ``request_headers`` are kept (by default the beta flags, which change what the model does);
  credentials, the SDK's ``x-stainless-*`` telemetry and retry counter, the user agent, trace
  context and transport framing are left out, so that they neither leak into the record nor
  make a replay diverge.
* ``model.response``: ``{"response": {"status", "headers", "body"}, "usage"?}`` for a JSON
  answer; a server-sent-event stream keeps its events one by one, ``{"status", "headers",
  "events": [{"event"?, "data", "id"?}, ...]}``, so that a replay streams the same chunks. The
  envelope's ``model`` is the exact model the answer names; ``usage`` is the provider's token
  usage (for a stream, merged from its events).
* ``model.failed``: an HTTP error (429, 5xx, ...) is ``{"error": {"type", "message",
  "status"}, "response": {...}}`` where ``type`` is the SDK exception the status maps to; a
  transport error (connection refused, timeout, a body cut short) is ``{"error": {"type",
  "message"}}``, and so is a call the agent cancelled (``asyncio.CancelledError``: an
  ``asyncio.wait_for`` that timed out, a cancelled task).

SDK retries are separate HTTP attempts, so each one is its own request and answer, keyed
``...#1``, ``...#2``. In replay the inner transport is never called: the recorded answer is
rebuilt as an ``httpx2.Response`` and the SDK parses it, raises from it and retries on it
exactly as it did live. A recorded error the SDK would retry is served with
``retry-after-ms: 1`` (when ``fast_retries``), so that replays do not sleep. A call recorded
as cancelled neither answers nor raises until the agent cancels it again (within twice
the recorded wait and :data:`tachograph.capture.boundary.CANCELLED_WAIT`). What the record
cannot serve is an ``unreplayable`` divergence: a stream the recording stopped reading early
(``"incomplete": true``) read past its recorded events, or a cancelled call the agent no
longer cancels.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import httpx2

from ..capture.boundary import (
    CallKind,
    CallTicket,
    begin_call,
    ends_call,
    error_info,
    recorded_as_cancelled,
)
from ..capture.session import current_session
from ..errors import RecordingError, Unreplayable
from ..providers.http import without_boundary
from ..providers.replay import served_answer
from .wire import (
    answer_record,
    body_bytes,
    digest,
    is_sse,
    json_or_none,
    json_with_text_numbers,
    sse_bytes,
    stream_error,
    summary,
    terminated,
)

__all__ = [
    "DEFAULT_REQUEST_HEADERS",
    "AsyncRecordingTransport",
    "Provider",
    "RecordingTransport",
    "install",
    "installed",
    "uninstall",
]

DEFAULT_REQUEST_HEADERS: tuple[str, ...] = ("anthropic-beta", "openai-beta")
"""Request headers kept (and compared in replay) by default: they change the model's behaviour."""

C = TypeVar("C")


@dataclass(frozen=True)
class Provider:
    """What the integration asks of one SDK client: its name, the exception it raises for an
    error response, and whether it would retry one."""

    name: str
    make_error: Callable[[httpx2.Response], BaseException] | None = None
    should_retry: Callable[[httpx2.Response], bool] | None = None
    stream_error_type: str = ""
    """The exception the SDK raises for an error event inside a stream."""

    def error_for(self, response: httpx2.Response) -> dict[str, Any]:
        """``{type, message, status}`` of the exception the SDK raises for ``response``."""
        info: dict[str, Any] | None = None
        if self.make_error is not None:
            try:
                info = dict(error_info(self.make_error(response)))
            except Exception:  # the SDK's private mapping moved: fall back to the status
                info = None
        if info is None:
            info = {
                "type": f"{self.name}.APIStatusError",
                "message": f"Error code: {response.status_code}",
            }
        info["status"] = response.status_code
        return info

    def retries(self, response: httpx2.Response) -> bool:
        """Whether the SDK would retry after ``response`` (False when it cannot tell)."""
        if self.should_retry is None:
            return False
        try:
            return bool(self.should_retry(response))
        except Exception:
            return False


@dataclass(frozen=True)
class _Options:
    provider: Provider
    request_headers: frozenset[str]
    fast_retries: bool


# -- one HTTP attempt as a model call -------------------------------------------------------


class _Call:
    """An HTTP attempt: what is recorded for it and how it is served or completed."""

    def __init__(self, request: httpx2.Request, options: _Options) -> None:
        self.request = request
        self.options = options
        content = request.content
        ok, body = json_or_none(content) if content else (True, None)
        http: dict[str, Any] = {"method": request.method, "path": request.url.path}
        fitted = None if ok else json_with_text_numbers(content)
        if fitted is not None:  # JSON with a 64-bit seed, say: kept, that number as text
            body, http["numbers_as_text"] = fitted
        elif not ok:
            content_type, content = without_boundary(request.headers.get("content-type"), content)
            body = {"content_type": content_type, "length": len(content), "sha256": digest(content)}
        query = request.url.query.decode("ascii", errors="replace")
        if query:
            http["query"] = query
        kept = {
            name.lower(): value
            for name, value in request.headers.items()
            if name.lower() in options.request_headers
        }
        if kept:
            http["headers"] = dict(sorted(kept.items()))
        self.body = body
        self.http = http
        model = body.get("model") if isinstance(body, dict) else None
        self.model: str | None = model if isinstance(model, str) and model else None
        self.name = self.model or request.url.path
        seed = body.get("seed") if isinstance(body, dict) else None
        self.seed: int | None = seed if type(seed) is int else None

    def begin(self) -> CallTicket:
        ticket = begin_call(
            CallKind.MODEL,
            self.name,
            self.body,
            model=self.model,
            seed=self.seed,
            extra={"http": self.http},
        )
        assert ticket is not None  # only called inside a run
        return ticket

    # -- replay ---------------------------------------------------------------------------

    def served(self, ticket: CallTicket) -> httpx2.Response:
        """The recorded answer to this attempt, as the response the SDK would have read."""
        if ticket.error is not None:
            record = _recorded_failure(ticket)
            if record is None:  # a transport error: raise it where the transport raised it
                ticket.not_cancellable(name=self.name)
                raise ticket.error
            return self._rebuild(ticket, record, error=ticket.error)
        record = ticket.value
        if isinstance(record, dict) and "status" not in record:
            # recorded in the provider-neutral form (a run imported from a trace)
            record = served_answer(record, self.request.url.path, self.body)
        if not isinstance(record, dict) or "status" not in record:
            raise Unreplayable(
                f"the recorded answer to {self.name!r} (key {ticket.key}) cannot be served to "
                "the SDK: it was not recorded at the HTTP transport, and the trace it was "
                "imported from did not capture the model's message (or the API differs)",
                key=ticket.key,
            )
        return self._rebuild(ticket, record)

    async def served_async(self, ticket: CallTicket) -> httpx2.Response:
        """:meth:`served` for an async client: a call recorded as cancelled waits until the
        agent cancels it again (``CancelledError`` goes up from here, as it did live)."""
        if recorded_as_cancelled(ticket.error) and _recorded_failure(ticket) is None:
            await ticket.until_cancelled("it was cancelled before it answered", name=self.name)
        return self.served(ticket)

    def _rebuild(
        self,
        ticket: CallTicket,
        record: dict[str, Any],
        *,
        error: BaseException | None = None,
    ) -> httpx2.Response:
        status = int(record["status"])
        headers = {str(k): str(v) for k, v in (record.get("headers") or {}).items()}
        events = record.get("events")
        if isinstance(events, list):
            chunks = [sse_bytes(e) for e in events if isinstance(e, dict)]
            # A stream that broke mid-way breaks at the same point again; one the agent
            # stopped reading cannot be read further. (An error event the provider sent is
            # in the events: the SDK raises on it by itself.)
            incomplete = status < 400 and bool(record.get("incomplete"))
            end = _StreamEnd(self, ticket, error if incomplete else None, incomplete)
            return httpx2.Response(
                status,
                headers=headers,
                stream=_ReplayStream(chunks, end),
                request=self.request,
            )
        content = body_bytes(record)
        response = httpx2.Response(status, headers=headers, content=content, request=self.request)
        if self.options.fast_retries and status >= 400 and self.options.provider.retries(response):
            # The SDK retries either way; only how long it sleeps first changes.
            headers["retry-after-ms"] = "1"
            response = httpx2.Response(
                status, headers=headers, content=content, request=self.request
            )
        return response

    # -- record ---------------------------------------------------------------------------

    def answered(
        self,
        ticket: CallTicket,
        response: httpx2.Response,
        data: bytes,
        *,
        incomplete: bool = False,
        error: BaseException | None = None,
    ) -> None:
        """Record what came back: a response, an error response, or a broken stream."""
        record = answer_record(response, data, incomplete=incomplete or error is not None)
        if response.status_code >= 400 or error is not None:
            info = (
                dict(error_info(error))
                if error is not None
                else self.options.provider.error_for(response)
            )
            ticket.fail(info=info, response=record)
            return
        model, usage = summary(record)
        failure = stream_error(record)
        if failure is not None:
            provider = self.options.provider
            info = {
                "type": provider.stream_error_type or f"{provider.name}.APIError",
                "message": failure,
                "status": response.status_code,
            }
            ticket.fail(info=info, response=record, model=model or ticket.model)
            return
        ticket.complete(record, model=model or ticket.model, usage=usage)

    def transport_failed(self, ticket: CallTicket, exc: BaseException) -> None:
        """Record an attempt that got no response, or no whole one (connection refused,
        timeout, a body cut short, a cancellation)."""
        ticket.fail(exc)

    def live_response(self, response: httpx2.Response, data: bytes) -> httpx2.Response:
        """The live answer handed on to the SDK, its body already read and decoded."""
        return httpx2.Response(
            response.status_code,
            headers=_live_headers(response),
            content=data,
            request=self.request,
            extensions=response.extensions,
        )


def _live_headers(response: httpx2.Response) -> list[tuple[str, str]]:
    drop = {"content-encoding", "content-length", "transfer-encoding"}
    return [(k, v) for k, v in response.headers.multi_items() if k.lower() not in drop]


def _recorded_failure(ticket: CallTicket) -> dict[str, Any] | None:
    """The recorded error response behind a served failure.

    The ticket's error is only the rebuilt exception; the SDK needs the response itself to
    raise its own exception and run its own retry logic, so it is read from the recorded
    completion.
    """
    event = ticket.completion
    payload = getattr(event, "payload", None)
    record = payload.get("response") if isinstance(payload, dict) else None
    return record if isinstance(record, dict) and "status" in record else None


class _StreamEnd:
    """What a replayed stream does after its recorded events: end, raise the recorded error
    (a stream that broke), wait to be cancelled (a stream read when the agent cancelled it),
    or, for a stream the recording stopped reading early, refuse to go on."""

    def __init__(
        self, call: _Call, ticket: CallTicket, error: BaseException | None, incomplete: bool
    ) -> None:
        self.call = call
        self.ticket = ticket
        self.error = error
        self.incomplete = incomplete

    def reached(self) -> None:
        error = self.error
        if error is None:
            if self.incomplete:
                self._beyond()
            return
        if recorded_as_cancelled(error):
            self.ticket.not_cancelled(
                "a synchronous stream cannot be cancelled", name=self.call.name
            )
        raise error

    async def areached(self) -> None:
        if recorded_as_cancelled(self.error):
            await self.ticket.until_cancelled(
                "it was cancelled while its stream was read", name=self.call.name
            )
        self.reached()

    def _beyond(self) -> NoReturn:
        completion = self.ticket.completion
        seq = completion.seq if completion is not None else "?"
        self.ticket.unservable(
            f"The stream answering {self.call.name!r} (seq {seq}) was recorded incomplete: "
            "the agent stopped reading it there, so the record ends after its recorded "
            "events and cannot say what came next. In this replay the agent reads past them.",
        )


class _ReplayStream(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """Recorded chunks, for sync and async clients alike (the client checks the type)."""

    def __init__(self, chunks: list[bytes], end: _StreamEnd) -> None:
        self._chunks = chunks
        self._end = end

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks
        self._end.reached()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk
        await self._end.areached()


class _Tee:
    """Hands a live stream on chunk by chunk and records it once, when it is closed.

    Every pass over the stream reads from one shared iterator: the SDK may iterate twice
    (openai's async stream drains the rest of the body after ``[DONE]``), and the second
    pass must continue where the first stopped.
    """

    def __init__(self, call: _Call, ticket: CallTicket, live: httpx2.Response):
        self.call = call
        self.ticket = ticket
        self.live = live
        self.chunks: list[bytes] = []
        self.eof = False
        self.error: BaseException | None = None
        self.done = False
        self.sync_source: Iterator[bytes] | None = None
        self.async_source: AsyncIterator[bytes] | None = None
        # a stream the agent breaks out of without closing is recorded as read so far when
        # the run ends (it was never recorded: the run could not be replayed)
        self._forget = ticket.session.unfinished(self.finish)
        self.warned = False

    def late(self) -> None:
        """The agent reads on after the answer was recorded at its run's end: say so once."""
        if not self.warned:
            self.warned = True
            warnings.warn(
                f"a streamed answer to {self.call.name!r} was read after its run finished; "
                "only what was read before its end is recorded",
                RuntimeWarning,
                stacklevel=3,
            )

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        self._forget()
        recorder = self.ticket.session.recorder
        if recorder is not None and getattr(recorder, "finished", False):
            # Raising here would break the SDK's close() outside the run; the request stays
            # recorded without an answer, as a call cut short would.
            warnings.warn(
                f"a streamed answer to {self.call.name!r} was read after its run "
                f"{recorder.run_id!r} finished; the answer is not recorded",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        data = b"".join(self.chunks)
        self.call.answered(
            self.ticket,
            self.live,
            data,
            incomplete=not self.eof and not terminated(data),
            error=self.error,
        )


class _SyncTee(httpx2.SyncByteStream):
    def __init__(self, tee: _Tee) -> None:
        self._tee = tee

    def __iter__(self) -> Iterator[bytes]:
        tee = self._tee
        if tee.sync_source is None:
            tee.sync_source = iter(tee.live.iter_bytes())
        try:
            for chunk in tee.sync_source:
                if tee.done:
                    tee.late()
                tee.chunks.append(chunk)
                yield chunk
        except Exception as exc:
            tee.error = exc
            raise
        tee.eof = True

    def close(self) -> None:
        try:
            self._tee.live.close()
        finally:
            self._tee.finish()


class _AsyncTee(httpx2.AsyncByteStream):
    def __init__(self, tee: _Tee) -> None:
        self._tee = tee

    async def __aiter__(self) -> AsyncIterator[bytes]:
        tee = self._tee
        if tee.async_source is None:
            tee.async_source = tee.live.aiter_bytes().__aiter__()
        try:
            async for chunk in tee.async_source:
                if tee.done:
                    tee.late()
                tee.chunks.append(chunk)
                yield chunk
        except BaseException as exc:
            if ends_call(exc):  # not GeneratorExit
                tee.error = exc
            raise
        tee.eof = True

    async def aclose(self) -> None:
        try:
            await self._tee.live.aclose()
        finally:
            self._tee.finish()


# -- the transports -------------------------------------------------------------------------


class RecordingTransport(httpx2.BaseTransport):
    """Wraps a sync transport: records each attempt inside a run, serves it in replay, and
    passes everything through untouched outside a run."""

    def __init__(self, inner: httpx2.BaseTransport, options: _Options) -> None:
        self.inner = inner
        self.options = options

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        session = current_session()
        if session is None:
            return self.inner.handle_request(request)
        request.read()
        call = _Call(request, self.options)
        ticket = call.begin()
        if ticket.served:
            return call.served(ticket)
        try:
            live = self.inner.handle_request(request)
        except Exception as exc:
            call.transport_failed(ticket, exc)
            raise
        live.request = request  # the SDK's error classes read it
        if is_sse(live) and live.status_code < 400:
            return httpx2.Response(
                live.status_code,
                headers=_live_headers(live),
                stream=_SyncTee(_Tee(call, ticket, live)),
                request=request,
                extensions=live.extensions,
            )
        try:
            data = live.read()
        except Exception as exc:  # cut short, or timed out, after the headers
            call.transport_failed(ticket, exc)
            raise
        call.answered(ticket, live, data)
        return call.live_response(live, data)

    def close(self) -> None:
        self.inner.close()


class AsyncRecordingTransport(httpx2.AsyncBaseTransport):
    """The async form of :class:`RecordingTransport`."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, options: _Options) -> None:
        self.inner = inner
        self.options = options

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        session = current_session()
        if session is None:
            return await self.inner.handle_async_request(request)
        await request.aread()
        call = _Call(request, self.options)
        ticket = call.begin()
        if ticket.served:
            return await call.served_async(ticket)
        try:
            live = await self.inner.handle_async_request(request)
        except BaseException as exc:
            if ends_call(exc):
                call.transport_failed(ticket, exc)
            raise
        live.request = request  # the SDK's error classes read it
        if is_sse(live) and live.status_code < 400:
            return httpx2.Response(
                live.status_code,
                headers=_live_headers(live),
                stream=_AsyncTee(_Tee(call, ticket, live)),
                request=request,
                extensions=live.extensions,
            )
        try:
            data = await live.aread()
        except BaseException as exc:  # cut short, timed out or cancelled after the headers
            if ends_call(exc):
                call.transport_failed(ticket, exc)
            raise
        call.answered(ticket, live, data)
        return call.live_response(live, data)

    async def aclose(self) -> None:
        await self.inner.aclose()


_WRAPPERS = (RecordingTransport, AsyncRecordingTransport)


def install(
    client: C,
    provider: Provider,
    *,
    request_headers: Iterable[str] = DEFAULT_REQUEST_HEADERS,
    fast_retries: bool = True,
) -> C:
    """Wrap the transport(s) of ``client``'s ``httpx2`` client in place; returns ``client``.

    Copies made with ``client.with_options(...)`` share the same ``httpx2`` client, so they
    are recorded too. Installing twice keeps the first installation.
    """
    http = getattr(client, "_client", None)
    options = _Options(
        provider=provider,
        request_headers=frozenset(h.lower() for h in request_headers),
        fast_retries=fast_retries,
    )
    wrap: Callable[[Any], Any]
    if isinstance(http, httpx2.AsyncClient):

        def wrap(inner: Any) -> Any:
            return (
                inner if isinstance(inner, _WRAPPERS) else AsyncRecordingTransport(inner, options)
            )

    elif isinstance(http, httpx2.Client):

        def wrap(inner: Any) -> Any:
            return inner if isinstance(inner, _WRAPPERS) else RecordingTransport(inner, options)

    else:
        raise RecordingError(
            f"{type(client).__name__} has no httpx2 client to record at; pass a client of the "
            f"{provider.name} SDK (built on httpx2)"
        )
    http._transport = wrap(http._transport)
    # Mounts (proxies) bypass the default transport; None means "use the default".
    http._mounts = {p: (t if t is None else wrap(t)) for p, t in http._mounts.items()}
    return client


def uninstall(client: C) -> C:
    """Undo :func:`install`: put back the transports it wrapped; returns ``client``."""
    http = getattr(client, "_client", None)
    if not isinstance(http, (httpx2.Client, httpx2.AsyncClient)):
        return client

    def unwrap(transport: Any) -> Any:
        return transport.inner if isinstance(transport, _WRAPPERS) else transport

    http._transport = unwrap(http._transport)
    http._mounts = {p: (t if t is None else unwrap(t)) for p, t in http._mounts.items()}
    return client


def installed(client: Any) -> bool:
    """Whether ``client`` records through tachograph."""
    http = getattr(client, "_client", None)
    return isinstance(getattr(http, "_transport", None), _WRAPPERS)

"""A real OTLP/HTTP traces receiver for tests.

``OTLPReceiver`` is a small threaded HTTP server on ``127.0.0.1`` (ephemeral port) that accepts
``POST /v1/traces`` the way an OpenTelemetry Collector does:

* ``Content-Type: application/x-protobuf``: a serialized ``ExportTraceServiceRequest``;
* ``Content-Type: application/json``: OTLP/JSON, with trace and span ids in hex as the OTLP
  specification requires, or in base64 as protobuf's generic JSON mapping writes them;
* ``Content-Encoding: gzip`` or ``deflate`` (the OTLP exporter's compression options).

It answers with a serialized ``ExportTraceServiceResponse`` (protobuf or JSON, matching the
request) and keeps every received span as a plain ``dict`` (see ``ReceivedSpan``). It can be told
to fail the next N requests (503 by default) to exercise an exporter's retry and failure paths.

Example::

    with OTLPReceiver() as receiver:
        exporter = OTLPSpanExporter(endpoint=receiver.traces_url)
        ...
        receiver.wait_for_spans(3)
        assert receiver.spans[0]["name"] == "chat gpt-4o-mini"

The decoding helpers (``decode_export_request``, ``decode_otlp_json``, ``decode_otlp_protobuf``)
are usable without a server, for example to read golden OTLP/JSON files.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
import time
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, TypedDict

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

__all__ = [
    "TRACES_PATH",
    "OTLPReceiver",
    "ReceivedEvent",
    "ReceivedLink",
    "ReceivedRequest",
    "ReceivedSpan",
    "ReceivedStatus",
    "any_value_to_python",
    "attributes_to_dict",
    "decode_export_request",
    "decode_otlp_json",
    "decode_otlp_protobuf",
]

TRACES_PATH = "/v1/traces"
PROTOBUF_CONTENT_TYPE = "application/x-protobuf"
JSON_CONTENT_TYPE = "application/json"

# OTLP/JSON id fields (lowerCamelCase as written by OTLP/JSON; snake_case as protobuf also
# accepts). OTLP/JSON writes these in hex; protobuf's generic JSON mapping writes base64.
_ID_FIELDS = frozenset(
    {"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"}
)
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


class ReceivedEvent(TypedDict):
    """A span event as received."""

    name: str
    time_unix_nano: int
    attributes: dict[str, Any]
    dropped_attributes_count: int


class ReceivedLink(TypedDict):
    """A span link as received."""

    trace_id: str
    span_id: str
    trace_state: str
    attributes: dict[str, Any]


class ReceivedStatus(TypedDict):
    """A span status: ``code`` is the OTLP value (0 unset, 1 ok, 2 error)."""

    code: int
    code_name: str
    message: str


class ReceivedSpan(TypedDict):
    """A received span decoded to plain Python values.

    Ids are lower-case hex (``parent_span_id`` is ``None`` for a root span). ``kind`` is the OTLP
    enum value (0 unspecified, 1 internal, 2 server, 3 client, 4 producer, 5 consumer; note that
    the Python SDK's ``SpanKind`` numbers differ) and ``kind_name`` its short name (``"CLIENT"``).
    Times are integer unix nanoseconds. Attribute values are ``str``, ``int``, ``float``,
    ``bool``, ``bytes``, ``None``, lists of those, or dicts (OTLP key-value lists).
    """

    name: str
    kind: int
    kind_name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    trace_state: str
    flags: int
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: dict[str, Any]
    events: list[ReceivedEvent]
    links: list[ReceivedLink]
    status: ReceivedStatus
    resource_attributes: dict[str, Any]
    scope_name: str
    scope_version: str
    scope_attributes: dict[str, Any]
    dropped_attributes_count: int
    dropped_events_count: int
    dropped_links_count: int


@dataclass(frozen=True)
class ReceivedRequest:
    """One HTTP request the receiver answered, accepted or not."""

    method: str
    path: str
    content_type: str
    content_encoding: str
    headers: dict[str, str]
    body_size: int
    status: int
    span_count: int
    error: str | None = None


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------


def any_value_to_python(value: common_pb2.AnyValue) -> Any:
    """Convert an OTLP ``AnyValue`` to a plain Python value (``None`` when empty)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "string_value":
        return value.string_value
    if which == "bool_value":
        return value.bool_value
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        return value.double_value
    if which == "bytes_value":
        return value.bytes_value
    if which == "array_value":
        return [any_value_to_python(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return attributes_to_dict(value.kvlist_value.values)
    raise ValueError(f"unsupported AnyValue field: {which}")


def attributes_to_dict(attributes: Any) -> dict[str, Any]:
    """Convert a repeated ``KeyValue`` field to a ``dict`` (later keys win, as in the SDK)."""
    return {kv.key: any_value_to_python(kv.value) for kv in attributes}


def _hex(raw: bytes) -> str:
    return raw.hex()


def _span_to_dict(
    span: trace_pb2.Span,
    resource_attributes: dict[str, Any],
    scope: common_pb2.InstrumentationScope,
) -> ReceivedSpan:
    kind_name = trace_pb2.Span.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_")
    status_name = trace_pb2.Status.StatusCode.Name(span.status.code).removeprefix("STATUS_CODE_")
    return ReceivedSpan(
        name=span.name,
        kind=int(span.kind),
        kind_name=kind_name,
        trace_id=_hex(span.trace_id),
        span_id=_hex(span.span_id),
        parent_span_id=_hex(span.parent_span_id) if span.parent_span_id else None,
        trace_state=span.trace_state,
        flags=span.flags,
        start_time_unix_nano=span.start_time_unix_nano,
        end_time_unix_nano=span.end_time_unix_nano,
        attributes=attributes_to_dict(span.attributes),
        events=[
            ReceivedEvent(
                name=event.name,
                time_unix_nano=event.time_unix_nano,
                attributes=attributes_to_dict(event.attributes),
                dropped_attributes_count=event.dropped_attributes_count,
            )
            for event in span.events
        ],
        links=[
            ReceivedLink(
                trace_id=_hex(link.trace_id),
                span_id=_hex(link.span_id),
                trace_state=link.trace_state,
                attributes=attributes_to_dict(link.attributes),
            )
            for link in span.links
        ],
        status=ReceivedStatus(
            code=int(span.status.code), code_name=status_name, message=span.status.message
        ),
        resource_attributes=dict(resource_attributes),
        scope_name=scope.name,
        scope_version=scope.version,
        scope_attributes=attributes_to_dict(scope.attributes),
        dropped_attributes_count=span.dropped_attributes_count,
        dropped_events_count=span.dropped_events_count,
        dropped_links_count=span.dropped_links_count,
    )


def decode_export_request(
    request: trace_service_pb2.ExportTraceServiceRequest,
) -> list[ReceivedSpan]:
    """Flatten an ``ExportTraceServiceRequest`` into ``ReceivedSpan`` dicts, in wire order."""
    spans: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource_attributes = attributes_to_dict(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(_span_to_dict(span, resource_attributes, scope_spans.scope))
    return spans


def decode_otlp_protobuf(body: bytes) -> list[ReceivedSpan]:
    """Decode a serialized ``ExportTraceServiceRequest``."""
    request = trace_service_pb2.ExportTraceServiceRequest()
    request.ParseFromString(body)
    return decode_export_request(request)


def _id_to_base64(value: str) -> str:
    """Return an OTLP/JSON id in base64, accepting hex (OTLP/JSON) or base64 (generic mapping).

    Hex trace ids are 32 characters and hex span ids 16; base64 of 16 or 8 bytes is 24 or 12
    characters, so the two forms cannot be confused.
    """
    if not value:
        return value
    if len(value) in (16, 32) and set(value) <= _HEX_DIGITS:
        return base64.b64encode(bytes.fromhex(value)).decode("ascii")
    base64.b64decode(value, validate=True)  # raises binascii.Error when neither form
    return value


def _normalize_ids(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: _id_to_base64(value)
            if key in _ID_FIELDS and isinstance(value, str)
            else _normalize_ids(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_normalize_ids(item) for item in node]
    return node


def _parse_otlp_json(
    data: bytes | str | Mapping[str, Any],
) -> trace_service_pb2.ExportTraceServiceRequest:
    document = json.loads(data) if isinstance(data, (bytes, str)) else dict(data)
    request = trace_service_pb2.ExportTraceServiceRequest()
    json_format.ParseDict(_normalize_ids(document), request, ignore_unknown_fields=True)
    return request


def decode_otlp_json(data: bytes | str | Mapping[str, Any]) -> list[ReceivedSpan]:
    """Decode an OTLP/JSON traces document (``{"resourceSpans": [...]}``).

    Accepts hex or base64 ids, lowerCamelCase or snake_case field names, 64-bit integers as JSON
    numbers or strings, and enums as integers or names, as protobuf's JSON parser does.
    """
    return decode_export_request(_parse_otlp_json(data))


# --------------------------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------------------------


@dataclass
class _State:
    lock: threading.Condition = field(default_factory=threading.Condition)
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: list[ReceivedRequest] = field(default_factory=list)
    fail_remaining: int = 0
    fail_status: int = HTTPStatus.SERVICE_UNAVAILABLE
    fail_retry_after: float | None = 0


class _Handler(BaseHTTPRequestHandler):
    """Request handler; ``state`` is set on a per-receiver subclass."""

    protocol_version = "HTTP/1.1"
    server_version = "tachograph-otlp-receiver/1"
    timeout = 10  # seconds an idle keep-alive connection is kept open
    state: _State

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    def do_GET(self) -> None:
        """Reject: only ``POST /v1/traces`` is served."""
        self._read_body()
        self._record(HTTPStatus.METHOD_NOT_ALLOWED, 0, error="only POST is supported")
        self._send_text(HTTPStatus.METHOD_NOT_ALLOWED, "only POST is supported")

    def do_POST(self) -> None:
        """Handle an OTLP/HTTP trace export."""
        body = self._read_body()
        path = self.path.split("?", 1)[0]
        if path != TRACES_PATH:
            self._record(HTTPStatus.NOT_FOUND, len(body), error=f"unknown path {path}")
            self._send_text(HTTPStatus.NOT_FOUND, f"unknown path {path}")
            return

        with self.state.lock:
            failing = self.state.fail_remaining > 0
            if failing:
                self.state.fail_remaining -= 1
                fail_status = self.state.fail_status
                retry_after = self.state.fail_retry_after
        if failing:
            self._record(fail_status, len(body), error="injected failure")
            headers = {} if retry_after is None else {"Retry-After": _format_seconds(retry_after)}
            self._send_text(fail_status, "injected failure", headers)
            return

        content_type = self._content_type()
        try:
            raw = _decompress(body, self._content_encoding())
            if content_type == PROTOBUF_CONTENT_TYPE:
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(raw)
            elif content_type == JSON_CONTENT_TYPE:
                request = _parse_otlp_json(raw)
            else:
                self._record(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, len(body), error=content_type)
                self._send_text(
                    HTTPStatus.UNSUPPORTED_MEDIA_TYPE, f"unsupported content type {content_type}"
                )
                return
            spans = decode_export_request(request)
        except (DecodeError, json_format.ParseError, ValueError, OSError, zlib.error) as exc:
            self._record(HTTPStatus.BAD_REQUEST, len(body), error=f"{type(exc).__name__}: {exc}")
            self._send_text(HTTPStatus.BAD_REQUEST, f"cannot decode request: {exc}")
            return

        self._record(HTTPStatus.OK, len(body), spans=spans)
        response = trace_service_pb2.ExportTraceServiceResponse()
        if content_type == JSON_CONTENT_TYPE:
            payload = json_format.MessageToJson(response).encode("utf-8")
        else:
            payload = response.SerializeToString()
        self._send(HTTPStatus.OK, content_type, payload)

    # ---- helpers ---------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _content_type(self) -> str:
        return (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()

    def _content_encoding(self) -> str:
        return (self.headers.get("Content-Encoding") or "").strip().lower()

    def _record(
        self,
        status: int,
        body_size: int,
        *,
        spans: list[ReceivedSpan] | None = None,
        error: str | None = None,
    ) -> None:
        entry = ReceivedRequest(
            method=self.command,
            path=self.path,
            content_type=self._content_type(),
            content_encoding=self._content_encoding(),
            headers={key.lower(): value for key, value in self.headers.items()},
            body_size=body_size,
            status=int(status),
            span_count=len(spans or []),
            error=error,
        )
        with self.state.lock:
            self.state.requests.append(entry)
            if spans:
                self.state.spans.extend(spans)
            self.state.lock.notify_all()

    def _send_text(self, status: int, text: str, headers: Mapping[str, str] | None = None) -> None:
        self._send(status, "text/plain; charset=utf-8", text.encode("utf-8"), headers)

    def _send(
        self,
        status: int,
        content_type: str,
        payload: bytes,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)


def _decompress(body: bytes, encoding: str) -> bytes:
    if encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    raise ValueError(f"unsupported content encoding {encoding!r}")


def _format_seconds(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)


class OTLPReceiver:
    """A threaded OTLP/HTTP traces receiver on ``127.0.0.1``; use it as a context manager.

    Attributes and methods:

    * ``url``: ``http://127.0.0.1:<port>``; ``traces_url``: ``url + "/v1/traces"``.
    * ``spans``: every accepted span so far (a copy), as ``ReceivedSpan`` dicts in arrival order.
    * ``requests``: every request answered (``ReceivedRequest``), including rejected ones.
    * ``request_count`` / ``accepted_count`` / ``rejected_count``: requests to ``/v1/traces``.
    * ``fail_next(n, status=503, retry_after=0)``: answer the next ``n`` trace requests with
      ``status`` (and a ``Retry-After`` header unless ``retry_after`` is ``None``).
    * ``wait_for_spans(n, timeout)``: block until at least ``n`` spans have arrived.
    * ``find(name)`` / ``by_name()``: look spans up by name; ``clear()`` forgets everything.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Create a receiver; it listens once ``start()`` is called or the context is entered."""
        self._host = host
        self._port = port
        self._state = _State()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> OTLPReceiver:
        """Bind the socket and serve in a background thread."""
        if self._server is not None:
            raise RuntimeError("receiver already started")
        handler = type("_BoundHandler", (_Handler,), {"state": self._state})
        server = ThreadingHTTPServer((self._host, self._port), handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"otlp-receiver:{server.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        server, thread = self._server, self._thread
        self._server = None
        self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> OTLPReceiver:
        """Start the receiver."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the receiver."""
        self.stop()

    # ---- addresses -------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound TCP port."""
        if self._server is None:
            raise RuntimeError("receiver is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, ``http://127.0.0.1:<port>`` (no trailing slash)."""
        return f"http://{self._host}:{self.port}"

    @property
    def traces_url(self) -> str:
        """The traces endpoint, ``url + "/v1/traces"``."""
        return self.url + TRACES_PATH

    # ---- received data ---------------------------------------------------------------------

    @property
    def spans(self) -> list[ReceivedSpan]:
        """All accepted spans, in arrival order."""
        with self._state.lock:
            return list(self._state.spans)

    @property
    def requests(self) -> list[ReceivedRequest]:
        """All answered requests, in arrival order."""
        with self._state.lock:
            return list(self._state.requests)

    @property
    def request_count(self) -> int:
        """Number of requests to the traces path, accepted or not."""
        return sum(1 for r in self.requests if r.path.split("?", 1)[0] == TRACES_PATH)

    @property
    def accepted_count(self) -> int:
        """Number of trace export requests answered with 200."""
        return sum(1 for r in self.requests if r.status == HTTPStatus.OK)

    @property
    def rejected_count(self) -> int:
        """Number of trace export requests answered with an error status."""
        return self.request_count - self.accepted_count

    def find(self, name: str) -> ReceivedSpan:
        """Return the only span called ``name`` (``KeyError`` if none, ``ValueError`` if many)."""
        matches = [span for span in self.spans if span["name"] == name]
        if not matches:
            raise KeyError(f"no span named {name!r}; have {sorted(self.by_name())}")
        if len(matches) > 1:
            raise ValueError(f"{len(matches)} spans named {name!r}")
        return matches[0]

    def by_name(self) -> dict[str, list[ReceivedSpan]]:
        """Group received spans by name."""
        grouped: dict[str, list[ReceivedSpan]] = {}
        for span in self.spans:
            grouped.setdefault(span["name"], []).append(span)
        return grouped

    def iter_spans(self) -> Iterator[ReceivedSpan]:
        """Iterate over a snapshot of the received spans."""
        return iter(self.spans)

    def wait_for_spans(self, count: int, timeout: float = 5.0) -> list[ReceivedSpan]:
        """Wait until at least ``count`` spans arrived; return them or raise ``TimeoutError``."""
        deadline = time.monotonic() + timeout
        with self._state.lock:
            while len(self._state.spans) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"expected {count} spans, got {len(self._state.spans)} after {timeout}s"
                    )
                self._state.lock.wait(remaining)
            return list(self._state.spans)

    # ---- behaviour -------------------------------------------------------------------------

    def fail_next(
        self,
        count: int,
        status: int = HTTPStatus.SERVICE_UNAVAILABLE,
        retry_after: float | None = 0,
    ) -> None:
        """Answer the next ``count`` trace requests with ``status`` instead of accepting them.

        ``retry_after`` (seconds) is sent as a ``Retry-After`` header, which the OTLP exporter
        uses as its backoff for retryable statuses (429, 502, 503, 504); the default ``0`` makes
        retries immediate. ``None`` sends no header, so the exporter's exponential backoff
        (about 1 s, 2 s, 4 s, ...) applies.
        """
        if count < 0:
            raise ValueError("count must be >= 0")
        with self._state.lock:
            self._state.fail_remaining = count
            self._state.fail_status = int(status)
            self._state.fail_retry_after = retry_after

    def clear(self) -> None:
        """Forget received spans and requests and cancel pending injected failures."""
        with self._state.lock:
            self._state.spans.clear()
            self._state.requests.clear()
            self._state.fail_remaining = 0

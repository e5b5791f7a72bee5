"""Reading OTLP/JSON trace files with protobuf's own JSON parser.

Accepts what is found in the wild: the OTLP/JSON body of an export (``{"resourceSpans": ...}``),
one such document per line (the Collector's ``file`` exporter), or a JSON array of them; ids in
hex (OTLP/JSON) or base64 (protobuf's generic JSON mapping). Everything else protobuf's
``json_format`` handles as the JSON mapping defines it, against the OTLP messages of
``opentelemetry-proto`` (``TracesData``): lowerCamelCase or snake_case field names, 64-bit
integers as strings or numbers, enums as integers or names (``SPAN_KIND_CLIENT``), unknown
fields ignored. The one departure from the mapping, OTLP/JSON's hex ids, is undone before
parsing: a hex trace id is 32 characters and a hex span id 16, while the base64 of 16 or 8
bytes is 24 or 12, so the two forms cannot be confused.

Span kinds are the OTLP numbers (1 internal, 2 server, 3 client, ...), which differ from the
Python SDK's ``SpanKind`` values. Needs the ``otel`` extra (``opentelemetry-proto`` and
protobuf); without it :func:`parse_otlp_json` raises an ImportError naming the extra.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..errors import FormatError
from ..record.canonical import MAX_DEPTH, loads_untrusted, nesting_depth

__all__ = ["SPAN_KINDS", "OtlpEvent", "OtlpSpan", "parse_otlp_json"]

SPAN_KINDS = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
"""OTLP span kind names and numbers."""

_EXTRA = "pip install 'tachograph[otel]'"
# What json_format can raise on hostile input besides its ParseError: every one of them is
# a FormatError to the caller.
_PARSE_ERRORS: tuple[type[Exception], ...] = (
    TypeError,
    ValueError,
    AttributeError,
    KeyError,
    IndexError,
    OverflowError,
    RecursionError,
)
_HEX = frozenset("0123456789abcdefABCDEF")
_ID_SIZES = {
    "traceId": 16,
    "trace_id": 16,
    "spanId": 8,
    "span_id": 8,
    "parentSpanId": 8,
    "parent_span_id": 8,
}


@dataclass(frozen=True)
class OtlpEvent:
    """A span event."""

    name: str
    time_ns: int
    attributes: Mapping[str, Any]


@dataclass(frozen=True)
class OtlpSpan:
    """One span, decoded to plain values; ids are lower-case hex."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    events: tuple[OtlpEvent, ...] = ()
    status_code: int = 0
    status_message: str = ""
    resource: Mapping[str, Any] = field(default_factory=dict)


def _proto() -> tuple[Any, Any]:
    """protobuf's ``json_format`` and OTLP's ``trace_pb2``, or an ImportError naming the extra."""
    try:
        from google.protobuf import json_format
        from opentelemetry.proto.trace.v1 import trace_pb2
    except ImportError as exc:
        missing = exc.name or "opentelemetry-proto"
        raise ImportError(
            f"reading OTLP/JSON needs the 'otel' extra ({missing} is not installed): {_EXTRA}",
            name=exc.name,
        ) from exc
    return json_format, trace_pb2


# -- hex ids to the JSON mapping's base64 ---------------------------------------------------


def _b64_id(value: Any, size: int) -> Any:
    """A hex id of ``size`` bytes as base64 (what ``json_format`` reads); anything else is
    left for the parser to accept (base64) or refuse."""
    if isinstance(value, str) and len(value) == size * 2 and set(value) <= _HEX:
        return base64.b64encode(bytes.fromhex(value)).decode("ascii")
    return value


def _with_ids(span: Any) -> Any:
    if not isinstance(span, Mapping):
        return span
    out = {k: _b64_id(v, _ID_SIZES[k]) if k in _ID_SIZES else v for k, v in span.items()}
    links = out.get("links")
    if isinstance(links, list):
        out["links"] = [
            {k: _b64_id(v, _ID_SIZES[k]) if k in _ID_SIZES else v for k, v in link.items()}
            if isinstance(link, Mapping)
            else link
            for link in links
        ]
    return out


def _each(node: Mapping[str, Any], camel: str, snake: str) -> tuple[str, Any]:
    key = camel if camel in node else snake
    return key, node.get(key)


def _hex_to_base64(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` with the span and link ids in base64; the rest as it is (shapes are the
    parser's to judge)."""
    out = dict(doc)
    key, resource_spans = _each(doc, "resourceSpans", "resource_spans")
    if not isinstance(resource_spans, list):
        return out
    new_rs = []
    for rs in resource_spans:
        if isinstance(rs, Mapping):
            rs = dict(rs)
            skey, scopes = _each(rs, "scopeSpans", "scope_spans")
            if isinstance(scopes, list):
                new_scopes = []
                for ss in scopes:
                    if isinstance(ss, Mapping) and isinstance(ss.get("spans"), list):
                        ss = {**ss, "spans": [_with_ids(span) for span in ss["spans"]]}
                    new_scopes.append(ss)
                rs[skey] = new_scopes
        new_rs.append(rs)
    out[key] = new_rs
    return out


# -- protobuf messages to plain values ------------------------------------------------------


def _any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` message as a plain value (``None`` when unset)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    if kind == "int_value":
        return int(value.int_value)
    if kind == "double_value":
        number = float(value.double_value)
        # NaN and infinities have no JSON form in the record: kept as their names
        return number if math.isfinite(number) else str(number)
    if kind == "bytes_value":
        return bytes(value.bytes_value)
    return getattr(value, kind)


def _attributes(items: Any) -> dict[str, Any]:
    """A repeated ``KeyValue`` as a dict (later keys win)."""
    return {item.key: _any_value(item.value) for item in items}


def _id(raw: bytes, size: int, what: str) -> str | None:
    """An id as lower-case hex; ``None`` when empty or all zeros (OTLP's "no id")."""
    if not raw or raw == bytes(size):
        return None
    if len(raw) != size:
        raise FormatError(f"{what} {raw.hex()!r} is {len(raw)} bytes, not {size}")
    return raw.hex()


def _span(span: Any, resource: Mapping[str, Any]) -> OtlpSpan:
    trace_id = _id(span.trace_id, 16, "trace id")
    span_id = _id(span.span_id, 8, "span id")
    if trace_id is None or span_id is None:
        raise FormatError(f"span {span.name!r} has no trace id or span id")
    return OtlpSpan(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=_id(span.parent_span_id, 8, "parent span id"),
        name=span.name,
        kind=int(span.kind),
        start_ns=int(span.start_time_unix_nano),
        end_ns=int(span.end_time_unix_nano),
        attributes=_attributes(span.attributes),
        events=tuple(
            OtlpEvent(
                name=event.name,
                time_ns=int(event.time_unix_nano),
                attributes=_attributes(event.attributes),
            )
            for event in span.events
        ),
        status_code=int(span.status.code),
        status_message=span.status.message,
        resource=resource,
    )


def _documents(data: bytes | str | Any) -> Iterator[Any]:
    if not isinstance(data, (bytes, str)):
        yield data
        return
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    try:
        whole = orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    else:
        if nesting_depth(whole) > MAX_DEPTH:
            raise FormatError(
                f"the document nests deeper than {MAX_DEPTH} levels (SPEC section 2)",
                location="document",
            )
        yield whole
        return
    for number, line in enumerate(raw.splitlines(), 1):  # JSON Lines: one document per line
        if not line.strip():
            continue
        try:
            yield loads_untrusted(line, location=f"line {number}")
        except FormatError as exc:
            raise FormatError(str(exc), line=number) from None


def parse_otlp_json(data: bytes | str | Any) -> list[OtlpSpan]:
    """Every span in an OTLP/JSON traces document (or lines, or array, of documents)."""
    json_format, trace_pb2 = _proto()
    spans: list[OtlpSpan] = []
    number = 0
    for document in _documents(data):
        docs = document if isinstance(document, list) else [document]
        for doc in docs:
            number += 1
            where = f"document {number}"
            if not isinstance(doc, Mapping):
                raise FormatError(
                    "not an OTLP/JSON traces document (expected an object)", location=where
                )
            if "resourceSpans" not in doc and "resource_spans" not in doc:
                raise FormatError(
                    "not an OTLP/JSON traces document (no resourceSpans)", location=where
                )
            message = trace_pb2.TracesData()
            try:
                json_format.ParseDict(_hex_to_base64(doc), message, ignore_unknown_fields=True)
            except (*_PARSE_ERRORS, json_format.ParseError) as exc:
                # ParseError names the field path (resourceSpans[0].scopeSpans[0]...)
                text = " ".join(str(exc).split())[:300]
                raise FormatError(f"{where}: not valid OTLP/JSON: {text}", location=where) from None
            for i, rs in enumerate(message.resource_spans):
                resource = _attributes(rs.resource.attributes)
                for j, ss in enumerate(rs.scope_spans):
                    for k, span in enumerate(ss.spans):
                        try:
                            spans.append(_span(span, resource))
                        except FormatError as exc:
                            at = f"{where}: resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                            raise FormatError(f"{at}: {exc}", location=at) from None
    return spans

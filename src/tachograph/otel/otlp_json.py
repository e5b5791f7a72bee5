"""Reading OTLP/JSON trace files, without protobuf.

Accepts what is found in the wild: the OTLP/JSON body of an export (``{"resourceSpans": ...}``),
one such document per line (the Collector's ``file`` exporter), or a JSON array of them; ids in
hex (OTLP/JSON) or base64 (protobuf's generic JSON mapping); lowerCamelCase or snake_case field
names; 64-bit integers as strings or numbers; enums as integers or names
(``SPAN_KIND_CLIENT``). Span kinds are the OTLP numbers (1 internal, 2 server, 3 client, ...),
which differ from the Python SDK's ``SpanKind`` values.
"""

from __future__ import annotations

import base64
import binascii
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

_STATUS = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_HEX = frozenset("0123456789abcdefABCDEF")


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


def _get(node: Mapping[str, Any], camel: str, snake: str | None = None) -> Any:
    if camel in node:
        return node[camel]
    if snake is not None:
        return node.get(snake)
    return None


def _int(value: Any, where: str) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, bool):
        raise FormatError(f"{where}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise FormatError(f"{where}: expected an integer, got {value!r}")


def _id(value: Any, size: int, where: str) -> str | None:
    """A trace (16 bytes) or span (8 bytes) id from hex or base64, as lower-case hex."""
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise FormatError(f"{where}: an id must be a string, got {value!r}")
    if len(value) == size * 2 and set(value) <= _HEX:
        raw = bytes.fromhex(value)
    else:
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != size:
            raise FormatError(f"{where}: {value!r} is neither a hex nor a base64 id")
    if raw == bytes(size):
        return None
    return raw.hex()


def _enum(value: Any, names: Mapping[str, int], where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        if value in names:
            return names[value]
        raise FormatError(f"{where}: unknown value {value!r}")
    return _int(value, where)


def any_value(node: Any) -> Any:
    """An OTLP ``AnyValue`` as a plain value (``None`` when empty); a malformed one is a
    :class:`FormatError`, whatever its shape."""
    try:
        return _any_value(node)
    except (TypeError, ValueError, AttributeError, binascii.Error) as exc:
        if isinstance(exc, FormatError):
            raise
        raise FormatError(f"malformed attribute value {str(node)[:80]}: {exc}") from None


def _any_value(node: Any) -> Any:
    if not isinstance(node, Mapping):
        return None
    for camel, snake in (("stringValue", "string_value"), ("boolValue", "bool_value")):
        value = _get(node, camel, snake)
        if value is not None:
            return value
    value = _get(node, "intValue", "int_value")
    if value is not None:
        return _int(value, "intValue")
    value = _get(node, "doubleValue", "double_value")
    if value is not None:
        return float(value)
    value = _get(node, "bytesValue", "bytes_value")
    if value is not None:
        return base64.b64decode(value)
    value = _get(node, "arrayValue", "array_value")
    if value is not None:
        return [any_value(item) for item in value.get("values") or ()]
    value = _get(node, "kvlistValue", "kvlist_value")
    if value is not None:
        return attributes(value.get("values") or ())
    return None


def attributes(items: Any) -> dict[str, Any]:
    """A repeated ``KeyValue`` as a dict (later keys win)."""
    out: dict[str, Any] = {}
    if not isinstance(items, (list, tuple)):
        return out
    for item in items:
        if isinstance(item, Mapping) and isinstance(item.get("key"), str):
            out[item["key"]] = any_value(item.get("value"))
    return out


def _span(node: Mapping[str, Any], resource: Mapping[str, Any]) -> OtlpSpan:
    trace_id = _id(_get(node, "traceId", "trace_id"), 16, "traceId")
    span_id = _id(_get(node, "spanId", "span_id"), 8, "spanId")
    if trace_id is None or span_id is None:
        raise FormatError(f"span {node.get('name')!r} has no trace id or span id")
    status = _get(node, "status") or {}
    if not isinstance(status, Mapping):
        raise FormatError("status: expected an object")
    events = node.get("events") or ()
    if not isinstance(events, (list, tuple)):
        raise FormatError("events: expected an array")
    return OtlpSpan(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=_id(_get(node, "parentSpanId", "parent_span_id"), 8, "parentSpanId"),
        name=str(node.get("name") or ""),
        kind=_enum(node.get("kind"), SPAN_KINDS, "kind"),
        start_ns=_int(_get(node, "startTimeUnixNano", "start_time_unix_nano"), "startTime"),
        end_ns=_int(_get(node, "endTimeUnixNano", "end_time_unix_nano"), "endTime"),
        attributes=attributes(node.get("attributes")),
        events=tuple(
            OtlpEvent(
                name=str(ev.get("name") or ""),
                time_ns=_int(_get(ev, "timeUnixNano", "time_unix_nano"), "timeUnixNano"),
                attributes=attributes(ev.get("attributes")),
            )
            for ev in events
            if isinstance(ev, Mapping)
        ),
        status_code=_enum(status.get("code"), _STATUS, "status.code"),
        status_message=str(status.get("message") or ""),
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
    spans: list[OtlpSpan] = []
    for document in _documents(data):
        docs = document if isinstance(document, list) else [document]
        for doc in docs:
            if not isinstance(doc, Mapping):
                raise FormatError("not an OTLP/JSON traces document (expected an object)")
            resource_spans = _get(doc, "resourceSpans", "resource_spans")
            if resource_spans is None:
                raise FormatError("not an OTLP/JSON traces document (no resourceSpans)")
            for i, rs in _objects(resource_spans, "resourceSpans"):
                where = f"resourceSpans[{i}]"
                resource_node = rs.get("resource") or {}
                if not isinstance(resource_node, Mapping):
                    raise FormatError(f"{where}.resource: expected an object", location=where)
                resource = attributes(resource_node.get("attributes"))
                scopes = _get(rs, "scopeSpans", "scope_spans")
                for j, ss in _objects(scopes, f"{where}.scopeSpans"):
                    for k, node in _objects(ss.get("spans"), f"{where}.scopeSpans[{j}].spans"):
                        try:
                            spans.append(_span(node, resource))
                        except FormatError as exc:
                            at = f"{where}.scopeSpans[{j}].spans[{k}]"
                            raise FormatError(f"{at}: {exc}", location=at) from None
    return spans


def _objects(value: Any, where: str) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """The objects of a JSON array (absent: none); anything else is a typed error."""
    if value is None:
        return
    if not isinstance(value, (list, tuple)):
        raise FormatError(f"{where}: expected an array, got {type(value).__name__}", location=where)
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise FormatError(f"{where}[{index}]: expected an object", location=where)
        yield index, item

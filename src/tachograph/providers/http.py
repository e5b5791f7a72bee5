"""An HTTP exchange as the SDK integrations record it, and the provider body inside it.

An answer is ``{"status", "headers", ...}`` plus one of

* ``body``: the JSON body (parsed, so that it can be read, diffed and folded);
* ``events``: a server-sent-event stream, one ``{"event"?, "data", "id"?, "retry"?}`` per
  event, ``data`` parsed when it is a JSON object or array (``[DONE]`` stays text);
* ``text`` or ``base64``: any other body.

Serving it back re-encodes the same JSON values and the same events; the bytes can differ in
key order and number spelling (the record is canonical JSON), never in meaning.
:func:`response_body` reads the provider's own answer out of that envelope (a stream
assembled into the body a non-streaming call would have had), which is what every reader
other than the transport wants.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ..errors import ProfileError
from ..record.canonical import canonical

__all__ = [
    "body_bytes",
    "body_fields",
    "digest",
    "is_envelope",
    "json_or_none",
    "json_with_text_numbers",
    "parse_sse",
    "request_body",
    "response_body",
    "sse_bytes",
    "stream_error",
    "summary",
    "terminated",
    "without_boundary",
]


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def json_or_none(data: bytes) -> tuple[bool, Any]:
    """``(True, value)`` when ``data`` is JSON inside the record's value profile."""
    try:
        value = json.loads(data)
        canonical(value)
    except (ValueError, ProfileError, RecursionError):
        return False, None
    return True, value


_SAFE = 2**53 - 1


def json_with_text_numbers(data: bytes) -> tuple[Any, list[str]] | None:
    """``data`` as JSON whose numbers outside the record's profile (an integer beyond
    +-(2^53 - 1), such as a 64-bit seed; ``NaN``, ``Infinity``) are written as their text,
    with the JSON paths of those it wrote so; ``None`` when it is not JSON or is outside the
    profile in another way. For a request, which is recorded to be compared, never served:
    its model, messages and parameters stay readable instead of becoming a digest."""
    changed: list[str] = []

    def fit(value: Any, path: str) -> Any:
        if type(value) is int and abs(value) > _SAFE:
            changed.append(path)
            return str(value)
        if type(value) is float and (value != value or value in (float("inf"), float("-inf"))):
            changed.append(path)
            return repr(value).replace("inf", "Infinity").replace("nan", "NaN")
        if isinstance(value, dict):
            return {
                k: fit(v, f"{path}.{k}" if k.isidentifier() else f"{path}[{k!r}]")
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [fit(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    try:
        value = fit(json.loads(data), "$")
        canonical(value)
    except (ValueError, ProfileError, RecursionError):
        return None
    return value, changed


_BOUNDARY = "tachograph-boundary"


def without_boundary(content_type: str | None, content: bytes) -> tuple[str | None, bytes]:
    """A multipart body and its content type with the boundary, which the HTTP clients draw
    at random for every request, replaced by a fixed one: the same upload of the same bytes
    is then the same request in a replay (it differed in its digest every time)."""
    if not content_type or not content_type.lower().startswith("multipart/"):
        return content_type, content
    _, sep, rest = content_type.partition("boundary=")
    boundary = rest.split(";", 1)[0].strip().strip('"') if sep else ""
    if not boundary:
        return content_type, content
    return (
        content_type.replace(boundary, _BOUNDARY),
        content.replace(b"--" + boundary.encode("latin-1"), b"--" + _BOUNDARY.encode()),
    )


def body_fields(data: bytes) -> dict[str, Any]:
    """The body of an answer as record fields: ``body`` (JSON), ``text`` or ``base64``."""
    if not data:
        return {}
    ok, value = json_or_none(data)
    if ok:
        return {"body": value}
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def body_bytes(record: dict[str, Any]) -> bytes:
    if "body" in record:
        return json.dumps(record["body"], ensure_ascii=False, separators=(",", ":")).encode()
    if "text" in record:
        return str(record["text"]).encode("utf-8")
    if "base64" in record:
        return base64.b64decode(str(record["base64"]))
    return b""


def parse_sse(data: bytes) -> list[dict[str, Any]]:
    """Server-sent events as records: ``{"event"?, "data", "id"?, "retry"?}`` each.

    ``data`` is the parsed JSON when it is an object or an array, else the text as sent
    (``[DONE]``). Comment lines are dropped, as every SSE client ignores them. An event is
    complete only at the blank line that ends it: what follows the last blank line (a stream
    cut off in the middle of an event) was never dispatched to the SDK, and is not an event.
    """
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
    events: list[dict[str, Any]] = []
    fields: dict[str, str] = {}
    lines: list[str] = []

    def flush() -> None:
        if not fields and not lines:
            return
        event: dict[str, Any] = {}
        if "event" in fields:
            event["event"] = fields["event"]
        raw = "\n".join(lines)
        ok, value = json_or_none(raw.encode()) if raw[:1] in ("{", "[") else (False, None)
        event["data"] = value if ok and isinstance(value, (dict, list)) else raw
        for name in ("id", "retry"):
            if name in fields:
                event[name] = fields[name]
        events.append(event)
        fields.clear()
        lines.clear()

    # the piece after the last line break is an unfinished line, not a blank one
    for line in text.split("\n")[:-1]:
        if not line:
            flush()
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            lines.append(value)
        elif name in ("event", "id", "retry"):
            fields[name] = value
    # no flush(): an unfinished last event is dropped, as the SDKs drop it
    return events


def sse_bytes(event: dict[str, Any]) -> bytes:
    out = []
    if "event" in event:
        out.append(f"event: {event['event']}")
    if "id" in event:
        out.append(f"id: {event['id']}")
    if "retry" in event:
        out.append(f"retry: {event['retry']}")
    data = event.get("data", "")
    if not isinstance(data, str):
        data = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    out.extend(f"data: {line}" for line in data.split("\n"))
    return ("\n".join(out) + "\n\n").encode("utf-8")


def summary(record: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """The model that answered and the token usage, from a JSON body or a stream's events.

    Streams name the model on every chunk (chat completions), on ``response.*`` events
    (responses) or on ``message_start`` (messages); usage arrives in pieces and is merged.
    """
    if "events" in record:
        datas = [e.get("data") for e in record["events"]]
    else:
        datas = [record.get("body")]
    model: str | None = None
    usage: dict[str, Any] | None = None
    for data in datas:
        if not isinstance(data, dict):
            continue
        for part in (data, data.get("response"), data.get("message")):
            if not isinstance(part, dict):
                continue
            if model is None and isinstance(part.get("model"), str):
                model = part["model"]
            if isinstance(part.get("usage"), dict):
                usage = dict(usage or {})
                usage.update({k: v for k, v in part["usage"].items() if v is not None})
    return model, usage


_TERMINAL = frozenset(
    {"message_stop", "response.completed", "response.failed", "response.incomplete", "error"}
)


def terminated(data: bytes) -> bool:
    """Whether a stream read up to here had ended by its own protocol: the SDKs stop
    reading at ``[DONE]``, at the final event or at an error event, before the connection's
    end."""
    events = parse_sse(data)
    if not events:
        return False
    last = events[-1]
    return (
        last.get("data") == "[DONE]"
        or last.get("event") in _TERMINAL
        or stream_error({"events": events}) is not None
    )


def stream_error(record: dict[str, Any]) -> str | None:
    """The message of an error the provider sent inside a stream (HTTP 200), if it did.

    Anthropic sends ``event: error``; OpenAI a chunk whose data is ``{"error": {...}}``. The
    SDKs raise on it while reading the stream.
    """
    events = [e for e in record.get("events") or () if e.get("data") != "[DONE]"]
    if not events:
        return None
    last = events[-1]
    data = last.get("data")
    error = data.get("error") if isinstance(data, dict) else None
    if last.get("event") != "error" and not isinstance(error, dict):
        return None
    detail = error if isinstance(error, dict) else data
    message = detail.get("message") if isinstance(detail, dict) else None
    return str(message) if message else "an error event in the stream"


def is_envelope(value: Any) -> bool:
    """Whether ``value`` is an HTTP answer as the integrations record it."""
    return (
        isinstance(value, (dict, Mapping))
        and type(value.get("status")) is int
        and isinstance(value.get("headers", {}), (dict, Mapping))
        and any(k in value for k in ("body", "events", "text", "base64"))
    )


def request_body(payload: Mapping[str, Any]) -> Any:
    """The provider request of a ``model.request`` payload (the JSON body in either form)."""
    return payload.get("request")


def response_body(value: Any) -> Any:
    """The provider's answer inside a recorded ``response``: the JSON body of an HTTP
    envelope, a stream assembled into the body it stands for, or ``value`` itself when it is
    not an envelope (a function model's return value, an imported response)."""
    if not is_envelope(value):
        return value
    if "body" in value:
        return value["body"]
    if "events" in value:
        from . import anthropic, openai

        events = [e for e in value["events"] if isinstance(e, Mapping)]
        datas = [e.get("data") for e in events]
        objects = [d for d in datas if isinstance(d, dict)]
        if any(d.get("object") == "chat.completion.chunk" for d in objects):
            return openai.assemble_chat_stream(objects)
        if any(str(d.get("type", "")).startswith("response.") for d in objects):
            return openai.assemble_responses_stream(objects)
        if any(d.get("type") == "message_start" for d in objects):
            return anthropic.assemble_stream(objects)
        return None
    return value.get("text")

"""The httpx2-bound half of recording an HTTP exchange: headers and the answer record.

The record's shape and everything that reads it lives in :mod:`tachograph.providers.http`;
the names are re-exported here for the transport.
"""

from __future__ import annotations

from typing import Any

import httpx2

from ..providers.http import (
    body_bytes,
    body_fields,
    digest,
    json_or_none,
    json_with_text_numbers,
    parse_sse,
    sse_bytes,
    stream_error,
    summary,
    terminated,
)

__all__ = [
    "answer_record",
    "body_bytes",
    "body_fields",
    "digest",
    "headers_of",
    "is_sse",
    "json_or_none",
    "json_with_text_numbers",
    "parse_sse",
    "sse_bytes",
    "stream_error",
    "summary",
    "terminated",
]

# Framing of the live exchange: the body is recorded decoded, so these would lie on replay.
# set-cookie is dropped because a record is no place for session secrets.
_RESPONSE_DROP = frozenset(
    {"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"}
    | {"set-cookie"}
)


def is_sse(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").startswith("text/event-stream")


def headers_of(headers: httpx2.Headers) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers.multi_items():
        key = name.lower()
        if key in _RESPONSE_DROP:
            continue
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def answer_record(
    response: httpx2.Response, data: bytes, *, incomplete: bool = False
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "status": response.status_code,
        "headers": headers_of(response.headers),
    }
    if is_sse(response):
        record["events"] = parse_sse(data)
        if incomplete:
            record["incomplete"] = True
    else:
        record.update(body_fields(data))
    return record

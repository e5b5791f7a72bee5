"""Compiled helpers of ``tachograph.record`` (``native.c``): the answers of
``canonical._scan``, of the ``.0`` drop, of ``verify._row_plainly_well_formed``, of
``event.envelope_bytes``, of ``event._stored_event_py``, of ``canonical(orjson.loads(data))``
(``jcs``, None where it steps aside), of the common case of ``verify.LineChecker._feed_plain``
(``verify_row``), of ``event._format_ts_py``, of ``event._UlidSource``, of
``keycount.U64Set`` and of ``event.fresh_event``'s steps for a new event (``fresh``), at a
fraction of their cost."""

from collections.abc import Callable
from typing import Any

def scan(value: Any, /) -> int: ...
def drop_dot_zero(data: bytes, count: int, /) -> bytes | None: ...
def row_plain(row: tuple[Any, ...], /) -> bool: ...
def envelope(
    v: Any,
    tenant: Any,
    run_id: Any,
    seq: Any,
    event_id: Any,
    ts: Any,
    type: Any,
    actor: Any,
    trace_id: Any,
    span_id: Any,
    idempotency_key: Any,
    model: Any,
    seed: Any,
    payload_digest: Any,
    prev_hash: Any,
    /,
) -> bytes | None: ...
def bind_event(cls: type, names: tuple[str, ...], /) -> None: ...
def event(*fields: Any) -> Any: ...
def jcs(data: bytes, /) -> bytes | None: ...
def format_ts(ns: int, /) -> str: ...
def bind_hash(fn: Callable[[bytes], Any], /) -> None: ...
def bind_sha256(path: str | None, /) -> bool: ...
def sha256(data: bytes, /) -> bytes: ...
def hmac_pads(key: bytes, /) -> tuple[bytes, bytes] | None: ...
def hmac16(inner: bytes, outer: bytes, data: bytes, /) -> str | None: ...
def verify_many(
    items: list[Any], start: int, prev: Any, pos: int, run_id: Any, tenant: Any, /
) -> tuple[int, Any]: ...
def verify_row(
    row: tuple[Any, ...], prev: str | None, pos: int, run_id: Any, tenant: Any, /
) -> str | None: ...

class UlidSource:
    def __init__(self, draw: Callable[[int], bytes]) -> None: ...
    def next(self, ms: int, /) -> str: ...
    def forget(self) -> None: ...

class U64Set:
    def add(self, x: int, /) -> bool: ...
    def nbytes(self) -> int: ...
    def __len__(self) -> int: ...

def bind_fresh(
    sha256: Callable[[bytes], Any], dumps: Callable[[Any], bytes], ulids: UlidSource, /
) -> None: ...
def fresh(
    tenant: str,
    run_id: str,
    seq: int,
    type: str,
    actor: str,
    trace_id: str | None,
    span_id: str | None,
    idempotency_key: str | None,
    model: str | None,
    seed: int | None,
    prev_hash: str | None,
    payload: dict[str, Any],
    jcs: bytes,
    salt: bytes,
    /,
) -> Any: ...

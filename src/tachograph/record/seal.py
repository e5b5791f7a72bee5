"""The one write pipeline: turn steps into chained events (SPEC sections 3 to 5).

Every writer (the recorder, a corpus rewritten through processors, an OTLP import, an ingest
server) goes through a :class:`Sealer`, in this order:

1. **processors** (redaction) run on the payload, so that nothing below ever sees raw data;
2. **keys** (SPEC section 5) are derived from the *processed* arguments, under the run's key
   secret (an HMAC), so that the envelope, which can never be erased, cannot confirm a guess;
3. **canonical bytes** of the payload are computed once, then the salted digest, the envelope,
   its hash and the link to the previous event.

A sealer is pure: it draws randomness (salts, ids) but does no I/O and holds no thread.
Callers that share one across threads serialise :meth:`Sealer.seal` themselves.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final, TypeVar

import orjson

from .canonical import canonical
from .compiled import NATIVE
from .event import (
    ENVELOPE_KEYS,
    Event,
    EventType,
    check_actor,
    check_run_id,
    check_tenant,
    check_type,
    envelope_bytes,
    fresh_event,
    hash_envelope,
)
from .keycount import RepeatCounter

_dumps = orjson.dumps
_T = TypeVar("_T")

AS_STORED: Final = (
    orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
"""``orjson.dumps`` options giving a payload's bytes as the recorder stores them (in the
payload's own key order), except that anything but plain JSON types makes it raise."""
_contains_any: Callable[[bytes, Any], bool] | None = (
    NATIVE.contains_any if NATIVE is not None else None
)

# Plain-str event types: ``EventType.X.value`` is a Python-level property on 3.11, and
# these are read per recorded event.
_MODEL_REQUEST: Final = EventType.MODEL_REQUEST.value
_RUN_STARTED: Final = EventType.RUN_STARTED.value
_TOOL_REQUESTED: Final = EventType.TOOL_REQUESTED.value


__all__ = [
    "AS_STORED",
    "CASE_FOLDS",
    "HIDDEN",
    "KEY_SECRET_FIELD",
    "NO_PROCESSOR",
    "KeyDeriver",
    "Processor",
    "Sealer",
    "UntouchedWords",
    "default_key",
    "hide_key_secret",
    "key_args",
    "key_secret_of",
    "new_key_secret",
    "parse_default_key",
    "process_actor",
    "process_payload",
    "prompt_hash",
    "sha256_text",
    "stored_if_untouched",
    "stored_untouched",
    "trusts_untouched_unless",
    "untouched_bytes",
    "untouched_words",
    "with_prompt_hash",
]

Processor = Callable[[str, dict[str, Any]], dict[str, Any]]
"""``processor(event_type, payload) -> payload``: applied in order before anything is derived.

A processor of a class registered with :func:`trusts_untouched_unless` carries
``untouched_unless``: ``None``, or words (bytes, lower-case, filed by their first byte in
256 entries, as ``native.contains_any`` reads them) such that it hands back any ``dict``
payload itself, unchanged, when none of them occurs in :func:`untouched_bytes` of the
payload's ``orjson`` bytes. Where the compiled helpers are built, a run's only processor
(in a tuple), when its type is exactly such a class and it names words, is not called for
such a payload (:func:`process_payload`). The default secrets redactor is one (``Redactor``)."""

_UNTOUCHED_TYPES: set[type[Any]] = set()

CASE_FOLDS: Final = {"\u017f": "s", "\u0131": "i", "\u0130": "i", "\u212a": "k"}
"""The four letters outside ASCII that a case-insensitive Python pattern takes for ASCII
ones (the re module's documentation names them): LATIN SMALL LETTER LONG S for "s",
DOTLESS I and CAPITAL I WITH DOT ABOVE for "i", KELVIN SIGN for "k"."""
# the same in UTF-8, where none of these byte sequences can begin inside another character
_CASE_FOLDS: Final = tuple((k.encode(), v.encode()) for k, v in CASE_FOLDS.items())


def untouched_bytes(blob: bytes) -> bytes:
    """``blob`` (UTF-8) as the ``untouched_unless`` words are looked for in it: lower-cased
    in ASCII, and each letter outside ASCII that a case-insensitive pattern (``(?i)``) takes
    for an ASCII letter replaced by that letter. So ``"pa\u017fsword="`` holds
    ``password``, as the pattern that redacts it sees it. Bytes in ASCII, most payloads,
    are only lower-cased."""
    blob = blob.lower()
    return blob if blob.isascii() else _fold_cases(blob)


def _fold_cases(blob: bytes) -> bytes:
    for letter, ascii_letter in _CASE_FOLDS:
        if letter in blob:
            blob = blob.replace(letter, ascii_letter)
    return blob


def trusts_untouched_unless(cls: type[_T]) -> type[_T]:
    """Register ``cls`` (a class decorator): its instances' ``untouched_unless`` words are
    its own, and true of its ``__call__`` (see :data:`Processor`). Only this exact class:
    a subclass, or an object that forwards the attribute, is called as any processor is."""
    _UNTOUCHED_TYPES.add(cls)
    return cls


KEY_SECRET_FIELD = "key_secret"
"""Where the run's key secret sits in the ``run.started`` payload (SPEC section 5)."""


HIDDEN = "[hidden]"
"""What is shown in place of a run's key secret (``tacho show --full``)."""


def hide_key_secret(type_: str, payload: dict[str, Any], *, mark: bool = False) -> dict[str, Any]:
    """``payload`` as anything outside the log sees it: a ``run.started`` payload without its
    key secret (with ``mark``, with :data:`HIDDEN` in its place); any other payload as it is.

    The secret makes the keys in the envelopes HMACs (SPEC section 5): it must stay where an
    erasure can reach it, so processors, observers, telemetry and what a person reads never
    get it. Exports keep it (the payload digest commits to it, and a replay needs it).
    """
    if type_ != _RUN_STARTED or KEY_SECRET_FIELD not in payload:
        return payload
    shown = dict(payload)
    if mark:
        shown[KEY_SECRET_FIELD] = HIDDEN
    else:
        del shown[KEY_SECRET_FIELD]
    return shown


class _NoProcessor:
    """The type of :data:`NO_PROCESSOR`: one object, which no processor's words can be."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_PROCESSOR"


NO_PROCESSOR: Final = _NoProcessor()
"""What :func:`untouched_words` gives for no processor at all: every plain payload is
handed back untouched, no word to look for. An object of its own, so that no words a
processor names (an empty ``bytes`` among them) can be taken for it."""

UntouchedWords = tuple[tuple[bytes, ...] | None, ...]
"""A processor's ``untouched_unless`` words, as ``native.contains_any`` reads them: 256
entries, by first byte (see :data:`Processor`)."""


def untouched_words(processors: Sequence[Processor]) -> UntouchedWords | _NoProcessor | None:
    """The words :func:`stored_if_untouched` looks for in a payload of a run with these
    ``processors`` (other than ``run.started``), found once for a run's fixed tuple:
    :data:`NO_PROCESSOR` when there is none, the lone processor's ``untouched_unless``
    words (see :data:`Processor`) when it names them, else ``None``: the processors must
    be asked (several of them, one of another class, one that names no words, or no
    compiled helpers to look for words with). With :func:`stored_untouched`, the same test
    in one call per payload."""
    if not processors:
        return NO_PROCESSOR
    if type(processors) is not tuple or len(processors) != 1 or _contains_any is None:
        return None
    first = processors[0]
    words: UntouchedWords | None = (
        first.untouched_unless if type(first) in _UNTOUCHED_TYPES else None  # type: ignore[attr-defined]
    )
    return words


def stored_untouched(words: UntouchedWords | _NoProcessor, payload: dict[str, Any]) -> bytes | None:
    """``payload``'s bytes as stored when processors whose :func:`untouched_words` are
    ``words`` (not ``None``) hand it back untouched; else ``None`` (it is not plain JSON,
    or one of the words occurs: the processors must be asked)."""
    try:
        blob = _dumps(payload, option=AS_STORED)
        if words is NO_PROCESSOR:
            return blob
        low = blob.lower()  # untouched_bytes, inline: ASCII is most
        found = _contains_any(low if low.isascii() else _fold_cases(low), words)  # type: ignore[misc]
    except (TypeError, ValueError):
        # outside the plain types (the processor's own walk decides), or words of another
        # shape (contains_any refuses them): the processor is asked
        return None
    return None if found else blob


def stored_if_untouched(
    processors: Sequence[Processor], type_: str, payload: dict[str, Any]
) -> bytes | None:
    """``payload``'s bytes as stored (``orjson.dumps`` with :data:`AS_STORED`) when
    :func:`process_payload` hands it back itself without asking a processor: there is none,
    or a run's lone processor names its ``untouched_unless`` words (see :data:`Processor`)
    and none of them occurs in those bytes. ``None``: the processors must be asked, or the
    payload is not plain JSON.

    A caller that gets ``None`` passes the payload to :func:`process_payload` (which makes
    the same test again); one that gets bytes has the processed payload (the payload
    itself) and its stored form, which replay compares with the recorded one. A caller
    with one tuple of processors for many payloads finds their words once
    (:func:`untouched_words`) and tests each with :func:`stored_untouched`, as this
    function does for one."""
    words = untouched_words(processors)
    if words is None or (
        words is not NO_PROCESSOR and (type_ == _RUN_STARTED or type(payload) is not dict)
    ):
        return None
    return stored_untouched(words, payload)


def process_payload(
    processors: Sequence[Processor], type_: str, payload: dict[str, Any]
) -> dict[str, Any]:
    """``payload`` through every processor in order, the run's key secret kept away from
    them (a secrets detector would take it for an API key) and put back after them.

    A lone processor that names its ``untouched_unless`` words (see :data:`Processor`) is
    asked only about a payload in which one of them occurs: for the others its answer is
    the payload itself (:func:`stored_if_untouched`)."""
    if not processors or stored_if_untouched(processors, type_, payload) is not None:
        return payload
    secret = payload.get(KEY_SECRET_FIELD) if type_ == _RUN_STARTED else None
    if secret is not None:
        payload = hide_key_secret(type_, payload)
    for processor in processors:
        payload = processor(type_, payload)
    if secret is not None:
        payload = {**payload, KEY_SECRET_FIELD: secret}
    return payload


def process_actor(processors: Sequence[Processor], actor: str) -> str:
    """``actor`` as the processors that redact text leave it: each processor with a
    ``redact_text(text) -> text`` method (a :class:`~tachograph.privacy.Redactor` has one) is
    applied to it, in order. The actor is in every envelope, which erasure cannot reach (SPEC
    section 4): a person's e-mail given as the actor would otherwise stay for good."""
    for processor in processors:
        redact = getattr(processor, "redact_text", None)
        if redact is not None:
            actor = redact(actor)
    return actor


def new_key_secret() -> str:
    """16 bytes from the system's secure generator, as 32 lower-case hex characters."""
    return os.urandom(16).hex()


def key_secret_of(started_payload: Mapping[str, Any] | None) -> bytes | None:
    """The key secret recorded in a ``run.started`` payload, or ``None`` (an older run, or an
    erased payload)."""
    if not isinstance(started_payload, Mapping):
        return None
    text = started_payload.get(KEY_SECRET_FIELD)
    if not isinstance(text, str) or len(text) != 32:
        return None
    try:
        return bytes.fromhex(text)
    except ValueError:
        return None


def default_key(
    run_id: str, name: str, args_jcs: bytes, secret: bytes | None, repeat: int = 0
) -> str:
    """SPEC section 5: ``{run_id}:{name}:{h}`` with ``#{n}`` for the n-th repeat.

    ``h`` is the first 16 hex of ``HMAC-SHA256(secret, JCS(args))``; a run without a secret
    (recorded before the rule) used ``SHA-256(JCS(args))``.
    """
    base = f"{run_id}:{name}:{_key_hash(args_jcs, secret)}"
    return base if repeat == 0 else f"{base}#{repeat}"


_BLOCK = 64  # SHA-256's block size in bytes (RFC 2104's B)
_hmac_pads: Callable[[bytes], tuple[bytes, bytes] | None] | None = (
    NATIVE.hmac_pads if NATIVE is not None else None
)
_hmac16: Callable[[bytes, bytes, bytes], str | None] | None = (
    NATIVE.hmac16 if NATIVE is not None else None
)
_IPAD = bytes(b ^ 0x36 for b in range(256))  # XOR tables for translate()
_OPAD = bytes(b ^ 0x5C for b in range(256))


def _block_key(secret: bytes) -> bytes:
    """RFC 2104's K as one block: the secret (its SHA-256 when longer), padded with zeros."""
    key = hashlib.sha256(secret).digest() if len(secret) > _BLOCK else secret
    return key.ljust(_BLOCK, b"\0")


class _KeyHash:
    """``h`` of SPEC section 5 under one run's secret: the first 16 hex of
    ``HMAC-SHA256(secret, JCS(args))`` (RFC 2104), or of ``SHA-256(JCS(args))`` without one.

    A run derives thousands of keys under one secret, so the HMAC is keyed once: RFC 2104's
    inner and outer hashes, each already fed its padded key, are kept and copied per key
    (``H(K ^ opad || H(K ^ ipad || text))``). That is public ``hashlib`` only, and measured
    about 1.2 us a key against 2.8 us for copying a keyed ``hmac.HMAC`` (whose copy, update
    and hexdigest each go through Python frames) and more for ``hmac.new`` per call.
    ``tests/record/test_seal.py`` holds it to ``hmac.new`` for keys of every length class.
    """

    __slots__ = ("_compiled", "_pads")

    def __init__(self, secret: bytes | None) -> None:
        # the inner and outer hashes, each fed its padded key; None: no secret, plain SHA-256
        self._pads: tuple[Any, Any] | None = None
        # the same two as OpenSSL contexts, where the compiled helpers hash with OpenSSL
        # (native.hmac_pads): one compiled call per key instead of five hashlib steps
        self._compiled: tuple[bytes, bytes] | None = None
        if secret is not None:
            key = _block_key(secret)
            self._pads = (
                hashlib.sha256(key.translate(_IPAD)),
                hashlib.sha256(key.translate(_OPAD)),
            )
            if _hmac_pads is not None:
                self._compiled = _hmac_pads(key)

    @property
    def compiled(self) -> tuple[bytes, bytes] | None:
        """The keyed contexts for ``U64Set.hmac_key``, where the compiled helpers hash."""
        return self._compiled

    def __call__(self, args_jcs: bytes) -> str:
        compiled = self._compiled
        if compiled is not None:
            assert _hmac16 is not None
            fast = _hmac16(compiled[0], compiled[1], args_jcs)
            if fast is not None:
                return fast
        if self._pads is None:
            return hashlib.sha256(args_jcs).hexdigest()[:16]
        inner = self._pads[0].copy()
        inner.update(args_jcs)
        outer = self._pads[1].copy()
        outer.update(inner.digest())
        h: str = outer.hexdigest()
        return h[:16]


def _key_hash(args_jcs: bytes, secret: bytes | None) -> str:
    """``h`` of one key, outside a run's deriver (the one definition is :class:`_KeyHash`)."""
    return _KeyHash(secret)(args_jcs)


def parse_default_key(key: str, run_id: str) -> tuple[str, str, int] | None:
    """``(name, h, repeat)`` of a key in SPEC section 5's default form for ``run_id``, or
    ``None`` (a tool's own key, or a key of another run)."""
    prefix = run_id + ":"
    if not key.startswith(prefix):
        return None
    name, sep, tail = key[len(prefix) :].rpartition(":")
    if not sep or not name:
        return None
    h, hashsep, count = tail.partition("#")
    if len(h) != 16 or any(c not in "0123456789abcdef" for c in h):
        return None
    if hashsep and (not (count.isascii() and count.isdigit()) or count.startswith("0")):
        return None
    return name, h, int(count) if hashsep else 0


def key_args(type_: str, payload: Mapping[str, Any]) -> Any:
    """What the default key of a call is derived from, in its (processed) request payload:
    a tool's ``args``; a model call's ``request`` when it is an object, else its ``http`` and
    ``request`` (an HTTP transport's request); ``None`` for any other type."""
    if type_ == _TOOL_REQUESTED:
        return payload.get("args")
    if type_ == _MODEL_REQUEST:
        request = payload.get("request")
        if isinstance(request, dict):
            return request
        return {k: payload[k] for k in ("http", "request") if k in payload}
    return None


def sha256_text(text: str) -> str:
    """``"sha256:" + hex(SHA-256(text as UTF-8))``: how prompts are fingerprinted."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def prompt_hash(request: Any) -> str | None:
    """The fingerprint of the system prompt in a request, if one can be found.

    Looks for ``system`` (Anthropic), ``instructions`` (OpenAI responses) or the first
    ``system``/``developer`` message; the hash is of the prompt text, as in SPEC's vectors.
    """
    if not isinstance(request, dict):
        return None
    for key in ("system", "instructions"):
        value = request.get(key)
        if isinstance(value, str):
            return sha256_text(value)
        if isinstance(value, list) and value:  # Anthropic's system given as content blocks
            return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()
    for message in request.get("messages") or request.get("input") or ():
        if isinstance(message, dict) and message.get("role") in ("system", "developer"):
            content = message.get("content")
            if isinstance(content, str):
                return sha256_text(content)
            return "sha256:" + hashlib.sha256(canonical(content)).hexdigest()
    return None


def with_prompt_hash(payload: dict[str, Any]) -> dict[str, Any]:
    """A (processed) ``model.request`` payload with its ``prompt_hash`` derived from its
    request as it now is; without one when none can be found. Changes ``payload``."""
    hashed = prompt_hash(payload.get("request"))
    if hashed is not None:
        payload["prompt_hash"] = hashed
    else:
        payload.pop("prompt_hash", None)
    return payload


class KeyDeriver:
    """The idempotency keys of one run, counting repeats (``#1``, ``#2``, ...).

    Not thread-safe by itself: the session that owns it takes a lock around :meth:`key`.
    """

    def __init__(self, run_id: str, secret: bytes | None) -> None:
        self.run_id = run_id
        self._secret = secret
        self._hash = _KeyHash(secret)
        # what a base is, in a few bytes: (name, h) for a default key, a digest for a custom
        # one; a full dict of base strings cost about 134 bytes per call for the whole run
        self._counts = RepeatCounter()
        # fresh_key's: the compiled keyed hash's two contexts, and per tool name its key
        # prefix and its set of h (the RepeatCounter's own)
        self._compiled = self._hash.compiled
        self._first: dict[str, tuple[str, Any]] = {}  # Any: native.U64Set

    @property
    def secret(self) -> bytes | None:
        """The run's key secret (read-only: the keyed hash is prepared from it once)."""
        return self._secret

    def key(
        self,
        name: str,
        args: Any,
        *,
        custom: Callable[[Any], Any] | None = None,
        args_jcs: bytes | None = None,
    ) -> str:
        """The key of a call of ``name`` with (processed) ``args``; ``custom`` derives the
        tool's own key part from the arguments instead."""
        if custom is not None:
            base = f"{self.run_id}:{name}:{custom(args)}"
            n = self._counts.custom(base)
        else:
            body = args_jcs if args_jcs is not None else canonical(args)
            h = self._hash(body)
            base = f"{self.run_id}:{name}:{h}"
            n = self._counts.default(name, int(h, 16))
        return base if n == 0 else f"{base}#{n}"

    def fresh_key(self, name: str, args_jcs: bytes) -> str | None:
        """The default key of a call of ``name`` whose processed arguments' JCS is
        ``args_jcs``, in one compiled step, when it is the first with those arguments (the
        common call); ``None`` when it is a repeat or nothing is compiled, and :meth:`key`
        numbers it. Safe without the session's lock: the only change it makes, the count of
        ``h``, happens inside one compiled call, and a repeat is left to :meth:`key` (under
        the lock), which finds ``h`` counted once already."""
        compiled = self._compiled
        if compiled is None:
            return None
        first = self._first.get(name)
        if first is None:
            # the compiled U64Set, as every table is wherever the contexts are compiled
            table: Any = self._counts.table(name)
            first = self._first[name] = (f"{self.run_id}:{name}:", table)
        key: str | None = first[1].hmac_key(compiled[0], compiled[1], args_jcs, first[0])
        return key

    def observe(self, name: str, h: str) -> None:
        """Count a default key issued before without deriving it (an erased request, whose
        arguments are gone), so that the repeats after it are numbered as recorded."""
        self._counts.default(name, int(h, 16))


_REQUESTS = frozenset({_TOOL_REQUESTED, _MODEL_REQUEST})


class Sealer:
    """Builds the events of one run in order: processors, then keys, digest, envelope, hash,
    link.

    ``head`` is ``(seq, hash)`` of the run's last event when the run goes on (a resume).
    """

    def __init__(
        self,
        *,
        run_id: str,
        actor: str,
        tenant: str = "default",
        processors: Sequence[Processor] = (),
        head: tuple[int, str] | None = None,
    ) -> None:
        self.run_id = check_run_id(run_id)
        self.tenant = check_tenant(tenant)
        self.processors = tuple(processors)
        self.actor = check_actor(process_actor(self.processors, check_actor(actor)))
        self._actors: dict[str, str] = {actor: self.actor}  # an event's own actor, processed
        self.next_seq = 0 if head is None else head[0] + 1
        self.head_hash: str | None = None if head is None else head[1]
        self._checked_types: set[str] = set()
        # reseal only: the run's keys derived again (from its run.started key secret) and
        # what each recorded key became, for the completions that carry it
        self._keys: KeyDeriver | None = None
        self._rekeyed: dict[str, str] = {}

    def process(self, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The payload as it will be stored: every processor applied, in order.

        The key secret of ``run.started`` is not shown to processors
        (:func:`process_payload`).
        """
        return process_payload(self.processors, type_, payload)

    def seal(
        self,
        type_: str,
        payload: dict[str, Any],
        *,
        processed: bool = False,
        actor: str | None = None,
        idempotency_key: str | None = None,
        model: str | None = None,
        seed: int | None = None,
        trace_id: str | None = None,
        span_id: str | None = None,
        ts: str | None = None,
        event_id: str | None = None,
        salt: bytes | None = None,
    ) -> Event:
        """The next event of the run. ``processed=True`` says the payload already went
        through :meth:`process` (the capture boundary processes before deriving keys)."""
        body = payload if processed else self.process(type_, payload)
        return self.next_event(
            type_, body, actor, idempotency_key, model, seed, trace_id, span_id, ts, event_id, salt
        )

    def next_event(
        self,
        type_: str,
        payload: dict[str, Any],
        actor: str | None,
        idempotency_key: str | None,
        model: str | None,
        seed: int | None,
        trace_id: str | None,
        span_id: str | None,
        ts: str | None = None,
        event_id: str | None = None,
        salt: bytes | None = None,
    ) -> Event:
        """:meth:`seal` of a processed payload, its arguments in order (the recorder's call,
        once per event)."""
        if type_ not in self._checked_types:
            check_type(type_)
            self._checked_types.add(type_)
        if actor is not None and actor != self.actor:
            actor = self.actor_of(actor)
        event = fresh_event(  # new_event(..., checked=True): the run's fields are checked
            self.run_id,
            self.next_seq,
            type_,
            actor or self.actor,
            payload,
            self.head_hash,
            self.tenant,
            trace_id,
            span_id,
            idempotency_key,
            model,
            seed,
            ts,
            event_id,
            salt,
            None,
        )
        self.next_seq += 1
        self.head_hash = event.hash
        return event

    def actor_of(self, actor: str) -> str:
        """An event's own actor as it is stored: checked, then processed as the run's actor
        is (:func:`process_actor`)."""
        stored = self._actors.get(actor)
        if stored is None:
            stored = check_actor(process_actor(self.processors, check_actor(actor)))
            if len(self._actors) < 256:  # a run names a few actors; more are not kept
                self._actors[actor] = stored
        return stored

    def reseal(self, event: Event) -> Event:
        """``event`` as the next event of this run, its payload processed again, as a
        recording through these processors would have stored it.

        What a recording derives from the processed data is derived again from it: the
        default idempotency keys (SPEC section 5, under the key secret of the run's
        ``run.started``, which must be resealed first; a completion takes its request's new
        key) and the prompt hash of a model request. The digest, link and hash are
        recomputed; every other envelope field and the salt are kept, so that the run reads
        as the same run and resealing it twice gives the same events. A tool's own key is
        kept as given (SPEC section 5). An erased event keeps its digest and is only
        re-linked (and re-keyed, when it is a completion). The event itself is returned when
        nothing of it changes."""
        if event.erased:
            return self._relink(event)
        assert event.payload is not None
        assert event.salt is not None
        payload = self.process(event.type, dict(event.payload))
        if event.type == _RUN_STARTED:
            self._keys = KeyDeriver(self.run_id, key_secret_of(payload))
        elif event.type == _MODEL_REQUEST and "prompt_hash" in payload:
            payload = with_prompt_hash(dict(payload))
        key = self._rekey(event, payload)
        if (
            key == event.idempotency_key
            and event.seq == self.next_seq
            and event.prev_hash == self.head_hash
            and event.run_id == self.run_id
            and payload == event.payload
            and self.actor_of(event.actor) == event.actor
        ):
            self.next_seq += 1
            self.head_hash = event.hash
            return event
        return self.seal(
            event.type,
            payload,
            processed=True,
            actor=event.actor,
            idempotency_key=key,
            model=event.model,
            seed=event.seed,
            trace_id=event.trace_id,
            span_id=event.span_id,
            ts=event.ts,
            event_id=event.event_id,
            salt=bytes.fromhex(event.salt),
        )

    def _relink(self, event: Event) -> Event:
        key = event.idempotency_key
        if key is not None and self._keys is not None:
            if event.type in _REQUESTS:
                # its arguments are gone: the key stays, and counts for the repeats after it
                parsed = parse_default_key(key, event.run_id)
                if parsed is not None:
                    self._keys.observe(parsed[0], parsed[1])
            else:
                key = self._rekeyed.get(key, key)
        actor = self.actor_of(event.actor)  # an envelope field, which the erasure left
        if (
            key == event.idempotency_key
            and (event.seq, event.prev_hash) == (self.next_seq, self.head_hash)
            and actor == event.actor
        ):
            rebuilt = event
        else:
            linked = replace(
                event,
                seq=self.next_seq,
                prev_hash=self.head_hash,
                idempotency_key=key,
                actor=actor,
            )
            values = [getattr(linked, k) for k in ENVELOPE_KEYS]
            rebuilt = replace(linked, hash=hash_envelope(envelope_bytes(*values)))
        self.next_seq += 1
        self.head_hash = rebuilt.hash
        return rebuilt

    def _rekey(self, event: Event, processed: dict[str, Any]) -> str | None:
        """The key of ``event`` once its payload is ``processed``: a default key derived
        again from the processed arguments, a completion's the new key of its request."""
        key = event.idempotency_key
        if key is None or self._keys is None:
            return key
        if event.type not in _REQUESTS:
            return self._rekeyed.get(key, key)
        parsed = parse_default_key(key, event.run_id)
        assert event.payload is not None
        raw = key_args(event.type, event.payload)
        if parsed is None or raw is None:
            return key
        name, h, _repeat = parsed
        raw_jcs = canonical(raw)
        if h not in (_key_hash(raw_jcs, self._keys.secret), _key_hash(raw_jcs, None)):
            return key  # a tool's own key that happens to look like a default one
        fresh = self._keys.key(name, key_args(event.type, processed))
        self._rekeyed[key] = fresh
        return fresh

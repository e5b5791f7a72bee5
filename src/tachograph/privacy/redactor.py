"""Redaction processors: rules by JSON path and detectors, applied to every payload.

A :class:`Redactor` is a recording processor (``(event_type, payload) -> payload``): a pure
function of its input for a given key ring, which never mutates its input and returns the
input object itself when nothing in it changed. It is idempotent, so that running it again
over processed data (a replay comparing, an import) changes nothing: tokens and markers are
recognised and left alone.

What a match becomes:

* personal data (``email``, ``phone``, ``card``, ``iban``, ``ip``, and :class:`Rule` values
  with ``action="token"``): the keyed token ``pii1:<key id>:<16 hex of HMAC-SHA256>``, stable
  per key, so joins and replay matching work;
* secrets (API keys, bearer tokens, JWTs, private keys, password fields): the fixed marker
  ``[redacted:secret:<kind>]``. A secret needs no join, a marker needs no key (so secrets are
  redacted in every recording, configured or not), it matches itself in a replay in any
  process, and no one, not even the key holder, can run a dictionary of passwords against it.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import orjson

from ..errors import PrivacyError
from ..record.canonical import canonical
from ..record.compiled import NATIVE
from ..record.event import Event
from ..record.seal import CASE_FOLDS, Processor, trusts_untouched_unless, untouched_bytes
from .detectors import DETECTORS, PII_KINDS, SECRET_FIELDS, SECRET_KINDS, Detector, card_digits
from .keys import TOKEN_PATTERN, KeyRing

__all__ = [
    "ENV_POLICY",
    "Finding",
    "Redactor",
    "Rule",
    "RuleAction",
    "default_processors",
    "pii_policy",
    "pin_processors",
    "redact_secrets",
    "secret_name",
    "under_every_key",
]

ENV_POLICY = "TACHOGRAPH_PII"
"""``on`` (or ``1``, ``true``, ``yes``): every recording, replay and import in the process uses
:func:`pii_policy` with the key ring of the environment."""

_ON = frozenset({"1", "true", "yes", "on"})

_KEEP = r"pii1:[A-Za-z0-9._-]{1,32}:[0-9a-f]{16}|\[redacted:[A-Za-z0-9._:-]{1,64}\]"
_KEEP_FULL = re.compile(_KEEP)
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")


class RuleAction(str, enum.Enum):
    """What a :class:`Rule` does to the value at its path."""

    TOKEN = "token"
    """Replace it with a keyed token (joins still work; needs a key ring)."""
    REDACT = "redact"
    """Replace it with the marker ``[redacted:<kind>]``."""
    DROP = "drop"
    """Remove the key (in an array: replace the element with null, keeping positions)."""

    @classmethod
    def parse(cls, value: str | RuleAction) -> RuleAction:
        """The action named by ``value``, or fail listing the valid names."""
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(repr(a.value) for a in cls)
            raise PrivacyError(f"unknown rule action {value!r}; expected one of {valid}") from None


_SEGMENT = re.compile(
    r"\.\.(?P<desc>[A-Za-z_][\w-]*|\*)|\.(?P<key>[A-Za-z_][\w-]*|\*)|\[(?P<index>\d+|\*)\]"
    r"|\[(?P<q>['\"])(?P<quoted>.*?)(?P=q)\]"
)

Segment = tuple[str, Any]  # ("key", name) ("index", n) ("any", None) ("desc", name | None)


def _parse_path(path: str) -> tuple[Segment, ...]:
    if not path.startswith("$"):
        raise PrivacyError(f"rule path {path!r}: a path starts with '$' (e.g. '$.args.email')")
    segments: list[Segment] = []
    pos = 1
    while pos < len(path):
        m = _SEGMENT.match(path, pos)
        if m is None:
            raise PrivacyError(
                f"rule path {path!r}: cannot read {path[pos:]!r} (use .name, ..name, [n], [*], "
                "['name'])"
            )
        if m["desc"] is not None:
            segments.append(("desc", None if m["desc"] == "*" else m["desc"]))
        elif m["key"] is not None:
            segments.append(("any", None) if m["key"] == "*" else ("key", m["key"]))
        elif m["index"] is not None:
            segments.append(("any", None) if m["index"] == "*" else ("index", int(m["index"])))
        else:
            segments.append(("key", m["quoted"]))
        pos = m.end()
    if not segments:
        raise PrivacyError(f"rule path {path!r} names the whole payload; name a field in it")
    return tuple(segments)


@dataclass(frozen=True)
class Rule:
    """Redact the value at a JSON path of the payload, whatever it looks like.

    ``path``: ``$.args.customer_email``, ``$.request.messages[*].content``, ``$..email``
    (any depth), ``$.args['full name']``. ``types``: only in events of these types (default:
    every type). ``kind`` names the value in markers (``[redacted:<kind>]``).
    """

    path: str
    action: RuleAction | str = RuleAction.TOKEN
    kind: str = "field"
    types: tuple[str, ...] = ()
    segments: tuple[Segment, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "action", RuleAction.parse(self.action))
        object.__setattr__(self, "types", tuple(self.types))
        object.__setattr__(self, "segments", _parse_path(self.path))
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,32}", self.kind):
            raise PrivacyError(f"rule kind {self.kind!r}: expected 1-32 chars of [A-Za-z0-9._-]")


@dataclass(frozen=True)
class Finding:
    """One sensitive value found by :meth:`Redactor.scan` (the value itself is not kept)."""

    kind: str
    path: str
    secret: bool


class _Engine:
    """The compiled detectors of one (kinds, secrets) choice: one combined pattern."""

    def __init__(self, kinds: frozenset[str], secrets: bool) -> None:
        chosen = [d for d in DETECTORS if (d.kind in kinds) or (secrets and d.secret)]
        parts = [f"(?P<keep>{_KEEP})"]
        self.by_group: dict[str, Detector] = {}
        self.value_group: dict[str, str] = {}
        for i, d in enumerate(chosen):
            body = d.pattern
            if "(?P<v>" in body:
                body = body.replace("(?P<v>", f"(?P<v{i}>")
                self.value_group[f"d{i}"] = f"v{i}"
            parts.append(f"(?P<d{i}>{body})")
            self.by_group[f"d{i}"] = d
        self.pattern = re.compile("|".join(parts))
        # The combined pattern costs about a microsecond per character; most text holds no
        # hint at all, and substring tests (on the lower-cased text) reject it much faster.
        self.hints = tuple(
            dict.fromkeys(h.lower() for d in chosen for h in (*d.hints, *d.hints_lower))
        )
        # ... in one search of the text's UTF-8 bytes for all of them (a trie, _any_of):
        # some five times faster than a substring test per hint, with the whitespace forms of
        # "token" among them. UTF-8 keeps "occurs in" (no code's bytes begin inside
        # another's); "surrogatepass" encodes a lone surrogate as its own three bytes.
        self.hint_pattern = _any_of(h.encode() for h in self.hints) if self.hints else None
        self.digits = any(not d.hints and not d.hints_lower for d in chosen)
        # an IPv6 address may hold no digit at all ("dead:beef::cafe"); its pattern needs
        # a colon, up to four hex digits and another colon
        self.colons = any(d.kind == "ip" for d in chosen)
        self.enabled = bool(chosen)
        self.cards = "card" in kinds
        # Whole-payload pre-check: the hints, a few substrings of the secret field names, and
        # every one of those names. A key is a secret field when its lower-case form is one
        # (_secret_field), so the payload's bytes, as untouched_bytes() gives them (lower-cased,
        # the KELVIN SIGN made a "k" as str.lower() makes it), hold that name. (A shorter list
        # of names missed "privatekey" and "private-key", which were stored as given in a
        # payload with no other hint.)
        # Each word also as orjson writes it inside a string: the hint 'token"' stands in the
        # bytes as 'token\\"' (a string holding JSON text with a "token" key was stored as
        # given). Hints are ASCII and lower-case; the case-insensitive patterns also take
        # four letters outside ASCII for ASCII ones ("pa\u017fsword=" is a password
        # assignment to them), and untouched_bytes() and maybe() fold those onto the hints'.
        # ('token"' and "credential": a key that ends so, as secret_name() takes it; 'token"'
        # and not "token", which every model answer's usage holds as "tokens")
        fields: tuple[str, ...] = (
            "pass", "pwd", "secret", "api", "authorization", "cookie", 'token"', "credential",
            "bearer", "private",
        )  # fmt: skip
        fields += tuple(sorted(SECRET_FIELDS))
        words = self.hints + (fields if secrets else ())
        blob_hints = _fewest(
            _cut(form) for h in words for form in (h.encode(), orjson.dumps(h)[1:-1])
        )
        # one pass over the bytes for all of them: some six times faster than a substring
        # test per word (there are about sixty). Compiled (native.contains_any, words by first
        # byte) where the helpers serve: about a tenth of the pattern's cost on the short
        # payloads of most events; else one regular expression of them all.
        self.blob_words = tuple(blob_hints)
        compiled = bool(self.blob_words) and _contains_any is not None
        self.blob_table = _by_first_byte(self.blob_words) if compiled else None
        self.blob_pattern = _any_of(self.blob_words) if self.blob_words and not compiled else None

    def clean(self, payload: dict[str, Any]) -> bool:
        """True when no string of ``payload`` can hold a match: one serialization and a few
        substring tests instead of a walk, for the common payload with nothing to redact."""
        if self.digits:
            return False  # personal data: digits are everywhere, walk
        try:
            blob = untouched_bytes(orjson.dumps(payload))
        except TypeError:  # outside the profile: the recorder will say so; walk meanwhile
            return False
        if self.blob_table is not None:
            assert _contains_any is not None
            return not _contains_any(blob, self.blob_table)
        return self.blob_pattern is None or self.blob_pattern.search(blob) is None

    def maybe(self, text: str) -> bool:
        """False when ``text`` cannot hold a match (no hint, no digit where one is needed)."""
        if not self.enabled:
            return False
        if self.digits and (
            _ASCII_DIGIT.search(text) is not None
            or (not text.isascii() and _DIGIT.search(text) is not None)
            or (self.colons and ":" in text and _IPV6.search(text) is not None)
        ):
            return True
        pattern = self.hint_pattern
        if pattern is None:
            return False
        if not text.isascii():
            # the letters a case-insensitive pattern takes for ASCII ones, as those
            text = text.translate(_CASE_FOLDS)
        return pattern.search(text.lower().encode("utf-8", "surrogatepass")) is not None


# The strings a redactor's table of unchanged ones holds (Redactor._text): of at most this
# many characters (the keys and short values a run repeats), at most this many of them
_UNCHANGED_CHARS = 256
_UNCHANGED_MAX = 4096

# a digit as the detectors' \d sees one: any decimal digit (Arabic-Indic, Devanagari,
# fullwidth...), not only 0-9; a phone number written in Arabic-Indic digits is one
_DIGIT = re.compile(r"\d")
_ASCII_DIGIT = re.compile(r"[0-9]")  # the same in ASCII text, where a class is cheaper
# what every IPv6 address the ip detector finds holds: two of its groups' colons
_IPV6 = re.compile(r":[0-9A-Fa-f]{0,4}:")
# CASE_FOLDS for str.translate (str.lower() would make U+0130 an "i" and a combining dot,
# and leave U+017F and U+0131 as they are)
_CASE_FOLDS = str.maketrans(CASE_FOLDS)
# what a secret field's value may be to be replaced whole (not null, not a boolean)
_SECRET_VALUE_TYPES = (str, int, float, list, dict)


_DELTA_KEYS = frozenset(
    {"content", "text", "delta", "arguments", "partial_json", "refusal", "thinking", "reasoning"}
)
"""The keys under which a streamed answer's events carry pieces of text."""


def _deltas(
    value: Any,
    path: tuple[Any, ...],
    index: int,
    streams: dict[tuple[Any, ...], list[tuple[int, tuple[Any, ...], str]]],
) -> None:
    """File each delta text of one stream event under its place (its path: the same place
    in every event is one stream, ``choices[1]`` apart from ``choices[0]``)."""
    if type(value) is dict:
        for key, item in value.items():
            if type(item) is str:
                if key in _DELTA_KEYS and item:
                    streams.setdefault((*path, key), []).append((index, (*path, key), item))
            elif type(item) in (dict, list):
                _deltas(item, (*path, key), index, streams)
    elif type(value) is list:
        for i, item in enumerate(value):
            if type(item) in (dict, list):
                _deltas(item, (*path, i), index, streams)


def _split_at(
    texts: Sequence[str], joined: str, spans: Sequence[tuple[int, int, str]]
) -> list[str]:
    """``joined`` (``"".join(texts)``) with each span ``(start, end, new)`` replaced, cut
    where ``texts`` were: the text outside the spans stays in its piece, each ``new`` goes
    whole to the piece its span began in, and the rest of the span is gone from the pieces
    after it."""
    bounds: list[int] = []
    end = 0
    for text in texts:
        end += len(text)
        bounds.append(end)
    out = [""] * len(texts)
    piece = 0

    def keep(start: int, stop: int) -> None:
        nonlocal piece
        position = start
        while position < stop:
            while bounds[piece] <= position:
                piece += 1
            cut = min(stop, bounds[piece])
            out[piece] += joined[position:cut]
            position = cut

    position = 0
    for start, stop, new in spans:
        keep(position, start)
        while bounds[piece] <= start:
            piece += 1
        out[piece] += new
        position = stop
    keep(position, len(joined))
    return out


def _split_as(texts: Sequence[str], redacted: str) -> list[str]:
    """``redacted`` (the redaction of ``"".join(texts)``) cut where ``texts`` were: text kept
    as it was stays in its piece, a replaced span goes to the piece it began in."""
    import difflib

    joined = "".join(texts)
    bounds: list[int] = []
    end = 0
    for text in texts:
        end += len(text)
        bounds.append(end)

    def piece(position: int) -> int:
        for i, bound in enumerate(bounds):
            if position < bound:
                return i
        return len(texts) - 1

    out = [""] * len(texts)
    matcher = difflib.SequenceMatcher(None, joined, redacted, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            position = i1
            while position < i2:
                i = piece(position)
                stop = min(i2, bounds[i])
                out[i] += redacted[j1 + position - i1 : j1 + stop - i1]
                position = stop
        else:  # a replaced span (or an inserted one): whole, in the piece it began in
            out[piece(i1)] += redacted[j1:j2]
    return out


def _secret_field(key: Any, value: Any) -> bool:
    """Whether ``value`` under ``key`` is a secret whatever it looks like (a key named like a
    secret: :func:`secret_name`), and not already a token or marker."""
    return (
        type(value) in _SECRET_VALUE_TYPES
        and type(key) is str
        and secret_name(key)
        and not (type(value) is str and _KEEP_FULL.fullmatch(value))
    )


_SECRET_SUFFIXES = (
    "_token", "_password", "_passwd", "_secret", "_secret_key", "_api_key", "_apikey",
    "_private_key", "_credentials", "_credential",
)  # fmt: skip
_SECRET_NAMES = frozenset(
    {k.replace("-", "_") for k in SECRET_FIELDS} | {"credentials", "credential", "pass", "bearer"}
)
# Names that end like a secret and are none: a model's text tokens ("token" alone is one in
# every logprobs list), a tokenizer's special tokens, the run's own key secret (SPEC section
# 5, handled apart from the processors)
_NOT_SECRET_NAMES = frozenset(
    {"key_secret", "next_token", "last_token", "first_token", "stop_token", "end_token"}
    | {f"{t}_token" for t in ("bos", "eos", "pad", "unk", "sep", "cls", "mask", "start")}
)


@functools.lru_cache(maxsize=4096)
def secret_name(key: str) -> bool:
    """Whether an object key names a secret: one of SECRET_FIELDS, or a name ending like one
    (``db_password``, ``GITHUB_TOKEN``, ``stripe_secret_key``, ``PRIVATE-TOKEN``,
    ``credentials``), in any case and with ``-``, ``.`` or a space for ``_``. Not
    ``max_tokens`` or ``token_count`` (a count of tokens is no secret), nor ``token`` alone
    or ``eos_token``: a model's or a tokenizer's text token."""
    name = key if key.isascii() else key.translate(_CASE_FOLDS)
    # the letters the patterns fold (a Turkish upper-casing writes "AP\u0130_KEY")
    name = name.lower().replace("-", "_").replace(".", "_").replace(" ", "_")
    if name in _NOT_SECRET_NAMES:
        return False
    return name in _SECRET_NAMES or name.endswith(_SECRET_SUFFIXES)


_Trie = dict[int, "_Trie"]
_END = -1  # the trie key that marks the end of a word (bytes are 0..255)


_contains_any: Callable[[bytes, tuple[Any, ...]], bool] | None = (
    NATIVE.contains_any if NATIVE is not None else None
)


def _cut(word: bytes) -> bytes:
    """``word`` up to and including its first byte after the first that is a backslash or
    not ASCII: the 29 whitespace forms of "token", raw and escaped, become six words
    ("token ", "token\\", "token\xc2", ...). A prefix of a word occurs wherever the word
    does, so the whole-payload test stays sound; it only sends a little more to the walk.
    (One compiled pass compares every word that begins with the byte it stands on.)"""
    if word[:1].isascii():  # a word that begins outside ASCII (the KELVIN SIGN) stays whole
        for i in range(1, len(word)):
            if word[i] == 0x5C or word[i] >= 0x80:
                return word[: i + 1]
    return word


def _fewest(words: Iterable[bytes]) -> list[bytes]:
    """``words`` without duplicates, without any that holds another of them, and without
    any holding a control character: the same answer to "does one of them occur" in
    orjson's output, in fewer comparisons."""
    # a control character never stands raw in orjson's output: such a word cannot occur
    unique = sorted({w for w in words if not any(b < 0x20 for b in w)}, key=len)
    kept: list[bytes] = []
    for word in unique:
        if not any(other in word for other in kept):
            kept.append(word)
    return kept


def _by_first_byte(words: Iterable[bytes]) -> tuple[tuple[bytes, ...] | None, ...]:
    """``words`` filed by their first byte, as ``native.contains_any`` reads them: 256
    entries, each None or the tuple of the words that start with that byte."""
    table: list[list[bytes]] = [[] for _ in range(256)]
    for word in dict.fromkeys(words):
        if not word:
            raise ValueError("an empty word occurs everywhere")
        table[word[0]].append(word)
    return tuple(tuple(ws) if ws else None for ws in table)


def _any_of(words: Iterable[bytes]) -> re.Pattern[bytes]:
    """A pattern that finds a place where one of ``words`` occurs (only whether one does:
    a word that another begins with stands for both).

    The words are merged into a trie (``a(?:pi|kia|ccess...)``): the regex engine tries an
    alternative per distinct next byte instead of one per word at every position, which
    halves the cost of the whole-payload test of every recorded and replayed event.
    """
    trie: _Trie = {}
    for word in words:
        node = trie
        for byte in word:
            node = node.setdefault(byte, {})
        node[_END] = {}

    def alternatives(node: _Trie) -> bytes:
        if _END in node:  # a word ends here: its longer continuations add nothing
            return b""
        alts = [re.escape(bytes([b])) + alternatives(node[b]) for b in sorted(node)]
        return alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"

    return re.compile(alternatives(trie))


@functools.lru_cache(maxsize=32)
def _engine(kinds: frozenset[str], secrets: bool) -> _Engine:
    return _Engine(kinds, secrets)


def _marker(kind: str) -> str:
    return f"[redacted:{kind}]"


_SECRET_FIELD_MARKER = _marker("secret:field")
_COMPILED_FIELDS = frozenset({"_engine", "_starts", "_unchanged", "untouched_unless"})


@trusts_untouched_unless
@dataclass(frozen=True)
class Redactor:
    """A redaction processor: ``redactor(event_type, payload) -> payload``.

    ``kinds``: the personal-data detectors to run (a subset of ``PII_KINDS``; they need a
    ``keyring``). ``secrets``: detect secrets (markers; no key needed). ``rules``: JSON-path
    rules, applied before the detectors.
    """

    keyring: KeyRing | None = None
    kinds: frozenset[str] = frozenset()
    secrets: bool = True
    rules: tuple[Rule, ...] = ()
    _engine: _Engine = field(init=False, repr=False, compare=False)
    _starts: dict[str, tuple[tuple[int, int], ...]] = field(init=False, repr=False, compare=False)
    _unchanged: dict[str, None] = field(init=False, repr=False, compare=False)
    """Short strings this redactor's detectors left as they were (see :meth:`_text`)."""
    untouched_unless: tuple[tuple[bytes, ...] | None, ...] | None = field(
        init=False, repr=False, compare=False
    )
    """The words without which :meth:`__call__` hands a payload back untouched (see
    ``tachograph.record.seal.Processor``): its whole-payload pre-check's, where that check is
    all it makes; else ``None``. That is: no rules, no detector without hints of its own (the
    card, IBAN, phone and IP detectors look at digits and colons), the compiled helpers
    built, and this class's own ``__call__``. Only a ``Redactor`` itself is skipped by
    them, not a subclass; a patch of ``Redactor.__call__`` made after the redactor was
    built is not seen."""

    def __post_init__(self) -> None:
        kinds = frozenset(self.kinds)
        unknown = kinds - PII_KINDS
        if unknown:
            raise PrivacyError(
                f"unknown detector(s) {sorted(unknown)}; the personal-data detectors are "
                f"{sorted(PII_KINDS)} (secrets: {sorted(SECRET_KINDS)}, on with secrets=True)"
            )
        object.__setattr__(self, "kinds", kinds)
        object.__setattr__(self, "rules", tuple(self.rules))
        needs_key = bool(kinds) or any(r.action is RuleAction.TOKEN for r in self.rules)
        if needs_key and self.keyring is None:
            raise PrivacyError(
                "tokens need a key: pass keyring=KeyRing.from_env() (TACHOGRAPH_PII_KEY or "
                "TACHOGRAPH_PII_KEY_FILE), KeyRing.from_file(...) or KeyRing.from_callback(...)"
            )
        self._compile()

    def _compile(self) -> None:
        """The engine, the per-type rule starts and the words, from the fields."""
        object.__setattr__(self, "_engine", _engine(self.kinds, self.secrets))
        object.__setattr__(self, "_starts", {})
        object.__setattr__(self, "_unchanged", {})
        engine = self._engine
        plain = (
            not self.rules
            and not engine.digits
            and engine.blob_table is not None
            and type(self).__call__ is Redactor.__call__
        )
        object.__setattr__(self, "untouched_unless", engine.blob_table if plain else None)

    def __getstate__(self) -> dict[str, Any]:
        # without what it compiled: rebuilt where it is loaded, which may be a process
        # without the compiled helpers (TACHOGRAPH_PURE_PYTHON=1)
        return {k: v for k, v in self.__dict__.items() if k not in _COMPILED_FIELDS}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._compile()

    def __repr__(self) -> str:
        key = self.keyring.current if self.keyring is not None else None
        return (
            f"Redactor(kinds={sorted(self.kinds)}, secrets={self.secrets}, "
            f"rules={len(self.rules)}, key_id={key!r})"
        )

    @property
    def key_id(self) -> str | None:
        """The id of the key new tokens are made with."""
        return self.keyring.current if self.keyring is not None else None

    def pinned(self, key_id: str) -> Redactor:
        """This redactor making tokens with the key ``key_id`` of its ring (to reproduce the
        tokens of a run recorded before the key was rotated)."""
        if self.keyring is None:
            raise PrivacyError("this redactor has no key ring to pin", key_id=key_id)
        ring = self.keyring.pinned(key_id)
        return self if ring is self.keyring else dataclasses.replace(self, keyring=ring)

    def token(self, value: str) -> str:
        """The token a value (already normalized, e.g. a lower-case e-mail) becomes."""
        if self.keyring is None:
            raise PrivacyError("this redactor has no key ring: it makes no tokens")
        return self.keyring.token(value)

    # -- the processor ---------------------------------------------------------------------

    def redact_text(self, text: str) -> str:
        """One string through this redactor's detectors (not its rules, which name payload
        paths): what the recorder does to a run's actor, which sits in every envelope
        (:func:`tachograph.record.seal.process_actor`)."""
        return self._text(text)

    def __call__(self, event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
        if not self.rules and type(payload) is dict:
            # what the general path below decides when no rule can start, without its
            # per-type lookup (it runs on every recorded event)
            out = payload if self._engine.clean(payload) else self._dict(payload, ())
            if "response" in out:  # a model's answer, maybe streamed: see _streamed
                return self._streamed(payload, out)
            return out
        out = self._by_rules(event_type, payload)
        if type(out) is dict and "response" in out and type(payload) is dict:
            return self._streamed(payload, out)
        return out

    def _by_rules(self, event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
        starts = self._starts.get(event_type)
        if starts is None:
            starts = tuple(
                (i, 0) for i, r in enumerate(self.rules) if not r.types or event_type in r.types
            )
            self._starts[event_type] = starts
        if type(payload) is not dict:
            return payload
        if not starts and self._engine.clean(payload):
            return payload
        return self._dict(payload, starts)

    def _streamed(self, original: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
        """A streamed answer (``response.events``, as the SDK integrations record one) with
        what its deltas spell together redacted: a key or an e-mail the model wrote came in
        pieces ("sk", "-proj", "-AbC..."), none of which a detector takes alone. The texts of
        each stream (the deltas at one place of the events, in order) are joined as they
        came (from ``original``, before each delta was redacted alone: a first piece that is
        a whole match by itself would have hidden the rest of the key in the next one), the
        joined text goes through the detectors, and each delta of ``payload`` (the redacted
        payload) gets its part of the result: a replaced span, whole, in the delta it began
        in, and nothing of it in the deltas after."""
        response = original["response"]
        events = response.get("events") if type(response) is dict else None
        done = payload["response"]
        if type(events) is not list or len(events) < 2 or type(done) is not dict:
            return payload
        streams: dict[tuple[Any, ...], list[tuple[int, tuple[Any, ...], str]]] = {}
        for index, event in enumerate(events):
            _deltas(event, (), index, streams)
        changed: list[tuple[int, tuple[Any, ...], str]] = []
        for parts in streams.values():
            if len(parts) < 2:
                continue
            texts = [text for _, _, text in parts]
            joined = "".join(texts)
            spans = self._spans(joined)
            if spans is None:  # found only percent-decoded: no spans in the text as it is
                redacted = self._text(joined)
                if redacted == joined:
                    continue
                pieces = _split_as(texts, redacted)
            elif not spans:
                continue
            else:
                pieces = _split_at(texts, joined, spans)
            changed.extend(
                (index, path, new) for (index, path, _), new in zip(parts, pieces, strict=True)
            )
        if not changed:
            return payload
        copied = orjson.loads(orjson.dumps(done.get("events")))  # never changed in place
        for index, path, new in changed:
            holder: Any = copied
            for step in (index, *path[:-1]):
                try:
                    holder = holder[step]
                except (IndexError, KeyError, TypeError):
                    holder = None  # a rule replaced what held it: left as the rule left it
                    break
            if type(holder) is dict and type(holder.get(path[-1])) is str:
                holder[path[-1]] = new
        return {**payload, "response": {**done, "events": copied}}

    def _spans(self, text: str) -> list[tuple[int, int, str]] | None:
        """The replacements :meth:`_text` makes in ``text``, as ``(start, end, new)``; ``[]``
        for none, ``None`` when it would redact the text percent-decoded (no spans then)."""
        engine = self._engine
        if engine.maybe(text):
            spans = []
            for m in engine.pattern.finditer(text):
                new = self._replace(m)
                if new != m.group(0):
                    spans.append((m.start(), m.end(), new))
            if spans:
                return spans
        return None if self._text(text) != text else []

    def _walk(self, value: Any, states: tuple[tuple[int, int], ...]) -> Any:
        kind = type(value)
        if kind is str:
            return self._text(value)
        if kind is dict:
            return self._dict(value, states)
        if kind is list:
            return self._list(value, states)
        if kind is int and self._engine.cards and 10**12 <= abs(value) < 10**19:
            digits = card_digits(str(abs(value)))
            if digits is not None:
                return self.token(digits)
        return value

    def _text(self, text: str) -> str:
        # A run repeats most of its strings, its keys above all ("role", "content", a model
        # id): one this redactor left as it was is looked up, not run through the detectors
        # again (for a run of the suite's agent, 101 distinct strings of 3,040). Whether a
        # string is left as it is depends on the detectors and on this redactor's own token()
        # alone, not on its key (a confirmed candidate becomes a token or a marker, never
        # itself): one table a redactor, so that a subclass whose token() keeps some values
        # as they are shares none of them with another redactor.
        engine = self._engine
        unchanged = self._unchanged
        short = len(text) <= _UNCHANGED_CHARS  # else not worth its hash
        if short and text in unchanged:
            return text
        if engine.maybe(text):
            out = engine.pattern.sub(self._replace, text)
            if out != text:
                return out
            # candidates that failed their check: unchanged
        if "%" in text and _PERCENT.search(text) is not None:
            # a URL or a form body, percent-encoded as HTTP clients write them: an e-mail's
            # "@" is "%40", a phone's "+" is "%2B", an assignment's "=" is "%3D", and no
            # detector takes the encoded form. Found in the decoded text, the text is kept
            # decoded, with the match replaced (the same text gives the same result).
            decoded = urllib.parse.unquote_plus(text)
            if decoded != text and engine.maybe(decoded):
                out = engine.pattern.sub(self._replace, decoded)
                if out != decoded:
                    return out
        if short:
            if len(unchanged) >= _UNCHANGED_MAX:
                unchanged.clear()  # a new start, not an unbounded table
            unchanged[text] = None
        return text

    def _replace(self, m: re.Match[str]) -> str:
        group = m.lastgroup
        if group is None or group == "keep":
            return m.group(0)
        engine = self._engine
        detector = engine.by_group[group]
        found = m.group(group)
        if detector.secret:
            inner = engine.value_group.get(group)
            if inner is None:
                return _marker("secret:" + detector.kind)
            start, end = m.span(inner)
            base = m.start(group)
            return found[: start - base] + _marker("secret:" + detector.kind) + found[end - base :]
        normalized = detector.check(found) if detector.check is not None else found
        if normalized is None:
            return found
        return self.token(normalized)

    def _step(
        self, states: tuple[tuple[int, int], ...], key: str | int
    ) -> tuple[tuple[tuple[int, int], ...], Rule | None]:
        """The rule states after stepping into ``key``; the rule that matches the child."""
        out: list[tuple[int, int]] = []
        hit: Rule | None = None
        for ri, pos in states:
            segments = self.rules[ri].segments
            op, arg = segments[pos]
            if op == "desc":
                out.append((ri, pos))  # may match deeper still
                advanced = arg is None or arg == key
            elif op == "any":
                advanced = True
            elif op == "key":
                advanced = arg == key
            else:
                advanced = arg == key and type(key) is int
            if advanced:
                if pos + 1 == len(segments):
                    hit = hit or self.rules[ri]
                else:
                    out.append((ri, pos + 1))
        return tuple(out), hit

    def _apply(self, rule: Rule, value: Any) -> Any:
        if type(value) is str and _KEEP_FULL.fullmatch(value):
            return value  # already a token or marker: processing twice changes nothing
        if rule.action is RuleAction.REDACT:
            return _marker(rule.kind)
        text = value if type(value) is str else canonical(value).decode("utf-8")
        return self.token(text)

    def _dict(self, value: dict[str, Any], states: tuple[tuple[int, int], ...]) -> dict[str, Any]:
        out: dict[str, Any] | None = None
        secrets = self.secrets
        for i, (k, v) in enumerate(value.items()):
            # a key that is not a string is left as it is: the profile check refuses it
            nk = self._text(k) if type(k) is str else k
            rule: Rule | None = None
            child: tuple[tuple[int, int], ...] = ()
            if states:
                child, rule = self._step(states, k)
            if rule is not None and rule.action is RuleAction.DROP:
                if out is None:
                    out = dict(islice(value.items(), i))
                continue
            if rule is not None:
                nv = self._apply(rule, v)
            elif secrets and _secret_field(k, v):
                nv = _SECRET_FIELD_MARKER
            else:
                nv = self._walk(v, child)
            if out is None:
                if nk is k and nv is v:
                    continue
                out = dict(islice(value.items(), i))
            out[nk] = nv
        return value if out is None else out

    def _list(self, value: list[Any], states: tuple[tuple[int, int], ...]) -> list[Any]:
        out: list[Any] | None = None
        for i, v in enumerate(value):
            rule: Rule | None = None
            child: tuple[tuple[int, int], ...] = ()
            if states:
                child, rule = self._step(states, i)
            if rule is not None:
                nv = None if rule.action is RuleAction.DROP else self._apply(rule, v)
            else:
                nv = self._walk(v, child)
            if out is None:
                if nv is v:
                    continue
                out = value[:i]
            out.append(nv)
        return value if out is None else out

    # -- inspection ------------------------------------------------------------------------

    def scan(self, value: Any, path: str = "$") -> Iterator[Finding]:
        """Where this redactor would change ``value``: kind and JSON path of each finding
        (never the value). Rules are not applied here; only the detectors and secret fields."""
        if type(value) is str:
            engine = self._engine
            if engine.maybe(value):
                for m in engine.pattern.finditer(value):
                    group = m.lastgroup
                    if group is None or group == "keep":
                        continue
                    detector = engine.by_group[group]
                    found = m.group(group)
                    if detector.check is None or detector.check(found) is not None:
                        yield Finding(detector.kind, path, detector.secret)
        elif type(value) is dict:
            for k, v in value.items():
                yield from self.scan(k, path)
                if self.secrets and _secret_field(k, v):
                    yield Finding("field", f"{path}.{k}", True)
                    continue
                yield from self.scan(v, f"{path}.{k}")
        elif type(value) is list:
            for i, v in enumerate(value):
                yield from self.scan(v, f"{path}[{i}]")
        elif (
            type(value) is int
            and self._engine.cards
            and 10**12 <= abs(value) < 10**19
            and card_digits(str(abs(value))) is not None
        ):
            yield Finding("card", path, False)


redact_secrets = Redactor()
"""The default processor of every recording: secrets become ``[redacted:secret:<kind>]``."""


def pii_policy(
    keyring: KeyRing | None = None,
    *,
    kinds: Iterable[str] = PII_KINDS,
    rules: Sequence[Rule] = (),
    secrets: bool = True,
    environ: Mapping[str, str] | None = None,
) -> Redactor:
    """Switch personal-data detection on: every detector in ``kinds`` (default: all of
    e-mail, phone, card, IBAN, IP), the ``rules``, and secrets. Without ``keyring``, the key
    ring of the environment (:meth:`KeyRing.from_env`); no key at all is an error, since a
    token without a key would let a dictionary confirm its value."""
    ring = keyring if keyring is not None else KeyRing.from_env(environ)
    if ring is None:
        raise PrivacyError(
            "PII redaction needs a key: set TACHOGRAPH_PII_KEY (and TACHOGRAPH_PII_KEY_ID) or "
            "TACHOGRAPH_PII_KEY_FILE, or pass keyring=...; KeyRing.generate() makes one"
        )
    return Redactor(keyring=ring, kinds=frozenset(kinds), secrets=secrets, rules=tuple(rules))


def _leading_redactors(procs: Sequence[Processor]) -> list[Redactor]:
    """The redactors that run before any other processor: only these have redacted a payload
    before a processor that may write it out of the log sees it (a ``BlobRule`` writes its
    blob file when it is called)."""
    leading: list[Redactor] = []
    for proc in procs:
        if not isinstance(proc, Redactor):
            break
        leading.append(proc)
    return leading


def default_processors(
    processors: Sequence[Processor] = (),
    *,
    redact_secrets: bool = True,
    environ: Mapping[str, str] | None = None,
) -> tuple[Processor, ...]:
    """The processors a recording (or a replay, fork, resume, import) runs: the caller's,
    preceded by the default redaction unless the caller already has a :class:`Redactor` doing
    it before any other processor. With ``TACHOGRAPH_PII=on`` the default is :func:`pii_policy`
    from the environment; else :data:`redact_secrets`, unless ``redact_secrets=False``.

    A secrets redactor of the caller's that comes after another processor (``[BlobRule(...),
    pii_policy(...)]``) does not stand in for the default: the default still runs first, so
    that no processor ever sees a secret (a blob file would keep it)."""
    procs = tuple(processors)
    env = os.environ if environ is None else environ
    redactors = [p for p in procs if isinstance(p, Redactor)]
    has_secrets = any(r.secrets for r in _leading_redactors(procs))
    if env.get(ENV_POLICY, "").strip().lower() in _ON and not any(r.kinds for r in redactors):
        policy = pii_policy(environ=env, secrets=redact_secrets and not has_secrets)
        return (policy, *procs)
    if redact_secrets and not has_secrets:
        return (_DEFAULT, *procs)
    return procs


_DEFAULT = redact_secrets


def _payload_text(event: Event) -> bytes:
    if event.payload_bytes is not None:
        return event.payload_bytes
    return orjson.dumps(event.payload) if event.payload is not None else b""


_TOKEN_SCAN_EVENTS = 1_024
"""Events whose payload bytes are searched together for tokens: one search of their joined
bytes (a NUL between two payloads, which no token spans), instead of one per event."""


def _token_key_ids(events: Sequence[Event]) -> set[str]:
    """The key ids of the PII tokens anywhere in the payloads of ``events``."""
    used: set[str] = set()
    for start in range(0, len(events), _TOKEN_SCAN_EVENTS):
        chunk = events[start : start + _TOKEN_SCAN_EVENTS]
        try:
            joined = b"\0".join([e.payload_bytes for e in chunk])  # type: ignore[misc]
        except TypeError:  # one is None (erased, or built in memory): the payload's bytes
            joined = b"\0".join([_payload_text(e) for e in chunk])
        if b"pii1:" in joined:
            decoded = joined.decode("utf-8", "replace")
            used.update(m.group(1) for m in TOKEN_PATTERN.finditer(decoded))
    return used


def pin_processors(
    processors: Sequence[Processor], events: Sequence[Event]
) -> tuple[Processor, ...]:
    """The processors for the live side of a replay of ``events``: each :class:`Redactor`
    pinned to the key the recording's tokens were made with, so a rotated key still
    reproduces them. Fails when the recording holds tokens and no processor can make them:
    comparing plaintext with tokens would only report divergences (and show the plaintext)."""
    used = _token_key_ids(events)
    procs = tuple(processors)
    if not used:
        return procs
    run_id = events[0].run_id if events else "?"
    keyed = [p for p in procs if isinstance(p, Redactor) and p.keyring is not None]
    if not keyed:
        raise PrivacyError(
            f"run {run_id!r} was recorded with PII redaction (key id {', '.join(sorted(used))}): "
            "its live side must pass through the same policy. Pass processors=[pii_policy(...)] "
            "or set TACHOGRAPH_PII=on with the key configured (TACHOGRAPH_PII_KEY_FILE).",
            key_id=sorted(used)[0],
        )
    if len(used) > 1:
        raise PrivacyError(
            f"run {run_id!r} holds tokens of several keys ({', '.join(sorted(used))}); a replay "
            "can reproduce the tokens of one key only",
            key_id=sorted(used)[0],
        )
    key_id = next(iter(used))
    for redactor in keyed:
        assert redactor.keyring is not None
        if key_id not in redactor.keyring.keys:
            raise PrivacyError(
                f"run {run_id!r} was redacted with key id {key_id!r}, which the key ring does "
                f"not hold (it holds {sorted(redactor.keyring.keys)}): add the old key to the "
                "key file (older keys after the current one) to replay it",
                key_id=key_id,
            )
    pinned = {id(p) for p in keyed}
    return tuple(p.pinned(key_id) if id(p) in pinned else p for p in procs)  # type: ignore[attr-defined]


def under_every_key(processors: Sequence[Processor]) -> list[tuple[Processor, ...]]:
    """``processors`` as they are, then once for each other key their redactors' rings hold,
    with each redactor that holds it pinned to it: the processors of every recording made
    through them across key rotations, to find what a value became in any of those (a
    subject's id, an actor)."""
    procs = tuple(processors)
    keyed = [p for p in procs if isinstance(p, Redactor) and p.keyring is not None]
    current = {p.key_id for p in keyed}
    others = dict.fromkeys(k for p in keyed for k in p.keyring.keys if k not in current)  # type: ignore[union-attr]
    out = [procs]
    for key_id in others:
        out.append(
            tuple(
                p.pinned(key_id)
                if isinstance(p, Redactor) and p.keyring is not None and key_id in p.keyring.keys
                else p
                for p in procs
            )
        )
    return out

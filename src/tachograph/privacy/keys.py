"""Keys of the redaction tokens: a key ring, where it comes from, and the token itself.

A token is ``pii1:<key id>:<h>`` where ``h`` is the first 16 lower-case hex chars of
``HMAC-SHA256(key, value)`` (``value`` is the normalized matched text, as UTF-8). The same value
under the same key always gives the same token, so runs can be joined on a customer's e-mail
and a replay can compare a live request with the recorded one; without the key a token
confirms nothing (a dictionary of guesses needs the key to compute a single candidate token).

The key never enters the log: only its id does, so that a ring holding several keys (the
current one and older ones) can tell which key made a token. Keys come from the environment
(``TACHOGRAPH_PII_KEY`` and ``TACHOGRAPH_PII_KEY_ID``, or ``TACHOGRAPH_PII_KEY_FILE``), a file,
or a callback (a secrets manager); :meth:`KeyRing.generate` makes a new one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PrivacyError

__all__ = [
    "ENV_KEY",
    "ENV_KEY_FILE",
    "ENV_KEY_ID",
    "TOKEN_PATTERN",
    "KeyRing",
    "key_id_of",
]

_log = logging.getLogger("tachograph")

ENV_KEY = "TACHOGRAPH_PII_KEY"
"""The current key: 32 or more hex chars, or base64 of 16 or more bytes."""
ENV_KEY_ID = "TACHOGRAPH_PII_KEY_ID"
"""The id of ``TACHOGRAPH_PII_KEY`` (default: derived from the key, see :func:`key_id_of`)."""
ENV_KEY_FILE = "TACHOGRAPH_PII_KEY_FILE"
"""A key file: one ``<key id> <key>`` per line, the current key first, older keys after."""

TOKEN_PATTERN = re.compile(r"pii1:([A-Za-z0-9._-]{1,32}):([0-9a-f]{16})")
"""A token as it appears in recorded text; group 1 is the key id, group 2 the HMAC prefix."""

_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,32}")
_MIN_KEY_BYTES = 16


def key_id_of(key: bytes) -> str:
    """The default id of a key: ``k`` and 8 hex chars of a hash of it (a hash of 16 or more
    random bytes reveals nothing about them, and lets two keys be told apart)."""
    return "k" + hashlib.sha256(b"tachograph pii key id\n" + key).hexdigest()[:8]


def _check_id(key_id: str) -> str:
    if not _KEY_ID.fullmatch(key_id):
        raise PrivacyError(
            f"key id {key_id!r}: expected 1-32 chars of [A-Za-z0-9._-]", key_id=key_id
        )
    return key_id


def _decode_key(text: str, where: str) -> bytes:
    """Key text as bytes: hex, else standard or URL-safe base64. Never echoes the text."""
    text = text.strip()
    raw: bytes | None = None
    if re.fullmatch(r"(?:[0-9a-fA-F]{2})+", text):
        raw = bytes.fromhex(text)
    else:
        try:
            raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=False)
        except (binascii.Error, ValueError):
            raw = None
    if raw is None or len(raw) < _MIN_KEY_BYTES:
        raise PrivacyError(
            f"the key in {where} is not usable: expected hex (32+ chars) or base64 of "
            f"{_MIN_KEY_BYTES} or more random bytes (KeyRing.generate() makes one)"
        )
    return raw


@dataclass(frozen=True)
class KeyRing:
    """The keys tokens are made with: ``current`` makes new tokens; every key in ``keys`` can
    be :meth:`pinned` to reproduce the tokens of an older recording (rotation by key id).

    The key bytes are never shown (``repr`` lists the ids only).
    """

    current: str
    keys: Mapping[str, bytes] = field(repr=False)

    def __post_init__(self) -> None:
        _check_id(self.current)
        for key_id, key in self.keys.items():
            _check_id(key_id)
            if len(key) < _MIN_KEY_BYTES:
                raise PrivacyError(
                    f"key {key_id!r} is {len(key)} bytes; at least {_MIN_KEY_BYTES} are needed",
                    key_id=key_id,
                )
        if self.current not in self.keys:
            raise PrivacyError(
                f"the current key id {self.current!r} is not in the ring", key_id=self.current
            )
        object.__setattr__(self, "keys", dict(self.keys))

    def __repr__(self) -> str:
        return f"KeyRing(current={self.current!r}, ids={sorted(self.keys)!r})"

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def of(cls, key: bytes | str, *, key_id: str | None = None) -> KeyRing:
        """A ring of one key (bytes, or hex / base64 text)."""
        raw = key if isinstance(key, bytes) else _decode_key(key, "the argument")
        kid = _check_id(key_id) if key_id is not None else key_id_of(raw)
        return cls(current=kid, keys={kid: raw})

    @classmethod
    def generate(cls, *, key_id: str | None = None) -> KeyRing:
        """A ring with a new random 32-byte key (keep it: tokens made with it need it to be
        reproduced, and a lost key turns every token into a dead end)."""
        return cls.of(secrets.token_bytes(32), key_id=key_id)

    @classmethod
    def from_lines(cls, lines: Iterable[str], *, where: str = "the key file") -> KeyRing:
        """Parse ``<key id> <key>`` lines (``#`` comments and blank lines skipped); the first
        key is the current one."""
        keys: dict[str, bytes] = {}
        current: str | None = None
        for number, line in enumerate(lines, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            parts = text.split()
            if len(parts) != 2:
                raise PrivacyError(f"{where}, line {number}: expected '<key id> <key>'")
            kid = _check_id(parts[0])
            if kid in keys:
                raise PrivacyError(f"{where}, line {number}: key id {kid!r} twice", key_id=kid)
            keys[kid] = _decode_key(parts[1], f"{where}, line {number}")
            current = current or kid
        if current is None:
            raise PrivacyError(f"{where} holds no key")
        return cls(current=current, keys=keys)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> KeyRing:
        """Read a key file (see :meth:`from_lines`). A file that others can read is used, and
        a warning says so: the key is what stands between a token and the value behind it."""
        target = Path(path)
        try:
            mode = target.stat().st_mode
            text = target.read_text(encoding="utf-8")
        except OSError as exc:
            raise PrivacyError(f"cannot read the key file {target}: {exc.strerror}") from None
        if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
            _log.warning(
                "tachograph: the key file %s can be read by other users (mode %o); chmod 600 it",
                target,
                stat.S_IMODE(mode),
            )
        return cls.from_lines(text.splitlines(), where=str(target))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KeyRing | None:
        """The ring the environment configures, or None when it configures none.

        ``TACHOGRAPH_PII_KEY_FILE`` wins over ``TACHOGRAPH_PII_KEY`` (+ ``_KEY_ID``).
        """
        env = os.environ if environ is None else environ
        path = env.get(ENV_KEY_FILE)
        if path:
            return cls.from_file(path)
        text = env.get(ENV_KEY)
        if not text:
            return None
        raw = _decode_key(text, ENV_KEY)
        key_id = env.get(ENV_KEY_ID) or None
        return cls.of(raw, key_id=key_id)

    @classmethod
    def from_callback(cls, fetch: Callable[[], KeyRing | Mapping[str, bytes]]) -> KeyRing:
        """A ring from a callback (a secrets manager): it returns a :class:`KeyRing`, or a
        mapping ``{key id: key bytes}`` whose first entry is the current key."""
        got = fetch()
        if isinstance(got, KeyRing):
            return got
        keys = dict(got)
        if not keys:
            raise PrivacyError("the key callback returned no key")
        return cls(current=next(iter(keys)), keys=keys)

    # -- using ---------------------------------------------------------------------------------

    def pinned(self, key_id: str) -> KeyRing:
        """The same ring with ``key_id`` as the current key (to reproduce its tokens)."""
        if key_id not in self.keys:
            raise PrivacyError(
                f"no key with id {key_id!r} in the ring (it holds {sorted(self.keys)})",
                key_id=key_id,
            )
        return self if key_id == self.current else KeyRing(current=key_id, keys=self.keys)

    def token(self, value: str) -> str:
        """``pii1:<current key id>:<16 hex of HMAC-SHA256(key, value)>``."""
        digest = hmac.new(self.keys[self.current], value.encode("utf-8"), hashlib.sha256)
        return f"pii1:{self.current}:{digest.hexdigest()[:16]}"

    def lines(self) -> str:
        """The ring as key-file text (current key first). It holds the keys: write it only
        to a file of mode 0600 or a secrets manager."""
        order = [self.current, *sorted(k for k in self.keys if k != self.current)]
        return "".join(f"{kid} {self.keys[kid].hex()}\n" for kid in order)

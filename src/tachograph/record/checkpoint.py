"""Signed notes, checkpoints, cosignatures and proof files (SPEC section 9, C2SP formats).

- signed note (c2sp.org/signed-note): a UTF-8 text body ending in a newline, an empty line,
  then signature lines ``— <key name> <base64(key id ‖ signature)>``; Ed25519 signatures over
  the body; key id = ``SHA-256(name ‖ 0x0A ‖ type ‖ public key)[:4]`` with type 0x01.
- checkpoint (c2sp.org/tlog-checkpoint): origin, tree size, base64 root hash, each a line.
- cosignature (c2sp.org/tlog-cosignature, ``cosignature/v1``): a witness's Ed25519 signature
  (key type 0x04) over ``cosignature/v1\\ntime <t>\\n`` and the checkpoint body, carried as
  ``key id ‖ u64 big-endian t ‖ signature``.
- proof file (c2sp.org/tlog-proof@v1): ``extra``, ``index``, the inclusion path, the checkpoint.

Pure apart from Ed25519, which comes from ``cryptography`` (the ``[seal]`` extra), imported
inside the functions that sign or verify so that ``import tachograph`` never loads it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import SealingError

__all__ = [
    "COSIGNATURE",
    "COSIGNATURE_BYTES",
    "SIGNATURE",
    "Checkpoint",
    "CheckpointError",
    "Note",
    "NoteSignature",
    "SigningKey",
    "TlogProof",
    "VerifierKey",
    "cosign",
    "decimal",
    "generate_key",
    "verify_cosignature",
]

SIGNATURE = 0x01
"""Key type of an Ed25519 note signature (the log's key)."""
COSIGNATURE = 0x04
"""Key type of an Ed25519 ``cosignature/v1`` (a witness's key)."""
COSIGNATURE_BYTES = 72
"""Length of a ``cosignature/v1``: an 8-byte timestamp and an Ed25519 signature (a note's
signature is the 64 bytes alone)."""

_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")


def decimal(text: str) -> int | None:
    """``text`` as the number a checkpoint, a proof or a witness request writes: ASCII
    digits with no leading zero, at most 20 of them (a 64-bit size); ``None`` for anything
    else (``"²"`` and ``"٣"`` are digits to :meth:`str.isdigit`, not decimals here)."""
    return int(text) if _DECIMAL.fullmatch(text) else None


_DASH = "\u2014"
_PROOF_HEADER = "c2sp.org/tlog-proof@v1"


CheckpointError = SealingError
"""A malformed or badly signed note, key, checkpoint or proof file (``what`` says which)."""


def _ed25519() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise CheckpointError(
            "signing and verifying checkpoints needs the 'cryptography' package: "
            "pip install 'tachograph[seal]'",
            what="dependency",
        ) from exc
    return ed25519


def _check_name(name: str) -> str:
    if not name or any(c.isspace() or c == "+" or ord(c) < 0x20 for c in name):
        raise CheckpointError(
            f"key name {name!r}: must be non-empty, without spaces or '+'", what="key"
        )
    return name


def key_id(name: str, kind: int, public: bytes) -> bytes:
    """``SHA-256(name ‖ 0x0A ‖ kind ‖ public)[:4]``."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([kind]) + public).digest()[:4]


@dataclass(frozen=True, slots=True)
class VerifierKey:
    """A public key: ``<name>+<hex key id>+<base64(kind ‖ public key)>``."""

    name: str
    public: bytes
    kind: int = SIGNATURE

    @property
    def key_id(self) -> bytes:
        """The 4-byte key id."""
        return key_id(self.name, self.kind, self.public)

    def __str__(self) -> str:
        blob = base64.b64encode(bytes([self.kind]) + self.public).decode()
        return f"{self.name}+{self.key_id.hex()}+{blob}"

    @classmethod
    def parse(cls, text: str) -> VerifierKey:
        """Read a verifier key string; its key id must match its name and key."""
        parts = text.strip().split("+", 2)
        if len(parts) != 3:
            raise CheckpointError(f"not a verifier key: {text.strip()[:80]!r}", what="key")
        name, hex_id, blob = parts
        try:
            raw = base64.b64decode(blob, validate=True)
            expected = bytes.fromhex(hex_id)
        except (binascii.Error, ValueError):
            raise CheckpointError(f"verifier key {name!r}: bad encoding", what="key") from None
        if len(raw) != 33 or raw[0] not in (SIGNATURE, COSIGNATURE):
            raise CheckpointError(
                f"verifier key {name!r}: expected an Ed25519 key (type 0x01 or 0x04)", what="key"
            )
        key = cls(_check_name(name), raw[1:], raw[0])
        if key.key_id != expected:
            raise CheckpointError(f"verifier key {name!r}: the key id does not match", what="key")
        return key

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Whether ``signature`` is this key's Ed25519 signature of ``message``."""
        ed = _ed25519()
        from cryptography.exceptions import InvalidSignature

        try:
            ed.Ed25519PublicKey.from_public_bytes(self.public).verify(signature, message)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A private key, written ``PRIVATE+KEY+<name>+<hex key id>+<base64(kind ‖ seed)>``.

    Never stored in a store: it lives in a file of its own (mode 0600), named by an option or
    ``TACHOGRAPH_SIGNING_KEY``.
    """

    name: str
    seed: bytes = field(repr=False)
    kind: int = SIGNATURE

    def _private(self) -> Any:
        return _ed25519().Ed25519PrivateKey.from_private_bytes(self.seed)

    @property
    def verifier(self) -> VerifierKey:
        """The matching public key."""
        from cryptography.hazmat.primitives import serialization

        public = (
            self._private()
            .public_key()
            .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        )
        return VerifierKey(self.name, public, self.kind)

    def sign(self, message: bytes) -> bytes:
        """The Ed25519 signature of ``message``."""
        return bytes(self._private().sign(message))

    def encode(self) -> str:
        """The private key file's text (one line)."""
        blob = base64.b64encode(bytes([self.kind]) + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.key_id.hex()}+{blob}"

    @classmethod
    def parse(cls, text: str) -> SigningKey:
        """Read a private key file's text."""
        parts = text.strip().split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise CheckpointError("not a tachograph signing key file", what="key")
        try:
            raw = base64.b64decode(parts[4], validate=True)
        except binascii.Error:
            raise CheckpointError("signing key: bad base64", what="key") from None
        if len(raw) != 33 or raw[0] not in (SIGNATURE, COSIGNATURE):
            raise CheckpointError("signing key: expected an Ed25519 seed", what="key")
        key = cls(_check_name(parts[2]), raw[1:], raw[0])
        if key.verifier.key_id.hex() != parts[3]:
            raise CheckpointError("signing key: the key id does not match", what="key")
        return key

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SigningKey:
        """Read a private key file."""
        try:
            with open(path, encoding="utf-8") as f:
                return cls.parse(f.read())
        except OSError as exc:
            raise CheckpointError(f"cannot read signing key {path}: {exc}", what="key") from exc


def generate_key(name: str, *, kind: int = SIGNATURE) -> SigningKey:
    """A new random Ed25519 key named ``name`` (``kind`` 0x04 for a witness)."""
    return SigningKey(_check_name(name), os.urandom(32), kind)


@dataclass(frozen=True, slots=True)
class NoteSignature:
    """One signature line: the key name, the key id and what follows it."""

    name: str
    key_id: bytes
    signature: bytes

    def line(self) -> str:
        """``— <name> <base64(key id ‖ signature)>`` and a newline."""
        return f"{_DASH} {self.name} {base64.b64encode(self.key_id + self.signature).decode()}\n"


@dataclass(frozen=True, slots=True)
class Note:
    """A signed note: ``text`` (the body, ending in a newline) and its signatures."""

    text: str
    signatures: tuple[NoteSignature, ...] = ()

    def to_bytes(self) -> bytes:
        """The note as written: body, empty line, signature lines."""
        return (self.text + "\n" + "".join(s.line() for s in self.signatures)).encode()

    @classmethod
    def parse(cls, raw: bytes | str) -> Note:
        """Read a signed note; anything off the format raises :class:`CheckpointError`."""
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError:
            raise CheckpointError("a note must be UTF-8", what="note") from None
        if any(ord(c) < 0x20 and c != "\n" for c in text):
            raise CheckpointError("a note must not hold control characters", what="note")
        body, sep, sigs = text.rpartition("\n\n")
        if not sep or not body or not sigs.endswith("\n"):
            raise CheckpointError("a note is a body, an empty line and signatures", what="note")
        signatures = []
        for line in sigs[:-1].split("\n"):
            prefix, _, rest = line.partition(" ")
            name, _, blob = rest.partition(" ")
            try:
                raw_sig = base64.b64decode(blob, validate=True)
            except binascii.Error:
                raw_sig = b""
            if prefix != _DASH or not name or len(raw_sig) < 5 or " " in blob:
                raise CheckpointError(f"malformed signature line {line[:80]!r}", what="note")
            signatures.append(NoteSignature(name, raw_sig[:4], raw_sig[4:]))
        return cls(body + "\n", tuple(signatures))

    def signed(self, key: SigningKey) -> Note:
        """This note with one more signature, by ``key`` (a log key)."""
        sig = NoteSignature(key.name, key.verifier.key_id, key.sign(self.text.encode()))
        return Note(self.text, (*self.signatures, sig))

    def with_signatures(self, extra: tuple[NoteSignature, ...]) -> Note:
        """This note with ``extra`` appended, skipping signatures it already carries."""
        kept = list(self.signatures)
        for sig in extra:
            if sig not in kept:
                kept.append(sig)
        return Note(self.text, tuple(kept))

    def verified_by(self, keys: list[VerifierKey]) -> list[VerifierKey]:
        """The log keys among ``keys`` whose signature this note carries and that verify.

        A signature that names a known key and id but does not verify makes the note invalid
        (signed-note rule): that raises. Unknown signatures are ignored.
        """
        good: list[VerifierKey] = []
        for key in keys:
            if key.kind != SIGNATURE:
                continue
            for sig in self.signatures:
                if sig.name == key.name and sig.key_id == key.key_id:
                    if not key.verify(self.text.encode(), sig.signature):
                        raise CheckpointError(
                            f"the signature by {key.name} does not verify", what="signature"
                        )
                    good.append(key)
                    break
        return good


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A tlog-checkpoint body: ``origin``, ``size``, ``root`` and optional extension lines."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def body(self) -> str:
        """The note text."""
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode()]
        return "".join(line + "\n" for line in (*lines, *self.extensions))

    def note(self, key: SigningKey | None = None) -> Note:
        """The checkpoint as a note, signed by ``key`` when one is given."""
        note = Note(self.body())
        return note.signed(key) if key is not None else note

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """Read a checkpoint body (a note's text)."""
        lines = text.split("\n")
        if len(lines) < 4 or lines[-1] != "" or any(not line for line in lines[:-1]):
            raise CheckpointError(
                "a checkpoint has an origin, a size and a root", what="checkpoint"
            )
        origin, size_text, root = lines[:3]
        size = decimal(size_text)
        if size is None:
            raise CheckpointError(
                f"checkpoint size {size_text!r} is not a decimal", what="checkpoint"
            )
        try:
            digest = base64.b64decode(root, validate=True)
        except binascii.Error:
            digest = b""
        if len(digest) != 32:
            raise CheckpointError("checkpoint root is not a base64 SHA-256", what="checkpoint")
        return cls(origin, size, digest, tuple(lines[3:-1]))


def _cosigned_message(body: str, timestamp: int) -> bytes:
    return f"cosignature/v1\ntime {timestamp}\n{body}".encode()


def cosign(body: str, key: SigningKey, timestamp: int) -> NoteSignature:
    """A witness's ``cosignature/v1`` over a checkpoint ``body`` at POSIX time ``timestamp``."""
    if key.kind != COSIGNATURE:
        raise CheckpointError(f"{key.name} is not a witness key (type 0x04)", what="key")
    if not 0 < timestamp < 2**63:
        raise CheckpointError("a cosignature timestamp is positive", what="cosignature")
    signature = key.sign(_cosigned_message(body, timestamp))
    return NoteSignature(key.name, key.verifier.key_id, timestamp.to_bytes(8, "big") + signature)


def verify_cosignature(note: Note, key: VerifierKey) -> int | None:
    """The timestamp of ``key``'s valid cosignature on ``note``, or ``None`` if it has none.

    A cosignature line that names the key and its id but does not verify raises.
    """
    for sig in note.signatures:
        if sig.name == key.name and sig.key_id == key.key_id and key.kind == COSIGNATURE:
            if len(sig.signature) != COSIGNATURE_BYTES:
                raise CheckpointError(
                    f"the cosignature by {key.name} is malformed", what="cosignature"
                )
            timestamp = int.from_bytes(sig.signature[:8], "big")
            if not key.verify(_cosigned_message(note.text, timestamp), sig.signature[8:]):
                raise CheckpointError(
                    f"the cosignature by {key.name} does not verify", what="cosignature"
                )
            return timestamp
    return None


@dataclass(frozen=True, slots=True)
class TlogProof:
    """A ``c2sp.org/tlog-proof@v1`` file: extra data, leaf index, inclusion path, checkpoint."""

    index: int
    path: tuple[bytes, ...]
    checkpoint: Note
    extra: bytes | None = None

    def to_bytes(self) -> bytes:
        """The file's bytes."""
        lines = [_PROOF_HEADER]
        if self.extra is not None:
            lines.append("extra " + base64.b64encode(self.extra).decode())
        lines.append(f"index {self.index}")
        lines.extend(base64.b64encode(h).decode() for h in self.path)
        return ("\n".join(lines) + "\n\n").encode() + self.checkpoint.to_bytes()

    @classmethod
    def parse(cls, raw: bytes) -> TlogProof:
        """Read a proof file."""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise CheckpointError("a tlog-proof file must be UTF-8", what="proof") from None
        head, sep, rest = text.partition("\n\n")
        lines = head.split("\n")
        if not sep or lines[0] != _PROOF_HEADER:
            raise CheckpointError(f"not a {_PROOF_HEADER} file", what="proof")
        pos, extra = 1, None
        try:
            if len(lines) > pos and lines[pos].startswith("extra "):
                extra = base64.b64decode(lines[pos][6:], validate=True)
                pos += 1
            number = lines[pos][6:] if len(lines) > pos and lines[pos].startswith("index ") else ""
            index = decimal(number)
            if index is None:
                raise CheckpointError("a tlog-proof needs an index line (a decimal)", what="proof")
            path = tuple(base64.b64decode(line, validate=True) for line in lines[pos + 1 :])
        except binascii.Error:
            raise CheckpointError("a tlog-proof line is not base64", what="proof") from None
        if any(len(h) != 32 for h in path):
            raise CheckpointError("an inclusion proof hash has 32 bytes", what="proof")
        return cls(index, path, Note.parse(rest), extra)

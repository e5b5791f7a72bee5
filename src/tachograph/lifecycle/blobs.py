"""Blobs: payload values kept outside the log, by content address, each with a time to live.

A value moved out is replaced, before hashing, by a reference (SPEC section 6)
``{"$blob": "sha256:<hex>", "size": <int>, "media_type": <str>}``; the chain commits to the
reference, so the blob can expire without breaking verification. The folder sits beside the
store (``<store file>.blobs/sha256/ab/cdef...``), one file per blob (mode 0600) and a
``.meta`` file beside it with its size, media type and expiry.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..errors import RecordingError
from ..record.canonical import canonical
from ..record.event import Event, now_ts
from ..record.files import make_private_dirs
from ..store.base import Store, row_event
from .times import shift

__all__ = [
    "BlobCheck",
    "BlobInfo",
    "BlobRule",
    "BlobScan",
    "BlobStore",
    "blob_ref",
    "check_blobs",
    "check_stored_blobs",
    "copy_blobs",
    "is_blob_ref",
    "malformed_refs_in",
    "ref_problem",
    "refs_in",
]

BLOB_KEY = "$blob"


_DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")
_REF_KEYS = frozenset({BLOB_KEY, "size", "media_type"})


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_size(value: Any) -> bool:
    """A byte count: an integer >= 0 (not a boolean). A JSON number is its double (SPEC
    section 2), so ``3.0``, which hashes as ``3``, is the size 3 too."""
    if type(value) is int:
        return value >= 0
    return type(value) is float and value.is_integer() and value >= 0


def ref_problem(value: dict[str, Any]) -> str | None:
    """Why an object holding the key ``$blob`` is not a reference of SPEC section 6
    (``None``: it is one): exactly the keys ``$blob``, ``size`` and ``media_type``; the
    digest ``sha256:`` and 64 lower-case hex digits; the size an integer >= 0; the media
    type a string."""
    if value.keys() != _REF_KEYS:
        keys = ", ".join(sorted(map(str, value)))
        return (
            f"not a blob reference: its keys are {keys} "
            "(a reference has $blob, size and media_type)"
        )
    digest = value[BLOB_KEY]
    if not isinstance(digest, str) or _DIGEST.match(digest) is None:
        return (
            f"not a blob reference: $blob is {_shown(digest)}, "
            "not sha256: and 64 lower-case hex digits"
        )
    if not _is_size(value["size"]):
        return f"not a blob reference: size is {_shown(value['size'])}, not an integer >= 0"
    if not isinstance(value["media_type"], str):
        return f"not a blob reference: media_type is {_shown(value['media_type'])}, not a string"
    return None


def is_blob_ref(value: Any) -> bool:
    """True for a reference object of SPEC section 6 (see :func:`ref_problem`)."""
    return isinstance(value, dict) and BLOB_KEY in value and ref_problem(value) is None


def blob_ref(data: bytes, media_type: str) -> dict[str, Any]:
    """The reference to ``data``."""
    return {
        BLOB_KEY: "sha256:" + hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "media_type": media_type,
    }


def _walk(value: Any, path: str) -> Iterator[tuple[str, dict[str, Any], str | None]]:
    """``(path, object, problem)`` for every object holding the key ``$blob``: a reference
    (problem ``None``), or a plain value shaped like one, whose values are walked too."""
    if isinstance(value, dict):
        if BLOB_KEY in value:
            problem = ref_problem(value)
            yield path, value, problem
            if problem is None:
                return
        for key, item in value.items():
            yield from _walk(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]")


def refs_in(value: Any, path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    """``(path, reference)`` for every blob reference inside a payload."""
    for where, ref, problem in _walk(value, path):
        if problem is None:
            yield where, ref


def malformed_refs_in(value: Any, path: str = "$") -> Iterator[tuple[str, str]]:
    """``(path, why)`` for every object inside a payload that holds the key ``$blob`` but is
    not a reference of SPEC section 6 (:func:`ref_problem`): a plain value, never checked
    against a blob."""
    for where, _value, problem in _walk(value, path):
        if problem is not None:
            yield where, problem


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """A stored blob's metadata."""

    digest: str
    size: int
    media_type: str
    created: str
    expires: str | None
    """Record-format UTC time after which retention deletes it; ``None``: kept."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "digest": self.digest,
            "size": self.size,
            "media_type": self.media_type,
            "created": self.created,
            "expires": self.expires,
        }


def _write_private(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` atomically, readable by the owner only."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


class BlobStore:
    """A content-addressed folder of blobs with their times to live."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @classmethod
    def beside(cls, store: Any) -> BlobStore:
        """The blob folder of a store (``<file>.blobs``) or of a store file path."""
        base = getattr(store, "path", store)
        return cls(f"{base}.blobs")

    def path_for(self, digest: str) -> Path:
        """Where the blob with ``digest`` (``sha256:<hex>``) lives."""
        hexdigest = digest.removeprefix("sha256:")
        if len(hexdigest) != 64 or any(c not in "0123456789abcdef" for c in hexdigest):
            raise RecordingError(f"not a blob digest: {digest!r}")
        return self.root / "sha256" / hexdigest[:2] / hexdigest[2:]

    def put(
        self,
        data: bytes,
        *,
        media_type: str = "application/octet-stream",
        ttl: float | None = None,
        now: str | None = None,
    ) -> dict[str, Any]:
        """Store ``data`` (kept ``ttl`` seconds, or until deleted when ``None``); return its
        reference. Storing the same bytes again keeps the later of the two expiries."""
        ref = blob_ref(data, media_type)
        target = self.path_for(ref[BLOB_KEY])
        make_private_dirs(target.parent)
        created = now or now_ts()
        expires = None if ttl is None else shift(created, ttl)
        old = self.info(ref[BLOB_KEY])
        if old is not None:
            created = old.created
            if old.expires is None or (expires is not None and old.expires > expires):
                expires = old.expires
        if not target.exists():
            _write_private(target, data)
        meta: dict[str, Any] = {
            "size": len(data),
            "media_type": media_type,
            "created": created,
            "expires": expires,
        }
        _write_private(target.with_name(target.name + ".meta"), orjson.dumps(meta))
        return ref

    def put_value(
        self, value: Any, *, ttl: float | None = None, now: str | None = None
    ) -> dict[str, Any]:
        """Store a payload value: a string as UTF-8 text, anything else as canonical JSON."""
        if isinstance(value, str):
            return self.put(
                value.encode("utf-8"), media_type="text/plain; charset=utf-8", ttl=ttl, now=now
            )
        return self.put(canonical(value), media_type="application/json", ttl=ttl, now=now)

    def get(self, digest: str) -> bytes | None:
        """The blob's bytes, or ``None`` if it is not (or no longer) here."""
        try:
            return self.path_for(digest).read_bytes()
        except FileNotFoundError:
            return None

    def info(self, digest: str) -> BlobInfo | None:
        """The blob's metadata, or ``None``."""
        try:
            meta = orjson.loads(self.path_for(digest).with_suffix(".meta").read_bytes())
        except FileNotFoundError:
            return None
        return BlobInfo(digest, meta["size"], meta["media_type"], meta["created"], meta["expires"])

    def delete(self, digest: str) -> bool:
        """Remove a blob and its metadata; ``False`` if it was not here."""
        target = self.path_for(digest)
        existed = target.exists()
        target.unlink(missing_ok=True)
        target.with_suffix(".meta").unlink(missing_ok=True)
        return existed

    def __iter__(self) -> Iterator[BlobInfo]:
        folder = self.root / "sha256"
        if not folder.is_dir():
            return
        for meta in sorted(folder.glob("??/*.meta")):
            info = self.info("sha256:" + meta.parent.name + meta.stem)
            if info is not None:
                yield info

    def expired(self, now: str | None = None) -> list[BlobInfo]:
        """Blobs whose time to live has passed at ``now`` (default: now)."""
        moment = now or now_ts()
        return [b for b in self if b.expires is not None and b.expires <= moment]


_Path = tuple[str, ...]


def _parse(path: str) -> _Path:
    text = path[2:] if path.startswith("$.") else path
    parts = tuple(p for p in text.split(".") if p)
    if not parts:
        raise RecordingError(f"blob path {path!r} names no key")
    return parts


def _replace(value: Any, path: _Path, swap: Any) -> Any:
    if not path or not isinstance(value, dict) or path[0] not in value:
        return value
    key, rest = path[0], path[1:]
    out = dict(value)
    out[key] = swap(value[key]) if not rest else _replace(value[key], rest, swap)
    return out


class BlobRule:
    """A recording processor that moves values out of the log into a :class:`BlobStore`.

    A value moves when it sits at one of ``paths`` (``$.response``, ``result.document``), or,
    with ``threshold``, when any top-level payload value's canonical form is at least that many
    bytes. ``types`` limits the rule to event types (``fnmatch`` patterns); ``ttl`` is the
    blobs' time to live in seconds (``None``: until deleted). Pass it as
    ``record(..., processors=[BlobRule(...)])``: it runs before hashing, so the chain commits
    to the reference.
    """

    def __init__(
        self,
        blobs: BlobStore,
        *,
        paths: Sequence[str] = (),
        threshold: int | None = None,
        types: Sequence[str] = ("*",),
        ttl: float | None = None,
    ) -> None:
        if not paths and threshold is None:
            raise RecordingError("a blob rule needs paths, a size threshold, or both")
        self.blobs = blobs
        self.paths = tuple(_parse(p) for p in paths)
        self.threshold = threshold
        self.types = tuple(types)
        self.ttl = ttl

    def _offload(self, value: Any) -> Any:
        if value is None or is_blob_ref(value):
            return value
        return self.blobs.put_value(value, ttl=self.ttl)

    def __call__(self, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
        if not any(fnmatch.fnmatchcase(type_, t) for t in self.types):
            return payload
        for path in self.paths:
            payload = _replace(payload, path, self._offload)
        if self.threshold is not None:
            payload = {
                key: (
                    self._offload(value)
                    if not is_blob_ref(value)
                    and value is not None
                    and len(canonical(value)) >= self.threshold
                    else value
                )
                for key, value in payload.items()
            }
        return payload


@dataclass(frozen=True, slots=True)
class BlobCheck:
    """Blobs referenced by a run: verified, expired (missing: not a failure), or failing;
    and the values shaped like a reference that are not one (malformed: not a failure)."""

    run_id: str | None
    verified: tuple[str, ...] = ()
    expired: tuple[tuple[int, str, str], ...] = ()
    """``(seq, path, digest)`` of references whose blob is gone."""
    failures: tuple[tuple[int, str, str], ...] = field(default=())
    """``(seq, path, message)`` of blobs whose bytes do not match their reference (or that
    are there but cannot be read)."""
    malformed: tuple[tuple[int, str, str], ...] = field(default=())
    """``(seq, path, message)`` of objects holding the key ``$blob`` that are not a
    reference of SPEC section 6 (:func:`ref_problem`): plain values, checked against no
    blob. The chain commits to them as recorded, so they are reported, not failed."""

    @property
    def ok(self) -> bool:
        """True unless a present blob mismatches its reference (SPEC section 6, check 5)."""
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "run_id": self.run_id,
            "ok": self.ok,
            "verified": list(self.verified),
            "expired": [{"seq": s, "path": p, "digest": d} for s, p, d in self.expired],
            "failures": [{"seq": s, "path": p, "message": m} for s, p, m in self.failures],
            "malformed": [{"seq": s, "path": p, "message": m} for s, p, m in self.malformed],
        }

    def failed_seqs(self) -> frozenset[int]:
        """The seqs of the events whose blobs fail."""
        return frozenset(s for s, _p, _m in self.failures)

    def headline(self, events: int) -> str:
        """A run's verification line when its chain holds (of ``events`` events) but a blob
        fails: as a chain failure is named, the first failing seq and check 5."""
        seq, path, message = self.failures[0]
        text = (
            f"{self.run_id or '(unnamed run)'}: FAILED at seq {seq}, check 5 (payload digest): "
            f"{path}: {message}"
        )
        if len(self.failures) > 1:
            text += f" [{len(self.failures) - 1} more blob failure(s)]"
        return text + f"; chain intact, {events} events"

    def render(self) -> str:
        """One line, then one per failure and one per malformed reference."""
        head = f"blobs of {self.run_id}: {len(self.verified)} verified, {len(self.expired)} expired"
        if self.failures:
            head += f", {len(self.failures)} FAILED"
        if self.malformed:
            head += f", {len(self.malformed)} malformed (not references: not checked)"
        return "\n".join(
            [head]
            + [f"  seq {s} {p}: check 5 (payload digest): {m}" for s, p, m in self.failures]
            + [f"  seq {s} {p}: {m}" for s, p, m in self.malformed]
        )

    @property
    def empty(self) -> bool:
        """True when the run holds no blob reference, nor anything shaped like one."""
        return not (self.verified or self.expired or self.failures or self.malformed)


_MAY_NAME_A_BLOB = (BLOB_KEY.encode(), b"\\u")
"""Stored bytes that may name a blob hold its key as written, or a ``\\u`` escape: JSON
may spell any letter of a key that way (orjson writes none but for control characters, so
rows with one are rare), and verification hashes the decoded value, not the bytes."""


_MARK, _ESCAPE = _MAY_NAME_A_BLOB
_MARK_FIRST, _ESCAPE_FIRST = _MARK[:1], _ESCAPE[:1]


def _may_name_a_blob(data: bytes) -> bool:
    """Whether ``data`` holds a marker of :data:`_MAY_NAME_A_BLOB`. Each marker's first byte
    is looked for first (``find`` of one byte is a ``memchr``): a page of 1 KB payloads is
    scanned about 7 times faster than by looking for the markers themselves, as most hold
    neither, nor a ``$``; JSON text with escapes holds a backslash, and is looked at again."""
    find = data.find
    return (find(_MARK_FIRST) != -1 and _MARK in data) or (
        find(_ESCAPE_FIRST) != -1 and _ESCAPE in data
    )


def check_stored_blobs(
    store: Store, run_id: str, blobs: BlobStore, *, tenant: str | None = None
) -> BlobCheck:
    """:func:`check_blobs` of a stored run, reading only the rows whose payload bytes may
    name a blob (:meth:`~tachograph.store.Store.rows_containing`). Through a purpose view
    (:class:`~tachograph.lifecycle.purpose.ScopedStore`) it sees the rows that view reads:
    a payload the purpose may read only in part is withheld whole there."""
    rows = store.rows_containing(run_id, _MAY_NAME_A_BLOB, tenant=tenant)
    return check_blobs((row_event(r, decode=False) for r in rows), blobs, run_id=run_id)


def check_blobs(
    events: Iterable[Event], blobs: BlobStore, *, run_id: str | None = None
) -> BlobCheck:
    """Check the blobs a run references: a present blob's digest and size must match (SPEC
    section 6); a missing one is reported as expired. An object holding the key ``$blob``
    that is not a reference (:func:`ref_problem`) is reported as malformed, not checked: the
    chain commits to it as recorded, and it names no blob. Events read with ``decode=False``
    are decoded only when their payload bytes name a blob. ``run_id`` names the run when no
    event does (none given)."""
    found = _Found(blobs)
    for event in events:
        run_id = event.run_id
        payload = event.payload
        if payload is None and event.payload_bytes is not None:
            # read undecoded (a whole store streams): decode only what names a blob
            if not _may_name_a_blob(event.payload_bytes):
                continue
            payload = orjson.loads(event.payload_bytes)
        found.check(event.seq, payload)
    return BlobCheck(run_id, *found.result())


class _Found:
    """The blobs a run references, checked one payload at a time."""

    __slots__ = ("blobs", "expired", "failures", "malformed", "verified")

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self.verified: list[str] = []
        self.expired: list[tuple[int, str, str]] = []
        self.failures: list[tuple[int, str, str]] = []
        self.malformed: list[tuple[int, str, str]] = []

    def check(self, seq: int, payload: Any) -> None:
        for path, ref, problem in _walk(payload, "$"):
            if problem is not None:
                self.malformed.append((seq, path, problem))
                continue
            try:
                data = self.blobs.get(ref[BLOB_KEY])
            except OSError as exc:  # there, but not readable: not verified, and not expired
                self.failures.append(
                    (seq, path, f"blob {ref[BLOB_KEY]} cannot be read: {exc.strerror or exc}")
                )
                continue
            if data is None:
                self.expired.append((seq, path, ref[BLOB_KEY]))
                continue
            actual = "sha256:" + hashlib.sha256(data).hexdigest()
            if actual != ref[BLOB_KEY] or len(data) != ref["size"]:
                self.failures.append(
                    (
                        seq,
                        path,
                        f"blob {ref[BLOB_KEY]} ({ref['size']} bytes) holds {len(data)} bytes "
                        f"hashing to {actual}",
                    )
                )
            else:
                self.verified.append(ref[BLOB_KEY])

    def result(self) -> tuple[tuple[str, ...], tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]:
        return (
            tuple(self.verified),
            tuple(self.expired),
            tuple(self.failures),
            tuple(self.malformed),
        )

    # a part of a BlobScan: fed the pages of rows a verification reads
    def feed(self, rows: Sequence[Any]) -> None:
        check, loads, may_name = self.check, orjson.loads, _may_name_a_blob
        for row in rows:
            body = row[15]  # StoredRow.payload_bytes, as rows_containing reads it
            if type(body) is bytes and may_name(body):
                check(row[2], loads(body))


@dataclass(frozen=True, slots=True)
class BlobScan:
    """:func:`check_stored_blobs` as a scan (:mod:`tachograph.record.scan`): handed to
    ``verify_stored`` or ``verify_all`` (``scans=[BlobScan.beside(store)]``), it checks the
    blobs of each run in the same read as its verification, in the verification's workers
    where it has some; the report's ``scanned["blobs"]`` is the run's :class:`BlobCheck`
    (``None`` if the check could not read the whole run, as :func:`check_stored_blobs`
    would have raised). The rows checked are those :func:`check_stored_blobs` reads: the
    payload stored as bytes holding a marker of :data:`_MAY_NAME_A_BLOB`."""

    root: str
    """The blob folder (:attr:`BlobStore.root`)."""

    @property
    def name(self) -> str:
        return "blobs"

    @classmethod
    def beside(cls, store: Any) -> BlobScan:
        """The scan against the blob folder of ``store`` (``<file>.blobs``), named by its
        absolute path (a worker process reads it too)."""
        return cls(str(BlobStore.beside(store).root.absolute()))

    def begin(self) -> _Found:
        return _Found(BlobStore(self.root))

    def join(self, run_id: str | None, parts: Sequence[Any]) -> BlobCheck:
        verified: list[str] = []
        expired: list[tuple[int, str, str]] = []
        failures: list[tuple[int, str, str]] = []
        malformed: list[tuple[int, str, str]] = []
        for part_verified, part_expired, part_failures, part_malformed in parts:
            verified.extend(part_verified)
            expired.extend(part_expired)
            failures.extend(part_failures)
            malformed.extend(part_malformed)
        return BlobCheck(run_id, tuple(verified), tuple(expired), tuple(failures), tuple(malformed))


def copy_blobs(events: Iterable[Event], source: BlobStore, dest: BlobStore) -> int:
    """Copy the present blobs the events reference from ``source`` to ``dest``; how many."""
    copied = 0
    for event in events:
        for _path, ref in refs_in(event.payload):
            data = source.get(ref[BLOB_KEY])
            info = source.info(ref[BLOB_KEY])
            if data is None or dest.get(ref[BLOB_KEY]) is not None:
                continue
            target = dest.path_for(ref[BLOB_KEY])
            make_private_dirs(target.parent)
            _write_private(target, data)
            meta = info.to_dict() if info else {"size": len(data), "media_type": ref["media_type"]}
            meta.pop("digest", None)
            meta.setdefault("created", now_ts())
            meta.setdefault("expires", None)
            _write_private(target.with_name(target.name + ".meta"), orjson.dumps(meta))
            copied += 1
    return copied

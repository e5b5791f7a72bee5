"""Witnesses: keep the latest checkpoint of each log, cosign only consistent growth.

:class:`Witness` is the logic, with its state in a directory (put it on another mount, or on
another machine behind ``tacho witness``): per log origin, the latest checkpoint it accepted
(with its own cosignature) and the history of ``size root`` it accepted. It follows the
``add-checkpoint`` rules of c2sp.org/tlog-witness: a trusted log signature (403), ``old`` not
above the new size (400), ``old`` equal to the size it holds (409, with that size), an empty
proof from 0 and a valid consistency proof otherwise (422). A checkpoint of a size it saw
with another root is equivocation: refused, and both notes are kept as the proof of it.

:func:`serve` puts a witness behind HTTP (``POST /add-checkpoint``, ``GET /checkpoint``);
:class:`HTTPWitness` is the client. Both the directory and the HTTP client have the same
``add_checkpoint(old, proof, note)`` and ``latest(origin)``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import hashlib
import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from ..errors import SealingError
from ..record.checkpoint import (
    Checkpoint,
    Note,
    NoteSignature,
    SigningKey,
    VerifierKey,
    cosign,
    decimal,
)
from ..record.merkle import EMPTY_ROOT, ProofError, verify_consistency

__all__ = ["HTTPWitness", "Witness", "WitnessConflict", "WitnessRefused", "serve", "witness_for"]


class WitnessRefused(SealingError):
    """The witness refused a checkpoint; ``status`` is the tlog-witness HTTP status."""

    status: int = 422


class WitnessConflict(WitnessRefused):
    """``old`` is not the size the witness holds; ``size`` is the size it holds (409)."""

    size: int = 0


def _origin_file(origin: str) -> str:
    # Origins hold '/', and a file name must not; the digest keeps names unique.
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in origin)
    return f"{safe[:80]}-{hashlib.sha256(origin.encode()).hexdigest()[:12]}"


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Witness:
    """A witness whose state lives in ``directory``.

    ``log_keys`` are the log keys it trusts (a checkpoint must carry a valid signature by one
    of them); ``key`` is its own cosigning key (type 0x04). Without a key it still keeps the
    latest checkpoint and refuses forks, but adds no cosignature.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        log_keys: Sequence[VerifierKey],
        key: SigningKey | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log_keys = list(log_keys)
        self.key = key
        self._thread_lock = threading.Lock()

    def __str__(self) -> str:
        return f"witness at {self.directory}"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # Checking the old size and keeping the new checkpoint are one atomic step, across
        # threads and processes (tlog-witness requires it).
        with self._thread_lock, open(self.directory / ".lock", "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def latest(self, origin: str) -> Note | None:
        """The latest checkpoint accepted for ``origin`` (with this witness's cosignature)."""
        path = self.directory / (_origin_file(origin) + ".checkpoint")
        try:
            return Note.parse(path.read_bytes())
        except FileNotFoundError:
            return None

    def held(self) -> list[Note]:
        """The latest checkpoint of every log this witness holds, in no set order: what a
        verifier holds a store to when the store no longer names a tenant (its runs, seals
        and checkpoints all removed)."""
        notes: list[Note] = []
        for path in sorted(self.directory.glob("*.checkpoint")):
            with contextlib.suppress(OSError, SealingError):
                notes.append(Note.parse(path.read_bytes()))
        return notes

    def _history(self, origin: str) -> dict[int, str]:
        path = self.directory / (_origin_file(origin) + ".history")
        seen: dict[int, str] = {}
        with contextlib.suppress(FileNotFoundError):
            for line in path.read_text().splitlines():
                size, _, root = line.partition(" ")
                seen[int(size)] = root
        return seen

    def _evidence(self, origin: str, kind: str, *notes: Note) -> Path:
        path = self.directory / f"{_origin_file(origin)}.{kind}-{time.time_ns()}.txt"
        path.write_bytes(b"\n".join(n.to_bytes() for n in notes))
        return path

    def add_checkpoint(self, old: int, proof: Sequence[bytes], note: Note) -> list[NoteSignature]:
        """Accept ``note`` if it grows the held checkpoint of size ``old`` consistently by
        ``proof``; return the cosignature(s) (none without a key). Raise
        :class:`WitnessRefused` / :class:`WitnessConflict` otherwise."""
        try:
            cp = Checkpoint.parse(note.text)
            trusted = note.verified_by(self.log_keys)
        except SealingError as exc:
            raise WitnessRefused(f"refused: {exc}", status=403, what="signature") from exc
        if not trusted:
            raise WitnessRefused(
                f"refused: checkpoint for {cp.origin} carries no signature by a trusted log key",
                status=403,
                what="signature",
            )
        if old > cp.size:
            raise WitnessRefused(
                f"old size {old} is above the checkpoint size {cp.size}", status=400, what="proof"
            )
        with self._locked():
            held = self.latest(cp.origin)
            held_cp = Checkpoint.parse(held.text) if held is not None else None
            held_size = held_cp.size if held_cp is not None else 0
            root64 = base64.b64encode(cp.root).decode()
            seen = self._history(cp.origin).get(cp.size)
            if seen is not None and seen != root64:
                kept = self._evidence(cp.origin, "equivocation", note, *([held] if held else []))
                raise WitnessRefused(
                    f"equivocation: the log signed two checkpoints of size {cp.size} with "
                    f"different roots (kept in {kept.name})",
                    status=422,
                    what="equivocation",
                )
            if old != held_size:
                raise WitnessConflict(
                    f"the witness holds size {held_size}, not {old}",
                    status=409,
                    size=held_size,
                    what="consistency",
                )
            if cp.size == 0 and cp.root != EMPTY_ROOT:
                raise WitnessRefused("a tree of size 0 has the empty root", what="proof")
            if old == 0:
                if proof:
                    raise WitnessRefused("a proof from size 0 must be empty", what="proof")
            else:
                assert held_cp is not None
                try:
                    verify_consistency(old, cp.size, proof, held_cp.root, cp.root)
                except ProofError as exc:
                    kept = self._evidence(cp.origin, "fork", note, *([held] if held else []))
                    raise WitnessRefused(
                        f"refused a fork: checkpoint {cp.size} is not consistent with checkpoint "
                        f"{old} that the witness holds ({exc}; kept in {kept.name})",
                        what="consistency",
                    ) from exc
            sigs = [cosign(note.text, self.key, int(time.time()))] if self.key else []
            stored = Note(note.text, tuple(s for s in note.signatures if _is_log(s, trusted)))
            _write_atomic(
                self.directory / (_origin_file(cp.origin) + ".checkpoint"),
                stored.with_signatures(tuple(sigs)).to_bytes(),
            )
            with open(self.directory / (_origin_file(cp.origin) + ".history"), "a") as f:
                f.write(f"{cp.size} {root64}\n")
                f.flush()
                os.fsync(f.fileno())
            return sigs


def _is_log(sig: NoteSignature, trusted: list[VerifierKey]) -> bool:
    return any(sig.name == k.name and sig.key_id == k.key_id for k in trusted)


class HTTPWitness:
    """The client of a witness served by :func:`serve` (``tacho witness``) at ``url``."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def __str__(self) -> str:
        return f"witness {self.url}"

    def add_checkpoint(self, old: int, proof: Sequence[bytes], note: Note) -> list[NoteSignature]:
        """POST ``add-checkpoint``; the returned cosignatures."""
        lines = [f"old {old}", *(base64.b64encode(h).decode() for h in proof)]
        body = ("\n".join(lines) + "\n\n").encode() + note.to_bytes()
        request = urllib.request.Request(self.url + "/add-checkpoint", data=body, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace").strip()
            held = decimal(detail) if exc.code == 409 else None
            if held is not None:
                raise WitnessConflict(
                    f"the witness holds size {held}", status=409, size=held
                ) from None
            raise WitnessRefused(
                f"{self.url} refused the checkpoint ({exc.code}): {detail}",
                status=exc.code,
                what="equivocation" if "equivocation" in detail else "consistency",
            ) from None
        except OSError as exc:
            raise SealingError(
                f"cannot reach the witness {self.url}: {exc}", what="witness"
            ) from exc
        if not text:
            return []
        return list(Note.parse(note.text + "\n" + text).signatures)

    def held(self) -> list[Note]:
        """The latest checkpoint of every log the witness holds (``GET /checkpoints``, which
        ``tacho witness`` serves); ``[]`` from a witness that does not list them."""
        try:
            with urllib.request.urlopen(f"{self.url}/checkpoints", timeout=self.timeout) as r:
                listed = json.loads(r.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise SealingError(f"{self.url}: {exc}", what="witness") from None
        except OSError as exc:
            raise SealingError(
                f"cannot reach the witness {self.url}: {exc}", what="witness"
            ) from exc
        except ValueError as exc:
            raise SealingError(f"{self.url}/checkpoints: {exc}", what="witness") from None
        notes: list[Note] = []
        for text in listed.get("checkpoints", []) if isinstance(listed, dict) else []:
            if isinstance(text, str):
                notes.append(Note.parse(text.encode()))
        return notes

    def latest(self, origin: str) -> Note | None:
        """The witness's latest checkpoint for ``origin``, or ``None``."""
        query = urllib.parse.urlencode({"origin": origin})
        try:
            with urllib.request.urlopen(
                f"{self.url}/checkpoint?{query}", timeout=self.timeout
            ) as response:
                return Note.parse(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise SealingError(f"{self.url}: {exc}", what="witness") from None
        except OSError as exc:
            raise SealingError(
                f"cannot reach the witness {self.url}: {exc}", what="witness"
            ) from exc


def witness_for(
    target: str, *, log_keys: Sequence[VerifierKey] = (), create: bool = True
) -> Witness | HTTPWitness:
    """An HTTP witness for an ``http://`` URL, else a directory witness at that path.

    A directory that does not exist is made a new, empty witness; with ``create=False``
    (to read what a witness holds) it raises :class:`SealingError` instead, as it does for a
    target that is an address (``HOST:PORT``, another scheme) rather than a path.
    """
    if target.startswith(("http://", "https://")):
        return HTTPWitness(target)
    first = target.split("/", 1)[0]
    if ":" in first and len(first.split(":", 1)[0]) > 1 and not Path(target).exists():
        # "127.0.0.1:8080", "localhost:8080", "htp:/w": an address, not a folder to make
        raise SealingError(
            f"witness {target!r} is neither an http:// or https:// URL nor a directory; "
            "for a witness over HTTP give its URL, e.g. http://127.0.0.1:8080",
            what="witness",
        )
    if not create and not Path(target).is_dir():
        raise SealingError(
            f"no witness directory at {target}: it does not exist or is not a directory",
            what="witness",
        )
    return Witness(target, log_keys=log_keys)


def _parse_request(body: bytes) -> tuple[int, list[bytes], Note]:
    text = body.decode("utf-8")
    head, sep, rest = text.partition("\n\n")
    lines = head.split("\n")
    if not sep or not lines[0].startswith("old "):
        raise WitnessRefused("the body starts with an old size line", status=400)
    old = decimal(lines[0][4:])
    if old is None or len(lines) > 64:
        raise WitnessRefused("bad old size line or too many proof lines", status=400)
    try:
        proof = [base64.b64decode(line, validate=True) for line in lines[1:]]
    except binascii.Error:
        raise WitnessRefused("a proof line is not base64", status=400) from None
    return old, proof, Note.parse(rest)


def serve(witness: Witness, *, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """An HTTP server for ``witness`` (not yet serving: call ``serve_forever``)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return  # quiet: the caller decides what to print

        def _reply(self, status: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            if self.path != "/add-checkpoint":
                self._reply(404, b"not found\n")
                return
            length = decimal(self.headers.get("Content-Length") or "0")
            if length is None:
                self._reply(400, b"Content-Length is not a decimal\n")
                return
            try:
                old, proof, note = _parse_request(self.rfile.read(min(length, 1 << 20)))
                sigs = witness.add_checkpoint(old, proof, note)
            except WitnessConflict as exc:
                self._reply(409, f"{exc.size}\n".encode(), "text/x.tlog.size")
                return
            except WitnessRefused as exc:
                self._reply(exc.status, (str(exc) + "\n").encode())
                return
            except (SealingError, UnicodeDecodeError) as exc:
                self._reply(400, (str(exc) + "\n").encode())
                return
            self._reply(200, "".join(s.line() for s in sigs).encode())

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/checkpoint":
                origin = urllib.parse.parse_qs(url.query).get("origin", [""])[0]
                held = witness.latest(origin)
                if held is None:
                    self._reply(404, b"no checkpoint for that origin\n")
                else:
                    self._reply(200, held.to_bytes())
            elif url.path == "/checkpoints":
                texts = [note.to_bytes().decode() for note in witness.held()]
                body = json.dumps({"checkpoints": texts}).encode()
                self._reply(200, body, "application/json")
            elif url.path == "/key" and witness.key is not None:
                self._reply(200, (str(witness.key.verifier) + "\n").encode())
            else:
                self._reply(404, b"not found\n")

    return ThreadingHTTPServer((host, port), Handler)
